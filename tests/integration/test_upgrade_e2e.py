"""End to end: playbooks/upgrade_nodes.yml (the rolling_upgrade role) upgrades a whole sandbox cluster
through each cloud emulator, and the failure paths of issue #8: killed and resumed, a heir that never
joins, a PDB that blocks forever, two concurrent runs, a bad image, check mode. Each test starts its own
sandbox (real kube-apiserver, real control-plane etcd, an emulated cloud) with 1 control plane and 2
workers in 2 worker groups: 3 replacements, one of them a control-plane node (its etcd member goes from
1 to 2 when the heir joins, then back to 1 when the donor's member is removed).

See upgrade_helpers.py for what the invariant watcher observes and why it can rely on it.
"""

import importlib.util
import json
import random
import time
import uuid

import pytest
import yaml

from sandbox import cli
from ansible_run import run_playbook
import upgrade_helpers as uh

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 600


def _need(cloud):
    module = cli.CLOUD_MODULES[cloud]
    if importlib.util.find_spec(module) is None:
        pytest.skip("the %s emulator (%s) is not in this checkout" % (cloud, module))


@pytest.fixture
def cluster(fresh_sandbox, tmp_path):
    """cluster(cloud, **role variable overrides) -> (handle, role variables, start snapshot)."""
    def make(cloud, **overrides):
        _need(cloud)
        handle = fresh_sandbox(clouds=[cloud])
        values, start = uh.prepare(handle, cloud, **overrides)
        return handle, values, start
    return make


