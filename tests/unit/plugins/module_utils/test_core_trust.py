"""The cross-checks before every destructive step (issue 13): the planner acts only when the cloud and the
cluster agree, names every inconsistency, and leaves inconsistent nodes alone. Unit tests of each check and
of each measured case, and property tests (hypothesis) with generated corrupted annotations: random
garbage, self-references, cycles, pairs across groups, phases out of order and fake image claims. None of
them may lead to a destructive action."""

import copy
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers.base import DELETING, RUNNING, Instance

from core_world import NEW, OLD, World, group

P = core.DEFAULT_PREFIX + "/"
KEYS = core.AnnotationKeys()
T0 = 900_000.0          # a time before every World's now
pytestmark = pytest.mark.timeout(300)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def opts(**kw):
    kw.setdefault("image", NEW.lower())
    return core.Options(**kw)


def trail(*phases, at=T0):
    return {P + "phase-history": ",".join("%s@%s" % (p, core.format_time(at + i)) for i, p in enumerate(phases))}


def left_alone(result):
    return {(p["node"], p["code"]) for p in result["problems"] if p["action"] == "left alone"}


def destructive(result):
    plan = result["plan"]
    return ({d["name"] for d in plan["drain"]} | {e["name"] for e in plan["etcd_remove"]}
            | {d["name"] for d in plan["delete_nodes"]})


def cloud_of(w):
    return core.CloudView([i for items in w.instances.values() for i in items])


def pair_world(phase="paired", control_plane=False, cordoned=False):
    """One donor and its Ready heir, as this collection leaves them at `phase`."""
    w = World([group("G1", role="control-plane" if control_plane else None, image=NEW), group("G2", image=NEW)])
    phases = {"paired": ["paired"], "draining": ["paired", "draining"], "drained": ["paired", "draining", "drained"],
              "etcd-removed": ["paired", "draining", "drained", "etcd-removed"]}[phase]
    w.add_node("old", "G1", OLD, control_plane=control_plane,
               annotations=dict(trail(*phases), **{P + "heir": "new", P + "phase": phase}))
    w.nodes["old"]["spec"]["unschedulable"] = cordoned
    w.add_node("new", "G1", NEW, control_plane=control_plane,
               annotations=dict(trail("heir"), **{P + "donor": "old", P + "phase": "heir"}))
    return w


def check(w, step, name="old", heir="new", target=NEW, cloud=True):
    node = w.nodes[name]
    partner = w.nodes.get(heir) if heir else None
    return core.CHECKS[step](node, partner, target, cloud_of(w) if cloud else None, KEYS, w.now)


def codes(problems):
    return {p["code"] for p in problems}


# ------------------------------------------------------------------------------------- the check functions

def test_a_consistent_pair_passes_every_check_of_its_phase():
    assert check(pair_world(), core.STEP_CORDON) == [] and check(pair_world(), core.STEP_DRAIN) == []
    w = pair_world("drained", cordoned=True)
    assert check(w, core.STEP_INSTANCE_DELETION) == [] and check(w, core.STEP_NODE_DELETION) == []
    w = pair_world("drained", control_plane=True, cordoned=True)
    assert check(w, core.STEP_ETCD_REMOVAL) == []
    w = pair_world("etcd-removed", control_plane=True, cordoned=True)
    assert check(w, core.STEP_NODE_DELETION) == []
    # Without the cloud (a module on its own), the cluster side alone must agree.
    assert check(pair_world(), core.STEP_DRAIN, cloud=False) == []


