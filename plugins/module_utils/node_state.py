# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The I/O around the planning core for node_image_facts and node_pair: read the nodes (one LIST) and the
clouds (one listing of groups plus one listing of instances per group), and write node annotations,
labels and taints as merge patches that carry the resourceVersion, retried on conflict.

Imports without the kubernetes package or any cloud SDK (modules call kube.require_kubernetes() first).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import time

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import kube, validate
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.cloud_reads import READ_THREADS
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base

CONFLICT_ATTEMPTS = 6


class NodeWriteError(Exception):
    """A node patch failed for a reason other than a resolvable conflict."""


def read_cloud(provider, scaling_groups=None):
    """(groups, {group id: [Instance]}, {group id: error message}). A failing group listing is fatal (a
    ProviderError propagates); one group whose instances cannot be listed is reported, not fatal.

    Each provider call retries throttling, 5xx and dropped connections itself (its _call, bounded by its
    `retries`); nothing here retries again, which would multiply the attempts (5 x 5 before)."""
    reading = getattr(provider, "reading", None)
    with reading() if reading is not None else contextlib.nullcontext():
        # One read of each group's manager and template (GCE) for the listing and the instances.
        groups = provider.list_groups(list(scaling_groups) if scaling_groups else None)
        instances, errors = list_instances(provider, [group.id for group in groups])
    return groups, instances, errors


def list_instances(provider, group_ids, threads=READ_THREADS):
    """({group id: [Instance]}, {group id: error message}) of these groups, listed at once, at most `threads` at a
    time: at a real cloud's 100-300 ms a call, one after another would make a pass as slow as the sum. Each call
    still takes its token of the provider's call rate and is retried by the provider alone. Call it within the
    provider's reading() (its memo is shared by the threads: each group's entries are its own)."""
    instances, errors = {}, {}

    def one(group_id):
        try:
            instances[group_id] = provider.list_instances(group_id)
        except base.ProviderError as exc:
            errors[group_id] = str(exc)

    group_ids = list(group_ids)
    if len(group_ids) <= 1 or threads <= 1:
        for group_id in group_ids:
            one(group_id)
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(threads, len(group_ids))) as pool:
            for future in [pool.submit(one, group_id) for group_id in group_ids]:
                future.result()   # anything but a ProviderError propagates, as it did one after another
    return instances, errors


# Nodes are read and patched through kube.py, the one way to Kubernetes (names kept for callers).
get_node = kube.get_node


def delete_node(api_client, name, resource_version):
    """DELETE with a precondition on the resourceVersion read, so a node that changed meanwhile is not
    deleted on stale grounds (the server answers 409)."""
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"resourceVersion": resource_version}}
    kube.raw_request(api_client, "DELETE", "/api/v1/nodes/" + name, body=body)


def _claim(node, prefix):
    """What a deletion decision rests on: this collection's annotations, the labels, the cordon and the taints
    (not the status, which a kubelet or the node controller moves on its own)."""
    meta, spec = node.get("metadata") or {}, node.get("spec") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(prefix + "/")}
    return annotations, meta.get("labels") or {}, bool(spec.get("unschedulable")), spec.get("taints") or []


def delete_node_as_read(api_client, node, prefix):
    """Delete `node` as it was read, with a precondition on its resourceVersion. A 409 (it changed since) is
    looked at again: when only its status moved (a heartbeat, or the node controller marking it NotReady once
    its instance was deleted), the same node is deleted at its new resourceVersion; when its claim changed
    (_claim), nothing is deleted. Returns "deleted", "absent" or "changed"."""
    name = node["metadata"]["name"]
    version = node["metadata"].get("resourceVersion")
    for _attempt in range(3):
        try:
            delete_node(api_client, name, version)
            return "deleted"
        except kube.ApiException as exc:
            if kube.is_status(exc, 404):
                return "absent"
            if not kube.is_status(exc, 409):
                raise
        fresh = get_node(api_client, name)
        if fresh is None:
            return "absent"
        if _claim(fresh, prefix) != _claim(node, prefix):
            return "changed"
        version = fresh["metadata"].get("resourceVersion")
    return "changed"


def _merge_patch(api_client, name, body):
    return kube.patch_node(api_client, name, body)


