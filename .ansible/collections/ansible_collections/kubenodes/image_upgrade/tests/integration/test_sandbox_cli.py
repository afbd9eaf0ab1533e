"""`python -m sandbox up | status | down | seed` as users run them: real processes, clear errors, and
nothing left behind."""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest
from kubernetes import client

from sandbox import binaries, cli, controlplane

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
REPO = pathlib.Path(__file__).resolve().parents[2]


def run_cli(state_dir, *args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "sandbox", "--state-dir", str(state_dir)] + list(args),
                          cwd=str(REPO), capture_output=True, text=True, timeout=timeout, check=False,
                          env=dict(os.environ, **(env or {})))


def _eventually(check, timeout=30):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition still false after %ss" % timeout
        time.sleep(0.3)


def _alive(pid):
    return controlplane.pid_alive(pid)


def test_up_status_down_leaves_nothing_behind(tmp_path):
    state_dir = tmp_path / "sb"
    up = run_cli(state_dir, "up", "--clouds", "none")
    try:
        assert up.returncode == 0, up.stderr
        assert "kube-apiserver" in up.stdout and "sandbox up in" in up.stdout
        state = json.loads((state_dir / "state.json").read_text())
        pids = dict(state["pids"])
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "nodesim"}
        assert all(_alive(pid) for pid in pids.values())
        assert state["apiserver"] == "https://127.0.0.1:%d" % state["ports"]["apiserver"]
        status = run_cli(state_dir, "status")
        assert status.returncode == 0, status.stdout + status.stderr
        assert json.loads(status.stdout)["running"] is True
        # The kubeconfig works for kubectl, the client users reach for first.
        kubectl = subprocess.run([str(binaries.path_of("kubectl")), "--kubeconfig", state["kubeconfig"],
                                  "get", "namespaces", "-o", "name"], capture_output=True, text=True, timeout=30,
                                 check=False)
        assert kubectl.returncode == 0, kubectl.stderr
        assert "namespace/kube-system" in kubectl.stdout
        # A second `up` on a running sandbox refuses instead of starting a second one.
        again = run_cli(state_dir, "up", "--clouds", "none")
        assert again.returncode == 1
        assert "already runs" in again.stderr
    finally:
        down = run_cli(state_dir, "down")
    assert down.returncode == 0, down.stderr
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [name for name, pid in pids.items() if _alive(pid)]
    assert not _processes_mentioning(str(state_dir))
    # idempotent
    second = run_cli(state_dir, "down")
    assert second.returncode == 0
    assert "nothing to stop" in second.stdout
    status = run_cli(state_dir, "status")
    assert status.returncode == 3
    assert json.loads(status.stdout)["running"] is False


def test_crashed_component_is_reported_and_up_refuses_until_down(tmp_path):
    state_dir = tmp_path / "sb"
    handle = cli.Sandbox.start(state_dir, clouds=[], say=lambda *_: None)
    try:
        pid = handle.state["pids"]["kube-scheduler"]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        status = run_cli(state_dir, "status")
        assert status.returncode == 3
        report = json.loads(status.stdout)
        assert report["components"]["kube-scheduler"] == "NOT RUNNING"
        assert "kube-scheduler" in report["crashed"]
        assert report["components"]["kube-apiserver"].startswith("running")
        up = run_cli(state_dir, "up", "--clouds", "none")
        assert up.returncode == 1
        assert "partly running" in up.stderr and "kube-scheduler" in up.stderr
    finally:
        handle.stop()
    assert not any(_alive(p) for p in handle.state["pids"].values())


def test_stale_state_file_is_reported_and_replaced(tmp_path):
    state_dir = tmp_path / "sb"
    state_dir.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = {"pids": {"kube-apiserver": gone.pid}, "cmd_hints": {"kube-apiserver": "kube-apiserver"}}
    (state_dir / "state.json").write_text(json.dumps(stale))
    up = run_cli(state_dir, "up", "--clouds", "none")
    try:
        assert up.returncode == 0, up.stderr
        assert "stale state file" in up.stdout
    finally:
        assert run_cli(state_dir, "down").returncode == 0


def test_missing_binaries_say_run_make_setup(tmp_path):
    result = run_cli(tmp_path / "sb", "up", "--clouds", "none",
                     env={"KUBENODES_SANDBOX_CACHE": str(tmp_path / "empty-cache")})
    assert result.returncode == 1
    assert "make setup" in result.stderr
    assert not (tmp_path / "sb" / "state.json").exists()


