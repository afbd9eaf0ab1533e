from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core, facts_views
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers.base import RUNNING, Instance

KEYS = core.AnnotationKeys("image-upgrade.kubenodes.io")


def node(name, ready=True, cp=False, ip=None, **annotations):
    labels = {core.CONTROL_PLANE_LABEL: ""} if cp else {}
    return {"metadata": {"name": name, "labels": labels,
                         "annotations": {"image-upgrade.kubenodes.io/" + k.replace("_", "-"): v for k, v in annotations.items()}},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                       "addresses": [{"type": "InternalIP", "address": ip}] if ip else []}}


NODES = [
    node("cp-0", cp=True, ip="127.9.0.1", heir="cp-9", phase="drained", phase_since="2026-11-30T10:00:00Z",
         scaling_group_id="g-cp"),
    node("cp-9", cp=True, ip="127.9.0.9", donor="cp-0"),
    node("cp-1", cp=True, ip="fd00::1", ready=False, scaling_group_id="g-cp"),
    node("w-0", heir="w-9", scaling_group_id="g-w"),
    node("w-9", ready=False, donor="w-0"),
    node("w-1", scaling_group_id="g-w"),
]
FACTS = {"nodes": {"donor": ["cp-0", "w-0"], "outdated": ["w-1", "cp-1"], "heir": ["cp-9", "w-9"]}}


def test_donors_describe_their_pair_and_phase():
    result = {d["name"]: d for d in facts_views.donors(NODES, FACTS, KEYS)}
    assert result["cp-0"] == dict(name="cp-0", heir="cp-9", heir_ready=True, group="g-cp", role="control-plane",
                                  phase="drained", phase_since="2026-11-30T10:00:00Z", heir_created=None,
                                  heir_joined=None, heir_ready_since=None)
    assert result["w-0"]["heir_ready"] is False and result["w-0"]["phase"] == "paired" and result["w-0"]["role"] == "worker"


def test_donors_say_when_their_heir_was_created_joined_and_turned_ready():
    nodes = [dict(n) for n in NODES]
    heir = nodes[1] = node("cp-9", cp=True, ip="127.9.0.9", donor="cp-0")
    heir["metadata"]["creationTimestamp"] = "2026-11-30T09:58:00Z"
    heir["spec"]["providerID"] = "gce://p/z/CP-9"
    heir["status"]["conditions"][0]["lastTransitionTime"] = "2026-11-30T09:58:20Z"
    created = Instance(provider_id="gce://p/z/cp-9", node_name="cp-9", group_id="g-cp", image="i", state=RUNNING,
                       created_at=core.parse_time("2026-11-30T09:57:30Z"))
    [cp0] = [d for d in facts_views.donors(nodes, FACTS, KEYS, {"g-cp": [created]}) if d["name"] == "cp-0"]
    assert (cp0["heir_created"], cp0["heir_joined"], cp0["heir_ready_since"]) == (
        "2026-11-30T09:57:30Z", "2026-11-30T09:58:00Z", "2026-11-30T09:58:20Z")
    # Without the cloud read (node_image_facts on its own), the Node's own times only.
    [cp0] = [d for d in facts_views.donors(nodes, FACTS, KEYS) if d["name"] == "cp-0"]
    assert cp0["heir_created"] is None and cp0["heir_joined"] == "2026-11-30T09:58:00Z"


def test_donors_gone_are_the_donors_of_promoted_heirs():
    nodes = NODES + [node("w-8", cp=False, donor="w-7", started_at="2026-11-30T09:00:00Z", scaling_group_id="g-w")]
    facts = dict(FACTS, plan={"repairs": [{"name": "w-8", "action": "promote", "donor": "w-7"},
                                          {"name": "w-9", "action": "unpair", "donor": "w-0"},
                                          {"name": "gone", "action": "promote", "donor": "x"}]})
    assert facts_views.donors_gone(nodes, facts, KEYS) == [
        dict(name="w-7", heir="w-8", group="g-w", role="worker", paired_at="2026-11-30T09:00:00Z")]
    assert facts_views.donors_gone(NODES, FACTS, KEYS) == []


def test_not_ready():
    assert facts_views.not_ready(NODES) == ["cp-1", "w-9"]


def test_control_plane_endpoints_ready_first_ipv6_bracketed():
    assert facts_views.control_plane_endpoints(NODES) == [
        "https://127.9.0.1:2379", "https://127.9.0.9:2379", "https://[fd00::1]:2379"]


def test_replacement_order_control_plane_first_in_flight_first():
    order = [(r["name"], r["in_flight"]) for r in facts_views.replacement_order(NODES, FACTS, KEYS)]
    assert order == [("cp-0", True), ("cp-1", False), ("w-0", True), ("w-1", False)]


