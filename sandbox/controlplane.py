"""The sandbox's real Kubernetes control plane: a storage etcd, kube-apiserver, kube-controller-manager
and kube-scheduler, each a process of its own on free ports of 127.0.0.1, plus the PKI, the admin
kubeconfig and the state file that records every PID.

Everything lives under one state directory:
  pki/            CA, apiserver serving cert, admin client cert, service-account key pair, token file
  etcd-data/      the storage etcd's data
  logs/<name>.log one log per process; logs/kube-apiserver-audit.log the ServiceAccounts' requests
  kubeconfig      admin kubeconfig (client certificate)
  state.json      endpoints, credentials paths and PIDs (see State)

Processes run in their own sessions so `sandbox up` can return while they keep running; `down` stops
exactly the PIDs recorded in state.json, and nothing else.
"""

import json
import os
import pathlib
import secrets
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import yaml

from sandbox import binaries, netutil, pki

STATE_FILE = "state.json"
# Controllers that make drains and rescheduling behave as in production. The node-lifecycle controller
# is left out on purpose: with no kubelet it would mark every node NotReady and evict its pods.
CONTROLLERS = ",".join([
    "disruption-controller",
    "garbage-collector-controller",
    "replicaset-controller",
    "deployment-controller",
    "daemonset-controller",
    "statefulset-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "namespace-controller",
    "pod-garbage-collector-controller",
])
SERVICE_CIDR = "10.96.0.0/16"
# Audit: every request a ServiceAccount makes, at Metadata level (who, verb, resource, namespace, name, status;
# no bodies), into logs/kube-apiserver-audit.log. The tests compare what the collection's ServiceAccount
# asked for with roles/rolling_upgrade/files/rbac.yml. The admin, controllers and node simulator are not
# logged (they are no ServiceAccount), so the log stays small.
AUDIT_LOG = "kube-apiserver-audit.log"
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata", "userGroups": ["system:serviceaccounts"]}, {"level": "None"}],
}
ISSUER = "https://kubernetes.default.svc.cluster.local"


class SandboxError(RuntimeError):
    """A failure with a message meant for the person running the sandbox."""


def default_state_dir():
    repo = pathlib.Path(__file__).resolve().parent.parent
    return pathlib.Path(os.environ.get("KUBENODES_SANDBOX_DIR") or repo / ".sandbox")


# ---------------------------------------------------------------- state file and processes

def load_state(state_dir):
    path = pathlib.Path(state_dir) / STATE_FILE
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise SandboxError("the state file %s is unreadable (%s); remove it after checking that no sandbox "
                           "process of it is still running" % (path, exc))


def save_state(state_dir, state):
    path = pathlib.Path(state_dir) / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True))
    tmp.replace(path)


def pid_alive(pid):
    """True if `pid` runs and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open("/proc/%d/stat" % pid) as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def pid_matches(pid, cmd_hint):
    """True if `pid` still runs the command we started (guards against a recycled PID)."""
    try:
        cmdline = pathlib.Path("/proc/%d/cmdline" % pid).read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return cmd_hint in cmdline


def log_tail(path, lines=15):
    try:
        text = pathlib.Path(path).read_text(errors="replace")
    except OSError:
        return "(no log at %s)" % path
    return "\n".join(text.splitlines()[-lines:])


def spawn(name, cmd, log_dir, env=None):
    """Start `cmd` in its own session with stdout/stderr to logs/<name>.log; return the Popen."""
    log_path = pathlib.Path(log_dir) / ("%s.log" % name)
    with open(log_path, "ab") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)


def stop_pid(pid, cmd_hint, timeout=15.0):
    """SIGTERM `pid` (only if it still runs `cmd_hint`), wait for it, SIGKILL after `timeout`.
    Returns "stopped", "killed" or "gone"."""
    if not pid_alive(pid) or not pid_matches(pid, cmd_hint):
        return "gone"
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return "gone"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not pid_alive(pid):
            return "stopped"
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return "stopped"
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.05)
    return "killed"


def _reap(pid):
    # A child of this very process (tests start the sandbox in-process) must be reaped to vanish.
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _require_binary(name):
    path = binaries.path_of(name)
    if not path.exists():
        raise SandboxError("%s is not built (%s missing): run `make setup` first" % (name, path))
    return str(path)


def _wait_until(check, proc, what, log_path, timeout):
    """Poll check() until True; fail with the log tail if `proc` dies or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_tail(log_path)
            cause = " (a port it wanted is busy: run `up` again)" if "address already in use" in tail else ""
            raise SandboxError("%s exited with code %s while starting%s; last lines of %s:\n%s"
                               % (what, proc.returncode, cause, log_path, tail))
        if check():
            return
        time.sleep(0.2)
    raise SandboxError("%s did not become ready within %ds; last lines of %s:\n%s"
                       % (what, timeout, log_path, log_tail(log_path)))


