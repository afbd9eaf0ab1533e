# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""How a pass is shown and journaled (pure formatting): the progress line with the ETA, and the journal
record of a pass. The role's filters (plugins/filter/upgrade.py) and the upgrade_step action plugin share
these functions."""

from __future__ import annotations

import datetime

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import events


def _ago(since, now):
    if not since:
        return ""
    try:
        moment = datetime.datetime.fromisoformat(str(since).replace("Z", "+00:00"))
    except ValueError:
        return ""
    seconds = max(0, int((now - moment).total_seconds()))
    return " %dm%02ds" % divmod(seconds, 60) if seconds >= 60 else " %ds" % seconds


def _duration(seconds):
    if seconds is None:
        return "unknown"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return "%dh%02dm" % (hours, minutes) if hours else "%dm%02ds" % (minutes, secs)


def _parse(text):
    return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))


def progress_line(facts, pass_number=0, now=None):
    """One line per pass: nodes done/total, pairs in flight with their phases, what waits on what, ETA."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    progress = facts.get("progress") or {}
    parts = ["pass %s: %s/%s nodes on the image (%s%%)" % (
        pass_number, progress.get("done", 0), progress.get("total", 0), progress.get("percent", 0))]
    parts += (_moving_parts(facts, now) + _foreign_parts(facts) + _waiting_parts(facts) + _problem_parts(facts)
              + _ending_parts(facts))
    return "; ".join(parts)


def _moving_parts(facts, now):
    """The progress line on the nodes that are coming and going: donors with their heirs, joining, surplus."""
    parts = []
    donors = facts.get("donors") or []
    if donors:
        parts.append("in flight: " + ", ".join(
            "%s %s%s (heir %s%s)" % (d["name"], d.get("phase") or "paired", _ago(d.get("phase_since"), now),
                                     d.get("heir") or "?", " Ready" if d.get("heir_ready") else " not Ready")
            for d in donors))
    joining = facts.get("joining") or []
    if joining:
        parts.append("%d joining" % len(joining))
    plan = facts.get("plan") or {}
    # Nodes no donor needs (a surplus heir, or this upgrade's instance beyond the group's start count): marked
    # obsolete in this pass or on their way out; they are not in the nodes count above.
    surplus = sorted(set((facts.get("nodes") or {}).get("obsolete") or []) | set(plan.get("obsolete") or []))
    if surplus:
        parts.append("removing %d surplus node(s): %s" % (len(surplus), ", ".join(surplus)))
    return parts


def _foreign_parts(facts):
    parts = []
    # Nodes on the image that this upgrade did not create: capacity, never a heir (issue 25).
    foreign = [f["name"] for f in facts.get("foreign") or []]
    if foreign:
        parts.append("%s run%s the target image but this upgrade did not create %s: left alone" % (
            ", ".join(foreign[:5]) + (" and %d more" % (len(foreign) - 5) if len(foreign) > 5 else ""),
            "s" if len(foreign) == 1 else "", "it" if len(foreign) == 1 else "them"))
    return parts


def _waiting_parts(facts):
    """The progress line on what waits: creations the plan holds back, and etcd member removals."""
    parts = []
    waits = ["%s: %s" % (b.get("group", "?").rsplit("/", 1)[-1], b.get("reason")) for b in
             (facts.get("plan") or {}).get("create_blocked") or []]
    if waits:
        parts.append("waiting: " + "; ".join(waits))
    # An etcd member removal refused for now (another member unhealthy, quorum at stake): what and why.
    etcd_waits = ["%s (%s)" % (w.get("name"), w.get("msg")) for w in facts.get("etcd_waiting") or []]
    if etcd_waits:
        parts.append("waiting on etcd to remove the member of " + "; ".join(etcd_waits))
    return parts


# How the progress line names the problems of each action, in its order.
_PROBLEM_WORDS = (
    # Inconsistencies the cross-checks found: each named, and the node left alone (issue 13).
    ("left alone", "left alone: "),
    # Steps the executor's guard refused in this pass (the cross-checks on fresher data than the plan's).
    ("refused", "refused: "),
    # Extra nodes nothing proves this upgrade created (a kill before the journal record): kept, and named.
    ("kept", "kept, not provably ours: "),
)


def _problem_parts(facts):
    """The progress line on the named problems, by what was done about them: the first five of each, then how many
    more."""
    parts = []
    for action, words in _PROBLEM_WORDS:
        messages = [p["message"] for p in facts.get("problems") or [] if p.get("action") == action]
        if messages:
            more = "; and %d more" % (len(messages) - 5) if len(messages) > 5 else ""
            parts.append(words + "; ".join(messages[:5]) + more)
    return parts


def _ending_parts(facts):
    parts = []
    if facts.get("stop"):
        parts.append("cannot go on: " + facts["stop"])
    eta = facts.get("eta") or {}
    if eta.get("seconds") is not None:
        parts.append("ETA %s (%s)" % (_duration(eta["seconds"]), eta.get("finish")))
    if facts.get("done"):
        parts.append("done")
    return parts


