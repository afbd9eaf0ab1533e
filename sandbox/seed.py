"""Seed a running sandbox: N control-plane and M worker nodes in K worker scaling groups on one image,
and workloads that exercise a drain.

Through a cloud ("gcp", "azure", "aws") the groups and instances exist in that cloud's emulator, whose
instance hooks make the nodes join through the node simulator. With cloud "none" the instances exist only
in the simulator, with made-up providerIDs `sim://<group>/<node>`. Through "azure" the scale sets are Uniform
unless `azure_orchestration="Flexible"` (`seed --azure-orchestration Flexible`) makes them Flexible.

Azure's Uniform worker sets are created as ARM creates them without the field: overprovisioned. The creation's
scale-out then makes one VM more per set, which joins and which the cloud deletes again; the seeding waits for
that and deletes the extra's Node once its instance is gone from the cloud, as the cloud-controller-manager's
node-lifecycle controller does on a real cluster (settle_nodes). The control-plane set is created with
overprovision false: an extra control-plane VM would join etcd as a member that Azure then deletes.

Workloads (namespace `workloads` unless told otherwise), all pods real API objects scheduled by the real
scheduler and made Running by the simulator:
- Deployments `web-<i>` with PodDisruptionBudgets (integer minAvailable = replicas - 1),
- a DaemonSet `node-agent` on every node (it tolerates every taint, as kube-proxy does),
- a StatefulSet `db` with a PDB,
- a Deployment `cache` whose pods use an emptyDir volume,
- unmanaged (bare) pods `debug-<i>`,
- a `cluster-autoscaler` Deployment in kube-system, so the autoscaler pause can be exercised.
"""

import time

from sandbox.nodesim import CONTROL_PLANE, Kube, KubeError, NodeSimClient

WORKLOAD_NAMESPACE = "workloads"


def _kube(state):
    return Kube(state["apiserver"], state["ca"], state["admin_cert"], state["admin_key"])


def split_evenly(total, parts):
    """`total` items over `parts` groups, sizes differing by at most one (pure)."""
    if parts <= 0:
        return []
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


# ---------------------------------------------------------------- nodes

def seed_nodes(state, control_planes, workers, worker_groups, cloud="none", image="image-a", say=print,
               azure_orchestration=None, worker_group_options=None):
    """Create the groups and instances; return [{"id", "role", "size", "names"?}] (names known for cloud none).
    azure_orchestration: "Uniform" (the emulator's default) or "Flexible", for cloud "azure" only.
    worker_group_options: more arguments of the emulator's Admin.create_group for the worker groups (a GCE region,
    an AWS min_size); Azure Uniform worker sets leave overprovision unset (ARM's default: on) unless they name it."""
    if azure_orchestration and cloud != "azure":
        raise ValueError("azure_orchestration=%s applies to cloud azure, not %s; leave it out or seed through azure"
                         % (azure_orchestration, cloud))
    if azure_orchestration not in (None, "Uniform", "Flexible"):
        raise ValueError("azure_orchestration=%r is not an orchestration mode; use Uniform or Flexible"
                         % (azure_orchestration,))
    sizes = split_evenly(workers, worker_groups)
    groups = []
    if cloud == "none":
        sim = NodeSimClient(state["nodesim_url"])
        plan = [("sim-control-plane", CONTROL_PLANE, control_planes, "control-plane")]
        plan += [("sim-workers-%d" % i, "worker", size, "worker-%d" % i) for i, size in enumerate(sizes)]
        for group_id, role, size, prefix in plan:
            if size <= 0:
                continue
            names = ["%s-%d" % (prefix, i) for i in range(size)]
            for index, name in enumerate(names):
                sim.create_instance("sim://%s/%s" % (group_id, name), name, group_id=group_id, image=image,
                                    role=role, zone="zone-%s" % "abc"[index % 3])
            groups.append({"id": group_id, "role": role, "size": size, "names": names})
            say("group %s: %d %s node(s) on %s" % (group_id, size, role, image))
        return groups
    info = state.get("clouds", {}).get(cloud)
    if not info:
        raise RuntimeError("the %s emulator does not run in this sandbox (running: %s)"
                           % (cloud, sorted(state.get("clouds", {})) or "none"))
    import importlib

    from sandbox.cli import CLOUD_MODULES

    admin = importlib.import_module(CLOUD_MODULES[cloud]).Admin(info)
    image_ref = admin.create_image(image)
    plan = [("control-plane", CONTROL_PLANE, control_planes)]
    plan += [("workers-%d" % i, "worker", size) for i, size in enumerate(sizes)]
    for name, role, size in plan:
        if size <= 0:
            continue
        more = dict(worker_group_options or {}) if role == "worker" else {}
        if cloud == "azure" and role == "worker" and azure_orchestration != "Flexible":
            more.setdefault("overprovision", None)   # unset: ARM overprovisions, as for a set made without the field
        if azure_orchestration:
            more["orchestration"] = azure_orchestration
        group_id = admin.create_group(name, role, size, image_ref, **more)
        groups.append({"id": group_id, "role": role, "size": size})
        say("group %s: %d %s instance(s) on %s" % (group_id, size, role, image_ref))
    return groups


