"""Issue 25 in the planner: capacity is never traded for a guess. With a journal, only an instance this upgrade
created (recorded, or accounted for by a create intent whose record a kill cut off) becomes a heir or surplus;
any other node on the image is capacity, named and left alone. A group is done only when it holds its start count
of Ready nodes on the image, no refill is owed and nothing is still being deleted. No control-plane heir while etcd
or a control-plane Node is unhealthy; a heir counts only while its instance runs; no worker moves while the control
plane is replaced; the donor most in need goes first."""

import dataclasses

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core, progress
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers.base import (
    DELETING, RUNNING, STOPPED)

from core_world import NEW, OLD, World, group

P = core.DEFAULT_PREFIX + "/"


def opts(**kw):
    return core.Options(image=NEW.lower(), **kw)


def created(*names, group_id="G1", at="2026-12-01T00:00:00Z"):
    return {"gce://p/z/" + n: {"group": group_id, "created": at} for n in names}


def workers(outdated=("w0", "w1"), fresh=("f",)):
    w = World([group("G1", image=NEW)])
    for name in outdated:
        w.add_node(name, "G1", OLD)
    for name in fresh:
        w.add_node(name, "G1", NEW, cached=False)   # joined since, never seen by this collection
    return w


def pairs(result):
    return [(p["heir"], p["donor"]) for p in result["plan"]["pairs"]]


def test_a_fresh_node_on_the_image_that_the_journal_does_not_record_is_never_a_heir():
    w = workers()
    result = w.plan(opts(), created={}, start_counts={"G1": 3})
    assert pairs(result) == [] and result["plan"]["obsolete"] == []
    assert [f["name"] for f in result["foreign"]] == ["f"]
    # It is capacity: the group still gets heirs of its own for both outdated nodes (surge 1: one now).
    assert result["plan"]["create"] == [dict(group="G1", count=1, role="worker")]
    line = progress.progress_line(result, 2)
    assert "f runs the target image but this upgrade did not create it: left alone" in line, line
    # The same node, recorded as this upgrade's, is a heir; without any journal (a module on its own), the older rule.
    assert pairs(w.plan(opts(), created=created("f"), start_counts={"G1": 3})) == [("f", "w0")]
    assert pairs(w.plan(opts())) == [("f", "w0")]


def test_a_pair_written_onto_a_node_this_upgrade_did_not_create_is_broken():
    w = workers(fresh=())
    w.add_node("f", "G1", NEW, annotations={P + "donor": "w0", P + "phase": "heir"})
    w.nodes["w0"]["metadata"]["annotations"][P + "heir"] = "f"
    result = w.plan(opts(), created={}, start_counts={"G1": 3})
    assert {r["name"]: r["action"] for r in result["plan"]["repairs"]} == {"f": "unpair", "w0": "unpair"}
    assert result["plan"]["drain"] == []


def test_a_create_cut_off_before_its_record_is_recognised_by_its_intent_and_recorded():
    w = workers()
    inst = w.instances["G1"][-1]
    intent = {"G1@x": {"group": "G1", "at": core.format_time(w.now - 120), "count": 1}}
    # Created after the intent: this upgrade's own, paired, and recorded by the plan.
    w.instances["G1"][-1] = dataclasses.replace(inst, created_at=w.now - 100)
    result = w.plan(opts(), created={}, start_counts={"G1": 3}, intents=intent)
    assert pairs(result) == [("f", "w0")] and result["foreign"] == []
    assert result["plan"]["record_created"] == {"gce://p/z/f": {"group": "G1", "created": core.format_time(w.now - 100),
                                                                "intent": "G1@x"}}
    # Created before it, or once the intent is settled by a record of what the call made: not ours.
    w.instances["G1"][-1] = dataclasses.replace(inst, created_at=w.now - 130)
    assert pairs(w.plan(opts(), created={}, start_counts={"G1": 3}, intents=intent)) == []
    w.instances["G1"][-1] = dataclasses.replace(inst, created_at=w.now - 100)
    settled = {"G1@x": dict(intent["G1@x"], settled=0)}
    assert pairs(w.plan(opts(), created={}, start_counts={"G1": 3}, intents=settled)) == []
    # Past the window after the intent, nothing is taken for its instance either.
    w.instances["G1"][-1] = dataclasses.replace(inst, created_at=w.now - 120 + core.INTENT_WINDOW + 1)
    assert pairs(w.plan(opts(), created={}, start_counts={"G1": 3}, intents=intent)) == []