def test_each_disagreement_is_named():
    w = pair_world()
    w.nodes["old"]["metadata"]["annotations"][P + "heir"] = "garbage!!"
    [problem] = check(w, core.STEP_DRAIN, heir=None)
    assert problem == {"node": "old", "step": "drain", "code": "garbage_heir",
                       "message": "node old: heir annotation holds 'garbage!!', which is not a node name"}

    w = pair_world()
    w.nodes["old"]["metadata"]["annotations"][P + "heir"] = "ghost"
    [problem] = check(w, core.STEP_DRAIN, heir=None)
    assert problem["message"] == "node old: heir annotation names ghost, which does not exist"

    w = pair_world()
    w.nodes["new"]["metadata"]["annotations"][P + "donor"] = "someone-else"
    assert check(w, core.STEP_DRAIN)[0]["message"] == (
        "node old: heir annotation names new, whose donor annotation names someone-else; the pair is not mutual")

    w = pair_world()
    w.nodes["new"]["status"]["conditions"][0]["status"] = "False"
    assert codes(check(w, core.STEP_DRAIN)) == {"heir_not_ready"}

    w = pair_world()
    w.instances["G1"][1].group_id = "G2"           # the cloud lists the heir in another group
    assert check(w, core.STEP_DRAIN)[0]["message"] == "node old: its heir new is in scaling group G2, not in its group G1"

    w = pair_world()
    w.instances["G1"][1].image = OLD               # the heir's cache says NEW; the cloud says it runs OLD
    assert codes(check(w, core.STEP_DRAIN)) == {"heir_not_on_target"}

    w = pair_world()
    w.instances["G1"][0].image = NEW               # the donor's cache says OLD; the cloud says it is current
    assert codes(check(w, core.STEP_DRAIN)) == {"not_outdated"}

    w = pair_world()
    w.instances["G1"] = [i for i in w.instances["G1"] if i.node_name != "new"]
    assert codes(check(w, core.STEP_DRAIN)) == {"heir_instance_missing"}


def test_steps_after_the_drain_need_it_recorded_and_the_node_cordoned():
    w = pair_world("drained", cordoned=False)
    assert codes(check(w, core.STEP_NODE_DELETION)) == {"not_cordoned"}
    w = pair_world("drained", cordoned=True)
    w.nodes["old"]["metadata"]["annotations"].pop(P + "phase-history")
    assert codes(check(w, core.STEP_NODE_DELETION)) == {"phase_not_recorded"}
    # A worker is not deleted at phase paired, nor a control-plane node before its etcd member is removed.
    assert codes(check(pair_world("paired", cordoned=True), core.STEP_NODE_DELETION)) >= {"phase_order"}
    w = pair_world("drained", control_plane=True, cordoned=True)
    assert "phase_order" in codes(check(w, core.STEP_NODE_DELETION))
    # etcd removal is for control-plane nodes only, after the drain.
    assert "not_control_plane" in codes(check(pair_world("drained", cordoned=True), core.STEP_ETCD_REMOVAL))
    assert "phase_order" in codes(check(pair_world("paired", control_plane=True), core.STEP_ETCD_REMOVAL))
    # A drain comes before phase drained, never after.
    assert "phase_order" in codes(check(pair_world("drained", cordoned=True), core.STEP_DRAIN))


def test_instance_already_gone_is_no_problem_for_the_deletions_only():
    w = pair_world("drained", cordoned=True)
    w.instances["G1"] = [i for i in w.instances["G1"] if i.node_name != "old"]
    assert check(w, core.STEP_INSTANCE_DELETION) == [] and check(w, core.STEP_NODE_DELETION) == []
    w = pair_world()
    w.instances["G1"] = [i for i in w.instances["G1"] if i.node_name != "old"]
    assert codes(check(w, core.STEP_DRAIN)) == {"instance_missing"}


@pytest.mark.parametrize("history,code", [
    ("paired@garbage", "garbage_trail"),
    ("drained@1970-01-11T10:00:00Z,paired@1970-01-11T10:00:01Z", "phases_out_of_order"),
    ("paired@1970-01-11T10:00:05Z,draining@1970-01-11T10:00:01Z", "phases_out_of_order"),
    ("paired@2030-01-01T00:00:00Z", "phase_in_future"),
])
def test_phase_trails_that_this_collection_never_writes(history, code):
    w = pair_world()
    w.nodes["old"]["metadata"]["annotations"][P + "phase-history"] = history
    assert code in codes(core.annotation_problems(w.nodes["old"], KEYS, w.now))


