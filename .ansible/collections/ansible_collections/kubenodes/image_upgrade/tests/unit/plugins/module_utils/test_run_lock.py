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


def test_dead_local_run_detection():
    def ticks(pid):
        return {100: 5000}.get(pid)

    assert run_lock.holder_is_dead_local_run("h1/100/5000", "h1", ticks) is False   # same process, alive
    assert run_lock.holder_is_dead_local_run("h1/100/4000", "h1", ticks) is True    # PID reused by another
    assert run_lock.holder_is_dead_local_run("h1/200/4000", "h1", ticks) is True    # process gone
    assert run_lock.holder_is_dead_local_run("h2/200/4000", "h1", ticks) is False   # other host: cannot tell
    assert run_lock.holder_is_dead_local_run("awx-job-42", "h1", ticks) is False    # foreign format
    assert run_lock.holder_is_dead_local_run("h1/x/y", "h1", ticks) is False


def test_default_holder_names_this_host_and_a_live_process():
    holder = run_lock.default_holder()
    assert not run_lock.holder_is_dead_local_run(holder)


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
