# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""A stop asked from outside the run: a signal to the process that runs it, or the death of its parent.

ansible-core runs upgrade_step in a worker process that calls setsid(): Ctrl-C at a terminal reaches only
ansible-playbook, which forwards SIGINT (and SIGTERM) to its workers, and a SIGKILL of ansible-playbook's process
group (what ansible-runner does when AWX cancels a job, or a supervisor that stops a service) does not reach the
worker at all. The worker would go on alone. So the run's process watches for SIGINT, SIGTERM and SIGHUP, and
asks Linux for a SIGHUP when its parent dies (prctl PR_SET_PDEATHSIG); elsewhere it sees the parent gone at the
next look (os.getppid()).

A stop is taken at a safe point: between two passes, or while the run only waits (`interruptible`). Never in
the middle of a pass, whose steps each leave the cluster in a state the next run resumes from. A second SIGINT
ends the process at once, as it would have without this watch (a person pressing Ctrl-C again at the worker). A
second SIGTERM does not: ansible-playbook, stopping on Ctrl-C, sends its worker SIGTERM twice in a row (its task
queue manager's cleanup runs twice), which must not cut short the run's own end."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import time

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# How long a SIGHUP waits for the parent to be seen gone: the parent-death signal comes when the parent's thread that
# forked this process ends, which, when the whole parent is killed, can be before its last thread has ended (this
# process is then handed to another thread of the same parent first, so its parent PID does not change yet).
PARENT_DEATH_SECONDS = 2.0
_PR_SET_PDEATHSIG = 1


class Stopped(BaseException):
    """A stop asked from outside, raised at a safe point. A BaseException, like KeyboardInterrupt: a wait that
    catches every Exception (a watch that fails is a plain sleep) must not swallow it."""

    def __init__(self, cause):
        super().__init__(cause)
        self.cause = cause


class NoStop:
    """No watch (unit tests, check mode plans): never stops."""

    cause = None

    def parent_gone(self):
        return False

    def check(self):
        return None

    @contextlib.contextmanager
    def interruptible(self):
        yield


class StopWatch(NoStop):
    """Watches this process's signals and its parent, from install() on. `cause` is None until a stop is asked,
    then says what asked it."""

    def __init__(self):
        self.received = []
        self.parent = os.getppid()
        self._sighup_cause = None   # what a SIGHUP was found to mean, once
        self._waiting = False
        self._previous = {}

    def install(self):
        """Take over SIGINT, SIGTERM and SIGHUP in this process (the main thread), and ask for a SIGHUP when the
        parent dies. Returns self."""
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self._on_signal)
        _parent_death_signal(signal.SIGHUP)
        return self

    def uninstall(self):
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous = {}

    @property
    def cause(self):
        """What asked the stop, read when asked. ansible-playbook passes SIGINT or SIGTERM on and may die at once,
        which makes the kernel send SIGHUP (the parent-death signal) too, and Python runs the handler of the lower
        signal number first: a SIGINT or SIGTERM is named before the parent's death, and that before a SIGHUP."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            if signum in self.received:
                return "%s received" % signal.Signals(signum).name
        if self.parent_gone():
            return "the playbook process (PID %d) is gone" % self.parent
        if not self.received:
            return None
        if self._sighup_cause is None:
            deadline = time.monotonic() + PARENT_DEATH_SECONDS
            while not self.parent_gone() and time.monotonic() < deadline:
                time.sleep(0.05)
            self._sighup_cause = ("the playbook process (PID %d) is gone" % self.parent if self.parent_gone()
                                  else "SIGHUP received")
        return self._sighup_cause

    def _on_signal(self, signum, _frame):
        if signum == signal.SIGINT and signum in self.received:
            # Ctrl-C twice: stop now, as the process would have without this watch.
            signal.signal(signum, self._previous.get(signum) or signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.received.append(signum)
        if self._waiting:
            self._waiting = False
            raise Stopped(self.cause)

    def parent_gone(self):
        """Whether the process that started this one has ended (this one was given to another parent)."""
        return os.getppid() != self.parent

    def check(self):
        """At a safe point: raise Stopped when a stop was asked, or the parent is gone."""
        cause = self.cause
        if cause is not None:
            raise Stopped(cause)

    @contextlib.contextmanager
    def interruptible(self):
        """A block that only waits (a sleep, a watch, a health gate's looks): a stop asked during it ends it at
        once (raised from the signal handler), one asked before it ends it before it begins."""
        self.check()
        self._waiting = True
        try:
            yield
        finally:
            self._waiting = False


def _parent_death_signal(signum):
    """Linux: have the kernel send `signum` to this process when its parent dies. False where it cannot."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