def test_an_intent_with_the_target_size_takes_only_as_many_instances_as_the_group_grew_by():
    # The world's group holds 3 instances (w0, w1, f), its target size 3 once f is counted. The intent recorded the
    # target size before its create: f is ours only when the group grew by it.
    w = workers()
    inst = w.instances["G1"][-1]
    w.instances["G1"][-1] = dataclasses.replace(inst, created_at=w.now - 120)   # the intent's very second
    at = core.format_time(w.now - 120)
    grown = {"G1@x": {"group": "G1", "at": at, "count": 1, "target_size": 2}}
    autohealed = {"G1@x": {"group": "G1", "at": at, "count": 1, "target_size": 3}}
    assert w.groups["G1"].target_size == 3
    result = w.plan(opts(), created={}, start_counts={"G1": 3}, intents=grown)
    assert pairs(result) == [("f", "w0")] and result["plan"]["record_intents"] == {"G1@x": {"grown": 1}}
    # The growth found is recorded in the intent and kept: once this upgrade deleted an instance of the group (its
    # target size back at 2), the growth since reads 0, and only the kept figure still says the create made f.
    w.groups["G1"].target_size = 2
    assert pairs(w.plan(opts(), created={}, start_counts={"G1": 3}, intents=grown)) == []
    kept = {"G1@x": dict(grown["G1@x"], grown=1)}
    result = w.plan(opts(), created={}, start_counts={"G1": 3}, intents=kept)
    assert pairs(result) == [("f", "w0")] and result["plan"]["record_intents"] == {}
    w.groups["G1"].target_size = 3
    result = w.plan(opts(), created={}, start_counts={"G1": 3}, intents=autohealed)
    assert pairs(result) == [] and result["plan"]["record_created"] == {}
    assert [f["name"] for f in result["foreign"]] == ["f"]
    # A journal written before intents recorded the target size, or a cloud that reports none: the window alone.
    old = {"G1@x": {"group": "G1", "at": at, "count": 1}}
    assert pairs(w.plan(opts(), created={}, start_counts={"G1": 3}, intents=old)) == [("f", "w0")]
    w.groups["G1"].target_size = None
    assert pairs(w.plan(opts(), created={}, start_counts={"G1": 3}, intents=autohealed)) == [("f", "w0")]
    w.groups["G1"].target_size = 3
    # Another recorded create of this upgrade since the intent accounts for its own growth.
    w.add_node("n9", "G1", NEW, cached=False)
    w.instances["G1"][-1].created_at = w.now
    assert w.groups["G1"].target_size == 4
    mine = {"gce://p/z/n9": {"group": "G1", "created": core.format_time(w.now)}}
    assert pairs(w.plan(opts(), created=mine, start_counts={"G1": 3}, intents=autohealed)) == [("n9", "w0")]
    assert pairs(w.plan(opts(), created=mine, start_counts={"G1": 3}, intents=grown)) == [("f", "w0"), ("n9", "w1")]


