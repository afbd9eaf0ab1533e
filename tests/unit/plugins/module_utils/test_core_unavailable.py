"""Delete-first replacements (rolling_upgrade_max_unavailable, issue 16 item 1): with no room for a heir, a worker
group lends capacity instead. The budget part of the planner and the executor's passes over an in-memory world:
Ready nodes never below the start minus max_unavailable, never more instances than the start plus the surge, the
control plane never delete-first, and a run killed at any moment resumes to the start count."""

import copy
import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core, report, validate

from core_world import NEW, OLD, Killed, World, group

P = core.DEFAULT_PREFIX + "/"


def opts(**kw):
    return core.Options(image=NEW.lower(), heir_ready_seconds=0, **kw)


def world(size=3, cp=False):
    w = World([group("G1", image=NEW)] + ([group("CP", role="control-plane", image=NEW)] if cp else []))
    for number in range(size):
        w.add_node("w%d" % number, "G1", OLD, labels={"team": "t%d" % number})
    if cp:
        for number in range(3):
            w.add_node("cp%d" % number, "CP", OLD, control_plane=True)
    return w


@pytest.mark.parametrize("value, size, limit", [
    (0, 10, 0), (1, 10, 1), ("2", 10, 2), ("25%", 10, 2), ("25%", 3, 1), ("1%", 3, 1), ("0%", 10, 0),
    ("100%", 4, 4), ("50%", 5, 2),
])
def test_the_limit_is_a_count_or_a_percentage_rounded_down(value, size, limit):
    assert core.unavailable_limit(value, size) == limit


@pytest.mark.parametrize("value", [-1, "-1", "x", True, "101%", 10 ** 20, None])
def test_a_bad_limit_is_refused_naming_the_option(value):
    with pytest.raises(core.PlanInputError, match="max_unavailable"):
        core.Options(image="i", max_unavailable=value).validate()
    message = validate.max_unavailable("rolling_upgrade_max_unavailable", value)
    assert message.startswith("rolling_upgrade_max_unavailable must be a whole number from 0 to 5000 or a "
                              "percentage of the group from 0% to 100%") and "0 keeps every replacement" in message


def test_without_room_and_without_the_option_nothing_is_taken_away():
    result = world().plan(opts(no_surge=True), start_counts={"G1": 3})
    assert result["plan"]["create"] == [] and result["plan"]["delete_first"] == []
    assert result["node_patches"] == {} or not any(
        p["annotations"].get(P + "obsolete") for p in result["node_patches"].values())
    assert [b["reason"] for b in result["plan"]["create_blocked"]] == ["the cloud quota leaves no room for a new instance"]


def test_without_room_one_outdated_worker_is_removed_first_and_the_plan_says_so():
    result = world().plan(opts(no_surge=True, max_unavailable=1), start_counts={"G1": 3})
    assert [m["name"] for m in result["plan"]["delete_first"]] == ["w0"]
    assert result["plan"]["create"] == [] and result["plan"]["record_start_counts"] == {}
    patch = result["node_patches"]["w0"]
    assert patch["annotations"][P + "obsolete"] == "true" and "obsolete@" in patch["annotations"][P + "phase-history"]
    assert patch["expect"] == {P + "heir": None, P + "obsolete": None}
    report = result["scaling_groups"][0]
    assert (report["start_count"], report["unavailable_limit"], report["unavailable_in_use"]) == (3, 1, 1)
    assert result["progress"]["remaining"] == 3 and result["progress"]["in_flight"] == 1
    assert result["budget"]["max_unavailable"] == 1 and not result["done"]


def test_an_unknown_start_count_is_recorded_with_the_first_mark():
    w = world()
    result = w.plan(opts(no_surge=True, max_unavailable=1))
    assert result["plan"]["record_start_counts"] == {"G1": 3}
    assert [m["name"] for m in result["plan"]["delete_first"]] == ["w0"]
    # So are the labels of the worker removed first, for the refill that replaces it, and when it was decided.
    assert result["plan"]["record_removed_first"] == {"w0": dict(group="G1", since=core.format_time(w.now),
                                                                 labels={"team": "t0"}, taints=[])}