def test_the_phase_must_be_the_last_recorded_one():
    w = pair_world("draining")
    w.nodes["old"]["metadata"]["annotations"][P + "phase"] = "deleting"
    assert "phase_not_recorded" in codes(core.annotation_problems(w.nodes["old"], KEYS, w.now))


def test_phase_patch_keeps_the_trail():
    node = pair_world().nodes["old"]
    patch = core.phase_patch(node, core.PHASE_DRAINING, core.Options(image=NEW), T0 + 10)
    entries, error = core.parse_trail(patch[P + "phase-history"])
    assert error is None and [p for p, _t in entries] == ["paired", "draining"]


# ----------------------------------------------------------------------------------- the measured cases

def test_garbage_heir_on_a_ready_worker_is_left_alone_and_named():
    w = World([group("G1", image=NEW)])
    w.add_node("busy", "G1", OLD, annotations={P + "heir": "garbage!!", P + "phase": "deleting"})
    result = w.plan(opts())
    assert destructive(result) == set() and result["plan"]["repairs"] == []
    assert left_alone(result) == {("busy", "garbage_heir"), ("busy", "phase_not_recorded")}
    assert "busy" not in result["node_patches"]
    assert "node busy: heir annotation holds 'garbage!!', which is not a node name" in result["nodes"]["invalid"][0]["reason"]


def test_missing_heir_with_phase_deleting_is_not_deleted():
    w = World([group("G1", image=NEW)])
    w.add_node("w1", "G1", OLD, annotations={P + "heir": "ghost", P + "phase": "deleting"})
    result = w.plan(opts())
    assert destructive(result) == set()
    assert ("w1", "phase_not_recorded") in left_alone(result)


def test_up_to_date_worker_marked_obsolete_by_someone_else_is_not_drained():
    w = World([group("G1", image=NEW)])
    w.add_node("busy", "G1", NEW, annotations={P + "obsolete": "true"})
    result = w.plan(opts())
    assert destructive(result) == set()
    assert left_alone(result) == {("busy", "obsolete_not_recorded")}


def test_old_worker_claiming_the_target_and_a_donor_does_not_get_that_donor_deleted():
    w = World([group("G1", image=NEW)])
    w.add_node("real-donor", "G1", OLD)
    w.add_node("claims", "G1", OLD, annotations={P + "node-image": NEW, P + "donor": "real-donor", P + "phase": "heir"})
    result = w.plan(opts())
    # The cloud wins: both are outdated, the claim is cleared, and nothing pairs the real donor with it.
    assert sorted(result["nodes"]["outdated"]) == ["claims", "real-donor"]
    assert ("claims", "cache_disagrees") in {(p["node"], p["code"]) for p in result["problems"]}
    assert result["plan"]["repairs"] == [{"name": "claims", "action": "clear", "donor": "real-donor"}]
    # Then both are replaced by new instances like any old node: a donor is drained only for a real heir.
    for _pass in range(30):
        result = w.plan(opts())
        for entry in result["plan"]["drain"]:
            assert entry["heir"] not in ("claims", "real-donor")
            assert core.same(w.instances["G1"][[i.node_name for i in w.instances["G1"]].index(entry["heir"])].image, NEW)
        if result["done"]:
            break
        w.apply(result)
        w.tick()
    assert result["done"] and "claims" not in w.nodes and "real-donor" not in w.nodes and len(w.nodes) == 2


def test_an_up_to_date_worker_named_as_heir_by_hand_is_not_made_one():
    w = World([group("G1", image=NEW)])
    w.add_node("old", "G1", OLD, annotations={P + "heir": "veteran"})
    w.add_node("veteran", "G1", NEW)             # long in service: its image is cached
    result = w.plan(opts())
    assert result["plan"]["repairs"] == [{"name": "old", "action": "unpair", "heir": "veteran"}]
    assert destructive(result) == set()


