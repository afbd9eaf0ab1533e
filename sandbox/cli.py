"""`python -m sandbox up | down | status | seed`: the local sandbox from the command line, and the same
operations as functions (up(), down(), status()) for the pytest fixtures, the demo and the benchmarks.

One sandbox lives in one state directory (default: .sandbox/ in the repository, or $KUBENODES_SANDBOX_DIR).
Its state.json records every endpoint, credential path and PID; `down` stops exactly those PIDs.
"""

import argparse
import importlib
import importlib.util
import json
import os
import pathlib
import select
import shutil
import subprocess
import sys
import time

from sandbox import binaries, controlplane
from sandbox.controlplane import SandboxError, load_state, log_tail, pid_alive, save_state, stop_pid

REPO = pathlib.Path(__file__).resolve().parent.parent
CLOUD_MODULES = {"gcp": "sandbox.clouds.gce", "azure": "sandbox.clouds.azure", "aws": "sandbox.clouds.aws"}
# Stop order: things that call the API server first, the storage etcd last.
STOP_ORDER = ["reaper", "emulator:aws", "emulator:azure", "emulator:gcp", "nodesim", "kube-scheduler",
              "kube-controller-manager", "kube-apiserver", "etcd"]


def available_clouds():
    """Clouds whose emulator module exists in this checkout."""
    return [cloud for cloud, module in CLOUD_MODULES.items() if importlib.util.find_spec(module) is not None]


def _read_json_line(proc, what, log_path, timeout):
    """The first stdout line of `proc` as JSON; a clear error if it dies or stays silent."""
    deadline = time.monotonic() + timeout
    buffer = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            buffer += chunk
            if b"\n" in buffer:
                return json.loads(buffer.split(b"\n", 1)[0])
        elif proc.poll() is not None:
            break
    if proc.poll() is None:
        stop_pid(proc.pid, "python")
        raise SandboxError("%s printed nothing within %ds; last lines of %s:\n%s" % (what, timeout, log_path,
                                                                                    log_tail(log_path)))
    raise SandboxError("%s exited with code %s before serving; last lines of %s:\n%s"
                       % (what, proc.returncode, log_path, log_tail(log_path)))


def _spawn_python(state, state_dir, name, module, args, timeout=60):
    """Start `python -m module args` in its own session; wait for its JSON line; record its PID."""
    log_path = pathlib.Path(state_dir) / "logs" / ("%s.log" % name.replace(":", "-"))
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", module] + args, stdout=subprocess.PIPE, stderr=log,
                                stdin=subprocess.DEVNULL, cwd=str(REPO), start_new_session=True)
    state["pids"][name] = proc.pid
    state["cmd_hints"][name] = module
    save_state(state_dir, state)
    try:
        info = _read_json_line(proc, name, log_path, timeout)
    finally:
        proc.stdout.close()  # it prints one line only; later writes would go nowhere anyway
    return info


def _classify(state):
    """(alive, dead) component names of a recorded sandbox."""
    alive, dead = [], []
    for name, pid in state.get("pids", {}).items():
        hint = state.get("cmd_hints", {}).get(name, "")
        (alive if pid_alive(pid) and controlplane.pid_matches(pid, hint) else dead).append(name)
    return alive, dead


