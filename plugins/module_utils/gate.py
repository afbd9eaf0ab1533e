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
cluster_health_gate looks until every check passes or its timeout; the time each check took is recorded
per gate run in the journal (report.merge) and shown by the report.
"""

from __future__ import annotations

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
_TERMINAL = ("Succeeded", "Failed")
# Named in the details at most this many, then "and N more".
_NAMED = 5


def _condition(obj, kind):
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition
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
        ready = _condition(node, "Ready")
        if not ready or ready.get("status") != "True":
            why = ("Ready=%s: %s" % (ready.get("status"), ready.get("reason") or ready.get("message") or "no reason")
                   if ready else "no Ready condition")
            bad.append("%s (%s)" % (_name(node), why))
    if not nodes:
        return dict(name="nodes_ready", passed=False, detail="the cluster lists no node")
    return dict(name="nodes_ready", passed=not bad,
                detail=("%d node(s) not Ready: %s" % (len(bad), _named(bad))) if bad else "%d node(s) Ready" % len(nodes))


def check_system_pods_ready(pods, namespaces):
    watched = set(namespaces)
    live = [p for p in pods if (p.get("metadata") or {}).get("namespace") in watched and not _deleting(p)
            and (p.get("status") or {}).get("phase") not in _TERMINAL]
    bad = []
    for pod in live:
        ready = _condition(pod, "Ready")
        if (pod.get("status") or {}).get("phase") != "Running" or not ready or ready.get("status") != "True":
            bad.append("%s (%s%s)" % (_name(pod), (pod.get("status") or {}).get("phase") or "no phase",
                                      ", not Ready" if (pod.get("status") or {}).get("phase") == "Running" else ""))
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
        scheduled = _condition(pod, "PodScheduled")
        why = (scheduled.get("reason") or "not scheduled") if scheduled and scheduled.get("status") != "True" else "not started"
        bad.append("%s (of %s, %s)" % (_name(pod), workload_key(pod).split("/", 1)[1], why))
    return dict(name="no_new_pending", passed=not bad,
                detail=("%d pod(s) Pending whose workload ran before the batch: %s" % (len(bad), _named(bad))) if bad
                else "no pod Pending whose workload ran before the batch")


def last_ready(nodes):
    """(time, node name) of the latest Ready transition among the Ready nodes, or (None, None)."""
    latest, name = None, None
    for node in nodes:
        ready = _condition(node, "Ready")
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


def failure_message(checks, waited, timeout):
    failing = "; ".join("%s: %s" % (c["name"], c["detail"]) for c in checks if not c["passed"])
    return ("health gate failed: after %ds (rolling_upgrade_gate_timeout is %ss) %s. The run stops here, before any "
            "further node is replaced, and is resumable: fix what is named (or raise rolling_upgrade_gate_timeout) and "
            "run again; the next run runs this gate first" % (int(waited), timeout, failing))


def describe(soak_seconds, namespaces, tasks_file, after, timeout):
    """The gates, one line each, as check mode lists them."""
    lines = [CHECK_WORDS["nodes_ready"], CHECK_WORDS["system_pods_ready"] % ", ".join(namespaces),
             CHECK_WORDS["no_new_pending"]]
    if soak_seconds:
        lines.append(CHECK_WORDS["soak"] % soak_seconds)
    if tasks_file:
        lines.append(CHECK_WORDS["user_tasks"] % tasks_file)
    return ["after each %s, within %ss: %s" % (after, timeout, line) for line in lines]
