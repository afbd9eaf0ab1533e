"""Helpers for the end-to-end upgrade tests: prepare a small cluster through a cloud emulator, run
playbooks/upgrade_nodes.yml as a subprocess (streamed output, killable), watch the cluster's invariants
while it runs, and check the end state.

What the watcher can observe reliably, and therefore what it checks:
- Ready nodes per scaling group come from the apiserver: every Node the simulator registers carries the
  label sandbox.kubenodes.io/group (set from the instance's group when the Node is created), so a Node is
  counted in its group from the moment it exists, before the role has annotated it.
- Instances per group come from the node simulator: every cloud emulator calls its instance hooks when an
  instance boots and when it is deleted, so the simulator's list of instances not "deleted" is the set of
  instances that exist in the cloud, joined or not (an instance that never joins is in it too). An
  instance still being created inside the emulator (before its boot hook) is not seen for that moment;
  the emulators boot within a second, and the surge bound is checked on every poll, so an excess that
  lasts longer than one boot is caught.
"""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

import requests

from sandbox import binaries, nodesim, scenario
from tests import rbac_audit
from tests.ansible_run import REPO, ansible_env

PLAYBOOK = REPO / "playbooks" / "upgrade_nodes.yml"
RBAC_FILE = REPO / "roles" / "rolling_upgrade" / "files" / "rbac.yml"
GROUP_LABEL = nodesim.GROUP_LABEL
CONTROL_PLANE_LABEL = nodesim.ROLE_LABEL
USER_LABEL = ("team", "blue")
WORKLOADS = "workloads"
PREFIX = "image-upgrade.kubenodes.io"
PROGRESS = re.compile(r"pass (\d+): (\d+)/(\d+) nodes on the image")

# Small and fast: 1 control plane and 2 workers in 2 worker groups make 3 replacements; the simulated
# nodes join in about a second, so the gates can be short.
FAST = {
    "rolling_upgrade_pass_delay": 1,
    "rolling_upgrade_heir_ready_seconds": 1,
    "rolling_upgrade_lock_duration": 60,
    "rolling_upgrade_timeout": 900,
    # Short chains of passes, so every run also crosses from one chain to the next (tasks/passes.yml).
    "_rolling_upgrade_passes_per_chain": 3,
    # The tests of a surge above 1 count on the full surge from the first pass; the canary (on by default) is in the
    # unit tests of plan_surge.
    "rolling_upgrade_canary": False,
}


def label_value(text):
    """The label value the simulator writes for a cloud ID (its own rule: last 63 safe characters)."""
    return nodesim._label_value(text)  # pylint: disable=protected-access


def is_ready(node):
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", []))


def nodes(handle):
    return handle.kube().request("GET", "/api/v1/nodes").get("items", [])


def replacing_tainted(handle):
    """The nodes that carry the collection's PreferNoSchedule taint on nodes to be replaced (issue 23)."""
    return sorted(n["metadata"]["name"] for n in nodes(handle)
                  if any(t.get("key") == PREFIX + "/to-be-replaced" for t in n["spec"].get("taints") or []))


def live_instances(handle):
    return [i for i in handle.nodesim.instances() if i["state"] != "deleted"]


def provider(values):
    """The run's cloud through the collection's own provider: the SDK calls an operator or the cloud would make."""
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers.factory import (
        PROVIDERS, build_provider)

    name = values["rolling_upgrade_provider"]
    options = {key: spec.get("default") for key, spec in PROVIDERS[name].ARG_SPEC.items()}
    options.update(values["rolling_upgrade_" + name])
    return build_provider({"provider": name, name: options})


def prepare(handle, cloud, control_planes=1, workers=2, groups=2, azure_orchestration=None, worker_group_options=None,
            **overrides):
    """Seed the cluster on image A through `cloud` (Azure scale sets in `azure_orchestration` mode, default
    Uniform; worker groups with `worker_group_options`, such as a GCE region), create image B, put the user label on
    every node. Returns (role variables, snapshot of the start)."""
    values = scenario.prepare(str(handle.state_dir), cloud, control_planes=control_planes, workers=workers,
                              groups=groups, say=lambda *_: None, azure_orchestration=azure_orchestration,
                              worker_group_options=worker_group_options, **dict(FAST, **overrides))
    values["rolling_upgrade_report_dir"] = str(pathlib.Path(handle.state_dir) / "report")
    kube = handle.kube()
    for node in nodes(handle):
        kube.merge_patch("/api/v1/nodes/" + node["metadata"]["name"], {"metadata": {"labels": dict([USER_LABEL])}})
    return values, snapshot(handle)


