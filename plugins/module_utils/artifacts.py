# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The run's report as job artifacts (pure formatting): what the rolling_upgrade role publishes with
set_stats at its end, so that AWX shows it as the job's artifacts and a workflow can decide on it
(docs/awx.md). Bounded in size (AWX keeps artifacts in its database and hands them to every later node of a
workflow as extra variables) and made only of names, phases, counts and times, never of credentials.

The role's filters plan_artifact and report_artifact (plugins/filter/job_artifacts.py) call these."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.report import PHASE_ORDER

# The variable the artifacts are published under (set_stats data key), and the playbook's known names.
ARTIFACT_KEY = "image_upgrade"
MAX_NODES = 100
MAX_TEXT = 500
MAX_PDBS = 50
MAX_SYSTEM_PODS = 50


def _text(value, limit=MAX_TEXT):
    """A string of at most `limit` characters ('' for None); a longer one ends with '...'."""
    text = "" if value is None else str(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _bounded(rows, limit=MAX_NODES):
    """(the first `limit` rows, how many were left out)."""
    rows = list(rows or [])
    return rows[:limit], max(0, len(rows) - limit)


def _last_phase(row):
    """The phase a report row reached last: the one with the latest timestamp (RFC 3339 in UTC sorts as text),
    of two at the same second the later one in the order of phases (as the report orders them)."""
    phases = row.get("phases") or {}
    if not phases:
        return "pending"

    def key(item):
        phase, when = item
        return (str(when or ""), PHASE_ORDER.index(phase) if phase in PHASE_ORDER else len(PHASE_ORDER))
    return max(phases.items(), key=key)[0]


def _retries(row):
    total = 0
    for value in (row.get("retries") or {}).values():
        try:
            total += int(value)
        except (TypeError, ValueError):
            continue
    return total


def plan_artifact(facts, image=None, provider=None):
    """The artifact of a check-mode run: the plan from a node_image_facts result."""
    facts = facts or {}
    progress = facts.get("progress") or {}
    order = facts.get("replacement_order") or []
    rows, omitted = _bounded({"node": _text(n.get("name")), "group": _text(n.get("group")),
                              "role": _text(n.get("role")), "in_flight": bool(n.get("in_flight"))}
                             for n in order)
    pdbs = ["%s/%s" % (p.get("namespace"), p.get("name")) for p in facts.get("blocking_pdbs") or []]
    system_pods = [p.get("description") for p in facts.get("unready_system_pods") or []]
    stop = facts.get("stop")
    total = int(progress.get("total") or 0)
    return {
        "kind": "plan",
        "outcome": "stopped" if stop else "planned",
        "image": _text(image),
        "target_image": _text(facts.get("target_image")),
        "provider": _text(provider),
        "summary": {
            "nodes_total": total,
            "nodes_on_image": int(progress.get("done") or 0),
            "nodes_to_replace": len(order),
            "in_flight": int(progress.get("in_flight") or 0),
            "blocking_pdbs": [_text(p, 300) for p in pdbs[:MAX_PDBS]],
            "unready_system_pods": [_text(p, 300) for p in system_pods[:MAX_SYSTEM_PODS]],
            "stop": _text(stop) if stop else None,
        },
        "nodes": rows,
        "nodes_omitted": omitted,
    }


def report_artifact(summary, outcome="done", cause=None, image=None, target_image=None, provider=None):
    """The artifact of a run (`outcome` done or failed, with its `cause`): upgrade_journal's report summary
    cut down to the totals and one row per node."""
    summary = summary or {}
    rows, omitted = _bounded({
        "node": _text(r.get("node")),
        "heir": _text(r.get("heir")),
        "group": _text(r.get("group")),
        "role": _text(r.get("role")),
        "kind": _text(r.get("kind")),
        "phase": _last_phase(r),
        "done": bool(r.get("done")),
        "seconds": int(r.get("total_seconds") or 0),
        "pods_evicted": int(r.get("pods_evicted") or 0),
        "retries": _retries(r),
        "error": _text(r.get("error")),
    } for r in summary.get("nodes") or [])
    attempts = summary.get("attempts") or []
    return {
        "kind": "run",
        "outcome": outcome,
        "cause": _text(cause) if outcome != "done" else "",
        "image": _text(image if image is not None else summary.get("image")),
        "target_image": _text(target_image),
        "provider": _text(provider),
        "summary": {
            "started": summary.get("started"),
            "finished": summary.get("finished"),
            "wall_seconds": summary.get("wall_seconds"),
            "passes": int(summary.get("passes") or 0),
            "attempts": len(attempts) if isinstance(attempts, list) else int(attempts or 0),
            "attempt_outcomes": dict(summary.get("attempt_outcomes") or {}),
            "nodes_total": int(summary.get("nodes_total") or 0),
            "nodes_replaced": int(summary.get("nodes_replaced") or 0),
            "surplus_removed": int(summary.get("surplus_removed") or 0),
            "pods_evicted": int(summary.get("pods_evicted") or 0),
            "instances_removed": len(summary.get("instances_removed") or []),
        },
        "nodes": rows,
        "nodes_omitted": omitted,
    }
