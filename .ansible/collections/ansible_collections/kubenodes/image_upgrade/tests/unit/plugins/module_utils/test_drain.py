"""Unit tests of the pure drain core: pod classification, selectors, PDB attribution and prediction,
backoff, reason codes."""

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import drain as core

pytestmark = pytest.mark.timeout(60)


def make_pod(name, namespace="app", owner_kind="ReplicaSet", labels=None, phase="Running", emptydir=False,
             mirror=False, terminating=False):
    meta = {"name": name, "namespace": namespace, "labels": labels or {}}
    if owner_kind:
        meta["ownerReferences"] = [{"kind": owner_kind, "name": "owner-" + name, "controller": True}]
    if mirror:
        meta["annotations"] = {core.MIRROR_ANNOTATION: "abc"}
    if terminating:
        meta["deletionTimestamp"] = "2026-11-30T04:00:00Z"
    volumes = [{"name": "scratch", "emptyDir": {}}] if emptydir else [{"name": "cfg", "configMap": {"name": "x"}}]
    return {"metadata": meta, "spec": {"volumes": volumes}, "status": {"phase": phase}}


def make_pdb(name, namespace="app", selector=None, allowed=0):
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"selector": selector},
            "status": {"disruptionsAllowed": allowed}}


DEFAULTS = core.DrainOptions()


# -- classification --------------------------------------------------------------------------------


def test_managed_pod_is_evicted():
    decision = core.classify_pod(make_pod("web-1"), DEFAULTS)
    assert (decision.action, decision.key) == (core.EVICT, ("app", "web-1"))


def test_mirror_pod_is_skipped_even_with_force():
    decision = core.classify_pod(make_pod("etcd-n1", owner_kind="Node", mirror=True), core.DrainOptions(force=True))
    assert decision.action == core.SKIP and decision.causes == [core.CAUSE_MIRROR]


def test_daemonset_pod_skipped_by_default_and_refused_when_not_ignored():
    pod = make_pod("proxy-x", owner_kind="DaemonSet")
    assert core.classify_pod(pod, DEFAULTS).action == core.SKIP
    refused = core.classify_pod(pod, core.DrainOptions(ignore_daemonsets=False))
    assert refused.action == core.REFUSE and refused.causes == [core.CAUSE_DAEMONSET]
    assert "ignore_daemonsets" in refused.message


def test_daemonset_pod_with_emptydir_is_only_a_daemonset_pod():
    # kubernetes.core#622: such a pod must be left alone, not evicted for its emptyDir.
    pod = make_pod("logs-x", owner_kind="DaemonSet", emptydir=True)
    decision = core.classify_pod(pod, core.DrainOptions(delete_emptydir_data=True))
    assert decision.action == core.SKIP and decision.causes == [core.CAUSE_DAEMONSET]


def test_unmanaged_pod_refused_unless_force():
    pod = make_pod("bare", owner_kind=None)
    refused = core.classify_pod(pod, DEFAULTS)
    assert refused.action == core.REFUSE and refused.causes == [core.CAUSE_UNMANAGED]
    assert "force=true" in refused.message
    assert core.classify_pod(pod, core.DrainOptions(force=True)).action == core.EVICT


def test_owner_reference_without_controller_flag_is_unmanaged():
    pod = make_pod("half", owner_kind=None)
    pod["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs", "controller": False}]
    assert core.classify_pod(pod, DEFAULTS).causes == [core.CAUSE_UNMANAGED]


def test_emptydir_refused_unless_allowed():
    pod = make_pod("cache", emptydir=True)
    refused = core.classify_pod(pod, DEFAULTS)
    assert refused.action == core.REFUSE and refused.causes == [core.CAUSE_LOCAL_STORAGE]
    assert core.classify_pod(pod, core.DrainOptions(delete_emptydir_data=True)).action == core.EVICT


def test_unmanaged_pod_with_emptydir_names_both_causes():
    refused = core.classify_pod(make_pod("both", owner_kind=None, emptydir=True), DEFAULTS)
    assert refused.causes == [core.CAUSE_UNMANAGED, core.CAUSE_LOCAL_STORAGE]
    assert core.classify_pod(make_pod("both", owner_kind=None, emptydir=True),
                             core.DrainOptions(force=True)).causes == [core.CAUSE_LOCAL_STORAGE]


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_finished_pods_go_even_unmanaged_with_emptydir(phase):
    pod = make_pod("job", owner_kind=None, emptydir=True, phase=phase)
    assert core.classify_pod(pod, DEFAULTS).action == core.EVICT


