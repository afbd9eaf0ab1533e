"""node_drain through ansible-playbook against the sandbox: a real kube-apiserver, the real disruption,
ReplicaSet, Deployment and DaemonSet controllers and scheduler, and simulated kubelets that run pods
and finish terminating ones. Nodes are created through the node simulator (fixture new_nodes), each
test in its own scaling group so its workloads land only on its own nodes."""

import time

import pytest

from ansible_run import run_module, run_playbook
from drain_helpers import (
    create_bare_pod,
    create_daemonset,
    create_deployment,
    create_pdb,
    is_cordoned,
    node,
    pods,
    pods_on,
    running_ready,
    unique_group,
    wait_pdb_observed,
    wait_running_on,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ANNOTATION = "image-upgrade.kubenodes.io/drain-started"


def drain(sandbox, node_name, check=False, diff=False, **args):
    return run_module("node_drain", dict(sandbox.auth_args(), name=node_name, **args), check=check, diff=diff,
                      timeout=300)


def names(entries):
    return sorted(e["pod"] for e in entries)


@pytest.fixture
def kube(sandbox):
    return sandbox.kube()


def test_min_available_pods_are_evicted_one_by_one_and_rescheduled(sandbox, kube, namespace, new_nodes):
    group = unique_group()
    [donor] = new_nodes(1, group=group)
    create_deployment(kube, namespace, "web", 3, group)
    create_pdb(kube, namespace, "web", {"app": "web"}, min_available=2)
    wait_running_on(kube, namespace, donor, 3)
    wait_pdb_observed(kube, namespace, "web", 1)
    before = names([{"pod": p["metadata"]["name"]} for p in pods_on(kube, namespace, donor)])

    # One pass, with no other node yet: the budget lets exactly one eviction through (its replacement
    # cannot run anywhere, so the budget stays spent); the other two are refused and named.
    first = drain(sandbox, donor)
    assert first["failed"] is False, first
    assert first["changed"] is True and first["unschedulable"] is True
    assert first["reason"] == "pdb_blocked"
    assert len(first["evicted"]) == 1 and len(first["blocked"]) == 2
    for entry in first["blocked"]:
        assert entry["namespace"] == namespace and entry["pdb"] == "web" and entry["cause"] == "pdb"
        assert entry["disruptions_allowed"] == 0
        assert "disruption budget" in entry["message"]
    assert sorted(names(first["evicted"]) + names(first["blocked"])) == before
    assert is_cordoned(kube, donor)
    assert node(kube, donor)["metadata"]["annotations"][ANNOTATION] == first["drain_started"]
    [heir] = new_nodes(1, group=group)

    # The role's way: one pass per retry until the node is empty.
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [{
        "name": "drain until done",
        "kubenodes.image_upgrade.node_drain": dict(sandbox.auth_args(), name=donor, wait_timeout=180),
        "register": "drain", "until": "drain.reason == 'drained'", "retries": 60, "delay": 1,
    }]}]
    rc, output = run_playbook(play, timeout=300)
    result = output["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert rc == 0, result
    assert result["reason"] == "drained" and result["drained"] is True
    assert result["attempts"] >= 2  # the PDB let them go one at a time
    # Every replica runs again, on the heir: the scheduler kept off the cordoned donor.
    wait_running_on(kube, namespace, heir, 3)
    assert pods_on(kube, namespace, donor) == []
    # The drain start recorded by the first pass stayed: the deadline is the same for every pass.
    assert result["drain_started"] == first["drain_started"]


def test_drain_waits_and_is_idempotent(sandbox, kube, namespace, new_nodes):
    group = unique_group()
    [donor] = new_nodes(1, group=group)
    create_deployment(kube, namespace, "api", 4, group)
    create_pdb(kube, namespace, "api", {"app": "api"}, min_available=3)
    wait_running_on(kube, namespace, donor, 4)
    wait_pdb_observed(kube, namespace, "api", 1)
    [heir] = new_nodes(1, group=group)

    started = time.monotonic()
    result = drain(sandbox, donor, wait=True, wait_timeout=120, wait_sleep=1)
    assert result["failed"] is False, result
    assert result["reason"] == "drained" and result["drained"] is True and result["changed"] is True
    assert len(result["evicted"]) == 4 and result["blocked"] == [] and result["pending"] == []
    assert time.monotonic() - started < 120
    wait_running_on(kube, namespace, heir, 4)

    again = drain(sandbox, donor, wait=True, wait_timeout=30)
    assert again["failed"] is False and again["changed"] is False, again
    assert again["reason"] == "drained" and again["evicted"] == []
    checked = drain(sandbox, donor, check=True)
    assert checked["changed"] is False and checked["reason"] == "drained", checked


def test_unsatisfiable_pdb_fail_names_it_and_continue_reports_it(sandbox, kube, namespace, new_nodes):
    group = unique_group()
    [donor] = new_nodes(1, group=group)
    create_deployment(kube, namespace, "db", 2, group)
    create_pdb(kube, namespace, "db-strict", {"app": "db"}, min_available=2)
    wait_running_on(kube, namespace, donor, 2)
    wait_pdb_observed(kube, namespace, "db-strict", 0)
    new_nodes(1, group=group)

    failed = drain(sandbox, donor, wait=True, wait_timeout=4, wait_sleep=1)
    assert failed["failed"] is True and failed["reason"] == "timeout", failed
    db_pods = sorted(p["metadata"]["name"] for p in pods_on(kube, namespace, donor))
    assert len(db_pods) == 2 and names(failed["blocked"]) == db_pods
    for pod in db_pods:
        assert "%s/%s blocked by PodDisruptionBudget %s/db-strict (disruptionsAllowed=0)" % (namespace, pod, namespace) in failed["msg"]
    assert "stays cordoned" in failed["msg"]
    assert is_cordoned(kube, donor)

    kept = drain(sandbox, donor, wait=True, wait_timeout=3, wait_sleep=1, on_timeout="continue")
    assert kept["failed"] is False and kept["reason"] == "timeout", kept
    assert [(b["pod"], b["pdb"], b["disruptions_allowed"]) for b in kept["blocked"]] == [(p, "db-strict", 0) for p in db_pods]
    assert kept["forced"] == [] and kept["evicted"] == []
    assert sorted(p["metadata"]["name"] for p in pods_on(kube, namespace, donor)) == db_pods


def test_unsatisfiable_pdb_force_deletes_the_pods(sandbox, kube, namespace, new_nodes):
    group = unique_group()
    [donor] = new_nodes(1, group=group)
    create_deployment(kube, namespace, "db", 2, group)
    create_pdb(kube, namespace, "db-strict", {"app": "db"}, min_available=2)
    wait_running_on(kube, namespace, donor, 2)
    wait_pdb_observed(kube, namespace, "db-strict", 0)
    [heir] = new_nodes(1, group=group)
    db_pods = sorted(p["metadata"]["name"] for p in pods_on(kube, namespace, donor))

    result = drain(sandbox, donor, wait=True, wait_timeout=3, wait_sleep=1, on_timeout="force", terminate_grace_period=0)
    assert result["failed"] is False and result["reason"] == "forced", result
    assert names(result["forced"]) == db_pods and result["blocked"] == []
    wait_until("the donor to be empty", lambda: pods_on(kube, namespace, donor) == [], timeout=30)
    wait_running_on(kube, namespace, heir, 2)


def test_non_blocking_passes_share_the_deadline_from_the_node_annotation(sandbox, kube, namespace, new_nodes):
    group = unique_group()
    [donor] = new_nodes(1, group=group)
    create_deployment(kube, namespace, "db", 1, group)
    create_pdb(kube, namespace, "db", {"app": "db"}, min_available=1)
    wait_running_on(kube, namespace, donor, 1)
    wait_pdb_observed(kube, namespace, "db", 0)

    first = drain(sandbox, donor, wait_timeout=3)
    assert first["failed"] is False and first["reason"] == "pdb_blocked", first
    time.sleep(3.5)
    late = drain(sandbox, donor, wait_timeout=3)
    assert late["failed"] is True and late["reason"] == "timeout", late
    assert late["drain_started"] == first["drain_started"]
    assert "db-" in late["msg"] and "PodDisruptionBudget %s/db (disruptionsAllowed=0)" % namespace in late["msg"]

    # Uncordoning ends the drain: the annotation goes, and the next drain starts a new deadline.
    undone = drain(sandbox, donor, state="uncordoned")
    assert undone["changed"] is True and ANNOTATION not in (node(kube, donor)["metadata"].get("annotations") or {})
    fresh = drain(sandbox, donor, wait_timeout=60)
    assert fresh["failed"] is False and fresh["reason"] == "pdb_blocked", fresh


def test_daemonset_pods_stay_and_terminating_pods_are_not_blockers(sandbox, kube, namespace, new_nodes):
    group = unique_group()
    [donor] = new_nodes(1, group=group)
    create_daemonset(kube, namespace, "agent", group)
    create_deployment(kube, namespace, "web", 2, group, grace=30)
    wait_running_on(kube, namespace, donor, 3)

    refused = drain(sandbox, donor, ignore_daemonsets=False)
    assert refused["failed"] is True and refused["reason"] == "pods_refused", refused
    assert [(b["cause"]) for b in refused["blocked"]] == ["daemonset"]
    assert "ignore_daemonsets" in refused["msg"] and not is_cordoned(kube, donor)

    # One pass with the pods' own grace period: the evicted pods are still terminating when it
    # returns; they are pending, not blocked.
    first = drain(sandbox, donor)
    assert first["failed"] is False, first
    assert first["reason"] == "evicting" and first["blocked"] == []
    assert len(first["evicted"]) == 2
    assert sorted(p["status"] for p in first["pending"]) == ["terminating", "terminating"]
    assert [(s["reason"], s["pod"].startswith("agent-")) for s in first["skipped_pods"]] == [("daemonset", True)]

    second = drain(sandbox, donor, wait=True, wait_timeout=60, wait_sleep=1)
    assert second["failed"] is False and second["reason"] == "drained", second
    assert second["evicted"] == [] and second["changed"] is False
    left = pods_on(kube, namespace, donor)
    assert [p["metadata"]["name"].startswith("agent-") for p in left] == [True] and running_ready(left[0])


def test_emptydir_and_unmanaged_pods_refused_unless_allowed(sandbox, kube, namespace, new_nodes):
    group = unique_group()
    [donor] = new_nodes(1, group=group)
    create_deployment(kube, namespace, "cache", 1, group, emptydir=True)
    create_bare_pod(kube, namespace, "loner", donor)
    wait_running_on(kube, namespace, donor, 2)
    before = node(kube, donor)

    refused = drain(sandbox, donor, wait=True, wait_timeout=30)
    assert refused["failed"] is True and refused["reason"] == "pods_refused", refused
    causes = {b["pod"].split("-")[0]: b["cause"] for b in refused["blocked"]}
    assert causes == {"cache": "local_storage", "loner": "unmanaged"}
    assert "delete_emptydir_data=true" in refused["msg"] and "force=true" in refused["msg"]
    assert "nothing was changed" in refused["msg"]
    after = node(kube, donor)
    assert not after["spec"].get("unschedulable")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"] or \
        after["metadata"].get("annotations") == before["metadata"].get("annotations")
    assert len(pods_on(kube, namespace, donor)) == 2

    only_emptydir = drain(sandbox, donor, delete_emptydir_data=True)
    assert only_emptydir["failed"] is True and [b["cause"] for b in only_emptydir["blocked"]] == ["unmanaged"]

    allowed = drain(sandbox, donor, delete_emptydir_data=True, force=True, wait=True, wait_timeout=60,
                    terminate_grace_period=0)
    assert allowed["failed"] is False and allowed["reason"] == "drained", allowed
    assert names(allowed["evicted"])[1] == "loner"
    wait_until("the donor to be empty", lambda: pods_on(kube, namespace, donor) == [], timeout=30)


def test_pod_selectors_and_zero_grace_period(sandbox, kube, namespace, new_nodes):
    group = unique_group()
    [donor] = new_nodes(1, group=group)
    create_deployment(kube, namespace, "keep", 1, group, grace=30)
    create_deployment(kube, namespace, "move", 2, group, grace=30)
    wait_running_on(kube, namespace, donor, 3)

    result = drain(sandbox, donor, pod_selectors=["app!=keep"], terminate_grace_period=0)
    assert result["failed"] is False, result
    # Grace 0 is honoured: the evicted pods are gone at once, nothing is left terminating.
    assert result["reason"] == "drained" and result["pending"] == [], result
    assert [e["pod"].startswith("move-") for e in result["evicted"]] == [True, True]
    left = [p for p in pods_on(kube, namespace, donor) if not p["metadata"].get("deletionTimestamp")]
    assert [p["metadata"]["labels"]["app"] for p in left] == ["keep"]


def test_check_mode_predicts_evictions_and_blocking_pdbs_and_changes_nothing(sandbox, kube, namespace, new_nodes):
    group = unique_group()
    [donor] = new_nodes(1, group=group)
    create_deployment(kube, namespace, "web", 3, group)
    create_pdb(kube, namespace, "web", {"app": "web"}, min_available=2)
    wait_running_on(kube, namespace, donor, 3)
    wait_pdb_observed(kube, namespace, "web", 1)
    before = sorted(p["metadata"]["uid"] for p in pods_on(kube, namespace, donor))

    result = drain(sandbox, donor, check=True, diff=True)
    assert result["failed"] is False and result["changed"] is True, result
    assert len(result["evicted"]) == 1 and len(result["blocked"]) == 2
    assert {(b["pdb"], b["disruptions_allowed"], b["cause"]) for b in result["blocked"]} == {("web", 1, "pdb")}
    assert result["reason"] == "pdb_blocked"
    assert result["diff"]["before"]["unschedulable"] is False and result["diff"]["after"]["unschedulable"] is True
    assert len(result["diff"]["before"]["pods"]) == 3
    assert not is_cordoned(kube, donor)
    assert sorted(p["metadata"]["uid"] for p in pods_on(kube, namespace, donor)) == before


def test_cordon_and_uncordon_are_idempotent(sandbox, kube, new_nodes):
    [name] = new_nodes(1, group=unique_group())
    checked = drain(sandbox, name, state="cordoned", check=True)
    assert checked["changed"] is True and not is_cordoned(kube, name)
    first = drain(sandbox, name, state="cordoned")
    assert first["changed"] is True and first["reason"] == "cordoned" and is_cordoned(kube, name)
    assert drain(sandbox, name, state="cordoned")["changed"] is False
    # Cordoning alone records no drain start.
    assert ANNOTATION not in (node(kube, name)["metadata"].get("annotations") or {})
    undone = drain(sandbox, name, state="uncordoned", diff=True)
    assert undone["changed"] is True and undone["diff"] == {"before": {"unschedulable": True}, "after": {"unschedulable": False}}
    assert not is_cordoned(kube, name)
    assert drain(sandbox, name, state="uncordoned")["changed"] is False
    # kubernetes.core.k8s_drain's state names mean the same.
    again = drain(sandbox, name, state="cordon")
    assert again["changed"] is True and again["reason"] == "cordoned" and is_cordoned(kube, name)
    assert drain(sandbox, name, state="cordon")["changed"] is False
    back = drain(sandbox, name, state="uncordon")
    assert back["changed"] is True and not is_cordoned(kube, name)
    # Issue 28: a node past the upgrade's point of no return (its etcd member removed) is not given back.
    kube.merge_patch("/api/v1/nodes/" + name, {"spec": {"unschedulable": True}, "metadata": {"annotations": {
        "image-upgrade.kubenodes.io/phase": "etcd-removed"}}})
    for check in (True, False):
        kept = drain(sandbox, name, state="uncordoned", check=check)
        assert kept["failed"] and kept["reason"] == "inconsistent" and "phase is etcd-removed" in kept["msg"], kept
        assert [p["code"] for p in kept["problems"]] == ["leaving"] and is_cordoned(kube, name)


def test_bad_input_fails_clearly_and_changes_nothing(sandbox, kube, new_nodes):
    missing = drain(sandbox, "no-such-node-%d" % time.time_ns())
    assert missing["failed"] is True and missing["reason"] == "node_not_found"
    assert "not found" in missing["msg"]

    [name] = new_nodes(1, group=unique_group())
    bad = drain(sandbox, name, pod_selectors=["app in (web"])
    assert bad["failed"] is True and bad["reason"] == "invalid_selector", bad
    assert "pod_selectors" in bad["msg"]
    assert not is_cordoned(kube, name)
    for args, word in ((dict(eviction_concurrency=0), "eviction_concurrency"),
                       (dict(terminate_grace_period=-1), "terminate_grace_period"),
                       (dict(annotation_prefix="Not_A_Domain"), "annotation_prefix")):
        result = drain(sandbox, name, **args)
        assert result["failed"] is True and word in result["msg"], result
    assert not is_cordoned(kube, name)
    assert drain(sandbox, name, state="cordoned", kubeconfig="/nonexistent/kubeconfig")["failed"] is True


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_110_pods_drained_with_bounded_concurrency(sandbox, kube, namespace, new_nodes):
    group = unique_group()
    [donor] = new_nodes(1, group=group)
    create_deployment(kube, namespace, "many", 110, group, grace=1)
    create_pdb(kube, namespace, "many", {"app": "many"}, min_available=100)
    wait_running_on(kube, namespace, donor, 110, timeout=240)
    wait_pdb_observed(kube, namespace, "many", 10)
    [heir] = new_nodes(1, group=group)

    result = drain(sandbox, donor, wait=True, wait_timeout=300, wait_sleep=1, eviction_concurrency=8)
    assert result["failed"] is False and result["reason"] == "drained", {k: result.get(k) for k in ("msg", "reason", "blocked")}
    assert len(result["evicted"]) == 110
    wait_running_on(kube, namespace, heir, 110, timeout=240)
    assert pods(kube, namespace, "app=many") and pods_on(kube, namespace, donor) == []


def test_least_privilege_identity_from_the_role_rbac_file_can_drain(sandbox, kube, namespace, new_nodes):
    """The ClusterRole shipped with the role is enough: drain as a service account bound to it, with a
    bearer token (host/api_key/ca_cert options instead of a kubeconfig)."""
    import pathlib
    import uuid

    import yaml

    rbac = pathlib.Path(__file__).resolve().parents[2] / "roles" / "rolling_upgrade" / "files" / "rbac.yml"
    cluster_role = next(d for d in yaml.safe_load(rbac.read_text())["items"] if d["kind"] == "ClusterRole")
    role_name = "drain-test-" + uuid.uuid4().hex[:8]  # unique: the sandbox is shared
    cluster_role["metadata"] = {"name": role_name}
    kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", cluster_role, ok=(201,))
    try:
        kube.request("POST", "/api/v1/namespaces/%s/serviceaccounts" % namespace, {"metadata": {"name": "drainer"}}, ok=(201,))
        kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "metadata": {"name": role_name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
            "subjects": [{"kind": "ServiceAccount", "name": "drainer", "namespace": namespace}]}, ok=(201,))
        token = kube.request("POST", "/api/v1/namespaces/%s/serviceaccounts/drainer/token" % namespace,
                             {"spec": {"expirationSeconds": 3600}}, ok=(201,))["status"]["token"]
        auth = dict(host=sandbox.apiserver, api_key=token, ca_cert=sandbox.ca)

        group = unique_group()
        [donor] = new_nodes(1, group=group)
        create_deployment(kube, namespace, "web", 2, group)
        create_pdb(kube, namespace, "web", {"app": "web"}, min_available=1)
        wait_running_on(kube, namespace, donor, 2)
        wait_pdb_observed(kube, namespace, "web", 1)
        [heir] = new_nodes(1, group=group)

        result = run_module("node_drain", dict(auth, name=donor, wait=True, wait_timeout=90, wait_sleep=1), timeout=300)
        assert result["failed"] is False and result["reason"] == "drained", result
        assert len(result["evicted"]) == 2
        assert token not in str(result)  # api_key is no_log
        wait_running_on(kube, namespace, heir, 2)
        assert run_module("node_drain", dict(auth, name=donor, state="uncordoned"))["changed"] is True
    finally:
        kube.request("DELETE", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/" + role_name, ok=(200, 202, 404))
        kube.request("DELETE", "/apis/rbac.authorization.k8s.io/v1/clusterroles/" + role_name, ok=(200, 202, 404))


def test_pod_under_two_pdbs_is_named_and_disable_eviction_deletes_it(sandbox, kube, namespace, new_nodes):
    group = unique_group()
    [donor] = new_nodes(1, group=group)
    create_deployment(kube, namespace, "twice", 1, group, labels={"app": "twice", "tier": "front"})
    # PDBs after the pod runs: on a pod update the disruption controller re-syncs only one of the PDBs that
    # cover it, so a PDB created before the pod turned Ready may show 0 allowed until its periodic resync.
    wait_running_on(kube, namespace, donor, 1)
    create_pdb(kube, namespace, "by-app", {"app": "twice"}, min_available=0)
    create_pdb(kube, namespace, "by-tier", {"tier": "front"}, min_available=0)
    wait_pdb_observed(kube, namespace, "by-app", 1)
    wait_pdb_observed(kube, namespace, "by-tier", 1)

    # The Eviction API refuses a pod covered by two PDBs whatever their budgets: say which two.
    result = drain(sandbox, donor)
    assert result["failed"] is False and result["reason"] == "pdb_blocked", result
    [entry] = result["blocked"]
    assert entry["cause"] == "multiple_pdbs" and entry["pdb"] == "by-app, by-tier"
    assert "more than one" in entry["message"]

    # disable_eviction: a plain DELETE, which PDBs do not see. Check mode predicts just that on the node
    # the drain above cordoned (kubernetes.core's k8s_drain target: no PDB block, changed, pod named).
    predicted = drain(sandbox, donor, check=True, disable_eviction=True)
    assert predicted["failed"] is False and predicted["changed"] is True, predicted
    assert names(predicted["evicted"]) == [entry["pod"]] and predicted["blocked"] == [], predicted
    assert [p["metadata"]["name"] for p in pods_on(kube, namespace, donor)] == [entry["pod"]]
    deleted = drain(sandbox, donor, disable_eviction=True, wait=True, wait_timeout=60, wait_sleep=1)
    assert deleted["failed"] is False and deleted["reason"] == "drained", deleted
    assert names(deleted["evicted"]) == [entry["pod"]]


def test_statefulset_pod_recreated_with_the_same_name_elsewhere(sandbox, kube, namespace, new_nodes):
    group = unique_group()
    [donor] = new_nodes(1, group=group)
    labels = {"app": "db"}
    kube.request("POST", "/apis/apps/v1/namespaces/%s/statefulsets" % namespace, {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": namespace},
        "spec": {"serviceName": "db", "replicas": 2, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "db", "image": "registry.invalid/db:1"}],
                                       "nodeSelector": {"sandbox.kubenodes.io/group": group},
                                       "terminationGracePeriodSeconds": 1}}}}, ok=(201,))
    wait_running_on(kube, namespace, donor, 2)
    [heir] = new_nodes(1, group=group)

    result = drain(sandbox, donor, wait=True, wait_timeout=90, wait_sleep=1)
    assert result["failed"] is False and result["reason"] == "drained", result
    assert names(result["evicted"]) == ["db-0", "db-1"]
    running = wait_running_on(kube, namespace, heir, 2)
    assert running and sorted(p["metadata"]["name"] for p in pods_on(kube, namespace, heir)) == ["db-0", "db-1"]


