# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The fleet of playbooks/upgrade_fleet.yml, pure (no I/O): its batches, each cluster's outcome, and the
fleet report (JSON, Markdown, SVG). Each inventory host is a cluster; the play runs them in the batches of
`serial` (fleet_batches), and a failed cluster stops the later batches."""

from __future__ import annotations

import datetime
import html
import json
import re

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import report

OPTION_BATCHES = "fleet_batches"
OPTION_SOAK = "fleet_soak_seconds"
DEFAULT_BATCHES = [1, "25%", "100%"]

SUCCEEDED = "succeeded"
FAILED = "failed"
PLANNED = "planned"        # check mode: the cluster's plan was shown, nothing changed
RUNNING = "running"        # started and not finished when the report was written (its batch is under way)
NOT_STARTED = "not started"
PENDING = "pending"        # a later batch that may still run
OUTCOMES = (SUCCEEDED, FAILED, PLANNED, RUNNING, NOT_STARTED, PENDING)
COLOURS = {SUCCEEDED: "#2e7d32", FAILED: "#c62828", PLANNED: "#1565c0", RUNNING: "#f9a825"}
_PERCENT = re.compile(r"^\s*(\d+)\s*%\s*$")
_WHOLE = re.compile(r"^\s*(\d+)\s*$")
# Texts in the report and the job artifact are cut to this many characters (a cause can quote a long message).
TEXT_LIMIT = 2000
# The run report's way of writing seconds (1h02m03s), so both reports read alike.
_duration = report._duration  # pylint: disable=protected-access


# fleet_report's options (the module keeps their documentation).
REPORT_ARGUMENT_SPEC = dict(
    state=dict(type="str", choices=["plan", "report"], default="report"),
    batches=dict(type="list", elements="raw", required=True),
    hosts=dict(type="list", elements="str", required=True),
    soak_seconds=dict(type="raw", default=0),
    current=dict(type="list", elements="str", default=[]),
    clusters=dict(type="dict", default={}),
    report_dir=dict(type="path"),
)
REPORT_REQUIRED_IF = [("state", "report", ["report_dir"])]


def option_problems(params):
    """fleet_report's option problems, before anything is read or written."""
    problems = batch_problems(params["batches"])
    if params["state"] == "plan":
        problems += soak_problems(params["soak_seconds"])
    if not params["hosts"]:
        problems.append("hosts is empty: the play has no cluster; put each cluster in the inventory group the "
                        "playbook targets (fleet_hosts, default clusters)")
    return problems


def batch_mismatch(current, batches, layout):
    """Why the play's batch `current` is not one of `layout` (serial did not get fleet_batches), or None."""
    if not current or list(current) in layout:
        return None
    return ("this batch is %s, but fleet_batches %s makes the batches %s: the play's serial did not get fleet_batches. "
            "Give fleet_batches (and fleet_hosts) as extra variables (-e, or the AWX job's extra variables), not as "
            "inventory variables, which serial never sees. Nothing was changed" % (current, batches, layout))


def batch_problems(batches):
    """What is wrong with fleet_batches (the play's `serial`), as messages naming the option, the value and
    what to do; [] when it is good."""
    advice = ("set %s to a list of whole numbers from 1 and percentages from 1%% to 100%% of the clusters, "
              "such as [1, \"25%%\", \"100%%\"] (a canary, then a quarter, then the rest)" % OPTION_BATCHES)
    items = batches if isinstance(batches, (list, tuple)) else [batches]
    if not items:
        return ["%s is empty: %s" % (OPTION_BATCHES, advice)]
    problems = []
    for index, item in enumerate(items, 1):
        if _size(item) is None:
            problems.append("%s item %d is %r, which is no whole number from 1 and no percentage from 1%% to "
                            "100%%: %s" % (OPTION_BATCHES, index, item, advice))
    return problems


