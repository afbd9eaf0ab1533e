"""What bench/makespan.py and bench/chaos.py share: a fresh sandbox per arm or experiment, the engines the
role offers, a run of playbooks/upgrade_nodes.yml whose CPU is counted, and a watch on the cluster that
timestamps what the collection does to nodes and pods.

The run itself and its kill come from tests/integration/upgrade_helpers.py (PlaybookRun), the invariant
watcher too (Watcher): the benchmarks measure the same run the end-to-end tests check.
"""

import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
for _path in (REPO / "tests" / "integration", REPO / ".build" / "collections", REPO):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
os.environ.setdefault("ANSIBLE_COLLECTIONS_PATH", str(REPO / ".build" / "collections"))

import yaml  # noqa: E402

import upgrade_helpers  # noqa: E402  pylint: disable=wrong-import-position
from sandbox import cli  # noqa: E402

PREFIX = upgrade_helpers.PREFIX
# The role's one engine (upgrade_step); results still name it, so that they read like the records in
# bench/README.md, where "tasks" is the task-chain engine the role had until issue 27.
ENGINE = "step"


def quiet(*_args, **_kwargs):
    return None


def log(*args):
    print(time.strftime("%H:%M:%S"), *args, flush=True)


# ---------------------------------------------------------------- the machine and the checkout

def loadavg():
    return [round(x, 2) for x in os.getloadavg()]


def commit():
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


@contextlib.contextmanager
def fresh_sandbox(cloud, keep=False, prefix="kubenodes-bench-"):
    """A sandbox of its own (real control plane, node simulator, the one cloud emulator), stopped after."""
    state_dir = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
    handle = None
    try:
        handle = cli.Sandbox.start(state_dir, clouds=[cloud], say=quiet, owner_pid=os.getpid())
        yield handle
    finally:
        if handle is not None:
            handle.stop()
        else:
            cli.down(state_dir, say=quiet)
        if keep:
            log("sandbox state kept in %s" % state_dir)
        else:
            shutil.rmtree(state_dir, ignore_errors=True)


# ---------------------------------------------------------------- one run, its CPU counted

class MeasuredRun:
    """upgrade_helpers.PlaybookRun, reaped with os.wait4 so that the CPU of ansible-playbook and of every
    descendant it waited for (the forked workers, the module processes they ran) is counted."""

    def __init__(self, values, log_path, extra_args=()):
        self.started = time.time()
        self.run = upgrade_helpers.PlaybookRun(values, log_path, extra_args=extra_args)
        self.pid = self.run.proc.pid
        self.ended = None
        self.rc = None
        self.cpu = None

    def poll(self):
        if self.rc is None:
            pid, status, usage = os.wait4(self.pid, os.WNOHANG)
            if pid:
                self._reaped(status, usage)
        return self.rc

    def wait(self, timeout):
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                self.kill()
                return None
            time.sleep(0.2)
        return self.rc

    def _reaped(self, status, usage):
        self.ended = time.time()
        self.rc = os.waitstatus_to_exitcode(status)
        self.cpu = usage.ru_utime + usage.ru_stime
        self.run.proc.returncode = self.rc   # reaped here: Popen must not wait for it again

    def kill(self):
        """The run's own kill (upgrade_helpers.PlaybookRun.kill), then the reap; returns survivors: PIDs of
        the run's tree still alive right after it (which a kill of the whole tree leaves none of)."""
        tree = process_tree(self.pid) if self.rc is None else []
        killed = dict(self.run.kill())   # reaps the playbook itself (Popen.wait): a killed run's CPU is not counted
        if self.rc is None:
            self.rc, self.ended = self.run.proc.returncode, time.time()
        left = [p for p in tree if p != self.pid and _alive(p)]
        if left:
            # Each with what it was and whether kill_tree SIGKILLed it: a process still exiting is not one
            # that acts on; one alive 2 s later that kill_tree never saw is.
            seen = {p: (_state(p), _cmdline(p)) for p in left}
            time.sleep(2.0)
            left = [{"pid": p, "state": seen[p][0], "cmdline": seen[p][1][:160], "sigkilled": p in killed,
                     "alive_2s_later": _alive(p)} for p in left]
        return left

    def output(self):
        return self.run.output()