def test_non_blocking_pass_past_the_deadline_forces_when_asked(sandbox, kube, namespace, new_nodes):
    group = unique_group()
    [donor] = new_nodes(1, group=group)
    create_deployment(kube, namespace, "db", 1, group, grace=30)
    create_pdb(kube, namespace, "db", {"app": "db"}, min_available=1)
    wait_running_on(kube, namespace, donor, 1)
    wait_pdb_observed(kube, namespace, "db", 0)
    [pod] = [p["metadata"]["name"] for p in pods_on(kube, namespace, donor)]

    first = drain(sandbox, donor, wait_timeout=2, on_timeout="force")
    assert first["failed"] is False and first["reason"] == "pdb_blocked" and first["forced"] == [], first
    time.sleep(2.5)
    forced = drain(sandbox, donor, wait_timeout=2, on_timeout="force")
    assert forced["failed"] is False and forced["reason"] == "forced", forced
    assert names(forced["forced"]) == [pod]
    # Deleted with the pod's own grace period: still terminating when the pass returns, or already gone.
    assert [p["pod"] for p in forced["pending"]] in ([], [pod])
    wait_until("the forced pod to go", lambda: pods_on(kube, namespace, donor) == [], timeout=30)


def test_not_before_gives_a_new_run_a_full_timeout_on_an_old_drain(sandbox, kube, namespace, new_nodes):
    group = unique_group()
    [donor] = new_nodes(1, group=group)
    create_deployment(kube, namespace, "db", 1, group)
    create_pdb(kube, namespace, "db", {"app": "db"}, min_available=1)
    wait_running_on(kube, namespace, donor, 1)
    wait_pdb_observed(kube, namespace, "db", 0)

    first = drain(sandbox, donor, wait_timeout=2, on_timeout="fail")
    assert first["failed"] is False and first["reason"] == "pdb_blocked", first
    time.sleep(2.5)
    # The old drain's deadline has passed: without not_before the pass fails at once...
    stale = drain(sandbox, donor, wait_timeout=2, on_timeout="fail")
    assert stale["failed"] and "timed out" in stale["msg"], stale
    # ...a new run that started now gets the full timeout again, and the drain keeps its first start time.
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    renewed = drain(sandbox, donor, wait_timeout=60, on_timeout="fail", not_before=now)
    assert renewed["failed"] is False and renewed["reason"] == "pdb_blocked", renewed
    assert renewed["drain_started"] == first["drain_started"] and renewed["deadline"] > now
    bad = drain(sandbox, donor, not_before="yesterday")
    assert bad["failed"] and "RFC 3339" in bad["msg"]