def test_busy_port_gives_a_clear_error_and_leaves_nothing_running(tmp_path, monkeypatch):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    busy = holder.getsockname()[1]
    real_claim = controlplane._claim_ports
    monkeypatch.setattr(controlplane, "_claim_ports", lambda n: [busy] + real_claim(n - 1))
    try:
        with pytest.raises(controlplane.SandboxError, match="port %d on 127.0.0.1 is busy" % busy):
            cli.up(tmp_path / "sb", clouds=[], say=lambda *_: None)
    finally:
        holder.close()
    state = json.loads((tmp_path / "sb" / "state.json").read_text())
    assert not state["pids"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_seed_through_a_cloud_emulator(fresh_sandbox):
    clouds = cli.available_clouds()
    if "gcp" not in clouds:
        pytest.skip("the gcp emulator is not available in this checkout")
    handle = fresh_sandbox(clouds=["gcp"])
    result = run_cli(handle.state_dir, "seed", "--cloud", "gcp", "--control-planes", "1", "--workers", "3",
                     "--groups", "2", "--timeout", "180", timeout=240)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout[result.stdout.index("{"):])
    assert [g["size"] for g in summary["groups"]] == [1, 2, 1]
    core = handle.core_v1()
    nodes = core.list_node().items
    assert len(nodes) == 4
    assert all(n.spec.provider_id.startswith("gce://") for n in nodes)
    cps = [n for n in nodes if "node-role.kubernetes.io/control-plane" in n.metadata.labels]
    assert len(cps) == 1
    assert list(handle.cp_etcd()["members"]) == [cps[0].metadata.name]
    # the workloads a drain needs (controllers publish their status a moment after the pods run)
    apps = client.AppsV1Api(handle.api_client())
    _eventually(lambda: apps.read_namespaced_deployment("cluster-autoscaler", "kube-system").status.ready_replicas == 1)
    _eventually(lambda: apps.read_namespaced_daemon_set("node-agent", "workloads").status.number_ready == 4)
    _eventually(lambda: apps.read_namespaced_stateful_set("db", "workloads").status.ready_replicas == 3)
    pdbs = client.PolicyV1Api(handle.api_client()).list_namespaced_pod_disruption_budget("workloads").items
    assert {p.metadata.name: p.spec.min_available for p in pdbs} == {"web-0": 3, "web-1": 3, "web-2": 3, "db": 2}
    bare = core.read_namespaced_pod("debug-0", "workloads")
    assert not bare.metadata.owner_references and bare.status.phase == "Running"


def test_down_stops_control_plane_etcd_members_even_after_the_simulator_was_killed(tmp_path):
    handle = cli.Sandbox.start(tmp_path / "sb", clouds=[], say=lambda *_: None)
    try:
        handle.nodesim.create_instance("sim://cp/cp-k", "cp-k", group_id="cp", image="i", role="control-plane")
        handle.wait_nodes_ready(["cp-k"], timeout=60)
        member_pid = handle.cp_etcd()["members"]["cp-k"]["pid"]
        assert _alive(member_pid)
        os.kill(handle.state["pids"]["nodesim"], signal.SIGKILL)
    finally:
        result = run_cli(handle.state_dir, "down")
    assert result.returncode == 0, result.stderr
    assert "control-plane etcd member cp-k" in result.stdout
    deadline = time.monotonic() + 10
    while _alive(member_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(member_pid)
    assert not [n for n, pid in handle.state["pids"].items() if _alive(pid)]


def test_sandbox_of_a_killed_owner_stops_by_itself(tmp_path):
    state_dir = tmp_path / "sb"
    # An owner that starts a sandbox and dies without any clean-up, like a pytest killed by CI.
    script = ("import os, sys; from sandbox import cli; "
              "cli.up(sys.argv[1], clouds=[], say=lambda *_: None, owner_pid=os.getpid()); os._exit(0)")
    owner = subprocess.run([sys.executable, "-c", script, str(state_dir)], cwd=str(REPO), capture_output=True,
                           text=True, timeout=120, check=False)
    assert owner.returncode == 0, owner.stderr
    pids = json.loads((state_dir / "state.json").read_text())["pids"]
    assert "reaper" in pids and "kube-apiserver" in pids
    deadline = time.monotonic() + 60
    while [p for p in pids.values() if _alive(p)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [name for name, pid in pids.items() if _alive(pid)]
    assert "owner" in (state_dir / "logs" / "reaper.log").read_text()
    assert not _processes_mentioning(str(state_dir))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_demo_without_the_job_shows_a_ready_cluster_and_stops(tmp_path):
    state_dir = tmp_path / "demo"
    result = subprocess.run([sys.executable, "-m", "sandbox.demo", "--no-upgrade", "--cloud", "none",
                             "--state-dir", str(state_dir)], cwd=str(REPO), capture_output=True, text=True,
                            timeout=280, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    table = [line.split() for line in result.stdout.splitlines() if line.startswith(("control-plane-", "worker-"))]
    assert len(table) == 9
    assert all(row[1] == "Ready" for row in table)
    assert sum(1 for row in table if row[2] == "control-plane") == 3
    assert "demo finished" in result.stdout
    pids = json.loads((state_dir / "state.json").read_text())["pids"]
    assert pids == {}  # down ran and recorded it
    assert not _processes_mentioning(str(state_dir))


def _processes_mentioning(text):
    found = []
    for proc in pathlib.Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline and _alive(int(proc.name)):
                found.append(cmdline)
    return found