def _size(item):
    """('count', n) or ('percent', p) of one batch size, or None when it is invalid."""
    if isinstance(item, bool):
        return None
    if isinstance(item, int):
        return ("count", item) if item >= 1 else None
    text = str(item)
    match = _PERCENT.match(text)
    if match:
        percent = int(match.group(1))
        return ("percent", percent) if 1 <= percent <= 100 else None
    match = _WHOLE.match(text)
    if match and int(match.group(1)) >= 1:
        return ("count", int(match.group(1)))
    return None


def batches(serial, hosts):
    """The batches Ansible's `serial` makes of `hosts` (in play order): each size in turn, a percentage of all
    the hosts rounded down and at least 1, the last size repeated until every host has a batch (as
    ansible-core's PlaybookExecutor._get_serialized_batches)."""
    hosts = list(hosts)
    items = serial if isinstance(serial, (list, tuple)) else [serial]
    problems = batch_problems(items)
    if problems:
        raise ValueError("; ".join(problems))
    sizes = []
    for item in items:
        kind, number = _size(item)
        sizes.append(number if kind == "count" else (int(number / 100.0 * len(hosts)) or 1))
    out, index = [], 0
    while hosts:
        size = sizes[min(index, len(sizes) - 1)]
        out.append(hosts[:size])
        hosts = hosts[size:]
        index += 1
    return out


def batch_of(layout):
    """{host: its batch number, from 1} of a batches() layout."""
    return {host: number for number, members in enumerate(layout, 1) for host in members}


def soak_problems(soak_seconds):
    try:
        value = int(str(soak_seconds).strip())
    except ValueError:
        value = None
    if value is None or value < 0 or value > 2592000:
        return ["%s is %r: set it to the whole seconds each cluster must have soaked (every node Ready that long) "
                "before the next batch starts, from 0 to 2592000 (30 days)" % (OPTION_SOAK, soak_seconds)]
    return []


def parse_time(text):
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None