def test_an_instance_the_cloud_made_in_the_window_of_a_cut_off_create_is_taken_for_neither():
    # A kill cut off the record of a create that made one instance (the group grew by one), and in the same second
    # the cloud made one by itself (autohealing: the target size does not grow). Which one is ours cannot be told:
    # neither becomes a heir (a heir taken from the cloud's own would leave ours as an extra, uncounted instance), and
    # one of them holds a surge slot, not a position of the group.
    w = workers(fresh=("f", "g"))
    at = w.now - 120
    for number, inst in enumerate(w.instances["G1"][-2:]):
        w.instances["G1"][len(w.instances["G1"]) - 2 + number] = dataclasses.replace(inst, created_at=at)
    assert w.groups["G1"].target_size == 4
    intent = {"G1@x": {"group": "G1", "at": core.format_time(at), "count": 1, "target_size": 3}}

    def plan(surge, **kw):
        result = w.plan(opts(max_surge=surge), start_counts={"G1": 2}, intents=intent, **kw)
        [report] = result["scaling_groups"]
        return result, report

    result, report = plan(2, created={})
    assert pairs(result) == [] and result["plan"]["record_created"] == {}
    assert sorted(f["name"] for f in result["foreign"]) == ["f", "g"]
    assert report["in_flight"] == 1 and result["plan"]["create"] == [dict(group="G1", count=1, role="worker")]
    assert report["unclaimed"] == dict(count=1, among=["gce://p/z/f", "gce://p/z/g"])
    # The finding goes into the intent's record and is kept: once this upgrade deleted an instance of the group, its
    # growth since the intent no longer says that the create made one.
    found = dict(open=1, recorded=0, among=["gce://p/z/f", "gce://p/z/g"])
    assert result["plan"]["record_intents"] == {"G1@x": {"grown": 1, "unclaimed": found}}
    w.groups["G1"].target_size = 3
    assert "unclaimed" not in plan(2, created={})[1]
    intent["G1@x"]["unclaimed"] = found
    result, report = plan(2, created={})
    assert report["unclaimed"] == dict(count=1, among=["gce://p/z/f", "gce://p/z/g"]) and pairs(result) == []
    assert result["plan"]["record_intents"] == {}
    # A percentage is reckoned on the group's positions (w0, w1 and the cloud's one): 60 % of 3 is 2, not 60 % of 4.
    result, report = plan("60%", created={})
    assert report["surge_limit"] == 2 and result["plan"]["create"] == [dict(group="G1", count=1, role="worker")]
    # When the slot is the whole budget, nothing frees it by itself: the run is told to stop, naming both.
    result, report = plan(1, created={})
    assert result["plan"]["create"] == [] and report["in_flight"] == 1
    assert "gce://p/z/f, gce://p/z/g" in result["stop"] and "raise max_surge" in result["stop"], result["stop"]
    # The create's own record tells them apart (a live run writes it a moment later): g is ours, f the cloud's.
    result, report = plan(1, created={"gce://p/z/g": {"group": "G1", "created": core.format_time(at), "intent": "G1@x"}})
    assert pairs(result) == [("g", "w0")] and [f["name"] for f in result["foreign"]] == ["f"] and not result["stop"]
    assert "unclaimed" not in report


def test_a_forged_obsolete_mark_without_the_journal_removes_nothing():
    w = workers(outdated=(), fresh=())
    w.add_node("u", "G1", NEW, annotations={P + "obsolete": "true",
                                            P + "phase-history": "obsolete@" + core.format_time(w.now - 60)})
    w.add_node("v", "G1", NEW)
    result = w.plan(opts(), created={}, start_counts={"G1": 2})
    assert result["plan"]["drain"] == [] and result["plan"]["delete_nodes"] == []
    assert [p["code"] for p in result["problems"] if p["node"] == "u"] == ["obsolete_not_proven"]
    # Recorded as created by this upgrade, the same mark is followed.
    result = w.plan(opts(), created=created("u"), start_counts={"G1": 1})
    assert [d["name"] for d in result["plan"]["drain"]] == ["u"]


def test_a_deletion_the_cloud_still_lists_leaves_a_refill_owed_and_the_run_not_done():
    """Group of 2 at the start, max_unavailable 1, no surge room: w0 was removed delete-first and its instance is
    still deleting; the refill is owed (not created while the slot is held) and the run is not done."""
    w = World([group("G1", image=NEW)])
    w.add_node("n1", "G1", NEW)
    w.instances["G1"].append(dataclasses.replace(w.instances["G1"][0], provider_id="gce://p/z/w0", node_name="w0",
                                                 name="w0", state=DELETING))
    removed = {"w0": dict(group="G1", since=core.format_time(w.now - 30), labels={}, taints=[])}
    result = w.plan(opts(no_surge=True, max_unavailable=1), created={}, start_counts={"G1": 2}, removed_first=removed)
    assert result["plan"]["create"] == [] and not result["done"]
    assert "1 refill(s) owed" in result["plan"]["create_blocked"][0]["reason"]
    # Gone from the cloud: the refill is created.
    w.instances["G1"].pop()
    result = w.plan(opts(no_surge=True, max_unavailable=1), created={}, start_counts={"G1": 2}, removed_first=removed)
    assert result["plan"]["create"] == [dict(group="G1", count=1, role="worker")] and not result["done"]


def test_a_group_short_of_its_start_count_is_not_done():
    w = workers(outdated=(), fresh=("a",))
    result = w.plan(opts(), created={}, start_counts={"G1": 2})
    assert not result["done"]
    assert "1 Ready node(s) on the image, fewer than the 2" in result["plan"]["create_blocked"][0]["reason"]
    assert w.plan(opts(), created={}, start_counts={"G1": 1})["done"]


