"""The plan's typed values: entries give the dicts the modules take (an UNSET field is no key, None is one), and
plan_upgrade's joining of the steps' decisions is the same as if every step had written into one plan and one set
of node patches in turn, which is what the planner did before its steps returned values."""

from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.upgrade_plan import (
    UNSET, CacheCorrected, CreateBlocked, Decided, GroupShort, InstanceWithoutNode, NodePatches, Plan, Problem, Repair,
    WaitingForHeir,
)

NAMES = st.sampled_from(["a", "b", "c"])
KEYS = st.sampled_from(["k1", "k2", "k3"])
VALUES = st.one_of(st.none(), st.sampled_from(["x", "y"]))
WRITES = st.lists(st.one_of(
    st.tuples(st.just("annotate"), NAMES, st.dictionaries(KEYS, VALUES, max_size=2), st.dictionaries(KEYS, VALUES, max_size=2)),
    st.tuples(st.just("labels"), NAMES, st.dictionaries(KEYS, VALUES, min_size=1, max_size=2)),
    st.tuples(st.just("taints"), NAMES, st.lists(st.sampled_from(["t1", "t2"]), max_size=2)),
), max_size=12)


def _apply(patches, writes):
    for write in writes:
        if write[0] == "annotate":
            patches.annotate(write[1], write[2], expect=write[3])
        elif write[0] == "labels":
            patches.set_labels(write[1], write[2])
        else:
            patches.set_taints(write[1], write[2])
    return patches


@settings(max_examples=300, deadline=None)
@given(WRITES, st.integers(min_value=0, max_value=12), st.integers(min_value=0, max_value=12))
def test_node_patches_joined_in_order_are_the_writes_made_in_order(writes, cut1, cut2):
    cut1, cut2 = sorted((min(cut1, len(writes)), min(cut2, len(writes))))
    steps = [_apply(NodePatches(), part) for part in (writes[:cut1], writes[cut1:cut2], writes[cut2:])]
    joined = NodePatches()
    for step in steps:
        joined.joined(step)
    assert repr(joined.to_dict()) == repr(_apply(NodePatches(), writes).to_dict())   # repr: the key order too


def test_node_patch_first_expectation_wins_and_labels_merge():
    patches = NodePatches()
    patches.annotate("n", {"a": "1"}, expect={"a": None})
    patches.annotate("n", {"a": "2", "b": None}, expect={"a": "old", "b": "x"})
    patches.set_labels("n", {"l1": "v"})
    patches.set_labels("n", {"l2": None})
    patches.annotate("m", {"c": "3"})
    assert patches.to_dict() == {
        "n": {"annotations": {"a": "2", "b": None}, "expect": {"a": None, "b": "x"}, "labels": {"l1": "v", "l2": None}},
        "m": {"annotations": {"c": "3"}, "expect": {}},
    }
    assert list(patches.to_dict()) == ["n", "m"]


def test_unset_fields_are_no_keys_and_none_is_a_value():
    assert Repair(name="h", action="clear", heir="d").to_dict() == {"name": "h", "action": "clear", "heir": "d"}
    assert list(Repair(name="h", action="swap", donor="s", instead_of="d", reason="r").to_dict()) == [
        "name", "action", "donor", "instead_of", "reason"]
    joining = InstanceWithoutNode(provider_id="p", node_name=None, group="g", state="RUNNING", image=None,
                                  created_at=None, deadline=None)
    assert joining.to_dict()["deadline"] is None and "reason" not in joining.to_dict()
    waiting = WaitingForHeir(name="d", since=None, overdue=False, heir=None, heir_ready=None, heir_ready_since=None)
    assert "reason" not in waiting.to_dict() and waiting.reason is UNSET


def test_entries_of_one_list_keep_their_key_orders():
    # The surge's reason and a group not whole again, a problem and a corrected cache, were written in these orders
    # before they were typed, and share one list each.
    assert list(CreateBlocked(group="g", reason="r", outdated=1).to_dict()) == ["group", "reason", "outdated"]
    assert list(GroupShort(group="g", outdated=0, reason="r").to_dict()) == ["group", "outdated", "reason"]
    assert list(Problem(node="n", step=None, code="c", message="m", action="kept").to_dict()) == [
        "node", "step", "code", "message", "action"]
    assert list(CacheCorrected(node="n", step=None, code="c", action="corrected", message="m").to_dict()) == [
        "node", "step", "code", "action", "message"]


def test_decided_joined_keeps_the_steps_order():
    first, second = Decided(), Decided()
    first.plan.obsolete.append("a")
    first.plan.record_refills["slot1"] = "a"
    first.problems.append({"node": "a"})
    first.patches.annotate("a", {"k": "1"})
    second.plan.obsolete.append("b")
    second.plan.record_refills["slot2"] = "b"
    second.problems.append({"node": "b"})
    second.patches.annotate("b", {"k": "2"})
    second.patches.annotate("a", {"k": "3"})
    total = Decided.joined(first, second)
    assert total.plan.obsolete == ["a", "b"]
    assert total.plan.record_refills == {"slot1": "a", "slot2": "b"}
    assert [p["node"] for p in total.problems] == ["a", "b"]
    assert total.patches.to_dict() == {"a": {"annotations": {"k": "3"}, "expect": {}},
                                       "b": {"annotations": {"k": "2"}, "expect": {}}}
    assert first.plan.obsolete == ["a"]   # the steps' own decisions are left as they were
    assert Plan().joined(total.plan).to_dict()["obsolete"] == ["a", "b"]