def pin_bare_pod(handle, node_name):
    """A bare pod bound to `node_name` (tolerating its taints): a drain deletes it and nothing recreates it.
    Returns (namespace, name, uid) once it runs."""
    kube = handle.kube()
    namespace = "default"
    name = "pinned-" + uuid.uuid4().hex[:6]
    pod = kube.request("POST", "/api/v1/namespaces/%s/pods" % namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": node_name, "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})
    path = "/api/v1/namespaces/%s/pods/%s" % (namespace, name)
    wait_until(lambda: nodesim.pod_is_running_ready(kube.request("GET", path)), 60, "pod %s on %s to run" % (name, node_name))
    return namespace, name, pod["metadata"]["uid"]


def unscheduled_pod(handle, namespace, name, new_namespace=False):
    """A pod no scheduler takes (its schedulerName names none) and no kubelet runs: Pending for good, as an add-on's
    that fits nowhere, and its status is the test's to set (set_pod_ready). With `new_namespace`, `namespace` is
    created first. Returns the pod's API path."""
    kube = handle.kube()
    if new_namespace:
        kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}}, ok=(201,))
        wait_until(lambda: kube.request("GET", "/api/v1/namespaces/%s/serviceaccounts/default" % namespace,
                                        ok=(200, 404)).get("kind") == "ServiceAccount", 30, "the default service account")
    kube.request("POST", "/api/v1/namespaces/%s/pods" % namespace, {"metadata": {"name": name}, "spec": {
        "schedulerName": "kubenodes-test-no-such-scheduler", "automountServiceAccountToken": False,
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}, ok=(201,))
    return "/api/v1/namespaces/%s/pods/%s" % (namespace, name)


def set_pod_ready(handle, path, ready):
    """The Ready condition of the pod at `path` (an unscheduled_pod), as a kubelet would post it."""
    handle.kube().request("PATCH", path + "/status", {"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}},
        content_type="application/strategic-merge-patch+json", ok=(200,), parse=False)


def instances_per_group(handle):
    """{group node label: instances that exist}, from the simulator (every emulator reports its instances there)."""
    counts = {}
    for instance in live_instances(handle):
        label = label_value(instance["group_id"])
        counts[label] = counts.get(label, 0) + 1
    return counts


def touched(watcher, name, kinds=("cordon", "node-deletion", "instance-deletion")):
    return [kind for _moment, kind, seen in watcher.seen(kinds) if seen == name]


def wait_until(predicate, timeout, what):
    """predicate()'s first truthy value, looking every 0.3 s; fails naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = predicate()
        if found:
            return found
        assert time.monotonic() < deadline, "timed out after %ss waiting for %s" % (timeout, what)
        time.sleep(0.3)


def snapshot(handle):
    """What the end state is compared with: node names and sizes per group, workload counts, autoscaler."""
    kube = handle.kube()
    per_group = {}
    for node in nodes(handle):
        per_group.setdefault(node["metadata"]["labels"][GROUP_LABEL], []).append(node["metadata"]["name"])
    autoscaler = kube.request("GET", "/apis/apps/v1/namespaces/kube-system/deployments/cluster-autoscaler")
    group_ids = {label_value(i["group_id"]): i["group_id"] for i in live_instances(handle)}
    return {
        "groups": {group: sorted(names) for group, names in per_group.items()},
        "group_ids": group_ids,
        "node_names": sorted(n for names in per_group.values() for n in names),
        "instances": {i["provider_id"] for i in live_instances(handle)},
        # With the ones gone before the start (an Azure overprovisioning extra of the seeding, sandbox/seed.py).
        "known_instances": {i["provider_id"] for i in handle.nodesim.instances()},
        "autoscaler_replicas": autoscaler["spec"]["replicas"],
        "control_planes": sum(1 for n in nodes(handle) if CONTROL_PLANE_LABEL in n["metadata"]["labels"]),
        "workloads": workload_replicas(handle),
    }


def limit_to_groups(values, start, suffixes):
    """Upgrade only the scaling groups whose ID ends with one of `suffixes` (rolling_upgrade_scaling_groups,
    with the preflight on: it must leave the other groups' nodes alone); returns their node labels, for
    assert_upgraded."""
    chosen = {label: gid for label, gid in start["group_ids"].items() if gid.endswith(tuple(suffixes))}
    assert len(chosen) == len(suffixes), (suffixes, start["group_ids"])
    values["rolling_upgrade_scaling_groups"] = sorted(chosen.values())
    return set(chosen)


def workload_replicas(handle):
    """{kind/name: desired replicas} of the Deployments and StatefulSets in the workloads namespace."""
    kube = handle.kube()
    wanted = {}
    for kind in ("deployments", "statefulsets"):
        for obj in kube.request("GET", "/apis/apps/v1/namespaces/%s/%s" % (WORKLOADS, kind)).get("items", []):
            wanted["%s/%s" % (kind, obj["metadata"]["name"])] = obj["spec"]["replicas"]
    return wanted


def node_annotations_with_prefix(handle, prefix=PREFIX):
    found = {}
    for node in nodes(handle):
        keys = [k for k in (node["metadata"].get("annotations") or {}) if k.startswith(prefix + "/")]
        if keys:
            found[node["metadata"]["name"]] = keys
    return found


# ---------------------------------------------------------------- process trees

RUN_MARKER = "KUBENODES_TEST_RUN"
ANSIBALLZ = re.compile(r"AnsiballZ_([A-Za-z0-9_]+)\.py")


def process_table():
    """{pid: {pid, ppid, state, start, cmdline, environ}} of every process /proc shows (Linux)."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            with open("/proc/%d/stat" % pid) as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            with open("/proc/%d/cmdline" % pid, "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            try:
                with open("/proc/%d/environ" % pid, "rb") as handle:
                    environ = handle.read()
            except OSError:
                environ = b""
        except (OSError, IndexError, ValueError):
            continue
        table[pid] = {"pid": pid, "ppid": int(fields[1]), "state": fields[0], "start": int(fields[19]),
                      "cmdline": cmdline, "environ": environ}
    return table


def process_tree(root_pid, marker=None, table=None):
    """The live processes of a run: `root_pid`, everything below it through parent links, every process
    whose environment holds RUN_MARKER=<marker> (what ansible-core's setsid() workers and their modules
    inherit, even once re-parented) and everything below those. Zombies are left out: they cannot act."""
    table = process_table() if table is None else table
    needle = ("%s=%s" % (RUN_MARKER, marker)).encode() if marker else None
    roots = [root_pid] + [pid for pid, proc in table.items()
                          if needle and needle in proc["environ"].split(b"\0")]
    children = {}
    for proc in table.values():
        children.setdefault(proc["ppid"], []).append(proc["pid"])
    found, todo = set(), [pid for pid in roots if pid in table]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return {pid: table[pid] for pid in found if table[pid]["state"] not in ("Z", "X")}


def freeze_tree(root_pid, marker=None, timeout=30):
    """SIGSTOP every process of a run's tree (process_tree), top-down, and look again until every process
    of the tree is stopped (a stopped process cannot fork, so a child forked meanwhile is found in the next
    round). Returns {pid: command line} of the processes stopped (thaw_tree resumes them)."""
    deadline = time.monotonic() + timeout
    stopped = {}
    while True:
        tree = process_tree(root_pid, marker)
        fresh = sorted((pid for pid in tree if pid not in stopped), key=lambda pid: tree[pid]["start"])
        for pid in fresh:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                continue
            stopped[pid] = tree[pid]["cmdline"]
        if not fresh and all(proc["state"] == "T" for proc in tree.values()):
            break
        if time.monotonic() > deadline:
            raise AssertionError("could not freeze the tree of %d within %ss: %s" % (root_pid, timeout, sorted(
                (pid, proc["state"], proc["cmdline"][:80]) for pid, proc in tree.items())))
        time.sleep(0.02)
    return stopped


def thaw_tree(stopped):
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def kill_tree(root_pid, marker=None, timeout=30):
    """Kill a run's whole process tree (process_tree) so that nothing of it acts afterwards: freeze it
    (freeze_tree), then SIGKILL every process and wait until they are gone. Returns [(pid, command line)]
    of the processes killed."""
    deadline = time.monotonic() + timeout
    stopped = freeze_tree(root_pid, marker, timeout)
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    while True:
        left = [pid for pid in process_tree(root_pid, marker) if pid in stopped]
        if not left:
            return sorted(stopped.items())
        if time.monotonic() > deadline:
            raise AssertionError("processes %s outlived SIGKILL for %ss" % (left, timeout))
        time.sleep(0.05)


# ---------------------------------------------------------------- running the playbook


class PlaybookRun:
    """ansible-playbook on PLAYBOOK as a subprocess in its own process group, output streamed to a file
    (the default callback prints a task as it starts, so progress is visible while it runs). Every process
    of the run (workers, modules and what they start) inherits RUN_MARKER=<self.marker> in its environment,
    so kill() finds them all, even the ones that called setsid() or lost their parent."""

    def __init__(self, values, log_path, check=False, extra_args=(), env=None, playbook=PLAYBOOK, inventory="localhost,"):
        self.values = values
        self.log_path = pathlib.Path(log_path)
        self.vars_path = self.log_path.with_suffix(".vars.json")
        self.vars_path.write_text(json.dumps(values))
        # Another playbook of the collection (upgrade_fleet.yml) with its own inventory file of clusters.
        cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), str(playbook),
               "-e", "@" + str(self.vars_path)]
        if check:
            cmd.append("--check")
        cmd += list(extra_args)
        self.marker = uuid.uuid4().hex
        env = ansible_env(dict({"ANSIBLE_STDOUT_CALLBACK": "default", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
                                "ANSIBLE_FORCE_COLOR": "0", "PYTHONUNBUFFERED": "1", RUN_MARKER: self.marker},
                               **(env or {})))
        self._log = open(self.log_path, "w")  # pylint: disable=consider-using-with
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=str(REPO),
                                     start_new_session=True)

    def output(self):
        return self.log_path.read_text(errors="replace")

    def passes_seen(self):
        return [int(m.group(1)) for m in PROGRESS.finditer(self.output())]

    def wait(self, timeout):
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("ansible-playbook still ran after %ss; output tail:\n%s" % (timeout, self.output()[-4000:]))
        finally:
            self._log.flush()
        self.assert_no_secret_in_output()
        return rc

    def assert_no_secret_in_output(self):
        """The bearer token the run authenticates with never appears in its output (no_log)."""
        token = (self.values.get("rolling_upgrade_kube") or {}).get("api_key")
        if token:
            assert token not in self.output(), "the bearer token leaked into the output of %s" % self.log_path

    def wait_for(self, predicate, timeout, what):
        """Wait until predicate(output) holds while the run is alive; False when the run ended first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self.output()):
                return True
            if self.proc.poll() is not None:
                return predicate(self.output())
            time.sleep(0.3)
        self.kill()
        raise AssertionError("timed out after %ss waiting for %s; output tail:\n%s" % (timeout, what, self.output()[-4000:]))

    def processes(self):
        """The live processes of this run: {pid: process (see process_table)}."""
        return process_tree(self.proc.pid, self.marker)

    def modules_running(self):
        """Names of the collection's modules this run executes right now (AnsiballZ_<name>.py processes)."""
        return sorted({m.group(1) for proc in self.processes().values() for m in [ANSIBALLZ.search(proc["cmdline"])] if m})

    def kill(self):
        """An abrupt stop of the whole run: every process of its tree, including the workers ansible-core
        detaches with setsid() and the modules they run, frozen with SIGSTOP until none is left to fork,
        then SIGKILLed (kill_tree). Returns the processes killed."""
        killed = kill_tree(self.proc.pid, self.marker)
        try:
            self.proc.wait(timeout=30)
        finally:
            self._log.close()
        return killed

    def kill_playbook_only(self):
        """SIGKILL only the ansible-playbook process group, as `kill -9 -PGID` does: the workers (own
        sessions) and their modules live on. For tests of what a run does about such orphans."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)

    def close(self):
        self.kill()


def run_upgrade(values, log_path, timeout=600, check=False, extra_args=()):
    """Run the playbook to its end (`extra_args`: more ansible-playbook arguments); return (returncode, output text)."""
    run = PlaybookRun(values, log_path, check=check, extra_args=extra_args)
    try:
        rc = run.wait(timeout)
    finally:
        run.close()
    return rc, run.output()


# ---------------------------------------------------------------- invariants while it runs


class Watcher(threading.Thread):
    """Polls the apiserver, the simulator and (with `etcd=True`) the control-plane etcd every `interval`
    seconds until stopped (or `max_seconds`): per group, the fewest Ready nodes and the most instances that
    exist at once; the fewest etcd members; and the destructive steps it saw begin, as events
    (time.monotonic(), kind, name) with kind one of EVENTS. Reusable (bench/chaos.py): check() asserts the
    invariants against a start snapshot, wait_event() waits for a kind of step to begin."""

    EVENTS = ("instance-created", "cordon", "eviction", "etcd-removal", "instance-deletion", "node-deletion")

    def __init__(self, handle, interval=0.5, max_seconds=900, etcd=False, cloud_took=None):
        super().__init__(daemon=True, name="upgrade-watcher")
        # Names of nodes the cloud itself took away for a while (a GCE autoheal, recreating one in place; filled in
        # while the run runs): while not Ready they count as Ready, their outage being the cloud's act, not the run's.
        self.cloud_took = cloud_took if cloud_took is not None else set()
        self.handle = handle
        self.kube = handle.kube()
        self.sim = handle.nodesim
        self.interval = interval
        self.max_seconds = max_seconds
        self.etcd = etcd
        self.stopped = threading.Event()
        self.min_ready = {}
        self.max_instances = {}
        self.instance_counts = []  # per poll, {group: instances that exist}
        self.min_etcd_members = None
        self.samples = 0
        self.errors = []
        self.events = []
        self._changed = threading.Condition()
        self._label_of = {}
        self._last = None

    def run(self):
        deadline = time.monotonic() + self.max_seconds
        while not self.stopped.is_set() and time.monotonic() < deadline:
            try:
                self._sample()
            except Exception as exc:  # noqa: BLE001 - a lost poll is reported, never fatal to the run
                self.errors.append(repr(exc))
            self.stopped.wait(self.interval)

    def _sample(self):
        ready = {}
        node_list = self.kube.request("GET", "/api/v1/nodes").get("items", [])
        for node in node_list:
            group = node["metadata"]["labels"].get(GROUP_LABEL)
            ready[group] = ready.get(group, 0) + (1 if is_ready(node) or node["metadata"]["name"] in self.cloud_took else 0)
        existing = {}
        live = set()
        for instance in self.sim.instances():
            if instance["state"] != "deleted":
                group = label_value(instance["group_id"])
                existing[group] = existing.get(group, 0) + 1
                live.add(instance["provider_id"])
        pods = self.kube.request("GET", "/api/v1/namespaces/%s/pods" % WORKLOADS).get("items", [])
        members = set()
        if self.etcd:
            try:
                members = set(etcd_member_names(self.handle))
            except AssertionError as exc:  # no member answered this poll: the other invariants still count
                self.errors.append(repr(exc))
                members = self._last["members"] if self._last else set()
        for group in set(ready) | set(self.min_ready):
            self.min_ready[group] = min(self.min_ready.get(group, ready.get(group, 0)), ready.get(group, 0))
        for group, count in existing.items():
            self.max_instances[group] = max(self.max_instances.get(group, 0), count)
        if self.etcd and members:
            self.min_etcd_members = len(members) if self.min_etcd_members is None else min(self.min_etcd_members, len(members))
        self.instance_counts.append(existing)
        now = {
            "nodes": {n["metadata"]["name"] for n in node_list},
            "cordoned": {n["metadata"]["name"] for n in node_list if n["spec"].get("unschedulable")},
            "evicting": {p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp")},
            "instances": live,
            "members": members,
        }
        if self._last is not None:
            last = self._last
            found = [("instance-created", sorted(now["instances"] - last["instances"])),
                     ("cordon", sorted(now["cordoned"] - last["cordoned"])),
                     ("eviction", sorted(now["evicting"] - last["evicting"])),
                     ("etcd-removal", sorted(last["members"] - now["members"])),
                     ("instance-deletion", sorted(last["instances"] - now["instances"])),
                     ("node-deletion", sorted(last["nodes"] - now["nodes"]))]
            stamp = time.monotonic()
            with self._changed:
                self.events.extend((stamp, kind, name) for kind, names in found for name in names)
                self._changed.notify_all()
        self._last = now
        self.samples += 1

    def seen(self, kinds, since=0.0):
        """Events of `kinds` seen after `since` (a time.monotonic() value)."""
        with self._changed:
            return [event for event in self.events if event[1] in kinds and event[0] > since]

    def wait_event(self, kinds, since, timeout):
        """The first event of `kinds` after `since`, waiting up to `timeout` seconds; None if none came."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [event for event in self.events if event[1] in kinds and event[0] > since]
                if found or time.monotonic() > deadline or self.stopped.is_set():
                    return found[0] if found else None
                self._changed.wait(min(0.5, max(0.0, deadline - time.monotonic())))

    def stop(self):
        self.stopped.set()
        self.join(timeout=30)

    def check(self, start, max_surge=1, max_unavailable=0):
        """The invariants while it ran: Ready nodes per group never below the start minus `max_unavailable`,
        instances per group never above the start plus `max_surge`, and (with etcd) never fewer etcd members
        than control planes at the start."""
        assert self.samples >= 5, "the watcher saw too little (%d samples, errors %s)" % (self.samples, self.errors[:3])
        for group, names in start["groups"].items():
            assert self.min_ready.get(group, 0) >= len(names) - max_unavailable, (
                "group %s fell to %s Ready node(s) (started with %d, max_unavailable %d)"
                % (group, self.min_ready.get(group), len(names), max_unavailable))
            assert self.max_instances.get(group, 0) <= len(names) + max_surge, (
                "group %s had %s instances at once (size %d, max_surge %d)"
                % (group, self.max_instances.get(group), len(names), max_surge))
        if self.etcd:
            assert self.min_etcd_members is not None and self.min_etcd_members >= start["control_planes"], (
                "etcd fell to %s member(s) (started with %d control planes)" % (self.min_etcd_members, start["control_planes"]))

    def surge_at_once(self, start, groups):
        """The largest surge every one of `groups` had in the same poll: min over the groups of
        (instances that exist - starting size), maximised over polls."""
        return max((min(counts.get(g, 0) - len(start["groups"][g]) for g in groups) for counts in self.instance_counts),
                   default=0)


