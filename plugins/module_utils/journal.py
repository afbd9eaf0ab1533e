# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The run journal's store: one ConfigMap (plain JSON, compacted or gzipped when large), read and written by
upgrade_journal, by the planner's modules (which read the instances this upgrade created) and in-process by the
upgrade_step action (which records each instance it creates at once)."""

from __future__ import annotations

import base64
import gzip
import json

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import kube, report


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
    """The journal ConfigMap exists but does not hold a journal this module wrote."""


def journal_problem(journal):
    """Why a decoded journal is not one this module wrote, or None."""
    if not isinstance(journal, dict):
        return "it holds %s, not a JSON object" % type(journal).__name__
    if not isinstance(journal.get("nodes", {}), dict):
        return "its nodes are %s, not an object" % type(journal.get("nodes")).__name__
    for key in ("instances_created", "start_counts", "removed_first", "refills", "create_intents"):
        if not isinstance(journal.get(key, {}), dict):
            return "its %s is %s, not an object" % (key, type(journal.get(key)).__name__)
    for key in ("image", "target_image", "started", "finished"):
        if journal.get(key) is not None and not isinstance(journal[key], str):
            return "its %s is %r, not a string" % (key, journal[key])
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
            "Look at it (kubectl -n %s get configmap %s -o yaml), then delete it to start the journal afresh "
            "(kubectl -n %s delete configmap %s, or upgrade_journal state=absent); the report then covers only "
            "the runs after that" % (namespace, name, problem, namespace, name, namespace, name))
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