def test_blocking_pdbs_are_those_allowing_no_disruption():
    pdbs = [
        {"metadata": {"namespace": "b", "name": "web"}, "spec": {"minAvailable": 3},
         "status": {"disruptionsAllowed": 0, "currentHealthy": 3, "desiredHealthy": 3, "expectedPods": 3}},
        {"metadata": {"namespace": "a", "name": "ok"}, "spec": {"minAvailable": 1}, "status": {"disruptionsAllowed": 2}},
        {"metadata": {"namespace": "a", "name": "new"}, "spec": {"maxUnavailable": 1}},
    ]
    result = facts_views.blocking_pdbs(pdbs)
    assert [(p["namespace"], p["name"]) for p in result] == [("a", "new"), ("b", "web")]
    assert result[1]["min_available"] == 3 and result[1]["expected_pods"] == 3


def test_replacement_order_and_donors_take_the_group_the_plan_is_about_to_annotate():
    # A cluster nobody has upgraded yet: no scaling-group annotation, only this plan's annotate entry
    # (the first check-mode plan used to say "node w-5 in None").
    nodes = [node("w-5"), node("w-6", heir="w-7"), node("w-7", donor="w-6")]
    facts = {"nodes": {"outdated": ["w-5"], "donor": ["w-6"], "heir": ["w-7"]},
             "plan": {"annotate": [{"name": "w-5", "annotations": {"scaling-group-id": "g-new", "node-image": "a"}},
                                   {"name": "w-6", "annotations": {"scaling-group-id": "g-old"}}]}}
    order = facts_views.replacement_order(nodes, facts, KEYS)
    assert [(r["name"], r["group"]) for r in order] == [("w-6", "g-old"), ("w-5", "g-new")]
    assert [d["group"] for d in facts_views.donors(nodes, facts, KEYS)] == ["g-old"]


def test_the_annotation_wins_over_the_plan_and_a_node_in_neither_has_no_group():
    nodes = [node("w-1", scaling_group_id="g-w"), node("w-2")]
    facts = {"nodes": {"outdated": ["w-1", "w-2"]},
             "plan": {"annotate": [{"name": "w-1", "annotations": {"scaling-group-id": "other"}}]}}
    assert {r["name"]: r["group"] for r in facts_views.replacement_order(nodes, facts, KEYS)} == {"w-1": "g-w", "w-2": None}


def pod(name, phase="Running", ready=True, node="w-1", namespace="kube-system", deleting=False, **status):
    metadata = {"name": name, "namespace": namespace}
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-04T10:00:00Z"
    conditions = [{"type": "Ready", "status": "True" if ready else "False", "reason": None if ready else "ContainersNotReady"}]
    conditions += status.pop("conditions", [])
    return {"metadata": metadata, "spec": {"nodeName": node} if node else {},
            "status": dict(status, phase=phase, conditions=conditions)}


def waiting(name, reason):
    return [{"name": name, "ready": False, "state": {"waiting": {"reason": reason}}}]


def test_unready_system_pods_name_each_with_its_node_phase_and_why():
    pods = [
        pod("coredns-1", ready=False, containerStatuses=waiting("coredns", "CrashLoopBackOff")),
        # On w-0, a node the upgrade is about to replace: still named.
        pod("proxy-0", phase="Pending", ready=False, node="w-0", initContainerStatuses=[
            {"name": "init", "ready": False, "state": {"terminated": {"reason": "Error"}}}]),
        pod("metrics-1", phase="Pending", ready=False, node=None,
            conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]),
        pod("cni-1", ready=False, containerStatuses=[{"name": "cni", "ready": False, "state": {"running": {}}}]),
        pod("evicted", phase="Failed", ready=False, reason="Evicted"),
        pod("lost", phase="Pending", ready=False, reason="NodeLost"),
        pod("unbound", phase="Pending", ready=False, node=None),
        pod("probe", ready=False),
        # Not counted: Ready, finished (a Job's pod, an evicted pod), being deleted, or of another namespace.
        pod("dns-ok"), pod("job-1", phase="Succeeded", ready=False), pod("going", ready=False, deleting=True),
        pod("app", ready=False, namespace="default"),
    ]
    found = facts_views.unready_system_pods(pods)
    assert [(p["name"], p["node"], p["phase"], p["why"]) for p in found] == [
        ("cni-1", "w-1", "Running", "container cni not ready"),
        ("coredns-1", "w-1", "Running", "container coredns CrashLoopBackOff"),
        ("lost", "w-1", "Pending", "NodeLost"),
        ("metrics-1", None, "Pending", "Unschedulable"),
        ("probe", "w-1", "Running", "ContainersNotReady"),
        ("proxy-0", "w-0", "Pending", "container init terminated: Error"),
        ("unbound", None, "Pending", "not scheduled"),
    ]
    assert found[1] == dict(namespace="kube-system", name="coredns-1", node="w-1", phase="Running",
                            why="container coredns CrashLoopBackOff",
                            description="kube-system/coredns-1 on w-1 (Running: container coredns CrashLoopBackOff)")
    assert found[3]["description"] == "kube-system/metrics-1 on no node (Pending: Unschedulable)"
    assert facts_views.unready_system_pods([pod("dns-ok")]) == []
