# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Mutual exclusion of upgrade runs through a coordination.k8s.io Lease (pure decisions).

A run holds the Lease while it works and renews it every pass. Another run may take it only when it
has expired, or when it was held by a run on the same host whose process is gone (a run killed with
SIGKILL on an operator's laptop resumes at once instead of waiting for the expiry).
"""

from __future__ import annotations

import datetime
import os
import socket

ACQUIRE = "acquire"        # nobody holds it (or it does not exist): take it
RENEW = "renew"            # we hold it: extend it
TAKE_OVER = "take-over"    # someone else held it, but it expired or its process is gone
WAIT = "wait"              # someone else holds it and is alive


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc)


def format_time(moment):
    """MicroTime as the API server writes it."""
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text):
    if not text:
        return None
    text = text.replace("Z", "+00:00")
    try:
        return datetime.datetime.fromisoformat(text)
    except ValueError:
        return None


def _process_start_ticks(pid):
    """The start time of a process in clock ticks since boot (Linux), so a reused PID is not mistaken
    for the run that held the lock. None when unknown."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _ancestor_playbook_pid():
    """The PID of the ansible-playbook (or ansible) process this module runs under, found by walking up
    the process tree; the module's own parent when there is none (a test, an ad-hoc call). The topmost
    one: ansible-playbook forks a worker per task with the same command line, and a worker's PID dies
    with its task, which would make a live run's Lease look abandoned."""
    pid = os.getppid()
    found = None
    for _depth in range(16):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as handle:
                argv = handle.read().split(b"\0")
            with open("/proc/%d/stat" % pid) as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
        if any(os.path.basename(arg).startswith(b"ansible-playbook") for arg in argv[:3]):
            found = pid
        elif found is not None:
            break
        if parent <= 1:
            break
        pid = parent
    return found if found is not None else os.getppid()


def default_holder():
    """host/pid/start-ticks of the running playbook: unique per run, and checkable for liveness."""
    pid = _ancestor_playbook_pid()
    return "%s/%d/%s" % (socket.gethostname(), pid, _process_start_ticks(pid) or 0)


def holder_is_dead_local_run(holder, hostname=None, start_ticks=_process_start_ticks):
    """True when `holder` names a run on this host whose process no longer exists (or is a different
    process with a reused PID). Holders not in our host/pid/ticks form are never judged dead."""
    parts = (holder or "").rsplit("/", 2)
    if len(parts) != 3 or parts[0] != (hostname or socket.gethostname()):
        return False
    try:
        pid, ticks = int(parts[1]), int(parts[2])
    except ValueError:
        return False
    current = start_ticks(pid)
    return current is None or (ticks != 0 and current != ticks)


def decide(lease_spec, holder, now, is_dead=holder_is_dead_local_run):
    """What to do with the Lease whose spec is `lease_spec` (None when absent): ACQUIRE, RENEW,
    TAKE_OVER or WAIT, and when the current holding expires (None if unknown)."""
    if lease_spec is None or not lease_spec.get("holderIdentity"):
        return ACQUIRE, None
    current = lease_spec["holderIdentity"]
    renewed = parse_time(lease_spec.get("renewTime")) or parse_time(lease_spec.get("acquireTime"))
    duration = lease_spec.get("leaseDurationSeconds") or 0
    expires = renewed + datetime.timedelta(seconds=duration) if renewed else None
    if current == holder:
        return RENEW, expires
    if expires is None or expires <= now or is_dead(current):
        return TAKE_OVER, expires
    return WAIT, expires