def _cut(text, limit=TEXT_LIMIT):
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def summarize(layout, records, serial, now=None):
    """The fleet's outcome from the batches (batches()) and what each cluster recorded ({host: record}, a
    record being {outcome, started, ended, cause, failed_task, report_dir, nodes_replaced, nodes_total}; a
    host with no record has not started). A cluster of a batch after one with a failed cluster is 'not
    started' and says which; one of a later batch while none failed is 'pending'."""
    first_failed, failed_names = _first_failed(layout, records)
    clusters = [_cluster_row(host, number, records.get(host), first_failed, failed_names)
                for number, members in enumerate(layout, 1) for host in members]
    times = [t for row in clusters for t in (parse_time(row["started"]), parse_time(row["ended"])) if t]
    counts = {}
    for row in clusters:
        counts[row["outcome"]] = counts.get(row["outcome"], 0) + 1
    failures = [row for row in clusters if row["outcome"] == FAILED]
    summary = {
        "outcome": _fleet_outcome(first_failed, clusters),
        "batches_setting": list(serial) if isinstance(serial, (list, tuple)) else [serial],
        "batches": [{"batch": number, "clusters": list(members),
                     "outcome": _batch_outcome([r for r in clusters if r["batch"] == number])}
                    for number, members in enumerate(layout, 1)],
        "clusters": clusters,
        "counts": counts,
        "failed": [{"cluster": r["cluster"], "batch": r["batch"], "cause": r["cause"], "failed_task": r["failed_task"]}
                   for r in failures],
        "stopped_after_batch": first_failed,
        "started": min(times).strftime("%Y-%m-%dT%H:%M:%SZ") if times else None,
        "ended": max(times).strftime("%Y-%m-%dT%H:%M:%SZ") if times else None,
        "wall_seconds": int((max(times) - min(times)).total_seconds()) if times else None,
        "written": (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    summary["message"] = message(summary)
    return summary


def _first_failed(layout, records):
    """(the first batch with a failed cluster, those clusters), or (None, [])."""
    positions = batch_of(layout)
    failed_batches = sorted({positions[h] for h, r in records.items() if (r or {}).get("outcome") == FAILED
                             and h in positions})
    if not failed_batches:
        return None, []
    first_failed = failed_batches[0]
    return first_failed, [h for h in layout[first_failed - 1] if (records.get(h) or {}).get("outcome") == FAILED]


def _cluster_row(host, number, record, first_failed, failed_names):
    """One cluster's row: its outcome (not started after a failed batch, pending while its batch has not come)."""
    record = dict(record or {})
    outcome = record.get("outcome")
    if outcome not in OUTCOMES or not outcome:
        outcome = NOT_STARTED if first_failed and number > first_failed else PENDING
    started, ended = parse_time(record.get("started")), parse_time(record.get("ended"))
    row = {
        "cluster": host,
        "batch": number,
        "outcome": outcome,
        "started": record.get("started") or None,
        "ended": record.get("ended") or None,
        "seconds": int((ended - started).total_seconds()) if started and ended else None,
        "cause": _cut(record.get("cause")) if outcome == FAILED else "",
        "failed_task": record.get("failed_task") or "" if outcome == FAILED else "",
        "nodes_replaced": record.get("nodes_replaced"),
        "nodes_total": record.get("nodes_total"),
        "report_dir": record.get("report_dir") or None,
        # The cluster's own report, when this run wrote it.
        "report": record.get("report") or None,
    }
    if outcome == NOT_STARTED:
        row["cause"] = "not started: batch %d failed (%s)" % (first_failed, ", ".join(failed_names))
    return row


def _fleet_outcome(first_failed, clusters):
    if first_failed:
        return FAILED
    if any(row["outcome"] in (PENDING, RUNNING) for row in clusters):
        return RUNNING
    if clusters and all(row["outcome"] == PLANNED for row in clusters):
        return PLANNED
    return SUCCEEDED


def _batch_outcome(rows):
    outcomes = {r["outcome"] for r in rows}
    for outcome in (FAILED, RUNNING, PENDING, NOT_STARTED):
        if outcome in outcomes:
            return outcome
    return PLANNED if outcomes == {PLANNED} else SUCCEEDED


def message(summary):
    """One sentence: how the fleet stands, which cluster failed and why, which clusters did not start."""
    total = len(summary["clusters"])
    if summary["outcome"] == FAILED:
        failed = "; ".join("cluster %s (batch %d) failed: %s" % (f["cluster"], f["batch"], f["cause"] or "no cause recorded")
                           for f in summary["failed"])
        later = [r["cluster"] for r in summary["clusters"] if r["outcome"] == NOT_STARTED]
        done = [r["cluster"] for r in summary["clusters"] if r["outcome"] == SUCCEEDED]
        return "%s. The fleet stopped after batch %d: %s; %s" % (
            failed, summary["stopped_after_batch"],
            "%d cluster(s) finished before or beside it (%s)" % (len(done), ", ".join(done)) if done else "no cluster finished",
            "not started: %s" % ", ".join(later) if later else "no later batch")
    if summary["outcome"] == PLANNED:
        return "check mode: the plan of %d cluster(s) in %d batch(es); nothing was changed" % (total, len(summary["batches"]))
    if summary["outcome"] == RUNNING:
        done = sum(1 for r in summary["clusters"] if r["outcome"] == SUCCEEDED)
        return "%d of %d cluster(s) upgraded so far; the later batches follow" % (done, total)
    return "all %d cluster(s) upgraded in %d batch(es)" % (total, len(summary["batches"]))


def artifact(summary):
    """The fleet summary for set_stats (image_upgrade_fleet): bounded, one row per cluster."""
    rows = [{key: row[key] for key in ("cluster", "batch", "outcome", "seconds", "nodes_replaced", "cause")}
            for row in summary["clusters"][:500]]
    return {"kind": "fleet", "outcome": summary["outcome"], "message": _cut(summary["message"], 1000),
            "batches": [{"batch": b["batch"], "clusters": b["clusters"][:500], "outcome": b["outcome"]}
                        for b in summary["batches"]],
            "clusters": rows, "stopped_after_batch": summary["stopped_after_batch"]}


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ") if text not in (None, "") else "-"


def render_markdown(summary):
    lines = [
        "# Fleet image upgrade report",
        "",
        "- outcome: **%s**: %s" % (summary["outcome"], summary["message"]),
        "- batches (`%s` = %s): %s" % (OPTION_BATCHES, json.dumps(summary["batches_setting"]), "; ".join(
            "%d: %s (%s)" % (b["batch"], ", ".join(b["clusters"]), b["outcome"]) for b in summary["batches"])),
        "- started: %s; last change: %s; wall time: %s; written %s" % (
            summary["started"] or "-", summary["ended"] or "-", _duration(summary["wall_seconds"]), summary["written"]),
        "",
        "| cluster | batch | outcome | started | ended | time | nodes replaced | why / report |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in summary["clusters"]:
        nodes = "-" if row["nodes_replaced"] is None else (
            "%s of %s" % (row["nodes_replaced"], row["nodes_total"]) if row["nodes_total"] is not None else str(row["nodes_replaced"]))
        why = row["cause"]
        if row["outcome"] == FAILED and row["failed_task"]:
            why = "at task \"%s\": %s" % (row["failed_task"], why)
        if row["report"]:
            why = (why + "; " if why else "") + "report: %s" % row["report"]
        lines.append("| %s | %d | %s | %s | %s | %s | %s | %s |" % (
            _cell(row["cluster"]), row["batch"], row["outcome"], _cell(row["started"]), _cell(row["ended"]),
            _duration(row["seconds"]), nodes, _cell(why)))
    lines.append("")
    return "\n".join(lines)


def render_svg(summary, width=960, bar_height=18, gap=6):
    """A timeline: one bar per cluster from its start to its end, coloured by outcome; the clusters that did
    not start are listed by name."""
    rows = summary["clusters"]
    label_width, top = 260, 44
    height = top + len(rows) * (bar_height + gap) + 60
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">'
           % (width, height),
           '<text x="10" y="20" font-size="14">Fleet image upgrade: %s</text>' % html.escape(summary["outcome"]),
           '<text x="10" y="36">%s</text>' % html.escape(_cut(summary["message"], 150))]
    spans = [(row, parse_time(row["started"]), parse_time(row["ended"])) for row in rows]
    times = [t for _row, a, b in spans for t in (a, b) if t]
    origin = min(times) if times else None
    span = max((max(times) - origin).total_seconds(), 1.0) if times else 1.0
    scale = (width - label_width - 20) / span
    for index, (row, start, end) in enumerate(spans):
        y = top + index * (bar_height + gap)
        out.append('<text x="10" y="%d">%s (batch %d)</text>' % (y + bar_height - 4, html.escape(row["cluster"]), row["batch"]))
        if start is None:
            out.append('<text x="%d" y="%d" fill="#757575">%s</text>' % (
                label_width, y + bar_height - 4, html.escape(_cut(row["cause"] or row["outcome"], 100))))
            continue
        end = end or start
        x = label_width + (start - origin).total_seconds() * scale
        w = max((end - start).total_seconds() * scale, 1.0)
        out.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s: %s, %s%s</title></rect>' % (
            x, y, w, bar_height, COLOURS.get(row["outcome"], "#9e9e9e"), html.escape(row["cluster"]), row["outcome"],
            _duration(row["seconds"]), html.escape((": " + _cut(row["cause"], 300)) if row["cause"] else "")))
    axis_y = top + len(rows) * (bar_height + gap) + 4
    out.append('<text x="%d" y="%d">0</text>' % (label_width, axis_y + 10))
    out.append('<text x="%d" y="%d" text-anchor="end">%s</text>' % (width - 20, axis_y + 10, _duration(span if times else None)))
    legend_x = 10
    for outcome, colour in COLOURS.items():
        out.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>' % (legend_x, axis_y + 20, colour))
        out.append('<text x="%d" y="%d">%s</text>' % (legend_x + 16, axis_y + 30, outcome))
        legend_x += 30 + 7 * len(outcome)
    out.append("</svg>")
    return "\n".join(out)


def render_json(summary):
    return json.dumps(summary, indent=2, sort_keys=True) + "\n"
