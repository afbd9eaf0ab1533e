"""The node simulator: makes Node and Pod objects behave as if kubelets ran on booted instances.

It runs as its own process (`python -m sandbox.nodesim --state-dir DIR`), prints one JSON line
{"url": ..., "pid": ..., "network": ...} once its control API serves on a free 127.0.0.1 port, and runs
until SIGTERM. The control API implements the contract of sandbox/instance_hooks.py:

  POST   /instances   {provider_id, node_name, group_id, image, role, zone}  an instance booted
  DELETE /instances?provider_id=...                                         an instance is gone
  GET    /instances                                                         every instance and its state
  GET    /knobs, POST /knobs {join_delay, jitter, never_join: [provider or group ids],
                              max_termination_seconds, pod_start_delay}
  GET    /etcd                                                              control-plane etcd endpoints and TLS
  GET    /healthz

What it does, like a kubelet would:
- after the join delay (plus random jitter), registers the Node: spec.providerID, an InternalIP unique
  to this sandbox inside 127.0.0.0/8, labels (hostname, zone, instance group, image, and the
  control-plane role label for control-plane instances), capacity and allocatable; posts the Ready
  condition and clears the node.kubernetes.io/not-ready taint that admission puts on every new Node;
- for a control-plane instance, joins a real etcd member on <InternalIP>:2379/2380 to the
  control-plane etcd cluster (the first one creates the cluster), with mutual TLS, as soon as it boots:
  that start is part of its join, so the Node registers at the join delay or once its member runs,
  whichever is later (not after the delay plus the member's start);
- makes pods bound to its nodes Running and Ready, and finishes pods being deleted after their grace
  period (capped by max_termination_seconds) with a grace-0 delete;
- when the instance is deleted: stops its etcd member and marks the Node NotReady (Ready=Unknown and
  the unreachable taints), as the node-lifecycle controller would; the Node object itself stays.
"""

import argparse
import datetime
import errno
import heapq
import http.server
import itertools
import json
import logging
import os
import pathlib
import random
import signal
import socket
import sys
import tempfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import requests

from sandbox import controlplane, netutil

LOG = logging.getLogger("nodesim")
CONTROL_PLANE = "control-plane"
ROLE_LABEL = "node-role.kubernetes.io/control-plane"
GROUP_LABEL = "sandbox.kubenodes.io/group"
IMAGE_LABEL = "sandbox.kubenodes.io/image"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
NET_LOCK_DIR = pathlib.Path(tempfile.gettempdir()) / "kubenodes-sandbox-nets"
ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380
DEFAULT_KNOBS = {
    "join_delay": 1.0,               # seconds from "instance created" to Node registered and Ready
    "jitter": 0.0,                   # extra random 0..jitter seconds per join
    "never_join": [],                # provider ids or group ids whose instances never join
    "max_termination_seconds": 2.0,  # cap on a deleted pod's grace period (tests stay fast)
    "pod_start_delay": 0.0,          # seconds from "bound to a node" to Running and Ready
}


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------- node IPs