def least_privilege_auth(handle):
    """A ServiceAccount bound only to roles/rolling_upgrade/files/rbac.yml (ClusterRole, and the Role in
    kube-system), and its token from the TokenRequest API, as kube auth options."""
    kube = handle.kube()
    account, namespace = "image-upgrader", "default"
    subject = [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
    kube.request("POST", "/api/v1/namespaces/%s/serviceaccounts" % namespace, {"metadata": {"name": account}}, ok=(201,))
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    for doc in yaml.safe_load(uh.RBAC_FILE.read_text())["items"]:
        ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": doc["kind"], "name": doc["metadata"]["name"]}
        if doc["kind"] == "ClusterRole":
            kube.request("POST", rbac + "/clusterroles", doc, ok=(201,))
            kube.request("POST", rbac + "/clusterrolebindings",
                         {"metadata": {"name": "image-upgrader"}, "roleRef": ref, "subjects": subject}, ok=(201,))
        elif doc["kind"] == "Role":
            ns = doc["metadata"]["namespace"]
            kube.request("POST", rbac + "/namespaces/%s/roles" % ns, doc, ok=(201,))
            kube.request("POST", rbac + "/namespaces/%s/rolebindings" % ns,
                         {"metadata": {"name": "image-upgrader"}, "roleRef": ref, "subjects": subject}, ok=(201,))
        else:
            raise AssertionError("unexpected kind %s in %s" % (doc["kind"], uh.RBAC_FILE))
    token = kube.request("POST", "/api/v1/namespaces/%s/serviceaccounts/%s/token" % (namespace, account),
                         {"spec": {"expirationSeconds": 3600}}, ok=(201,))["status"]["token"]
    return {"host": handle.apiserver, "api_key": token, "ca_cert": handle.ca}, token


def lease_holder(handle):
    lease = handle.kube().request("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kubenodes-image-upgrade",
                                  ok=(200, 404))
    return ((lease or {}).get("spec") or {}).get("holderIdentity") if lease and lease.get("kind") == "Lease" else None


# ---------------------------------------------------------------- the full upgrade, per cloud


@pytest.mark.timeout(900)
@pytest.mark.parametrize("cloud", ["gcp", "azure", "aws"])
def test_full_upgrade(cluster, cloud, tmp_path):
    handle, values, start = cluster(cloud)
    token = None
    if cloud == "gcp":
        # Least privilege: the whole run as a service account bound only to the role's rbac.yml.
        values["rolling_upgrade_kube"], token = least_privilege_auth(handle)
    watcher = uh.Watcher(handle)
    watcher.start()
    try:
        rc, output = uh.run_upgrade(values, tmp_path / "upgrade.log", timeout=RUN_TIMEOUT)
    finally:
        watcher.stop()
    assert rc == 0, output[-6000:]
    if token:
        assert token not in output, "the bearer token leaked into the output"
    passes = [int(found[0]) for found in uh.PROGRESS.findall(output)]
    assert passes and passes == list(range(1, len(passes) + 1)), "one progress line per pass: %s" % passes
    assert "3/3 nodes on the image" in output
    watcher.check(start, max_surge=1)
    uh.assert_upgraded(handle, values, start)
    assert not lease_holder(handle), "the run lock was not released"


# ---------------------------------------------------------------- check mode and bad input change nothing


def _world(handle, cloud):
    """Everything a run could change: node annotations and labels, instances, groups, autoscaler, Lease."""
    kube = handle.kube()
    autoscaler = kube.request("GET", "/apis/apps/v1/namespaces/kube-system/deployments/cluster-autoscaler")
    return {
        "nodes": {n["metadata"]["name"]: (n["metadata"].get("annotations"), n["metadata"]["labels"],
                                          bool(n["spec"].get("unschedulable"))) for n in uh.nodes(handle)},
        "instances": sorted((i["provider_id"], i["state"]) for i in handle.nodesim.instances()),
        "groups": {g: v["template"] for g, v in handle.cloud(cloud).state()["groups"].items()} if cloud == "gcp" else None,
        "autoscaler": (autoscaler["metadata"]["resourceVersion"], autoscaler["spec"]["replicas"]),
        "lease": lease_holder(handle),
    }


def _failed_messages(output):
    messages = []
    for play in output["plays"]:
        for task in play["tasks"]:
            for result in task["hosts"].values():
                if result.get("failed"):
                    messages.append("%s: %s" % (task["task"]["name"], result.get("msg")))
    return messages


@pytest.mark.timeout(600)
def test_check_mode_prints_the_plan_and_bad_images_change_nothing(cluster):
    handle, values, start = cluster("gcp")
    before = _world(handle, "gcp")
    assert not uh.node_annotations_with_prefix(handle)

    rc, output = run_playbook(uh.PLAYBOOK, extra_vars=values, check=True, timeout=RUN_TIMEOUT)
    assert rc == 0, _failed_messages(output)
    tasks = {t["task"]["name"]: t["hosts"]["localhost"] for t in output["plays"][0]["tasks"] if t["hosts"]}
    order = next(r["msg"] for name, r in tasks.items() if name.endswith("Plan | the order of replacement"))
    assert order.startswith("3 node(s) to replace"), order
    for name in start["node_names"]:
        assert name in order, (name, order)
    # The control plane goes first.
    [control_plane] = [n for g, names in start["groups"].items() if "control-plane" in g for n in names]
    assert all(order.index(control_plane) < order.index(n) for n in start["node_names"] if n != control_plane)
    plan = next(r["msg"] for name, r in tasks.items() if name.endswith("Plan | the next pass"))
    assert plan["set_group_image"], plan
    assert _world(handle, "gcp") == before
    assert not uh.node_annotations_with_prefix(handle)

    project = values["rolling_upgrade_gcp"]["project"]
    for image, cause in [("projects/%s/global/images/does-not-exist" % project, "does-not-exist"),
                         ("not a valid image reference", "not a valid image reference")]:
        rc, output = run_playbook(uh.PLAYBOOK, extra_vars=dict(values, rolling_upgrade_image=image), timeout=RUN_TIMEOUT)
        failures = _failed_messages(output)
        assert rc != 0 and failures, "a run with image %r did not fail" % image
        assert any(cause in message for message in failures), failures
        assert _world(handle, "gcp") == before, "the run with image %r changed something" % image
        assert not uh.node_annotations_with_prefix(handle)
    uh.wait_workloads_running(handle, start, timeout=30)


# ---------------------------------------------------------------- killed and resumed


@pytest.mark.timeout(900)
def test_killed_at_random_points_and_resumed(cluster, tmp_path):
    handle, values, start = cluster("gcp")
    rng = random.Random(8)
    watcher = uh.Watcher(handle)
    watcher.start()
    kills = []
    try:
        # Three runs SIGKILLed (with every module process) at seeded random moments after they have
        # shown progress; each later run resumes from what the cluster and the cloud show.
        for attempt in range(3):
            run = uh.PlaybookRun(values, tmp_path / ("killed-%d.log" % attempt))
            try:
                wanted_pass = rng.randint(1, 3)
                alive = run.wait_for(lambda out, n=wanted_pass: len(uh.PROGRESS.findall(out)) >= n, RUN_TIMEOUT,
                                     "pass %d of run %d" % (wanted_pass, attempt))
                time.sleep(rng.uniform(0, 6))
                if run.proc.poll() is None and alive:
                    kills.append((attempt, wanted_pass, uh.PROGRESS.findall(run.output())[-1:]))
            finally:
                run.kill()
            if run.proc.returncode == 0:
                break
        rc, output = uh.run_upgrade(values, tmp_path / "final.log", timeout=RUN_TIMEOUT)
    finally:
        watcher.stop()
    assert rc == 0, output[-6000:]
    assert len(kills) >= 2, "the runs finished before they could be killed: %s" % kills
    watcher.check(start, max_surge=1)
    uh.assert_upgraded(handle, values, start, report=False)
    # Nothing was created twice: exactly one new instance per replaced node ever existed.
    created = [i for i in handle.nodesim.instances() if i["provider_id"] not in start["instances"]]
    assert len(created) == len(start["node_names"]), sorted((i["node_name"], i["state"]) for i in created)


# ---------------------------------------------------------------- a heir that never joins


@pytest.mark.timeout(900)
def test_heir_that_never_joins_is_deleted_at_the_deadline_and_replaced(cluster, tmp_path):
    handle, values, start = cluster("gcp", rolling_upgrade_join_timeout=30)
    upgraded = uh.limit_to_groups(values, start, ["workers-0"])  # one replacement keeps CI time down
    sim = handle.nodesim
    [group_id] = values["rolling_upgrade_scaling_groups"]
    sim.knobs(never_join=[group_id])
    watcher = uh.Watcher(handle)
    watcher.start()
    run = uh.PlaybookRun(values, tmp_path / "upgrade.log")
    try:
        stuck = None
        deadline = time.monotonic() + 400
        while stuck is None and time.monotonic() < deadline and run.proc.poll() is None:
            stuck = next((i for i in sim.instances() if i["state"] == "never-joins"), None)
            time.sleep(0.5)
        assert stuck is not None, "no heir was created in %s; output:\n%s" % (group_id, run.output()[-4000:])
        assert stuck["group_id"] == group_id
        created, state = time.monotonic(), stuck["state"]
        while time.monotonic() < deadline and run.proc.poll() is None:
            state = next(i["state"] for i in sim.instances() if i["provider_id"] == stuck["provider_id"])
            if state == "deleted":
                break
            time.sleep(0.5)
        waited = time.monotonic() - created
        assert state == "deleted", "the heir that never joined was not deleted; output:\n%s" % run.output()[-4000:]
        assert waited >= 25, "deleted after %.0fs, before the 30 s join deadline" % waited
        sim.knobs(never_join=[])
        rc = run.wait(RUN_TIMEOUT)
    finally:
        run.kill()
        watcher.stop()
    output = run.output()
    assert rc == 0, output[-6000:]
    assert stuck["node_name"] not in [n["metadata"]["name"] for n in uh.nodes(handle)]
    watcher.check(start, max_surge=1)
    uh.assert_upgraded(handle, values, start, groups=upgraded)


# ---------------------------------------------------------------- a PDB that blocks forever


@pytest.mark.timeout(900)
def test_pdb_that_blocks_forever_stops_the_run_naming_pod_and_pdb_then_resumes(cluster, tmp_path):
    handle, values, start = cluster("aws", rolling_upgrade_drain_timeout=20, rolling_upgrade_drain_on_timeout="fail")
    upgraded = uh.limit_to_groups(values, start, ["workers-0"])  # one replacement keeps CI time down
    [group_label] = upgraded
    [worker] = start["groups"][group_label]
    kube = handle.kube()
    namespace = "guarded"
    kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}}, ok=(201,))
    labels = {"app": "guarded"}
    deadline = time.monotonic() + 30
    while True:  # pods are refused until the serviceaccount controller made `default`
        if kube.request("GET", "/api/v1/namespaces/%s/serviceaccounts/default" % namespace, ok=(200, 404)).get("kind") == "ServiceAccount":
            break
        assert time.monotonic() < deadline, "no default service account in %s" % namespace
        time.sleep(0.2)
    kube.request("POST", "/apis/apps/v1/namespaces/%s/deployments" % namespace, {
        "metadata": {"name": "guarded"},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"nodeSelector": {uh.GROUP_LABEL: group_label}, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}}}, ok=(201,))
    kube.request("POST", "/apis/policy/v1/namespaces/%s/poddisruptionbudgets" % namespace, {
        "metadata": {"name": "never-disrupt"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}}, ok=(201,))
    pod = _wait_pod_running(kube, namespace, "app=guarded", worker)

    rc, output = uh.run_upgrade(values, tmp_path / "blocked.log", timeout=RUN_TIMEOUT)
    assert rc != 0, output[-6000:]
    tail = output[output.find("Stop with the cause"):] if "Stop with the cause" in output else output[-6000:]
    assert pod in tail and "never-disrupt" in tail, "the failure does not name pod %s and PDB never-disrupt:\n%s" % (
        pod, tail[-4000:])
    # The run stopped with the pod still in place: nothing was forced past the PDB.
    assert _wait_pod_running(kube, namespace, "app=guarded", worker, timeout=5) == pod

    kube.request("DELETE", "/apis/policy/v1/namespaces/%s/poddisruptionbudgets/never-disrupt" % namespace, ok=(200,))
    # The first run after the fix finishes: it gets a full drain timeout again (node_drain not_before).
    rc, resumed = uh.run_upgrade(values, tmp_path / "resumed.log", timeout=RUN_TIMEOUT)
    assert rc == 0, resumed[-6000:]
    uh.assert_upgraded(handle, values, start, groups=upgraded)
    _wait_pod_running(kube, namespace, "app=guarded", None)
    assert "1/1 nodes on the image" in resumed, resumed[-4000:]


