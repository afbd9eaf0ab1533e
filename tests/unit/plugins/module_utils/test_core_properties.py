"""Property-based tests (hypothesis) of the planning core's invariants, on random worlds and random
interruptions: every node in exactly one group; the surge budget is never exceeded; no drain before the
heir is Ready; control plane before workers; re-planning after applying a plan never repeats an action;
re-planning from any interrupted state converges."""

import copy
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core

from core_world import NEW, OLD, Killed, World, group

P = core.DEFAULT_PREFIX + "/"
pytestmark = pytest.mark.timeout(300)
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def worlds(draw):
    """A cluster of 1-3 groups with old and new nodes, and random leftovers of interrupted runs."""
    n_groups = draw(st.integers(1, 3))
    has_cp = draw(st.booleans())
    groups = []
    for i in range(n_groups):
        role = "control-plane" if (has_cp and i == 0) else "worker"
        groups.append(group("G%d" % i, role=draw(st.sampled_from([role, None])) if role == "worker" else role,
                            image=draw(st.sampled_from([OLD, NEW]))))
    w = World(groups)
    names = []
    for g in groups:
        for j in range(draw(st.integers(0, 4))):
            name = "%s-n%d" % (g.id.lower(), j)
            names.append(name)
            w.add_node(name, g.id, draw(st.sampled_from([OLD, OLD, NEW])), control_plane=g.role == "control-plane",
                       ready=draw(st.booleans()), cached=draw(st.booleans()),
                       labels={"team": name} if draw(st.booleans()) else None)
    # Leftovers: dangling or crossed pairs, obsolete marks, phases, cordons.
    for name in names:
        ann = w.nodes[name]["metadata"]["annotations"]
        kind = draw(st.sampled_from(["none"] * 4 + ["heir", "donor", "obsolete", "phase"]))
        other = draw(st.sampled_from(names + ["ghost"]))
        if kind == "heir":
            ann[P + "heir"] = other
        elif kind == "donor":
            ann[P + "donor"] = other
        elif kind == "obsolete":
            ann[P + "obsolete"] = "true"
        elif kind == "phase":
            ann[P + "phase"] = draw(st.sampled_from(list(core.KNOWN_DONOR_PHASES) + ["heir", "replaced"]))
        if draw(st.booleans()):
            w.nodes[name]["spec"]["unschedulable"] = draw(st.booleans())
    surge = draw(st.sampled_from([1, 2, 3, "50%", "100%"]))
    total = draw(st.sampled_from([None, None, 1, 2, 4]))
    return w, core.Options(image=NEW.lower(), max_surge=surge, max_surge_total=total)


def check_invariants(w, result, options):
    # Every node in exactly one group.
    seen = []
    for category, items in result["nodes"].items():
        seen.extend(i["name"] if isinstance(i, dict) else i for i in items)
    assert sorted(seen) == sorted(w.nodes)
    # Budget: what is created never takes a group, or the cluster, above its limit.
    created = {c["group"]: c["count"] for c in result["plan"]["create"]}
    cp_created = 0
    for report in result["scaling_groups"]:
        count = created.get(report["id"], 0)
        if count:
            assert report["in_flight"] + count <= report["surge_limit"]
        if report["role"] == "control-plane":
            cp_created += count
            if count:
                assert sum(r["in_flight"] for r in result["scaling_groups"] if r["role"] == "control-plane") == 0
    assert cp_created <= 1
    if options.max_surge_total is not None and created:
        assert result["budget"]["in_flight"] + sum(created.values()) <= options.max_surge_total
    # No drain before the heir is Ready.
    for item in result["plan"]["drain"]:
        if item["reason"] == core.DONOR:
            heir = w.nodes[item["heir"]]
            assert heir["status"]["conditions"][0]["status"] == "True"
            assert heir["metadata"]["annotations"].get(P + "donor") == item["name"]
    # Control plane first.
    if result["budget"]["control_plane_first"]:
        assert all(c["role"] == "control-plane" for c in result["plan"]["create"])
    # Only obsolete or paired nodes are deleted or lose their etcd member.
    for item in result["plan"]["delete_nodes"] + result["plan"]["etcd_remove"]:
        ann = w.nodes[item["name"]]["metadata"]["annotations"]
        assert ann.get(P + "obsolete") == "true" or ann.get(P + "heir")


