# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The run journal and the report made from it (pure: plain dicts in, text out).

The journal is what a run observed, kept in the cluster so that a resumed run reports on the whole
upgrade: per replaced node its group, heir, role, the first time each phase was seen, the pods evicted,
and the waits and retries counted; and every attempt (every run of the playbook on this upgrade): when it
started, how many passes it made and how it ended. An attempt that never recorded its end was killed.
Merging is idempotent: recording the same observation twice changes nothing, so a pass that is retried
or a run that is resumed never double-counts.
"""

from __future__ import annotations

import datetime
import html
import json
import uuid

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import cloud_settings

# Phases in the order a replacement goes through them; unknown phases sort after these, by time.
# creating: the heir's instance was created (the cloud's time); joined: the heir's Node registered; heir-ready:
# it turned Ready. They come before the donor's own phases, so the timeline has no gap while a heir is made.
PHASE_ORDER = ("pending", "creating", "joining", "joined", "paired", "heir-ready", "cordoned", "draining", "drained",
               "etcd-removed", "deleting", "deleted", "done")
PHASE_COLOURS = {
    "pending": "#d0d0d0", "creating": "#9ecae1", "joining": "#6baed6", "joined": "#6baed6", "paired": "#4292c6",
    "heir-ready": "#2171b5", "cordoned": "#fdd0a2", "draining": "#fd8d3c", "drained": "#e6550d",
    "etcd-removed": "#a63603", "deleting": "#74c476", "deleted": "#31a354", "done": "#006d2c",
}
_FALLBACK_COLOURS = ("#bcbddc", "#9e9ac8", "#807dba", "#6a51a3")


def parse_time(text):
    if not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment


def iso(moment):
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_journal(image, started):
    return {"image": image, "started": started, "finished": None, "passes": 0, "nodes": {}}


OUTCOMES = ("done", "failed", "stopped", "aborted")  # what an attempt records at its end; one that recorded none was killed


def merge(journal, record):
    """Fold one observation into the journal and return it. `record` may hold:
    image, started, finished, passes (max kept); nodes: {donor: {group, heir, role, phases: {phase: time},
    evicted: [namespace/pod], waits: {reason: count}, retries: {step: count or [attempt id]}, error}};
    instances_removed: {provider_id: {group, reason}} (instances deleted without ever being a node);
    instances_created: {provider_id: {group, created}} (instances this upgrade created; first record kept);
    start_counts: {group: nodes} (how many nodes each group had before this upgrade created any; first kept);
    group_images: {group: {before, at}} (the image each group had before this upgrade pointed it at its target; first
    kept); abort: {requested, started, ended, outcome, ...} (an abort of this upgrade, abort_plan.py; the last given);
    create_intents: {key: {group, at, count, target_size, settled}} (creations about to be made, written before each
    create call, with the group's target size read before it where the cloud reports one; `settled` after it, with
    how many it made; each field's first record kept);
    attempts: {attempt ID: {started, passes, outcome (done, failed, stopped from outside, or aborted), ended, cause}}
    (passes: the largest seen; started: the first; outcome, ended and cause: the last given);
    gate_due (a health gate is due: the next run runs it first), gate_owed (a replacement finished since the last
    gate passed: the next run holds new heirs until the batch finished and the gate ran) and gate_baseline (the
    workloads running before the batch, gate.running_workloads): the last given; gates: {gate ID: {after, started,
    ended, outcome (passed or failed), seconds: {check: seconds}, failure}} (per field the last given; seconds the
    largest per check).
    Phase times keep the earliest seen; evicted pods are a set; a counter given as a number keeps the
    largest value seen (each pass reports totals so far, never increments), one given as a list of attempt
    IDs is a set whose size is the count (so passes of several runs add up, and a repeated pass does not)."""
    for key in ("image", "started"):
        if record.get(key) and not journal.get(key):
            journal[key] = record[key]
    if record.get("finished"):
        journal["finished"] = record["finished"]
    journal["passes"] = max(journal.get("passes") or 0, record.get("passes") or 0)
    nodes = journal.setdefault("nodes", {})
    for name, seen in (record.get("nodes") or {}).items():
        _merge_node(nodes.setdefault(name, {"phases": {}, "evicted": [], "waits": {}, "retries": {}}), seen)
    attempts = journal.setdefault("attempts", {})
    for attempt_id, seen in (record.get("attempts") or {}).items():
        _merge_attempt(attempts.setdefault(str(attempt_id), {}), seen or {})
    if not attempts:
        del journal["attempts"]
    _merge_gates(journal, record)
    _merge_first_records(journal, record)
    # The PreferNoSchedule taint on the nodes to be replaced (leaving_marks): per node when it was set and taken off.
    for name, seen in (record.get("replacing_taints") or {}).items():
        journal.setdefault("replacing_taints", {}).setdefault(name, {}).update(seen or {})
    if record.get("abort"):
        journal.setdefault("abort", {}).update(record["abort"])
    cloud_settings.merge(journal, record)
    return journal


def _merge_node(entry, seen):
    """One node's observation into its journal entry (merge)."""
    for key in ("group", "heir", "role", "error"):
        if seen.get(key):
            entry[key] = seen[key]
    phases = entry.setdefault("phases", {})
    for phase, when in (seen.get("phases") or {}).items():
        moment = parse_time(when)
        if moment is None:
            continue
        known = parse_time(phases.get(phase))
        if known is None or moment < known:
            phases[phase] = iso(moment)
    seen_evicted = set(seen.get("evicted") or [])
    if "evicted_count" in entry:  # compacted (see compact): the names are gone, the count stays
        entry["evicted_count"] = max(int(entry["evicted_count"]), len(seen_evicted))
    else:
        entry["evicted"] = sorted(set(entry.get("evicted") or []) | seen_evicted)
    if seen.get("forced"):
        entry["forced"] = sorted(set(entry.get("forced") or []) | set(seen["forced"]))
    if seen.get("evicted_owners"):
        entry.setdefault("evicted_owners", {}).update(seen["evicted_owners"])
    for counter in ("waits", "retries"):
        totals = entry.setdefault(counter, {})
        for key, value in (seen.get(counter) or {}).items():
            totals[key] = _merge_counter(totals.get(key), value)


def _merge_attempt(entry, seen):
    """One attempt's observation into its journal entry (merge)."""
    if seen.get("started") and not entry.get("started"):
        entry["started"] = seen["started"]
    if seen.get("passes") is not None:
        entry["passes"] = max(int(entry.get("passes") or 0), int(seen["passes"] or 0))
    if seen.get("outcome") in OUTCOMES:
        entry["outcome"] = seen["outcome"]
    if seen.get("ended"):
        entry["ended"] = seen["ended"]
    if seen.get("cause"):
        entry["cause"] = str(seen["cause"])
    # Each executor's cumulative API seconds: the largest value seen per executor and bucket.
    for engine_id, buckets in (seen.get("api_seconds") or {}).items():
        _keep_largest(entry.setdefault("api_seconds", {}).setdefault(str(engine_id), {}), buckets)
    # Each executor's cloud calls so far (call_rate stats): every count the largest seen, the limit the last given.
    for engine_id, calls in (seen.get("cloud_calls") or {}).items():
        known = entry.setdefault("cloud_calls", {}).setdefault(str(engine_id), {})
        for key, value in (calls or {}).items():
            if key == "by_kind":
                _keep_largest(known.setdefault("by_kind", {}), value)
            elif key in _CALL_COUNTS:
                known[key] = max(known.get(key) or 0, value or 0)
            elif value is not None:
                known[key] = value
    # Each executor's Kubernetes requests so far (kube.CallCount): the largest count seen, in total and by kind.
    for engine_id, calls in (seen.get("kube_calls") or {}).items():
        known = entry.setdefault("kube_calls", {}).setdefault(str(engine_id), {})
        _keep_largest(known.setdefault("by_kind", {}), (calls or {}).get("by_kind"))
        known["calls"] = max(known.get("calls") or 0, (calls or {}).get("calls") or 0)


def _keep_largest(known, seen):
    """Each number of `seen` into `known` where it is larger (totals so far, told again and again)."""
    for key, value in (seen or {}).items():
        known[key] = max(known.get(key) or 0, value or 0)


# The cloud call figures that only grow (call_rate.CallRate.stats); the limit and its source are the last given.
_CALL_COUNTS = ("calls", "peak_per_minute", "throttled", "waited_seconds")


def _merge_gates(journal, record):
    """The health gates' state and records (merge): the last given, and per check the largest seconds."""
    for key in ("gate_due", "gate_owed", "gate_baseline"):
        if key in record:
            journal[key] = record[key]
    for gate_id, seen in (record.get("gates") or {}).items():
        entry = journal.setdefault("gates", {}).setdefault(str(gate_id), {})
        for key, value in (seen or {}).items():
            if key == "seconds":
                _keep_largest(entry.setdefault("seconds", {}), value)
            elif value is not None:
                entry[key] = value


def _merge_first_records(journal, record):
    """The instances removed, and the records whose first version wins (merge): created instances, start counts,
    delete-first removals and refills, create intents."""
    removed = journal.setdefault("instances_removed", {})
    for provider_id, seen in (record.get("instances_removed") or {}).items():
        removed.setdefault(provider_id, {}).update({k: v for k, v in (seen or {}).items() if v})
    # What this upgrade created, and how many nodes each group had before: the first record of each wins, so
    # the proof that an instance is ours (the planner removes only those as surplus) is never rewritten.
    # So are the workers removed delete-first (their labels, for the refill that replaces them) and which refill
    # replaced each (rolling_upgrade_max_unavailable). So is the image each group had before the run pointed it at
    # the new one (an abort points it back).
    for key in ("instances_created", "start_counts", "removed_first", "refills", "group_images"):
        seen = record.get(key) or {}
        if seen or key in journal:
            known = journal.setdefault(key, {})
            for ident, value in seen.items():
                if ident and value is not None:
                    known.setdefault(ident, value)
    # The creations this upgrade was about to make, written before each create call and settled after it with how
    # many it made: each field's first record wins too.
    for ident, value in (record.get("create_intents") or {}).items():
        if ident and isinstance(value, dict):
            known = journal.setdefault("create_intents", {}).setdefault(ident, {})
            for field, seen in value.items():
                known.setdefault(field, seen)


def created_record(instances, scaling_groups, now):
    """The journal record that proves `instances` (Instance values, or their dicts as csp_node returns them) were
    created by this upgrade: {instances_created: {providerID: {group, created}}, start_counts: {group: nodes}}.
    `scaling_groups` are the planner's group reports of the pass that created them (read before the creation):
    their `nodes_serving` is what each group held then, so the first such record holds the count at the start."""
    def field_of(inst, name):
        return inst.get(name) if isinstance(inst, dict) else getattr(inst, name, None)

    created = {}
    for inst in instances or []:
        provider_id = field_of(inst, "provider_id")
        if not provider_id:
            continue
        when = field_of(inst, "created_at")
        stamp = when if isinstance(when, (int, float)) and not isinstance(when, bool) else now
        created[provider_id] = {"group": field_of(inst, "group_id"),
                                "created": iso(datetime.datetime.fromtimestamp(stamp, datetime.timezone.utc))}
    counts = {g["id"]: int(g["nodes_serving"]) for g in scaling_groups or []
              if g.get("id") and isinstance(g.get("nodes_serving"), int)}
    return {"instances_created": created, "start_counts": counts}


def intent_record(creations, now, tag=None, target_sizes=None, open_before=None):
    """The record of creations about to be made, written before the create call ({create_intents: {key: {group, at,
    count, after[, target_size]}}}), and {group: key}. `creations`: [{group, count}] as the plan's `create`; `at` is
    `now` rounded down to the second (an instance the cloud creates after it is at or after `at`); the key is unique
    per call. `target_sizes`: {group: the target size the cloud reported before the call}, where it reports one.
    `open_before`: {group: [keys of its intents not settled yet]} where the caller knows them, recorded as `after`:
    their instances were made before this call (the target size counts them), which creation times to the second
    cannot tell."""
    moment = datetime.datetime.fromtimestamp(int(now), datetime.timezone.utc)
    tag = tag or uuid.uuid4().hex[:6]
    sizes = {str(group).lower(): size for group, size in (target_sizes or {}).items()
             if isinstance(size, int) and not isinstance(size, bool)}
    intents, keys = {}, {}
    for item in creations or []:
        key = "%s@%s#%s" % (item["group"], iso(moment), tag)
        intents[key] = {"group": item["group"], "at": iso(moment), "count": int(item["count"])}
        if open_before is not None:
            intents[key]["after"] = sorted(open_before.get(item["group"]) or [])
        if str(item["group"]).lower() in sizes:
            intents[key]["target_size"] = sizes[str(item["group"]).lower()]
        keys[item["group"]] = key
    return {"create_intents": intents}, keys


def settled_record(record, intents):
    """A created_record whose instances name the create intent of their group (`intents`: {group: intent key}),
    with each of those intents settled by how many instances its group got."""
    by_group = {str(group).lower(): key for group, key in (intents or {}).items() if key}
    settled = {key: 0 for key in by_group.values()}
    for entry in record["instances_created"].values():
        key = by_group.get(str(entry.get("group")).lower())
        if key:
            entry["intent"] = key
            settled[key] += 1
    if settled:
        record["create_intents"] = {key: {"settled": count} for key, count in settled.items()}
    return record


def _merge_counter(known, seen):
    if isinstance(seen, list) and (known is None or isinstance(known, list)):
        return sorted(set(known or []) | set(seen))
    if isinstance(known, list) and seen is None:
        return known
    return max(count(known), count(seen))


def is_finished(entry):
    phases = entry.get("phases") or {}
    return "deleted" in phases or "done" in phases


def compact(journal):
    """Make a journal that outgrew its ConfigMap smaller without changing its report: finished replacements
    keep how many pods were evicted and how many retries they had, not the names and attempt IDs (nothing is
    recorded for them any more). Returns the journal."""
    for entry in (journal.get("nodes") or {}).values():
        if not is_finished(entry):
            continue
        if "evicted_count" not in entry:
            entry["evicted_count"] = len(entry.get("evicted") or [])
            entry["evicted"] = []
        entry.pop("evicted_owners", None)
        entry["retries"] = {step: count(value) for step, value in (entry.get("retries") or {}).items()}
    return journal


def count(value):
    """A counter's value: a number, or the number of distinct attempt IDs."""
    return len(value) if isinstance(value, list) else int(value or 0)


def _phase_sort_key(item):
    phase, when = item
    rank = PHASE_ORDER.index(phase) if phase in PHASE_ORDER else len(PHASE_ORDER)
    return (parse_time(when), rank)


def segments(entry, end=None):
    """[(phase, start, end)] for one node, consecutive phases in time order; the last one runs to `end`
    (or is zero-length when the node is done)."""
    ordered = sorted(((p, t) for p, t in (entry.get("phases") or {}).items() if parse_time(t)), key=_phase_sort_key)
    result = []
    for index, (phase, when) in enumerate(ordered):
        start = parse_time(when)
        if index + 1 < len(ordered):
            stop = parse_time(ordered[index + 1][1])
        else:
            stop = start if phase in ("deleted", "done") else (end or start)
        result.append((phase, start, max(start, stop)))
    return result


def attempt_rows(journal):
    """[{id, started, ended, outcome, passes, cause}] of every attempt, oldest first. An attempt that recorded no
    end was killed (its process stopped without a word), unless it is the newest: that one may still run
    and is "unfinished"."""
    attempts = journal.get("attempts") or {}
    ordered = sorted(attempts.items(), key=lambda item: (parse_time(item[1].get("started") or item[0])
                                                         or datetime.datetime.min.replace(tzinfo=datetime.timezone.utc), item[0]))
    rows = []
    for index, (attempt_id, entry) in enumerate(ordered):
        outcome = entry.get("outcome")
        if outcome not in OUTCOMES:
            outcome = "unfinished" if index == len(ordered) - 1 else "killed"
        rows.append({"id": attempt_id, "started": entry.get("started") or attempt_id, "ended": entry.get("ended") or "",
                     "outcome": outcome, "passes": int(entry.get("passes") or 0), "cause": entry.get("cause") or ""})
    return rows


# Where the wall time of the upgrade went: each moment goes to the first of these that some replacement was
# waiting on at that moment; what is left is the collection's own overhead.
BREAKDOWN = (
    ("drains_and_pdbs", "drains and PDBs (a donor draining)"),
    ("joins", "joins (a heir's Node registered, not yet Ready)"),
    ("cloud", "the cloud (a heir's instance created, its Node not yet registered)"),
)


def _waits(entry, end):
    """{category: [(start, stop)]} of one node's journal entry, from its phase segments."""
    segs = segments(entry, end)
    phases = {phase: (start, stop) for phase, start, stop in segs}
    waits = {key: [] for key, _label in BREAKDOWN}
    if "draining" in phases:
        start, stop = phases["draining"]
        drained = parse_time((entry.get("phases") or {}).get("drained"))
        waits["drains_and_pdbs"].append((start, max(start, drained) if drained else stop))
    if "joined" in phases:
        start, stop = phases["joined"]
        ready = parse_time((entry.get("phases") or {}).get("heir-ready"))
        waits["joins"].append((start, max(start, ready) if ready else stop))
    if "creating" in phases:
        waits["cloud"].append(phases["creating"])
    return waits


def _union(intervals):
    merged = []
    for start, stop in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return merged


def _minus(intervals, taken):
    """The parts of `intervals` (merged) outside `taken` (merged)."""
    result = []
    for start, stop in intervals:
        cursor = start
        for t_start, t_stop in taken:
            if t_stop <= cursor or t_start >= stop:
                continue
            if t_start > cursor:
                result.append((cursor, t_start))
            cursor = max(cursor, t_stop)
        if cursor < stop:
            result.append((cursor, stop))
    return result


_API_WORDS = {"cloud": "the cloud", "kube": "Kubernetes", "drain": "evictions", "etcd": "etcd"}


def time_breakdown(journal, now=None):
    """Seconds of the upgrade's wall time (journal started to finished, or `now`) spent waiting on drains and
    PDBs, on joins and on the cloud, each moment counted once (in that order), and the rest: the collection's
    own overhead (preflight, pass start-up, the time from a Ready heir to its drain, etcd removals and
    deletions, nothing in flight). `pdb_blocked_seconds` is the drains' time blocked by a PDB, summed over
    the nodes (it may overlap). None without a start."""
    started = parse_time(journal.get("started"))
    end = parse_time(journal.get("finished")) or now
    if started is None or end is None or end < started:
        return None
    waits = {key: [] for key, _label in BREAKDOWN}
    pdb = 0
    for entry in (journal.get("nodes") or {}).values():
        for key, intervals in _waits(entry, end).items():
            waits[key].extend((max(a, started), min(b, end)) for a, b in intervals)
        pdb += int((entry.get("waits") or {}).get("pdb_seconds") or 0)
    result, taken = {}, []
    for key, _label in BREAKDOWN:
        own = _minus(_union(waits[key]), taken)
        result[key + "_seconds"] = int(round(sum((b - a).total_seconds() for a, b in own)))
        taken = _union(taken + own)
    wall = int((end - started).total_seconds())
    result["overhead_seconds"] = max(0, wall - sum(result[key + "_seconds"] for key, _label in BREAKDOWN))
    result["wall_seconds"] = wall
    result["pdb_blocked_seconds"] = pdb
    return result


def api_seconds(journal):
    """{cloud, kube, drain, etcd}: seconds the step engine's executors spent in those calls, summed over every
    executor of every attempt; None when none recorded any (a journal written by the removed task-chain engine, or
    by modules composed in a playbook)."""
    totals = {}
    for attempt in (journal.get("attempts") or {}).values():
        for buckets in (attempt.get("api_seconds") or {}).values():
            for bucket, value in (buckets or {}).items():
                totals[bucket] = totals.get(bucket, 0.0) + float(value or 0)
    return {k: round(v, 1) for k, v in sorted(totals.items())} or None


def cloud_calls(journal):
    """The cloud API requests of the step engine's executors, summed over every executor of every attempt: {calls,
    by_kind, peak_per_minute (the highest of any executor: they run one after another), limit_per_minute and
    limit_source (of the executor with that peak), peak_fraction_of_limit, throttled (answers), waited_seconds (for
    the rate limit)}; None when none recorded any."""
    total = {"calls": 0, "by_kind": {}, "peak_per_minute": 0, "throttled": 0, "waited_seconds": 0.0}
    limits = []
    for attempt in (journal.get("attempts") or {}).values():
        for calls in (attempt.get("cloud_calls") or {}).values():
            calls = calls or {}
            total["calls"] += int(calls.get("calls") or 0)
            total["throttled"] += int(calls.get("throttled") or 0)
            total["waited_seconds"] += float(calls.get("waited_seconds") or 0)
            for kind, count in (calls.get("by_kind") or {}).items():
                total["by_kind"][kind] = total["by_kind"].get(kind, 0) + int(count or 0)
            peak, limit = int(calls.get("peak_per_minute") or 0), calls.get("limit_per_minute")
            limits.append((peak, float(limit) if limit else None, calls.get("limit_source")))
    if not limits:
        return None
    peak, limit, source = max(limits, key=lambda item: (item[0], -(item[1] or 0)))
    total.update(peak_per_minute=peak, limit_per_minute=limit, limit_source=source,
                 peak_fraction_of_limit=round(peak / limit, 3) if limit else None,
                 by_kind=dict(sorted(total["by_kind"].items())), waited_seconds=round(total["waited_seconds"], 1))
    return total


def kube_calls(journal, replaced=0):
    """The Kubernetes requests of the step engine's executors (node cache, writes, drains, journal), summed over every
    executor of every attempt: {calls, by_kind, per_replaced_node (None before a node was replaced)}; None when none
    recorded any."""
    total, seen = {"calls": 0, "by_kind": {}}, False
    for attempt in (journal.get("attempts") or {}).values():
        for calls in (attempt.get("kube_calls") or {}).values():
            seen = True
            total["calls"] += int((calls or {}).get("calls") or 0)
            for kind, count in ((calls or {}).get("by_kind") or {}).items():
                total["by_kind"][kind] = total["by_kind"].get(kind, 0) + int(count or 0)
    if not seen:
        return None
    total["by_kind"] = dict(sorted(total["by_kind"].items()))
    total["per_replaced_node"] = round(total["calls"] / float(replaced), 1) if replaced else None
    return total


def summarize(journal, now=None):
    """The report as one dict: totals, wall time and per-node rows with phase durations in seconds."""
    started = parse_time(journal.get("started"))
    finished = parse_time(journal.get("finished"))
    end = finished or now
    removed_first = journal.get("removed_first") or {}
    rows = [_node_row(name, journal["nodes"][name], end, name in removed_first) for name in sorted(journal.get("nodes") or {})]
    replaced = sum(1 for r in rows if r["done"] and r["kind"] != SURPLUS)
    attempts = attempt_rows(journal)
    outcomes = {}
    for attempt in attempts:
        outcomes[attempt["outcome"]] = outcomes.get(attempt["outcome"], 0) + 1
    return {
        "image": journal.get("image"),
        "started": journal.get("started"),
        "finished": journal.get("finished"),
        "wall_seconds": int((end - started).total_seconds()) if started and end else None,
        # Every attempt's passes: the wall time covers them all too.
        "passes": sum(a["passes"] for a in attempts) if attempts else (journal.get("passes") or 0),
        "attempts": attempts,
        "attempt_outcomes": outcomes,
        "nodes_replaced": replaced,
        "nodes_total": sum(1 for r in rows if r["kind"] != SURPLUS),
        "surplus_removed": sum(1 for r in rows if r["done"] and r["kind"] == SURPLUS),
        "pods_evicted": sum(r["pods_evicted"] for r in rows),
        "evictions": evictions(journal),
        "nodes": rows,
        "instances_removed": [dict(provider_id=pid, **info) for pid, info in sorted((journal.get("instances_removed") or {}).items())],
        "time_breakdown": time_breakdown(journal, now),
        "api_seconds": api_seconds(journal),
        "cloud_calls": cloud_calls(journal),
        "kube_calls": kube_calls(journal, replaced),
        "gates": gate_rows(journal),
        "cloud_settings": cloud_settings.rows(journal),
        "cloud_settings_unread": cloud_settings.unread_rows(journal),
    }


def evictions(journal):
    """How often each pod was evicted: by name (`namespace/pod`; above 1 only for a pod that keeps its name, such as a
    StatefulSet's) and by owner (`namespace/Kind/name`: a Deployment's pods under their ReplicaSet, whose evicted pods
    come back under new names); `most_by_name`, the largest count by name. A compacted entry keeps no names."""
    by_name, by_owner = {}, {}
    for entry in (journal.get("nodes") or {}).values():
        owners = entry.get("evicted_owners") or {}
        for pod in entry.get("evicted") or []:
            by_name[pod] = by_name.get(pod, 0) + 1
            if owners.get(pod):
                by_owner[owners[pod]] = by_owner.get(owners[pod], 0) + 1
    return {"by_name": dict(sorted(by_name.items())), "by_owner": dict(sorted(by_owner.items())),
            "most_by_name": max(by_name.values()) if by_name else 0}


# What a node's row is: a donor its heir replaces, a worker removed delete-first (its refill comes after it), or a
# node this upgrade created that no donor needed (a heir whose donor the cloud recreated in place on the image, say),
# removed as surplus. Only the first two are nodes replaced.
DONOR, REMOVED_FIRST, SURPLUS = "donor", "removed first", "surplus"


def _node_row(name, entry, end, removed_first=False):
    """One node's row: what it is (DONOR, REMOVED_FIRST, SURPLUS: a node with neither heir nor delete-first record
    was marked obsolete as surplus), its phases, their durations in seconds, evictions, waits, retries, outcome."""
    segs = segments(entry, end)
    durations = {}
    for phase, start, stop in segs:
        durations[phase] = durations.get(phase, 0) + int((stop - start).total_seconds())
    first = segs[0][1] if segs else None
    last = segs[-1][2] if segs else None
    return {
        "node": name,
        "heir": entry.get("heir") or "",
        "group": entry.get("group") or "",
        "role": entry.get("role") or "",
        "kind": REMOVED_FIRST if removed_first else DONOR if entry.get("heir") else SURPLUS,
        "phases": dict(entry.get("phases") or {}),
        "phase_seconds": durations,
        "total_seconds": int((last - first).total_seconds()) if first and last else 0,
        "pods_evicted": max(len(entry.get("evicted") or []), int(entry.get("evicted_count") or 0)),
        "evicted": list(entry.get("evicted") or []),
        "forced": list(entry.get("forced") or []),
        "waits": dict(entry.get("waits") or {}),
        "retries": {step: count(value) for step, value in (entry.get("retries") or {}).items() if count(value)},
        "done": is_finished(entry),
        "error": entry.get("error") or "",
    }


# The checks of a health gate in the report's order, and what the report calls them (gate.CHECKS, then the user's).
GATE_CHECKS = (("nodes_ready", "nodes Ready"), ("system_pods_ready", "system pods Ready"),
               ("no_new_pending", "no pod Pending that ran before"), ("soak", "soak"), ("user_tasks", "your checks"))


def gate_rows(journal):
    """The health gates in the order they started: {started, ended, after, outcome (passed, failed, or unfinished:
    a run stopped in it), seconds: {check: seconds}, total_seconds, failure}."""
    rows = []
    for gate_id, entry in sorted((journal.get("gates") or {}).items()):
        started, ended = parse_time(entry.get("started") or gate_id), parse_time(entry.get("ended"))
        rows.append(dict(started=entry.get("started") or gate_id, ended=entry.get("ended"), after=entry.get("after") or "",
                         outcome=entry.get("outcome") or "unfinished", seconds=dict(entry.get("seconds") or {}),
                         total_seconds=int((ended - started).total_seconds()) if started and ended else None,
                         failure=entry.get("failure") or ""))
    return rows


def _duration(seconds):
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return "%dh%02dm%02ds" % (hours, minutes, secs) if hours else ("%dm%02ds" % (minutes, secs) if minutes else "%ds" % secs)


def render_markdown(summary):
    lines = _markdown_head(summary)
    lines += [
        "",
        "| node | heir | group | role | total | phases | pods evicted | waits | retries |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in summary["nodes"]:
        lines += _markdown_node(row)
    lines += _markdown_evictions(summary.get("evictions") or {})
    lines += _markdown_removed(summary.get("instances_removed") or [])
    lines += _markdown_gates(summary.get("gates") or [])
    lines += _markdown_cloud_settings(summary.get("cloud_settings") or [])
    lines += _markdown_unread_settings(summary.get("cloud_settings_unread") or [])
    lines += _markdown_attempts(summary.get("attempts") or [])
    lines.append("")
    return "\n".join(lines)


def _markdown_head(summary):
    """The report's heading and its summary lines: the run, where the time went, API time, attempts."""
    lines = [
        "# Node image upgrade report",
        "",
        "- image: `%s`" % summary.get("image"),
        "- started: %s; finished: %s; wall time: %s; passes: %d" % (
            summary.get("started") or "-", summary.get("finished") or "not finished",
            _duration(summary.get("wall_seconds")), summary.get("passes") or 0),
        "- nodes replaced: %d of %d; pods evicted: %d; instances removed without joining: %d" % (
            summary["nodes_replaced"], summary["nodes_total"], summary["pods_evicted"],
            len(summary.get("instances_removed") or [])),
    ]
    if summary.get("surplus_removed"):
        lines[-1] += ("; surplus nodes removed: %d (new nodes no donor needed, such as a heir whose donor the cloud "
                      "recreated in place on the image; not counted as replaced)" % summary["surplus_removed"])
    spent = summary.get("time_breakdown")
    if spent:
        lines.append("- where the time went (each moment counted once, in this order): %s; this collection's own "
                     "overhead %s (preflight, pass start-up, a Ready heir waiting for its drain, etcd removals and "
                     "deletions)" % ("; ".join(_breakdown_parts(spent)), _duration(spent.get("overhead_seconds"))))
    calls = summary.get("api_seconds")
    if calls:
        lines.append("- time in API calls (within the above): %s" % ", ".join(
            "%s %s" % (_API_WORDS.get(k, k), _duration(v)) for k, v in calls.items()))
    clouds = summary.get("cloud_calls")
    if clouds:
        lines.append(_cloud_calls_line(clouds))
    kubes = summary.get("kube_calls")
    if kubes:
        lines.append(_kube_calls_line(kubes))
    attempts = summary.get("attempts") or []
    if attempts:
        lines.append("- attempts: %d (%s); passes summed over all of them" % (len(attempts), _outcome_counts(attempts)))
    return lines


def _cloud_calls_line(clouds):
    """The cloud API requests: how many, the peak per minute against the limit, by kind, and the throttling."""
    limit = clouds.get("limit_per_minute")
    against = ("; peak %d per minute, %.0f%% of the limit of %.0f per minute (%s)"
               % (clouds["peak_per_minute"], 100.0 * (clouds.get("peak_fraction_of_limit") or 0), limit,
                  "the cloud's default" if clouds.get("limit_source") == "default" else clouds.get("limit_source"))
               if limit else "; peak %d per minute" % clouds["peak_per_minute"])
    kinds = ", ".join("%s %d" % item for item in sorted(clouds.get("by_kind", {}).items(), key=lambda kv: (-kv[1], kv[0])))
    return "- cloud API requests: %d%s; throttling answers: %d; waited for the limit: %s%s" % (
        clouds["calls"], against, clouds.get("throttled") or 0, _duration(clouds.get("waited_seconds") or 0),
        "; by kind: %s" % kinds if kinds else "")


def _kube_calls_line(kubes):
    """The Kubernetes API requests: how many, per replaced node, by kind."""
    kinds = ", ".join("%s %d" % item for item in sorted(kubes.get("by_kind", {}).items(), key=lambda kv: (-kv[1], kv[0])))
    per_node = kubes.get("per_replaced_node")
    return "- Kubernetes API requests: %d%s%s" % (kubes["calls"], " (%s per replaced node)" % per_node if per_node else "",
                                                  "; by kind: %s" % kinds if kinds else "")


def _breakdown_parts(spent):
    parts = []
    for key, label in BREAKDOWN:
        part = "%s %s" % (label, _duration(spent.get(key + "_seconds")))
        if key == "drains_and_pdbs" and spent.get("pdb_blocked_seconds"):
            part += " (blocked by PDBs %s, summed over nodes)" % _duration(spent["pdb_blocked_seconds"])
        parts.append(part)
    return parts


def _markdown_node(row):
    phases = ", ".join("%s %s" % (p, _duration(s)) for p, s in row["phase_seconds"].items())
    waits = ", ".join("%s %s" % (k, v) for k, v in sorted(row["waits"].items())) or "-"
    retries = ", ".join("%s %s" % (k, v) for k, v in sorted(row["retries"].items())) or "-"
    lines = ["| %s | %s | %s | %s | %s | %s | %d | %s | %s |" % (
        row["node"], row["heir"] or ("- (%s)" % row["kind"] if row.get("kind") in (SURPLUS, REMOVED_FIRST) else "-"),
        row["group"] or "-", row["role"] or "-", _duration(row["total_seconds"]),
        phases or "-", row["pods_evicted"], waits, retries)]
    if row.get("forced"):
        lines.append("| | | | | | deleted past eviction: %s | | | |" % ", ".join(row["forced"]).replace("|", "/"))
    if row["error"]:
        lines.append("| | | | | | error: %s | | | |" % row["error"].replace("|", "/"))
    return lines


def _markdown_evictions(evicted):
    """Evictions per owner, and the pods evicted more than once under one name (a pod moved once never is)."""
    if not evicted.get("by_owner") and not evicted.get("most_by_name"):
        return []
    lines = ["", "Evictions per owner (a Deployment's pods under their ReplicaSet; more evictions than the owner has pods "
             "means some moved twice):", "", "| owner | evictions |", "|---|---|"]
    lines += ["| %s | %d |" % (owner, count) for owner, count in (evicted.get("by_owner") or {}).items()]
    again = ["%s (%d)" % (pod, count) for pod, count in (evicted.get("by_name") or {}).items() if count > 1]
    lines += ["", "Pods evicted more than once: %s" % (", ".join(again) if again else "none")]
    return lines


def _markdown_removed(removed):
    if not removed:
        return []
    lines = ["", "Instances removed without ever becoming a node (each one was created again when still needed):", "",
             "| instance | group | reason |", "|---|---|---|"]
    return lines + ["| %s | %s | %s |" % (i["provider_id"], i.get("group") or "-", (i.get("reason") or "-").replace("|", "/"))
                    for i in removed]


def _markdown_cloud_settings(settings):
    if not settings:
        return []
    lines = ["", "Cloud settings this upgrade changed for its runs (restored at the end; see docs/cloud-settings.md):", "",
             "| group | setting | before | during the run | changed | restored |", "|---|---|---|---|---|---|"]
    for row in settings:
        restored = row["restored"] or ("not yet: %s" % row["held"] if row["held"] else "not yet")
        cells = (row["group"], row["setting"], row["original"], row["neutral"], row["changed"] or "-", restored.replace("|", "/"))
        lines.append("| %s | %s | %s | %s | %s | %s |" % cells)
    return lines


def _markdown_unread_settings(unread):
    if not unread:
        return []
    lines = ["", "Cloud settings the run could not read and went on without (%s; the cloud may have acted on these "
             "groups by itself):" % cloud_settings.ALLOW_UNREADABLE, "", "| group | setting | first seen |", "|---|---|---|"]
    return lines + ["| %s | %s | %s |" % (row["group"], row["setting"], row["seen"] or "-") for row in unread]


def _markdown_gates(gates):
    if not gates:
        return []
    lines = ["", "Health gates (the time each check took to pass, from the gate's start; the soak overlaps the others):",
             "", "| gate | started | after | outcome | total | %s |" % " | ".join(label for _k, label in GATE_CHECKS),
             "|---|---|---|---|---|%s" % ("---|" * len(GATE_CHECKS))]
    for index, row in enumerate(gates, 1):
        lines.append("| %d | %s | %s | %s | %s | %s |" % (
            index, row["started"], row["after"] or "-", row["outcome"], _duration(row["total_seconds"]),
            " | ".join(_duration(row["seconds"][key]) if key in row["seconds"] else "-" for key, _l in GATE_CHECKS)))
    return lines + [""] + ["Gate %d failed: %s" % (index, row["failure"]) for index, row in enumerate(gates, 1) if row["failure"]]


def _markdown_attempts(attempts):
    if not attempts:
        return []
    lines = ["", "Attempts (runs of the playbook on this upgrade; one that never recorded its end was killed):", "",
             "| attempt | started | ended | how it ended | passes |", "|---|---|---|---|---|"]
    rows = ["| %d | %s | %s | %s | %d |" % (index, a["started"], a["ended"] or "-", a["outcome"], a["passes"])
            for index, a in enumerate(attempts, 1)]
    causes = ["Attempt %d %s: %s" % (index, a["outcome"], a["cause"]) for index, a in enumerate(attempts, 1) if a.get("cause")]
    return lines + rows + ([""] + causes if causes else [])


def _outcome_counts(attempts):
    counts = {}
    for attempt in attempts:
        counts[attempt["outcome"]] = counts.get(attempt["outcome"], 0) + 1
    order = ("killed", "stopped", "aborted", "failed", "done", "unfinished")
    return ", ".join("%d %s" % (counts[o], o) for o in order if o in counts)


def _svg_bars(out, bars, origin, scale, label_width, top, bar_height, gap):
    """One bar per node, its phases as coloured segments; returns the colours used, by phase (for the legend)."""
    colours, fallback = dict(PHASE_COLOURS), iter(_FALLBACK_COLOURS * 8)
    for index, (name, segs) in enumerate(bars):
        y = top + index * (bar_height + gap)
        out.append('<text x="10" y="%d">%s</text>' % (y + bar_height - 4, html.escape(name)))
        for phase, start, stop in segs:
            colour = colours.setdefault(phase, next(fallback, "#999999"))
            x = label_width + (start - origin).total_seconds() * scale
            w = max((stop - start).total_seconds() * scale, 1.0)
            out.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s %s: %s</title></rect>'
                       % (x, y, w, bar_height, colour, html.escape(name), html.escape(phase),
                          _duration((stop - start).total_seconds())))
    return colours


def _svg_legend(out, colours, bars, axis_y):
    """The colour of each phase the bars show."""
    legend_x = 10
    used = [p for p in colours if any(p == s[0] for _name, segs in bars for s in segs)]
    for phase in used:
        out.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>' % (legend_x, axis_y + 20, colours[phase]))
        out.append('<text x="%d" y="%d">%s</text>' % (legend_x + 16, axis_y + 30, html.escape(phase)))
        legend_x += 24 + 7 * len(phase)


def render_svg(journal, now=None, width=960, bar_height=18, gap=6):
    """A timeline: one bar per replaced node, its phases as coloured segments on a shared time axis."""
    end = parse_time(journal.get("finished")) or now
    names = sorted(journal.get("nodes") or {})
    bars = [(name, segments(journal["nodes"][name], end)) for name in names]
    times = [t for _name, segs in bars for _phase, a, b in segs for t in (a, b)]
    attempts = [(a, parse_time(a["started"])) for a in attempt_rows(journal)]
    attempts = [(a, moment) for a, moment in attempts if moment]
    if times:
        times += [moment for _a, moment in attempts]
    label_width, top, legend_height = 220, 40, 30
    if attempts:
        top += 16
    height = top + len(bars) * (bar_height + gap) + legend_height + 20
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">'
           % (width, height),
           '<text x="10" y="20" font-size="14">Node image upgrade to %s</text>' % html.escape(str(journal.get("image")))]
    if not times:
        out.append('<text x="10" y="%d">no replacement recorded</text>' % (top + 10))
        out.append("</svg>")
        return "\n".join(out)
    origin, last = min(times), max(times)
    span = max((last - origin).total_seconds(), 1.0)
    scale = (width - label_width - 20) / span
    colours = _svg_bars(out, bars, origin, scale, label_width, top, bar_height, gap)
    axis_y = top + len(bars) * (bar_height + gap) + 4
    if attempts:
        out.append('<text x="%d" y="%d">attempts: %d (%s); passes: %d</text>' % (
            label_width, 36, len(attempts), html.escape(_outcome_counts([a for a, _m in attempts])),
            sum(a["passes"] for a, _m in attempts)))
    for index, (attempt, moment) in enumerate(attempts, 1):
        x = label_width + (moment - origin).total_seconds() * scale
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#555555" stroke-dasharray="3,3">'
                   '<title>attempt %d started %s, %s after %d pass(es)</title></line>'
                   % (x, top - 4, x, axis_y, index, html.escape(attempt["started"]), html.escape(attempt["outcome"]),
                      attempt["passes"]))
    out.append('<text x="%d" y="%d">0</text>' % (label_width, axis_y + 10))
    out.append('<text x="%d" y="%d" text-anchor="end">%s</text>' % (width - 20, axis_y + 10, _duration(span)))
    _svg_legend(out, colours, bars, axis_y)
    out.append("</svg>")
    return "\n".join(out)


def dumps(journal):
    return json.dumps(journal, sort_keys=True, separators=(",", ":"))
