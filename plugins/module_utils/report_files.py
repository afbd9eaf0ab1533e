# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Writing report files on the host a module runs on (the run report of upgrade_journal, the fleet report of
fleet_report): a file is replaced whole, and only when its content changes, so `changed` is true."""

from __future__ import annotations

import datetime
import json
import os

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import fleet, report, validate

RUN_REPORT_NAME = "image-upgrade-report"
FLEET_REPORT_NAME = "fleet-upgrade-report"


def report_dir_problems(report_dir):
    """The report directory (relative to where ansible-playbook started, as the run writes it), or the nearest
    existing directory above it, writable now: the report is written last, after every node was replaced."""
    path = os.path.abspath(os.path.expanduser(str(report_dir)))
    if os.path.exists(path) and not os.path.isdir(path):
        return [validate.report_dir_problem(report_dir, path, False)]
    existing = path
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return [validate.report_dir_problem(report_dir, existing, False)]
    if not os.access(existing, os.W_OK | os.X_OK):
        return [validate.report_dir_problem(report_dir, existing, True, missing=existing != path)]
    return []


def write_if_changed(path, text, check_mode, diffs=None):
    """Write `text` to `path` (atomically) unless it holds that already; True when it changed or, in check mode,
    would change. With a list `diffs`, a changed file adds its diff (before and after, as the copy module's)."""
    old = ""
    try:
        with open(path) as handle:
            old = handle.read()
            if old == text:
                return False
    except OSError:
        pass
    if diffs is not None:
        diffs.append(dict(before_header=path, after_header=path, before=old, after=text))
    if not check_mode:
        tmp = path + ".tmp"
        with open(tmp, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    return True


def write_run_report(journal, report_dir, check_mode, diffs=None):
    """The run report of `journal` as JSON, Markdown and an SVG timeline in `report_dir` (made when missing):
    (changed, summary, the paths written); with a list `diffs`, each changed file's diff is added to it."""
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    summary = report.summarize(journal, now=now)
    base = os.path.join(report_dir, RUN_REPORT_NAME)
    outputs = {base + ".json": json.dumps(summary, indent=2, sort_keys=True) + "\n",
               base + ".md": report.render_markdown(summary),
               base + ".svg": report.render_svg(journal, now=now) + "\n"}
    if not check_mode:
        os.makedirs(report_dir, exist_ok=True)
    changed = False
    for path, text in outputs.items():
        changed = write_if_changed(path, text, check_mode, diffs) or changed
    return changed, summary, sorted(outputs)


def cluster_report(record):
    """The nodes replaced, from the cluster's own report, when that report was written by this run."""
    directory = (record or {}).get("report_dir")
    if not directory:
        return {}
    path = os.path.join(directory, RUN_REPORT_NAME + ".json")
    started = fleet.parse_time(record.get("started"))
    try:
        if started and os.path.getmtime(path) < started.timestamp() - 1:
            return {}  # an earlier run's report: this run did not get as far as writing one
        with open(path) as handle:
            summary = json.load(handle)
    except (OSError, ValueError):
        return {}
    return {"nodes_replaced": summary.get("nodes_replaced"), "nodes_total": summary.get("nodes_total"),
            "report": os.path.join(directory, RUN_REPORT_NAME + ".md")}


def fleet_report(module):
    """fleet_report's work on the module base: with state=plan, the batches (failing when the play's serial did not
    get them); with state=report, the fleet report from each cluster's record, written to report_dir."""
    params = module.params
    layout = fleet.batches(params["batches"], params["hosts"])
    result = dict(changed=False, batches=layout, batch_of=fleet.batch_of(layout))
    if params["state"] == "plan":
        mismatch = fleet.batch_mismatch(params["current"], params["batches"], layout)
        if mismatch:
            module.fail_json(msg=mismatch, **result)
        module.exit_json(**result)

    records = {}
    for host, record in (params["clusters"] or {}).items():
        if isinstance(record, dict) and record:
            records[host] = dict(record, **{k: v for k, v in cluster_report(record).items() if v is not None})
    summary = fleet.summarize(layout, records, params["batches"])
    base = os.path.join(params["report_dir"], FLEET_REPORT_NAME)
    outputs = {base + ".json": fleet.render_json(summary), base + ".md": fleet.render_markdown(summary),
               base + ".svg": fleet.render_svg(summary) + "\n"}
    diffs = [] if module._diff else None
    try:
        if not module.check_mode:
            os.makedirs(params["report_dir"], exist_ok=True)
        for path, text in outputs.items():
            result["changed"] = write_if_changed(path, text, module.check_mode, diffs) or result["changed"]
    except OSError as exc:
        module.fail_json(msg="cannot write the fleet report to report_dir %s: %s; set fleet_report_dir to a "
                             "directory the controller may write" % (params["report_dir"], exc))
    result.update(summary=summary, artifact=fleet.artifact(summary), files=sorted(outputs))
    if diffs:
        result["diff"] = diffs
    module.exit_json(**result)
