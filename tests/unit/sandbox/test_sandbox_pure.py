"""Pure parts of the sandbox: Node/Pod objects the simulator writes, seeding plans, the demo table,
and the node-IP block claims (lock files only; no process is started)."""

import datetime
import ipaddress
import os
import random
import subprocess

import pytest

from sandbox import demo, nodesim, seed


def test_node_object_for_control_plane_carries_role_label_taint_and_provider_id():
    node = nodesim.node_object("cp-1", "gce://p/z/cp-1", "127.9.9.1", "projects/p/zones/z/instanceGroupManagers/cp",
                               "projects/p/global/images/img-a", "control-plane", "us-central1-a")
    labels = node["metadata"]["labels"]
    assert labels["node-role.kubernetes.io/control-plane"] == ""
    assert labels["kubernetes.io/hostname"] == "cp-1"
    assert labels["topology.kubernetes.io/zone"] == "us-central1-a"
    assert node["spec"]["providerID"] == "gce://p/z/cp-1"
    assert node["spec"]["taints"] == [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    # label values must be valid: free-form cloud IDs are cut to 63 safe characters
    for value in labels.values():
        assert len(value) <= 63
        assert all(ch.isalnum() or ch in "._-" for ch in value)


def test_worker_node_object_has_no_role_and_no_taints():
    node = nodesim.node_object("w-1", "sim://g/w-1", "127.9.9.2", "g", "img", "worker", None)
    assert "node-role.kubernetes.io/control-plane" not in node["metadata"]["labels"]
    assert "topology.kubernetes.io/zone" not in node["metadata"]["labels"]
    assert "taints" not in node["spec"]


def test_node_status_ready_and_gone():
    ready = nodesim.node_status("127.1.2.3", "n", "img")["status"]
    cond = {c["type"]: c["status"] for c in ready["conditions"]}
    assert cond == {"Ready": "True", "MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False"}
    assert ready["addresses"][0] == {"type": "InternalIP", "address": "127.1.2.3"}
    assert ready["allocatable"]["pods"] == "110"
    gone = nodesim.node_status("127.1.2.3", "n", "img", ready=False)["status"]
    assert {c["type"]: c["status"] for c in gone["conditions"]}["Ready"] == "Unknown"


def test_taint_helpers():
    taints = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}, {"key": "dedicated", "effect": "NoSchedule"}]
    assert nodesim.taints_without(taints, ("node.kubernetes.io/not-ready",)) == [taints[1]]
    assert nodesim.taints_without(None, ("x",)) == []
    result = nodesim.unreachable_taints(taints)
    assert result[0] == taints[1]
    assert [(t["key"], t["effect"]) for t in result[1:]] == [("node.kubernetes.io/unreachable", "NoSchedule"),
                                                             ("node.kubernetes.io/unreachable", "NoExecute")]


