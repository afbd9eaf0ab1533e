"""Unit tests of the marks on leaving nodes: the PreferNoSchedule taint on the nodes to be replaced (leaving_marks,
the executor's pass) and the hold out of the load balancers before a drained node goes (plan_leaving)."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core, leaving_marks, node_state, report

from core_world import NEW, OLD, World, group, make_node

P = core.DEFAULT_PREFIX + "/"
KEYS = core.AnnotationKeys(core.DEFAULT_PREFIX)
TAINT = {"key": P + "to-be-replaced", "value": "true", "effect": "PreferNoSchedule"}
pytestmark = pytest.mark.timeout(60)


def opts(**kw):
    kw.setdefault("image", NEW.lower())
    return core.Options(**kw)


def tainted(w):
    return sorted(n for n, node in w.nodes.items() if TAINT in (node["spec"].get("taints") or []))


# ------------------------------------------------------------------------------------------- the taint

def _nodes(**taints):
    nodes = {}
    for name, has in taints.items():
        node = make_node(name, "G1", OLD)
        node["spec"]["taints"] = [dict(TAINT)] if has else []
        nodes[name] = node
    return nodes


def test_taint_goes_on_nodes_to_be_replaced_and_off_every_node_that_stays():
    nodes = _nodes(old=False, donor=True, stays=True, fresh=False)
    facts = {"done": False, "nodes": {"outdated": ["old"], "donor": ["donor"], "up_to_date": ["stays", "fresh"]}}
    writes = leaving_marks.taint_writes(nodes, facts, KEYS, enabled=True)
    assert writes == {"old": {"taints": [TAINT], "expect": {}},
                      "stays": {"drop_taints": [P + "to-be-replaced"], "expect": {}}}


@pytest.mark.parametrize("enabled, done", [(False, False), (True, True)])
def test_taint_comes_off_everywhere_when_off_or_done(enabled, done):
    nodes = _nodes(old=True, other=False)
    facts = {"done": done, "nodes": {"outdated": ["old"]}}
    assert leaving_marks.taint_writes(nodes, facts, KEYS, enabled=enabled) == {"old": leaving_marks.untaint_entry(KEYS)}


def test_write_drops_only_our_taint_and_keeps_the_others():
    node = make_node("n", "G1", OLD)
    other = {"key": "team", "value": "a", "effect": "NoSchedule"}
    node["spec"]["taints"] = [other, dict(TAINT)]
    assert node_state.pending_changes(node, leaving_marks.untaint_entry(KEYS))[2] == [other]
    assert node_state.pending_changes(node, {"taints": [TAINT]})[2] is None   # already there: nothing to write
    node["spec"]["taints"] = [other]
    assert node_state.pending_changes(node, {"taints": [TAINT]})[2] == [other, TAINT]


def test_a_run_taints_every_node_to_replace_before_the_first_heir_and_none_is_left_at_the_end():
    w = World([group("G1"), group("G2")])
    for name, gid in (("a1", "G1"), ("a2", "G1"), ("b1", "G2")):
        w.add_node(name, gid, OLD)
    w.add_node("fresh", "G2", NEW)
    options = opts(max_surge=1)
    ex = w.executor(options, taint_to_be_replaced=True)
    first = ex.run_pass()
    assert tainted(w) == ["a1", "a2", "b1"]
    assert any(d["step"] == "create" for d in first["did"])
    journaled = {}
    for record in w.journal:
        report.merge(journaled, record)
    assert sorted(journaled["replacing_taints"]) == ["a1", "a2", "b1"]
    for _pass in range(80):
        result = ex.run_pass()
        # A heir never carries it, nor does the node on the image from the start.
        assert not set(tainted(w)) & (set(result["facts"]["nodes"]["up_to_date"]) | set(result["facts"]["nodes"]["heir"]))
        if result["facts"]["done"]:
            break
        w.tick()
    assert result["facts"]["done"] and tainted(w) == []


def test_a_node_taken_out_of_scope_gets_its_taint_off():
    w = World([group("G1"), group("G2")])
    w.add_node("a1", "G1", OLD)
    w.add_node("b1", "G2", OLD)
    w.executor(opts(), taint_to_be_replaced=True).run_pass()
    assert tainted(w) == ["a1", "b1"]
    w.executor(opts(), taint_to_be_replaced=True, scaling_groups=["G1"]).run_pass()
    assert tainted(w) == ["a1"]
    w.executor(opts(), taint_to_be_replaced=False, scaling_groups=["G1"]).run_pass()
    assert tainted(w) == []


def test_the_heir_never_takes_our_taint_even_with_copy_taints():
    donor_taints = [dict(TAINT), {"key": "team", "value": "a", "effect": "NoSchedule"}]
    options = opts(copy_taints=True)
    kept = core.taints_to_copy(donor_taints, [], options.taints_not_copied())
    assert kept == [{"key": "team", "value": "a", "effect": "NoSchedule"}]


# ---------------------------------------------------------------------------------- out of the load balancers

def _paired_donor():
    """old-1 paired with new-1, Ready: its drain is next."""
    w = World([group("G1", image=NEW)])
    w.add_node("old-1", "G1", OLD)
    w.add_node("new-1", "G1", NEW, annotations={P + "donor": "old-1", P + "phase": "heir"})
    w.nodes["old-1"]["metadata"]["annotations"][P + "heir"] = "new-1"
    w.record_phase("old-1", core.PHASE_PAIRED)
    return w


def _drained_donor(w, labelled_at=None):
    """old-1 drained, its heir new-1 Ready; labelled out of the load balancers at `labelled_at` (None: not labelled)."""
    w.add_node("old-1", "G1", OLD)
    w.add_node("new-1", "G1", NEW, annotations={P + "donor": "old-1", P + "phase": "heir"})
    node = w.nodes["old-1"]
    node["metadata"]["annotations"][P + "heir"] = "new-1"
    node["spec"]["unschedulable"] = True
    w.record_phase("old-1", core.PHASE_DRAINED)
    if labelled_at is not None:
        node["metadata"]["labels"][core.LB_EXCLUDE_LABEL] = ""
        node["metadata"]["annotations"][P + "lb-excluded-since"] = core.format_time(labelled_at)


def _created(w):
    return {i.provider_id.lower(): {"group": i.group_id} for items in w.instances.values() for i in items
            if i.node_name == "new-1"}


def test_a_drained_donor_stays_until_it_was_out_of_the_load_balancers_long_enough():
    w = World([group("G1", image=NEW)])
    _drained_donor(w, labelled_at=w.now - 10)
    held = w.plan(opts(lb_drain_seconds=30), created=_created(w))
    assert held["plan"]["delete_nodes"] == [] and held["plan"]["exclude_from_lb"] == []
    assert held["plan"]["waiting_for_lb"] == [{"name": "old-1", "since": core.format_time(w.now - 10),
                                               "until": core.format_time(w.now + 20)}]
    w.now += 20
    released = w.plan(opts(lb_drain_seconds=30), created=_created(w))
    assert [d["name"] for d in released["plan"]["delete_nodes"]] == ["old-1"] and released["plan"]["waiting_for_lb"] == []
    # 0: no label and no hold.
    assert [d["name"] for d in w.plan(opts(), created=_created(w))["plan"]["delete_nodes"]] == ["old-1"]


def test_a_donor_drained_without_the_label_gets_it_first_and_its_hold_counts_from_then():
    w = World([group("G1", image=NEW)])
    _drained_donor(w)
    plan = w.plan(opts(lb_drain_seconds=30), created=_created(w))["plan"]
    assert plan["exclude_from_lb"] == ["old-1"] and plan["delete_nodes"] == []
    assert plan["waiting_for_lb"] == [{"name": "old-1", "since": None, "until": None}]
    entry = leaving_marks.lb_exclusion_entry(w.nodes["old-1"], KEYS, w.now)
    assert entry["labels"] == {core.LB_EXCLUDE_LABEL: ""}
    assert entry["annotations"] == {P + "lb-excluded-since": core.format_time(w.now)}
    w.patch_node("old-1", entry)
    # A resumed run keeps the recorded moment: nothing to write again.
    w.now += 100
    assert leaving_marks.lb_exclusion_entry(w.nodes["old-1"], KEYS, w.now) == {"labels": {}, "annotations": {}, "expect": {}}


def test_a_donor_to_drain_is_labelled_before_its_drain_and_released_when_it_stays():
    w = _paired_donor()
    plan = w.plan(opts(lb_drain_seconds=30), created=_created(w))["plan"]
    assert [d["name"] for d in plan["drain"]] == ["old-1"] and plan["exclude_from_lb"] == ["old-1"]
    w.patch_node("old-1", leaving_marks.lb_exclusion_entry(w.nodes["old-1"], KEYS, w.now))
    assert leaving_marks.lb_release_entry(w.nodes["old-1"], KEYS) == {
        "labels": {core.LB_EXCLUDE_LABEL: None}, "annotations": {P + "lb-excluded-since": None}, "expect": {}}
    assert leaving_marks.lb_release_entry(make_node("other", "G1", OLD), KEYS) is None


def test_lb_drain_seconds_is_checked():
    with pytest.raises(core.PlanInputError, match="lb_drain_seconds"):
        opts(lb_drain_seconds=-1).validate()


# ---------------------------------------------------------------------------------- evictions in the report

def test_report_counts_evictions_per_pod_and_per_owner():
    journal = {}
    report.merge(journal, {"nodes": {
        "a": {"evicted": ["ns/web-1", "ns/db-0"], "evicted_owners": {"ns/web-1": "ns/ReplicaSet/web-x", "ns/db-0": "ns/StatefulSet/db"}},
        "b": {"evicted": ["ns/web-2", "ns/db-0"], "evicted_owners": {"ns/web-2": "ns/ReplicaSet/web-x", "ns/db-0": "ns/StatefulSet/db"}}}})
    counted = report.summarize(journal)["evictions"]
    assert counted == {"by_name": {"ns/db-0": 2, "ns/web-1": 1, "ns/web-2": 1},
                       "by_owner": {"ns/ReplicaSet/web-x": 2, "ns/StatefulSet/db": 2}, "most_by_name": 2}
    markdown = report.render_markdown(report.summarize(journal))
    assert "| ns/ReplicaSet/web-x | 2 |" in markdown and "| ns/StatefulSet/db | 2 |" in markdown
    assert "Pods evicted more than once: ns/db-0 (2)" in markdown


def test_a_report_with_each_pod_moved_once_says_so_and_one_without_evictions_has_no_section():
    journal = {}
    report.merge(journal, {"nodes": {"a": {"evicted": ["ns/web-1"], "evicted_owners": {"ns/web-1": "ns/ReplicaSet/web-x"}}}})
    assert "Pods evicted more than once: none" in report.render_markdown(report.summarize(journal))
    assert "Evictions per owner" not in report.render_markdown(report.summarize({"nodes": {"b": {}}}))


# ---------------------------------------------------------------------------------------------------- the canary

def _creations(result):
    return sum(c["count"] for c in result["plan"]["create"])


def test_the_canary_holds_a_group_at_one_until_its_first_replacement_is_done_and_soaked():
    w = World([group("G1", image=NEW)])
    for number in range(4):
        w.add_node("old-%d" % number, "G1", OLD)
    options = opts(max_surge=3, canary=True, canary_soak_seconds=30)
    first = w.plan(options)
    assert _creations(first) == 1
    assert [b["reason"] for b in first["plan"]["create_blocked"]] == []
    history = []
    for _pass in range(40):
        result = w.plan(options)
        history.append((w.now, result["budget"]["in_flight"], result["progress"]["done"]))
        if result["progress"]["done"] >= 1 and result["budget"]["in_flight"] > 1:
            break
        w.apply(result)
        w.tick()
    in_flight = [f for _t, f, _d in history]
    # One in flight until the first replacement was done, then the full surge.
    done_at = next(i for i, (_t, _f, d) in enumerate(history) if d >= 1)
    assert max(in_flight[:done_at]) == 1 and in_flight[-1] > 1, history
    # ... and not before its heir had been Ready for the soak.
    replaced = [s for s in w.nodes.values() if s["metadata"]["annotations"].get(P + "phase") == "replaced"]
    ready_since = core.parse_time(replaced[0]["status"]["conditions"][0]["lastTransitionTime"])
    assert history[-1][0] - ready_since >= 30, (history[-1], ready_since)


def test_the_canary_says_why_it_holds_and_is_off_at_surge_one_or_when_disabled():
    w = World([group("G1", image=NEW)])
    for number in range(4):
        w.add_node("old-%d" % number, "G1", OLD)
    w.apply(w.plan(opts(max_surge=3, canary=True)))
    held = w.plan(opts(max_surge=3, canary=True))
    assert held["plan"]["create"] == []
    assert held["plan"]["create_blocked"][0]["reason"].startswith("canary: the group's first replacement goes alone")
    assert _creations(w.plan(opts(max_surge=3))) == 2
    fresh = World([group("G1", image=NEW)])
    for number in range(4):
        fresh.add_node("old-%d" % number, "G1", OLD)
    assert _creations(fresh.plan(opts(max_surge=1, canary=True))) == 1
    assert _creations(fresh.plan(opts(max_surge=3))) == 3


def test_the_executor_labels_before_the_drain_and_deletes_only_after_the_hold():
    w = _paired_donor()
    ex = w.executor(opts(lb_drain_seconds=10), created=_created(w))
    first = ex.run_pass()
    steps = [(d["step"], d.get("name")) for d in first["did"]]
    assert steps.index(("exclude_from_lb", "old-1")) < steps.index(("drain", "old-1")), steps
    assert "old-1" in w.nodes and core.LB_EXCLUDE_LABEL in w.nodes["old-1"]["metadata"]["labels"]
    labelled_at = w.now
    while "old-1" in w.nodes:
        result = ex.run_pass()
        if "old-1" in w.nodes:
            assert [h["name"] for h in result["facts"]["plan"]["waiting_for_lb"]] == ["old-1"]
            # The wait ends when the hold does, not a poll later.
            assert ex.wait_seconds(result) <= labelled_at + 10 - w.now + 0.1
            w.now += 1
    assert w.now - labelled_at >= 10


def _heir_ready_since(w, moment):
    w.nodes["new-1"]["status"]["conditions"][0]["lastTransitionTime"] = core.format_time(moment)


def test_a_donor_leaves_the_load_balancers_when_its_heir_turns_ready_and_goes_in_the_pass_that_drains_it():
    w = _paired_donor()
    options = opts(lb_drain_seconds=10, heir_ready_seconds=30)
    _heir_ready_since(w, w.now)
    ex = w.executor(options, created=_created(w))
    first = ex.run_pass()
    # The heir's gate still runs: no drain yet, but out of the load balancers already.
    assert [(d["step"], d.get("name")) for d in first["did"]] == [("exclude_from_lb", "old-1")]
    assert first["facts"]["plan"]["exclude_from_lb"] == ["old-1"]
    assert [h["name"] for h in first["facts"]["plan"]["waiting_for_heir"]] == ["old-1"]
    assert not w.nodes["old-1"]["spec"].get("unschedulable")
    w.now += 30.1
    second = ex.run_pass()
    # The hold ran under the gate: drained, and its instance and Node gone in the same pass.
    steps = [d["step"] for d in second["did"] if d.get("name") == "old-1"]
    assert "drain" in steps and "old-1" not in w.nodes, second["did"]
    assert second["facts"]["plan"]["waiting_for_lb"] == []


def test_a_donor_whose_heir_is_not_ready_or_paired_in_this_pass_stays_in_the_load_balancers():
    w = _paired_donor()
    w.nodes["new-1"]["status"]["conditions"][0]["status"] = "False"
    plan = w.plan(opts(lb_drain_seconds=10, heir_ready_seconds=30), created=_created(w))["plan"]
    assert plan["exclude_from_lb"] == [] and [h["name"] for h in plan["waiting_for_heir"]] == ["old-1"]
    # A pair this plan forms waits for its write before anything else.
    fresh = World([group("G1", image=NEW)])
    fresh.add_node("old-1", "G1", OLD)
    fresh.add_node("new-1", "G1", NEW)
    plan = fresh.plan(opts(lb_drain_seconds=10, heir_ready_seconds=30),
                      created=_created(fresh))["plan"]
    assert [(p["donor"], p["heir"]) for p in plan["pairs"]] == [("old-1", "new-1")] and plan["exclude_from_lb"] == []
    # With lb_drain_seconds 0 no label is set at all.
    _heir_ready_since(w, w.now)
    w.nodes["new-1"]["status"]["conditions"][0]["status"] = "True"
    assert w.plan(opts(heir_ready_seconds=30), created=_created(w))["plan"]["exclude_from_lb"] == []


def test_a_donor_out_of_the_load_balancers_whose_pair_breaks_before_its_drain_goes_back_in():
    w = _paired_donor()
    options = opts(lb_drain_seconds=10, heir_ready_seconds=30)
    _heir_ready_since(w, w.now)
    ex = w.executor(options, created=_created(w))
    ex.run_pass()
    assert core.LB_EXCLUDE_LABEL in w.nodes["old-1"]["metadata"]["labels"]
    # The cloud takes the heir away before the gate ends: the pair breaks, the donor serves on.
    w.delete_instance(w.instance_of("new-1").provider_id)
    w.nodes.pop("new-1")
    result = ex.run_pass()
    assert result["facts"]["plan"]["lb_release"] == ["old-1"]
    assert ("lb_release", "old-1") in [(d["step"], d.get("name")) for d in result["did"]]
    meta = w.nodes["old-1"]["metadata"]
    assert core.LB_EXCLUDE_LABEL not in meta["labels"] and P + "lb-excluded-since" not in meta["annotations"]
    assert not w.nodes["old-1"]["spec"].get("unschedulable")
    # Once released, nothing more to do.
    assert ex.run_pass()["facts"]["plan"]["lb_release"] == []