def up(state_dir=None, clouds="available", say=print, nodesim_workers=16, owner_pid=None):
    """Start a sandbox in `state_dir`; return its state dict. `clouds`: "available" (every emulator
    module present), a list of cloud names, or [] for none. With `owner_pid`, a small reaper process
    runs `down` as soon as that process is gone (tests: nothing outlives a killed pytest)."""
    state_dir = pathlib.Path(state_dir or controlplane.default_state_dir()).resolve()
    existing = load_state(state_dir)
    if existing:
        alive, dead = _classify(existing)
        if alive and not dead:
            raise SandboxError("a sandbox already runs in %s (%s); use `status`, or `down` first"
                               % (state_dir, ", ".join(sorted(alive))))
        if alive:
            raise SandboxError("the sandbox in %s is partly running (alive: %s; dead: %s): run `down` first"
                               % (state_dir, ", ".join(sorted(alive)), ", ".join(sorted(dead))))
        say("found a stale state file in %s (none of its processes runs any more): starting afresh" % state_dir)
        _stop_leftover_etcd_members(state_dir, say)
    # A fresh cluster each time: old data would mix with the new PKI.
    for sub in ("etcd-data", "cp-etcd", "pki", "clouds", "state.json", "kubeconfig"):
        path = state_dir / sub
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    (state_dir / "logs").mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    state = controlplane.ControlPlane(state_dir).start(say=say)
    try:
        say("starting the node simulator")
        info = _spawn_python(state, state_dir, "nodesim", "sandbox.nodesim",
                             ["--state-dir", str(state_dir), "--workers", str(nodesim_workers)])
        state["nodesim_url"] = info["url"]
        state["node_network"] = info["network"]
        say("node simulator at %s, node IPs from %s" % (info["url"], info["network"]))
        wanted = available_clouds() if clouds == "available" else list(clouds or [])
        state["clouds"] = {}
        for cloud in CLOUD_MODULES:
            if cloud not in wanted:
                continue
            if importlib.util.find_spec(CLOUD_MODULES[cloud]) is None:
                say("skipping the %s emulator: %s does not exist yet" % (cloud, CLOUD_MODULES[cloud]))
                continue
            say("starting the %s emulator" % cloud)
            cloud_dir = state_dir / "clouds" / cloud
            cloud_dir.mkdir(parents=True, exist_ok=True)
            info = _spawn_python(state, state_dir, "emulator:" + cloud, CLOUD_MODULES[cloud],
                                 ["--state-dir", str(cloud_dir), "--nodesim-url", state["nodesim_url"]])
            state["clouds"][cloud] = info
            say("%s emulator at %s" % (cloud, info.get("endpoint")))
        for cloud in set(CLOUD_MODULES) - set(available_clouds()):
            if clouds == "available":
                say("no %s emulator (%s does not exist yet): skipped" % (cloud, CLOUD_MODULES[cloud]))
    except BaseException:
        save_state(state_dir, state)
        down(state_dir, say=lambda *_: None)
        raise
    if owner_pid:
        with open(state_dir / "logs" / "reaper.log", "ab") as log:
            reaper = subprocess.Popen([sys.executable, "-m", "sandbox", "--state-dir", str(state_dir), "reap",
                                       "--owner", str(owner_pid)], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                      cwd=str(REPO), start_new_session=True)
        state["pids"]["reaper"] = reaper.pid
        state["cmd_hints"]["reaper"] = "reap"
    save_state(state_dir, state)
    say("sandbox up in %.1fs; kubeconfig: %s" % (time.monotonic() - started, state["kubeconfig"]))
    return state


def _stop_leftover_etcd_members(state_dir, say):
    """Control-plane etcd members are children of the node simulator, which stops them on SIGTERM; if
    it was killed, they are recorded in cp-etcd/pids.json and stopped here."""
    path = pathlib.Path(state_dir) / "cp-etcd" / "pids.json"
    if not path.exists():
        return
    try:
        members = json.loads(path.read_text())
    except ValueError:
        return
    for name, pid in members.items():
        result = stop_pid(pid, "--name %s" % name)
        if result != "gone":
            say("control-plane etcd member %s (pid %d): %s" % (name, pid, result))


def down(state_dir=None, say=print):
    """Stop every recorded process of the sandbox in `state_dir`; idempotent. Returns {name: result}."""
    state_dir = pathlib.Path(state_dir or controlplane.default_state_dir()).resolve()
    state = load_state(state_dir)
    if not state or not state.get("pids"):
        say("no running sandbox recorded in %s: nothing to stop" % state_dir)
        _stop_leftover_etcd_members(state_dir, say)
        return {}
    results = {}
    pids = state.get("pids", {})
    for name in STOP_ORDER + sorted(set(pids) - set(STOP_ORDER)):
        if name in pids and pids[name] != os.getpid():  # the reaper runs down itself
            results[name] = stop_pid(pids[name], state.get("cmd_hints", {}).get(name, name))
            say("%s (pid %d): %s" % (name, pids[name], results[name]))
    _stop_leftover_etcd_members(state_dir, say)
    _release_network(state)
    state["stopped"] = time.time()
    state["pids"] = {}
    save_state(state_dir, state)
    return results


def _release_network(state):
    """Free the node-IP block lock of a killed node simulator (a live one removes it itself)."""
    from sandbox import nodesim

    block = state.get("node_network")
    if block:
        lock = nodesim.NET_LOCK_DIR / block.split("/")[0]
        try:
            if int(lock.read_text().strip()) == state["pids"].get("nodesim"):
                lock.unlink()
        except (OSError, ValueError, KeyError):
            pass