def untouched_partners(untouched, w):
    """Nodes whose heir or donor annotation names a node left alone, or that one names."""
    names = set(untouched)
    named = {u["metadata"]["annotations"].get(P + k) for u in untouched.values() for k in ("heir", "donor")}
    return {n for n, node in w.nodes.items()
            if {node["metadata"]["annotations"].get(P + "heir"), node["metadata"]["annotations"].get(P + "donor")} & names
            or n in named}


def action_keys(result):
    plan = result["plan"]
    keys = set()
    keys.update(("pair", p["heir"], p["donor"]) for p in plan["pairs"])
    keys.update(("repair", r["name"], r["action"]) for r in plan["repairs"])
    keys.update(("obsolete", n) for n in plan["obsolete"])
    keys.update(("annotate", a["name"]) for a in plan["annotate"])
    # From another donor it is another copy: a heir given to a worker that turned NotReady takes that one's labels.
    keys.update(("labels", c["heir"], c["donor"]) for c in plan["label_copies"])
    keys.update(("image", g["group"]) for g in plan["set_group_image"])
    keys.update(("drain", d["name"]) for d in plan["drain"])
    keys.update(("etcd", e["name"]) for e in plan["etcd_remove"])
    keys.update(("delete", d["name"]) for d in plan["delete_nodes"])
    keys.update(("delete-instance", d["provider_id"]) for d in plan["delete_instances"])
    keys.update(("uncordon", n) for n in plan["uncordon"])
    return keys


@SETTINGS
@given(worlds())
def test_invariants_hold_on_any_state(case):
    w, options = case
    result = w.plan(options)
    check_invariants(w, result, options)


@SETTINGS
@given(worlds())
def test_planning_again_after_applying_never_repeats_an_action(case):
    w, options = case
    first = w.plan(options)
    before = {g: {i.provider_id for i in insts} for g, insts in w.instances.items()}
    w.apply(first)
    second = w.plan(options)
    check_invariants(w, second, options)
    repeated = action_keys(first) & action_keys(second)
    assert not repeated, repeated
    # Instances already asked for fill the budget: no group gets more than its room again, unless the
    # pass itself gave room back (the executor finishes a drained donor or an obsolete node in the same
    # pass, and its instance no longer counts).
    freed = {g for g, ids in before.items() if ids - {i.provider_id for i in w.instances.get(g, [])}}
    created_first = {c["group"] for c in first["plan"]["create"]}
    for c in second["plan"]["create"]:
        assert c["group"] not in created_first - freed


def executor_pass(w, options, take=None):
    """One pass of the production executor on the world, with the plan it acted on checked first and the
    instances it created checked against that plan's budget. Returns the pass result (None when killed)."""
    ex = w.executor(options, take)
    facts, nodes = ex.read()
    check_invariants(w, facts, options)
    before = list(w.created)
    try:
        result = ex.run_pass(facts=facts, nodes=nodes)
    except Killed:
        result = None
    made = w.created[len(before):]
    for item in facts["plan"]["create"]:
        assert made.count(item["group"]) <= item["count"]
    assert set(made) <= {c["group"] for c in facts["plan"]["create"]}
    return result, facts