def test_the_drain_ladder_deletes_and_forces_exactly_the_pods_its_rules_name(sandbox, kube, namespace, new_nodes):
    """Issue 23 item 5: three workloads whose PodDisruptionBudgets allow no disruption. The rule "cache" deletes its
    pods without eviction after 1 s, the rule "batch" forces its pods (grace 0) after 1 s, and the database, which no
    rule names, is only evicted: blocked until the timeout. Bad rules are refused before anything changes."""
    group = unique_group()
    [donor] = new_nodes(1, group=group)
    for app in ("cache", "batch", "db"):
        create_deployment(kube, namespace, app, 1, group)
        create_pdb(kube, namespace, app, {"app": app}, min_available=1)
    wait_running_on(kube, namespace, donor, 3)
    for app in ("cache", "batch", "db"):
        wait_pdb_observed(kube, namespace, app, 0)
    on_donor = {p["metadata"]["labels"]["app"]: p["metadata"]["name"] for p in pods_on(kube, namespace, donor)}

    backwards = drain(sandbox, donor, policies=[{"name": "batch", "match_labels": {"app": "batch"}, "delete_after": 5,
                                                 "force_after": 1}])
    assert backwards["failed"] and backwards["reason"] == "invalid_argument", backwards
    assert "policies[0] (batch): force_after (1) comes before delete_after (5)" in backwards["msg"], backwards["msg"]
    assert not is_cordoned(kube, donor)

    rules = [{"name": "cache", "namespaces": [namespace], "match_labels": {"app": "cache"}, "delete_after": 1},
             {"name": "batch", "match_labels": {"app": "batch"}, "force_after": 1},
             {"name": "elsewhere", "namespaces": ["kube-system"], "delete_after": 0}]
    result = drain(sandbox, donor, wait=True, wait_timeout=5, wait_sleep=1, on_timeout="continue", policies=rules)
    assert result["failed"] is False and result["reason"] == "timeout", result
    assert sorted((f["pod"], f["step"], f["policy"]) for f in result["forced"]) == sorted(
        [(on_donor["cache"], "delete", "cache"), (on_donor["batch"], "force", "batch")]), result["forced"]
    assert names(result["blocked"]) == [on_donor["db"]] and result["evicted"] == [], result
    wait_until("the cache and batch pods to go", lambda: sorted(p["metadata"]["name"] for p in pods_on(
        kube, namespace, donor)) == [on_donor["db"]], timeout=30)
