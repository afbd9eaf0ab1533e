# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Kubernetes Events about the upgrade, on the Nodes they concern: what `kubectl describe node` and
`kubectl get events` show while it runs, and what event exporters pick up.

Which Events to write is pure: a phase a replacement enters for the first time in the journal (the journal
keeps the first time of each phase, so an Event is written once, however many passes or resumed runs see the
phase again), each health gate whose outcome the journal records for the first time (on the heirs of the batch
it followed), plus the events a pass names in its record (problems found, drains blocked by a named
PodDisruptionBudget). The writer keeps them bounded as Kubernetes' own recorder does: one Event object per
node, reason and message, whose count and last time go up when it happens again."""

from __future__ import annotations

import hashlib

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.report import parse_time

COMPONENT = "kubenodes-image-upgrade"
# Events about cluster-scoped objects (Nodes) live in the default namespace, as the kubelet's do.
NAMESPACE = "default"
# At most this many Events per write: a pass over thousands of nodes does not flood the API server.
MAX_PER_WRITE = 50
NORMAL, WARNING = "Normal", "Warning"

# A phase first seen in a replacement's journal entry: (on the donor or on its heir, reason, message).
PHASE_EVENTS = {
    "joined": ("heir", "UpgradeHeirJoined", "joined as the heir of {donor} in {group}"),
    "paired": ("donor", "UpgradePaired", "to be replaced by {heir} in {group}"),
    "heir-ready": ("heir", "UpgradeHeirReady", "Ready: the heir of {donor}"),
    "cordoned": ("donor", "UpgradeCordoned", "cordoned; its heir {heir} is Ready"),
    "draining": ("donor", "UpgradeDrainStarted", "drain started through the Eviction API; heir {heir}"),
    "drained": ("donor", "UpgradeDrained", "drained ({evicted} pods evicted); heir {heir}"),
    "etcd-removed": ("donor", "UpgradeEtcdMemberRemoved", "its etcd member was removed"),
    "deleted": ("donor", "UpgradeNodeDeleted", "replaced by {heir}: its instance and Node were deleted"),
}
PHASE_ORDER = tuple(PHASE_EVENTS)
# Named in a gate's message at most this many heirs, then "and N more".
_NAMED = 5


def event(node, reason, message, kind=NORMAL, when=None):
    return dict(node=node, reason=reason, message=message, type=kind, time=when)


def journal_events(before, after):
    """Events for every phase that the journal `after` holds and `before` did not, in phase order."""
    known_nodes = (before or {}).get("nodes") or {}
    result = []
    for donor, entry in sorted(((after or {}).get("nodes") or {}).items()):
        known = ((known_nodes.get(donor) or {}).get("phases")) or {}
        phases = entry.get("phases") or {}
        for phase in PHASE_ORDER:
            if phase not in phases or phase in known:
                continue
            # A drain cordons the donor first, in the same call: its start is the cordon's time too.
            also = ("cordoned",) if phase == "draining" and "cordoned" not in phases and "cordoned" not in known else ()
            for shown in also + (phase,):
                on, reason, template = PHASE_EVENTS[shown]
                node = donor if on == "donor" else entry.get("heir")
                if not node:
                    continue
                evicted = entry["evicted_count"] if "evicted_count" in entry else len(entry.get("evicted") or [])
                message = template.format(donor=donor, heir=entry.get("heir") or "(none)",
                                          group=entry.get("group") or "its group", evicted=evicted)
                result.append(event(node, reason, message, when=phases[phase]))
    return result


def gate_batch(journal, gate_id):
    """The heirs of the batch the gate `gate_id` followed: the replacements deleted after the last gate that
    passed before it began (a gate run again after a failure or a kill follows the same batch) and by its start."""
    gates = (journal or {}).get("gates") or {}
    started = parse_time((gates.get(gate_id) or {}).get("started") or gate_id)
    if started is None:
        return []
    ends = [parse_time(g.get("ended")) for other, g in gates.items()
            if other != gate_id and (g or {}).get("outcome") == "passed" and parse_time((g or {}).get("ended"))]
    since = max([e for e in ends if e <= started], default=None)
    heirs = set()
    for entry in ((journal or {}).get("nodes") or {}).values():
        deleted = parse_time((entry.get("phases") or {}).get("deleted"))
        if entry.get("heir") and deleted is not None and deleted <= started and (since is None or deleted > since):
            heirs.add(entry["heir"])
    return sorted(heirs)


def gate_events(before, after):
    """An Event on each heir of the batch a health gate followed, for each gate whose outcome the journal `after`
    records and `before` did not: UpgradeGatePassed with the seconds each check took, or the Warning
    UpgradeGateFailed with what failed. The gate is named by its start time (its ID in the journal)."""
    known = (before or {}).get("gates") or {}
    result = []
    for gate_id, gate in sorted(((after or {}).get("gates") or {}).items()):
        outcome = (gate or {}).get("outcome")
        if outcome not in ("passed", "failed") or (known.get(gate_id) or {}).get("outcome") == outcome:
            continue
        result.extend(_gate_outcome_events(after, gate_id, gate, outcome))
    return result


def _gate_outcome_events(journal, gate_id, gate, outcome):
    heirs = gate_batch(journal, gate_id)
    more = len(heirs) - _NAMED
    batch = ", ".join(heirs[:_NAMED]) + (" and %d more" % more if more > 0 else "")
    head = "health gate %s (after each %s; this one after the heirs %s)" % (gate_id, gate.get("after") or "batch", batch)
    when = gate.get("ended")
    if outcome == "passed":
        spent = ", ".join("%s %ss" % (check, seconds) for check, seconds in sorted((gate.get("seconds") or {}).items()))
        message = "%s passed at %s; seconds per check: %s" % (head, when or "?", spent or "none recorded")
        return [event(heir, "UpgradeGatePassed", message, NORMAL, when) for heir in heirs]
    message = "%s failed at %s: %s" % (head, when or "?", gate.get("failure") or "no cause recorded")
    return [event(heir, "UpgradeGateFailed", message, WARNING, when) for heir in heirs]


def pass_events(problems, drain_results, stamp):
    """Warnings a pass names: each problem found on a node (left alone or refused), and each drain blocked
    by a PodDisruptionBudget, naming it."""
    result = []
    for problem in problems or []:
        if problem.get("node") and problem.get("message"):
            result.append(event(problem["node"], "UpgradeProblem", problem["message"], WARNING, stamp))
    for drain in drain_results or []:
        node = drain.get("node") or (drain.get("item") or {}).get("name")
        if not node or drain.get("skipped") or drain.get("failed"):
            continue
        budgets = sorted({"%s/%s" % (b.get("namespace"), b["pdb"]) for b in drain.get("blocked") or [] if b.get("pdb")})
        if budgets:
            result.append(event(node, "UpgradeDrainBlocked", "drain blocked by PodDisruptionBudget %s" % ", ".join(budgets),
                                WARNING, stamp))
    return result


def event_name(node, reason, message):
    """One name per node, reason and message: a repeat finds the Event it aggregates into."""
    digest = hashlib.sha256(("%s\0%s\0%s" % (node, reason, message)).encode("utf-8")).hexdigest()[:16]
    return "%s.%s" % (node[:200], digest)


def event_body(item, stamp, instance):
    when = item.get("time") or stamp
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": event_name(item["node"], item["reason"], item["message"]), "namespace": NAMESPACE},
        # The kubelet's convention for Node events: uid = the node's name (kubectl describe node finds both).
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": item["node"], "uid": item["node"]},
        "reason": item["reason"], "message": item["message"][:1024], "type": item.get("type") or NORMAL,
        "count": 1, "firstTimestamp": when, "lastTimestamp": when,
        "source": {"component": COMPONENT}, "reportingComponent": COMPONENT, "reportingInstance": instance,
    }


def write(api_client, items, stamp, instance=COMPONENT):
    """Create each Event, or raise the count of the same Event already there. Returns (written, errors):
    an Event that cannot be written is an error to warn about, never a reason to stop the upgrade."""
    # Here, not at the top: the pure part serves the role's filters on the controller too (progress.py).
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import kube

    path = kube.path_of("/api/v1/namespaces", NAMESPACE) + "/events"
    written, errors, seen = 0, [], set()
    for item in items:
        key = (item["node"], item["reason"], item["message"])
        if key in seen:
            continue
        seen.add(key)
        if len(seen) > MAX_PER_WRITE:
            errors.append("%d more Events were not written (at most %d per write)" % (len(items) - MAX_PER_WRITE, MAX_PER_WRITE))
            break
        body = event_body(item, stamp, instance)
        try:
            try:
                kube.request(api_client, "POST", path, body=body)
            except kube.ApiException as exc:
                if not kube.is_status(exc, 409):
                    raise
                # The same Event is there: aggregate into it, as Kubernetes' recorder does.
                named = kube.path_of(path, body["metadata"]["name"])
                known = kube.request(api_client, "GET", named)
                kube.request(api_client, "PATCH", named, body={"count": int(known.get("count") or 1) + 1,
                                                               "lastTimestamp": item.get("time") or stamp},
                             content_type="application/merge-patch+json")
            written += 1
        except kube.ApiException as exc:
            errors.append("Event %s on node %s: %s" % (item["reason"], item["node"], kube.api_error_message(exc)))
    return written, errors