def _wait_pod_running(kube, namespace, selector, node, timeout=60):
    """Name of the one Running pod of `selector` (on `node` when given)."""
    from sandbox import nodesim

    deadline = time.monotonic() + timeout
    while True:
        pods = [p for p in kube.request("GET", "/api/v1/namespaces/%s/pods" % namespace,
                                        params={"labelSelector": selector}).get("items", [])
                if not p["metadata"].get("deletionTimestamp") and nodesim.pod_is_running_ready(p)]
        if len(pods) == 1 and (node is None or pods[0]["spec"].get("nodeName") == node):
            return pods[0]["metadata"]["name"]
        assert time.monotonic() < deadline, "no Running %s pod on %s: %s" % (selector, node, [
            (p["metadata"]["name"], p["spec"].get("nodeName")) for p in pods])
        time.sleep(0.5)


# ---------------------------------------------------------------- two concurrent runs


@pytest.mark.timeout(900)
def test_second_concurrent_run_stops_naming_the_holder_and_the_first_finishes(cluster, tmp_path):
    handle, values, start = cluster("gcp")
    upgraded = uh.limit_to_groups(values, start, ["workers-1"])  # one replacement keeps CI time down
    first = uh.PlaybookRun(values, tmp_path / "first.log")
    try:
        first.wait_for(uh.PROGRESS.search, RUN_TIMEOUT, "the first run's first pass")
        holder = lease_holder(handle)
        assert holder and "/%d/" % first.proc.pid in holder, holder
        began = time.monotonic()
        rc_second, second_output = uh.run_upgrade(
            dict(values, rolling_upgrade_lock_wait=10, rolling_upgrade_run_id="second-" + uuid.uuid4().hex[:6],
                 rolling_upgrade_report_dir=str(tmp_path / "second-report")),
            tmp_path / "second.log", timeout=300)
        assert first.proc.poll() is None, "the first run ended while the second waited"
        assert lease_holder(handle) == holder, "the second run took the first run's Lease"
        rc_first = first.wait(RUN_TIMEOUT)
    finally:
        first.kill()
    assert rc_second != 0, second_output[-4000:]
    assert holder in second_output, "the second run does not name the holder %s:\n%s" % (holder, second_output[-4000:])
    assert time.monotonic() - began >= 10
    assert uh.PROGRESS.search(second_output) is None, "the second run started passes"
    assert rc_first == 0, first.output()[-6000:]
    uh.assert_upgraded(handle, values, start, groups=upgraded)
    # The holder must be in the failure's message, not only in a result field.
    fatal = [line for line in second_output.splitlines() if line.startswith("fatal: [localhost]: FAILED! => ")]
    assert fatal, second_output[-4000:]
    message = json.loads(fatal[-1].split("=> ", 1)[1]).get("msg", "")
    assert holder in message, "the second run stopped with %r" % message