def control_plane(ready=True):
    w = World([group("CP", role="control-plane", image=NEW), group("G1", image=NEW)])
    for number in range(3):
        w.add_node("cp%d" % number, "CP", OLD, control_plane=True, ready=ready or number != 2,
                   ip="10.0.1.%d" % number)
    w.add_node("w0", "G1", OLD)
    return w


def test_no_control_plane_heir_while_a_member_or_a_control_plane_node_is_unhealthy():
    w = control_plane()
    assert w.plan(opts(), created={}, control_plane_health=[])["plan"]["create"][0]["group"] == "CP"
    sick = [dict(member="cp1 (8e9e05c52164694d)", node_ip="10.0.1.1", message="unreachable: connection refused")]
    result = w.plan(opts(), created={}, control_plane_health=sick)
    assert result["plan"]["create"] == []
    reason = result["plan"]["create_blocked"][0]["reason"]
    assert "etcd member cp1 (8e9e05c52164694d): unreachable: connection refused" in reason, reason
    reason = control_plane(ready=False).plan(opts(), created={})["plan"]["create_blocked"][0]["reason"]
    assert "control-plane node cp2 is not Ready" in reason, reason


def test_the_donor_most_in_need_is_paired_first():
    w = control_plane(ready=False)
    w.add_node("h", "CP", NEW, control_plane=True, cached=False)
    assert pairs(w.plan(opts(), created=created("h", group_id="CP"))) == [("h", "cp2")]
    w = control_plane()
    w.add_node("h", "CP", NEW, control_plane=True, cached=False)
    sick = [dict(member="cp1", node_ip="10.0.1.1", message="unhealthy")]
    assert pairs(w.plan(opts(), created=created("h", group_id="CP"), control_plane_health=sick)) == [("h", "cp1")]
    # Otherwise the oldest instance.
    w = workers(fresh=("f",))
    for inst, age in zip(w.instances["G1"], (100, 900, 0)):
        inst.created_at = w.now - age
    assert pairs(w.plan(opts(), created=created("f"))) == [("f", "w1")]


def test_no_worker_is_paired_or_drained_while_the_control_plane_is_replaced():
    w = control_plane()
    w.add_node("f", "G1", NEW, cached=False)
    result = w.plan(opts(), created=created("f"))
    assert pairs(result) == [] and result["budget"]["control_plane_first"]
    # A worker pair formed earlier waits too, Ready heir or not.
    w.nodes["w0"]["metadata"]["annotations"].update({P + "heir": "f", P + "phase": "paired"})
    w.nodes["f"]["metadata"]["annotations"].update({P + "donor": "w0", P + "phase": "heir"})
    result = w.plan(opts(), created=created("f"))
    assert result["plan"]["drain"] == []
    assert [x["reason"] for x in result["plan"]["waiting_for_heir"]] == ["waiting for the control plane to be replaced first"]


def test_a_heir_whose_instance_is_not_running_serves_no_donor():
    w = workers(outdated=("w0",), fresh=())
    w.add_node("h", "G1", NEW, annotations={P + "donor": "w0", P + "phase": "heir"})
    w.nodes["w0"]["metadata"]["annotations"].update({P + "heir": "h", P + "phase": "paired"})
    assert [d["name"] for d in w.plan(opts(), created=created("h"))["plan"]["drain"]] == ["w0"]
    heir = next(i for i in w.instances["G1"] if i.node_name == "h")
    for state in (DELETING, STOPPED):
        heir.state = state
        result = w.plan(opts(), created=created("h"))
        assert result["plan"]["drain"] == [] and {r["name"] for r in result["plan"]["repairs"]} == {"h", "w0"}
    # Starting (listed, not yet running): the donor waits.
    heir.state = "creating"
    result = w.plan(opts(), created=created("h"))
    assert result["plan"]["drain"] == [] and result["plan"]["waiting_for_heir"][0]["name"] == "w0"
    heir.state = RUNNING
    problems = core.check_drain(w.nodes["w0"], w.nodes["h"], NEW, core.CloudView(
        [dataclasses.replace(i, state=STOPPED) if i.node_name == "h" else i for i in w.instances["G1"]]))
    assert "heir_not_running" in [p["code"] for p in problems]
    # Gone from the cloud while its Node still reads Ready: no heir, neither for its donor nor for another one.
    w.instances["G1"].remove(heir)
    result = w.plan(opts(), created=created("h"))
    assert result["plan"]["drain"] == [] and pairs(result) == [] and {r["name"] for r in result["plan"]["repairs"]} == {"h", "w0"}
    w.nodes["h"]["metadata"]["annotations"] = {}
    w.nodes["w0"]["metadata"]["annotations"] = {P + "scaling-group-id": "G1", P + "node-image": OLD}
    assert pairs(w.plan(opts(), created=created("h"))) == []