def _claim_ports(count):
    """`count` distinct ports free on 127.0.0.1 right now."""
    ports = set()
    while len(ports) < count:
        ports.add(netutil.free_port())
    return sorted(ports)


# ---------------------------------------------------------------- PKI and kubeconfig

def make_pki(pki_dir):
    ca = pki.CA(pki_dir, "ca")
    serving = ca.issue("apiserver", "kube-apiserver", pki.SERVER,
                       hosts=["127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
                              "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "10.96.0.1"])
    admin = ca.issue("admin", "admin", pki.CLIENT, organization="system:masters")
    sa_key, sa_pub = pki.rsa_keypair(pki_dir, "sa")
    token = secrets.token_hex(16)
    tokens = pathlib.Path(pki_dir) / "tokens.csv"
    tokens.write_text('%s,admin,admin-uid,"system:masters"\n' % token)
    tokens.chmod(0o600)
    return {
        "ca": str(ca.cert_path),
        "apiserver_cert": str(serving[0]), "apiserver_key": str(serving[1]),
        "admin_cert": str(admin[0]), "admin_key": str(admin[1]),
        "admin_token": token, "token_file": str(tokens),
        "sa_key": str(sa_key), "sa_pub": str(sa_pub),
    }


def write_kubeconfig(path, server, creds):
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "sandbox", "cluster": {"server": server, "certificate-authority": creds["ca"]}}],
        "users": [{"name": "admin", "user": {"client-certificate": creds["admin_cert"],
                                             "client-key": creds["admin_key"]}}],
        "contexts": [{"name": "sandbox", "context": {"cluster": "sandbox", "user": "admin"}}],
        "current-context": "sandbox",
    }
    pathlib.Path(path).write_text(yaml.safe_dump(config, sort_keys=False))
    os.chmod(path, 0o600)


