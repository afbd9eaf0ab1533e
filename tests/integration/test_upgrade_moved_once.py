"""Issue 23 on the sandbox (real kube-scheduler): each pod moved once, and traffic drained first.

One sandbox, two upgrades of the same two worker groups (2 workers each, surge 1): image A to B with the
PreferNoSchedule taint on the nodes to be replaced (the default), then B to C without it
(rolling_upgrade_taint_to_be_replaced false). The seeded Deployments are spread evenly over every worker; a Deployment
`packed` has its 6 pods on the 2 workers of the first group only, as an earlier maintenance leaves them. The report
counts the evictions per owner (a ReplicaSet's evicted pods come back under new names): with the taint every
ReplicaSet has as many evictions as replicas (each pod moved once); without it the scheduler's spreading sends some of
`packed`'s evicted pods to the other group's outdated workers, which evict them again. Both figures are printed for
bench/README.md. During the first upgrade a sampler follows every donor: it carries
node.kubernetes.io/exclude-from-external-load-balancers from the moment recorded in its annotation, and its instance is
deleted rolling_upgrade_lb_drain_seconds after that at the earliest.
"""

import json
import pathlib
import threading
import time

import pytest

import upgrade_helpers as uh

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 600
LB_SECONDS = 6
LB_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"


class DonorSampler(threading.Thread):
    """Every 0.25 s: per node, the first moment it was seen with the load-balancer label and the moment recorded in
    its annotation; per instance, the first moment it was seen deleted."""

    def __init__(self, handle):
        super().__init__(daemon=True)
        self.handle, self.halt = handle, threading.Event()
        self.labelled, self.since, self.deleted, self.node_of = {}, {}, {}, {}

    def run(self):
        while not self.halt.is_set():
            try:
                self.sample()
            except Exception:  # pylint: disable=broad-except
                pass   # the API server busy for a moment: the next sample
            self.halt.wait(0.25)

    def sample(self):
        now = time.time()
        for node in uh.nodes(self.handle):
            name, meta = node["metadata"]["name"], node["metadata"]
            if LB_LABEL in (meta.get("labels") or {}):
                self.labelled.setdefault(name, now)
                since = (meta.get("annotations") or {}).get(uh.PREFIX + "/lb-excluded-since")
                if since:
                    self.since[name] = since
        for instance in self.handle.nodesim.instances():
            self.node_of[instance["provider_id"]] = instance.get("node_name")
            if instance["state"] == "deleted":
                self.deleted.setdefault(instance.get("node_name"), now)

    def stop(self):
        self.halt.set()
        self.join(10)


PACKED = 6


def pack(handle, onto):
    """Deployment `packed` with its PACKED pods on the nodes `onto` only: every other worker cordoned while its pods
    are placed (scaled from 0), then uncordoned."""
    kube = handle.kube()
    path = "/apis/apps/v1/namespaces/%s/deployments/packed" % uh.WORKLOADS
    labels = {"app": "packed"}
    if kube.request("GET", path, ok=(200, 404)).get("kind") != "Deployment":
        kube.request("POST", "/apis/apps/v1/namespaces/%s/deployments" % uh.WORKLOADS, {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "packed"},
            "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
                "terminationGracePeriodSeconds": 5, "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}}},
            ok=(201,))
    kube.merge_patch(path, {"spec": {"replicas": 0}})
    pods_path = "/api/v1/namespaces/%s/pods" % uh.WORKLOADS
    uh.wait_until(lambda: not kube.request("GET", pods_path, params={"labelSelector": "app=packed"})["items"], 60,
                  "packed scaled to 0")
    others = [n["metadata"]["name"] for n in uh.nodes(handle)
              if n["metadata"]["name"] not in onto and uh.CONTROL_PLANE_LABEL not in n["metadata"]["labels"]]
    for name in others:
        kube.merge_patch("/api/v1/nodes/" + name, {"spec": {"unschedulable": True}})
    try:
        kube.merge_patch(path, {"spec": {"replicas": PACKED}})

        def placed():
            pods = kube.request("GET", pods_path, params={"labelSelector": "app=packed"})["items"]
            return len(pods) == PACKED and all(uh.nodesim.pod_is_running_ready(p) for p in pods) and pods
        pods = uh.wait_until(placed, 120, "packed pods running")
        assert {p["spec"]["nodeName"] for p in pods} <= set(onto), pods
    finally:
        for name in others:
            kube.merge_patch("/api/v1/nodes/" + name, {"spec": {"unschedulable": False}})