def test_a_heir_replaces_first_the_member_whose_health_blocks_its_donors_removal():
    w = control_plane()
    w.add_node("h", "CP", NEW, control_plane=True, annotations={P + "donor": "cp0", P + "phase": "heir"})
    w.nodes["cp0"]["metadata"]["annotations"][P + "heir"] = "h"
    w.record_phase("cp0", core.PHASE_PAIRED)
    w.record_phase("cp0", core.PHASE_DRAINING)
    w.nodes["cp0"]["spec"]["unschedulable"] = True
    sick = [dict(member="cp1 (1)", node_ip="10.0.1.1", message="unreachable: connection refused")]
    result = w.plan(opts(), created=created("h", group_id="CP"), control_plane_health=sick)
    (swap,) = [r for r in result["plan"]["repairs"] if r["action"] == "swap"]
    assert (swap["name"], swap["donor"], swap["instead_of"]) == ("h", "cp1", "cp0")
    assert "the etcd member of cp1 is unhealthy (unreachable: connection refused)" in swap["reason"]
    patches = result["node_patches"]
    assert patches["h"]["annotations"][P + "donor"] == "cp1" and patches["cp0"]["annotations"][P + "heir"] is None
    assert patches["cp1"]["annotations"][P + "heir"] == "h" and result["plan"]["uncordon"] == ["cp0"]
    # A healthy etcd keeps the pair; so does a drained donor, whose member a killed run may have removed already.
    assert not [r for r in w.plan(opts(), created=created("h", group_id="CP"), control_plane_health=[])["plan"]["repairs"]
                if r["action"] == "swap"]
    w.record_phase("cp0", core.PHASE_DRAINED)
    assert not [r for r in w.plan(opts(), created=created("h", group_id="CP"), control_plane_health=sick)["plan"]["repairs"]
                if r["action"] == "swap"]


def test_a_node_whose_instance_is_being_deleted_holds_its_slot_in_the_surge():
    """A heir the cloud takes back while its Node still reads Ready is no heir, and its instance still counts
    against the surge until it is gone (the sandbox's deleted-heir test saw four instances in a group of two)."""
    w = workers(outdated=("w0",), fresh=())
    w.add_node("h", "G1", NEW)
    next(i for i in w.instances["G1"] if i.node_name == "h").state = DELETING
    result = w.plan(opts(max_surge=1), created=created("h"), start_counts={"G1": 1})
    assert result["plan"]["create"] == [] and result["scaling_groups"][0]["in_flight"] == 1
    assert "surge budget used (1 of 1 in flight)" in result["plan"]["create_blocked"][0]["reason"]
    w.instances["G1"] = [i for i in w.instances["G1"] if i.node_name != "h"]
    assert w.plan(opts(max_surge=1), created=created("h"), start_counts={"G1": 1})["plan"]["create"][0]["count"] == 1


def test_a_worker_that_turns_not_ready_after_the_pairing_is_replaced_before_the_ready_donor():
    """The donor is chosen when it is drained (issue 25, item 5): a heir paired with a Ready worker replaces instead
    an unpaired outdated worker of its group that turned NotReady since; the Ready one waits for the next heir."""
    w = workers(outdated=("w0", "w1"), fresh=())
    w.add_node("h", "G1", NEW, annotations={P + "donor": "w0", P + "phase": "heir"})
    w.nodes["w0"]["metadata"]["annotations"][P + "heir"] = "h"
    w.record_phase("w0", core.PHASE_PAIRED)
    w.nodes["w1"]["status"]["conditions"][0]["status"] = "False"
    result = w.plan(opts(), created=created("h"), start_counts={"G1": 2})
    (swap,) = [r for r in result["plan"]["repairs"] if r["action"] == "swap"]
    assert (swap["name"], swap["donor"], swap["instead_of"]) == ("h", "w1", "w0")
    assert swap["reason"] == "w1 is not Ready, so it is replaced first; w0, still Ready and not drained, waits for the next heir"
    patches = result["node_patches"]
    assert patches["h"]["annotations"][P + "donor"] == "w1" and patches["w0"]["annotations"][P + "heir"] is None
    assert patches["w1"]["annotations"][P + "heir"] == "h"
    # Once the donor drains, the choice is made: no swap, whatever turns NotReady.
    w.record_phase("w0", core.PHASE_DRAINING)
    w.nodes["w0"]["spec"]["unschedulable"] = True
    assert not [r for r in w.plan(opts(), created=created("h"), start_counts={"G1": 2})["plan"]["repairs"]
                if r["action"] == "swap"]
    # A NotReady donor keeps its heir, and a Ready outdated node is no reason to swap.
    w.record_phase("w0", core.PHASE_PAIRED)
    w.nodes["w0"]["spec"]["unschedulable"] = False
    w.nodes["w1"]["status"]["conditions"][0]["status"] = "True"
    assert not [r for r in w.plan(opts(), created=created("h"), start_counts={"G1": 2})["plan"]["repairs"]
                if r["action"] == "swap"]