# ---------------------------------------------------------------- end state


def etcd_member_names(handle):
    """The control-plane etcd's own member list (one real MemberList call over mutual TLS)."""
    etcd = handle.cp_etcd()
    errors = []
    for endpoint in etcd["endpoints"]:
        try:
            resp = requests.post(endpoint + "/v3/cluster/member/list", json={}, verify=etcd["ca"],
                                 cert=(etcd["cert"], etcd["key"]), timeout=10)
            resp.raise_for_status()
            return sorted(m.get("name", "") for m in resp.json().get("members", []))
        except requests.RequestException as exc:
            errors.append("%s: %s" % (endpoint, exc))
    raise AssertionError("no control-plane etcd endpoint answered: %s" % errors)


def wait_workloads_running(handle, start, timeout=120):
    """Every Deployment and StatefulSet of the workloads namespace back at its replicas, every DaemonSet with a
    pod on every Ready node, every pod there Running and Ready on a Ready node; returns the pods. A DaemonSet's pod
    still bound to a deleted Node is left out: nothing runs it, and kube-controller-manager's pod garbage collector
    removes it only 40 s or more after the Node went (waiting for it cost every end-to-end test that long)."""
    kube = handle.kube()
    deadline = time.monotonic() + timeout
    while True:
        problems = []
        listed = nodes(handle)
        existing = {n["metadata"]["name"] for n in listed}
        ready_nodes = {n["metadata"]["name"] for n in listed if is_ready(n)}
        pods = [p for p in kube.request("GET", "/api/v1/namespaces/%s/pods" % WORKLOADS).get("items", [])
                if not p["metadata"].get("deletionTimestamp")
                and not (_owned_by_daemonset(p) and p["spec"].get("nodeName") not in existing)]
        for daemonset in kube.request("GET", "/apis/apps/v1/namespaces/%s/daemonsets" % WORKLOADS).get("items", []):
            name = daemonset["metadata"]["name"]
            served = {p["spec"].get("nodeName") for p in pods if nodesim.pod_is_running_ready(p)
                      and any(r["name"] == name for r in p["metadata"].get("ownerReferences") or [])}
            if ready_nodes - served:
                problems.append("daemonset %s has no running pod on %s" % (name, sorted(ready_nodes - served)))
        for pod in pods:
            if not nodesim.pod_is_running_ready(pod) or pod["spec"].get("nodeName") not in ready_nodes:
                problems.append("pod %s %s on %s" % (pod["metadata"]["name"], pod["status"].get("phase"),
                                                     pod["spec"].get("nodeName")))
        counts = {}
        for pod in pods:
            for ref in pod["metadata"].get("ownerReferences") or []:
                counts[ref["name"]] = counts.get(ref["name"], 0) + 1
        for key, replicas in start["workloads"].items():
            kind, name = key.split("/")
            have = sum(c for owner, c in counts.items() if owner == name or (kind == "deployments" and owner.startswith(name + "-")))
            if have != replicas:
                problems.append("%s has %d pod(s), wants %d" % (key, have, replicas))
        if not problems:
            return pods
        if time.monotonic() > deadline:
            raise AssertionError("workloads not all Running after %ss: %s" % (timeout, problems[:10]))
        time.sleep(1)


