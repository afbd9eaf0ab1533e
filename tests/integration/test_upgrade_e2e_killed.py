"""End to end, issues #8 and #13: an upgrade killed again and again, each time with its whole process tree
(the playbook, the workers ansible-core detaches with setsid() and anything they run), at every destructive step,
and started again, finishes the job from what the cluster and the cloud show, with nothing lost and nothing
created twice. 1 control plane and 2 workers in 2 worker groups (3 replacements), the role authenticating as a
ServiceAccount bound only to the role's rbac.yml. The step engine drains, removes the etcd member and deletes
within one pass in a second or so, which no watcher could hit step by step: it is held (hold_points) right after
each kind of destructive call and before it recorded it, and killed there; the executor's property tests kill it
at every step in memory (test_executor_worlds).

The first kill begins as the old, incomplete one (the playbook's process group only) while the worker running
upgrade_step (it creates heirs in-process) is frozen: the run lock must see that run as alive while its orphaned
worker lives, and free once it is gone."""

import json
import os
import pathlib
import signal
import time

import pytest

import upgrade_helpers as uh
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import cloud_settings, hold_points
from tests.ansible_run import run_module

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 600
LOCK = "kube-system/kubenodes-image-upgrade"


def lock_module(values, **args):
    return run_module("upgrade_lock", dict(values["rolling_upgrade_kube"], **args))


def step_worker(run):
    """The worker of this run that runs the upgrade_step task: a fork of ansible-playbook (same command line,
    its own session after setsid()), not a module; or None."""
    playbook = run.processes().get(run.proc.pid)
    for proc in run.processes().values():
        if (playbook and proc["pid"] != run.proc.pid and proc["ppid"] == run.proc.pid
                and proc["cmdline"] == playbook["cmdline"]):
            return proc
    return None


def orphaned_module_keeps_the_lock(handle, values, run, module):
    """Freeze `module` (a process of `run`) and kill only the playbook's process group, the incomplete kill:
    another run must not take the Lease while the orphaned worker and module live, and must take it at once
    when the rest of the tree is killed too. Returns the processes that kill found."""
    os.kill(module["pid"], signal.SIGSTOP)
    holder = uh.lease_holder(handle)
    run.kill_playbook_only()
    orphans = run.processes()
    # A module lives on with its setsid() worker; the step engine's worker alone (between module calls).
    least = 2 if uh.ANSIBALLZ.search(module["cmdline"]) else 1
    assert module["pid"] in orphans and len(orphans) >= least, (
        "expected the module and its setsid() worker to outlive the playbook's process group: %s" % orphans)
    blocked = lock_module(values)
    assert blocked["failed"] and not blocked["acquired"], blocked
    assert holder in blocked["msg"] and str(module["pid"]) in blocked["msg"], blocked["msg"]
    assert uh.lease_holder(handle) == holder
    killed = run.kill()
    assert module["pid"] in {pid for pid, _cmdline in killed} and len(killed) >= least, killed
    taken = lock_module(values)
    assert taken["acquired"] and taken["action"] == "take-over", taken
    released = lock_module(values, holder=taken["holder"], state="absent")
    assert released["action"] == "release", released
    return killed