def test_a_refill_with_no_outdated_node_left_takes_the_labels_of_the_worker_it_replaces():
    w = World([group("G1", image=NEW)])
    w.add_node("w1", "G1", NEW)
    w.add_node("n9", "G1", NEW, cached=False)
    created = {"gce://p/z/n9": {"group": "G1", "created": "2026-12-01T00:00:00Z"}}
    removed = {"w0": dict(group="G1", labels={"team": "t0"}, taints=[]), "wx": dict(group="G2", labels={}, taints=[])}
    result = w.plan(opts(max_unavailable=1), created=created, start_counts={"G1": 2}, removed_first=removed)
    assert result["plan"]["refilled"] == [dict(name="n9", group="G1", created="2026-12-01T00:00:00Z", replaces="w0")]
    assert result["plan"]["record_refills"] == {"w0": "n9"}
    assert result["node_patches"]["n9"]["labels"] == {"team": "t0"}
    assert result["node_patches"]["n9"]["annotations"][P + "phase"] == core.PHASE_REPLACED
    assert result["progress"]["done"] == 1
    # A slot the journal gives to another node is not taken twice.
    result = w.plan(opts(max_unavailable=1), created=created, start_counts={"G1": 2}, removed_first=removed,
                    refills={"w0": "other"})
    assert result["plan"]["refilled"][0]["replaces"] is None and "labels" not in result["node_patches"]["n9"]


def test_a_removal_under_way_without_a_recorded_start_is_not_guessed_at():
    w = world()
    w.nodes["w0"]["metadata"]["annotations"].update({
        P + "obsolete": "true", P + "phase-history": "obsolete@" + core.format_time(w.now - 10)})
    result = w.plan(opts(no_surge=True, max_unavailable=1))
    assert result["plan"]["delete_first"] == [] and result["plan"]["create"] == []
    assert "rolling_upgrade_max_unavailable needs the journal" in result["plan"]["create_blocked"][0]["reason"]


def test_the_control_plane_always_surges():
    w = world(cp=True)
    result = w.plan(opts(max_unavailable=2), start_counts={"G1": 3, "CP": 3})
    assert result["plan"]["delete_first"] == []
    assert result["plan"]["create"] == [dict(group="CP", count=1, role="control-plane")]
    # Nor do workers go delete-first while the control plane is replaced.
    assert "control plane" in [b for b in result["plan"]["create_blocked"] if b["group"] == "G1"][0]["reason"]


def test_surge_and_unavailable_add_up_as_in_gke():
    result = world(size=4).plan(opts(max_surge=1, max_unavailable=1), start_counts={"G1": 4})
    assert result["plan"]["create"] == [dict(group="G1", count=1, role="worker")]
    assert [m["name"] for m in result["plan"]["delete_first"]] == ["w0"]
    result = world(size=4).plan(opts(max_surge=2, max_unavailable="50%"), start_counts={"G1": 4})
    assert result["plan"]["create"][0]["count"] == 2 and len(result["plan"]["delete_first"]) == 2


def run(w, options, start=3, surge=0, take=None, executor=None, journal=None, passes=60):
    """Passes of the production executor over the world until done; checks the invariants before every step."""
    journal = journal if journal is not None else {}
    ex = executor or w.executor(options, take=lambda kind, item: guard(kind, item) and (take is None or take(kind, item)),
                                created=dict(journal.get("instances_created") or {}),
                                start_counts=dict(journal.get("start_counts") or {}),
                                removed_first=dict(journal.get("removed_first") or {}),
                                refills=dict(journal.get("refills") or {}),
                                intents=dict(journal.get("create_intents") or {}))
    ex.record_created = lambda record: report.merge(journal, copy.deepcopy(record))
    limit = core.unavailable_limit(options.max_unavailable, start)

    def guard(kind, item):
        assert w.capacity() >= start - limit, "%d Ready schedulable nodes before %s %s" % (w.capacity(), kind, item)
        assert sum(len(v) for v in w.instances.values()) <= start + surge, "too many instances before %s" % kind
        return True

    for _pass in range(passes):
        try:
            outcome = ex.run_pass()
        except Killed:
            return None
        guard("end of pass", None)
        if outcome["facts"]["done"]:
            return outcome
        w.tick(30)
    raise AssertionError("not done after %d passes: %s" % (passes, outcome["facts"]["progress"]))


def finished_as_at_start(w, start=3):
    assert len(w.nodes) == start and len(w.instances["G1"]) == start
    assert all(i.image == NEW for i in w.instances["G1"])
    assert not any(n["spec"].get("unschedulable") for n in w.nodes.values())
    # Every worker's labels went to the node that replaced it, also those of a worker removed before its heir.
    assert sorted(n["metadata"]["labels"].get("team", "-") for n in w.nodes.values()) == ["t%d" % i for i in range(start)]


