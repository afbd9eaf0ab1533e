"""Real multi-member etcd clusters with mutual TLS on loopback, for tests and for the sandbox's control plane.

    cluster = EtcdCluster(workdir, "cp")
    cluster.start([("cp-0", "127.0.0.1"), ("cp-1", "127.0.0.1"), ("cp-2", "127.0.0.1")])
    ca, cert, key = cluster.client_tls()
    cluster.client_endpoints()          # ["https://127.0.0.1:PORT", ...]
    cluster.stop()

Every member gets one certificate with serverAuth+clientAuth (etcd's JSON gateway dials its own gRPC
server with the serving certificate, and the same certificate serves as the peer certificate), with
the member's IP in the SAN. Callers get a client certificate from the same per-cluster CA.

Machines are shared, so ports are picked at run time unless the caller passes them, every cluster has a
unique --initial-cluster-token, and processes are stopped by PID only.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import pathlib
import shutil
import signal
import subprocess
import time
import uuid

import requests

from sandbox import binaries, netutil, pki

CLIENT_PORT = 2379
PEER_PORT = 2380


def url_host(ip):
    """`ip` as it appears in a URL: IPv6 in brackets."""
    try:
        if ipaddress.ip_address(ip).version == 6:
            return "[%s]" % ip
    except ValueError:
        pass
    return ip


class EtcdError(RuntimeError):
    pass


class Member:
    def __init__(self, name, ip, client_port, peer_port, data_dir, log_path, cert, key):
        self.name = name
        self.ip = ip
        self.client_port = client_port
        self.peer_port = peer_port
        self.data_dir = data_dir
        self.log_path = log_path
        self.cert = cert
        self.key = key
        self.process = None
        self.ports_chosen = False  # True when we picked the ports (and may pick again on a bind race)

    @property
    def client_url(self):
        return "https://%s:%d" % (url_host(self.ip), self.client_port)

    @property
    def peer_url(self):
        return "https://%s:%d" % (url_host(self.ip), self.peer_port)

    def running(self):
        return self.process is not None and self.process.poll() is None


class EtcdCluster:
    """A set of etcd processes forming one cluster. Not thread-safe; one owner at a time."""

    def __init__(self, workdir, name_prefix="etcd", token=None, heartbeat_ms=50, election_ms=500,
                 unsafe_no_fsync=True, etcd_binary=None):
        self.workdir = pathlib.Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.name_prefix = name_prefix
        self.token = token or "%s-%s" % (name_prefix, uuid.uuid4().hex[:16])
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        self.unsafe_no_fsync = unsafe_no_fsync
        self.etcd_binary = str(etcd_binary or binaries.path_of("etcd"))
        self.members = {}  # name -> Member, in join order
        self.ca = pki.CA(self.workdir / "pki", "etcd-ca")
        self._client_cert, self._client_key = self.ca.issue("client", "kubenodes-etcd-client", kind=pki.CLIENT)
        self._session = requests.Session()
        self._session.trust_env = False  # REQUESTS_CA_BUNDLE would override verify otherwise
        self._session.verify = str(self.ca.cert_path)
        self._session.cert = (str(self._client_cert), str(self._client_key))
        atexit.register(self.stop)

    # ----- public API -------------------------------------------------------------------------

    def client_tls(self):
        """(CA certificate, client certificate, client key) paths for callers."""
        return str(self.ca.cert_path), str(self._client_cert), str(self._client_key)

    def client_endpoints(self, names=None, running_only=False):
        chosen = names if names is not None else list(self.members)
        return [self.members[n].client_url for n in chosen
                if not running_only or self.members[n].running()]

    def client_url(self, name):
        return self.members[name].client_url

    def peer_url(self, name):
        return self.members[name].peer_url

    def member_pid(self, name):
        member = self.members[name]
        return member.process.pid if member.running() else None

    def start(self, members, timeout=30.0, attempts=3):
        """Start a new cluster. `members` are (name, ip) or (name, ip, client_port, peer_port)."""
        if self.members:
            raise EtcdError("cluster %s already started" % self.token)
        for spec in members:
            self._define_member(*spec)
        for attempt in range(attempts):
            for member in self.members.values():
                self._spawn(member, "new", self._initial_cluster(self.members.values()))
            try:
                self.wait_healthy(timeout=timeout)
                self._check_identity()
                return self
            except EtcdError:
                retry = attempt + 1 < attempts and self._lost_port_race()
                self._stop_processes(2.0)
                if not retry:
                    raise
                # Another process on the shared machine took one of our ports: pick new ones.
                for member in self.members.values():
                    shutil.rmtree(member.data_dir, ignore_errors=True)
                    if member.ports_chosen:
                        member.client_port, member.peer_port = self._free_ports(member.ip)
        return self

    def add_member(self, name, ip, client_port=None, peer_port=None, learner=False, start=True, timeout=30.0):
        """Add a member through the v3 JSON gateway, then (unless start=False) start it with
        --initial-cluster-state existing. Returns the gateway's member dict for the new member."""
        member = self._define_member(name, ip, client_port, peer_port)
        body = {"peerURLs": [member.peer_url], "isLearner": bool(learner)}
        deadline = time.monotonic() + timeout
        while True:
            try:
                answer = self._post_any("/v3/cluster/member/add", body)
                break
            except EtcdError as exc:
                # etcd refuses membership changes for ~5 s after a start or another change.
                if "unhealthy cluster" not in str(exc) or time.monotonic() > deadline:
                    del self.members[name]
                    raise
                time.sleep(0.25)
        new = answer.get("member", {})
        if start:
            named = [m for m in answer.get("members", []) if m.get("name")]
            parts = ["%s=%s" % (m["name"], url) for m in named for url in m.get("peerURLs", [])]
            parts.append("%s=%s" % (name, member.peer_url))
            self._spawn(member, "existing", ",".join(parts))
            self.wait_healthy(names=[name], timeout=timeout)
        return new

    def start_member(self, name, timeout=30.0):
        """Restart a stopped member on its existing data directory."""
        member = self.members[name]
        if member.running():
            return
        self._spawn(member, "existing", self._initial_cluster(self.members.values()))
        self.wait_healthy(names=[name], timeout=timeout)

    def stop_member(self, name, timeout=15.0):
        """SIGTERM the member and wait for it to exit (SIGKILL after `timeout`)."""
        self._terminate(self.members[name], signal.SIGTERM, timeout)

    def kill_member(self, name, timeout=15.0):
        self._terminate(self.members[name], signal.SIGKILL, timeout)

    def forget_member(self, name):
        """Stop a member (e.g. after it was removed from the cluster) and drop it from this object."""
        member = self.members.pop(name)
        self._terminate(member, signal.SIGTERM, 15.0)

    def stop(self, grace=2.0):
        """Stop every member we started (SIGTERM, SIGKILL after `grace` seconds). Idempotent.
        A leader asked to stop tries to hand leadership over first, which cannot succeed while every
        member is stopping; the short grace keeps that from costing seconds per cluster."""
        self._stop_processes(grace)
        self._session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    # ----- gateway helpers (tests use these to inspect the cluster) ------------------------------

    def post(self, endpoint, path, body=None, timeout=5.0):
        response = self._session.post(endpoint + path, json=body or {}, timeout=timeout)
        if response.status_code != 200:
            raise EtcdError("%s%s: HTTP %d %s" % (endpoint, path, response.status_code, response.text.strip()))
        return response.json()

    def health(self, name, timeout=2.0):
        """True when the member answers GET /health with health true."""
        try:
            response = self._session.get(self.members[name].client_url + "/health", timeout=timeout)
            return response.status_code == 200 and response.json().get("health") == "true"
        except (requests.RequestException, ValueError):
            return False

    def status(self, name, timeout=5.0):
        return self.post(self.members[name].client_url, "/v3/maintenance/status", timeout=timeout)

    def member_list(self, timeout=5.0):
        return self._post_any("/v3/cluster/member/list", {}, timeout=timeout).get("members", [])

    def leader_name(self, timeout=10.0):
        """Name of the current leader, waiting up to `timeout` for one to be elected."""
        deadline = time.monotonic() + timeout
        while True:
            ids = {}
            for name, member in self.members.items():
                if not member.running():
                    continue
                try:
                    status = self.status(name, timeout=2.0)
                except (requests.RequestException, EtcdError):
                    continue
                ids[int(status["header"]["member_id"])] = name
                leader = int(status.get("leader", 0))
                if leader and leader in ids:
                    return ids[leader]
            if time.monotonic() > deadline:
                raise EtcdError("no leader elected within %.0fs in cluster %s" % (timeout, self.token))
            time.sleep(0.1)

    def move_leader(self, to_name, timeout=10.0):
        """Make `to_name` the leader (transfer-leadership must be sent to the current leader)."""
        leader = self.leader_name(timeout=timeout)
        if leader == to_name:
            return
        target_id = self.status(to_name)["header"]["member_id"]
        self.post(self.members[leader].client_url, "/v3/maintenance/transfer-leadership",
                  {"targetID": target_id}, timeout=timeout)
        deadline = time.monotonic() + timeout
        while self.leader_name(timeout=timeout) != to_name:
            if time.monotonic() > deadline:
                raise EtcdError("leadership did not move to %s within %.0fs" % (to_name, timeout))
            time.sleep(0.1)

    def put(self, key, value, timeout=5.0):
        import base64

        encode = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
        return self._post_any("/v3/kv/put", {"key": encode(key), "value": encode(value)}, timeout=timeout)

    def get(self, key, timeout=5.0):
        import base64

        answer = self._post_any("/v3/kv/range", {"key": base64.b64encode(key.encode()).decode()}, timeout=timeout)
        kvs = answer.get("kvs", [])
        return base64.b64decode(kvs[0]["value"]).decode() if kvs else None

    def wait_healthy(self, names=None, timeout=30.0):
        """Wait until the named (default: all running) members report health true."""
        names = list(names if names is not None else [n for n, m in self.members.items() if m.process])
        deadline = time.monotonic() + timeout
        pending = set(names)
        while pending:
            for name in list(pending):
                member = self.members[name]
                if not member.running():
                    raise EtcdError("etcd member %s exited (code %s); log %s:\n%s" % (
                        name, member.process.returncode if member.process else None, member.log_path,
                        self._log_tail(member)))
                if self.health(name, timeout=1.0):
                    pending.discard(name)
            if not pending:
                break
            if time.monotonic() > deadline:
                raise EtcdError("etcd members %s not healthy within %.0fs" % (sorted(pending), timeout))
            time.sleep(0.1)

    # ----- internals ---------------------------------------------------------------------------

    def _free_ports(self, ip):
        host = ip if ipaddress.ip_address(ip).version == 4 else "127.0.0.1"
        while True:
            client, peer = netutil.free_port(host), netutil.free_port(host)
            if client != peer:
                return client, peer

    def _define_member(self, name, ip, client_port=None, peer_port=None):
        if name in self.members:
            raise EtcdError("member %s already defined" % name)
        chosen = client_port is None or peer_port is None
        if chosen:
            client_port, peer_port = self._free_ports(ip)
        cert, key = self.ca.issue("member-" + name, name, kind=pki.PEER, hosts=[ip, "localhost"])
        member = Member(name, ip, client_port, peer_port, self.workdir / (name + ".etcd"),
                        self.workdir / (name + ".log"), cert, key)
        member.ports_chosen = chosen
        self.members[name] = member
        return member

    @staticmethod
    def _initial_cluster(members):
        return ",".join("%s=%s" % (m.name, m.peer_url) for m in members)

    def _spawn(self, member, state, initial_cluster):
        ca = str(self.ca.cert_path)
        cmd = [
            self.etcd_binary,
            "--name", member.name,
            "--data-dir", str(member.data_dir),
            "--listen-client-urls", member.client_url,
            "--advertise-client-urls", member.client_url,
            "--listen-peer-urls", member.peer_url,
            "--initial-advertise-peer-urls", member.peer_url,
            "--initial-cluster", initial_cluster,
            "--initial-cluster-state", state,
            "--initial-cluster-token", self.token,
            "--client-cert-auth", "--trusted-ca-file", ca,
            "--cert-file", str(member.cert), "--key-file", str(member.key),
            "--peer-client-cert-auth", "--peer-trusted-ca-file", ca,
            "--peer-cert-file", str(member.cert), "--peer-key-file", str(member.key),
            "--heartbeat-interval", str(self.heartbeat_ms),
            "--election-timeout", str(self.election_ms),
            "--log-level", os.environ.get("KUBENODES_ETCD_LOG_LEVEL", "warn"),
        ]
        if self.unsafe_no_fsync:
            cmd.append("--unsafe-no-fsync")  # test clusters: durability does not matter, speed does
        log = open(member.log_path, "ab")
        try:
            member.process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                              start_new_session=True)
        finally:
            log.close()

    def _terminate(self, member, sig, timeout):
        proc = member.process
        if proc is None or proc.poll() is not None:
            return
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def _stop_processes(self, timeout=15.0):
        # Signal everyone first: stopped one by one, the last members lose quorum and linger on shutdown.
        running = [m for m in self.members.values() if m.running()]
        for member in running:
            try:
                os.kill(member.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for member in running:
            self._terminate(member, signal.SIGTERM, timeout)

    def _lost_port_race(self):
        for member in self.members.values():
            if member.ports_chosen and member.process is not None and member.process.poll() is not None:
                if b"address already in use" in member.log_path.read_bytes():
                    return True
        return False

    def _check_identity(self):
        """All members must report one cluster ID and exactly our member names: a foreign etcd on a
        reused port would otherwise go unnoticed on a shared machine."""
        cluster_ids = set()
        for name in self.members:
            cluster_ids.add(self.status(name)["header"]["cluster_id"])
        if len(cluster_ids) != 1:
            raise EtcdError("members report different cluster IDs: %s" % sorted(cluster_ids))
        names = sorted(m.get("name", "") for m in self.member_list())
        if names != sorted(self.members):
            raise EtcdError("member list %s does not match the started members %s" % (names, sorted(self.members)))

    def _post_any(self, path, body, timeout=5.0):
        """POST to the first running member that answers; raise the last error otherwise."""
        error = None
        for member in self.members.values():
            if not member.running():
                continue
            try:
                return self.post(member.client_url, path, body, timeout=timeout)
            except (requests.RequestException, EtcdError) as exc:
                error = exc
        raise EtcdError("no running member answered %s: %s" % (path, error))

    def _log_tail(self, member, lines=20):
        try:
            return "\n".join(member.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
