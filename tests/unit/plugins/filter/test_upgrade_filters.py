import datetime

from ansible_collections.kubenodes.image_upgrade.plugins.filter.upgrade import FilterModule, phase_entries, progress_line
# The executor's journal record of a pass (no longer a filter since the task-chain engine went).
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.progress import journal_record

NOW = datetime.datetime(2026, 11, 30, 10, 5, 0, tzinfo=datetime.timezone.utc)
FACTS = {
    "progress": {"done": 4, "total": 9, "percent": 44.4},
    "donors": [{"name": "w-1", "heir": "w-9", "group": "projects/p/zones/z/instanceGroupManagers/workers", "role": "worker",
                "phase": "draining", "phase_since": "2026-11-30T10:04:20Z", "heir_ready": True},
               {"name": "w-2", "heir": "w-8", "group": "g", "role": "worker", "phase": "paired",
                "phase_since": "2026-11-30T10:00:00Z", "heir_ready": False}],
    "joining": [{"provider_id": "x"}],
    "plan": {"create_blocked": [{"group": "projects/p/zones/z/instanceGroupManagers/workers", "reason": "surge budget used"}]},
    "eta": {"seconds": 330, "finish": "2026-11-30T10:10:30Z"},
    "done": False,
}


def test_progress_line_names_counts_pairs_waits_and_eta():
    line = progress_line(FACTS, 3, now=NOW)
    assert line.startswith("pass 3: 4/9 nodes on the image (44.4%)")
    assert "w-1 draining 40s (heir w-9 Ready)" in line
    assert "w-2 paired 5m00s (heir w-8 not Ready)" in line
    assert "1 joining" in line and "workers: surge budget used" in line
    assert "ETA 5m30s" in line and "done" not in line.rsplit("; ", maxsplit=1)[-1]


def test_progress_line_of_a_finished_upgrade():
    line = progress_line({"progress": {"done": 9, "total": 9, "percent": 100.0}, "done": True}, 7, now=NOW)
    assert line == "pass 7: 9/9 nodes on the image (100.0%); done"


def test_journal_record_from_facts_and_drain_results():
    drains = [
        {"node": "w-1", "drained": False, "reason": "pdb_blocked", "drain_started": "2026-11-30T10:04:20Z",
         "evicted": [{"namespace": "web", "pod": "a"}]},
        {"node": "w-3", "drained": True, "reason": "drained", "drain_started": "2026-11-30T10:01:00Z", "evicted": []},
        {"item": {"name": "w-4"}, "skipped": True},
    ]
    facts = dict(FACTS, plan=dict(FACTS["plan"], delete_instances=[
        {"provider_id": "gce://p/z/w-7", "group": "g", "reason": "no Node joined within 30s"}]))
    record = journal_record(facts, 3, drains, ["w-0"], now=NOW, run="2026-11-30T10:00:00Z")
    nodes = record["nodes"]
    assert record["passes"] == 3
    assert record["attempts"] == {"2026-11-30T10:00:00Z": {"started": "2026-11-30T10:00:00Z", "passes": 3}}
    assert nodes["w-1"]["phases"] == {"draining": "2026-11-30T10:04:20Z"}
    assert nodes["w-1"]["evicted"] == ["web/a"] and nodes["w-1"]["waits"] == {"pdb_seconds": 40}
    assert nodes["w-1"]["heir"] == "w-9" and nodes["w-1"]["role"] == "worker"
    assert nodes["w-3"]["phases"] == {"draining": "2026-11-30T10:01:00Z", "drained": "2026-11-30T10:05:00Z"}
    assert "w-4" not in nodes
    assert nodes["w-0"]["phases"] == {"deleted": "2026-11-30T10:05:00Z"}
    assert nodes["w-2"]["phases"] == {"paired": "2026-11-30T10:00:00Z"}
    # The drain of w-1 goes on next pass: one retry, by an ID unique to this run and pass; w-3 finished.
    assert nodes["w-1"]["retries"] == {"drain": ["2026-11-30T10:00:00Z#3"]}
    assert "retries" not in nodes["w-3"]
    assert record["instances_removed"] == {"gce://p/z/w-7": {"group": "g", "reason": "no Node joined within 30s"}}


def test_phase_entries():
    assert phase_entries(["a", "b"], "drained") == [{"name": "a", "phase": "drained"}, {"name": "b", "phase": "drained"}]
    assert phase_entries([], "drained") == []


def test_journal_record_has_the_heirs_creation_join_and_ready_as_phases():
    facts = dict(FACTS, donors=[dict(name="w-5", heir="w-6", group="g", role="worker", phase="paired",
                                     phase_since="2026-11-30T10:02:00Z", heir_created="2026-11-30T10:00:30Z",
                                     heir_joined="2026-11-30T10:01:50Z", heir_ready_since=None)])
    record = journal_record(facts, 2, [], [], now=NOW)
    assert record["nodes"]["w-5"]["phases"] == {"creating": "2026-11-30T10:00:30Z", "joined": "2026-11-30T10:01:50Z",
                                                "paired": "2026-11-30T10:02:00Z"}


def test_journal_record_counts_a_donor_found_gone_as_replaced():
    facts = dict(FACTS, donors=[], donors_gone=[dict(name="w-7", heir="w-8", group="g", role="worker",
                                                     paired_at="2026-11-30T09:00:00Z")])
    record = journal_record(facts, 4, [], [], now=NOW)
    assert record["nodes"]["w-7"] == {"group": "g", "heir": "w-8", "role": "worker",
                                      "phases": {"paired": "2026-11-30T09:00:00Z", "deleted": "2026-11-30T10:05:00Z"}}


def test_journal_record_names_the_passes_warnings_as_events():
    facts = dict(FACTS, problems=[{"node": "w-3", "message": "node w-3: its phase-history is out of order"}])
    drains = [{"node": "w-1", "drained": False, "reason": "pdb_blocked", "blocked": [{"namespace": "web", "pdb": "p"}]}]
    record = journal_record(facts, 2, drains, [], now=NOW)
    assert [(e["node"], e["reason"]) for e in record["events"]] == [("w-3", "UpgradeProblem"), ("w-1", "UpgradeDrainBlocked")]
    assert "events" not in journal_record(FACTS, 2, [], [], now=NOW)


def test_controller_path_is_absolute_against_the_controller_working_directory(tmp_path, monkeypatch):
    from ansible_collections.kubenodes.image_upgrade.plugins.filter.paths import controller_path
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", "/home/upgrader")
    assert controller_path("./image-upgrade-report") == str(tmp_path / "image-upgrade-report")
    assert controller_path("~/reports") == "/home/upgrader/reports"
    assert controller_path("/srv/reports/") == "/srv/reports"


def test_the_filters_are_the_progress_line_and_the_phase_entries():
    assert sorted(FilterModule().filters()) == ["phase_entries", "progress_line"]