def pending_changes(node, entry):
    """The part of a core patch entry that would change `node`: (annotations, labels, taints or None)."""
    meta = node.get("metadata") or {}
    have_ann = meta.get("annotations") or {}
    have_labels = meta.get("labels") or {}
    annotations = {k: v for k, v in (entry.get("annotations") or {}).items()
                   if (v is None and k in have_ann) or (v is not None and have_ann.get(k) != v)}
    labels = {k: v for k, v in (entry.get("labels") or {}).items() if have_labels.get(k) != v}
    wanted_taints, dropped = entry.get("taints"), entry.get("drop_taints")
    taints = _merged_taints(node, wanted_taints or [], dropped) if wanted_taints is not None or dropped else None
    return annotations, labels, taints


def _merged_taints(node, wanted_taints, dropped=()):
    """The node's taints with the wanted ones added or their values set (by key and effect) and those whose key is
    in `dropped` taken off, or None when that changes nothing."""
    current = list((node.get("spec") or {}).get("taints") or [])
    ident = {(t.get("key"), t.get("effect")): t for t in current}
    merged = [t for t in current if t.get("key") not in set(dropped or ())]
    for taint in wanted_taints:
        key = (taint.get("key"), taint.get("effect"))
        if key not in ident:
            merged.append(taint)
        elif ident[key].get("value") != taint.get("value") and ident[key] in merged:
            merged[merged.index(ident[key])] = taint
    return merged if merged != current else None


def expectations_hold(node, entry):
    have = (node.get("metadata") or {}).get("annotations") or {}
    return all(have.get(k) == v for k, v in (entry.get("expect") or {}).items())


def write_node(api_client, node, entry, sleep=time.sleep):
    """Apply one core patch entry to `node` (a dict as listed). Returns (status, node_after) where status is
    "changed", "unchanged" or "skipped" (someone else changed the node so that the change no longer
    applies). Each attempt is a merge patch carrying the resourceVersion it was computed from; a 409
    re-reads the node and tries again."""
    name = node["metadata"]["name"]
    for attempt in range(CONFLICT_ATTEMPTS):
        if not expectations_hold(node, entry):
            return "skipped", node
        annotations, labels, taints = pending_changes(node, entry)
        if not annotations and not labels and taints is None:
            return "unchanged", node
        body = {"metadata": {"resourceVersion": node["metadata"].get("resourceVersion")}}
        if annotations:
            body["metadata"]["annotations"] = annotations
        if labels:
            body["metadata"]["labels"] = labels
        if taints is not None:
            body["spec"] = {"taints": taints}
        try:
            return "changed", _merge_patch(api_client, name, body)
        except kube.ApiException as exc:
            if getattr(exc, "status", None) != 409 or attempt == CONFLICT_ATTEMPTS - 1:
                raise NodeWriteError("patching node %s failed: %s" % (name, kube.api_error_message(exc)))
        sleep(min(1.0, 0.05 * (2 ** attempt)))
        fresh = get_node(api_client, name)
        if fresh is None:
            return "skipped", node
        node = fresh
    raise NodeWriteError("patching node %s: still conflicting after %d attempts" % (name, CONFLICT_ATTEMPTS))


def node_diff(node, entry):
    """(before, after) of the annotations, the labels and the taints a patch entry changes."""
    annotations, labels, taints = pending_changes(node, entry)
    meta = node.get("metadata") or {}
    have_ann, have_labels = meta.get("annotations") or {}, meta.get("labels") or {}
    before, after = {}, {}
    if annotations:
        before["annotations"] = {k: have_ann[k] for k in sorted(annotations) if k in have_ann}
        after["annotations"] = {k: v for k, v in sorted(annotations.items()) if v is not None}
    if labels:
        before["labels"] = {k: have_labels[k] for k in sorted(labels) if k in have_labels}
        after["labels"] = dict(sorted(labels.items()))
    if taints is not None:
        before["taints"] = list((node.get("spec") or {}).get("taints") or [])
        after["taints"] = taints
    return before, after


class PlannerFailure(Exception):
    """Bad input or an unreadable cluster or cloud: the message names the cause; nothing was written."""


def planner_options(params):
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core

    return core.Options(
        image=params.get("image"),
        # No default in place of an empty or zero value: validate.PLANNER_RULES refuses those first.
        annotation_prefix=params.get("annotation_prefix", core.DEFAULT_PREFIX),
        max_surge=params.get("max_surge", 1),
        max_surge_total=params.get("max_surge_total"),
        join_timeout=params.get("join_timeout", core.DEFAULT_JOIN_TIMEOUT),
        exclude_labels=tuple(params.get("exclude_labels") or ()),
        copy_taints=bool(params.get("copy_taints")),
        heir_ready_seconds=params.get("heir_ready_seconds") or 0,
        max_unavailable=params.get("max_unavailable", 0),
        no_surge=bool(params.get("no_surge")),
        lb_drain_seconds=params.get("lb_drain_seconds") or 0,
        canary=bool(params.get("canary")),
        canary_soak_seconds=params.get("canary_soak_seconds") or 0,
    )


