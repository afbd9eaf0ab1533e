"""Which Kubernetes Events an upgrade writes (module_utils/events.py, pure part)."""

import re

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import events

BEFORE = {"nodes": {"w-1": {"group": "g", "heir": "w-9", "phases": {"paired": "2026-12-02T10:00:00Z"}}}}
AFTER = {"nodes": {
    "w-1": {"group": "g", "heir": "w-9", "evicted": ["web/a", "web/b"],
            "phases": {"paired": "2026-12-02T10:00:00Z", "heir-ready": "2026-12-02T10:00:30Z",
                       "draining": "2026-12-02T10:01:00Z", "drained": "2026-12-02T10:02:00Z"}},
    "cp-0": {"group": "cp", "heir": "cp-7", "role": "control-plane", "evicted_count": 3,
             "phases": {"joined": "2026-12-02T09:59:00Z", "etcd-removed": "2026-12-02T10:03:00Z",
                        "deleted": "2026-12-02T10:04:00Z", "drained": "2026-12-02T10:02:30Z"}},
    "w-2": {"phases": {"joined": "2026-12-02T10:00:00Z"}},   # no heir known: nothing to put the Event on
}}


def test_each_phase_first_seen_is_one_event_on_the_node_it_concerns():
    found = [(e["node"], e["reason"], e["time"]) for e in events.journal_events(BEFORE, AFTER)]
    assert found == [
        ("cp-7", "UpgradeHeirJoined", "2026-12-02T09:59:00Z"),
        ("cp-0", "UpgradeDrained", "2026-12-02T10:02:30Z"),
        ("cp-0", "UpgradeEtcdMemberRemoved", "2026-12-02T10:03:00Z"),
        ("cp-0", "UpgradeNodeDeleted", "2026-12-02T10:04:00Z"),
        ("w-9", "UpgradeHeirReady", "2026-12-02T10:00:30Z"),
        # The drain cordons first, in the same call: one Event each, at the drain's start.
        ("w-1", "UpgradeCordoned", "2026-12-02T10:01:00Z"),
        ("w-1", "UpgradeDrainStarted", "2026-12-02T10:01:00Z"),
        ("w-1", "UpgradeDrained", "2026-12-02T10:02:00Z"),
    ]
    messages = {(e["node"], e["reason"]): e["message"] for e in events.journal_events(BEFORE, AFTER)}
    assert messages[("w-1", "UpgradeDrained")] == "drained (2 pods evicted); heir w-9"
    assert messages[("cp-0", "UpgradeDrained")] == "drained (3 pods evicted); heir cp-7"
    assert messages[("cp-0", "UpgradeNodeDeleted")] == "replaced by cp-7: its instance and Node were deleted"
    assert messages[("w-9", "UpgradeHeirReady")] == "Ready: the heir of w-1"
    assert all(e["type"] == "Normal" for e in events.journal_events(BEFORE, AFTER))


def test_a_cordon_the_journal_records_is_not_written_twice():
    cordoned = {"nodes": {"w-1": {"heir": "w-9", "phases": {"cordoned": "2026-12-02T10:00:50Z"}}}}
    both = {"cordoned": "2026-12-02T10:00:50Z", "draining": "2026-12-02T10:01:00Z"}
    draining = {"nodes": {"w-1": {"heir": "w-9", "phases": both}}}
    assert [e["reason"] for e in events.journal_events(None, cordoned)] == ["UpgradeCordoned"]
    assert [e["reason"] for e in events.journal_events(cordoned, draining)] == ["UpgradeDrainStarted"]
    assert [e["reason"] for e in events.journal_events(None, draining)] == ["UpgradeCordoned", "UpgradeDrainStarted"]


def test_a_journal_seen_again_means_no_event():
    assert events.journal_events(AFTER, AFTER) == []
    assert events.journal_events(AFTER, {}) == []
    assert [e["reason"] for e in events.journal_events(None, BEFORE)] == ["UpgradePaired"]


def test_problems_and_pdb_blocked_drains_are_warnings_naming_what():
    problems = [{"node": "w-3", "message": "node w-3: heir annotation holds 'garbage!!', which is not a node name"},
                {"message": "no node"}]
    drains = [{"node": "w-1", "drained": False, "reason": "pdb_blocked",
               "blocked": [{"pod": "a", "namespace": "web", "pdb": "web-pdb"}, {"pod": "b", "namespace": "web", "pdb": "web-pdb"}]},
              {"node": "w-4", "drained": True, "blocked": []}, {"item": {"name": "w-5"}, "skipped": True}]
    found = events.pass_events(problems, drains, "2026-12-02T10:00:00Z")
    assert [(e["node"], e["reason"], e["type"]) for e in found] == [
        ("w-3", "UpgradeProblem", "Warning"), ("w-1", "UpgradeDrainBlocked", "Warning")]
    assert found[1]["message"] == "drain blocked by PodDisruptionBudget web/web-pdb"
    assert found[0]["message"].startswith("node w-3: heir annotation holds")


