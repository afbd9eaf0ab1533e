"""A stop asked from outside (module_utils/stop_signals.py), with real signals to real processes: the watch
takes SIGINT, SIGTERM and SIGHUP, ends a wait at once, leaves a pass alone, and sees its parent die."""

import os
import signal
import threading
import time

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import stop_signals


@pytest.fixture
def watch():
    installed = stop_signals.StopWatch().install()
    try:
        yield installed
    finally:
        installed.uninstall()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_is_a_stop_taken_at_the_next_safe_point(watch, signum):
    watch.check()   # nothing asked yet
    os.kill(os.getpid(), signum)
    assert watch.cause == "%s received" % signal.Signals(signum).name
    with pytest.raises(stop_signals.Stopped, match=signal.Signals(signum).name):
        watch.check()


def test_a_signal_during_a_wait_ends_it_at_once(watch):
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
    began = time.monotonic()
    with pytest.raises(stop_signals.Stopped):
        with watch.interruptible():
            time.sleep(30)
    assert time.monotonic() - began < 5


def test_a_signal_outside_a_wait_lets_the_work_in_hand_finish(watch):
    os.kill(os.getpid(), signal.SIGTERM)
    finished = []
    time.sleep(0.1)        # work in hand (a pass): not interrupted
    finished.append(True)
    assert finished and watch.cause == "SIGTERM received"
    with pytest.raises(stop_signals.Stopped):
        with watch.interruptible():   # a wait after it never begins
            finished.append("waited")
    assert finished == [True]


def test_sigterm_twice_lets_the_run_end_itself(watch):
    # ansible-playbook's cleanup on Ctrl-C terminates its workers twice (task_queue_manager.run and cleanup).
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)
    assert watch.received == [signal.SIGTERM, signal.SIGTERM] and watch.cause == "SIGTERM received"


def test_sigint_twice_ends_the_process_as_it_would_have_without_the_watch():
    # The handler before the watch is Python's own (KeyboardInterrupt), whatever this test process was started with
    # (a shell's background job starts with SIGINT ignored).
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    watching = stop_signals.StopWatch().install()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        assert watching.cause == "SIGINT received"
        # The second one goes to the handler that was there before.
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    finally:
        watching.uninstall()
        signal.signal(signal.SIGINT, before)


def test_no_stop_never_stops():
    none = stop_signals.NoStop()
    none.check()
    with none.interruptible():
        pass
    assert none.cause is None and not none.parent_gone()


def _watch_and_report(report_w):
    """A forked watcher's whole life: install the watch, say "ready <parent PID>", wait up to 20 s, and say how the
    wait ended ("stopped: <cause>" or "not stopped"); then exit."""
    try:
        watching = stop_signals.StopWatch().install()
        os.write(report_w, b"ready %d\n" % watching.parent)
        try:
            with watching.interruptible():
                time.sleep(20)
            os.write(report_w, b"not stopped\n")
        except stop_signals.Stopped as exc:
            os.write(report_w, ("stopped: %s\n" % exc.cause).encode())
    finally:
        os._exit(0)


def test_the_death_of_the_parent_is_a_stop_named_after_it():
    """A grandchild watches; its parent dies (a SIGKILL, as ansible-runner does to ansible-playbook's group); the
    grandchild's wait ends at once with the parent named (Linux: PR_SET_PDEATHSIG)."""
    report_r, report_w = os.pipe()
    middle = os.fork()
    if middle == 0:   # the parent to be killed
        os.close(report_r)
        if os.fork() == 0:   # the watcher
            _watch_and_report(report_w)
        time.sleep(60)
        os._exit(0)
    os.close(report_w)
    with os.fdopen(report_r, "rb") as report:
        ready = report.readline().decode()
        assert ready.startswith("ready %d" % middle), ready
        began = time.monotonic()
        os.kill(middle, signal.SIGKILL)
        os.waitpid(middle, 0)
        said = report.readline().decode().strip()
    assert said == "stopped: the playbook process (PID %d) is gone" % middle
    assert time.monotonic() - began < 5


def test_the_death_signal_that_comes_before_the_parent_is_gone_is_still_named_after_it():
    """The parent-death signal comes when the parent's thread that forked the watcher ends. When the whole parent is
    killed, that thread can end before the rest of it, while the watcher's parent PID has not changed yet (a flake of
    test_upgrade_stopped's AWX cancel, named "SIGHUP received"). Made certain here: the forking thread ends, and the
    parent is killed 0.5 s later; the stop still names the parent's death."""
    report_r, report_w = os.pipe()
    middle = os.fork()
    if middle == 0:   # the parent to be killed, which forks the watcher from a thread that then ends
        os.close(report_r)

        def fork_watcher():
            if os.fork() == 0:
                _watch_and_report(report_w)
            time.sleep(1.0)   # the watcher installs its watch; then this thread ends

        forker = threading.Thread(target=fork_watcher)
        forker.start()
        forker.join()
        time.sleep(60)
        os._exit(0)
    os.close(report_w)
    with os.fdopen(report_r, "rb") as report:
        ready = report.readline().decode()
        assert ready.startswith("ready %d" % middle), ready
        time.sleep(1.5)   # the forking thread has ended: the death signal came, the parent lives
        os.kill(middle, signal.SIGKILL)
        os.waitpid(middle, 0)
        said = report.readline().decode().strip()
    assert said == "stopped: the playbook process (PID %d) is gone" % middle


def test_a_sigterm_behind_a_sighup_is_named_whatever_came_first(watch):
    # ansible-playbook passes SIGTERM on and dies: the parent-death SIGHUP may be handled first (lower number).
    os.kill(os.getpid(), signal.SIGHUP)
    os.kill(os.getpid(), signal.SIGTERM)
    assert watch.received == [signal.SIGHUP, signal.SIGTERM] and watch.cause == "SIGTERM received"
