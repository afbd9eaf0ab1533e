# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The run journal's store: one ConfigMap (plain JSON, compacted or gzipped when large), read and written by
upgrade_journal, by the planner's modules (which read the instances this upgrade created) and in-process by the
upgrade_step action (which records each instance it creates at once); and upgrade_journal's work on it (record,
report, delete), which the upgrade_step action runs in the controller too."""

from __future__ import annotations

import base64
import copy
import datetime
import gzip
import json
import time

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import (
    cloud_settings, events, kube, report, report_files, target, validate)


class JournalConflict(Exception):
    """The journal changed under every attempt to write it."""


DEFAULT_NAME = "kubenodes-image-upgrade-journal"
DEFAULT_NAMESPACE = "kube-system"
# The `journal` option of the modules that read its record of created instances (doc fragment journal_record).
REFERENCE_SPEC = dict(name=dict(type="str", default=DEFAULT_NAME), namespace=dict(type="str", default=DEFAULT_NAMESPACE))


DATA_KEY = "journal.json"
GZIP_KEY = "journal.json.gz"
# A ConfigMap holds at most 1 MiB. Past this size the finished replacements are compacted (report.compact),
# and a journal still larger (thousands of nodes) is stored gzipped in binaryData.
PLAIN_LIMIT = 512 * 1024


class MalformedJournal(Exception):
    """The journal ConfigMap exists but does not hold a journal this module wrote; `problem` says what is wrong."""

    def __init__(self, message, problem=None):
        super().__init__(message)
        self.problem = problem


# The shape of what this module writes (report.merge), key by key: "object", "list", "string", "number", or a dict
# of the fields of each value of an object (an object of entries). A value of another type would fail deep inside a
# reader (an int where a list is iterated): it is named, key and all, when the journal is read.
_NODE_SHAPE = {"group": "string", "heir": "string", "role": "string", "error": "string", "phases": "object",
               "evicted": "list", "evicted_count": "number", "evicted_owners": "object", "waits": "object", "retries": "object"}
_ATTEMPT_SHAPE = {"started": "string", "ended": "string", "outcome": "string", "passes": "number",
                  "api_seconds": "object", "cloud_calls": "object", "kube_calls": "object"}
_GATE_SHAPE = {"seconds": "object"}
JOURNAL_SHAPE = {
    "image": "string", "target_image": "string", "started": "string", "finished": "string", "passes": "number",
    "nodes": _NODE_SHAPE, "attempts": _ATTEMPT_SHAPE, "gates": _GATE_SHAPE, "instances_removed": {},
    "instances_created": {}, "start_counts": "object", "removed_first": {}, "refills": "object", "create_intents": {},
    "replacing_taints": {}, "group_images": {"before": "string", "at": "string"}, "abort": "object",
    "cloud_settings": {"group": "string", "name": "string", "changed": "string", "restored": "string", "held": "string"},
    "cloud_settings_unread": {"group": "string", "name": "string", "seen": "string"},
}
_TYPES = {"object": (dict, "an object"), "list": (list, "a list"), "string": (str, "a string"),
          "number": ((int, float), "a number")}


def _shape_problem(value, shape, path):
    """The first key under `path` whose value in `value` is not of its type in `shape` (null is every type)."""
    if value is None:
        return None
    if isinstance(shape, str):
        types, said = _TYPES[shape]
        if not isinstance(value, types) or isinstance(value, bool) and shape == "number":
            return "its %s is %s, not %s" % (path, json.dumps(value)[:80], said)
        return None
    if not isinstance(value, dict):
        return "its %s is %s, not an object" % (path, json.dumps(value)[:80])
    for name, entry in value.items():
        if entry is None:
            continue
        if not isinstance(entry, dict):
            return "its %s.%s is %s, not an object" % (path, name, json.dumps(entry)[:80])
        for field, field_shape in shape.items():
            problem = _shape_problem(entry.get(field), field_shape, "%s.%s.%s" % (path, name, field))
            if problem:
                return problem
    return None


def journal_problem(journal):
    """Why a decoded journal is not one this module wrote (the key whose value has the wrong type), or None."""
    if not isinstance(journal, dict):
        return "it holds %s, not a JSON object" % type(journal).__name__
    for key, shape in JOURNAL_SHAPE.items():
        problem = _shape_problem(journal.get(key), shape, key)
        if problem:
            return problem
    return None


def config_maps_path(namespace, name=None):
    prefix = kube.path_of("/api/v1/namespaces", namespace) + "/configmaps"
    return kube.path_of(prefix, name) if name is not None else prefix


def read_journal(api_client, name, namespace):
    """(ConfigMap dict or None, journal dict or None). Raises MalformedJournal, saying how to reset it, when the
    ConfigMap holds something else: overwriting it would lose what it holds, using it would mislead."""
    try:
        config_map = kube.request(api_client, "GET", config_maps_path(namespace, name))
    except kube.ApiCallError as exc:
        if kube.is_status(exc, 404):
            return None, None
        raise
    packed = (config_map.get("binaryData") or {}).get(GZIP_KEY)
    try:
        text = gzip.decompress(base64.b64decode(packed)).decode("utf-8") if packed else (config_map.get("data") or {}).get(DATA_KEY)
        journal = json.loads(text) if text else None
    except (ValueError, OSError) as exc:
        problem = "its %s is not %s: %s" % (GZIP_KEY if packed else DATA_KEY, "gzipped JSON" if packed else "JSON", exc)
    else:
        problem = journal_problem(journal) if journal is not None else None
    if problem:
        raise MalformedJournal(
            "the journal ConfigMap %s/%s is malformed (%s), so this upgrade's journal cannot be read or written. "
            "Look at it (kubectl -n %s get configmap %s -o yaml) and correct that key, or delete it to start the journal afresh "
            "(kubectl -n %s delete configmap %s, or upgrade_journal state=absent); the report then covers only "
            "the runs after that" % (namespace, name, problem, namespace, name, namespace, name), problem)
    return config_map, journal


def journal_payload(journal):
    """(data, binaryData) of the ConfigMap that stores `journal`: plain JSON while it is small, else compacted,
    else gzipped."""
    text = report.dumps(journal)
    if len(text) > PLAIN_LIMIT:
        text = report.dumps(report.compact(journal))
    if len(text) <= PLAIN_LIMIT:
        return {DATA_KEY: text}, None
    return None, {GZIP_KEY: base64.b64encode(gzip.compress(text.encode("utf-8"), mtime=0)).decode("ascii")}


def write_journal(api_client, name, namespace, config_map, journal):
    data, binary_data = journal_payload(journal)
    payload = {key: value for key, value in (("data", data), ("binaryData", binary_data)) if value is not None}
    if config_map is None:
        body = dict({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}},
                    **payload)
        kube.request(api_client, "POST", config_maps_path(namespace), body=body)
    else:
        # replace carries the resourceVersion read: 409 if someone wrote meanwhile
        body = {key: value for key, value in config_map.items() if key not in ("data", "binaryData")}
        body.update(payload)
        kube.request(api_client, "PUT", config_maps_path(namespace, name), body=body)


def record_created(api_client, name, namespace, image, instances, start_counts, attempts=3, delete_first=None):
    """Merge `instances` ({providerID: {group, created}}) and `start_counts` ({group: nodes}) into the journal at
    once, so that an instance this upgrade created is provably its own even when the run is killed right after.
    `delete_first` adds `removed_first` and `refills` (see delete_first_record). Returns the journal written."""
    record = {"instances_created": dict(instances or {}), "start_counts": dict(start_counts or {})}
    record.update({k: dict(v) for k, v in (delete_first or {}).items()
                   if k in ("removed_first", "refills", "create_intents") and v})
    return merge_record(api_client, name, namespace, image, record, "the instances created", attempts)


def merge_record(api_client, name, namespace, image, record, what, attempts=3, create=True):
    """Merge one journal record (report.merge) into the journal ConfigMap at once; `what` names the record in
    the error when the ConfigMap kept changing. Without `create`, a journal that does not exist is left so
    (None is returned). Returns the journal written."""
    for _attempt in range(attempts):
        config_map, journal = read_journal(api_client, name, namespace)
        if journal is None and not create:
            return None
        merged = report.merge(journal if journal is not None else report.new_journal(image, None), record)
        try:
            write_journal(api_client, name, namespace, config_map, merged)
            return merged
        except Exception as exc:  # pylint: disable=broad-except
            if not kube.is_status(exc, 409):
                raise
    raise JournalConflict("journal ConfigMap %s/%s kept changing under us while %s were recorded; the next "
                          "pass records them again" % (namespace, name, what))


def record_gate_owed(api_client, name, namespace, image, attempts=3):
    """Record at once that a health gate is owed (report.merge's gate_owed): a replacement finished since the last
    gate passed. The role's gate clears it when it passed. Returns the journal written."""
    return merge_record(api_client, name, namespace, image, {"gate_owed": True}, "the health gate owed", attempts)


def gate_owed(journal):
    """Whether the journal says a health gate is owed (see record_gate_owed)."""
    return (journal or {}).get("gate_owed") is True


def delete_first_record(journal):
    """(removed_first, refills) of a journal: the workers removed delete-first ({name: {group, labels, taints}})
    and the refill that replaced each ({name: refill node name}); empty when there is none."""
    journal = journal or {}
    return dict(journal.get("removed_first") or {}), dict(journal.get("refills") or {})


def intents_record(journal):
    """The creations an upgrade was about to make ({key: {group, at, count, settled}}), empty when there is none."""
    return dict((journal or {}).get("create_intents") or {})


def created_record(journal):
    """(instances_created, start_counts) of a journal (empty when there is none)."""
    journal = journal or {}
    return dict(journal.get("instances_created") or {}), dict(journal.get("start_counts") or {})


# upgrade_journal's options and rules (also run in the controller by the upgrade_step action).
ARGUMENT_SPEC = dict(
    REFERENCE_SPEC,
    state=dict(type="str", choices=["present", "report", "absent"], default="present"),
    image=dict(type="str"),
    target_image=dict(type="str"),
    new_target=dict(type="bool", default=False),
    record=dict(type="dict", default={}),
    events=dict(type="bool", default=True),
    report_dir=dict(type="path"),
    intend=dict(type="list", elements="dict", default=[]),
    created=dict(type="dict", options=dict(instances=dict(type="list", elements="dict", default=[]),
                                           scaling_groups=dict(type="list", elements="dict", default=[]),
                                           intents=dict(type="dict", default={}))),
)
VALIDATE = validate.checker(dict(name=validate.object_name, namespace=validate.namespace))


def record_observation(module, api_client):
    """state=present: merge the record (and the intents and instances created) into the journal, starting it or
    refusing another upgrade's as target.decide says, then write the Events of what changed."""
    params = module.params
    where = "journal ConfigMap %s/%s" % (params["namespace"], params["name"])
    intended, intents = report.intent_record(params["intend"], time.time()) if params["intend"] else ({}, {})
    for _attempt in range(3):
        config_map, journal = read_journal(api_client, params["name"], params["namespace"])
        before = copy.deepcopy(journal)
        decision = dict(target_image=(journal or {}).get("target_image"), new_journal=journal is None,
                        resumed=False, moved=None)
        if params["image"] or params["target_image"]:
            try:
                decision = target.decide(journal, params["image"], params["target_image"], params["new_target"],
                                         where=where)
            except target.TargetConflict as exc:
                module.fail_json(msg=str(exc), reason="target_conflict", journal=journal)
        if decision["new_journal"]:
            # The cloud settings a killed run changed stay to be restored by the new upgrade's end.
            journal = report.merge(report.new_journal(params["image"], params["record"].get("started")),
                                   cloud_settings.carried(journal))
        if decision["target_image"]:
            journal["target_image"] = decision["target_image"]
        merged = report.merge(report.merge(journal, params["record"]), intended)
        if params["created"]:
            merged = report.merge(merged, report.settled_record(report.created_record(
                params["created"]["instances"], params["created"]["scaling_groups"], now=time.time()),
                params["created"]["intents"]))
        outcome = dict(target_image=decision["target_image"], resumed=decision["resumed"], moved=decision["moved"],
                       intents=intents)
        if merged == before:
            written = write_events(module, api_client, before, merged)
            # Only Events of this pass's problems were written: that is the change, if any.
            return dict(changed=bool(written.get("events_written")), journal=merged, **outcome, **written)
        diff = _diff(module, before or {}, merged)
        if module.check_mode:
            return dict(changed=True, journal=merged, **outcome, **diff)
        try:
            write_journal(api_client, params["name"], params["namespace"], config_map, merged)
            return dict(changed=True, journal=merged, **outcome, **diff,
                        **write_events(module, api_client, before, merged))
        except Exception as exc:  # pylint: disable=broad-except
            if not kube.is_status(exc, 409):  # a conflict: someone wrote meanwhile; read and merge again
                raise
    module.fail_json(msg="journal ConfigMap %s/%s kept changing under us" % (params["namespace"], params["name"]))


def _diff(module, before, after):
    """{diff: {before, after}} with --diff (upgrade_journal; the actions that run this code give no diff)."""
    return {"diff": dict(before=before, after=after)} if getattr(module, "_diff", False) else {}


def write_events(module, api_client, before, merged):
    """The Events of what this record changed (the journal is written first: an Event repeats nothing it has not
    recorded). Returns {events_written}; errors are warnings."""
    if module.check_mode or not module.params["events"]:
        return {}
    items = (events.journal_events(before, merged) + events.gate_events(before, merged)
             + list(module.params["record"].get("events") or []))
    if not items:
        return dict(events_written=0)
    written, errors = events.write(api_client, items, report.iso(datetime.datetime.now(datetime.timezone.utc)))
    for error in errors:
        module.warn("upgrade Event not written: %s" % error)
    return dict(events_written=written)


def write_report(module, api_client):
    """state=report: the report of the journal (a new one when there is none) as files in report_dir."""
    params = module.params
    if not params["report_dir"]:
        module.fail_json(msg="state=report needs report_dir")
    _config_map, journal = read_journal(api_client, params["name"], params["namespace"])
    if journal is None:
        journal = report.new_journal(params["image"], None)
    diffs = [] if getattr(module, "_diff", False) else None
    changed, summary, files = report_files.write_run_report(journal, params["report_dir"], module.check_mode, diffs)
    result = dict(changed=changed, journal=journal, summary=summary, files=files)
    if diffs:
        result["diff"] = diffs
    return result


def delete_journal(module, api_client):
    """state=absent: delete the journal ConfigMap, also a malformed one."""
    params = module.params
    problem = "it holds no journal"
    try:
        config_map, journal = read_journal(api_client, params["name"], params["namespace"])
    except MalformedJournal as exc:  # deleting is how a malformed journal is reset
        config_map, journal, problem = True, None, exc.problem
    if config_map is None:
        return dict(changed=False, journal={})
    if not module.check_mode:
        try:
            kube.request(api_client, "DELETE", config_maps_path(params["namespace"], params["name"]))
        except Exception as exc:  # pylint: disable=broad-except
            if not kube.is_status(exc, 404):
                raise
    # A malformed journal has no content to show: the diff says that it was one.
    before = journal if journal is not None else {"malformed": problem}
    return dict(changed=True, journal=journal or {}, **_diff(module, before, {}))


def apply_state(module, api_client):
    """upgrade_journal's work for its state; also run in the controller by the upgrade_step action."""
    action = {"present": record_observation, "report": write_report, "absent": delete_journal}[module.params["state"]]
    try:
        return action(module, api_client)
    except MalformedJournal as exc:
        module.fail_json(msg=str(exc), reason="malformed_journal")
    except OSError as exc:
        module.fail_json(msg="cannot write the report to %s: %s" % (module.params["report_dir"], exc))
