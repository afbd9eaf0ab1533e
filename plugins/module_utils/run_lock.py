# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Mutual exclusion of upgrade runs through a coordination.k8s.io Lease (pure decisions).

A run holds the Lease while it works and renews it every pass. Another run may take it only when it
has expired, or when it was held by a run on the same host none of whose processes is alive: not the
playbook, not a worker it forked, not a module (a run killed with SIGKILL on an operator's laptop resumes
at once instead of waiting for the expiry, but never while a module of the killed run can still act).
"""

from __future__ import annotations

import datetime
import hashlib
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
    """A MicroTime, or None when it is missing or no time (an unreadable Lease time is no time)."""
    if not text or not isinstance(text, str):
        return None
    text = text.replace("Z", "+00:00")
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    # A time without its zone is read as UTC, as the API server writes every time.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.timezone.utc)


# Every module process of a run carries its holder identity in this environment variable (the role sets
# it with `environment:` on every task after the lock is taken), so a module whose worker and playbook
# are gone is still recognised as part of its run.
RUN_ENV = "KUBENODES_IMAGE_UPGRADE_RUN"


def _stat_fields(text):
    """The fields of /proc/PID/stat after the command name (which may hold spaces and parentheses)."""
    return text.rsplit(")", 1)[1].split()


def _process_start_ticks(pid):
    """The start time of a process in clock ticks since boot (Linux), so a reused PID is not mistaken
    for the run that held the lock. None when unknown."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            fields = _stat_fields(handle.read())
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def fingerprint(cmdline, environ):
    """What a playbook process shares with every worker it forks (ansible-core forks its workers without
    exec, so they keep the playbook's command line and initial environment, even after os.setsid() and
    after being re-parented when the playbook dies). Both are bytes as /proc shows them."""
    return hashlib.sha256(cmdline + b"\0\0" + environ).hexdigest()[:16]


def _env_value(environ, name):
    prefix = name.encode() + b"="
    for item in environ.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode("utf-8", "replace")
    return None


def read_process(pid):
    """One process as the liveness decision sees it: {pid, ppid, sid, start, state, fingerprint, run}
    (`run`: the value of RUN_ENV in its environment, or None); None when it is gone or unreadable."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            fields = _stat_fields(handle.read())
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            cmdline = handle.read()
        try:
            with open("/proc/%d/environ" % pid, "rb") as handle:
                environ = handle.read()
        except OSError:  # another user's process: its environment is not ours to read
            environ = b""
        return {"pid": pid, "ppid": int(fields[1]), "sid": int(fields[3]), "start": int(fields[19]),
                "state": fields[0], "fingerprint": fingerprint(cmdline, environ) if environ else None,
                "run": _env_value(environ, RUN_ENV)}
    except (OSError, IndexError, ValueError):
        return None


def process_table():
    """Every process of this host that read_process can see."""
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    return [proc for proc in (read_process(pid) for pid in pids) if proc is not None]


def _ancestor_playbook_pid(fallback=True):
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
                parent = int(_stat_fields(handle.read())[1])
        except (OSError, IndexError, ValueError):
            break
        if any(os.path.basename(arg).startswith(b"ansible-playbook") for arg in argv[:3]):
            found = pid
        elif found is not None:
            break
        if parent <= 1:
            break
        pid = parent
    return found if found is not None or not fallback else os.getppid()


def default_holder():
    """host/pid/start-ticks/fingerprint of the running playbook: unique per run, and checkable for
    liveness of the playbook and of every worker it forked (see run_processes)."""
    pid = _ancestor_playbook_pid()
    proc = read_process(pid) or {}
    return "%s/%d/%s/%s" % (socket.gethostname(), pid, proc.get("start") or 0, proc.get("fingerprint") or "-")


def parse_holder(holder):
    """(host, pid, start ticks, fingerprint or None) of a holder in default_holder's form (the older
    host/pid/ticks form too); None for any other identity (an explicit run ID)."""
    parts = (holder or "").split("/")
    if len(parts) not in (3, 4) or not parts[0]:
        return None
    try:
        pid, ticks = int(parts[1]), int(parts[2])
    except ValueError:
        return None
    if pid <= 1:
        # No playbook runs as PID 1 (init, or a container's entry point): such a holder names no run's process, and
        # everything on the host is below PID 1. Its Lease's times decide, as for any identity not in this form.
        return None
    fprint = parts[3] if len(parts) == 4 and parts[3] not in ("", "-") else None
    return parts[0], pid, ticks, fprint


def _descendants(roots, processes):
    """PIDs of `roots` and every process below them through the parent links that still exist."""
    children = {}
    for proc in processes:
        children.setdefault(proc["ppid"], []).append(proc["pid"])
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        todo.extend(children.get(pid, ()))
    return found


def own_run_pids(processes, playbook_pid, own_pid):
    """The PIDs of the run asking (never evidence that another run lives; pure): its playbook and
    everything below it (`playbook_pid` None: none), and the asking process with its ancestors."""
    by_pid = {proc["pid"]: proc for proc in processes}
    own = _descendants([playbook_pid], processes) if playbook_pid else set()
    pid = own_pid
    while pid in by_pid and pid not in own and pid > 1:
        own.add(pid)
        pid = by_pid[pid]["ppid"]
    own.add(own_pid)
    return own


def run_processes(holder, processes, own=()):
    """PIDs of the processes in `processes` that belong to the run `holder` names (pure). A run lives
    while any of them does, not only its playbook:
    - the playbook itself (its PID with its start time);
    - every process that carries the holder in RUN_ENV (each module of the run, even one whose worker
      and playbook are gone);
    - every process with the playbook's fingerprint started since the playbook: its workers, which
      ansible-core forks and which call os.setsid(), so they are neither in its process group nor,
      once it died, below it;
    - everything below any of these.
    Zombies are dead. Processes in `own` (the asking run: it may have been started with the same
    command line) never count. Holders not in default_holder's form name no process."""
    parsed = parse_holder(holder)
    if parsed is None:
        return []
    _host, pid, ticks, fprint = parsed
    live = [proc for proc in processes if proc.get("state") not in ("Z", "X") and proc["pid"] not in own]
    members, unsure = [], []
    for proc in live:
        if proc["pid"] == pid and proc["start"] == ticks:
            members.append(proc["pid"])
        elif proc.get("run") == holder:
            members.append(proc["pid"])
        elif fprint and proc.get("fingerprint") == fprint and proc["start"] >= ticks:
            members.append(proc["pid"])
        elif proc["pid"] == pid and ticks == 0:
            # No start time recorded: the PID may be any process's by now. It counts, but what runs below it is
            # not the run's on that evidence alone (its own workers and modules are found above).
            unsure.append(proc["pid"])
    below = _descendants(members, live) if members else set()
    return sorted((below | set(unsure)) - set(own))