class NodeNetwork:
    """Hands out node IPs from /24 blocks of 127.0.0.0/8 that this sandbox owns alone.

    Each block 127.A.B.0/24 is claimed with an O_EXCL lock file holding our PID in a machine-wide
    directory; a lock whose PID is dead is stale and may be taken over. IPs are never reused within
    a sandbox, so an etcd peer URL always names one node."""

    def __init__(self, lock_dir=NET_LOCK_DIR, rng=None):
        self.lock_dir = pathlib.Path(lock_dir)
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        self.rng = rng or random.Random()
        self.blocks = []
        self._next = None
        self._lock = threading.Lock()

    def _try_claim(self, a, b):
        path = self.lock_dir / ("127.%d.%d.0" % (a, b))
        for _ in range(2):
            try:
                fd = os.open(str(path), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except OSError as exc:
                if exc.errno != errno.EEXIST:
                    raise
                try:
                    owner = int(path.read_text().strip() or "0")
                except (OSError, ValueError):
                    owner = 0
                if owner and controlplane.pid_alive(owner):
                    return False
                path.unlink(missing_ok=True)  # stale: its owner is dead
                continue
            with os.fdopen(fd, "w") as lock:
                lock.write(str(os.getpid()))
            # Something outside our lock protocol may listen in this block: probe the etcd ports.
            if not all(netutil.port_is_free(port, "127.%d.%d.%d" % (a, b, c))
                       for c in (1, 2, 3, 254) for port in (ETCD_CLIENT_PORT, ETCD_PEER_PORT)):
                path.unlink(missing_ok=True)
                return False
            self.blocks.append((a, b))
            return True
        return False

    def claim_block(self, attempts=200):
        for _ in range(attempts):
            a, b = self.rng.randint(1, 254), self.rng.randint(0, 255)
            if (a, b) not in self.blocks and self._try_claim(a, b):
                self._next = (a, b, 1)
                return "127.%d.%d.0/24" % (a, b)
        raise RuntimeError("no free /24 in 127.0.0.0/8 after %d tries (see %s)" % (attempts, self.lock_dir))

    def allocate(self):
        with self._lock:
            if self._next is None or self._next[2] > 254:
                self.claim_block()
            a, b, c = self._next
            self._next = (a, b, c + 1)
            return "127.%d.%d.%d" % (a, b, c)

    def release(self):
        for a, b in self.blocks:
            path = self.lock_dir / ("127.%d.%d.0" % (a, b))
            try:
                if path.read_text().strip() == str(os.getpid()):
                    path.unlink()
            except OSError:
                pass
        self.blocks = []


# ---------------------------------------------------------------- a small Kubernetes REST client

class Kube:
    """Raw JSON over HTTPS as the sandbox admin; one requests session per thread."""

    def __init__(self, server, ca, cert, key):
        self.server = server.rstrip("/")
        self.ca = ca
        self.cert = (cert, key)
        self._local = threading.local()

    def session(self):
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.trust_env = False  # REQUESTS_CA_BUNDLE would override verify
            session.verify = self.ca
            session.cert = self.cert
            self._local.session = session
        return session

    def request(self, method, path, body=None, content_type="application/json", params=None, timeout=30,
                ok=(200, 201), parse=True):
        """The decoded JSON answer (None with parse=False: decoding big answers nobody reads costs CPU)."""
        headers = {"Content-Type": content_type} if body is not None else {}
        resp = self.session().request(method, self.server + path, data=json.dumps(body) if body is not None else None,
                                      headers=headers, params=params, timeout=timeout)
        if resp.status_code not in ok:
            raise KubeError(resp.status_code, "%s %s: %d %s" % (method, path, resp.status_code, resp.text[:300]))
        return resp.json() if parse and resp.content else None

    def merge_patch(self, path, body, ok=(200,), parse=False):
        return self.request("PATCH", path, body, content_type="application/merge-patch+json", ok=ok, parse=parse)


class KubeError(RuntimeError):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


# ---------------------------------------------------------------- pure builders (unit-tested)

def node_object(name, provider_id, ip, group_id, image, role, zone):
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        GROUP_LABEL: _label_value(group_id),
        IMAGE_LABEL: _label_value(image),
    }
    if zone:
        labels["topology.kubernetes.io/zone"] = _label_value(zone)
    if role == CONTROL_PLANE:
        labels[ROLE_LABEL] = ""
    spec = {"providerID": provider_id}
    if role == CONTROL_PLANE:
        # kubeadm registers control-plane nodes with this taint: ordinary workloads stay off them.
        spec["taints"] = [{"key": ROLE_LABEL, "effect": "NoSchedule"}]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels,
                         "annotations": {"sandbox.kubenodes.io/internal-ip": ip}},
            "spec": spec}


def _label_value(value):
    """A label value from a free-form cloud ID: at most 63 chars of [A-Za-z0-9._-], alphanumeric ends."""
    cleaned = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in str(value or ""))[-63:]
    return cleaned.strip("._-")


