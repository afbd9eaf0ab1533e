# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The health gate between batches, pure: Node and Pod dicts and a clock in, named checks out.

A gate passes when, at one look:
- nodes_ready: every Node (but one being deleted) is Ready;
- system_pods_ready: every live pod of the watched namespaces (kube-system) is Ready;
- no_new_pending: no workload that had a Running pod before the batch has a Pending pod now. A workload is
  the pod's controller (ReplicaSet, StatefulSet, DaemonSet, Job...), so an evicted pod's replacement, which
  has a new name, counts; a bare pod counts by its name;
- soak: soak_seconds have passed since the last Node turned Ready (the last heir's Ready condition; a node
  that recovered since restarts the soak too).
cluster_health_gate looks until every check passed at `looks` looks in a row, `look_interval` seconds apart (a
failing look starts the count again, so a cluster that flaps does not slip through on one good look), or its
timeout; the time each check took is recorded per gate run in the journal (report.merge) and shown by the report.
"""

from __future__ import annotations

import time

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import kube, validate
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.report import parse_time

CHECKS = ("nodes_ready", "system_pods_ready", "no_new_pending", "soak")
# What the report and the check-mode listing call each check; "user_tasks" is the user's tasks file.
CHECK_WORDS = {
    "nodes_ready": "every node Ready",
    "system_pods_ready": "the pods of %s Ready",
    "no_new_pending": "no pod that was Running before the batch Pending",
    "soak": "soak of %ss since the last node turned Ready",
    "user_tasks": "your tasks file %s",
}
# And what they call the rule of consecutive passing looks.
LOOKS_WORDS = "every check passing at %d looks in a row, %ss apart (a failing look starts the count again)"
# kOps rolling-update validates the cluster twice in a row, 10 s apart, after each node (--validate-count 2;
# ValidateSuccessDuration 10 s): the defaults of rolling_upgrade_gate_looks and rolling_upgrade_gate_look_interval.
DEFAULT_LOOKS = 2
DEFAULT_LOOK_INTERVAL = 10
_TERMINAL = ("Succeeded", "Failed")
# Named in the details at most this many, then "and N more".
_NAMED = 5


def condition(obj, kind):
    """The status condition of type `kind` of a Node or Pod, or None."""
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return item
    return None


def _name(obj):
    metadata = obj.get("metadata") or {}
    return ("%s/%s" % (metadata["namespace"], metadata.get("name"))) if metadata.get("namespace") else metadata.get("name")


def _deleting(obj):
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def workload_key(pod):
    """namespace/Kind/name of the pod's controller, or namespace/Pod/name of a bare pod."""
    metadata = pod.get("metadata") or {}
    namespace = metadata.get("namespace") or ""
    for owner in metadata.get("ownerReferences") or []:
        if owner.get("controller"):
            return "%s/%s/%s" % (namespace, owner.get("kind"), owner.get("name"))
    return "%s/Pod/%s" % (namespace, metadata.get("name"))


def running_workloads(pods):
    """The baseline taken before a batch: the sorted workload keys with a Running pod."""
    return sorted({workload_key(p) for p in pods if (p.get("status") or {}).get("phase") == "Running" and not _deleting(p)})


def _named(items):
    items = sorted(items)
    more = len(items) - _NAMED
    return ", ".join(items[:_NAMED]) + (" and %d more" % more if more > 0 else "")


def check_nodes_ready(nodes):
    bad = []
    for node in nodes:
        if _deleting(node):
            continue
        ready = condition(node, "Ready")
        if not ready or ready.get("status") != "True":
            why = ("Ready=%s: %s" % (ready.get("status"), ready.get("reason") or ready.get("message") or "no reason")
                   if ready else "no Ready condition")
            bad.append("%s (%s)" % (_name(node), why))
    if not nodes:
        return dict(name="nodes_ready", passed=False, detail="the cluster lists no node")
    return dict(name="nodes_ready", passed=not bad,
                detail=("%d node(s) not Ready: %s" % (len(bad), _named(bad))) if bad else "%d node(s) Ready" % len(nodes))


def live_pods(pods, namespaces):
    """The pods of `namespaces` that are neither finished (Succeeded, Failed: a Job's pod, an evicted pod) nor
    being deleted."""
    watched = set(namespaces)
    return [p for p in pods if (p.get("metadata") or {}).get("namespace") in watched and not _deleting(p)
            and (p.get("status") or {}).get("phase") not in _TERMINAL]


def pod_ready(pod):
    """Running, with a Ready condition that is true."""
    ready = condition(pod, "Ready")
    return (pod.get("status") or {}).get("phase") == "Running" and bool(ready) and ready.get("status") == "True"


def check_system_pods_ready(pods, namespaces):
    watched = set(namespaces)
    live = live_pods(pods, namespaces)
    bad = ["%s (%s%s)" % (_name(pod), (pod.get("status") or {}).get("phase") or "no phase",
                          ", not Ready" if (pod.get("status") or {}).get("phase") == "Running" else "")
           for pod in live if not pod_ready(pod)]
    where = ", ".join(sorted(watched))
    return dict(name="system_pods_ready", passed=not bad,
                detail=("%d pod(s) of %s not Ready: %s" % (len(bad), where, _named(bad))) if bad
                else "%d pod(s) of %s Ready" % (len(live), where))


