# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The executor's Kubernetes (module_utils/executor.py, its `kube` port) in production: list, write, uncordon,
drain and delete Nodes through one API client, on the module_utils the modules use. The Nodes are read from a
watch-fed cache (node_cache.py: one LIST, then a watch), and the same watch ends the executor's wait between passes
when something the planner reads changed (planning_signature).

This file imports without the kubernetes package (kube.py's calls go through the client it is given)."""

from __future__ import annotations

import time

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import drain as drain_core
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import drain_api, kube, node_cache, node_state, vocabulary
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.executor import MAX_DRAINS_AT_ONCE, MAX_WRITES_AT_ONCE, StepFailure


def planning_signature(node, prefix):
    """What of a Node the planner reads: a change in anything else (a heartbeat, the images it holds, its
    capacity, another controller's annotations such as the TTL controller's) does not make a pass look again
    before its poll. Of the annotations it reads only this collection's, under `prefix`."""
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    # The Ready condition's status and since when (the planner's ready_since: a heir's hold, a canary's soak), so that
    # a Node that went NotReady and Ready again between two reads counts as changed.
    ready = [(c.get("status"), c.get("lastTransitionTime")) for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    ours = sorted((k, v) for k, v in (meta.get("annotations") or {}).items() if k.startswith(prefix + "/"))
    return (tuple(sorted((meta.get("labels") or {}).items())), tuple(ours),
            bool(meta.get("deletionTimestamp")), bool(spec.get("unschedulable")), spec.get("providerID"),
            repr(spec.get("taints") or []), tuple(ready), (status.get("nodeInfo") or {}).get("osImage"),
            repr(status.get("addresses") or []))


class KubeAccess:
    """Kubernetes through one API client (kube.build_api_client), as the modules reach it."""

    # Donors drained at once in one pass, each with its own eviction_concurrency: as many as have a Ready heir, up to the
    # executor's hard cap (executor.MAX_DRAINS_AT_ONCE says why).
    drain_concurrency = MAX_DRAINS_AT_ONCE
    # Node writes of one pass sent at once (executor.MAX_WRITES_AT_ONCE says why): each is a PATCH through the same
    # client, whose pool the drains already widened past this.
    writes_at_once = MAX_WRITES_AT_ONCE

    def __init__(self, api_client, annotation_prefix, drain=None, clock=time.time):
        self.client = api_client
        self.prefix = annotation_prefix
        self.annotation = drain_api.drain_annotation(annotation_prefix)
        self.clock = clock
        drain = dict(drain or {})
        self.drain_options = drain_core.DrainOptions(
            ignore_daemonsets=drain.get("ignore_daemonsets", True),
            delete_emptydir_data=drain.get("delete_emptydir_data", False), force=drain.get("force", False))
        self.drain_params = drain
        self.not_before = drain_api.parse_timestamp(drain["not_before"]) if drain.get("not_before") else None
        # Of the last read of the Nodes, for wait_for_change: its version, each Node's planning_signature, and the
        # resourceVersions of this pass's own writes with the signature each left.
        self.listed_version, self.signatures, self.own_writes = None, {}, {}
        self.listed_signatures, self.nodes_generation = None, 0   # of the last list (nodes_version)
        # planning_signature of each Node, once per copy the cache gave (it hands out the same copy until the Node changes)
        self.signature_of = vocabulary.PerNode(lambda node: planning_signature(node, self.prefix))
        self.in_flight = {}   # Node name -> the watch's events for it held while our own write or deletion is on its way
        self.deleted_uids = set()   # Nodes we deleted whose DELETED event the watch has not brought yet
        self.cache = node_cache.NodeCache(api_client, listen=self._changes_plan)
        self.call_count = kube.count_calls(api_client)   # every request of the client: the cache's, the drains', the journal's
        # The evictions, the drains of a pass, the watch and a spare.
        drain_api.widen_connection_pool(api_client, int(drain.get("eviction_concurrency") or 10) + self.drain_concurrency + 3)

    def calls(self):
        """The Kubernetes requests this client sent so far ({calls, by_kind}: kube.CallCount), for the journal and the
        report."""
        return self.call_count.stats()

    def nodes_version(self):
        """Of the last list_nodes: a number that moves whenever what the planner reads of the Nodes (planning_signature)
        changed since the list before, whoever changed it; the executor plans again only then (or when the cloud, its
        own records or the clock say so). A heartbeat, or a change to what no plan reads, keeps it."""
        return self.nodes_generation

    def list_nodes(self):
        with self.cache.lock:   # no event is judged against the signatures between the snapshot and them
            nodes, self.listed_version = self.cache.read()
            self.signatures = dict(zip((n["metadata"]["name"] for n in nodes), self.signature_of.of(nodes)))
            self.own_writes = {}
            # Compared with the last list's own copy: the watch updates self.signatures for our writes meanwhile.
            if self.signatures != self.listed_signatures:
                self.listed_signatures = dict(self.signatures)
                self.nodes_generation += 1
        return nodes

    def write_node(self, node, entry):
        name = node["metadata"]["name"]
        self._own_change_begins(name)
        status, after = "failed", None
        try:
            status, after = node_state.write_node(self.client, node, entry)
        except node_state.NodeWriteError as exc:
            raise StepFailure(str(exc), step="patch")
        finally:
            self._own_change_ends(name, after if status == "changed" else None)
        return status, after

    def _own_change_begins(self, name):
        """The watch may bring an own write or deletion before its answer comes: its events wait until then."""
        with self.cache.lock:
            self.in_flight.setdefault(name, [])

    def _own_change_ends(self, name, written=None, deleted=None):
        """Our own write (its result) or deletion wakes nothing, and the next pass reads it; the events held meanwhile
        are judged now. The watch replays every change since the read in order, so a change someone else made before
        this write (the write then retried on 409) still wakes the wait."""
        with self.cache.lock:
            held = self.in_flight.pop(name, [])
            if written is not None:
                meta = written["metadata"]
                self.own_writes.setdefault(name, {})[meta.get("resourceVersion")] = planning_signature(written, self.prefix)
                self.cache.write_through(written)
            if deleted is not None:
                # What the watch brings of a Node we deleted is older than the deletion: nothing the plan reads.
                self.signatures.pop(name, None)
                self.deleted_uids.add(deleted["metadata"].get("uid"))
                self.cache.mark_deleted(deleted)
            woke = [self._changes_plan(event) for event in held]   # each judged: an own write's event updates signatures
            if any(woke):
                self.cache.wake()

    def changed_since_read(self):
        """Whether a Node changed in what the planner reads since the last list_nodes, by someone else (the watch's
        judgement, as wait_for_change's): a pass that finds so is overtaken (Executor._overtaken)."""
        return bool(self.cache.changed)

    def wait_for_change(self, seconds):
        """Wait until a Node changes in what the planner reads (planning_signature: added, deleted, Ready,
        cordoned, labels, this collection's annotations, taints, image) since the last read, or until `seconds`
        passed. True when a change ended the wait. The cache's watch judges each event as it comes; one that could
        not be had (refused, the server away) leaves the wait to its time, and the cache lists again."""
        changed = self.cache.wait(seconds)
        if changed is None:   # the watch is not running (never read): the poll's time stays
            time.sleep(seconds)
        return bool(changed)

    def _changes_plan(self, event):
        """Whether a watch event (the cache's thread, under its lock) changes what the last read gave the planner."""
        kind = event.get("type")
        if kind in ("ERROR", "RELISTED"):
            return True   # e.g. 410 Gone: changes may have been missed; the cache lists again
        meta = (event.get("object") or {}).get("metadata") or {}
        name = meta.get("name")
        if name in self.in_flight:
            self.in_flight[name].append(event)
            return False
        if meta.get("uid") in self.deleted_uids:
            if kind == "DELETED":
                self.deleted_uids.discard(meta.get("uid"))
            return False
        if kind == "DELETED":
            return self.signatures.pop(name, None) is not None
        if kind in ("ADDED", "MODIFIED"):
            ours = self.own_writes.get(name) or {}
            if meta.get("resourceVersion") in ours:   # our write: what it left is what the planner expects
                self.signatures[name] = ours.pop(meta["resourceVersion"])
                return False
            return self.signatures.get(name) != planning_signature(event["object"], self.prefix)
        return False   # BOOKMARK

    def uncordon(self, name):
        drain_api.uncordon(self.client, name, self.annotation)

    def drain(self, name):
        """One eviction round (node_drain with wait=false): cordon and record the start first, then evict
        what the PDBs allow; a drain past its deadline follows on_timeout."""
        p = self.drain_params
        node = drain_api.get_node(self.client, name)
        if node is None:
            raise StepFailure("node %s disappeared while it was to be drained; run again" % name, step="drain", node=name)
        recorded = drain_api.recorded_drain_start(node, self.annotation)
        start = recorded or self.clock()
        wait_timeout = int(p.get("wait_timeout") or drain_core.DRAIN_ARG_SPEC["wait_timeout"]["default"])
        deadline = drain_api.drain_deadline(start, self.not_before, wait_timeout)
        settings = drain_api.DrainSettings(options=self.drain_options, grace_period=p.get("terminate_grace_period"),
                                           concurrency=int(p.get("eviction_concurrency") or 10), wait=False,
                                           deadline=deadline, on_timeout=p.get("on_timeout") or drain_core.ON_TIMEOUT_FAIL,
                                           policies=p.get("policies") or [],
                                           started=drain_api.ladder_start(start, self.not_before))
        try:
            first = drain_api.survey(self.client, name, settings)
            if recorded is None:
                drain_api.cordon_for_drain(self.client, name, self.annotation, start)
            report = drain_api.drain_node(self.client, name, settings, first_survey=first)
        except drain_api.PodsRefused as exc:
            raise StepFailure("cannot drain node %s: %s" % (name, "; ".join(drain_core.describe_refused(exc.refused))),
                              step="drain", node=name, reason=drain_core.REASON_PODS_REFUSED)
        if report.timed_out and settings.on_timeout == drain_core.ON_TIMEOUT_FAIL:
            raise StepFailure(drain_api.timeout_message(name, deadline, wait_timeout, report), step="drain", node=name,
                              reason=drain_core.REASON_TIMEOUT, blocked=report.blocked, pending=report.pending)
        return dict(drained=report.drained, evicted=report.evicted, blocked=report.blocked, pending=report.pending,
                    forced=report.forced, reason=report.reason, drain_started=drain_api.format_timestamp(start))

    def delete_node(self, node):
        """True when the Node is gone; False when its claim changed since this pass read it (the next pass
        plans again with what it is now)."""
        name = node["metadata"]["name"]
        self._own_change_begins(name)
        gone = False
        try:
            gone = node_state.delete_node_as_read(self.client, node, self.prefix) != "changed"
        finally:
            self._own_change_ends(name, deleted=node if gone else None)
        return gone
