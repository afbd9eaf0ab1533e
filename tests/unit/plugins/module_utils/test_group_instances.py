"""csp_node's cluster check before deleting instances (state=absent, cluster_check): pure logic over the Nodes and
pods the API lists."""

from types import SimpleNamespace

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.group_instances import cluster_problems


def node(name, provider_id, cordoned=False):
    spec = {"providerID": provider_id}
    if cordoned:
        spec["unschedulable"] = True
    return {"metadata": {"name": name}, "spec": spec}


def pod(name, owner_kind=None, phase="Running"):
    meta = {"name": name, "namespace": "apps"}
    if owner_kind:
        meta["ownerReferences"] = [{"kind": owner_kind, "name": "o", "controller": True}]
    return {"metadata": meta, "spec": {}, "status": {"phase": phase}}


def targets(*provider_ids):
    return {pid.lower(): SimpleNamespace(provider_id=pid) for pid in provider_ids}


def codes(problems):
    return [(p["node"], p["code"]) for p in problems]


def test_an_uncordoned_node_is_refused_and_its_pods_are_not_listed():
    listed = []
    problems = cluster_problems([node("w-1", "aws:///a/I-1")], lambda name: listed.append(name) or [],
                                targets("aws:///a/I-1"), str.lower)
    assert codes(problems) == [("w-1", "not_cordoned")] and listed == []
    assert "aws:///a/I-1" in problems[0]["message"] and "not cordoned" in problems[0]["message"]


def test_a_cordoned_node_with_a_workload_pod_is_refused_but_daemonset_and_finished_pods_do_not_count():
    pods = {"w-1": [pod("web", "ReplicaSet"), pod("agent", "DaemonSet")],
            "w-2": [pod("agent", "DaemonSet"), pod("job", "Job", phase="Succeeded")]}
    problems = cluster_problems([node("w-1", "p-1", cordoned=True), node("w-2", "p-2", cordoned=True)], pods.get,
                                targets("p-1", "p-2"), str.lower)
    assert codes(problems) == [("w-1", "pods_left")] and "apps/web" in problems[0]["message"]


def test_instances_without_a_node_and_nodes_not_targeted_are_not_held_back():
    nodes = [node("w-1", "p-1"), {"metadata": {"name": "no-id"}, "spec": {}}]
    assert cluster_problems(nodes, lambda name: [], targets("p-9"), str.lower) == []
