import datetime

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import run_lock

NOW = datetime.datetime(2026, 11, 30, 12, 0, 0, tzinfo=datetime.timezone.utc)


def spec(holder, renewed_seconds_ago, duration=300):
    renewed = NOW - datetime.timedelta(seconds=renewed_seconds_ago)
    return {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": run_lock.format_time(renewed)}


def alive(_holder):
    return False


def test_absent_or_released_lease_is_acquired():
    assert run_lock.decide(None, "me", NOW)[0] == run_lock.ACQUIRE
    assert run_lock.decide({"holderIdentity": None}, "me", NOW)[0] == run_lock.ACQUIRE
    assert run_lock.decide({"holderIdentity": ""}, "me", NOW)[0] == run_lock.ACQUIRE


def test_own_lease_is_renewed_even_when_expired():
    assert run_lock.decide(spec("me", 10), "me", NOW, is_dead=alive)[0] == run_lock.RENEW
    assert run_lock.decide(spec("me", 1000), "me", NOW, is_dead=alive)[0] == run_lock.RENEW


def test_live_foreign_lease_makes_us_wait_until_it_expires():
    action, expires = run_lock.decide(spec("other", 100), "me", NOW, is_dead=alive)
    assert action == run_lock.WAIT
    assert expires == NOW + datetime.timedelta(seconds=200)


def test_expired_foreign_lease_is_taken_over():
    assert run_lock.decide(spec("other", 301), "me", NOW, is_dead=alive)[0] == run_lock.TAKE_OVER


def test_foreign_lease_of_a_dead_local_run_is_taken_over_before_expiry():
    assert run_lock.decide(spec("other", 5), "me", NOW, is_dead=lambda h: True)[0] == run_lock.TAKE_OVER


def proc(pid, ppid=1, start=6000, fingerprint=None, run=None, state="S"):
    return {"pid": pid, "ppid": ppid, "sid": pid, "start": start, "state": state, "fingerprint": fingerprint, "run": run}


HOLDER = "h1/100/5000/f00d"


def dead(holder, processes, own=()):
    return run_lock.holder_is_dead_local_run(holder, "h1", processes=processes, own=own)


def test_a_run_lives_while_its_playbook_lives():
    assert dead(HOLDER, [proc(100, start=5000)]) is False
    assert dead("h1/100/5000", [proc(100, start=5000)]) is False        # the older form, without fingerprint
    assert dead(HOLDER, [proc(100, start=4000)]) is True                # PID reused by another process
    assert dead(HOLDER, []) is True                                     # every process gone
    assert dead(HOLDER, [proc(100, start=5000, state="Z")]) is True     # a zombie cannot act


def test_a_run_lives_while_a_worker_it_forked_lives_after_the_playbook_died():
    # ansible-core forks workers (same command line and environment: the same fingerprint) that call
    # os.setsid(); killed with its process group, the playbook leaves them re-parented to PID 1.
    assert dead(HOLDER, [proc(300, ppid=1, start=5100, fingerprint="f00d")]) is False
    # A process with that fingerprint started before the playbook is not one of its workers.
    assert dead(HOLDER, [proc(300, ppid=1, start=4900, fingerprint="f00d")]) is True
    assert dead(HOLDER, [proc(300, ppid=1, start=5100, fingerprint="beef")]) is True


def test_a_run_lives_while_one_of_its_modules_lives_even_when_stopped():
    module = proc(400, ppid=1, start=5200, fingerprint="cafe", run=HOLDER, state="T")
    assert dead(HOLDER, [module]) is False
    assert dead(HOLDER, [dict(module, run="h1/999/1/f00d")]) is True
    # A child of a module (the command it runs) keeps the run alive too, through its parent.
    assert dead(HOLDER, [module, proc(401, ppid=400, start=5300)]) is False
    assert run_lock.run_processes(HOLDER, [module, proc(401, ppid=400, start=5300), proc(402, start=5300)]) == [400, 401]


def test_the_asking_run_is_never_evidence_of_the_holder():
    """A rerun of the same command has the same fingerprint: its own playbook and workers must not make the
    killed run look alive (else it would wait for itself until the Lease expires)."""
    table = [proc(10, ppid=1, start=100), proc(500, ppid=10, start=7000, fingerprint="f00d"),
             proc(501, ppid=500, start=7100, fingerprint="f00d"), proc(502, ppid=501, start=7200)]
    own = run_lock.own_run_pids(table, playbook_pid=500, own_pid=502)
    assert own == {500, 501, 502}
    assert dead(HOLDER, table, own=own) is True
    assert dead(HOLDER, table + [proc(300, ppid=1, start=5100, fingerprint="f00d")], own=own) is False


def test_holders_of_another_host_or_form_are_never_judged_dead():
    assert run_lock.holder_is_dead_local_run("h2/200/4000/f00d", "h1", processes=[]) is False
    assert run_lock.holder_is_dead_local_run("awx-job-42", "h1", processes=[]) is False
    assert run_lock.holder_is_dead_local_run("h1/x/y", "h1", processes=[]) is False
    assert run_lock.parse_holder("h1/100/5000/-") == ("h1", 100, 5000, None)
    assert run_lock.parse_holder("h1/100/5000/f00d") == ("h1", 100, 5000, "f00d")
    assert run_lock.parse_holder("a/b/c/d/e") is None


def test_an_orphaned_setsid_worker_of_a_killed_playbook_keeps_its_run_alive(tmp_path):
    """Real processes: a 'playbook' forks a 'worker' that calls setsid (as ansible-core's does); the
    playbook is SIGKILLed. The holder stays live until the worker ends."""
    import os
    import signal
    import subprocess
    import sys
    import time

    ready = tmp_path / "worker.pid"
    script = ("import os, time\n"
              "pid = os.fork()\n"
              "if pid == 0:\n"
              "    os.setsid()\n"
              "    open(%r, 'w').write(str(os.getpid()))\n"
              "    time.sleep(120)\n"
              "    os._exit(0)\n"
              "time.sleep(120)\n" % str(ready))
    playbook = subprocess.Popen([sys.executable, "-c", script])
    worker = None
    try:
        deadline = time.monotonic() + 30
        while not (ready.exists() and ready.read_text()):
            assert time.monotonic() < deadline, "the worker did not start"
            time.sleep(0.05)
        worker = int(ready.read_text())
        me = run_lock.read_process(playbook.pid)
        holder = "%s/%d/%d/%s" % (run_lock.socket.gethostname(), playbook.pid, me["start"], me["fingerprint"])
        assert run_lock.read_process(worker)["fingerprint"] == me["fingerprint"]
        assert run_lock.local_run_processes(holder) == sorted([playbook.pid, worker])
        os.kill(playbook.pid, signal.SIGKILL)
        playbook.wait(timeout=30)
        assert run_lock.local_run_processes(holder) == [worker]
        assert not run_lock.holder_is_dead_local_run(holder)
        os.kill(worker, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while run_lock.read_process(worker) and run_lock.read_process(worker)["state"] not in ("Z", "X"):
            assert time.monotonic() < deadline, "the worker did not die"
            time.sleep(0.05)
        assert run_lock.holder_is_dead_local_run(holder)
    finally:
        for pid in (playbook.pid, worker):
            try:
                os.kill(pid, signal.SIGKILL) if pid else None
            except ProcessLookupError:
                pass
        playbook.wait(timeout=30)


def test_default_holder_names_this_host_and_a_live_process():
    holder = run_lock.default_holder()
    host, pid, _ticks, fingerprint = run_lock.parse_holder(holder)
    assert host == run_lock.socket.gethostname() and fingerprint
    assert pid in run_lock.run_processes(holder, run_lock.process_table())


def test_holder_pid_is_the_topmost_playbook_process_not_a_per_task_worker(tmp_path):
    """ansible-playbook forks a worker per task with the same command line; the Lease must name the
    playbook process itself, or the worker's exit makes a live run look dead to a second run."""
    import os
    import subprocess
    import sys

    link = tmp_path / "ansible-playbook"
    os.symlink(sys.executable, link)
    module = run_lock.__file__
    inner = ("import importlib.util as u; s = u.spec_from_file_location('rl', %r); m = u.module_from_spec(s); "
             "s.loader.exec_module(m); print(m._ancestor_playbook_pid())" % module)
    # The "playbook" forks a "worker" (same command line), which runs the "module" (another program).
    outer = ("import os, subprocess, sys\n"
             "pid = os.fork()\n"
             "if pid == 0:\n"
             "    out = subprocess.run([%r, '-c', %r], capture_output=True, text=True, timeout=60).stdout\n"
             "    print('worker', os.getpid(), 'found', out.strip(), flush=True)\n"
             "    os._exit(0)\n"
             "os.waitpid(pid, 0)\n"
             "print('playbook', os.getpid(), flush=True)\n" % (sys.executable, inner))
    proc = subprocess.run([str(link), "-c", outer], capture_output=True, text=True, timeout=120, check=True)
    words = proc.stdout.split()
    playbook_pid = words[words.index("playbook") + 1]
    worker_pid = words[words.index("worker") + 1]
    found = words[words.index("found") + 1]
    assert worker_pid != playbook_pid
    assert found == playbook_pid, proc.stdout


def untimed(holder="other", **fields):
    return dict({"holderIdentity": holder, "leaseDurationSeconds": 300}, **fields)


def test_a_foreign_lease_with_no_readable_time_is_held_until_watched_unchanged_for_its_duration():
    """Issue 28 item 6: taken over at once before; now held until provably stale."""
    for lease_spec in (untimed(), untimed(renewTime="yesterday"), untimed(acquireTime=12, renewTime=None)):
        # Never watched: held, with no end known.
        assert run_lock.decide(lease_spec, "me", NOW, is_dead=alive) == (run_lock.WAIT, None)
        # Watched unchanged for less than its duration: held until the duration is up.
        since = NOW - datetime.timedelta(seconds=299)
        assert run_lock.decide(lease_spec, "me", NOW, is_dead=alive, watched_since=since) == (
            run_lock.WAIT, since + datetime.timedelta(seconds=300))
        # For its whole duration: provably stale.
        since = NOW - datetime.timedelta(seconds=300)
        assert run_lock.decide(lease_spec, "me", NOW, is_dead=alive, watched_since=since)[0] == run_lock.TAKE_OVER
    # A readable renew time decides, whatever was watched.
    assert run_lock.decide(spec("other", 100), "me", NOW, is_dead=alive, watched_since=NOW - datetime.timedelta(days=1))[0] \
        == run_lock.WAIT
    # A dead run of this host is stale at once, timed or not.
    assert run_lock.decide(untimed(), "me", NOW, is_dead=lambda h: True)[0] == run_lock.TAKE_OVER


def test_a_lease_with_no_duration_lasts_the_asking_runs_duration():
    no_duration = {"holderIdentity": "other", "renewTime": run_lock.format_time(NOW - datetime.timedelta(seconds=100))}
    assert run_lock.decide(no_duration, "me", NOW, is_dead=alive, own_duration=600) == (
        run_lock.WAIT, NOW + datetime.timedelta(seconds=500))
    assert run_lock.decide(dict(no_duration, leaseDurationSeconds="ten"), "me", NOW, is_dead=alive,
                           own_duration=60)[0] == run_lock.TAKE_OVER
    # Neither a time nor a duration: held (only a dead local run or a deleted Lease frees it).
    assert run_lock.decide({"holderIdentity": "other"}, "me", NOW, is_dead=alive,
                           watched_since=NOW - datetime.timedelta(days=30)) == (run_lock.WAIT, None)


def test_a_holder_recorded_as_pid_1_names_no_process_of_this_host():
    """Issue 28 item 6: `<this host>/1/...` made every process of the host (all below PID 1) count as the holder's."""
    table = [proc(1, ppid=0, start=0), proc(100, ppid=1, start=5000), proc(101, ppid=100, start=5001)]
    for holder in ("h1/1/0/-", "h1/1/0", "h1/0/0/-", "h1/-5/0/-"):
        assert run_lock.parse_holder(holder) is None
        assert run_lock.run_processes(holder, table) == []
        # Judged by its Lease's times, never dead by the process table.
        assert dead(holder, table) is False


def test_a_holder_with_no_start_time_is_its_pid_alone_not_everything_below_it():
    """A PID with no start time recorded may be any process's by now: judged by that process only."""
    table = [proc(2, ppid=0, start=1), proc(300, ppid=2, start=50), proc(100, ppid=1, start=5000, fingerprint="f00d"),
             proc(101, ppid=100, start=5001, fingerprint="f00d")]
    assert run_lock.run_processes("h1/2/0/-", table) == [2]
    # With its fingerprint, its own workers still count (found as the run's, not as below an unsure PID).
    assert run_lock.run_processes("h1/2/0/f00d", table) == [2, 100, 101]