# The executor's API time buckets the journal keeps (its "wait" is sleeping between looks, not API time).
API_BUCKETS = ("cloud", "kube", "drain", "etcd")


def journal_record(facts, pass_number=0, drain_results=None, deleted=None, now=None, run=None, api_seconds=None,
                   engine_id=None, etcd_removed=None, cloud_calls=None, kube_calls=None):
    """What this pass saw, as an upgrade_journal record: per donor its group, heir, role and the time it
    entered its current phase (the journal keeps the earliest time per phase, so phases accumulate);
    evicted pods from node_drain results; `deleted` names nodes whose replacement finished now, and
    facts['donors_gone'] those found gone (deleted by a run that was killed before it recorded it). A drain
    that did not finish in this pass is a retry (the next pass drains again), counted by the attempt ID
    `run#pass` (`run`: when the run started), so a resumed run adds to the count. Instances the plan
    deletes without a Node (never joined, failed, orphaned) are recorded with the reason. With `run`, the
    attempt `run` is recorded with its passes so far, and with `api_seconds` ({cloud, kube, drain, etcd}: the
    seconds the executor `engine_id` spent in those calls so far) its API time, and with `cloud_calls` (call_rate's
    stats: calls by kind, peak per minute, limit) that executor's cloud calls so far, and with `kube_calls` ({calls, by_kind}:
    kube.CallCount) its Kubernetes requests so far. `etcd_removed` names donors whose
    etcd member went in this pass (they are often deleted in the same pass, so no later read sees that phase)."""
    stamp = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    nodes = _donor_entries(facts)
    nodes.update(donors_gone_record(facts, stamp)["nodes"])
    _add_drains(nodes, drain_results, stamp, "%s#%s" % (run or "", int(pass_number or 0)))
    for name in etcd_removed or []:
        nodes.setdefault(name, {"phases": {}})["phases"].setdefault("etcd-removed", stamp)
    for name in deleted or []:
        nodes.setdefault(name, {"phases": {}})["phases"]["deleted"] = stamp
    removed = {i["provider_id"]: {"group": i.get("group"), "reason": i.get("reason")}
               for i in (facts.get("plan") or {}).get("delete_instances") or [] if i.get("provider_id")}
    record = {"passes": int(pass_number or 0), "nodes": nodes, "instances_removed": removed}
    # Instances a create intent accounts for whose own record a killed run never wrote: recorded now.
    recovered = (facts.get("plan") or {}).get("record_created")
    if recovered:
        record["instances_created"] = dict(recovered)
    # Warnings as Events on the Nodes (upgrade_journal writes them; the journal does not keep them).
    warnings = events.pass_events(facts.get("problems"), drain_results, stamp)
    if warnings:
        record["events"] = warnings
    if run:
        record["attempts"] = _attempts(run, pass_number, api_seconds, engine_id, cloud_calls, kube_calls)
    return record


def _attempts(run, pass_number, api_seconds, engine_id, cloud_calls=None, kube_calls=None):
    # This attempt's passes so far (the report sums every attempt's).
    attempts = {run: {"started": run, "passes": int(pass_number or 0)}}
    if api_seconds and engine_id:
        attempts[run]["api_seconds"] = {engine_id: {k: round(float(v), 1) for k, v in api_seconds.items()
                                                    if k in API_BUCKETS}}
    if cloud_calls and engine_id:
        attempts[run]["cloud_calls"] = {engine_id: dict(cloud_calls)}
    if kube_calls and engine_id:
        attempts[run]["kube_calls"] = {engine_id: dict(kube_calls)}
    return attempts


def _donor_entries(facts):
    """The journal's entry of each donor in facts: group, heir, role and the phases it went through so far."""
    nodes = {}
    for donor in facts.get("donors") or []:
        entry = {"group": donor.get("group"), "heir": donor.get("heir"), "role": donor.get("role"), "phases": {}}
        if donor.get("phase") and donor.get("phase_since"):
            entry["phases"][donor["phase"]] = donor["phase_since"]
        if donor.get("paired_at"):
            entry["phases"].setdefault("paired", donor["paired_at"])
        # Before the pair: the heir's instance created, its Node registered, and Ready (the journal keeps the
        # earliest time of each, so the timeline has no gap while the heir is made).
        for phase, key in (("creating", "heir_created"), ("joined", "heir_joined"), ("heir-ready", "heir_ready_since")):
            if donor.get(key):
                entry["phases"].setdefault(phase, donor[key])
        nodes[donor["name"]] = entry
    return nodes


