"""node_delete through ansible-playbook against the sandbox: only donors and obsolete nodes are deleted,
all-or-nothing, idempotently."""

import time
import uuid

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core
from tests.ansible_run import run_module

pytestmark = pytest.mark.timeout(300)
PREFIX = "image-upgrade.kubenodes.io"


def exists(sandbox, name):
    return sandbox.kube().request("GET", "/api/v1/nodes/" + name, ok=(200, 404)).get("kind") == "Node"


def mark(sandbox, name, key, value):
    sandbox.kube().merge_patch("/api/v1/nodes/" + name, {"metadata": {"annotations": {PREFIX + "/" + key: value}}})


def drained(sandbox, name, first, annotations):
    """Record `name` as the collection leaves a drained node: its trail from `first` to drained, cordoned."""
    now = time.time()
    trail = ",".join("%s@%s" % (phase, core.format_time(now)) for phase in (first, "draining", "drained"))
    annotations = dict(annotations, **{"phase": "drained", "phase-since": core.format_time(now), "phase-history": trail})
    sandbox.kube().merge_patch("/api/v1/nodes/" + name, {
        "spec": {"unschedulable": True},
        "metadata": {"annotations": {PREFIX + "/" + k: v for k, v in annotations.items()}}})


def bound_pod(sandbox, namespace, node, name):
    """A bare pod bound to `node` (no scheduler): a pod a drain would have evicted (or refused to)."""
    sandbox.kube().request("POST", "/api/v1/namespaces/%s/pods" % namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.invalid/pause"}]}})


def delete_pods(sandbox, namespace, names):
    for name in names:
        sandbox.kube().request("DELETE", "/api/v1/namespaces/%s/pods/%s" % (namespace, name), {"gracePeriodSeconds": 0},
                               ok=(200, 202, 404))


def test_donor_and_obsolete_nodes_are_deleted_idempotently(sandbox, new_nodes):
    donor, obsolete, heir = new_nodes(3)
    # A mutual pair whose donor this collection drained, and an obsolete node it marked and drained.
    mark(sandbox, heir, "donor", donor)
    drained(sandbox, donor, "paired", {"heir": heir})
    drained(sandbox, obsolete, "obsolete", {"obsolete": "true"})
    args = dict(sandbox.auth_args(), name=[donor, obsolete])

    predicted = run_module("node_delete", args, check=True, diff=True)
    assert predicted["changed"] and sorted(predicted["deleted"]) == sorted([donor, obsolete])
    assert exists(sandbox, donor) and exists(sandbox, obsolete)
    deletion = {"before": {"nodes": sorted([donor, obsolete])}, "after": {"nodes": []}}
    assert predicted["diff"] == deletion, predicted

    gone = run_module("node_delete", args, diff=True)
    assert gone["changed"] and sorted(gone["deleted"]) == sorted([donor, obsolete])
    assert not exists(sandbox, donor) and not exists(sandbox, obsolete) and exists(sandbox, heir)
    assert gone["diff"] == deletion, gone

    again = run_module("node_delete", args, diff=True)
    assert not again["changed"] and sorted(again["absent"]) == sorted([donor, obsolete]) and "diff" not in again


def test_a_node_not_being_replaced_is_refused_and_nothing_is_deleted(sandbox, new_nodes):
    donor, bystander = new_nodes(2)
    mark(sandbox, donor, "heir", "someone")
    refused = run_module("node_delete", dict(sandbox.auth_args(), name=[donor, bystander]))
    assert refused["failed"] and bystander in refused["msg"] and "refusing to delete" in refused["msg"]
    assert exists(sandbox, donor) and exists(sandbox, bystander)


def test_a_donor_not_drained_is_refused_naming_its_pods_and_nothing_is_deleted(sandbox, new_nodes, namespace):
    """Issue 28: a donor whose record is complete and self-consistent, but that still runs pods a drain would have
    evicted, or is not cordoned, is refused without the cloud options too (in check mode as well), naming the node,
    a few pods with their count, and node_drain; once it is cordoned and empty, it is deleted."""
    donor, heir = new_nodes(2)
    mark(sandbox, heir, "donor", donor)
    drained(sandbox, donor, "paired", {"heir": heir})
    pods = ["web-%d" % n for n in range(5)]
    for name in pods:
        bound_pod(sandbox, namespace, donor, name)
    args = dict(sandbox.auth_args(), name=[donor])
    for check in (True, False):
        refused = run_module("node_delete", args, check=check)
        assert refused["failed"] and [p["code"] for p in refused["problems"]] == ["pods_left"], refused
        msg = refused["msg"]
        assert "node %s: 5 pod(s)" % donor in msg and "%s/web-0, %s/web-1, %s/web-2 and 2 more" % ((namespace,) * 3) in msg
        assert "Drain %s first with node_drain" % donor in msg and refused["deleted"] == [], msg
        assert exists(sandbox, donor)

    sandbox.kube().merge_patch("/api/v1/nodes/" + donor, {"spec": {"unschedulable": False}})
    refused = run_module("node_delete", args)
    assert refused["failed"] and [p["code"] for p in refused["problems"]] == ["not_cordoned", "pods_left"], refused
    assert exists(sandbox, donor)

    delete_pods(sandbox, namespace, pods)
    sandbox.kube().merge_patch("/api/v1/nodes/" + donor, {"spec": {"unschedulable": True}})
    deleted = run_module("node_delete", args)
    assert not deleted["failed"] and deleted["deleted"] == [donor], deleted
    assert not exists(sandbox, donor) and exists(sandbox, heir)


def test_bad_prefix_is_a_clear_error(sandbox):
    bad = run_module("node_delete", dict(sandbox.auth_args(), name=["x"], annotation_prefix="Not A Prefix"))
    assert bad["failed"] and "DNS subdomain" in bad["msg"]


def test_a_node_whose_status_moved_is_deleted_as_read_but_not_one_whose_claim_changed(sandbox, new_nodes):
    """The executor deletes a donor's Node read at the start of its pass, after deleting its instance: by then
    the node controller or a heartbeat may have moved its status (a 409 on the resourceVersion precondition).
    Only the status moved: it is deleted. Its annotations changed: nothing is deleted."""
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import node_state

    moved, claimed = new_nodes(2)
    kube = sandbox.kube()
    read = {name: kube.request("GET", "/api/v1/nodes/" + name) for name in (moved, claimed)}
    kube.request("PATCH", "/api/v1/nodes/%s/status" % moved, {"status": {"conditions": [
        {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "message": "test: kubelet stopped"}]}},
        content_type="application/strategic-merge-patch+json")
    mark(sandbox, claimed, "heir", "someone-else")
    for name in (moved, claimed):
        assert kube.request("GET", "/api/v1/nodes/" + name)["metadata"]["resourceVersion"] != read[name]["metadata"]["resourceVersion"]

    client = sandbox.api_client()
    assert node_state.delete_node_as_read(client, read[claimed], PREFIX) == "changed"
    assert exists(sandbox, claimed)
    assert node_state.delete_node_as_read(client, read[moved], PREFIX) == "deleted"
    assert not exists(sandbox, moved)
    assert node_state.delete_node_as_read(client, read[moved], PREFIX) == "absent"


def test_with_the_cloud_a_node_whose_instance_still_runs_is_refused(sandbox, cloud_admin, namespace):
    """Issue 13: node_delete called on its own asks the cloud too when given provider: a donor the cluster
    records as drained, whose instance still runs, is refused naming the instance and its group (without
    provider the cluster's side alone would delete it); once the instance is gone, the Node is deleted."""
    admin = cloud_admin("aws")
    tag = uuid.uuid4().hex[:8]
    group = admin.create_group("nd-" + tag, "worker", 2, admin.create_image("nd-" + tag))
    donor, heir = [instance for instance, _state in admin.group_instances(group)]
    cloud = admin.provider_options()
    try:
        sandbox.wait_nodes_ready([donor, heir], timeout=120)
        mark(sandbox, heir, "donor", donor)
        drained(sandbox, donor, "paired", {"heir": heir})
        args = dict(sandbox.auth_args(), name=[donor])
        assert run_module("node_delete", args, check=True)["deleted"] == [donor]     # the cluster's side agrees

        refused = run_module("node_delete", dict(args, **cloud))
        assert refused["failed"] and [p["code"] for p in refused["problems"]] == ["instance_running"], refused
        assert "still exists in scaling group %s" % group in refused["msg"] and donor in refused["msg"], refused["msg"]
        assert "csp_node state=absent" in refused["msg"] and exists(sandbox, donor)

        # Issue 28: csp_node state=absent reads the cluster too. The heir is not cordoned, and a pod bound to the
        # cordoned donor shows it was not emptied: both are refused, in check mode as well, and nothing is deleted.
        instances = sorted(i for i, _state in admin.group_instances(group))
        serving = run_module("csp_node", dict(cloud, state="absent", group=group, node_name=[heir, donor],
                                              **sandbox.auth_args()), check=True)
        assert serving["failed"] and serving["reason"] == "serving", serving
        assert [(p["node"], p["code"]) for p in serving["problems"]] == [(heir, "not_cordoned")], serving
        assert "node_drain" in serving["msg"] and "cluster_check=false" in serving["msg"], serving["msg"]
        bound_pod(sandbox, namespace, donor, "early")
        undrained = run_module("csp_node", dict(cloud, state="absent", group=group, node_name=[donor],
                                                **sandbox.auth_args()))
        assert undrained["failed"] and [p["code"] for p in undrained["problems"]] == ["pods_left"], undrained
        assert "%s/early" % namespace in undrained["msg"] and not undrained["changed"], undrained["msg"]
        assert sorted(i for i, _state in admin.group_instances(group)) == instances
        delete_pods(sandbox, namespace, ["early"])
        gone = run_module("csp_node", dict(cloud, state="absent", group=group, node_name=[donor], wait=True,
                                           wait_timeout=120, wait_sleep=1, **sandbox.auth_args()))
        assert not gone.get("failed"), gone
        # Issue 28: the cloud agrees now, but a pod still bound to the node shows it was not drained.
        bound_pod(sandbox, namespace, donor, "late")
        undrained = run_module("node_delete", dict(args, **cloud))
        assert undrained["failed"] and [p["code"] for p in undrained["problems"]] == ["pods_left"], undrained
        assert "%s/late" % namespace in undrained["msg"] and exists(sandbox, donor)
        delete_pods(sandbox, namespace, ["late"])
        deleted = run_module("node_delete", dict(args, **cloud))
        assert not deleted.get("failed") and donor in deleted["deleted"] + deleted["absent"], deleted
        assert not exists(sandbox, donor) and exists(sandbox, heir)
    finally:
        run_module("csp_node", dict(cloud, state="absent", cluster_check=False, group=group, node_name=[heir]))
        for name in (donor, heir):
            sandbox.kube().request("DELETE", "/api/v1/nodes/" + name, ok=(200, 202, 404))