def finish(w, options, untouched=None):
    """Uninterrupted passes of the executor: it must finish, with every node on the image and nothing left,
    except the nodes left alone for a problem (`untouched`: their state when first seen), which must not
    have changed at all."""
    untouched = untouched or {}
    left_alone = set(untouched)
    limit = 12 * (len(w.nodes) + 2)
    for _pass in range(limit):
        result, facts = executor_pass(w, options)
        left_alone |= {p["node"] for p in facts["problems"] if p["action"] == "left alone"}
        if facts["done"]:
            break
        w.tick()
    else:
        raise AssertionError("no convergence in %d passes: %s" % (limit, facts["plan"]))
    for name, before in untouched.items():
        after = w.nodes.get(name)
        assert after is not None and (after["metadata"], after["spec"]) == (before["metadata"], before["spec"]), name
    # Problems come only from the leftovers (and their partners): this collection's own steps, however
    # interrupted, never cause one.
    assert left_alone <= set(untouched) | untouched_partners(untouched, w), left_alone
    held_pids = {w.nodes[n]["spec"]["providerID"].lower() for n in left_alone if n in w.nodes}
    for name, node in w.nodes.items():
        if name in left_alone:
            continue
        ann = node["metadata"]["annotations"]
        image = ann.get(P + "node-image")
        assert image is None or core.same(image, NEW), name
        assert ann.get(P + "obsolete") != "true" and not ann.get(P + "heir") and not ann.get(P + "donor")
    for items in w.instances.values():
        assert all(core.same(i.image, NEW) for i in items if i.provider_id.lower() not in held_pids)
    assert all(core.same(g.image, NEW) for g in w.groups.values())


@SETTINGS
@given(worlds(), st.integers(0, 2**31 - 1), st.integers(0, 6))
def test_replanning_from_any_interrupted_state_converges(case, seed, interrupted_passes):
    w, options = case
    rng = random.Random(seed)
    # Leftovers that are inconsistent (garbage, self-references, cycles, obsolete marks or phases this
    # collection did not record) are named problems, and those nodes are left exactly as they are.
    untouched = {p["node"]: copy.deepcopy(w.nodes[p["node"]]) for p in w.plan(options)["problems"]
                 if p["action"] == "left alone"}
    # Some passes of the executor killed at a random moment (each step may be where the playbook died).
    for _pass in range(interrupted_passes):
        executor_pass(w, options, take=lambda kind, item: rng.random() < 0.9)
        if rng.random() < 0.7:
            w.tick()
    finish(w, options, untouched)


@st.composite
def clean_worlds(draw):
    """A cluster before its upgrade: every node Ready, schedulable and on the old image, no leftovers."""
    n_groups = draw(st.integers(1, 3))
    has_cp = draw(st.booleans())
    groups = [group("G%d" % i, role="control-plane" if has_cp and i == 0 else "worker") for i in range(n_groups)]
    w = World(groups)
    for g in groups:
        for j in range(draw(st.integers(1 if g.role == "control-plane" else 0, 3))):
            w.add_node("%s-n%d" % (g.id.lower(), j), g.id, OLD, control_plane=g.role == "control-plane",
                       cached=draw(st.booleans()))
    surge = draw(st.sampled_from([1, 2, 3, "50%", "100%"]))
    total = draw(st.sampled_from([None, None, 1, 2, 4]))
    return w, core.Options(image=NEW.lower(), max_surge=surge, max_surge_total=total)


@SETTINGS
@given(clean_worlds(), st.integers(0, 2**31 - 1))
def test_executor_runs_keep_capacity_and_safety_even_when_killed(case, seed):
    """Whole runs of the executor's slices, killed at random moments and started again: the world's rules
    (no drain before the heir is Ready, etcd member removed before a control-plane deletion) hold at every
    step, capacity never drops below the start, and the run finishes."""
    w, options = case
    rng = random.Random(seed)
    start = w.capacity()
    cp_nodes = {n for n, node in w.nodes.items() if core.CONTROL_PLANE_LABEL in node["metadata"]["labels"]}

    def take(kind, item):
        assert w.capacity() >= start
        return rng.random() < 0.97

    for _slice in range(40 * (len(w.nodes) + 1)):
        ex = w.executor(options, take, poll=1.0)
        try:
            result = ex.run_slice(seconds=30)
        except Killed:
            w.tick()
            continue
        assert w.capacity() >= start
        if result["done"]:
            break
    else:
        raise AssertionError("the executor did not finish")
    assert w.capacity() >= start
    assert cp_nodes <= w.etcd_removed
    finish(w, options)
