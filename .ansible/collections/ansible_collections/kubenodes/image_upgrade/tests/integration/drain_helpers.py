"""Workloads for the node_drain integration tests and benchmark: Deployments, PDBs, DaemonSets and bare
pods pinned to the test's own simulated nodes (by their scaling-group label, unique per test), created
through the raw JSON client of the sandbox."""

import time
import uuid

GROUP_LABEL = "sandbox.kubenodes.io/group"


def unique_group():
    return "drain-" + uuid.uuid4().hex[:8]


def container(name="app"):
    return {"name": name, "image": "registry.invalid/app:1"}


def pod_template(labels, group, emptydir=False, grace=None):
    spec = {"containers": [container()], "nodeSelector": {GROUP_LABEL: group}}
    if emptydir:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        spec["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"labels": dict(labels)}, "spec": spec}


def create_deployment(kube, namespace, name, replicas, group, emptydir=False, grace=None, labels=None):
    labels = labels or {"app": name}
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": pod_template(labels, group, emptydir, grace)}}
    return kube.request("POST", "/apis/apps/v1/namespaces/%s/deployments" % namespace, body, ok=(201,))


def create_daemonset(kube, namespace, name, group):
    labels = {"app": name}
    body = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": labels}, "template": pod_template(labels, group)}}
    return kube.request("POST", "/apis/apps/v1/namespaces/%s/daemonsets" % namespace, body, ok=(201,))


def create_bare_pod(kube, namespace, name, node):
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
            "spec": {"containers": [container()], "nodeName": node}}
    return kube.request("POST", "/api/v1/namespaces/%s/pods" % namespace, body, ok=(201,))


def create_pdb(kube, namespace, name, match_labels, min_available):
    body = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": namespace},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": match_labels}}}
    return kube.request("POST", "/apis/policy/v1/namespaces/%s/poddisruptionbudgets" % namespace, body, ok=(201,))


def pods(kube, namespace, selector=None):
    params = {"labelSelector": selector} if selector else None
    return kube.request("GET", "/api/v1/namespaces/%s/pods" % namespace, params=params).get("items", [])


def running_ready(pod):
    status = pod.get("status") or {}
    return (status.get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or []))


def pods_on(kube, namespace, node):
    return [p for p in pods(kube, namespace) if p["spec"].get("nodeName") == node]


def wait_until(what, predicate, timeout=60, interval=0.2):
    """Poll predicate() until it returns something truthy; return it, or fail naming `what`."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("timed out after %ss waiting for %s (last: %r)" % (timeout, what, last))


def wait_running_on(kube, namespace, node, count, timeout=90):
    return wait_until("%d running pods of %s on %s" % (count, namespace, node),
                      lambda: len([p for p in pods_on(kube, namespace, node) if running_ready(p)]) == count,
                      timeout)


def wait_pdb_observed(kube, namespace, name, allowed, timeout=30):
    """Until the disruption controller has computed the PDB and it allows `allowed` disruptions."""
    def check():
        pdb = kube.request("GET", "/apis/policy/v1/namespaces/%s/poddisruptionbudgets/%s" % (namespace, name))
        status = pdb.get("status") or {}
        return (status.get("observedGeneration") == pdb["metadata"].get("generation")
                and status.get("disruptionsAllowed") == allowed)
    return wait_until("PDB %s/%s to allow %d disruptions" % (namespace, name, allowed), check, timeout)


def node(kube, name):
    return kube.request("GET", "/api/v1/nodes/" + name)


def is_cordoned(kube, name):
    return bool(node(kube, name)["spec"].get("unschedulable"))