def test_terminating_pod_is_waited_for_not_evicted():
    decision = core.classify_pod(make_pod("going", owner_kind=None, terminating=True), DEFAULTS)
    assert decision.action == core.TERMINATING


def test_classify_pods_sorted_by_namespace_and_name():
    pods = [make_pod("b", "z"), make_pod("a", "z"), make_pod("c", "a")]
    assert [d.key for d in core.classify_pods(pods, DEFAULTS)] == [("a", "c"), ("z", "a"), ("z", "b")]


# -- label selectors --------------------------------------------------------------------------------


@pytest.mark.parametrize("selector", [
    "app=web", "app==web", "app!=csi-attacher", "tier", "!tier", "env in (prod, staging)", "env notin (dev)",
    "example.com/role=db,app", "a=b,c!=d,e in (f,g),!h", "app=", "count>3", "count<10",
    "k8s.io/app.kubernetes.io_x=v",
])
def test_valid_selectors(selector):
    core.validate_label_selector(selector)


@pytest.mark.parametrize("selector", [
    "", "app=web,", "=web", "app=we b", "env in (prod", "env in ()", "app===web", "-bad=x", "app=web)",
    "Example.COM/x=y", "count>abc", "a" * 64 + "=x", "app=(x)",
])
def test_malformed_selectors(selector):
    with pytest.raises(core.SelectorError):
        core.validate_label_selector(selector)


def test_join_selectors_validates_each():
    assert core.join_selectors(["app=web", " tier!=db "]) == "app=web,tier!=db"
    assert core.join_selectors(None) is None
    assert core.join_selectors([]) is None
    with pytest.raises(core.SelectorError, match="'=x'"):
        core.join_selectors(["app=web", "=x"])


@pytest.mark.parametrize("selector,labels,expected", [
    (None, {"app": "web"}, False),
    ({}, {"app": "web"}, True),
    ({"matchLabels": {"app": "web"}}, {"app": "web", "x": "y"}, True),
    ({"matchLabels": {"app": "web"}}, {"app": "db"}, False),
    ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["a", "b"]}]}, {"env": "b"}, True),
    ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["a"]}]}, {}, False),
    ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["a"]}]}, {}, True),
    ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["a"]}]}, {"env": "a"}, False),
    ({"matchExpressions": [{"key": "env", "operator": "Exists"}]}, {"env": ""}, True),
    ({"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]}, {"env": ""}, False),
    ({"matchExpressions": [{"key": "env", "operator": "Gt", "values": ["1"]}]}, {"env": "2"}, False),
])
def test_selector_matches(selector, labels, expected):
    assert core.selector_matches(selector, labels) is expected


def test_dns_subdomain():
    assert core.is_dns_subdomain("image-upgrade.kubenodes.io")
    assert not core.is_dns_subdomain("kubenodes.image_upgrade")
    assert not core.is_dns_subdomain("")
    assert not core.is_dns_subdomain(None)


# -- PDB attribution --------------------------------------------------------------------------------


def test_pdbs_for_pod_same_namespace_only():
    pod = make_pod("web-1", labels={"app": "web"})
    pdbs = [make_pdb("web", selector={"matchLabels": {"app": "web"}}),
            make_pdb("web", namespace="other", selector={"matchLabels": {"app": "web"}}),
            make_pdb("db", selector={"matchLabels": {"app": "db"}})]
    assert [core.pdb_key(p) for p in core.pdbs_for_pod(pod, pdbs)] == [("app", "web")]


def test_blocker_names_pdb_and_budget_on_429():
    pod = make_pod("web-1", labels={"app": "web"})
    pdbs = [make_pdb("web", selector={"matchLabels": {"app": "web"}}, allowed=0)]
    entry = core.blocker(pod, pdbs, "Cannot evict pod as it would violate the pod's disruption budget.",
                         ["The disruption budget web needs 2 healthy pods and has 2 currently"], 429)
    assert entry == dict(pod="web-1", namespace="app", pdb="web", disruptions_allowed=0, cause=core.BLOCK_PDB,
                         message="Cannot evict pod as it would violate the pod's disruption budget.")