def _report(values):
    return json.loads((pathlib.Path(values["rolling_upgrade_report_dir"]) / "image-upgrade-report.json").read_text())


def _moves(summary):
    """{Deployment: evictions of its ReplicaSet's pods} of the web Deployments and `packed`."""
    return {owner.split("/")[2].rsplit("-", 1)[0]: count for owner, count in summary["evictions"]["by_owner"].items()
            if owner.startswith((uh.WORKLOADS + "/ReplicaSet/web-", uh.WORKLOADS + "/ReplicaSet/packed-"))}


@pytest.mark.timeout(1200)
def test_each_pod_moves_once_with_the_taint_and_donors_leave_the_load_balancers_first(upgrade_cluster, tmp_path):
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.vocabulary import parse_time

    handle, values, start = upgrade_cluster("gcp", control_planes=1, workers=4, groups=2)
    upgraded = uh.limit_to_groups(values, start, ["workers-0", "workers-1"])
    donors = [n for label in upgraded for n in start["groups"][label]]
    replicas = {k.split("/", 1)[1]: v for k, v in start["workloads"].items() if k.startswith("deployments/web-")}
    assert len(donors) == 4 and len(replicas) == 3, (start["groups"], start["workloads"])
    replicas["packed"] = PACKED
    first_group = sorted(upgraded)[0]
    pack(handle, start["groups"][first_group])

    # A to B with the taint (the default) and the load-balancer hold.
    first = dict(values, rolling_upgrade_lb_drain_seconds=LB_SECONDS)
    sampler = DonorSampler(handle)
    sampler.start()
    try:
        rc, output = uh.run_upgrade(first, tmp_path / "tainted.log", timeout=RUN_TIMEOUT)
    finally:
        sampler.stop()
    assert rc == 0, output[-6000:]
    uh.assert_upgraded(handle, first, start, groups=upgraded)
    with_taint = _moves(_report(first))
    # Every donor was out of the load balancers, from the recorded moment, for LB_SECONDS before its instance went.
    for donor in donors:
        assert donor in sampler.labelled and donor in sampler.deleted, (donor, sampler.labelled, sampler.deleted)
        since = parse_time(sampler.since[donor])
        assert sampler.deleted[donor] - since >= LB_SECONDS, (donor, sampler.since[donor], sampler.deleted[donor])
        assert sampler.labelled[donor] < sampler.deleted[donor]

    # B to C without the taint.
    middle = uh.snapshot(handle)
    pack(handle, middle["groups"][first_group])
    image_c = handle.cloud("gcp").create_image("image-c")
    second = dict(values, rolling_upgrade_image=image_c, rolling_upgrade_taint_to_be_replaced=False,
                  rolling_upgrade_report_dir=str(pathlib.Path(handle.state_dir) / "report-c"))
    rc, output = uh.run_upgrade(second, tmp_path / "untainted.log", timeout=RUN_TIMEOUT)
    assert rc == 0, output[-6000:]
    uh.assert_upgraded(handle, second, middle, groups=upgraded)
    without_taint = _moves(_report(second))

    print("evictions per Deployment (replicas %s): with the taint %s, without %s" % (replicas, with_taint, without_taint))
    # With the taint: each pod moved once (a Deployment's evictions are its replicas); without: `packed` moved more.
    assert with_taint == replicas, (with_taint, replicas)
    assert without_taint["packed"] > PACKED, (without_taint, replicas)
