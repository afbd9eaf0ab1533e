"""The executor (module_utils/executor.py) against the in-memory world: the decisions that lived in the
role's Jinja (same-pass finish, the quota surge cap, when to wait), delegated etcd removal, check mode,
the overall timeout and the journal."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core, executor

from core_world import NEW, OLD, World, group

P = core.DEFAULT_PREFIX + "/"


def opts(**kw):
    kw.setdefault("image", NEW.lower())
    return core.Options(**kw)


def steps(result, step):
    return [d for d in result["did"] if d["step"] == step]


def test_first_pass_points_the_groups_and_the_next_look_creates_at_once():
    w = World([group("G1")])
    w.add_node("old-1", "G1", OLD)
    ex = w.executor(opts(), poll=5.0)
    first = ex.run_pass()
    assert steps(first, "set_group_image") == [{"step": "set_group_image", "group": "G1"}]
    assert first["moved"] is True          # so the slice looks again without waiting
    second = ex.run_pass()
    assert steps(second, "create") == [{"step": "create", "group": "G1", "count": 1}]


def test_a_drain_that_finishes_goes_on_to_deletion_in_the_same_pass():
    w = World([group("G1", image=NEW)])
    w.add_node("old-1", "G1", OLD)
    ex = w.executor(opts())
    for _attempt in range(6):
        result = ex.run_pass()
        if steps(result, "drain"):
            break
        w.tick()
    assert steps(result, "drain")[0]["drained"] is True
    assert [d["name"] for d in steps(result, "delete")] == ["old-1"]
    assert result["finished"] == ["old-1"] and "old-1" not in w.nodes


def test_control_plane_donor_loses_its_etcd_member_before_deletion_in_one_pass():
    w = World([group("CP", role="control-plane", image=NEW)])
    w.add_node("cp-old", "CP", OLD, control_plane=True)
    ex = w.executor(opts())
    order = []
    for _attempt in range(8):
        result = ex.run_pass()
        order.extend(d["step"] for d in result["did"] if d["step"] in ("drain", "etcd_remove", "delete"))
        if result["finished"]:
            break
        w.tick()
    assert order == ["drain", "etcd_remove", "delete"]
    assert w.etcd_removed == {"cp-old"}


def test_delegated_etcd_removal_is_handed_back_and_nothing_is_deleted():
    w = World([group("CP", role="control-plane", image=NEW)])
    w.add_node("cp-old", "CP", OLD, control_plane=True)
    ex = w.executor(opts(), etcd_delegated=True)
    for _attempt in range(8):
        result = ex.run_slice(seconds=30)
        if result["etcd_due"]:
            break
        w.tick()
    assert [e["name"] for e in result["etcd_due"]] == ["cp-old"]
    assert result["done"] is False and "cp-old" in w.nodes and not w.etcd_removed
    # The role removes the member (delegated) and records it; the next slice deletes the node.
    w.etcd_removed.add("cp-old")
    w.record_phase("cp-old", core.PHASE_ETCD_REMOVED)
    again = w.executor(opts(), etcd_delegated=True).run_slice(seconds=30)
    assert again["finished"] == ["cp-old"] and again["etcd_due"] == []


def test_refused_creates_hold_the_surge_for_the_rest_of_the_run():
    w = World([group("G1", image=NEW)])
    for i in range(4):
        w.add_node("old-%d" % i, "G1", OLD)
    ex = w.executor(opts(max_surge=3))
    said = []
    ex.say = said.append

    def refuse_after_one(group_id, count, create=ex.cloud.create):
        made, _refused = create(group_id, 1)
        return made, "QUOTA_EXCEEDED: instances"
    ex.cloud.create = refuse_after_one
    ex.run_pass()
    assert ex.settings.surge_cap == 1
    assert any("at most 1 replacement(s)" in line for line in said)
    w.tick()
    facts, _nodes = ex.read()
    assert facts["budget"]["max_surge_total"] == 1 and facts["plan"]["create"] == []


def test_a_slice_waits_the_poll_interval_only_when_nothing_moved():
    w = World([group("G1", image=NEW)])
    w.add_node("old-1", "G1", OLD)
    slept = []
    ex = w.executor(opts(), poll=2.0)
    ex.sleep = lambda seconds: (slept.append(seconds), w.tick(seconds))
    result = ex.run_slice(seconds=60)
    assert result["finished"] == ["old-1"]
    # create (moved) -> boot wait -> join: pair (moved) -> drain+delete; waits only while booting.
    assert slept and all(s == 2.0 for s in slept)


def test_check_mode_changes_nothing():
    w = World([group("G1")])
    w.add_node("old-1", "G1", OLD)
    result = w.executor(opts(), check_mode=True).run_slice()
    assert result["did"] == [] and result["done"] is False
    assert w.groups["G1"].image == OLD and w.created == []
    assert result["facts"]["plan"]["set_group_image"] == [{"group": "G1", "image": NEW.lower()}]


def test_overall_timeout_stops_with_the_progress_line():
    w = World([group("G1", image=NEW)])
    w.add_node("old-1", "G1", OLD)
    ex = w.executor(opts(), timeout=100, started=w.now - 101)
    with pytest.raises(executor.StepFailure) as err:
        ex.run_pass()
    assert "rolling_upgrade_timeout (100s)" in str(err.value) and "nodes on the image" in str(err.value)


def test_guard_refuses_to_drain_a_donor_whose_heir_is_not_ready():
    w = World([group("G1", image=NEW)])
    w.add_node("old-1", "G1", OLD, annotations={P + "heir": "new-1"})
    w.add_node("new-1", "G1", NEW, ready=False, annotations={P + "donor": "old-1"})
    ex = w.executor(opts())
    facts, nodes = ex.read()
    with pytest.raises(executor.StepFailure, match="heir new-1 is not Ready"):
        ex.guard("drain", dict(name="old-1", heir="new-1", reason=core.DONOR), facts, nodes)


def test_every_pass_is_journaled():
    w = World([group("G1", image=NEW)])
    w.add_node("old-1", "G1", OLD)
    ex = w.executor(opts(), journal_run="2026-12-01T00:00:00Z")
    ex.run_slice(seconds=60)
    assert w.journal and w.journal[-1]["passes"] == ex.passes
    assert "deleted" in w.journal[-1]["nodes"]["old-1"]["phases"]