def _https_get(url, creds, timeout=2.0):
    """(status, body) of a GET as the admin, or (None, reason)."""
    ctx = ssl.create_default_context(cafile=creds["ca"])
    ctx.load_cert_chain(creds["admin_cert"], creds["admin_key"])
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
    try:
        with opener.open(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (OSError, ssl.SSLError) as exc:
        return None, str(exc)


# ---------------------------------------------------------------- the control plane

class ControlPlane:
    """Start/stop the four control-plane processes of one sandbox in `state_dir`."""

    COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")

    def __init__(self, state_dir):
        self.state_dir = pathlib.Path(state_dir).resolve()
        self.log_dir = self.state_dir / "logs"
        self.pki_dir = self.state_dir / "pki"
        self.kubeconfig = self.state_dir / "kubeconfig"

    def start(self, say=print, timeout=90):
        """Start everything; return the state dict (also saved). Raises SandboxError with a clear cause."""
        exes = {name: _require_binary(name) for name in self.COMPONENTS}
        self.log_dir.mkdir(parents=True, exist_ok=True)
        creds = make_pki(self.pki_dir)
        etcd_client, etcd_peer, apiserver_port = _claim_ports(3)
        state = {"state_dir": str(self.state_dir), "kubeconfig": str(self.kubeconfig), "pids": {},
                 "cmd_hints": {}, "ports": {"etcd_client": etcd_client, "etcd_peer": etcd_peer,
                                            "apiserver": apiserver_port},
                 "started": time.time()}
        state.update({k: creds[k] for k in ("ca", "admin_cert", "admin_key", "admin_token")})
        state["apiserver"] = "https://127.0.0.1:%d" % apiserver_port
        procs = {}
        try:
            # --- storage etcd (plain HTTP on loopback; a unique token keeps other clusters out)
            say("starting etcd (storage) on 127.0.0.1:%d" % etcd_client)
            etcd_url = "http://127.0.0.1:%d" % etcd_client
            peer_url = "http://127.0.0.1:%d" % etcd_peer
            cmd = [exes["etcd"], "--name", "storage", "--data-dir", str(self.state_dir / "etcd-data"),
                   "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
                   "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                   "--initial-cluster", "storage=" + peer_url,
                   "--initial-cluster-token", "kubenodes-%s" % secrets.token_hex(6),
                   "--initial-cluster-state", "new", "--listen-metrics-urls", "",
                   "--quota-backend-bytes", str(4 * 1024 ** 3),
                   "--log-level", "warn", "--logger", "zap"]
            procs["etcd"] = self._spawn(state, "etcd", cmd, ports=(etcd_client, etcd_peer))
            _wait_until(lambda: self._http_ok(etcd_url + "/health"), procs["etcd"], "etcd (storage)",
                        self.log_dir / "etcd.log", timeout)

            # --- kube-apiserver
            say("starting kube-apiserver on %s" % state["apiserver"])
            audit_policy = self.state_dir / "audit-policy.yaml"
            audit_policy.write_text(yaml.safe_dump(AUDIT_POLICY))
            state["audit_log"] = str(self.log_dir / AUDIT_LOG)
            cmd = [exes["kube-apiserver"],
                   "--etcd-servers=" + etcd_url,
                   "--bind-address=127.0.0.1", "--secure-port=%d" % apiserver_port,
                   "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
                   "--tls-cert-file=" + creds["apiserver_cert"], "--tls-private-key-file=" + creds["apiserver_key"],
                   "--client-ca-file=" + creds["ca"], "--token-auth-file=" + creds["token_file"],
                   "--service-account-issuer=" + ISSUER,
                   "--service-account-key-file=" + creds["sa_pub"],
                   "--service-account-signing-key-file=" + creds["sa_key"],
                   "--authorization-mode=Node,RBAC", "--service-cluster-ip-range=" + SERVICE_CIDR,
                   "--audit-policy-file=" + str(audit_policy), "--audit-log-path=" + state["audit_log"],
                   "--audit-log-mode=blocking", "--audit-log-maxbackup=1", "--audit-log-maxsize=100",
                   "--profiling=false", "--v=1"]
            procs["kube-apiserver"] = self._spawn(state, "kube-apiserver", cmd, ports=(apiserver_port,))
            _wait_until(lambda: _https_get(state["apiserver"] + "/readyz", creds)[0] == 200,
                        procs["kube-apiserver"], "kube-apiserver", self.log_dir / "kube-apiserver.log", timeout)
            write_kubeconfig(self.kubeconfig, state["apiserver"], creds)

            # --- controller-manager and scheduler, with the admin identity
            say("starting kube-controller-manager (%s)" % CONTROLLERS)
            cmd = [exes["kube-controller-manager"], "--kubeconfig=" + str(self.kubeconfig),
                   "--controllers=" + CONTROLLERS, "--leader-elect=false", "--secure-port=0",
                   "--use-service-account-credentials=false",
                   "--service-account-private-key-file=" + creds["sa_key"],
                   "--root-ca-file=" + creds["ca"],
                   # bigger client budgets: seeding 10,000 pods should not crawl at the default 20 qps
                   "--kube-api-qps=200", "--kube-api-burst=400", "--v=1"]
            procs["kube-controller-manager"] = self._spawn(state, "kube-controller-manager", cmd)
            say("starting kube-scheduler")
            cmd = [exes["kube-scheduler"], "--kubeconfig=" + str(self.kubeconfig), "--leader-elect=false",
                   "--secure-port=0", "--kube-api-qps=200", "--kube-api-burst=400", "--v=1"]
            procs["kube-scheduler"] = self._spawn(state, "kube-scheduler", cmd)
            # Both have no health port (secure-port 0): give them a moment and make sure they stay up.
            _wait_until(lambda: self._default_sa_exists(state, creds), procs["kube-controller-manager"],
                        "kube-controller-manager", self.log_dir / "kube-controller-manager.log", timeout)
            for name in ("kube-controller-manager", "kube-scheduler"):
                if procs[name].poll() is not None:
                    raise SandboxError("%s exited with code %s while starting; last lines of its log:\n%s"
                                       % (name, procs[name].returncode, log_tail(self.log_dir / (name + ".log"))))
        except BaseException:
            save_state(self.state_dir, state)
            self.stop(state, say=lambda *_: None)
            raise
        save_state(self.state_dir, state)
        return state

    def _spawn(self, state, name, cmd, ports=()):
        for port in ports:
            # Refuse a busy port outright: an etcd that cannot bind would leave the apiserver talking
            # to whatever else listens there.
            if not netutil.port_is_free(port):
                raise SandboxError("port %d on 127.0.0.1 is busy (wanted for %s); run `up` again to pick "
                                   "other ports" % (port, name))
        proc = spawn(name, cmd, self.log_dir)
        state["pids"][name] = proc.pid
        state["cmd_hints"][name] = cmd[0]
        save_state(self.state_dir, state)  # record the PID at once: a crash below must not orphan it
        return proc

    @staticmethod
    def _http_ok(url):
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(url, timeout=1) as resp:
                return resp.status == 200
        except (OSError, urllib.error.URLError):
            return False

    @staticmethod
    def _default_sa_exists(state, creds):
        # The serviceaccount controller creating `default` in `default` proves the KCM is working.
        status, _ = _https_get(state["apiserver"] + "/api/v1/namespaces/default/serviceaccounts/default", creds)
        return status == 200

    def restart(self, name="kube-apiserver", down_seconds=0.0, timeout=90):
        """Stop one running component (SIGTERM, as a supervisor restarting it would), wait `down_seconds`,
        start it again with the very same command line, ports and data, and wait until it serves (the
        apiserver's /readyz; the others: still running after a second). Records the new PID in the state
        file, so `down` stops it. Returns {"name", "old_pid", "new_pid", "stopped", "down_s"}."""
        if name not in self.COMPONENTS:
            raise SandboxError("restart: %r is not a control-plane component (choose from %s)"
                               % (name, ", ".join(self.COMPONENTS)))
        state = load_state(self.state_dir)
        old_pid = (state or {}).get("pids", {}).get(name)
        if not old_pid or not pid_alive(old_pid):
            raise SandboxError("restart: %s is not running in %s; run `up` first" % (name, self.state_dir))
        try:
            cmd = pathlib.Path("/proc/%d/cmdline" % old_pid).read_bytes().rstrip(b"\0").split(b"\0")
        except OSError as exc:
            raise SandboxError("restart: cannot read the command line of %s (pid %d): %s" % (name, old_pid, exc))
        cmd = [part.decode() for part in cmd]
        began = time.monotonic()
        stopped = stop_pid(old_pid, state["cmd_hints"].get(name, name))
        time.sleep(max(0.0, float(down_seconds)))
        proc = spawn(name, cmd, self.log_dir)
        state["pids"][name] = proc.pid
        save_state(self.state_dir, state)
        if name == "kube-apiserver":
            creds = {k: state[k] for k in ("ca", "admin_cert", "admin_key")}
            _wait_until(lambda: _https_get(state["apiserver"] + "/readyz", creds)[0] == 200, proc, name,
                        self.log_dir / (name + ".log"), timeout)
        else:
            time.sleep(1.0)
            if proc.poll() is not None:
                raise SandboxError("%s exited with code %s after its restart; last lines of its log:\n%s"
                                   % (name, proc.returncode, log_tail(self.log_dir / (name + ".log"))))
        return {"name": name, "old_pid": old_pid, "new_pid": proc.pid, "stopped": stopped,
                "down_s": round(time.monotonic() - began, 2)}

    def stop(self, state=None, say=print):
        """Stop the recorded processes in reverse start order; idempotent."""
        state = state or load_state(self.state_dir)
        if not state:
            return {}
        results = {}
        for name in reversed(self.COMPONENTS):
            pid = state.get("pids", {}).get(name)
            if pid:
                results[name] = stop_pid(pid, state["cmd_hints"].get(name, name))
                say("%s (pid %d): %s" % (name, pid, results[name]))
        return results