def check_no_new_pending(pods, baseline):
    if baseline is None:
        return dict(name="no_new_pending", passed=True, detail="no snapshot of the pods before the batch to compare with")
    before = set(baseline)
    bad = []
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") != "Pending" or _deleting(pod) or workload_key(pod) not in before:
            continue
        scheduled = condition(pod, "PodScheduled")
        why = (scheduled.get("reason") or "not scheduled") if scheduled and scheduled.get("status") != "True" else "not started"
        bad.append("%s (of %s, %s)" % (_name(pod), workload_key(pod).split("/", 1)[1], why))
    return dict(name="no_new_pending", passed=not bad,
                detail=("%d pod(s) Pending whose workload ran before the batch: %s" % (len(bad), _named(bad))) if bad
                else "no pod Pending whose workload ran before the batch")


def last_ready(nodes):
    """(time, node name) of the latest Ready transition among the Ready nodes, or (None, None)."""
    latest, name = None, None
    for node in nodes:
        ready = condition(node, "Ready")
        if _deleting(node) or not ready or ready.get("status") != "True":
            continue
        moment = parse_time(ready.get("lastTransitionTime"))
        if moment is not None and (latest is None or moment > latest):
            latest, name = moment, _name(node)
    return latest, name


def check_soak(nodes, soak_seconds, now):
    """The soak check, with `wait`: the seconds still to go (0 once passed)."""
    latest, name = last_ready(nodes)
    if not soak_seconds:
        return dict(name="soak", passed=True, wait=0, detail="no soak (rolling_upgrade_soak_seconds is 0)")
    if latest is None:
        return dict(name="soak", passed=False, wait=soak_seconds, detail="no Ready node to count the soak from")
    left = max(0.0, float(soak_seconds) - (now - latest.timestamp()))
    return dict(name="soak", passed=left <= 0, wait=left,
                detail="node %s turned Ready at %s; %s of the %ss soak (rolling_upgrade_soak_seconds)"
                       % (name, latest.strftime("%Y-%m-%dT%H:%M:%SZ"),
                          "%ds left" % int(left + 0.999) if left > 0 else "passed", soak_seconds))


def evaluate(nodes, pods, baseline, soak_seconds, now, namespaces=("kube-system",)):
    """The four checks at one look, in CHECKS order."""
    return [check_nodes_ready(nodes), check_system_pods_ready(pods, namespaces), check_no_new_pending(pods, baseline),
            check_soak(nodes, soak_seconds, now)]


def track(seconds, checks, elapsed):
    """Fold one look into {check: seconds until it passed for good, or None while it fails}; returns it."""
    for check in checks:
        if not check["passed"]:
            seconds[check["name"]] = None
        elif seconds.get(check["name"]) is None:
            seconds[check["name"]] = round(elapsed, 1)
    return seconds


def final_seconds(seconds, elapsed):
    """The time each check took, a failing one counted until the gate gave up."""
    return {name: (round(elapsed, 1) if value is None else value) for name, value in seconds.items()}


def failure_message(checks, waited, timeout, streak=0, best=0, looks=1, look_interval=0):
    """Why the gate gave up: each check failing at the last look; or, when the last look passed, that the passing
    looks in a row (`streak`) fell short of `looks`; and, when some looks passed but never `looks` in a row
    (`best` at most), that the cluster flapped."""
    failing = "; ".join("%s: %s" % (c["name"], c["detail"]) for c in checks if not c["passed"])
    if not failing:
        failing = ("every check passed at the last %d look(s) in a row, short of the %d in a row "
                   "rolling_upgrade_gate_looks asks, %ss apart (rolling_upgrade_gate_look_interval)"
                   % (streak, looks, look_interval))
    elif best and looks > 1:
        failing += ("; every check passed at times, but at most %d look(s) in a row of the %d rolling_upgrade_gate_looks "
                    "asks: the cluster flaps" % (best, looks))
    return ("health gate failed: after %ds (rolling_upgrade_gate_timeout is %ss) %s. The run stops here, before any "
            "further node is replaced, and is resumable: fix what is named (or raise rolling_upgrade_gate_timeout) and "
            "run again; the next run runs this gate first" % (int(waited), timeout, failing))


def pause(checks, passing, poll_interval, look_interval):
    """Seconds until the next look: `look_interval` after a look that passed; after one that failed, the poll
    interval, or while only the soak is left, up to its end (at most 6 poll intervals)."""
    if passing:
        return look_interval
    soak = next(c for c in checks if c["name"] == "soak")
    if all(c["passed"] for c in checks if c["name"] != "soak"):
        return min(soak["wait"], poll_interval * 6)
    return poll_interval