def _add_drains(nodes, drain_results, stamp, attempt):
    """The drains of this pass into the journal's entries: evicted pods, the drain's start and end, a drain that
    did not finish as a retry of `attempt` (run#pass), and how long a PDB has held it."""
    for result in drain_results or []:
        name = result.get("node") or (result.get("item") or {}).get("name")
        if not name or result.get("skipped") or result.get("failed"):
            continue
        entry = nodes.setdefault(name, {"phases": {}})
        entry["evicted"] = ["%s/%s" % (p.get("namespace"), p.get("pod")) for p in result.get("evicted") or []]
        if result.get("forced"):
            # Pods the drain ladder deleted without eviction or forced, each with its step and rule.
            entry["forced"] = [forced_label(p) for p in result["forced"]]
        owners = {"%s/%s" % (p.get("namespace"), p.get("pod")): "%s/%s" % (p.get("namespace"), p["owner"])
                  for p in result.get("evicted") or [] if p.get("owner")}
        if owners:
            entry["evicted_owners"] = owners
        started = result.get("drain_started") or stamp
        entry["phases"].setdefault("draining", started)
        if result.get("drained"):
            entry["phases"]["drained"] = stamp
        else:
            entry["retries"] = {"drain": [attempt]}
        if result.get("reason") == "pdb_blocked":
            # Seconds this drain has waited so far; the journal keeps the largest value it sees.
            entry["waits"] = {"pdb_seconds": int((_parse(stamp) - _parse(started)).total_seconds())}


def forced_label(pod):
    """How the journal and the report name a pod the drain took past eviction: namespace/pod (step, rule)."""
    how = ", ".join(filter(None, (pod.get("step") or "deleted on timeout", pod.get("policy"))))
    return "%s/%s (%s)" % (pod.get("namespace"), pod.get("pod"), how)


def donors_gone_record(facts, stamp):
    """The journal record of facts['donors_gone']: donors found gone while their heir still named them
    (deleted by a run killed before it journaled that), replaced as of `stamp` (RFC 3339). Written before the
    heir's promotion forgets the donor's name, and again with the pass."""
    nodes = {}
    for gone in facts.get("donors_gone") or []:
        entry = nodes[gone["name"]] = {k: gone[k] for k in ("group", "heir", "role") if gone.get(k)}
        entry["phases"] = {"paired": gone["paired_at"]} if gone.get("paired_at") else {}
        entry["phases"]["deleted"] = stamp
    return {"nodes": nodes}


def phase_entries(names, phase):
    """[{name, phase}] for node_pair's phases option."""
    return [{"name": name, "phase": phase} for name in names or []]


# upgrade_step's --diff: each step of a slice (executor `did`) as the state it found and the state it left.
_NODE_FOUND = {"patch": "annotations and labels as read", "uncordon": "cordoned", "drain": "not drained",
               "etcd_remove": "etcd member present", "delete": "present"}


def _node_left(kind, evicted=0, drained=False):
    if kind == "drain":
        return "%s (%d pod(s) evicted)" % ("drained" if drained else "draining", evicted)
    return {"patch": "annotations and labels written", "uncordon": "uncordoned", "etcd_remove": "etcd member removed",
            "delete": "deleted"}[kind]


def slice_diff(did, image):
    """What a slice changed (its `did`), as Ansible's diff: dict(before=..., after=...) with, where the slice
    touched them, `groups` (pointed at `image`, instances created), `nodes` (the state the slice's first step on a
    node found, and what each step left, in order: repeated writes and the drain's rounds said once, the pods
    evicted summed) and `instances` (deleted without a Node: never joined, failed, orphaned). None when the slice
    changed nothing (a create the cloud refused made no instance)."""
    before, after, steps = {}, {}, {}
    for step in did or []:
        kind = step.get("step")
        if kind == "set_group_image":
            before.setdefault("groups", {}).setdefault(step["group"], {})["image"] = "another image"
            after.setdefault("groups", {}).setdefault(step["group"], {})["image"] = image
        elif kind == "create" and step.get("count"):
            group = after.setdefault("groups", {}).setdefault(step["group"], {})
            group["instances_created"] = group.get("instances_created", 0) + int(step["count"])
        elif kind == "delete_instance":
            before.setdefault("instances", {})[step["provider_id"]] = "present"
            after.setdefault("instances", {})[step["provider_id"]] = "deleted (%s)" % (step.get("reason") or "no reason given")
        elif kind in _NODE_FOUND:
            before.setdefault("nodes", {}).setdefault(step["name"], _NODE_FOUND[kind])
            done = steps.setdefault(step["name"], [])
            if done and done[-1][0] == kind:
                # One more round of the same drain (its pods summed), or the same write again.
                done[-1] = (kind, done[-1][1] + int(step.get("evicted") or 0), bool(step.get("drained")))
            else:
                done.append((kind, int(step.get("evicted") or 0), bool(step.get("drained"))))
    for name, done in steps.items():
        after.setdefault("nodes", {})[name] = ", ".join(_node_left(*entry) for entry in done)
    return dict(before=before, after=after) if after else None