@pytest.mark.timeout(900)
def test_step_engine_killed_while_it_creates_heirs_keeps_the_lock_and_resumes(upgrade_cluster, tmp_path):
    """The step engine's worker (it creates heirs in-process, no module under it) frozen just after the first
    heir was created, the playbook's process group killed: the orphaned worker keeps the run lock until it is
    killed too; a new run then takes the lock at once and finishes, creating nothing twice."""
    handle, values, start = upgrade_cluster("gcp")
    watcher = uh.Watcher(handle, etcd=True)
    watcher.start()
    try:
        run = uh.PlaybookRun(values, tmp_path / "killed.log")
        began = time.monotonic()
        try:
            worker = None
            while worker is None and run.proc.poll() is None and time.monotonic() < began + RUN_TIMEOUT:
                if watcher.seen({"instance-created"}, began):
                    worker = step_worker(run)
                time.sleep(0.1)
            assert worker, "no upgrade_step worker created a heir:\n" + run.output()[-4000:]
            orphaned_module_keeps_the_lock(handle, values, run, worker)
        finally:
            run.kill()
        run.assert_no_secret_in_output()
        # The killed run left its PreferNoSchedule taint on the nodes still to replace (issue 23): the next run's
        # passes take it off every node that stays, its end off the rest.
        left_tainted = uh.replacing_tainted(handle)
        rc, output = uh.run_upgrade(values, tmp_path / "final.log", timeout=RUN_TIMEOUT)
    finally:
        watcher.stop()
    assert rc == 0, output[-6000:]
    assert "another upgrade run holds" not in output
    watcher.check(start, max_surge=1)
    uh.assert_upgraded(handle, values, start, report=True)
    assert uh.lease_holder(handle) is None, "the run lock was not released"
    summary = json.loads((pathlib.Path(values["rolling_upgrade_report_dir"]) / "image-upgrade-report.json").read_text())
    assert [a["outcome"] for a in summary["attempts"]] == ["killed", "done"], summary["attempts"]
    assert set(left_tainted) == set(start["node_names"]) and not uh.replacing_tainted(handle), left_tainted
    created = [i for i in handle.nodesim.instances() if i["provider_id"] not in start["known_instances"]]
    assert len(created) == len(start["node_names"]), sorted((i["node_name"], i["state"]) for i in created)


# The step engine's destructive steps (hold_points.POINTS, in the order an upgrade reaches them) and the
# watcher's events that show the call held at had its effect (none for set-group-image: the groups' image is
# the cloud's, which the watcher does not read).
HELD_EFFECT = {
    "set-group-image": set(),
    "create": {"instance-created"},
    "drain": {"cordon", "eviction"},
    "etcd-remove": {"etcd-removal"},
    "delete-instance": {"instance-deletion"},
    "delete-node": {"node-deletion"},
}
HOLD_WAIT = 300


def wait_for_hold(run, hold_file, point, timeout):
    """The pid of the process that holds at `point` of `run` (the line it appended to `hold_file`); fails with
    the run's output tail when the run ends or `timeout` passes first."""
    deadline = time.monotonic() + timeout
    while True:
        ended = run.proc.poll() is not None      # read the file after this, so a line written before the end counts
        lines = hold_file.read_text().splitlines() if hold_file.exists() else []
        if lines:
            assert len(lines) == 1 and lines[0].split()[0] == point, "held elsewhere than at %s: %s" % (point, lines)
            return int(lines[0].split()[1])
        assert not ended, "the run ended (rc %s) without holding at %s; output tail:\n%s" % (
            run.proc.returncode, point, run.output()[-4000:])
        assert time.monotonic() < deadline, "the run did not hold at %s within %ss; output tail:\n%s" % (
            point, timeout, run.output()[-4000:])
        time.sleep(0.1)