def test_a_swap_takes_back_the_labels_the_heir_had_from_the_donor_given_back():
    """The heir of a swap carries the new donor's labels, not the ones it took from the donor given back. The world
    the property tests found: a NotReady worker whose stale donor annotation is cleared in the first pass is paired
    only in the next one (kill safety), so that pass gives it the heir paired with a Ready worker in the first."""
    w = World([group("G1", image=NEW)])
    w.add_node("w0", "G1", OLD, labels={"team": "blue", "only-w0": "x"})
    w.add_node("w1", "G1", OLD, ready=False, labels={"team": "red"}, annotations={P + "donor": "w0"})
    w.add_node("h", "G1", NEW, cached=False)
    first = w.plan(opts(), created=created("h"), start_counts={"G1": 2})
    assert pairs(first) == [("h", "w0")] and [r["action"] for r in first["plan"]["repairs"]] == ["clear"]
    w.apply(first)
    assert w.nodes["h"]["metadata"]["labels"]["only-w0"] == "x"
    second = w.plan(opts(), created=created("h"), start_counts={"G1": 2})
    (swap,) = [r for r in second["plan"]["repairs"] if r["action"] == "swap"]
    assert (swap["donor"], swap["instead_of"]) == ("w1", "w0")
    w.apply(second)
    labels = w.nodes["h"]["metadata"]["labels"]
    assert labels["team"] == "red" and "only-w0" not in labels, labels
    third = w.plan(opts(), created=created("h"), start_counts={"G1": 2})
    assert not third["plan"]["repairs"] and not third["plan"]["label_copies"], third["plan"]


def test_with_etcd_through_another_host_a_control_plane_heir_waits_for_a_fresh_read():
    """Issue 25, item 3, where etcd is reached only through rolling_upgrade_etcd_delegate_to: the slice ends saying a
    read is due instead of creating a control-plane heir unseen; a fresh read that names a problem holds it, named; a
    healthy one lets it go; a read older than FRESH_SECONDS counts for nothing."""
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import etcd_access

    w = control_plane()
    port = etcd_access.DelegatedEtcdHealth(clock=lambda: w.now)
    ex = w.executor(opts(), etcd_delegated=True, etcd_health=port)
    out = ex.run_slice(seconds=30)
    assert out["etcd_health_due"] and not out["done"] and w.created == [], out["did"]
    [blocked] = [b for b in out["facts"]["plan"]["create_blocked"] if b["group"] == "CP"]
    assert "etcd is read through rolling_upgrade_etcd_delegate_to before each control-plane heir: that read is due" \
        in blocked["reason"], blocked
    sick = [dict(member="cp1 (8e9e05c52164694d)", node_ip="10.0.1.1", message="unreachable: connection refused")]
    port.give(sick, w.now)
    out = ex.run_slice(seconds=5)
    assert not out["etcd_health_due"] and w.created == []
    [blocked] = [b for b in out["facts"]["plan"]["create_blocked"] if b["group"] == "CP"]
    assert "etcd member cp1 (8e9e05c52164694d): unreachable: connection refused" in blocked["reason"], blocked
    port.give([], w.now - etcd_access.DelegatedEtcdHealth.FRESH_SECONDS - 1)   # healthy, but too old to go by
    assert ex.run_slice(seconds=5)["etcd_health_due"] and w.created == []
    port.give([], w.now)
    out = ex.run_slice(seconds=5)
    assert w.created == ["CP"], (w.created, out["facts"]["plan"]["create_blocked"])