def holder_is_dead_local_run(holder, hostname=None, processes=None, own=None):
    """True when `holder` names a run on this host none of whose processes is alive (see run_processes).
    Holders of another host, or not in default_holder's form, are never judged dead (the Lease's expiry
    decides for them)."""
    parsed = parse_holder(holder)
    if parsed is None or parsed[0] != (hostname or socket.gethostname()):
        return False
    if processes is None:
        return not local_run_processes(holder)
    return not run_processes(holder, processes, own or ())


def local_run_processes(holder):
    """PIDs of the live processes of the run `holder` names on this host, not counting the asking run."""
    processes = process_table()
    return run_processes(holder, processes, own_run_pids(processes, _ancestor_playbook_pid(fallback=False), os.getpid()))


def renewed_at(lease_spec):
    """When the Lease was last renewed (or else acquired), or None when neither time is there and readable."""
    spec = lease_spec or {}
    return parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))


def holding_seconds(lease_spec, own_duration=None):
    """How long a holding lasts after a renewal: the Lease's leaseDurationSeconds, or `own_duration` (the asking
    run's) when that is missing or no whole number above 0; None when neither is known."""
    duration = (lease_spec or {}).get("leaseDurationSeconds")
    if isinstance(duration, int) and not isinstance(duration, bool) and duration > 0:
        return duration
    return own_duration


def decide(lease_spec, holder, now, is_dead=holder_is_dead_local_run, watched_since=None, own_duration=None):
    """What to do with the Lease whose spec is `lease_spec` (None when absent): ACQUIRE, RENEW,
    TAKE_OVER or WAIT, and when the current holding expires (None if unknown).

    Another holder's holding lasts its duration (`own_duration` when the Lease has none) after its renew time (or
    else acquire time). When neither time is there or readable, it counts as held until it is provably stale:
    `watched_since`, the moment since which the asker has seen this Lease unchanged (same holder, same
    resourceVersion), at least that duration ago; until then it expires that long after `watched_since`, and never
    while nobody watched it. A run on this host none of whose processes lives is stale at once, either way."""
    if lease_spec is None or not lease_spec.get("holderIdentity"):
        return ACQUIRE, None
    current = lease_spec["holderIdentity"]
    duration = holding_seconds(lease_spec, own_duration)
    since = renewed_at(lease_spec) or watched_since
    expires = since + datetime.timedelta(seconds=duration) if since is not None and duration is not None else None
    if current == holder:
        return RENEW, expires
    if (expires is not None and expires <= now) or is_dead(current):
        return TAKE_OVER, expires
    return WAIT, expires