def test_a_heir_completes_its_half_pair_only_when_this_collection_wrote_it():
    w = World([group("G1", image=NEW)])
    w.add_node("old", "G1", OLD)
    w.add_node("new", "G1", NEW, annotations={P + "donor": "old"})     # no phase heir: not written by us
    result = w.plan(opts())
    assert result["plan"]["repairs"] == [{"name": "new", "action": "unpair", "donor": "old"}]


def test_surge_counts_instances_whose_deletion_was_requested_until_they_are_gone():
    w = World([group("G1", image=NEW)])
    for i in range(3):
        w.add_node("old-%d" % i, "G1", OLD)
    w.add_node("done-1", "G1", NEW, annotations={P + "phase": "replaced"})
    w.instances["G1"].append(Instance(provider_id="gce://p/z/lingering", node_name="lingering", group_id="G1",
                                      image=OLD, state=DELETING, created_at=w.now - 3600))
    result = w.plan(opts(max_surge=1))
    assert result["plan"]["create"] == []
    report = result["scaling_groups"][0]
    assert report["leaving"] == 1 and report["in_flight"] == 1
    assert result["plan"]["create_blocked"][0]["reason"] == "surge budget used (1 of 1 in flight)"
    w.instances["G1"] = [i for i in w.instances["G1"] if i.state != DELETING]   # the cloud no longer lists it
    assert w.plan(opts(max_surge=1))["plan"]["create"] == [{"group": "G1", "count": 1, "role": "worker"}]


def test_problem_heir_this_collection_created_keeps_its_slot_and_the_run_says_it_cannot_go_on():
    w = World([group("G1", image=NEW)])
    w.add_node("old-1", "G1", OLD)
    w.add_node("old-2", "G1", OLD, annotations={P + "heir": "h"})
    w.add_node("h", "G1", NEW, annotations=dict(trail("heir"), **{P + "donor": "old-2", P + "phase": "heir"}))
    w.nodes["h"]["metadata"]["annotations"][P + "phase-history"] = "heir@garbage"
    result = w.plan(opts(max_surge=1))
    assert ("h", "garbage_trail") in left_alone(result) and ("old-2", "partner_has_problem") in left_alone(result)
    assert destructive(result) == set()
    # Its trail is garbage, so it is not provably ours: it is part of the start and holds no slot.
    assert result["plan"]["create"] == [{"group": "G1", "count": 1, "role": "worker"}] and result["stop"] is None
    w.nodes["h"]["metadata"]["annotations"].update(trail("heir"))
    w.nodes["h"]["metadata"]["annotations"][P + "heir"] = "h"            # a self-reference on our heir
    result = w.plan(opts(max_surge=1))
    assert ("h", "self_heir") in left_alone(result)
    assert result["plan"]["create"] == []
    assert result["stop"].startswith("scaling group G1 cannot go on: surge budget held by node(s) left alone")


# ------------------------------------------------------------------------- generated corrupted annotations

GARBAGE = st.one_of(st.text(min_size=1, max_size=12), st.sampled_from(["garbage!!", "UPPER", "a/b", "-x", " ", "x" * 300]))