def test_a_group_with_no_room_is_replaced_delete_first_one_at_a_time():
    w = world()
    outcome = run(w, opts(no_surge=True, max_unavailable=1))
    finished_as_at_start(w)
    assert outcome["facts"]["progress"]["done"] == 3 and outcome["facts"]["progress"]["remaining"] == 0
    assert len(w.created) == 3


def test_two_unavailable_in_a_group_of_four():
    w = world(size=4)
    run(w, opts(no_surge=True, max_unavailable=2), start=4)
    finished_as_at_start(w, 4)


def test_surge_and_unavailable_together_stay_within_both():
    w = world(size=4)
    run(w, opts(max_surge=1, max_unavailable=1), start=4, surge=1)
    finished_as_at_start(w, 4)


# derandomize: the same 40 examples in every run. A random one found the defect below, open in issue 16 item 1.
@settings(max_examples=40, deadline=None, derandomize=True)
@given(kill_at=st.integers(min_value=0, max_value=40), size=st.integers(min_value=1, max_value=4),
       unavailable=st.integers(min_value=1, max_value=2))
def test_a_run_killed_at_any_moment_resumes_to_the_start_count(kill_at, size, unavailable):
    _killed_and_resumed(kill_at, size, unavailable)


def test_killed_between_the_create_and_its_record_the_refill_still_gets_the_labels():
    """Found by the property above: killed at step 11 of 2 workers removed at once, the first refill is in the cloud
    but not in the journal. It still takes the labels of a removed worker: the cloud created it after the removal."""
    _killed_and_resumed(11, 2, 2)


def test_an_unrecorded_node_older_than_the_removal_takes_no_labels():
    w = World([group("G1", image=NEW)])
    w.add_node("w1", "G1", NEW)
    w.add_node("n9", "G1", NEW, cached=False)          # created a day ago (world's default), never journaled
    since = core.format_time(w.now - 60)
    removed = {"w0": dict(group="G1", since=since, labels={"team": "t0"}, taints=[])}
    result = w.plan(opts(max_unavailable=1), start_counts={"G1": 3}, removed_first=removed)
    assert result["plan"]["refilled"] == [] and "labels" not in result["node_patches"].get("n9", {})
    # The same node created after the removal was decided is its refill; an entry with no time never is.
    w.instances["G1"][-1] = dataclasses.replace(w.instances["G1"][-1], created_at=w.now - 30)
    result = w.plan(opts(max_unavailable=1), start_counts={"G1": 3}, removed_first=removed)
    assert [r["replaces"] for r in result["plan"]["refilled"]] == ["w0"]
    assert result["node_patches"]["n9"]["labels"] == {"team": "t0"}
    removed["w0"].pop("since")
    result = w.plan(opts(max_unavailable=1), start_counts={"G1": 3}, removed_first=removed)
    assert result["plan"]["refilled"] == []


def _killed_and_resumed(kill_at, size, unavailable):
    w = world(size=size)
    journal, steps = {}, []

    def take(kind, item):
        steps.append(kind)
        return len(steps) <= kill_at

    options = opts(no_surge=True, max_unavailable=unavailable)
    if run(w, options, start=size, take=take, journal=journal) is None:
        w.tick(30)
        run(w, options, start=size, journal=journal)
    finished_as_at_start(w, size)


def test_a_second_upgrade_with_max_unavailable_50_percent_replaces_the_heirs_of_the_first():
    """Issue 25: on a cluster this collection upgraded before, every worker still carries the trail of its own
    replacement (heir, then replaced). A second upgrade with max_unavailable 50% on a group of 2 marked one of them
    obsolete on top of that trail (heir, replaced, obsolete: out of order), so the planner left it alone for good:
    the run never ended (before issue 25 it even said done) while that node ran the old image. The mark starts a
    fresh trail, as a pairing does, and the group ends whole on the image."""
    w = World([group("G1", image=NEW)])
    for number in range(2):
        trail = "heir@%s,replaced@%s" % (core.format_time(w.now - 7200), core.format_time(w.now - 3600))
        w.add_node("w%d" % number, "G1", OLD, labels={"team": "t%d" % number},
                   annotations={P + "phase": core.PHASE_REPLACED, P + "phase-history": trail})
    first = w.plan(opts(max_unavailable="50%"), start_counts={"G1": 2})
    [marked] = [m["name"] for m in first["plan"]["delete_first"]]
    assert first["node_patches"][marked]["annotations"][P + "phase-history"] == "obsolete@" + core.format_time(w.now)
    outcome = run(w, opts(max_unavailable="50%"), start=2, surge=1)
    finished_as_at_start(w, 2)
    assert outcome["facts"]["progress"]["done"] == 2 and not outcome["facts"]["problems"]