def test_one_event_name_per_node_reason_and_message_a_valid_object_name():
    name = events.event_name("w-1", "UpgradeProblem", "m")
    assert name == events.event_name("w-1", "UpgradeProblem", "m") != events.event_name("w-1", "UpgradeProblem", "n")
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name) and name.startswith("w-1.")
    assert len(events.event_name("n" * 253, "r", "m")) <= 253
    body = events.event_body(dict(node="w-1", reason="UpgradeDrained", message="x" * 2000, type="Normal", time=None),
                             "2026-12-02T10:00:00Z", "me")
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "w-1", "uid": "w-1"}
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2026-12-02T10:00:00Z" and body["count"] == 1
    assert len(body["message"]) == 1024 and body["metadata"]["namespace"] == "default"


def _replaced(heir, deleted):
    return {"group": "g", "heir": heir, "phases": {"paired": "2026-12-02T09:00:00Z", "deleted": deleted}}


GATED = {
    "nodes": {"w-1": _replaced("w-91", "2026-12-02T10:00:10Z"), "w-2": _replaced("w-92", "2026-12-02T10:00:20Z"),
              "w-3": _replaced("w-93", "2026-12-02T10:05:00Z"), "w-4": {"heir": "w-94", "phases": {"paired": "2026-12-02T10:06:00Z"}}},
    "gates": {
        "2026-12-02T10:00:30Z": {"after": "batch", "started": "2026-12-02T10:00:30Z", "outcome": "passed",
                                 "ended": "2026-12-02T10:01:00Z", "seconds": {"nodes_ready": 0.1, "soak": 12.0}},
        "2026-12-02T10:05:10Z": {"after": "batch", "started": "2026-12-02T10:05:10Z", "outcome": "failed",
                                 "ended": "2026-12-02T10:07:10Z", "failure": "health gate failed: nodes_ready: 1 node(s) not Ready"},
        # The run after the failure runs it again: the same batch.
        "2026-12-02T10:08:00Z": {"after": "batch", "started": "2026-12-02T10:08:00Z"},
    },
}


def test_each_gate_outcome_is_an_event_on_the_heirs_of_the_batch_it_followed():
    assert events.gate_batch(GATED, "2026-12-02T10:00:30Z") == ["w-91", "w-92"]
    assert events.gate_batch(GATED, "2026-12-02T10:05:10Z") == ["w-93"]
    assert events.gate_batch(GATED, "2026-12-02T10:08:00Z") == ["w-93"]
    found = events.gate_events(None, GATED)
    assert [(e["node"], e["reason"], e["type"], e["time"]) for e in found] == [
        ("w-91", "UpgradeGatePassed", "Normal", "2026-12-02T10:01:00Z"),
        ("w-92", "UpgradeGatePassed", "Normal", "2026-12-02T10:01:00Z"),
        ("w-93", "UpgradeGateFailed", "Warning", "2026-12-02T10:07:10Z")]
    assert found[0]["message"] == (
        "health gate 2026-12-02T10:00:30Z (after each batch; this one after the heirs w-91, w-92) passed at "
        "2026-12-02T10:01:00Z; seconds per check: nodes_ready 0.1s, soak 12.0s")
    assert found[2]["message"] == (
        "health gate 2026-12-02T10:05:10Z (after each batch; this one after the heirs w-93) failed at "
        "2026-12-02T10:07:10Z: health gate failed: nodes_ready: 1 node(s) not Ready")


def test_a_gate_outcome_already_journaled_is_no_new_event():
    assert events.gate_events(GATED, GATED) == []
    resumed = dict(GATED, gates=dict(GATED["gates"], **{"2026-12-02T10:08:00Z": dict(
        GATED["gates"]["2026-12-02T10:08:00Z"], outcome="passed", ended="2026-12-02T10:08:30Z", seconds={})}))
    [again] = events.gate_events(GATED, resumed)
    assert (again["node"], again["reason"]) == ("w-93", "UpgradeGatePassed")
    assert again["message"].endswith("seconds per check: none recorded")
    # A gate with no replacement before it (nothing to write on) and one still running write nothing.
    assert events.gate_events(None, {"gates": {"2026-12-02T10:00:30Z": {"outcome": "passed"}}}) == []