def test_blocker_uses_name_from_cause_when_pdbs_unreadable():
    pod = make_pod("web-1", labels={"app": "web"})
    entry = core.blocker(pod, None, "Cannot evict", ["The disruption budget web-pdb is still being processed by the server."], 429)
    assert (entry["pdb"], entry["disruptions_allowed"], entry["cause"]) == ("web-pdb", None, core.BLOCK_PDB)


def test_blocker_multiple_pdbs():
    pod = make_pod("web-1", labels={"app": "web", "tier": "front"})
    pdbs = [make_pdb("by-app", selector={"matchLabels": {"app": "web"}}, allowed=3),
            make_pdb("by-tier", selector={"matchLabels": {"tier": "front"}}, allowed=1)]
    entry = core.blocker(pod, pdbs, "This pod has more than one PodDisruptionBudget", [], 500)
    assert entry["cause"] == core.BLOCK_MULTIPLE_PDBS
    assert entry["pdb"] == "by-app, by-tier" and entry["disruptions_allowed"] == 1


def test_blocker_without_pdb_is_api_error():
    entry = core.blocker(make_pod("web-1"), [], "Internal error", [], 500)
    assert (entry["cause"], entry["pdb"]) == (core.BLOCK_API_ERROR, None)
    # A 429 from API priority and fairness, with no PDB in sight, is not blamed on a PDB.
    assert core.blocker(make_pod("web-1"), [], "Too many requests", [], 429)["cause"] == core.BLOCK_API_ERROR


# -- prediction (check mode) ------------------------------------------------------------------------


def test_predict_spends_budget_in_order():
    pdbs = [make_pdb("web", selector={"matchLabels": {"app": "web"}}, allowed=1)]
    pods = [make_pod("web-%d" % i, labels={"app": "web"}) for i in range(3)] + [make_pod("free")]
    accepted, blocked = core.predict_evictions(pods, pdbs)
    assert [core.pod_key(p)[1] for p in accepted] == ["web-0", "free"]
    assert [(b["pod"], b["pdb"], b["disruptions_allowed"], b["cause"]) for b in blocked] == [
        ("web-1", "web", 1, core.BLOCK_PDB), ("web-2", "web", 1, core.BLOCK_PDB)]
    assert "would be refused" in blocked[0]["message"]


def test_predict_pending_pods_ignore_pdb():
    pdbs = [make_pdb("web", selector={}, allowed=0)]
    accepted, blocked = core.predict_evictions([make_pod("p", phase="Pending")], pdbs)
    assert len(accepted) == 1 and blocked == []


def test_predict_multiple_pdbs_blocked():
    pdbs = [make_pdb("a", selector={}, allowed=5), make_pdb("b", selector={}, allowed=5)]
    accepted, blocked = core.predict_evictions([make_pod("p")], pdbs)
    assert accepted == [] and blocked[0]["cause"] == core.BLOCK_MULTIPLE_PDBS


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.booleans()), max_size=30),
       st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(min_value=0, max_value=5)))
def test_predict_never_exceeds_any_budget(pod_specs, budgets):
    pdbs = [make_pdb("pdb-" + app, selector={"matchLabels": {"app": app}}, allowed=n) for app, n in budgets.items()]
    pods = [make_pod("p%d" % i, labels={"app": app}, phase="Running" if running else "Pending")
            for i, (app, running) in enumerate(pod_specs)]
    accepted, blocked = core.predict_evictions(pods, pdbs)
    assert len(accepted) + len(blocked) == len(pods)
    for app, allowed in budgets.items():
        running_accepted = [p for p in accepted if p["metadata"]["labels"]["app"] == app and p["status"]["phase"] == "Running"]
        assert len(running_accepted) <= allowed
        running = [p for p in pods if p["metadata"]["labels"]["app"] == app and p["status"]["phase"] == "Running"]
        assert len(running_accepted) == min(allowed, len(running))
    assert all(b["pdb"] == "pdb-" + b["pdb"][4:] for b in blocked)


# -- backoff and reasons ----------------------------------------------------------------------------


def test_backoff_grows_to_cap():
    delays = [core.backoff_delay(n, initial=0.5, cap=5) for n in range(8)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0]


def test_backoff_honours_retry_after_up_to_cap():
    assert core.backoff_delay(0, initial=0.5, cap=5, retry_after=3) == 3
    assert core.backoff_delay(0, initial=0.5, cap=5, retry_after=10) == 5
    assert core.backoff_delay(4, initial=0.5, cap=5, retry_after=1) == 5