def read_records(api_client, where):
    """(instances_created, start_counts, removed_first, refills, create_intents) from the journal ConfigMap `where`
    (journal.created_record, journal.delete_first_record, journal.intents_record). Without a journal (a module used
    on its own) instances_created is None: the planner then keeps its older rule for heirs (core.plan_upgrade)."""
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import journal

    if not where:
        return None, {}, {}, {}, {}
    name, namespace = where.get("name") or journal.DEFAULT_NAME, where.get("namespace") or journal.DEFAULT_NAMESPACE
    try:
        recorded = journal.read_journal(api_client, name, namespace)[1]
        return journal.created_record(recorded) + journal.delete_first_record(recorded) + (journal.intents_record(recorded),)
    except journal.MalformedJournal as exc:
        raise PlannerFailure("journal: %s" % exc)
    except kube.ApiException as exc:
        raise PlannerFailure("cannot read the journal ConfigMap %s/%s (option journal): %s"
                             % (namespace, name, kube.api_error_message(exc)))


def plan_from_cluster(params, now=None, built=None):
    """Read the cluster (and the cloud when params['provider'] is set) and run the planner; `built` is a provider
    already built from these params (the run's), used instead of a new one.

    Returns (api_client, {node name: node dict}, planner result, provider or None). Raises PlannerFailure.
    Costs one LIST of nodes, one listing of scaling groups, one listing of instances per group and one
    image lookup, whatever the number of nodes."""
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core

    problems = validate.check(params, validate.PLANNER_RULES)
    if problems:
        raise PlannerFailure("; ".join(problems) + ". Nothing was changed")
    options = planner_options(params)
    try:
        options.validate()
    except core.PlanInputError as exc:
        raise PlannerFailure(str(exc))
    try:
        api_client = kube.build_api_client(params)
    except kube.KubeAuthError as exc:
        raise PlannerFailure("cannot reach Kubernetes: %s" % exc)
    provider = None
    if params.get("provider"):
        from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import factory

        try:
            provider = built if built is not None else factory.build_provider(params)
        except base.ProviderError as exc:
            raise PlannerFailure("cannot use the %s provider: %s" % (params["provider"], exc))
        except (ValueError, TypeError, KeyError, OSError) as exc:
            raise PlannerFailure("cannot use the %s provider (check its credentials and options): %s"
                                 % (params["provider"], exc))
        try:
            canonical = provider.validate_image(options.image.strip())   # the provider retries its own calls
        except base.InvalidReferenceError as exc:
            raise PlannerFailure("image %r is not a valid %s image reference: %s" % (options.image, params["provider"], exc))
        except base.NotFoundError as exc:
            raise PlannerFailure("image %r does not exist: %s" % (options.image, exc))
        except base.ProviderError as exc:
            raise PlannerFailure("cannot check image %r with the %s provider: %s" % (options.image, params["provider"], exc))
        if canonical:
            options.image = canonical
    try:
        node_list = kube.list_nodes(api_client)
    except kube.ApiException as exc:
        raise PlannerFailure("cannot list nodes: %s" % kube.api_error_message(exc))
    except Exception as exc:  # connection refused, TLS errors: name them rather than a traceback
        raise PlannerFailure("cannot list nodes: %s: %s" % (type(exc).__name__, exc))
    groups = instances = errors = None
    normalize = core.default_normalize
    if provider is not None:
        try:
            groups, instances, errors = read_cloud(provider, params.get("scaling_groups") or None)
        except base.ProviderError as exc:
            raise PlannerFailure("cannot list the %s scaling groups: %s" % (params["provider"], exc))
        normalize = provider.normalize_provider_id
    created, start_counts, removed_first, refills, intents = read_records(api_client, params.get("journal"))
    result = core.plan_upgrade(node_list, options, groups=groups, instances=instances, group_errors=errors,
                               now=time.time() if now is None else now, normalize=normalize,
                               scope=params.get("scaling_groups") or None, created=created, start_counts=start_counts,
                               removed_first=removed_first, refills=refills, intents=intents)
    return api_client, {n["metadata"]["name"]: n for n in node_list}, result, provider


def kubeconfig_secrets(kubeconfig):
    """Secret values inside a kubeconfig given as a dictionary, for module.no_log_values (the module base
    registers them for every module; kept for callers)."""
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import base as module_base

    return module_base.secrets_in(kubeconfig) if isinstance(kubeconfig, dict) else set()
