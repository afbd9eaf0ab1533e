"""upgrade_helpers.kill_tree, the kill the killed-run tests and bench/chaos.py rely on: it must leave
nothing of a run alive, including what ansible-core's workers leave behind (setsid(), then re-parented
when the playbook dies). Real processes, no sandbox."""

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

import upgrade_helpers as uh

pytestmark = [pytest.mark.integration]

# A "playbook" that forks a "worker" which calls setsid() and starts a "module" that forks a grandchild;
# each writes its PID to a file, then they all sleep.
SCRIPT = r"""
import os, subprocess, sys, time
out = sys.argv[1]
def note(role):
    with open(os.path.join(out, role), "w") as handle:
        handle.write(str(os.getpid()))
if os.fork() == 0:
    os.setsid()
    note("worker")
    subprocess.Popen([sys.executable, "-c",
                      "import os, sys, time\nif os.fork() == 0:\n    open(sys.argv[1] + '/grandchild', 'w').write(str(os.getpid()))\n"
                      "    time.sleep(300)\nopen(sys.argv[1] + '/module', 'w').write(str(os.getpid()))\ntime.sleep(300)\n",
                      out])
    time.sleep(300)
    os._exit(0)
note("playbook")
time.sleep(300)
"""
ROLES = ("playbook", "worker", "module", "grandchild")


def start(tmp_path, marker):
    env = dict(os.environ, **{uh.RUN_MARKER: marker})
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, start_new_session=True)
    deadline = time.monotonic() + 60
    while not all((tmp_path / role).exists() and (tmp_path / role).read_text() for role in ROLES):
        assert time.monotonic() < deadline, "the process tree did not start"
        time.sleep(0.05)
    return proc, {role: int((tmp_path / role).read_text()) for role in ROLES}


def alive(pid):
    proc = uh.process_table().get(pid)
    return proc is not None and proc["state"] not in ("Z", "X")


def test_the_process_group_kill_leaves_the_setsid_worker_and_its_module_alive(tmp_path):
    """The old kill, for the record of why kill_tree exists."""
    marker = uuid.uuid4().hex
    proc, pids = start(tmp_path, marker)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert all(alive(pids[role]) for role in ("worker", "module", "grandchild")), pids
        # Once the playbook is gone, only the marker finds them: they are no longer below it.
        assert set(uh.process_tree(proc.pid, marker)) == {pids["worker"], pids["module"], pids["grandchild"]}
    finally:
        uh.kill_tree(proc.pid, marker)
    assert not any(alive(pid) for pid in pids.values())


def test_kill_tree_kills_every_descendant_including_setsid_ones(tmp_path):
    marker = uuid.uuid4().hex
    proc, pids = start(tmp_path, marker)
    try:
        assert set(uh.process_tree(proc.pid, marker)) == set(pids.values())
        killed = uh.kill_tree(proc.pid, marker)
        assert {pid for pid, _cmdline in killed} == set(pids.values())
        proc.wait(timeout=30)
        assert not any(alive(pid) for pid in pids.values())
        assert not uh.process_tree(proc.pid, marker)
    finally:
        uh.kill_tree(proc.pid, marker)