def process_tree(root):
    """PIDs of `root` and every descendant, from /proc (children of every thread)."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        for task in pathlib.Path("/proc/%d/task" % pid).glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
    return found


def signal_process(pid, sig):
    """Send `sig` to one process the benchmark started (a sandbox's etcd member); False when it is gone."""
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def _state(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def check_cpu_accounting(workdir, burn=1.5):
    """Prove that os.wait4 counts the CPU of a module a worker runs: the same one-task play, once with a
    command that burns `burn` CPU seconds and once with one that burns none; the difference must be at
    least `burn`. Returns (difference counted, burn)."""
    counted = []
    for seconds in (0.0, burn):
        play = [{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
            {"ansible.builtin.command": {"argv": [sys.executable, "-c", "import time\nend = time.process_time() + %s\n"
                                                  "while time.process_time() < end: pass" % seconds]}}]}]
        path = pathlib.Path(workdir) / "cpu-check.yml"
        path.write_text(yaml.safe_dump(play))
        cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", str(path)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                env=upgrade_helpers.ansible_env({"ANSIBLE_STDOUT_CALLBACK": "default"}))
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise RuntimeError("the CPU accounting check play failed (exit %d): run %s by hand"
                               % (proc.returncode, " ".join(cmd)))
        counted.append(usage.ru_utime + usage.ru_stime)
    return counted[1] - counted[0], burn


# ---------------------------------------------------------------- watching the cluster

def _ready(node):
    return upgrade_helpers.is_ready(node)


class ClusterWatch:
    """Kubernetes watches on Nodes and Pods (one thread each) that timestamp, on arrival, what happens:
    per node when it first existed, turned Ready, got a <prefix>/donor annotation (paired as a heir), was
    cordoned, got the unreachable taint (its instance gone), was deleted; per node the moments its last
    pod that is not a DaemonSet's went away."""

    def __init__(self, handle):
        self.kube = handle.kube()
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.nodes = {}      # name -> {first, ready, donor_of, paired, cordoned, gone, deleted, control_plane, group}
        self.pods = {}       # uid -> {node, daemonset}
        self.emptied = {}    # node -> [times its non-DaemonSet pod count fell to 0]
        self.errors = []
        self.threads = [threading.Thread(target=self._loop, args=(path, handler), daemon=True, name="watch-" + what)
                        for what, path, handler in (("nodes", "/api/v1/nodes", self._on_node),
                                                    ("pods", "/api/v1/pods", self._on_pod))]
        self.initial_nodes = set()
        # Set once a watch's first LIST has been handled whole: the Nodes there at the start are those of that list
        # (3 + 1,000 Nodes take a while to handle; taken before, the start held 181 of them).
        self.listed = {path: threading.Event() for path in ("/api/v1/nodes", "/api/v1/pods")}

    def start(self):
        for thread in self.threads:
            thread.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (self.listed["/api/v1/nodes"].is_set() and self.nodes
                                                   and all(t.is_alive() for t in self.threads)):
            time.sleep(0.1)
        with self.lock:
            self.initial_nodes = set(self.nodes)
        return self

    def stop(self):
        self.stopped.set()

    def _loop(self, path, handler):
        session = self.kube.session()
        while not self.stopped.is_set():
            try:
                listing = self.kube.request("GET", path, timeout=60)
                now = time.time()
                for obj in listing.get("items", []):
                    handler("ADDED", obj, now)
                self.listed[path].set()
                version = listing["metadata"]["resourceVersion"]
                while not self.stopped.is_set():
                    resp = session.get(self.kube.server + path, stream=True, timeout=(10, 90),
                                       params={"watch": "1", "resourceVersion": version, "timeoutSeconds": "60",
                                               "allowWatchBookmarks": "true"})
                    if resp.status_code != 200:
                        raise RuntimeError("watch %s: %d" % (path, resp.status_code))
                    for line in resp.iter_lines():
                        if self.stopped.is_set():
                            return
                        if not line:
                            continue
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            raise RuntimeError("watch %s: %s" % (path, event["object"].get("message")))
                        version = event["object"]["metadata"].get("resourceVersion", version)
                        if event["type"] != "BOOKMARK":
                            handler(event["type"], event["object"], time.time())
            except Exception as exc:  # noqa: BLE001 - an apiserver restart breaks a watch: list again
                if not self.stopped.is_set():
                    self.errors.append("%s %s: %r" % (time.strftime("%H:%M:%S"), path, exc))
                    self.stopped.wait(1.0)

    def _on_node(self, kind, node, now):
        meta = node["metadata"]
        name = meta["name"]
        with self.lock:
            rec = self.nodes.setdefault(name, {"first": now, "ready": None, "paired": None, "donor_of": None,
                                               "cordoned": None, "gone": None, "deleted": None})
            labels = meta.get("labels") or {}
            rec["control_plane"] = upgrade_helpers.CONTROL_PLANE_LABEL in labels
            rec["group"] = labels.get(upgrade_helpers.GROUP_LABEL)
            if kind == "DELETED":
                rec["deleted"] = rec["deleted"] or now
                return
            if rec["ready"] is None and _ready(node):
                rec["ready"] = now
            donor = (meta.get("annotations") or {}).get(PREFIX + "/donor")
            if donor and rec["paired"] is None:
                rec["paired"], rec["donor_of"] = now, donor
            phase = (meta.get("annotations") or {}).get(PREFIX + "/phase")
            if phase:
                rec.setdefault("phases", {}).setdefault(phase, now)
                rec["phase"] = phase
            if rec["cordoned"] is None and node.get("spec", {}).get("unschedulable"):
                rec["cordoned"] = now
            taints = {t.get("key") for t in node.get("spec", {}).get("taints") or []}
            if rec["gone"] is None and "node.kubernetes.io/unreachable" in taints:
                rec["gone"] = now

    def _on_pod(self, kind, pod, now):
        uid = pod["metadata"]["uid"]
        node = pod.get("spec", {}).get("nodeName")
        daemonset = any(ref.get("kind") == "DaemonSet" for ref in pod["metadata"].get("ownerReferences") or [])
        with self.lock:
            before = self.pods.get(uid)
            if kind == "DELETED":
                self.pods.pop(uid, None)
            elif node:
                self.pods[uid] = {"node": node, "daemonset": daemonset}
            old_node = before["node"] if before and not before["daemonset"] else None
            if old_node and (kind == "DELETED" or old_node != node):
                if not any(p["node"] == old_node and not p["daemonset"] for p in self.pods.values()):
                    self.emptied.setdefault(old_node, []).append(now)

    # ---- what the timestamps say

    def snapshot(self):
        with self.lock:
            return {k: dict(v) for k, v in self.nodes.items()}, {k: list(v) for k, v in self.emptied.items()}

    def drains(self):
        """{donor: seconds from its cordon to its last non-DaemonSet pod gone} (0 when it held none)."""
        nodes, emptied = self.snapshot()
        out = {}
        for name, rec in nodes.items():
            if name not in self.initial_nodes or rec["cordoned"] is None:
                continue
            later = [t for t in emptied.get(name, []) if t >= rec["cordoned"]]
            out[name] = (min(later) - rec["cordoned"]) if later else 0.0
        return out

    def heirs(self):
        nodes, _ = self.snapshot()
        return {name: rec for name, rec in nodes.items() if name not in self.initial_nodes}

    def reaction(self, heir_ready_seconds):
        """Per heir: Ready -> paired (its donor annotation), and Ready -> its donor's cordon minus the
        heir_ready_seconds gate, both as seen by the watch."""
        nodes, _ = self.snapshot()
        out = {}
        for name, rec in self.heirs().items():
            if rec["ready"] is None:
                continue
            donor = nodes.get(rec.get("donor_of") or "", {})
            out[name] = {"ready_to_paired": None if rec["paired"] is None else rec["paired"] - rec["ready"],
                         "ready_to_cordon": (None if not donor.get("cordoned") else
                                             donor["cordoned"] - rec["ready"] - heir_ready_seconds)}
        return out