@given(st.integers(min_value=-5, max_value=10000), st.floats(min_value=0.01, max_value=60))
def test_backoff_bounded(attempt, cap):
    delay = core.backoff_delay(attempt, cap=cap)
    assert 0 <= delay <= cap


def test_clip_to_deadline():
    assert core.clip_to_deadline(5, now=100, deadline=102) == 2
    assert core.clip_to_deadline(5, now=100, deadline=90) == 0
    assert core.clip_to_deadline(1, now=100, deadline=200) == 1


def test_pass_reason():
    assert core.pass_reason([], [], []) == core.REASON_DRAINED
    assert core.pass_reason([], [], [{"pod": "x"}]) == core.REASON_EVICTING
    assert core.pass_reason([], [{"cause": core.BLOCK_PDB}], []) == core.REASON_PDB_BLOCKED
    assert core.pass_reason([], [{"cause": core.BLOCK_API_ERROR}], []) == core.REASON_EVICTION_FAILED
    assert core.pass_reason(["x"], [], []) == core.REASON_PODS_REFUSED


def test_describe_remaining_names_pod_pdb_and_budget():
    lines = core.describe_remaining(
        [dict(pod="db-0", namespace="shop", pdb="db", disruptions_allowed=0, message="Cannot evict", cause="pdb")],
        [dict(pod="web-1", namespace="shop", status="terminating")])
    assert lines == ["shop/db-0 blocked by PodDisruptionBudget shop/db (disruptionsAllowed=0): Cannot evict",
                     "shop/web-1 terminating"]


# -- one eviction round -----------------------------------------------------------------------------


def healthy(pod):
    pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return pod


def test_is_healthy_needs_running_and_ready():
    assert core.is_healthy(healthy(make_pod("a")))
    assert not core.is_healthy(make_pod("a"))
    assert not core.is_healthy(healthy(make_pod("a", phase="Pending")))


def test_plan_round_sends_budget_plus_one_probe_per_spent_pdb():
    pdbs = [make_pdb("web", selector={"matchLabels": {"app": "web"}}, allowed=2),
            make_pdb("db", selector={"matchLabels": {"app": "db"}}, allowed=0)]
    pods = ([healthy(make_pod("web-%d" % i, labels={"app": "web"})) for i in range(5)]
            + [healthy(make_pod("db-%d" % i, labels={"app": "db"})) for i in range(3)]
            + [healthy(make_pod("free"))] + [make_pod("web-sick", labels={"app": "web"})])
    to_send, held_back = core.plan_round(pods, pdbs)
    sent = [core.pod_key(p)[1] for p in to_send]
    assert sent == ["db-0", "free", "web-0", "web-1", "web-2", "web-sick"]
    assert [core.pod_key(p)[1] for p in held_back] == ["db-1", "db-2", "web-3", "web-4"]


def test_plan_round_sends_everything_when_pdbs_are_unreadable():
    pods = [healthy(make_pod("b")), healthy(make_pod("a"))]
    to_send, held_back = core.plan_round(pods, None)
    assert [core.pod_key(p)[1] for p in to_send] == ["a", "b"] and held_back == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", None]), max_size=40),
       st.dictionaries(st.sampled_from(["a", "b"]), st.integers(min_value=0, max_value=4)))
def test_plan_round_partitions_and_bounds_requests(apps, budgets):
    pdbs = [make_pdb("pdb-" + app, selector={"matchLabels": {"app": app}}, allowed=n) for app, n in budgets.items()]
    pods = [healthy(make_pod("p%02d" % i, labels={"app": app} if app else {})) for i, app in enumerate(apps)]
    to_send, held_back = core.plan_round(pods, pdbs)
    assert sorted(map(core.pod_key, to_send + held_back)) == sorted(map(core.pod_key, pods))
    for app, allowed in budgets.items():
        protected = [p for p in pods if p["metadata"]["labels"].get("app") == app]
        sent = [p for p in to_send if p["metadata"]["labels"].get("app") == app]
        # the budget, plus one probe when the budget does not cover every pod
        assert len(sent) == min(len(protected), allowed + 1)
    unprotected = [p for p in pods if p["metadata"]["labels"].get("app") not in budgets]
    assert all(p in to_send for p in unprotected)