def reap(state_dir, owner_pid, poll=1.0):
    """Wait until `owner_pid` is gone, then stop the sandbox (unless someone already did)."""
    while pid_alive(owner_pid):
        state = load_state(state_dir)
        if not state or not state.get("pids"):
            return  # stopped the ordinary way
        time.sleep(poll)
    print("owner %d is gone: stopping the sandbox in %s" % (owner_pid, state_dir), flush=True)
    down(state_dir)


def status(state_dir=None):
    """A dict describing the sandbox: running components, dead ones, API readiness, node counts."""
    state_dir = pathlib.Path(state_dir or controlplane.default_state_dir()).resolve()
    state = load_state(state_dir)
    if not state or not state.get("pids"):
        return {"state_dir": str(state_dir), "running": False, "components": {}}
    alive, dead = _classify(state)
    result = {"state_dir": str(state_dir), "running": bool(alive) and not dead, "kubeconfig": state["kubeconfig"],
              "apiserver": state["apiserver"], "nodesim_url": state.get("nodesim_url"),
              "components": {n: ("running (pid %d)" % state["pids"][n]) if n in alive else "NOT RUNNING"
                             for n in state["pids"]},
              "clouds": {c: i.get("endpoint") for c, i in state.get("clouds", {}).items()}}
    if "kube-apiserver" in alive:
        from sandbox import nodesim

        kube = nodesim.Kube(state["apiserver"], state["ca"], state["admin_cert"], state["admin_key"])
        try:
            nodes = kube.request("GET", "/api/v1/nodes", timeout=10).get("items", [])
            ready = sum(1 for n in nodes for c in n.get("status", {}).get("conditions", [])
                        if c["type"] == "Ready" and c["status"] == "True")
            result["nodes"] = {"total": len(nodes), "ready": ready}
        except Exception as exc:  # noqa: BLE001 - status reports, it does not fail
            result["nodes"] = "unavailable: %s" % exc
    for name in dead:
        log = state_dir / "logs" / ("%s.log" % name.replace(":", "-"))
        result.setdefault("crashed", {})[name] = log_tail(log, 8)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m sandbox", description="The kubenodes local sandbox.")
    parser.add_argument("--state-dir", default=None,
                        help="where the sandbox lives (default: %s)" % controlplane.default_state_dir())
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start the control plane, node simulator and cloud emulators")
    p_up.add_argument("--clouds", default="available",
                      help="comma-separated clouds to emulate (gcp,azure,aws), 'none', or 'available' (default)")
    sub.add_parser("down", help="stop every recorded process (idempotent)")
    sub.add_parser("status", help="show what runs")
    p_reap = sub.add_parser("reap", help=argparse.SUPPRESS)
    p_reap.add_argument("--owner", type=int, required=True)
    p_seed = sub.add_parser("seed", help="create nodes in scaling groups, and workloads")
    p_seed.add_argument("--control-planes", type=int, default=3)
    p_seed.add_argument("--workers", type=int, default=6)
    p_seed.add_argument("--groups", type=int, default=2, help="worker scaling groups")
    p_seed.add_argument("--cloud", default="none", help="gcp, azure, aws, or none (nodes only in the simulator)")
    p_seed.add_argument("--image", default="image-a")
    p_seed.add_argument("--azure-orchestration", choices=["Uniform", "Flexible"],
                        help="orchestration mode of the Azure scale sets (with --cloud azure; default Uniform)")
    p_seed.add_argument("--no-workloads", action="store_true")
    p_seed.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            if not all(binaries.path_of(n).exists() for n in binaries.BINARIES):
                raise SandboxError("the control-plane binaries are not built: run `make setup` first")
            clouds = args.clouds
            if clouds == "none":
                clouds = []
            elif clouds != "available":
                clouds = [c.strip() for c in clouds.split(",") if c.strip()]
                unknown = set(clouds) - set(CLOUD_MODULES)
                if unknown:
                    raise SandboxError("unknown clouds: %s (known: %s)" % (sorted(unknown), sorted(CLOUD_MODULES)))
            up(args.state_dir, clouds=clouds)
        elif args.command == "down":
            down(args.state_dir)
        elif args.command == "reap":
            reap(pathlib.Path(args.state_dir or controlplane.default_state_dir()).resolve(), args.owner)
        elif args.command == "status":
            result = status(args.state_dir)
            print(json.dumps(result, indent=2))
            return 0 if result["running"] else 3
        elif args.command == "seed":
            from sandbox import seed

            state = load_state(pathlib.Path(args.state_dir or controlplane.default_state_dir()).resolve())
            if not state or not state.get("pids"):
                raise SandboxError("no sandbox runs there: `python -m sandbox up` first")
            summary = seed.seed(state, control_planes=args.control_planes, workers=args.workers,
                                worker_groups=args.groups, cloud=args.cloud, image=args.image,
                                workloads=not args.no_workloads, timeout=args.timeout,
                                azure_orchestration=args.azure_orchestration)
            print(json.dumps(summary, indent=2))
    except SandboxError as exc:
        print("sandbox: %s" % exc, file=sys.stderr)
        return 1
    return 0