def settle_nodes(state, before, count, timeout, say=print):
    """Wait until exactly `count` of the instances made since `before` (the simulator's providerIDs then) exist and
    run, and delete the Node of each of them the cloud has deleted since. That is what the cloud-controller-manager's
    node-lifecycle controller does on a real cluster with a Node whose instance the cloud no longer has: here, an
    Azure overprovisioning extra that joined before the cloud deleted it. A Node whose instance the cloud still lists
    (deleting) is kept: the simulator hears of a deletion only once the emulator no longer lists the instance.
    Returns the names of the Nodes deleted."""
    sim = NodeSimClient(state["nodesim_url"])
    kube = _kube(state)
    deadline = time.monotonic() + timeout
    while True:
        made = [i for i in sim.instances() if i["provider_id"] not in before]
        live = [i for i in made if i["state"] != "deleted"]
        if len(live) == count and all(i["state"] == "ready" for i in live):
            break
        if time.monotonic() > deadline:
            raise TimeoutError("%d instance(s) made, %d wanted, after %.0fs: %s" % (
                len(live), count, timeout, sorted((i["node_name"], i["state"]) for i in live)))
        time.sleep(0.3)
    gone = sorted({i["node_name"] for i in made if i["state"] == "deleted"} - {i["node_name"] for i in live})
    for name in gone:
        kube.request("DELETE", "/api/v1/nodes/" + name, ok=(200, 404), parse=False)
        say("node %s deleted: the cloud deleted its instance (an overprovisioning extra)" % name)
    return gone


def count_ready_nodes(state):
    nodes = _kube(state).request("GET", "/api/v1/nodes", params={"resourceVersion": "0"}, timeout=60).get("items", [])
    return sum(1 for n in nodes if any(c["type"] == "Ready" and c["status"] == "True"
                                       for c in n.get("status", {}).get("conditions", [])))


def wait_nodes(state, count, timeout, say=print):
    """Wait until at least `count` Nodes are Ready; return the Ready count."""
    kube = _kube(state)
    deadline = time.monotonic() + timeout
    last_report = 0.0
    while True:
        nodes = kube.request("GET", "/api/v1/nodes", params={"resourceVersion": "0"}, timeout=60).get("items", [])
        ready = sum(1 for n in nodes if any(c["type"] == "Ready" and c["status"] == "True"
                                            for c in n.get("status", {}).get("conditions", [])))
        if ready >= count:
            return ready
        if time.monotonic() > deadline:
            raise TimeoutError("only %d of %d nodes Ready after %.0fs" % (ready, count, timeout))
        if time.monotonic() - last_report > 10:
            say("  %d/%d nodes Ready" % (ready, count))
            last_report = time.monotonic()
        time.sleep(0.5)


# ---------------------------------------------------------------- workloads (pure builders)