def node_status(ip, name, image, ready=True, reason="KubeletReady", message="kubelet is posting ready status"):
    stamp = now_rfc3339()
    ready_status = "True" if ready else "Unknown"
    conditions = [
        {"type": t, "status": "False" if ready else "Unknown", "reason": r if ready else "NodeStatusUnknown",
         "message": m if ready else "Kubelet stopped posting node status.",
         "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
        for t, r, m in (("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"))
    ]
    conditions.append({"type": "Ready", "status": ready_status, "reason": reason if ready else "NodeStatusUnknown",
                       "message": message if ready else "Kubelet stopped posting node status.",
                       "lastHeartbeatTime": stamp, "lastTransitionTime": stamp})
    capacity = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    return {"status": {
        "conditions": conditions,
        "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
        "capacity": capacity,
        "allocatable": dict(capacity, cpu="7800m", memory="31Gi"),
        "nodeInfo": {"machineID": name, "systemUUID": name, "bootID": name, "kernelVersion": "6.1.0-sandbox",
                     "osImage": str(image), "containerRuntimeVersion": "containerd://2.0.0",
                     "kubeletVersion": "v1.37.2", "kubeProxyVersion": "", "operatingSystem": "linux",
                     "architecture": "amd64"},
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
    }}


def taints_without(taints, keys):
    return [t for t in taints or [] if t.get("key") not in keys]


def unreachable_taints(taints):
    stamp = now_rfc3339()
    kept = taints_without(taints, (NOT_READY_TAINT, UNREACHABLE_TAINT))
    return kept + [{"key": UNREACHABLE_TAINT, "effect": "NoSchedule"},
                   {"key": UNREACHABLE_TAINT, "effect": "NoExecute", "timeAdded": stamp}]


def pod_is_running_ready(pod):
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def running_pod_status(pod, host_ip, pod_ip):
    stamp = now_rfc3339()
    spec = pod.get("spec") or {}
    conditions = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp}
                  for t in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled")]

    def container_status(container, ready):
        state = {"running": {"startedAt": stamp}} if ready else {
            "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": stamp, "finishedAt": stamp}}
        return {"name": container["name"], "image": container.get("image", ""), "imageID": "",
                "containerID": "containerd://%s" % (container["name"] + pod_ip.replace(".", "")),
                "ready": ready, "started": ready, "restartCount": 0, "state": state}

    status = {
        "phase": "Running", "conditions": conditions, "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip, "podIPs": [{"ip": pod_ip}], "startTime": stamp,
        "containerStatuses": [container_status(c, True) for c in spec.get("containers") or []],
    }
    if spec.get("initContainers"):
        status["initContainerStatuses"] = [container_status(c, False) for c in spec["initContainers"]]
    return {"status": status}