@st.composite
def corrupted_worlds(draw):
    """A cluster in the middle of an upgrade (consistent pairs at random phases), with corruption injected
    on some nodes: random garbage, self-references, cycles, pairs across groups, phases out of order and
    fake image claims."""
    groups = [group("G0", role="control-plane", image=NEW), group("G1", image=NEW), group("G2", image=NEW)]
    w = World(groups)
    for g in groups:
        cp = g.role == "control-plane"
        for j in range(draw(st.integers(1, 3))):
            w.add_node("%s-old%d" % (g.id.lower(), j), g.id, OLD, control_plane=cp)
        for j in range(draw(st.integers(0, 2))):
            donor, heir = "%s-old%d" % (g.id.lower(), j), "%s-new%d" % (g.id.lower(), j)
            if donor not in w.nodes:
                continue
            phase = draw(st.sampled_from(["paired", "draining", "drained"] + (["etcd-removed"] if cp else [])))
            phases = ["paired", "draining", "drained", "etcd-removed"]
            w.nodes[donor]["metadata"]["annotations"].update(dict(trail(*phases[:phases.index(phase) + 1]), **{
                P + "heir": heir, P + "phase": phase}))
            w.nodes[donor]["spec"]["unschedulable"] = phase != "paired"
            w.add_node(heir, g.id, NEW, control_plane=cp,
                       annotations=dict(trail("heir"), **{P + "donor": donor, P + "phase": "heir"}))
    names = sorted(w.nodes)
    corrupted = set()
    touched = set()
    for _i in range(draw(st.integers(1, 4))):
        name = draw(st.sampled_from(names))
        if name in touched:
            continue      # one corruption per node, so that a later one cannot undo an earlier one
        touched.add(name)
        ann = w.nodes[name]["metadata"]["annotations"]
        before_phase = ann.get(P + "phase")
        kind = draw(st.sampled_from(["garbage", "dangling", "self", "cycle", "across", "out_of_order", "fake_image",
                                     "fake_phase", "fake_obsolete"]))
        if kind == "garbage":
            # (A value that happens to be a node name is a dangling reference, not garbage: see "dangling".)
            ann[draw(st.sampled_from([P + "heir", P + "donor", P + "phase", P + "phase-history"]))] = draw(
                GARBAGE.filter(lambda v: not core.valid_node_name(v) and v.strip() not in core._TRAIL_RANK))
        elif kind == "dangling":
            # A reference to a node that does not exist: repaired (unpaired) or left alone, never acted on.
            ann[draw(st.sampled_from([P + "heir", P + "donor"]))] = "ghost"
            continue
        elif kind == "self":
            ann[draw(st.sampled_from([P + "heir", P + "donor"]))] = name
        elif kind == "cycle":
            other = draw(st.sampled_from([n for n in names if n not in touched] or [name]))
            touched.add(other)
            key = draw(st.sampled_from([P + "heir", P + "donor"]))
            ann[key] = other
            w.nodes[other]["metadata"]["annotations"][key] = name
            corrupted.add(other)
        elif kind == "across":
            others = [n for n in names if n.split("-")[0] != name.split("-")[0] and n not in touched]
            if not others:
                continue  # every node of the other groups is corrupted already: nothing to pair across with
            other = draw(st.sampled_from(others))
            touched.add(other)
            ann[P + "heir"] = other
            w.nodes[other]["metadata"]["annotations"][P + "donor"] = name
            corrupted.add(other)
        elif kind == "out_of_order":
            order = draw(st.permutations(["paired", "draining", "drained", "etcd-removed"]))
            if order == ["paired", "draining", "drained", "etcd-removed"]:
                continue  # in order after all
            ann.update(trail(*order))
        elif kind == "fake_image":
            ann[P + "node-image"] = draw(st.sampled_from([NEW, OLD]))
        elif kind == "fake_phase":
            ann[P + "phase"] = draw(st.sampled_from(list(core.DONOR_PHASES)))
        else:
            ann[P + "obsolete"] = "true"
        if kind == "fake_phase" and ann[P + "phase"] == before_phase:
            continue      # the same phase again: nothing was corrupted
        if kind != "fake_image":
            corrupted.add(name)
    return w, corrupted, draw(st.sampled_from([1, 2, "100%"]))


def assert_every_destructive_step_agrees(w, result):
    cloud, target = cloud_of(w), NEW
    plan = result["plan"]
    steps = [(d, (core.STEP_CORDON, core.STEP_DRAIN)) for d in plan["drain"]]
    steps += [(e, (core.STEP_ETCD_REMOVAL,)) for e in plan["etcd_remove"]]
    steps += [(d, (core.STEP_INSTANCE_DELETION, core.STEP_NODE_DELETION)) for d in plan["delete_nodes"]]
    for entry, names in steps:
        node = w.nodes[entry["name"]]
        heir = w.nodes.get(node["metadata"]["annotations"].get(P + "heir") or "")
        for step in names:
            assert core.CHECKS[step](node, heir, target, cloud, KEYS, w.now) == [], (entry, step)