def _owned_by_daemonset(pod):
    return any(ref.get("kind") == "DaemonSet" for ref in pod["metadata"].get("ownerReferences") or [])


def assert_upgraded(handle, values, start, report=True, groups=None, healed=()):
    """The end state of a finished upgrade, checked from the apiserver, the simulator and etcd. `groups`:
    the node labels of the groups upgraded (default all); the other groups must be untouched. `healed`: nodes of
    the start the cloud recreated in place on the new image during the run (a GCE autoheal): they stay, on the image,
    with their instance, and are not replaced."""
    image = values["rolling_upgrade_image"]
    groups = set(start["groups"]) if groups is None else set(groups)
    untouched = sorted(n for g, names in start["groups"].items() if g not in groups for n in names)
    replaced = sorted(n for g, names in start["groups"].items() if g in groups for n in names if n not in healed)
    all_nodes = nodes(handle)
    names = sorted(n["metadata"]["name"] for n in all_nodes)
    assert not set(names) & set(replaced), "old nodes are still there: %s" % names
    assert set(untouched) | set(healed) <= set(names), "nodes outside the upgraded groups were removed: %s" % names
    per_group = {}
    for node in all_nodes:
        labels = node["metadata"]["labels"]
        assert is_ready(node), "%s is not Ready" % node["metadata"]["name"]
        per_group.setdefault(labels[GROUP_LABEL], []).append(node["metadata"]["name"])
        if node["metadata"]["name"] in untouched:
            assert node["status"]["nodeInfo"]["osImage"].lower() != image.lower(), (
                "%s is outside the upgrade" % node["metadata"]["name"])
            continue
        # Node side: what the (simulated) kubelet reports. Not the sandbox's image label: node_pair copies
        # that label from donor to heir like any non-reserved label, so a heir shows its donor's value.
        assert node["status"]["nodeInfo"]["osImage"].lower() == image.lower(), (
            node["metadata"]["name"], node["status"]["nodeInfo"]["osImage"])
        assert labels.get(USER_LABEL[0]) == USER_LABEL[1], "label %s=%s not copied to %s" % (
            USER_LABEL + (node["metadata"]["name"],))
        assert not node["spec"].get("unschedulable"), "%s left cordoned" % node["metadata"]["name"]
    assert {g: len(v) for g, v in per_group.items()} == {g: len(v) for g, v in start["groups"].items()}

    # Provider side: the instances that exist are exactly the new nodes, all from image B; nothing orphaned.
    instances = live_instances(handle)
    assert sorted(i["node_name"] for i in instances) == names, (
        "instances %s != nodes %s" % (sorted(i["node_name"] for i in instances), names))
    for instance in instances:
        if instance["node_name"] not in untouched:
            assert instance["image"].lower() == image.lower(), (instance["node_name"], instance["image"], image)
        assert instance["state"] == "ready", instance
    assert {i["provider_id"] for i in instances} & start["instances"] == {
        i["provider_id"] for i in instances if i["node_name"] in untouched or i["node_name"] in healed}

    control_planes = sorted(n["metadata"]["name"] for n in all_nodes if CONTROL_PLANE_LABEL in n["metadata"]["labels"])
    assert etcd_member_names(handle) == control_planes

    autoscaler = handle.kube().request("GET", "/apis/apps/v1/namespaces/kube-system/deployments/cluster-autoscaler")
    assert autoscaler["spec"]["replicas"] == start["autoscaler_replicas"]

    pods = wait_workloads_running(handle, start)
    # Bare pods have no controller: force-drained, they are gone and not recreated. A healed node was never drained:
    # its pods run on, restarted on the recreated VM.
    bare = [p["metadata"]["name"] for p in pods if not p["metadata"].get("ownerReferences")
            and p["spec"].get("nodeName") not in untouched and p["spec"].get("nodeName") not in healed]
    assert not bare, "bare pods outlived their drained nodes: %s" % bare

    if report:
        report_dir = pathlib.Path(values["rolling_upgrade_report_dir"])
        for suffix in ("json", "md", "svg"):
            assert (report_dir / ("image-upgrade-report." + suffix)).is_file(), "no %s report" % suffix
        text = (report_dir / "image-upgrade-report.json").read_text()
        markdown = (report_dir / "image-upgrade-report.md").read_text()
        for old in replaced:
            assert old in text and old in markdown, "the report does not name %s" % old
        # The summary's count is the donors really replaced: exactly the old nodes of the upgraded groups. A node it
        # names as surplus is one this upgrade created and removed (a heir whose donor the cloud healed in place).
        summary = json.loads(text)
        finished = sorted(row["node"] for row in summary["nodes"] if row["done"] and row["kind"] != "surplus")
        assert summary["nodes_replaced"] == len(replaced) and finished == replaced, (
            "the report says %s node(s) replaced (%s), the upgrade replaced %s" % (
                summary["nodes_replaced"], finished, replaced))
        surplus = sorted(row["node"] for row in summary["nodes"] if row["kind"] == "surplus")
        start_nodes = {n for names in start["groups"].values() for n in names}
        assert not set(surplus) & start_nodes and not set(surplus) & set(names), (
            "the report names as surplus %s: nodes of the start, or nodes still there (%s)" % (surplus, names))
        assert summary["surplus_removed"] == len(surplus), summary
    return all_nodes