class Sandbox:
    """A handle on a running sandbox (by its state directory): what fixtures, seeding, the demo and
    benchmarks use. `Sandbox.start(dir)` runs up(); `stop()` runs down()."""

    def __init__(self, state_dir):
        self.state_dir = pathlib.Path(state_dir).resolve()
        state = load_state(self.state_dir)
        if not state or not state.get("pids"):
            raise SandboxError("no running sandbox in %s" % self.state_dir)
        self.state = state
        self._api_client = None

    @classmethod
    def start(cls, state_dir, clouds="available", say=print, owner_pid=None):
        up(state_dir, clouds=clouds, say=say, owner_pid=owner_pid)
        return cls(state_dir)

    def stop(self, say=lambda *_: None):
        if self._api_client is not None:
            self._api_client.close()
            self._api_client = None
        return down(self.state_dir, say=say)

    def restart(self, name="kube-apiserver", down_seconds=0.0):
        """Restart one control-plane component in place (controlplane.ControlPlane.restart)."""
        result = controlplane.ControlPlane(self.state_dir).restart(name, down_seconds=down_seconds)
        self.state = load_state(self.state_dir)
        return result

    # ----- Kubernetes
    kubeconfig = property(lambda self: self.state["kubeconfig"])
    apiserver = property(lambda self: self.state["apiserver"])
    ca = property(lambda self: self.state["ca"])
    admin_token = property(lambda self: self.state["admin_token"])

    def auth_args(self):
        """Module arguments that authenticate as the sandbox admin."""
        return {"kubeconfig": self.kubeconfig}

    def api_client(self):
        """A shared kubernetes.client.ApiClient for the admin."""
        if self._api_client is None:
            from kubernetes import config

            self._api_client = config.new_client_from_config(config_file=self.kubeconfig)
        return self._api_client

    def core_v1(self):
        from kubernetes import client

        return client.CoreV1Api(self.api_client())

    def kube(self):
        """The node simulator's small raw-JSON client (fast for bulk work)."""
        from sandbox import nodesim

        return nodesim.Kube(self.apiserver, self.ca, self.state["admin_cert"], self.state["admin_key"])

    # ----- node simulator and control-plane etcd
    @property
    def nodesim(self):
        from sandbox import nodesim

        return nodesim.NodeSimClient(self.state["nodesim_url"])

    def cp_etcd(self):
        return self.nodesim.etcd()

    def wait_nodes_ready(self, names, timeout=60.0):
        """Wait until every named Node exists and is Ready; raise TimeoutError naming the laggards."""
        kube = self.kube()
        deadline = time.monotonic() + timeout
        pending = set(names)
        while True:
            nodes = kube.request("GET", "/api/v1/nodes").get("items", [])
            ready = {n["metadata"]["name"] for n in nodes
                     if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))}
            pending -= ready
            if not pending:
                return
            if time.monotonic() > deadline:
                raise TimeoutError("nodes not Ready after %.0fs: %s" % (timeout, sorted(pending)[:20]))
            time.sleep(0.3)

    # ----- clouds
    def cloud_info(self, name):
        return self.state.get("clouds", {}).get(name)

    def cloud(self, name):
        """The Admin object of the running `name` emulator, or None if it does not run here."""
        info = self.cloud_info(name)
        if not info:
            return None
        module = importlib.import_module(CLOUD_MODULES[name])
        return module.Admin(info)