# The step engine (the role's default), killed whole at each of its destructive steps exactly: each run is held
# (hold_points) right after its first call of one kind that changed the cluster or the cloud and before it
# recorded it, and killed there; the next run holds at the next kind. With 1 control plane and 2 workers the
# control plane is replaced first (the workers wait for it), so the first round, POINTS in order, meets each
# step on it: a run holds at the first call of its kind, so none gets past a step of the next kind, and what the
# killed runs leave undone always includes one (its group is set before any heir; its heir is created before
# it is drained; it is drained before its etcd member is removed, and that before its instance is deleted; its
# Node outlives its instance). The second round meets the workers' steps (no etcd member: drained, their
# instances deleted, their Nodes deleted), its first run also promoting the control plane's heir over the
# donor the run before deleted. Then one run without holds finishes.
HELD_SEQUENCE = hold_points.POINTS + ("create", "drain", "delete-instance", "delete-node")


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("cloud", ["gcp", "azure", "aws"])
def test_step_engine_held_and_killed_at_every_destructive_step_and_resumed(upgrade_cluster, cloud, tmp_path):
    # GCE's worker groups regional: their proactive redistribution is neutralised too (cloud_settings.py).
    handle, values, start = upgrade_cluster(cloud, worker_group_options={"region": "us-central1"} if cloud == "gcp" else None)
    settings = uh.group_settings(values)
    killed_with = None   # the cloud settings as the first killed run left them
    watcher = uh.Watcher(handle, etcd=True)
    watcher.start()
    kills = []
    try:
        for attempt, point in enumerate(HELD_SEQUENCE):
            hold_file = tmp_path / ("hold-%d-%s" % (attempt, point))
            run = uh.PlaybookRun(values, tmp_path / ("killed-%d-%s.log" % (attempt, point)),
                                 env={hold_points.ENV_POINTS: point, hold_points.ENV_FILE: str(hold_file)})
            began = time.monotonic()
            try:
                holder = wait_for_hold(run, hold_file, point, HOLD_WAIT)
                reached = time.monotonic() - began
                # The destructive call held after took effect before the kill (the watcher polls every 0.5 s).
                effect = watcher.wait_event(HELD_EFFECT[point], began, 10) if HELD_EFFECT[point] else None
                assert effect or not HELD_EFFECT[point], "held at %s but the watcher saw none of %s" % (
                    point, sorted(HELD_EFFECT[point]))
                killed = run.kill()
                assert not run.processes(), "processes of the killed run live on: %s" % run.processes()
                assert holder in {pid for pid, _cmdline in killed}, (
                    "the process that held at %s (pid %d) was not among the killed: %s" % (point, holder, killed))
                passes = [line for line in run.output().splitlines() if line.startswith("pass ")]
                kills.append((point, round(reached, 1), effect and "%s of %s" % effect[1:], len(killed),
                              passes[-1] if passes else "in its first pass"))
            finally:
                run.kill()
            killed_with = killed_with or uh.group_settings(values)
            run.assert_no_secret_in_output()
            # The run before was killed whole: this one took the lock at once, never waited for it.
            assert "another upgrade run holds" not in run.output(), run.output()[-3000:]
        rc, output = uh.run_upgrade(values, tmp_path / "final.log", timeout=RUN_TIMEOUT)
    finally:
        watcher.stop()
    print("kills (point, seconds to reach it, what the watcher saw, processes killed, last progress line):")
    for kill in kills:
        print("  ", kill)
    assert rc == 0, output[-6000:]
    assert "another upgrade run holds" not in output
    assert [k[0] for k in kills] == list(HELD_SEQUENCE), kills
    watcher.check(start, max_surge=1)
    uh.assert_upgraded(handle, values, start, report=True)
    assert uh.lease_holder(handle) is None, "the run lock was not released"
    # The report covers the whole upgrade: every killed attempt, the one that finished, all their passes.
    summary = json.loads((pathlib.Path(values["rolling_upgrade_report_dir"]) / "image-upgrade-report.json").read_text())
    outcomes = [a["outcome"] for a in summary["attempts"]]
    assert outcomes[-1] == "done" and outcomes.count("killed") >= len(kills), (outcomes, kills)
    assert summary["passes"] == sum(a["passes"] for a in summary["attempts"])
    # The first run neutralised the cloud settings before its first change and was killed; the run that finished
    # restored them from the journal.
    rows = uh.assert_settings_restored(values, settings)
    # GCE: the two regional worker groups' redistribution; AWS: each of the 3 groups' four scaling processes
    # (AZRebalance, AlarmNotification, ScheduledActions, ReplaceUnhealthy); Azure: the two Uniform worker sets'
    # overprovision (the seeding leaves it unset, on as in ARM; the Manual policy and the control plane's need nothing).
    assert len(rows) == {"gcp": 2, "aws": 3 * len(cloud_settings.AWS_PROCESSES), "azure": 2}[cloud], rows
    assert all(killed_with[r["group"]][r["setting"]] == r["neutral"] != r["original"] for r in rows), (killed_with, rows)
    # Not "more passes than the last attempt's": upgrade_step journals a slice's passes when
    # the slice ends, and every run here is killed inside its first slice, so the killed attempts count 0 passes.
    assert summary["attempts"][-1]["passes"] > 0, summary["attempts"]
    # Nothing was created twice: exactly one new instance per replaced node ever existed.
    created = [i for i in handle.nodesim.instances() if i["provider_id"] not in start["known_instances"]]
    assert len(created) == len(start["node_names"]), sorted((i["node_name"], i["state"]) for i in created)