def _pod_template(labels, extra_spec=None):
    spec = {"terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
    spec.update(extra_spec or {})
    return {"metadata": {"labels": labels}, "spec": spec}


def workload_objects(namespace=WORKLOAD_NAMESPACE, deployments=3, replicas=4, bare_pods=2, statefulset_replicas=3,
                     cache_replicas=2):
    """(api path, object) pairs to create, in order (pure)."""
    objs = [("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})]
    apps = "/apis/apps/v1/namespaces/%s/" % namespace
    pdbs = "/apis/policy/v1/namespaces/%s/poddisruptionbudgets" % namespace
    for i in range(deployments):
        labels = {"app": "web-%d" % i}
        objs.append((apps + "deployments", {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web-%d" % i},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": _pod_template(labels)}}))
        objs.append((pdbs, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web-%d" % i},
                            "spec": {"minAvailable": max(replicas - 1, 0), "selector": {"matchLabels": labels}}}))
    labels = {"app": "node-agent"}
    objs.append((apps + "daemonsets", {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "node-agent"},
        "spec": {"selector": {"matchLabels": labels},
                 "template": _pod_template(labels, {"tolerations": [{"operator": "Exists"}]})}}))
    labels = {"app": "db"}
    objs.append(("/api/v1/namespaces/%s/services" % namespace, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
        "spec": {"clusterIP": "None", "selector": labels, "ports": [{"port": 5432}]}}))
    objs.append((apps + "statefulsets", {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"replicas": statefulset_replicas, "serviceName": "db", "selector": {"matchLabels": labels},
                 "podManagementPolicy": "Parallel", "template": _pod_template(labels)}}))
    objs.append((pdbs, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "db"},
                        "spec": {"minAvailable": max(statefulset_replicas - 1, 0),
                                 "selector": {"matchLabels": labels}}}))
    labels = {"app": "cache"}
    objs.append((apps + "deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "cache"},
        "spec": {"replicas": cache_replicas, "selector": {"matchLabels": labels},
                 "template": _pod_template(labels, {"volumes": [{"name": "scratch", "emptyDir": {}}]})}}))
    objs[-1][1]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "scratch", "mountPath": "/scratch"}]
    for i in range(bare_pods):
        pod = _pod_template({"app": "debug"})
        pod.update({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "debug-%d" % i, "labels": {"app": "debug"}}})
        objs.append(("/api/v1/namespaces/%s/pods" % namespace, pod))
    labels = {"app": "cluster-autoscaler"}
    objs.append(("/apis/apps/v1/namespaces/kube-system/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "cluster-autoscaler",
                                                                    "labels": labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": _pod_template(labels)}}))
    return objs


def expected_pods(objs, nodes):
    """How many pods `objs` make on `nodes` nodes (pure)."""
    total = 0
    for _, obj in objs:
        kind = obj["kind"]
        if kind in ("Deployment", "StatefulSet"):
            total += obj["spec"]["replicas"]
        elif kind == "DaemonSet":
            total += nodes
        elif kind == "Pod":
            total += 1
    return total


def seed_workloads(state, namespace=WORKLOAD_NAMESPACE, say=print, **sizes):
    kube = _kube(state)
    objs = workload_objects(namespace, **sizes)
    for path, obj in objs:
        try:
            kube.request("POST", path, obj)
        except KubeError as exc:
            if exc.status != 409:
                raise
        if obj["kind"] == "Namespace":
            _wait_default_sa(kube, namespace)
    return objs


def _wait_default_sa(kube, namespace, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        try:
            kube.request("GET", "/api/v1/namespaces/%s/serviceaccounts/default" % namespace)
            return
        except KubeError as exc:
            if exc.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def wait_pods_running(state, count, timeout, say=print):
    """Wait until at least `count` pods run Ready; return the count."""
    kube = _kube(state)
    deadline = time.monotonic() + timeout
    last_report = 0.0
    while True:
        # resourceVersion=0: served from the API server's watch cache, not read from etcd each poll
        # (with 10,000 pods, polling etcd slowed down the very pods being waited for).
        page = kube.request("GET", "/api/v1/pods", params={"resourceVersion": "0",
                                                            "fieldSelector": "status.phase=Running"}, timeout=120)
        running = sum(1 for p in page.get("items", []) if p["metadata"].get("deletionTimestamp") is None)
        if running >= count:
            return running
        if time.monotonic() > deadline:
            raise TimeoutError("only %d of %d pods Running after %.0fs" % (running, count, timeout))
        if time.monotonic() - last_report > 10:
            say("  %d/%d pods Running" % (running, count))
            last_report = time.monotonic()
        time.sleep(1.0 if count < 1000 else 5.0)


def seed(state, control_planes=3, workers=6, worker_groups=2, cloud="none", image="image-a", workloads=True,
         timeout=600, say=print, azure_orchestration=None, worker_group_options=None, **workload_sizes):
    """Nodes, then workloads; wait for everything to be Ready/Running. Returns a summary dict."""
    started = time.monotonic()
    already_ready = count_ready_nodes(state)
    before = {i["provider_id"] for i in NodeSimClient(state["nodesim_url"]).instances()}
    groups = seed_nodes(state, control_planes, workers, worker_groups, cloud=cloud, image=image, say=say,
                        azure_orchestration=azure_orchestration, worker_group_options=worker_group_options)
    total = control_planes + workers
    wait_nodes(state, already_ready + total, timeout, say=say)
    if cloud != "none":
        settle_nodes(state, before, total, timeout, say=say)
    summary = {"cloud": cloud, "image": image, "groups": groups, "nodes": total,
               "nodes_ready_after_s": round(time.monotonic() - started, 1)}
    say("%d nodes Ready after %.1fs" % (total, time.monotonic() - started))
    if workloads:
        objs = seed_workloads(state, say=say, **workload_sizes)
        want = expected_pods(objs, total)
        remaining = max(timeout - (time.monotonic() - started), 10)
        summary["pods"] = wait_pods_running(state, want, remaining, say=say)
        summary["pods_running_after_s"] = round(time.monotonic() - started, 1)
        say("%d pods Running after %.1fs" % (summary["pods"], time.monotonic() - started))
    return summary
