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
        ("w-1", "UpgradeDrainStarted", "2026-12-02T10:01:00Z"),
        ("w-1", "UpgradeDrained", "2026-12-02T10:02:00Z"),
    ]
    messages = {(e["node"], e["reason"]): e["message"] for e in events.journal_events(BEFORE, AFTER)}
    assert messages[("w-1", "UpgradeDrained")] == "drained (2 pods evicted); heir w-9"
    assert messages[("cp-0", "UpgradeDrained")] == "drained (3 pods evicted); heir cp-7"
    assert messages[("cp-0", "UpgradeNodeDeleted")] == "replaced by cp-7: its instance and Node were deleted"
    assert messages[("w-9", "UpgradeHeirReady")] == "Ready: the heir of w-1"
    assert all(e["type"] == "Normal" for e in events.journal_events(BEFORE, AFTER))


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