def pod_not_ready_status(pod):
    """The status patch that marks a pod of a lost node not Ready, or None if there is nothing to mark."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return None
    conditions = status.get("conditions") or []
    if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
        return None
    stamp = now_rfc3339()
    changed = []
    for cond in conditions:
        cond = dict(cond)
        if cond.get("type") in ("Ready", "ContainersReady") and cond.get("status") == "True":
            cond.update(status="False", reason="NodeNotReady" if cond["type"] == "Ready" else cond.get("reason"),
                        lastTransitionTime=stamp)
            if cond["reason"] is None:
                del cond["reason"]
        changed.append(cond)
    return {"metadata": {"uid": pod["metadata"]["uid"]}, "status": {"conditions": changed}}


def termination_delay(pod, cap):
    grace = (pod.get("metadata") or {}).get("deletionGracePeriodSeconds")
    if grace is None:
        grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
    return max(0.0, min(float(grace), float(cap)))


# ---------------------------------------------------------------- the simulator

class Timer:
    """One thread running callbacks at given monotonic times on a small worker pool."""

    def __init__(self, workers=8):
        self._heap = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nodesim")
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="nodesim-timer", daemon=True)
        self._thread.start()

    def at(self, when, func, *args):
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._seq), func, args))
            self._cond.notify()

    def later(self, delay, func, *args):
        self.at(time.monotonic() + max(0.0, delay), func, *args)

    def _run(self):
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = None if not self._heap else max(0.0, self._heap[0][0] - time.monotonic())
                    self._cond.wait(timeout=min(timeout, 1.0) if timeout is not None else 1.0)
                if self._stopped:
                    return
                _, _, func, args = heapq.heappop(self._heap)
            self._pool.submit(self._guarded, func, *args)

    @staticmethod
    def _guarded(func, *args):
        try:
            func(*args)
        except Exception:  # noqa: BLE001 - one failed action must not stop the simulator
            LOG.exception("action %s%r failed", getattr(func, "__name__", func), args)

    def pending(self):
        with self._cond:
            return len(self._heap)

    def stop(self):
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._pool.shutdown(wait=False, cancel_futures=True)


class Simulator:
    def __init__(self, kube, state_dir, network=None, workers=8):
        self.kube = kube
        self.state_dir = pathlib.Path(state_dir)
        self.network = network or NodeNetwork()
        self.knobs = dict(DEFAULT_KNOBS)
        self.instances = {}     # provider_id -> dict
        self.nodes = {}         # node name -> provider_id, for instances whose Node joined and still runs
        self._pod_busy = set()  # pod uids with an action scheduled
        self._pod_ips = itertools.count(1)
        self._lock = threading.RLock()
        self._etcd_lock = threading.Lock()
        self.etcd = None        # sandbox.etcd_cluster.EtcdCluster, created with the first control-plane node
        self.timer = Timer(workers)
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch_pods, name="nodesim-pods", daemon=True)
        self.stats = {"pod_events": 0, "pods_started": 0, "pods_finished": 0, "write_seconds": 0.0}

    def start(self):
        self._watcher.start()
        threading.Thread(target=self._report, name="nodesim-stats", daemon=True).start()

    def _report(self, every=10.0):
        # One line every 10 s while work happens: where a slow seed spends its time.
        last = None
        while not self._stop.wait(every):
            with self._lock:
                current = dict(self.stats, busy=len(self._pod_busy), nodes=len(self.nodes))
            if current != last:
                writes = current["pods_started"] + current["pods_finished"]
                LOG.info("stats: %s, queued %d, mean write %.0f ms", current, self.timer.pending(),
                         1000 * current["write_seconds"] / writes if writes else 0)
                last = current

    # ----- instances ------------------------------------------------------------------------------

    def create_instance(self, provider_id, node_name, group_id=None, image=None, role="worker", zone=None):
        if not provider_id or not node_name:
            raise ValueError("provider_id and node_name are required")
        if role not in (CONTROL_PLANE, "worker"):
            raise ValueError("role must be 'control-plane' or 'worker', not %r" % role)
        with self._lock:
            existing = self.instances.get(provider_id)
            if existing and existing["state"] != "deleted":
                return dict(existing), False
            if any(i["node_name"] == node_name and i["state"] != "deleted" for i in self.instances.values()):
                raise ValueError("node name %s is already used by another running instance" % node_name)
            instance = {"provider_id": provider_id, "node_name": node_name, "group_id": group_id, "image": image,
                        "role": role, "zone": zone, "ip": self.network.allocate(), "state": "booting",
                        "created": time.time(), "joined": None, "error": None}
            self.instances[provider_id] = instance
            never = set(self.knobs["never_join"])
            if provider_id in never or (group_id and group_id in never):
                instance["state"] = "never-joins"
                return dict(instance), True
            delay = float(self.knobs["join_delay"]) + random.uniform(0, float(self.knobs["jitter"]))
        if role == CONTROL_PLANE:
            self.timer.later(0, self._start_member_then_join, provider_id, time.monotonic() + delay)
        else:
            self.timer.later(delay, self._join, provider_id)
        return dict(instance), True

    def delete_instance(self, provider_id, remove_etcd_member=False):
        with self._lock:
            instance = self.instances.get(provider_id)
            if instance is None:
                return None
            if instance["state"] == "deleted":
                if remove_etcd_member and instance["role"] == CONTROL_PLANE:
                    self._stop_etcd_member(instance, remove=True)
                return dict(instance)
            was_joined = instance["state"] == "ready"
            instance["state"] = "deleted"
            instance["removed_at"] = time.time()   # when the cloud removed it (bench/makespan.py times deletions by it)
            self.nodes.pop(instance["node_name"], None)
        if instance["role"] == CONTROL_PLANE:
            self._stop_etcd_member(instance, remove=remove_etcd_member)
        if was_joined:
            self._mark_node_gone(instance)
        return dict(instance)

    def list_instances(self):
        with self._lock:
            return [dict(i) for i in self.instances.values()]

    def _booting(self, provider_id):
        """The instance while its join is still to come or under way; None once it was deleted."""
        with self._lock:
            instance = self.instances.get(provider_id)
            return instance if instance is not None and instance["state"] == "booting" else None

    def _join_part(self, instance, part):
        """One part of a join (the etcd member, the Node); False when it failed, as the instance's state then says."""
        try:
            part(instance)
            return True
        except Exception as exc:  # noqa: BLE001 - a failed join is a state to report, as with a real VM
            LOG.error("join of %s failed: %s", instance["node_name"], exc, exc_info=exc)
            with self._lock:
                if instance["state"] == "booting":
                    instance["state"], instance["error"] = "join-failed", str(exc)
            return False

    def _start_member_then_join(self, provider_id, join_at):
        """A control-plane instance's first part of its join: its etcd member, started as it boots; the Node
        registers at join_at (the join delay) or at once if the member took longer."""
        instance = self._booting(provider_id)
        if instance is None or not self._join_part(instance, self._start_etcd_member):
            return
        if self._booting(provider_id) is not instance:   # deleted while its member started
            self._stop_etcd_member(instance)
            return
        self.timer.at(join_at, self._join, provider_id)

    def _join(self, provider_id):
        instance = self._booting(provider_id)
        if instance is None or not self._join_part(instance, self._register_node):
            return
        with self._lock:
            deleted_meanwhile = instance["state"] != "booting"
            if not deleted_meanwhile:
                instance["state"], instance["joined"] = "ready", time.time()
                self.nodes[instance["node_name"]] = provider_id
        if deleted_meanwhile:
            # The delete came while this join ran: undo what the join did after it.
            if instance["role"] == CONTROL_PLANE:
                self._stop_etcd_member(instance)
            self._mark_node_gone(instance)
            return
        # Pods may have been bound to this name before it joined (e.g. a pod with spec.nodeName).
        pods = self.kube.request("GET", "/api/v1/pods", params={"fieldSelector": "spec.nodeName=" + instance["node_name"]})
        for pod in pods.get("items", []):
            self._on_pod(pod)

    def _register_node(self, instance):
        name = instance["node_name"]
        body = node_object(name, instance["provider_id"], instance["ip"], instance["group_id"], instance["image"],
                           instance["role"], instance["zone"])
        try:
            self.kube.request("POST", "/api/v1/nodes", body)
        except KubeError as exc:
            if exc.status != 409:
                raise
            # A Node of that name exists (a rebooted instance): take it over, as a kubelet does.
            self.kube.merge_patch("/api/v1/nodes/" + name, {"metadata": {"labels": body["metadata"]["labels"]},
                                                             "spec": {"providerID": instance["provider_id"]}})
        self.kube.merge_patch("/api/v1/nodes/%s/status" % name,
                              node_status(instance["ip"], name, instance["image"]))
        # Admission adds the not-ready taint to every new Node; only the node-lifecycle controller
        # (deliberately not running) would clear it once the node is Ready.
        self._set_taints(name, lambda taints: taints_without(taints, (NOT_READY_TAINT, UNREACHABLE_TAINT)))

    def _set_taints(self, name, change, attempts=5):
        for _ in range(attempts):
            node = self.kube.request("GET", "/api/v1/nodes/" + name)
            taints = node.get("spec", {}).get("taints") or []
            wanted = change(taints)
            if wanted == taints:
                return
            patch = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                     "spec": {"taints": wanted or None}}
            try:
                self.kube.merge_patch("/api/v1/nodes/" + name, patch)
                return
            except KubeError as exc:
                if exc.status != 409:
                    raise
        raise RuntimeError("could not update the taints of node %s: conflicts" % name)

    def _mark_node_gone(self, instance):
        name = instance["node_name"]
        try:
            self.kube.merge_patch("/api/v1/nodes/%s/status" % name,
                                  node_status(instance["ip"], name, instance["image"], ready=False))
            self._set_taints(name, unreachable_taints)
        except KubeError as exc:
            if exc.status != 404:  # the Node was already deleted: nothing to mark
                raise
        # As the node-lifecycle controller does for a NotReady node: its pods stop counting as Ready
        # (so PodDisruptionBudgets see them as unhealthy), but they stay bound and Running.
        pods = self.kube.request("GET", "/api/v1/pods", params={"fieldSelector": "spec.nodeName=" + name})
        for pod in pods.get("items", []):
            patch = pod_not_ready_status(pod)
            if patch is None:
                continue
            try:
                self.kube.merge_patch("/api/v1/namespaces/%s/pods/%s/status" % (
                    pod["metadata"]["namespace"], pod["metadata"]["name"]), patch)
            except KubeError as exc:
                if exc.status not in (404, 409, 422):
                    raise

    # ----- control-plane etcd ---------------------------------------------------------------------

    def _start_etcd_member(self, instance):
        from sandbox import etcd_cluster

        name, ip = instance["node_name"], instance["ip"]
        with self._etcd_lock:
            if self.etcd is None or not any(m.running() for m in self.etcd.members.values()):
                if self.etcd is not None:
                    LOG.warning("no control-plane etcd member runs any more: starting a new cluster")
                self.etcd = etcd_cluster.EtcdCluster(self.state_dir / "cp-etcd", "cp")
                self.etcd.start([(name, ip, ETCD_CLIENT_PORT, ETCD_PEER_PORT)])
            else:
                self.etcd.add_member(name, ip, ETCD_CLIENT_PORT, ETCD_PEER_PORT)
            instance["etcd_client_url"] = self.etcd.client_url(name)
            instance["etcd_peer_url"] = self.etcd.peer_url(name)
            self._record_etcd_pids()

    def _record_etcd_pids(self):
        # If this process is killed, `sandbox down` still finds and stops its etcd members.
        cluster = self.etcd
        # a copy: a join may add a member meanwhile
        pids = {n: m.process.pid for n, m in list(cluster.members.items()) if m.running()}
        path = self.state_dir / "cp-etcd" / "pids.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(pids))

    def _stop_etcd_member(self, instance, remove=False):
        name = instance["node_name"]
        cluster = self.etcd
        if not remove:
            # Stopping one process needs no cluster-wide lock: a control-plane join holding it (up to
            # 30 s while etcd settles) must not delay an emulator's "instance deleted" call.
            member = cluster.members.get(name) if cluster is not None else None
            if member is not None:
                cluster.stop_member(name)
                self._record_etcd_pids()
            return
        with self._etcd_lock:
            if self.etcd is None or name not in self.etcd.members:
                return
            # Cleanup mode: take out members whose process is gone first, or etcd would refuse to
            # remove a healthy member while another one is down.
            gone = [n for n, m in self.etcd.members.items() if not m.running() and n != name]
            for member_name in gone + [name]:
                self._remove_member(member_name)
            self._record_etcd_pids()

    def _remove_member(self, name):
        others_running = [n for n, m in self.etcd.members.items() if m.running() and n != name]
        member_id = None
        if others_running:
            member_id = next((m["ID"] for m in self.etcd.member_list() if m.get("name") == name
                              or self.etcd.members[name].peer_url in m.get("peerURLs", [])), None)
        if member_id is not None:
            deadline = time.monotonic() + 30
            while True:  # etcd refuses membership changes for ~5 s after a member joined
                try:
                    self.etcd._post_any("/v3/cluster/member/remove", {"ID": member_id})
                    break
                except Exception as exc:  # noqa: BLE001 - retried, then re-raised
                    if "unhealthy cluster" not in str(exc) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        # The last member cannot be removed: stopping it ends the cluster, and the next
        # control-plane node starts a new one.
        self.etcd.forget_member(name)

    def etcd_info(self):
        with self._etcd_lock:
            if self.etcd is None:
                return {"endpoints": [], "members": {}, "ca": None, "cert": None, "key": None}
            ca, cert, key = self.etcd.client_tls()
            return {"endpoints": self.etcd.client_endpoints(running_only=True), "ca": ca, "cert": cert, "key": key,
                    "members": {n: {"client_url": m.client_url, "peer_url": m.peer_url, "running": m.running(),
                                    "pid": m.process.pid if m.running() else None}
                                for n, m in self.etcd.members.items()}}

    # ----- pods -----------------------------------------------------------------------------------

    def _watch_pods(self):
        resource_version = None
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    listing = self.kube.request("GET", "/api/v1/pods", params={"limit": 5000})
                    items = listing.get("items", [])
                    while listing.get("metadata", {}).get("continue"):
                        listing = self.kube.request("GET", "/api/v1/pods", params={
                            "limit": 5000, "continue": listing["metadata"]["continue"]})
                        items += listing.get("items", [])
                    resource_version = listing["metadata"]["resourceVersion"]
                    for pod in items:
                        self._on_pod(pod)
                resource_version = self._watch_once(resource_version)
            except (requests.RequestException, KubeError, ValueError) as exc:
                if self._stop.is_set():
                    return
                LOG.warning("pod watch interrupted (%s); listing again", exc)
                resource_version = None
                self._stop.wait(1.0)

    def _watch_once(self, resource_version):
        params = {"watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": "120"}
        with self.kube.session().get(self.kube.server + "/api/v1/pods", params=params, stream=True,
                                     timeout=(10, 150)) as resp:
            if resp.status_code != 200:
                raise KubeError(resp.status_code, "watch pods: %d %s" % (resp.status_code, resp.text[:200]))
            for line in resp.iter_lines():
                if self._stop.is_set():
                    return resource_version
                if not line:
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    return None  # e.g. 410 Gone: relist
                resource_version = obj.get("metadata", {}).get("resourceVersion", resource_version)
                self.stats["pod_events"] += 1
                if event.get("type") in ("ADDED", "MODIFIED"):
                    self._on_pod(obj)
                elif event.get("type") == "DELETED":
                    with self._lock:
                        self._pod_busy.discard(obj["metadata"]["uid"])
        return resource_version

    def _on_pod(self, pod):
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        node_name = spec.get("nodeName")
        with self._lock:
            provider_id = self.nodes.get(node_name) if node_name else None
            if provider_id is None:
                return
            terminal = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            if meta.get("deletionTimestamp"):
                key = ("finish", meta["uid"])
                delay = termination_delay(pod, self.knobs["max_termination_seconds"])
                action = self._finish_pod
            elif not terminal and not pod_is_running_ready(pod):
                key = ("start", meta["uid"])
                delay = float(self.knobs["pod_start_delay"])
                action = self._start_pod
            else:
                return
            if key in self._pod_busy:
                return
            self._pod_busy.add(key)
            host_ip = self.instances[provider_id]["ip"]
        self.timer.later(delay, action, key, meta["namespace"], meta["name"], meta["uid"], host_ip, pod)

    def _start_pod(self, key, namespace, name, uid, host_ip, pod):
        try:
            n = next(self._pod_ips)
            pod_ip = "10.244.%d.%d" % ((n // 250) % 256, n % 250 + 1)
            body = running_pod_status(pod, host_ip, pod_ip)
            body["metadata"] = {"uid": uid}  # precondition: never touch a new pod that reuses the name
            started = time.monotonic()
            self.kube.merge_patch("/api/v1/namespaces/%s/pods/%s/status" % (namespace, name), body, ok=(200,))
            with self._lock:
                self.stats["pods_started"] += 1
                self.stats["write_seconds"] += time.monotonic() - started
        except KubeError as exc:
            if exc.status not in (404, 409, 422):
                raise
        finally:
            with self._lock:
                self._pod_busy.discard(key)

    def _finish_pod(self, key, namespace, name, uid, host_ip, pod):
        try:
            self.kube.request("DELETE", "/api/v1/namespaces/%s/pods/%s" % (namespace, name),
                              {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                               "preconditions": {"uid": uid}}, ok=(200, 202), parse=False)
            with self._lock:
                self.stats["pods_finished"] += 1
        except KubeError as exc:
            if exc.status not in (404, 409):
                raise
        finally:
            with self._lock:
                self._pod_busy.discard(key)

    # ----- knobs and shutdown ---------------------------------------------------------------------

    def set_knobs(self, changes):
        unknown = set(changes) - set(DEFAULT_KNOBS)
        if unknown:
            raise ValueError("unknown knobs: %s (known: %s)" % (sorted(unknown), sorted(DEFAULT_KNOBS)))
        for key, value in changes.items():
            if key == "never_join":
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise ValueError("never_join must be a list of provider ids or group ids")
            else:
                value = float(value)
                if value < 0:
                    raise ValueError("%s must be >= 0" % key)
            changes[key] = value
        with self._lock:
            self.knobs.update(changes)
            return dict(self.knobs)

    def stop(self):
        self._stop.set()
        self.timer.stop()
        with self._etcd_lock:
            if self.etcd is not None:
                self.etcd.stop()
        self.network.release()


# ---------------------------------------------------------------- control API

class _Handler(http.server.BaseHTTPRequestHandler):
    simulator = None  # set on a subclass per server

    def log_message(self, fmt, *args):
        LOG.info("api: " + fmt, *args)

    def _send(self, code, payload):
        body = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        if not length:
            return {}
        data = json.loads(self.rfile.read(length))
        if not isinstance(data, dict):
            raise ValueError("the request body must be a JSON object")
        return data

    def do_GET(self):  # noqa: N802 - http.server's naming
        path = urllib.parse.urlparse(self.path).path
        sim = self.simulator
        if path == "/healthz":
            self._send(200, {"ok": True})
        elif path == "/instances":
            self._send(200, {"instances": sim.list_instances()})
        elif path == "/knobs":
            self._send(200, dict(sim.knobs))
        elif path == "/etcd":
            self._send(200, sim.etcd_info())
        else:
            self._send(404, {"error": "no such path: %s" % path})

    def do_POST(self):  # noqa: N802
        path = urllib.parse.urlparse(self.path).path
        try:
            body = self._body()
            if path == "/instances":
                fields = {k: body.get(k) for k in ("provider_id", "node_name", "group_id", "image", "role", "zone")}
                fields["role"] = fields["role"] or "worker"
                instance, created = self.simulator.create_instance(**fields)
                self._send(201 if created else 200, instance)
            elif path == "/knobs":
                self._send(200, self.simulator.set_knobs(body))
            else:
                self._send(404, {"error": "no such path: %s" % path})
        except (ValueError, TypeError) as exc:
            self._send(400, {"error": str(exc)})

    def do_DELETE(self):  # noqa: N802
        parsed = urllib.parse.urlparse(self.path)
        query = urllib.parse.parse_qs(parsed.query)
        if parsed.path != "/instances" or not query.get("provider_id"):
            self._send(400, {"error": "use DELETE /instances?provider_id=..."})
            return
        try:
            instance = self.simulator.delete_instance(query["provider_id"][0],
                                                      remove_etcd_member=query.get("remove_etcd_member") == ["1"])
        except Exception as exc:  # noqa: BLE001 - report, do not kill the API thread
            self._send(500, {"error": str(exc)})
            return
        if instance is None:
            self._send(404, {"error": "no instance %s" % query["provider_id"][0]})
        else:
            self._send(200, instance)


def serve(simulator, host="127.0.0.1"):
    handler = type("Handler", (_Handler,), {"simulator": simulator})
    server = http.server.ThreadingHTTPServer((host, 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="nodesim-api", daemon=True)
    thread.start()
    return server


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--state-dir", required=True, help="the sandbox state directory (reads its state.json)")
    parser.add_argument("--workers", type=int, default=16, help="threads that write to the API server")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(threadName)s %(message)s")
    state = controlplane.load_state(args.state_dir)
    if not state:
        parser.error("no sandbox state in %s: start the control plane first" % args.state_dir)
    kube = Kube(state["apiserver"], state["ca"], state["admin_cert"], state["admin_key"])
    network = NodeNetwork()
    block = network.claim_block()
    simulator = Simulator(kube, args.state_dir, network=network, workers=args.workers)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    try:
        simulator.start()
        server = serve(simulator)
        url = "http://127.0.0.1:%d" % server.server_address[1]
        print(json.dumps({"url": url, "pid": os.getpid(), "network": block}), flush=True)
        while not stopping.wait(1.0):
            pass
        server.shutdown()
    finally:
        simulator.stop()
    return 0


if __name__ == "__main__":
    socket.setdefaulttimeout(60)
    sys.exit(main())


# ---------------------------------------------------------------- client of the control API

class NodeSimClient:
    """What tests, seeding and the demo use to drive a running node simulator."""

    def __init__(self, url, timeout=30):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._session = requests.Session()
        self._session.trust_env = False  # loopback only: no proxy, no CA bundle from the environment

    def _call(self, method, path, body=None, params=None, ok=(200, 201)):
        resp = self._session.request(method, self.url + path, json=body, params=params, timeout=self.timeout)
        if resp.status_code not in ok:
            raise RuntimeError("node simulator %s %s: %d %s" % (method, path, resp.status_code, resp.text[:300]))
        return resp.json()

    def create_instance(self, provider_id, node_name, group_id=None, image=None, role="worker", zone=None):
        return self._call("POST", "/instances", dict(provider_id=provider_id, node_name=node_name, group_id=group_id,
                                                     image=image, role=role, zone=zone))

    def delete_instance(self, provider_id, remove_etcd_member=False):
        """The instance is gone. remove_etcd_member=True first removes a control-plane node's etcd member
        from the cluster (what the upgrade tool does before deleting the instance; handy in test cleanup)."""
        params = {"provider_id": provider_id}
        if remove_etcd_member:
            params["remove_etcd_member"] = "1"
        return self._call("DELETE", "/instances", params=params)

    def instances(self):
        return self._call("GET", "/instances")["instances"]

    def knobs(self, **changes):
        """Set knobs (join_delay, jitter, never_join, max_termination_seconds, pod_start_delay); return all."""
        return self._call("POST", "/knobs", changes) if changes else self._call("GET", "/knobs")

    def etcd(self):
        """{"endpoints": [...], "ca", "cert", "key", "members": {node name: {client_url, peer_url, running, pid}}}"""
        return self._call("GET", "/etcd")