# ---------------------------------------------------------------- identities, snapshots, failures


def least_privilege_auth(handle):
    """The ServiceAccount roles/rolling_upgrade/files/rbac.yml ships, with its bindings, applied as a user
    would (`kubectl apply -f rbac.yml`, as shipped), and its token (`kubectl create token`), as kube auth
    options for the role."""
    kubectl = [str(binaries.path_of("kubectl")), "--kubeconfig", handle.kubeconfig]
    subprocess.run(kubectl + ["apply", "-f", str(RBAC_FILE)], check=True, capture_output=True, text=True, timeout=60)
    namespace, account = rbac_audit.service_account(rbac_audit.shipped(RBAC_FILE))
    token = subprocess.run(kubectl + ["create", "token", account, "-n", namespace, "--duration", "2h"],
                           check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    return {"host": handle.apiserver, "api_key": token, "ca_cert": handle.ca}


def lease_holder(handle):
    lease = handle.kube().request("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kubenodes-image-upgrade",
                                  ok=(200, 404))
    return ((lease or {}).get("spec") or {}).get("holderIdentity") if lease and lease.get("kind") == "Lease" else None


def group_settings(values):
    """{group id: its cloud settings (Group.settings, cloud_settings.py)}, read through the collection's own provider."""
    return {group.id: dict(group.settings) for group in provider(values).list_groups()}


def assert_settings_restored(values, before, report_dir=None):
    """Every cloud setting is back as it was `before` (group_settings at the start), and the report says which the
    run changed and restored (at least one when some group had a setting to neutralise). Returns the report's rows."""
    assert group_settings(values) == before, "cloud settings not restored: %s != %s" % (group_settings(values), before)
    summary = json.loads((pathlib.Path(report_dir or values["rolling_upgrade_report_dir"]) /
                          "image-upgrade-report.json").read_text())
    rows = summary["cloud_settings"]
    assert all(r["restored"] and r["changed"] and not r["held"] for r in rows), rows
    return rows


def journal(handle):
    """The upgrade's journal record (the role's default ConfigMap)."""
    stored = handle.kube().request("GET", "/api/v1/namespaces/kube-system/configmaps/kubenodes-image-upgrade-journal")
    return json.loads(stored["data"]["journal.json"])


def group_images(values):
    """{group id: image its new instances get}, read through the collection's own provider for the cloud
    (an SDK call to the emulator, as an operator's `describe` would be)."""
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers.factory import PROVIDERS, build_provider

    cloud = values["rolling_upgrade_provider"]
    # The options as Ansible would pass them: every default filled in.
    options = {key: spec.get("default") for key, spec in PROVIDERS[cloud].ARG_SPEC.items()}
    options.update(values["rolling_upgrade_" + cloud])
    provider = build_provider({"provider": cloud, cloud: options})
    return {group.id: group.image for group in provider.list_groups()}


def world(handle, values):
    """Everything a run could change: node annotations, labels and cordons, instances, the groups' images,
    the autoscaler, the Lease."""
    kube = handle.kube()
    autoscaler = kube.request("GET", "/apis/apps/v1/namespaces/kube-system/deployments/cluster-autoscaler")
    return {
        "nodes": {n["metadata"]["name"]: (n["metadata"].get("annotations"), n["metadata"]["labels"],
                                          bool(n["spec"].get("unschedulable"))) for n in nodes(handle)},
        "instances": sorted((i["provider_id"], i["state"]) for i in handle.nodesim.instances()),
        "group_images": group_images(values),
        "autoscaler": (autoscaler["metadata"]["resourceVersion"], autoscaler["spec"]["replicas"]),
        "lease": lease_holder(handle),
    }


def missing_image(values):
    """A well-formed reference to an image that does not exist in the run's cloud, and the part of it an
    error must quote."""
    image = values["rolling_upgrade_image"]
    if values["rolling_upgrade_provider"] == "aws":
        return "ami-0000000000000dead", "ami-0000000000000dead"
    return image.rsplit("/", 1)[0] + "/does-not-exist", "does-not-exist"


def check_plan(output):
    """The plan a check-mode run showed (upgrade_step's RV check_plan), from a kubenodes_json callback document."""
    [plan] = [result["check_plan"] for play in output["plays"] for task in play["tasks"]
              for result in task["hosts"].values() if "check_plan" in result]
    return plan


def failed_messages(output):
    """'task: message' of every failed task in a kubenodes_json callback document."""
    messages = []
    for play in output["plays"]:
        for task in play["tasks"]:
            for result in task["hosts"].values():
                if result.get("failed"):
                    messages.append("%s: %s" % (task["task"]["name"], result.get("msg")))
    return messages


def fatal_message(output):
    """The message of the last `fatal:` line of a default-callback log."""
    fatal = [line for line in output.splitlines() if line.startswith("fatal: [localhost]: FAILED! => ")]
    assert fatal, output[-4000:]
    return json.loads(fatal[-1].split("=> ", 1)[1]).get("msg", "")


def wait_pod_running(kube, namespace, selector, node, timeout=60):
    """Name of the one Running pod of `selector` (on `node` when given)."""
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


class ActWhen(threading.Thread):
    """While a run runs: once `condition()` holds (looked at every 0.3 s, up to `timeout` seconds), `action()` once.
    `acted` is set when it ran; `result` is what it returned, `errors` what the looks or the action raised. For a
    cloud's own act in the middle of a run (a health check failing once the run changed the cloud's settings)."""

    def __init__(self, condition, action, timeout=600):
        super().__init__(daemon=True, name="act-when")
        self.condition, self.action, self.timeout = condition, action, timeout
        self.acted = threading.Event()
        self.stopped = threading.Event()
        self.result = None
        self.errors = []

    def run(self):
        deadline = time.monotonic() + self.timeout
        while not self.stopped.is_set() and time.monotonic() < deadline:
            try:
                if self.condition():
                    self.result = self.action()
                    self.acted.set()
                    return
            except Exception as exc:  # noqa: BLE001 - reported by the test that reads errors
                self.errors.append(repr(exc))
            self.stopped.wait(0.3)

    def stop(self):
        self.stopped.set()
        self.join(timeout=30)


def run_watched(handle, values, log_path, timeout=600, etcd=False, extra_args=(), during=(), cloud_took=None):
    """Run the playbook to its end with a Watcher sampling throughout (`cloud_took`: Watcher's); `during`: ActWhen
    threads started with the run and stopped after it. (returncode, output, stopped watcher)."""
    watcher = Watcher(handle, etcd=etcd, cloud_took=cloud_took)
    watcher.start()
    for thread in during:
        thread.start()
    try:
        rc, output = run_upgrade(values, log_path, timeout=timeout, extra_args=extra_args)
    finally:
        watcher.stop()
        for thread in during:
            thread.stop()
    return rc, output, watcher