def test_running_pod_status_and_readiness():
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b"}],
                                               "initContainers": [{"name": "init"}]},
           "status": {"phase": "Pending"}}
    assert not nodesim.pod_is_running_ready(pod)
    status = nodesim.running_pod_status(pod, "127.0.3.4", "10.244.0.9")["status"]
    assert status["phase"] == "Running" and status["hostIP"] == "127.0.3.4" and status["podIP"] == "10.244.0.9"
    assert [c["name"] for c in status["containerStatuses"]] == ["a", "b"]
    assert all(c["ready"] for c in status["containerStatuses"])
    assert status["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert nodesim.pod_is_running_ready({"status": status})


@pytest.mark.parametrize("meta,spec,cap,expected", [
    ({"deletionGracePeriodSeconds": 30}, {}, 2.0, 2.0),
    ({"deletionGracePeriodSeconds": 1}, {}, 2.0, 1.0),
    ({}, {"terminationGracePeriodSeconds": 0}, 5.0, 0.0),
    ({}, {}, 100.0, 30.0),  # the API default grace period
])
def test_termination_delay(meta, spec, cap, expected):
    assert nodesim.termination_delay({"metadata": meta, "spec": spec}, cap) == expected


def test_split_evenly():
    assert seed.split_evenly(6, 2) == [3, 3]
    assert seed.split_evenly(7, 3) == [3, 2, 2]
    assert seed.split_evenly(0, 2) == [0, 0]
    assert seed.split_evenly(5, 0) == []


def test_workloads_cover_what_a_drain_meets():
    objs = seed.workload_objects(deployments=2, replicas=3, bare_pods=2, statefulset_replicas=3, cache_replicas=2)
    kinds = [o["kind"] for dummy, o in objs]
    assert kinds.count("Deployment") == 4  # web-0, web-1, cache, cluster-autoscaler
    assert "DaemonSet" in kinds and "StatefulSet" in kinds and kinds.count("Pod") == 2
    pdbs = [o for dummy, o in objs if o["kind"] == "PodDisruptionBudget"]
    # integer minAvailable: maxUnavailable or percentages over bare pods would block every eviction
    assert all(isinstance(p["spec"]["minAvailable"], int) for p in pdbs)
    assert {p["metadata"]["name"]: p["spec"]["minAvailable"] for p in pdbs} == {"web-0": 2, "web-1": 2, "db": 2}
    autoscaler = [(path, o) for path, o in objs if o["metadata"]["name"] == "cluster-autoscaler"]
    assert autoscaler[0][0] == "/apis/apps/v1/namespaces/kube-system/deployments"
    cache = [o for dummy, o in objs if o["metadata"]["name"] == "cache"][0]
    assert cache["spec"]["template"]["spec"]["volumes"] == [{"name": "scratch", "emptyDir": {}}]
    # 2*3 web + 2 cache + 3 db + 2 bare + 1 autoscaler + one agent per node
    assert seed.expected_pods(objs, nodes=5) == 6 + 2 + 3 + 2 + 1 + 5


def test_node_table():
    now = datetime.datetime(2026, 1, 1, 0, 10, tzinfo=datetime.timezone.utc)
    nodes = [{"metadata": {"name": "b", "creationTimestamp": "2026-01-01T00:09:30Z",
                           "labels": {"node-role.kubernetes.io/control-plane": ""}},
              "spec": {"providerID": "sim://g/b", "unschedulable": True},
              "status": {"conditions": [{"type": "Ready", "status": "True"}],
                         "addresses": [{"type": "InternalIP", "address": "127.0.0.2"}],
                         "nodeInfo": {"osImage": "projects/p/global/images/img-a"}}},
             {"metadata": {"name": "a", "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {}},
              "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}]
    lines = demo.node_table(nodes, now=now)
    assert lines[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "INTERNAL-IP", "IMAGE", "PROVIDER-ID"]
    assert lines[1].split() == ["a", "NotReady", "<none>", "10m"]
    assert lines[2].split() == ["b", "Ready,SchedulingDisabled", "control-plane", "30s", "127.0.0.2", "img-a",
                                "sim://g/b"]


def test_node_network_claims_unique_blocks_and_takes_over_stale_locks(tmp_path):
    net = nodesim.NodeNetwork(lock_dir=tmp_path, rng=random.Random(7))
    block = net.claim_block()
    lock = tmp_path / block.split("/")[0]
    assert lock.read_text() == str(os.getpid())
    ips = [net.allocate() for dummy in range(300)]  # more than one /24: a second block is claimed
    assert len(set(ips)) == 300
    assert all(ipaddress.ip_address(ip) in ipaddress.ip_network("127.0.0.0/8") for ip in ips)
    assert len(net.blocks) == 2
    assert not any(ip.endswith(".0") or ip.endswith(".255") for ip in ips)
    # A second owner never gets a block held by a live process...
    other = nodesim.NodeNetwork(lock_dir=tmp_path, rng=random.Random(7))
    assert other.claim_block() != block
    other.release()
    # ...but takes over one whose owner is dead.
    net.release()
    assert not lock.exists()
    dead = subprocess.Popen(["true"])
    dead.wait()
    lock.write_text(str(dead.pid))
    again = nodesim.NodeNetwork(lock_dir=tmp_path, rng=random.Random(7))
    assert again.claim_block() == block
    assert lock.read_text() == str(os.getpid())
    again.release()


def test_knob_validation_changes_nothing_on_bad_input(tmp_path):
    sim = nodesim.Simulator(kube=None, state_dir=tmp_path, network=nodesim.NodeNetwork(lock_dir=tmp_path))
    try:
        before = dict(sim.knobs)
        for bad in ({"join_delay": -1}, {"never_join": "g"}, {"unknown": 1}, {"join_delay": "soon"}):
            with pytest.raises(ValueError):
                sim.set_knobs(dict(bad))
            assert sim.knobs == before
        assert sim.set_knobs({"join_delay": 3, "never_join": ["g1"]})["join_delay"] == 3.0
        with pytest.raises(ValueError):
            sim.create_instance("p", "n", role="master")
        with pytest.raises(ValueError):
            sim.create_instance("", "n")
    finally:
        sim.stop()


def test_pods_of_a_lost_node_turn_not_ready_but_stay_running():
    ready = nodesim.running_pod_status({"spec": {"containers": [{"name": "a"}]}}, "127.0.0.2", "10.244.0.2")
    pod = {"metadata": {"uid": "u1"}, "status": ready["status"]}
    patch = nodesim.pod_not_ready_status(pod)
    conds = {c["type"]: c for c in patch["status"]["conditions"]}
    assert conds["Ready"]["status"] == "False" and conds["Ready"]["reason"] == "NodeNotReady"
    assert conds["ContainersReady"]["status"] == "False"
    assert conds["PodScheduled"]["status"] == "True"
    assert "phase" not in patch["status"] and patch["metadata"] == {"uid": "u1"}
    assert nodesim.pod_not_ready_status({"metadata": {"uid": "u"}, "status": {"phase": "Succeeded"}}) is None
    assert nodesim.pod_not_ready_status({"metadata": {"uid": "u"}, "status": {"phase": "Pending"}}) is None


@pytest.mark.parametrize("cloud,mode,named", [("gcp", "Flexible", "applies to cloud azure"),
                                              ("none", "Uniform", "applies to cloud azure"),
                                              ("azure", "flex", "use Uniform or Flexible")])
def test_seeding_refuses_an_azure_orchestration_it_cannot_apply_before_anything_is_made(cloud, mode, named):
    with pytest.raises(ValueError) as err:
        seed.seed_nodes({}, 1, 2, 2, cloud=cloud, azure_orchestration=mode)   # no sandbox: nothing may be called
    assert named in str(err.value) and mode in str(err.value)