def wait(look, clock, sleep, timeout, poll_interval, looks=1, look_interval=0, check_mode=False):
    """Look (`look()` -> (checks, what was read)) until every check passed at `looks` looks in a row,
    `look_interval` seconds apart, or `timeout` seconds have passed; a failing look starts the count again. In
    check mode, one look. Returns passed, checks (the last look's), seconds (track), waited, looked (the number of
    looks), streak (passing looks in a row at the end), read (the last look's), and message when it failed."""
    start = clock()
    seconds, streak, best, looked = {}, 0, 0, 0
    while True:
        checks, read = look()
        looked += 1
        elapsed = clock() - start
        track(seconds, checks, elapsed)
        passing = all(c["passed"] for c in checks)
        streak = streak + 1 if passing else 0
        best = max(best, streak)
        result = dict(passed=passing if check_mode else streak >= looks, checks=checks,
                      seconds=final_seconds(seconds, elapsed), waited=round(elapsed, 1), looked=looked, streak=streak,
                      read=read)
        if result["passed"] or check_mode:
            return result
        if elapsed >= timeout:
            result["message"] = failure_message(checks, elapsed, timeout, streak, best, looks, look_interval)
            return result
        sleep(max(0.2, min(pause(checks, passing, poll_interval, look_interval), timeout - elapsed)))


def describe(soak_seconds, namespaces, tasks_file, after, timeout, looks=1, look_interval=0):
    """The gates, one line each, as check mode lists them."""
    lines = [CHECK_WORDS["nodes_ready"], CHECK_WORDS["system_pods_ready"] % ", ".join(namespaces),
             CHECK_WORDS["no_new_pending"]]
    if soak_seconds:
        lines.append(CHECK_WORDS["soak"] % soak_seconds)
    if looks > 1:
        lines.append(LOOKS_WORDS % (looks, look_interval))
    if tasks_file:
        lines.append(CHECK_WORDS["user_tasks"] % tasks_file)
    return ["after each %s, within %ss: %s" % (after, timeout, line) for line in lines]


# -- cluster_health_gate's backend (the module keeps its documentation and main(); the role's run calls it too) --
RULES = {
    "soak_seconds": lambda n, v: validate.seconds(n, v, minimum=0),
    "timeout": validate.seconds,
    "poll_interval": validate.positive_number,
    "after": lambda n, v: validate.one_of(n, v, ("batch", "replacement")),
    "looks": validate.ROLE_RULES["rolling_upgrade_gate_looks"],
    "look_interval": validate.ROLE_RULES["rolling_upgrade_gate_look_interval"],
}

ARGUMENT_SPEC = dict(
    state=dict(type="str", choices=["passed", "snapshot"], default="passed"),
    baseline=dict(type="list", elements="str"),
    soak_seconds=dict(type="int", default=0),
    timeout=dict(type="int", default=600),
    namespaces=dict(type="list", elements="str", default=["kube-system"]),
    poll_interval=dict(type="float", default=5),
    after=dict(type="str", default="batch"),
    tasks_file=dict(type="str", default=""),
    looks=dict(type="int", default=DEFAULT_LOOKS),
    look_interval=dict(type="int", default=DEFAULT_LOOK_INTERVAL),
)


def _namespaces_problem(params):
    for name in params.get("namespaces") or []:
        problem = validate.namespace("namespaces item", name)
        if problem:
            return problem
    return None


def _looks_problem(params):
    """Looks that cannot fit in the timeout: the gate could never open."""
    if params.get("state") == "snapshot" or validate.check(params, RULES):
        return None
    return validate.gate_looks_fit(params, ("looks", "look_interval", "timeout"))


def _problems(params):
    return validate.check(params, RULES) + [_namespaces_problem(params), _looks_problem(params)]


VALIDATE = _problems   # the backends' hook (as lease.VALIDATE)


def _look(api_client, params, baseline):
    nodes = kube.list_nodes(api_client)
    pods = kube.list_all(api_client, "/api/v1/pods")
    return evaluate(nodes, pods, baseline, params["soak_seconds"], time.time(), params["namespaces"]), pods


def apply_state(module, api_client):
    """cluster_health_gate: the workloads running now (state=snapshot), or the gate's looks until it opens, fails
    (module.fail_json, reason gate_failed) or, in check mode, after one look."""
    params = module.params
    gates = describe(params["soak_seconds"], params["namespaces"], params["tasks_file"], params["after"],
                     params["timeout"], params["looks"], params["look_interval"])
    if params["state"] == "snapshot":
        pods = kube.list_all(api_client, "/api/v1/pods")
        return dict(changed=False, passed=True, snapshot=running_workloads(pods), gates=gates)
    outcome = wait(lambda: _look(api_client, params, params["baseline"]), time.monotonic, time.sleep,
                   params["timeout"], params["poll_interval"], params["looks"], params["look_interval"],
                   module.check_mode)
    pods, message = outcome.pop("read"), outcome.pop("message", None)
    result = dict(outcome, changed=False, snapshot=running_workloads(pods), gates=gates)
    if message:
        module.fail_json(msg=message, reason="gate_failed", **{k: v for k, v in result.items() if k != "changed"})
    return result