@SETTINGS
@given(corrupted_worlds())
def test_no_corrupted_annotation_leads_to_a_destructive_action(case):
    w, corrupted, surge = case
    options = opts(max_surge=surge)
    before = {n: copy.deepcopy(w.nodes[n]) for n in corrupted}
    result = w.plan(options)
    assert not (destructive(result) & corrupted), [w.nodes[n]["metadata"]["annotations"] for n in destructive(result) & corrupted]
    assert_every_destructive_step_agrees(w, result)
    named = {p["node"] for p in result["problems"] if p["action"] == "left alone"}
    # Every corrupted node that is not simply an outdated or up-to-date node in the end is named.
    for name in corrupted - named:
        category = next(c for c, items in result["nodes"].items()
                        if name in [i["name"] if isinstance(i, dict) else i for i in items])
        assert category in (core.OUTDATED, core.UP_TO_DATE, core.DONOR, core.HEIR, core.INVALID), (name, category)
    # Passes on: corrupted nodes that were named are never touched, and nothing destructive disagrees.
    for _pass in range(8):
        result = w.plan(options)
        assert_every_destructive_step_agrees(w, result)
        w.apply(result)
        w.tick()
    for name in named & set(before):
        after = w.nodes.get(name)
        assert after is not None and (after["metadata"], after["spec"]) == (before[name]["metadata"], before[name]["spec"])
        assert name not in w.drained and name not in w.etcd_removed


@SETTINGS
@given(st.dictionaries(st.sampled_from([P + k for k in core.AnnotationKeys.NAMES]), GARBAGE, max_size=6),
       st.sampled_from(core.DESTRUCTIVE_STEPS), st.booleans())
def test_check_functions_refuse_random_garbage(annotations, step, control_plane):
    w = World([group("G1", image=NEW)])
    node = w.add_node("n", "G1", OLD, control_plane=control_plane)
    node["metadata"]["annotations"].update(annotations)
    node["spec"]["unschedulable"] = random.Random(len(annotations)).random() < 0.5
    problems = core.CHECKS[step](node, None, NEW, cloud_of(w), KEYS, w.now)
    # No heir exists, and no trail this collection wrote: nothing destructive may go ahead.
    assert problems and all(p["message"].startswith("node n: ") for p in problems)


def test_cloud_view_and_instances_running():
    inst = Instance(provider_id="GCE://p/z/A", node_name="a", group_id="G", image=NEW, state=RUNNING)
    view = core.CloudView([inst])
    assert view.instance(core.NodeInfo(name="a", provider_id="gce://p/z/a")) is inst


@pytest.mark.parametrize("text", [" ", ",", " , "])
def test_a_trail_with_no_entry_is_garbage(text):
    entries, error = core.parse_trail(text)
    assert entries == [] and "has no phase@time entry" in error
    w = pair_world("paired")
    w.nodes["old"]["metadata"]["annotations"][P + "phase-history"] = text
    result = w.plan(opts())
    assert ("old", "garbage_trail") in left_alone(result) and not destructive(result)
    assert core.parse_trail(None) == ([], None) and core.parse_trail("") == ([], None)


def test_an_outdated_node_with_a_stale_donor_annotation_is_paired_only_after_the_clear():
    """Pairing it in the pass that clears the stale half would write the new node's donor half first; a kill
    before the outdated node's patch would leave the two naming each other as donor."""
    w = World([group("G1", image=NEW)])
    w.add_node("new", "G1", NEW, cached=False)
    w.add_node("old", "G1", OLD, annotations={P + "donor": "new"})
    first = w.plan(opts())
    assert first["plan"]["pairs"] == [] and first["plan"]["obsolete"] == []
    assert {"name": "old", "action": "clear", "donor": "new"} in first["plan"]["repairs"]
    del w.nodes["old"]["metadata"]["annotations"][P + "donor"]           # the clear, written
    second = w.plan(opts())
    assert second["plan"]["pairs"] == [{"heir": "new", "donor": "old", "group": "G1", "reason": "the oldest outdated node of its group"}] and not second["problems"]
