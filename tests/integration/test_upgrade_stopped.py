"""End to end, issue 28 item 5: a stop from outside is obeyed. One upgrade on the sandbox (GCP, 3 workers in one
group, the role as a least-privilege ServiceAccount) is stopped three times while a slice runs, each time as
someone really stops a job:

- Ctrl-C at a terminal: SIGINT to ansible-playbook's process group (the worker is in a session of its own);
- SIGTERM to ansible-playbook alone (a supervisor, `kill PID`);
- SIGKILL of ansible-playbook's process group (ansible-runner when AWX cancels a job; a hurried operator): the
  worker is not signalled at all and must notice that its parent is gone.

Each time, within seconds, no process of the run is left; the cluster-autoscaler has its replicas back, the run
lock is free, and the journal (through the report written at the stop) says the attempt was stopped and why; no
group ever had fewer Ready nodes than at the start, nor more instances than the surge allows. A fourth run
finishes the upgrade, and the report counts three stopped attempts and one done."""

import json
import os
import pathlib
import signal
import time

import pytest

import upgrade_helpers as uh

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 600
STOP_SECONDS = 30   # from the signal to the last process of the run gone (the run's own end takes ~1 s of API calls)


def autoscaler_replicas(handle):
    deployment = handle.kube().request("GET", "/apis/apps/v1/namespaces/kube-system/deployments/cluster-autoscaler")
    return deployment["spec"]["replicas"]


def report(values):
    return json.loads((pathlib.Path(values["rolling_upgrade_report_dir"]) / "image-upgrade-report.json").read_text())


def stop_in_a_slice(handle, values, tmp_path, name, send, watcher=None):
    """Start a run, wait until a slice works (a progress line, the autoscaler paused; with `watcher`, a heir
    created), stop it with send(run), and wait until none of its processes is left. Returns (run, seconds)."""
    run = uh.PlaybookRun(values, tmp_path / ("%s.log" % name))
    try:
        began = time.monotonic()
        assert run.wait_for(lambda out: uh.PROGRESS.search(out) and autoscaler_replicas(handle) == 0, 240,
                            "a slice of run %s" % name), run.output()[-4000:]
        if watcher is not None:
            assert watcher.wait_event(("instance-created",), began, 120), "run %s created no heir" % name
        assert autoscaler_replicas(handle) == 0, "the run did not pause the autoscaler"
        sent = time.monotonic()
        send(run)
        while run.processes() and time.monotonic() - sent < STOP_SECONDS + 30:
            time.sleep(0.2)
        took = time.monotonic() - sent
        left = run.processes()
        assert not left, "run %s still had processes %.0f s after the stop: %s\n%s" % (
            name, took, left, run.output()[-4000:])
        assert took < STOP_SECONDS, "run %s took %.1f s to stop" % (name, took)
        run.proc.wait(timeout=10)
        return run, took
    finally:
        run.close()


def settings_put_back_or_held(values, name):
    """What a run's end did with the cloud setting it changed: put back, or, when the zones are more than one VM apart
    (GCE would delete one at once), left as the run set it with the reason in the report."""
    rows = report(values)["cloud_settings"]
    now = uh.group_settings(values)
    assert [r["setting"] for r in rows] == ["updatePolicy.instanceRedistributionType"], (name, rows)
    for row in rows:
        if row["held"]:
            assert "more than one instance apart" in row["held"] and now[row["group"]][row["setting"]] == "NONE", (name, row)
        else:
            assert row["restored"] and now[row["group"]][row["setting"]] == "PROACTIVE", (name, row, now)
    print("run %s: %s" % (name, ["held: " + r["held"] if r["held"] else "restored" for r in rows]))


@pytest.mark.timeout(1200)
def test_ctrl_c_sigterm_and_the_death_of_the_playbook_each_stop_the_run_at_a_safe_point(upgrade_cluster, tmp_path):
    # A regional worker group: its proactive redistribution is set to NONE for each run (docs/cloud-settings.md).
    handle, values, start = upgrade_cluster("gcp", control_planes=1, workers=3, groups=1,
                                            worker_group_options={"region": "us-central1"})
    upgraded = uh.limit_to_groups(values, start, ["workers-0"])
    assert start["autoscaler_replicas"] > 0
    watcher = uh.Watcher(handle)
    watcher.start()
    stops = [
        ("ctrl-c", lambda run: os.killpg(run.proc.pid, signal.SIGINT), "SIGINT received"),
        ("sigterm", lambda run: os.kill(run.proc.pid, signal.SIGTERM), "SIGTERM received"),
        ("awx-cancel", lambda run: os.killpg(run.proc.pid, signal.SIGKILL), "the playbook process (PID %d) is gone"),
    ]
    try:
        for index, (name, send, cause) in enumerate(stops, 1):
            # The first stop comes with a heir in flight; the others wherever the resumed run is.
            run, took = stop_in_a_slice(handle, values, tmp_path, name, send, watcher if index == 1 else None)
            attempts = report(values)["attempts"]
            assert len(attempts) == index and attempts[-1]["outcome"] == "stopped", (attempts, run.output()[-3000:])
            expected = cause % run.proc.pid if "%d" in cause else cause
            assert attempts[-1]["cause"] == "stopped from outside: %s" % expected, attempts[-1]
            assert autoscaler_replicas(handle) == start["autoscaler_replicas"], "run %s left the autoscaler paused" % name
            assert not uh.lease_holder(handle), "run %s kept the run lock" % name
            settings_put_back_or_held(values, name)
            if name == "ctrl-c":
                assert "User interrupted execution" in run.output(), run.output()[-3000:]
            print("run %s stopped in %.1f s" % (name, took))
        rc, output = uh.run_upgrade(values, tmp_path / "finish.log", timeout=RUN_TIMEOUT)
    finally:
        watcher.stop()
    assert rc == 0, output[-6000:]
    watcher.check(start, max_surge=1)
    uh.assert_upgraded(handle, values, start, groups=upgraded)
    outcomes = [a["outcome"] for a in report(values)["attempts"]]
    assert outcomes == ["stopped", "stopped", "stopped", "done"], outcomes
    settings_put_back_or_held(values, "finish")
