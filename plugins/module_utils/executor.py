# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The upgrade pass in Python: carry out the planner's plan in the safe order, pass after pass.

One pass reads the nodes and the clouds once, plans (core.plan_upgrade), then acts in this order:
point the scaling groups at the image; cache annotations, pair, repair and copy labels; create heirs
within the budget; give back nodes whose pair broke; drain donors whose heir is Ready; remove the etcd
members of drained control-plane donors; delete the instances and the Node objects of finished
replacements; delete instances that never joined, failed or were orphaned; record the phases; journal.
A drain that finishes in a pass goes on to etcd and deletion in the same pass. A pass that finds, once it has created,
as its drains end, or once it has drained, a Node changed since it read them (a heir turned Ready, most often) stops
there (the drains not begun too) and the next comes at once, which pairs that heir; the steps left go in that next
pass, never put off twice (Executor._overtaken). When a Node changed while the pass read the cloud, the Nodes are read
again before the plan, and once more when one changed while it planned and listed its pairings' groups, so that pass
pairs it (Executor.read); a pairings' listing that finds its groups as the plan read them leaves the plan standing. A
journal write due after a finished replacement waits one pass when a Node changed meanwhile (never twice). A pass that
finds nothing the plan was made from changed (the Nodes as the planner reads them, the cloud's read, etcd's health,
the options, the run's records) within a poll interval of it, and no hold opened since, takes that plan again instead
of planning (Executor.read).

The executor takes its outside worlds as arguments, so unit and property tests drive it against an
in-memory world and the upgrade_step action plugin against the real cluster and clouds (one file per outside
world: module_utils/kube_access.py, cloud_access.py and etcd_access.py):
  kube:   list_nodes() -> [Node dict]; write_node(node, entry) -> (status, node); uncordon(name);
          drain(name) -> dict(drained, evicted, drain_started, reason, ...); delete_node(node) -> False when
          the Node changed since it was read (left to the next pass), else True (or None); optionally
          wait_for_change(seconds) (a watch that ends the wait between passes early), drain_concurrency
          (how many donors it can drain at once; MAX_DRAINS_AT_ONCE at most are), nodes_version() (of the last
          list_nodes: moves when what the planner reads of the Nodes changed), changed_since_read() (whether someone
          changed a Node in what the planner reads since the last list_nodes) and calls() ({calls, by_kind} of its
          Kubernetes requests, for the journal)
  cloud:  read(scaling_groups) -> (groups, {group: [Instance]}, {group: error}) or None (no cloud); optionally
          refresh(group_ids) -> ({group: [Instance]}, {group: error}), those of the groups it did not list in
          the last read listed now; optionally notice_nodes([NodeInfo]) before each read (the Nodes of the pass:
          where one appeared, turned Ready or NotReady, or went, the read lists its group);
          set_group_image(group, image); create(group, count) -> (instances, quota message or ""), which may
          return before the cloud ran them: then optionally refusals() -> [quota message] of those it refused since,
          and identified() -> [Instance] of those returned without a providerID (not named by the cloud yet) that it
          named since; delete(provider_ids) -> deleted ids, which may return before the cloud ran them (the instances
          then list as being deleted); normalize(provider_id); optionally reading(), a context
          that spans one slice (the provider then reads each group's manager and template once)
  etcd:   callable(item, endpoints, expected_member_count) that removes the member of item["node_ip"],
          or None when the removal is delegated (the step then returns it in `etcd_due`)
  etcd_health: callable(endpoints) -> [{member, node_ip, message}] (what is wrong with etcd now; [] healthy),
          read before planning while control-plane replacements are owed; no control-plane heir is created
          while it names a problem. Where etcd is reached only through another host (delegated), the health the
          role read there while it is fresh, else core.HEALTH_UNREAD: the slice then ends with etcd_health_due and
          the role reads it (etcd_access.DelegatedEtcdHealth).
  journal: callable(record) (report.merge format), or None
  clock/sleep: time.time and time.sleep in production.

Every destructive step (cordon by drain, etcd removal, delegated or not, instance deletion, Node
deletion) goes through Executor.guard() first: the one place where the executor calls the planner's
cross-checks (core.check_step), on the nodes as this pass last wrote them and on this pass's cloud read; a drain, an
etcd removal and an instance deletion on a listing of their group made in this pass (the cloud lists a group only when
something can have changed there, cloud_reads.py: _read_fresh lists it then).
A refused step is not taken; the refusal is a named problem in the result and on the progress line.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import dataclasses
import time
import uuid

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import (
    cloud_settings, core, facts_views, hold_points, leaving_marks, progress, stop_signals)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_inputs import recorded_per_intent
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_leaving import lb_hold_until

# Seconds between looks while everything waits (a heir joining, a PDB, a deletion): short, because the
# next step should follow a change within about this long.
DEFAULT_POLL = 2.0
DEFAULT_SLICE = 60.0
DRAIN_POLL = 0.5    # while evicted pods are still terminating: their going is not a Node's change
GATE_MARGIN = 0.05  # past a heir's heir_ready_seconds, so the pass finds the gate open
LISTING_WAIT = 0.1  # the least wait for a cloud listing due (CloudAccess.next_listing_in): never a busy loop
# The most donors one pass drains at once, each in its own thread (issue 22). Every donor whose heir is Ready drains in
# the pass; their number is already bounded by the surge, so this cap only matters for a large surge (10 % of 1,000
# workers is 100 donors): the rest wait for a thread within the same pass, not for a later pass. Why 32: each drain may
# have rolling_upgrade_drain_concurrency (default 10) evictions in flight, so 32 drains hold at most 320 requests,
# within the 600 that a default kube-apiserver serves at once (--max-requests-inflight 400 plus
# --max-mutating-requests-inflight 200, shared out by API Priority and Fairness), leaving room for the controllers
# that recreate the evicted pods; above it, the apiserver answers 429 and the drains slow down rather than speed up.
MAX_DRAINS_AT_ONCE = 32
# The most groups whose creates are sent at once (each a request, or one per instance where the cloud takes no list).
MAX_CREATES_AT_ONCE = 16
# The most Node writes one pass sends at once where the kube side allows it (writes_at_once): a wave of 100 heirs is
# 200 pair writes, one after another about 3 s at 15 ms each, the time a heir waits for its pair (issue 22). Writes
# are small PATCHes; 16 stay well within the apiserver's mutating requests in flight (200 by default).
MAX_WRITES_AT_ONCE = 16
# The most groups pointed at the image at once (each a few calls and one or two operations to wait on; the threads
# mostly wait, and the call rate still spaces their calls).
MAX_IMAGE_SETS_AT_ONCE = 16


_UNREAD = object()   # Executor.plan: etcd's health not read by the caller
_SCALARS = (str, int, float, bool, type(None))


def _merged_records(records):
    """One journal record of several (their instances, intents and start counts; the first record of each wins,
    as in the journal)."""
    merged = {}
    for record in records:
        for key, entries in record.items():
            known = merged.setdefault(key, {})
            for ident, value in entries.items():
                known.setdefault(ident, value)
    return merged


def plain_copy(value):
    """A deep copy of plain data (the facts: dicts, lists and scalars) at about a fifth of copy.deepcopy's cost, which a
    kept plan paid twice per plan (issue 22); anything else in it is copied by copy.deepcopy."""
    if isinstance(value, dict):
        return {key: plain_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain_copy(item) for item in value]
    return value if isinstance(value, _SCALARS) else copy.deepcopy(value)


def frozen(value):
    """What `value` holds, as a copy that compares equal to another's exactly when their fields and items are equal: an
    object with attributes (the cloud's Group and Instance, the Options) as its class and its attributes, containers
    copied, scalars kept, anything else by copy.deepcopy. What a plan was made from, kept to compare with the next
    pass's (Executor._reusable), at a third of copy.deepcopy's cost."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, dict):
        return {key: frozen(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(frozen(item) for item in value)
    held = getattr(value, "__dict__", None)
    if isinstance(held, dict):
        return (type(value), frozen(held))
    return copy.deepcopy(value)


# How a refusal names the step it refused.
_STEP_WORDS = {"drain": "cordon and drain", "etcd_remove": "remove the etcd member of",
               "delete_instance": "delete the instance of", "delete_node": "delete the Node object of"}


class StepFailure(Exception):
    """The upgrade cannot go on: the message names the cause; `details` go into the result."""

    def __init__(self, message, **details):
        super().__init__(message)
        self.details = details


class Settings:
    """What the executor needs beyond the planner's options."""

    def __init__(self, options, scaling_groups=None, timeout=None, started=None, poll=DEFAULT_POLL,
                 etcd_endpoints=None, check_mode=False, surge_cap=None, journal_run=None, created=None,
                 start_counts=None, removed_first=None, refills=None, gate_after=None, gate_owed=False, intents=None,
                 taint_to_be_replaced=False):
        self.options = options
        self.scaling_groups = list(scaling_groups or [])
        self.timeout = timeout
        self.started = started
        self.poll = float(poll)
        self.etcd_endpoints = list(etcd_endpoints or [])
        self.check_mode = check_mode
        self.surge_cap = surge_cap
        self.journal_run = journal_run
        # The journal's record of the instances this upgrade created and of the groups' start counts (read at
        # the start of a resumed run, kept up to date here): only recorded instances are removed as surplus.
        self.created = dict(created or {})
        self.start_counts = dict(start_counts or {})
        # Workers removed delete-first and the refills that replaced them (max_unavailable), as journaled.
        self.removed_first = dict(removed_first or {})
        self.refills = dict(refills or {})
        # The creations this upgrade was about to make (written before each create call), so a create that a kill
        # cut off before its record is still known as this upgrade's own (core.plan_upgrade `intents`).
        self.intents = dict(intents or {})
        # "batch" or "replacement": a health gate (cluster_health_gate, run by the role) follows each; None: no gate.
        self.gate_after = gate_after
        # The journal says a gate is owed (a replacement finished since the last gate passed): a resumed run holds
        # new heirs until the batch in flight finished and the gate ran, as the run it resumes would have.
        self.gate_owed = bool(gate_owed)
        # The PreferNoSchedule taint on the nodes to be replaced (leaving_marks); off: every such taint is taken off.
        self.taint_to_be_replaced = bool(taint_to_be_replaced)
        # The cloud settings this upgrade changed ({key: entry}, the journal's cloud_settings): set back at its end.
        self.cloud_settings = {}
        # rolling_upgrade_cloud_settings leave: none is changed, each one that would act is named once.
        self.leave_cloud_settings = False
        # rolling_upgrade_allow_unreadable_autoscale: a setting that cannot be read is named, not refused.
        self.allow_unreadable = False


def planner_options(settings):
    """The planner's options with the surge held where the cloud's refusals put it."""
    options = settings.options
    if settings.surge_cap is None:
        return options
    cap = int(settings.surge_cap)
    if cap <= 0:
        # The preflight found no quota room and the user allows delete-first (max_unavailable): no surge heir.
        return core.Options(**dict(options.__dict__, no_surge=True))
    if options.max_surge_total is not None:
        cap = min(cap, int(options.max_surge_total))
    return core.Options(**dict(options.__dict__, max_surge_total=cap))


class PassState:
    """One pass as it goes: its facts and the Nodes as this pass last wrote them (both replaced when the pass plans
    again with its groups on the image), and what its steps did so far, for the steps after them and the result."""

    def __init__(self, facts, nodes, read_here):
        self.facts = facts
        self.nodes = nodes
        self.read_here = read_here   # the pass read the world itself, so it may plan again on that read
        self.after_overtaken = False   # the pass before stopped early (Executor._overtaken): this one may not
        self.cut_short = False         # this pass stopped its drains early (Executor._drain_donors)
        self.did, self.finished, self.etcd_due, self.refused, self.drains = [], [], [], [], []
        self.images_set = False
        self.creations = []     # the plan's creations this pass made (none while a health gate is owed)
        self.drained_now = []   # donors whose drain finished in this pass
        self.removed_now = []   # control-plane donors whose etcd member this pass removed
        self.finishing = []     # donors whose instance and Node this pass deletes
        self.orphans = []       # instances without their Node that this pass deletes

    @property
    def plan(self):
        return self.facts["plan"]

    def moved(self):
        """Whether anything changed that the next look should follow at once."""
        plan = self.plan
        # plan.obsolete: surplus nodes marked in this pass (plan.surplus's "obsolete" entries among them) are
        # drained in the next look, at once.
        return bool(self.creations or plan["pairs"] or plan["repairs"] or self.removed_now or self.finishing
                    or self.orphans or self.images_set or plan["annotate"] or plan["obsolete"]
                    or any(d.get("evicted") for d in self.drains))

    def result(self, moved):
        return dict(facts=self.facts, did=self.did, moved=moved, finished=self.finished, etcd_due=self.etcd_due,
                    drains=self.drains, refused=self.refused)


class Executor:
    def __init__(self, settings, kube, cloud, etcd=None, journal=None, clock=time.time, sleep=time.sleep,
                 say=None, etcd_health=None, stop=None):
        self.settings = settings
        # A stop asked from outside (stop_signals.StopWatch): taken before a pass and during a wait, never inside a pass.
        self.stop = stop or stop_signals.NoStop()
        self.kube = kube
        self.cloud = cloud
        self.etcd = etcd
        # callable(endpoints) -> [{member, node_ip, message}]: what is wrong with the control plane's etcd now ([]:
        # healthy), read before a pass that may create a control-plane heir; None where etcd is not reached from here.
        self.etcd_health = etcd_health
        self.control_plane_owed = True   # whether the last plan still had control-plane replacements to make
        self.journal = journal
        self.clock = clock
        self.sleep = sleep
        self.say = say or (lambda text: None)
        self.last_progress = ""   # the last pass's progress line: a wait for the API server or the cloud extends it
        self.record_created = None   # callable(record) that writes report.created_record's record at once
        self.record_gate_owed = None  # callable() that records in the journal at once that a health gate is owed
        # callable(facts) run once, on the first pass's plan before its first change (raises StepFailure to refuse)
        self.before_first_change = None
        self.flush_journal = None     # callable() that writes what the passes journaled so far (else: at the slice's end)
        # callable(record) that writes progress.donors_gone_record's record at once (else it goes with self.journal,
        # which upgrade_step buffers until the slice ends: a kill before that lost the donor's replacement)
        self.record_donors_gone = None
        # callable(record) that writes cloud_settings.changed_record's record at once, before the settings change;
        # raises StepFailure when it cannot (a killed run would then not know what to put back)
        self.record_settings = None
        # callable(record) that writes each group's image before the run points it at the new one ({group_images}),
        # at once; raises StepFailure when it cannot (an abort after a kill would not know what to point it back at)
        self.record_group_images = None
        self.settings_left = set()   # the settings this run named as left (rolling_upgrade_cloud_settings leave)
        self.passes = 0
        self.last_read = None     # (nodes, groups) of this executor's last read, for a plan again after set_group_image
        # The last plan with what it was made from, taken again while nothing of that changed (read, _reusable); off:
        # every pass plans (the benchmark's baseline).
        self.plan_reuse = True
        self.planned = None
        self.plans_made = self.plans_reused = 0
        # Each Node parsed once per object the kube side gave (its cache hands out the same copy until the Node changes),
        # not once per view in every plan.
        self.node_infos = core.PerNode(core.NodeInfo.from_k8s)
        self.unnamed = {}         # (group, instance name) -> the intent of a create whose instance the cloud names later
        self.awaiting = {}        # group key -> [intent] of creates whose instance comes back with no name either
        self.instances = None     # {group: [Instance]} of this pass's cloud read: what the guard checks against
        self.relisted = set()     # the groups this pass listed again (_list_again)
        self.overtaken_last = False   # the last pass stopped before its destructive steps (_overtaken)
        self.passes_overtaken = 0
        self.nodes_reread = 0   # reads whose Nodes were read again after the cloud's (a Node changed meanwhile)
        # cloud_view() and _group_of_instance() of self.instances and self.group_errors, until they change
        self.viewed = self.where = None
        self.group_errors = {}
        self.surge_cap_said = False
        # A replacement finished since the last gate: with gate_after "batch" no heir is created until the gate ran.
        self.gate_owed = bool(settings.gate_owed and settings.gate_after)
        self.timings = {"cloud": 0.0, "kube": 0.0, "drain": 0.0, "etcd": 0.0, "wait": 0.0}
        # Names this executor's cumulative timings in the journal (several executors may serve one attempt).
        self.engine_id = uuid.uuid4().hex[:12]

    # -- reading -------------------------------------------------------------------------------------
    def _timed(self, bucket, call, *args):
        start = time.monotonic()
        try:
            return call(*args)
        finally:
            self.timings[bucket] += time.monotonic() - start

    def read(self):
        """Nodes (from the kube side's cache) and the clouds (one read per group), then the plan; with the views the
        progress line and the role use. The last plan is taken again, without planning, while nothing it was made
        from changed (_reusable); the pass then acts on the Nodes as they are now."""
        nodes = self._timed("kube", self.kube.list_nodes)
        version = self.nodes_version() if self.plan_reuse else None
        cloud = notice = None
        if self.cloud is not None:
            notice = getattr(self.cloud, "notice_nodes", None)
            if notice is not None:
                # A Node that appeared, turned Ready or NotReady, or went has its group listed in this read.
                notice(self.node_infos.of(nodes))
            cloud = self._timed("cloud", self.cloud.read, self.settings.scaling_groups or None)
            if self._changed_since_read():
                # A Node changed while the cloud was read (most often a heir turned Ready; at a real cloud's latency
                # the read takes most of a second): the Nodes read again, so that this pass pairs it and not the next.
                # Its group's listing, where the plan pairs it, is made below (_groups_to_confirm).
                nodes, version = self._read_nodes_again(notice)
        groups, instances, errors = cloud if cloud is not None else (None, None, None)
        self._cloud_read(instances, errors)
        self.last_read = (nodes, groups)
        # Before planning: an instance of a create started without waiting that the cloud named since is this run's
        # (recorded at once, as a create's instance is) before the plan reads it.
        self._record_identified()
        health = self._health(nodes)
        last = self.planned
        if version is not None and last is not None and last["version"] == version and self._reusable(
                last, (groups, instances, errors), health):
            self.plans_reused += 1
            facts, named = plain_copy(last["facts"]), {n["metadata"]["name"]: n for n in nodes}
        else:
            facts, named = self.plan(nodes, groups, instances, errors, version=version, health=health)
        refusals = getattr(self.cloud, "refusals", None)
        refused = refusals() if refusals is not None else []
        if refused:
            # Creates of an earlier pass that the cloud refused for quota or capacity once it ran them (the cloud
            # follows their operations): the surge is held as for a create refused at once, before this pass creates
            # (the held surge is one of the planner's options: the plan is made again, never reused).
            self._hold_surge(facts["budget"]["in_flight"], refused)
            facts, named = self.plan(nodes, groups, instances, errors, version=version, health=health)
        # The groups the plan rests on (a pairing's, every group's when it says done) listed in this pass before it
        # stands. Those its destructive steps act in are listed later, after the pairings and creates
        # (_read_acted_on): a heir Ready waits for one round trip fewer.
        facts, named = self._confirmed(facts, named, nodes, groups, version, health)
        if cloud is not None and self._changed_since_read():
            # Once more: a Node changed while the plan was made and its groups listed (a heir came; at 1,000 nodes that
            # takes up to half a second, and the pass after one that stopped early may not stop early itself).
            nodes, version = self._read_nodes_again(notice)
            self.last_read = (nodes, groups)
            health = self._health(nodes)
            facts, named = self.plan(nodes, groups, self.instances, self.group_errors, version=version, health=health)
            facts, named = self._confirmed(facts, named, nodes, groups, version, health)
        return facts, named

    def _read_nodes_again(self, notice):
        """The Nodes and their version read again within a read (a Node changed since), the cloud told of them."""
        nodes = self._timed("kube", self.kube.list_nodes)
        if notice is not None:
            notice(self.node_infos.of(nodes))
        self.nodes_reread += 1
        return nodes, (self.nodes_version() if self.plan_reuse else None)

    def _confirmed(self, facts, named, nodes, groups, version, health):
        """The plan once the groups it rests on are listed in this pass (_groups_to_confirm): made again when a listing
        made only now differs from the one it was made on (the plan is a function of them; at 1,000 nodes planning
        again takes a tenth of a second that a Ready heir waits)."""
        confirm = self._groups_to_confirm(facts, named)
        planned_on = {group: (self.instances.get(group), self.group_errors.get(group)) for group in confirm}
        listed = self._list_again(confirm) & confirm
        if any((self.instances.get(group), self.group_errors.get(group)) != planned_on[group] for group in listed):
            facts, named = self.plan(nodes, groups, self.instances, self.group_errors, version=version, health=health)
        return facts, named

    def _read_acted_on(self, state):
        """The groups of this pass's drains, etcd removals and instance deletions listed in one round (each step is
        judged on a listing of its group made in this pass, _read_fresh): at once, not a round per step."""
        self._list_again(self._groups_acted_on(state.facts))

    def _groups_acted_on(self, facts):
        """The groups of this plan's drains, etcd removals and instance deletions (none in check mode)."""
        if self.settings.check_mode:
            return set()
        plan = facts["plan"]
        return self._groups_of(plan["drain"] + plan["etcd_remove"] + plan["delete_nodes"] + plan["delete_instances"])

    def _groups_to_confirm(self, facts, named):
        """The groups whose listing this plan's decisions rest on, which must be made in this pass (a steady group's
        may be older, CloudAccess): every group when it says done (a group may have lost an instance since, and the run
        would end a node short), and the groups of the nodes it pairs (a heir counts only while its instance runs).
        Both found by the property worlds through CloudAccess."""
        if self.instances is None:
            return set()
        if facts.get("done"):
            return set(self.instances) | set(self.group_errors)
        keys = core.AnnotationKeys(facts["annotation_prefix"])
        pairing = [name for name, patch in (facts.get("node_patches") or {}).items()
                   if any((patch.get("annotations") or {}).get(key) for key in (keys.heir, keys.donor))]
        where = self._group_of_instance()
        return {where.get(self.cloud.normalize(((named.get(name) or {}).get("spec") or {}).get("providerID") or ""))
                for name in pairing} - {None}

    def nodes_version(self):
        """The kube side's version of the Nodes its last list_nodes gave (moves whenever what the planner reads of them
        changed, ours too), or None where it keeps none (then every pass plans)."""
        version = getattr(self.kube, "nodes_version", None)
        return version() if version is not None else None

    def _health(self, nodes):
        """The etcd health to plan with (None while no control-plane replacement is owed, or in check mode)."""
        if self.etcd_health is None or not self.control_plane_owed or self.settings.check_mode:
            return None
        endpoints = self.settings.etcd_endpoints or facts_views.control_plane_endpoints(self.node_infos.of(nodes))
        return self._timed("etcd", self.etcd_health, endpoints)

    def _plan_inputs(self, cloud, health):
        """What a plan is made from besides the Nodes and the clock: the cloud's read, etcd's health, the options and
        what this run recorded (its creations, intents, start counts, delete-first removals and refills)."""
        s = self.settings
        return (cloud, health, planner_options(s), s.scaling_groups, s.created, s.start_counts, s.removed_first,
                s.refills, s.intents)

    def _reusable(self, last, cloud, health):
        """Whether the last plan is this pass's plan too: made from the same Nodes (the caller compares their version),
        the same inputs (_plan_inputs), and young enough that no clock-driven condition can have changed it since:
        the next moment a Ready heir's heir_ready_seconds or a drained node's load-balancer hold runs out, else one
        poll interval (a join timeout, a canary's soak or an intent's window then ends at most one poll later, the
        granularity they have anyway while nothing wakes the wait)."""
        return self.clock() < last["until"] and frozen(self._plan_inputs(cloud, health)) == last["inputs"]

    def plan(self, nodes, groups, instances, errors, version=None, health=_UNREAD):
        """The planner's facts on one read, with the views the progress line and the role use (etcd's `health` read
        for it unless given). With the Nodes' `version` (nodes_version), the plan is kept for the passes that find
        nothing changed (_reusable)."""
        options = planner_options(self.settings)
        normalize = self.cloud.normalize if self.cloud is not None else core.default_normalize
        health = self._health(nodes) if health is _UNREAD else health
        now = self.clock()
        inputs = frozen(self._plan_inputs((groups, instances, errors), health)) if version is not None else None
        infos = self.node_infos.of(nodes)
        facts = core.plan_upgrade(infos, options, groups=groups, instances=instances, group_errors=errors,
                                  now=now, normalize=normalize,
                                  scope=self.settings.scaling_groups or None, created=self.settings.created,
                                  start_counts=self.settings.start_counts,
                                  removed_first=self.settings.removed_first, refills=self.settings.refills,
                                  intents=self.settings.intents, control_plane_health=health)
        self.plans_made += 1
        self.control_plane_owed = bool(facts["budget"]["control_plane_first"])
        if health and health != core.HEALTH_UNREAD:
            facts["control_plane_health"] = health
        keys = core.AnnotationKeys(facts["annotation_prefix"])
        facts.update(donors=facts_views.donors(nodes, facts, keys, instances, infos=infos),
                     donors_gone=facts_views.donors_gone(infos, facts, keys), not_ready=facts_views.not_ready(infos),
                     control_plane_endpoints=facts_views.control_plane_endpoints(infos))
        by_name = {n["metadata"]["name"]: n for n in nodes}
        self.planned = None
        if version is not None and self.plan_reuse:
            # Up to the next hold that opens after this plan (one already open is in it), at most one poll interval.
            until = min([now + float(self.settings.poll)] + [m for m in self._gate_moments(facts) if m > now])
            self.planned = dict(version=version, inputs=inputs, until=until, facts=plain_copy(facts))
        return facts, by_name

    # -- the single place for safety cross-checks -----------------------------------------------------
    def cloud_view(self):
        """The cloud as this pass read it, for the cross-checks (None when no cloud was read): compared by the
        provider's own providerID spelling, and complete only when every group answered. Made once per read and
        listing round (_cloud_read), not once per destructive step: each guard call made it anew over every instance."""
        if self.instances is None:
            return None
        if self.viewed is None:
            normalize = self.cloud.normalize if self.cloud is not None else core.default_normalize
            listed = [i for items in self.instances.values() for i in items]
            self.viewed = core.CloudView(listed, normalize, complete=not self.group_errors)
        return self.viewed

    def guard(self, step, item, facts, nodes):
        """The planner's cross-checks of cloud against cluster (core.check_step) on the nodes as fresh as
        this pass has them and on this pass's cloud read, before a destructive step. Returns None when the
        step may go ahead, else the named problem (a dict as the planner's, with action "refused"); the
        caller then leaves that node or instance alone."""
        name = item.get("name")
        problem = core.check_step(step, item, facts, nodes=nodes, instances=self.cloud_view(), now=self.clock())
        if not problem:
            return None
        what = ("node %s" % name) if name else ("instance %s" % item.get("provider_id"))
        problem = problem.replace("node %s: " % name, "") if name else problem   # named once, in front
        return dict(node=name, provider_id=item.get("provider_id"), step=step, code="refused", action="refused",
                    message="refusing to %s %s: %s; it is left alone (nothing destructive is done to it) until the "
                            "cluster and the cloud agree: correct what is named, or take it out of "
                            "rolling_upgrade_scaling_groups, and run again" % (_STEP_WORDS[step], what, problem))

    def _read_fresh(self, items):
        """A drain, an etcd removal or an instance deletion is judged on a listing of its group made in this pass: the groups
        of `items` that the cloud served from an earlier listing (CloudAccess.read lists a group only when something can
        have changed there, cloud_reads.py) are listed now, and the guard's cloud view takes them."""
        self._list_again(self._groups_of(items))

    def _groups_of(self, items):
        """The groups of `items` (plan entries with a group or a providerID): every group when one names an instance
        that no listing of this pass holds, so that none is judged on an older listing."""
        if self.instances is None or not items:
            return set()
        where = self._group_of_instance()
        groups = {item.get("group") or where.get(self.cloud.normalize(item.get("provider_id") or "")) for item in items}
        if None in groups:
            groups = set(self.instances) | set(self.group_errors)
        return groups - {None}

    def _cloud_read(self, instances, errors):
        """This pass's cloud read, what the guard checks against."""
        self.instances, self.group_errors, self.relisted = instances, dict(errors or {}), set()
        self.viewed = self.where = None

    def _group_of_instance(self):
        """{normalized providerID: group} of this pass's cloud read (made once per read and listing round, as
        cloud_view)."""
        if self.where is None:
            self.where = {self.cloud.normalize(i.provider_id): group for group, listed in self.instances.items()
                          for i in listed}
        return self.where

    def _list_again(self, groups):
        """The groups of `groups` not listed in this pass listed now (the cloud's refresh, which also skips those its
        read listed), into this pass's read; returns those it listed."""
        refresh = getattr(self.cloud, "refresh", None)
        groups = set(groups) - self.relisted
        if refresh is None or self.instances is None or not groups:
            return set()
        self.relisted |= groups
        instances, errors = self._timed("cloud", refresh, sorted(groups))
        self.viewed = self.where = None
        self.instances.update(instances)
        for group in instances:
            self.group_errors.pop(group, None)
        for group, error in errors.items():
            self.instances.pop(group, None)
            self.group_errors[group] = error
        return set(instances) | set(errors)

    # -- one pass ------------------------------------------------------------------------------------
    def run_pass(self, facts=None, nodes=None, instances=None, group_errors=None):
        """Read (unless given: then `instances` and `group_errors` are the cloud read the plan was made
        from), act on the plan, and say what was done. Returns a dict: facts, did (list of {step, ...}),
        moved (whether anything changed that the next look should follow at once), finished (names whose
        replacement ended), etcd_due (delegated removals), refused (the guard's named problems, also in
        facts["problems"] and so on the progress line)."""
        self.passes += 1
        after_one, self.overtaken_last = self.overtaken_last, False
        state = self._begin_pass(facts, nodes, instances, group_errors)
        state.after_overtaken = after_one
        self._check_timeout(state.facts)
        if self.settings.check_mode:
            return state.result(moved=False)
        if self.before_first_change is not None:
            check, self.before_first_change = self.before_first_change, None
            check(state.facts)
        self._neutralise_cloud_settings(state)
        self._point_groups_at_image(state)
        self._write_plan_records(state)
        self._journal_donors_gone(state)
        self._write_node_patches(state)
        self._create_heirs(state)
        self._write_node_patches(state, cached=True)
        self._mark_nodes_to_replace(state)
        self._uncordon_given_back(state)
        if self._overtaken(state):
            self._journal_pass(state)
            return state.result(moved=True)
        self._read_acted_on(state)
        self._drain_donors(state)
        if self._overtaken(state, drained=True):
            self._journal_pass(state)
            return state.result(moved=True)
        self._remove_etcd_members(state)
        self._delete_finished_donors(state)
        self._delete_orphan_instances(state)
        self._journal_pass(state)
        return state.result(moved=state.moved())

    def _overtaken(self, state, drained=False):
        """Whether this pass stops before its drains, etcd removals and deletions (or, `drained`, once its drains are
        done or cut short, before its etcd removals and deletions) because a Node changed since it read them (the kube
        side says so; most often a heir turned Ready): the next pass, at once, pairs that heir instead of waiting for
        this pass's destructive steps (about a second at a real cloud's latency), and takes them up again on its own
        plan. Never two passes in a row, so those steps are put off by one pass at most."""
        if state.cut_short:
            return True   # counted when the drains were cut (_drain_donors)
        plan = state.plan
        left = plan["etcd_remove"] or plan["delete_nodes"] or plan["delete_instances"] or (
            state.drained_now if drained else plan["drain"])
        if not left or not self._may_stop(state):
            return False
        self._stopped_early()
        return True

    def _may_stop(self, state):
        """Whether this pass may stop early for a Node changed since it read them: it read the world itself, the pass
        before did not stop early, and a Node changed."""
        return state.read_here and not state.after_overtaken and self._changed_since_read()

    def _stopped_early(self):
        self.overtaken_last = True
        self.passes_overtaken += 1

    def _changed_since_read(self):
        """Whether the kube side says a Node changed in what the planner reads since the last list_nodes, by someone
        else (False where it cannot tell)."""
        changed = getattr(self.kube, "changed_since_read", None)
        return changed is not None and bool(changed())

    def _begin_pass(self, facts, nodes, instances, group_errors):
        read_here = facts is None
        if read_here:
            facts, nodes = self.read()
        elif instances is not None:
            self._cloud_read(instances, group_errors)
        return PassState(facts, nodes, read_here)

    @staticmethod
    def _reached(point):
        """A destructive step's call returned (hold_points): a test may hold the engine here, or make it fail."""
        hold_points.reached(point)
        injected = hold_points.failure_due(point)
        if injected:
            raise StepFailure(injected)

    def _allowed(self, state, step, item):
        """Whether the guard lets `step` go ahead on `item`; a refusal goes into the pass's result, its facts'
        problems and a warning."""
        problem = self.guard(step, item, state.facts, state.nodes)
        if problem is not None:
            state.refused.append(problem)
            state.facts.setdefault("problems", []).append(problem)
            self.say("WARNING: " + problem["message"])
        return problem is None

    def settings_judged(self, facts):
        """cloud_settings.judge on the groups in scope of this executor's last read (facts' scaling_groups)."""
        groups = (self.last_read or (None, None))[1] or []
        rows = {r["id"]: r for r in facts.get("scaling_groups") or []}
        max_unavailable = self.settings.options.max_unavailable
        return cloud_settings.judge([g for g in groups if g.id in rows], self.settings.cloud_settings, lambda g: (
            cloud_settings.unavailable(max_unavailable, rows[g.id].get("role"), g.target_size)),
            allow_unreadable=self.settings.allow_unreadable)

    def _stamp(self):
        """Now, as the journal writes moments."""
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))

    def _neutralise_cloud_settings(self, state):
        """Before the first change to a group: the settings with which its cloud would act on it by itself set to
        their neutral value (cloud_settings.py), the values found journaled first; a setting that cannot be changed
        safely stops the run here, before anything else of the pass."""
        if self.cloud is None or state.facts.get("done"):
            return
        judged = self.settings_judged(state.facts)
        unread = [u for u in judged["unread"] if u["text"] not in self.settings_left]
        for item in unread:
            self.settings_left.add(item["text"])
            self.say("WARNING: " + item["text"])
        if unread and self.journal is not None:
            self._timed("kube", self.journal, cloud_settings.unread_record(unread, self._stamp()))
        if self.settings.leave_cloud_settings:
            left = [cloud_settings.describe(c) for c in judged["changes"]] + judged["refusals"]
            for text in (t for t in left if t not in self.settings_left):
                self.settings_left.add(text)
                self.say("WARNING: left as it is (rolling_upgrade_cloud_settings leave), the cloud may act on its own: %s"
                         % text)
            return
        if judged["refusals"]:
            raise StepFailure("%s. Nothing in the cloud was changed" % "; ".join(judged["refusals"]),
                              reason="cloud_setting")
        if judged["changes"]:
            record = cloud_settings.changed_record(judged["changes"], self._stamp())
            if self.record_settings is not None:
                self.record_settings(record)
            self.settings.cloud_settings.update(record["cloud_settings"])
        for change in judged["changes"] + judged["again"]:
            self._timed("cloud", self.cloud.set_setting, change["group"], change["name"], change["neutral"])
            state.did.append(dict(step="set_cloud_setting", group=change["group"], setting=change["name"],
                                  value=change["neutral"], was=change["original"]))
            self.say("set %s" % cloud_settings.describe(change))

    def _point_groups_at_image(self, state):
        items = state.plan["set_group_image"]
        if items and self.record_group_images is not None:
            # Before the cloud write: a run killed right after it still knows what each group ran (abort, rollback).
            self._timed("kube", self.record_group_images, self._group_images_record(items))
        self._timed("cloud", self._set_group_images, items)
        state.did.extend(dict(step="set_group_image", group=item["group"]) for item in items)
        state.images_set = bool(items)
        if state.images_set:
            self._reached("set-group-image")
        if state.images_set and state.read_here:
            # The cloud accepted the image: plan again on the same read with those groups on it, so the first
            # heirs are created in this pass, not one pass (a read of every group) later.
            state.facts, state.nodes = self._replan_with_images({i["group"] for i in items}, state.facts)

    def _write_plan_records(self, state):
        """The groups' start counts, the delete-first removals and refills, and the creations recovered from an
        open create intent, as the plan asks them recorded."""
        plan = state.plan
        for key, found in (plan.get("record_intents") or {}).items():
            if key in self.settings.intents:
                for name, value in found.items():
                    self.settings.intents[key].setdefault(name, value)
        if (plan.get("record_start_counts") or plan.get("record_removed_first") or plan.get("record_refills")
                or plan.get("record_created") or plan.get("record_intents")):
            # Before the delete-first marks and refills are written: a kill after them finds what they replace. With
            # them, the instances an open create intent accounts for (their create's record was cut off).
            self._record_created([], state.facts, start_counts=plan.get("record_start_counts") or {},
                                 delete_first=dict(removed_first=plan.get("record_removed_first") or {},
                                                   refills=plan.get("record_refills") or {}),
                                 recovered=plan.get("record_created") or {}, intents=plan.get("record_intents") or {})

    def _journal_donors_gone(self, state):
        write_gone = self.record_donors_gone or self.journal
        if state.facts.get("donors_gone") and write_gone is not None:
            # Before the promotion that forgets their names: a kill after it still leaves them journaled.
            self._timed("kube", write_gone, progress.donors_gone_record(state.facts, core.format_time(self.clock())))

    def _write_node_patches(self, state, cached=False):
        """The plan's Node writes (pairs, repairs, copied labels and taints; with `cached`, those that only cache a
        node's group and image, written after the pass's creates: on a first pass, a write for every node of the
        cluster), in write_order: every heir's half of a pair before any donor's, each tier at once where the kube
        side allows it."""
        patches, nodes = state.facts["node_patches"], state.nodes
        keys = core.AnnotationKeys(state.facts["annotation_prefix"])
        for tier in (0, 1):
            names = sorted(n for n in patches if n in nodes and write_order(n, patches[n], keys)[0] == tier
                           and cache_only(patches[n], keys) == cached)
            for name, (status, after) in zip(names, self._write_nodes([(nodes[n], patches[n]) for n in names])):
                if status == "changed":
                    nodes[name] = after
                    state.did.append(dict(step="patch", name=name))
        for repair in [] if cached else state.plan.get("repairs") or []:
            if repair.get("action") == "swap":
                # The donor chosen when it is drained (issue 25): which node goes first, and why, said once.
                self.say("heir %s replaces %s instead of %s: %s"
                         % (repair["name"], repair["donor"], repair["instead_of"], repair["reason"]))

    def _mark_nodes_to_replace(self, state):
        """The PreferNoSchedule taint on the nodes to be replaced, after the pass's creates and before any drain, so
        that a pod evicted from a donor avoids them; off every node that stays (leaving_marks.taint_writes), at once
        where the kube side allows it. Each change is journaled."""
        keys = core.AnnotationKeys(state.facts["annotation_prefix"])
        writes = leaving_marks.taint_writes(state.nodes, state.facts, keys, self.settings.taint_to_be_replaced)
        moment, record = core.format_time(self.clock()), {}
        names = list(writes)
        for name, (status, after) in zip(names, self._write_nodes([(state.nodes[n], writes[n]) for n in names])):
            if status == "changed":
                state.nodes[name] = after
                record[name] = {"removed" if writes[name].get("drop_taints") else "set": moment}
        if record and self.journal is not None:
            self._timed("kube", self.journal, {"replacing_taints": record})

    def _exclude_from_load_balancers(self, state, names):
        """The exclude-from-external-load-balancers label, with its moment, on these leaving nodes (before their drain
        cordons them): their etcd member and instance wait lb_drain_seconds from that moment (plan_leaving)."""
        keys = core.AnnotationKeys(state.facts["annotation_prefix"])
        names = [name for name in names if name in state.nodes]
        writes = [(state.nodes[name], leaving_marks.lb_exclusion_entry(state.nodes[name], keys, self.clock()))
                  for name in names]
        for name, (status, after) in zip(names, self._write_nodes(writes)):
            if status == "changed":
                state.nodes[name] = after
                state.did.append(dict(step="exclude_from_lb", name=name))

    def _out_of_lb_long_enough(self, state, item):
        """Whether a node drained in this pass has been out of the load balancers for lb_drain_seconds (else the plan
        holds its etcd member and its instance in a later pass, plan.waiting_for_lb)."""
        node = state.nodes.get(item["name"]) or {}
        meta = node.get("metadata") or {}
        until = lb_hold_until(meta.get("labels"), meta.get("annotations"), core.AnnotationKeys(state.facts["annotation_prefix"]),
                              self.settings.options.lb_drain_seconds)
        return until is not None and until <= self.clock()

    def _create_heirs(self, state):
        """The plan's creations (none while a health gate is owed): every group's intent recorded before the calls
        (one journal write), the groups' creates at once where the cloud allows (each group's wave is one request on
        GCE: the pass is held by one cloud round trip, not one a group), and what they made recorded as this
        upgrade's own after (one write; before a failure of one group's create is raised). A quota refusal, or a heir
        the cloud gave up on for quota, holds the surge."""
        created_total, refusals = 0, []
        state.creations = [] if self.gate_owed else state.plan["create"]
        if state.creations:
            intents = self._record_intents(state.creations, state.facts,
                                           self.last_read[1] if state.read_here else None)
            outcomes = self._create_all(state.creations)
            records, failure = [], None
            for item, (made, error) in zip(state.creations, outcomes):
                created, quota_refusal = made if error is None else ([], "")
                failure = failure or error
                created_total += len(created)
                records.append(self._created_record(created, state.facts, intent=intents[item["group"]]))
                state.did.append(dict(step="create", group=item["group"], count=len(created)))
                if quota_refusal:
                    refusals.append(quota_refusal)
            if created_total:
                self._reached("create")
            self._write_created(_merged_records(records))
            if failure is not None:
                raise failure
        late = [i for i in state.plan["delete_instances"] if i.get("quota_exceeded")]
        if refusals or late:
            self._hold_surge(state.facts["budget"]["in_flight"] + created_total - len(late),
                             refusals + [i["reason"] for i in late])

    def _create_all(self, items):
        """[((created, quota refusal), None) or (None, the StepFailure)] of each creation, in plan order: at once
        where the cloud allows it (CloudAccess.creates_in_parallel), else one after another, where the first failure
        stops the rest (as a kill would)."""
        def create(item):
            try:
                return self._timed("cloud", self.cloud.create, item["group"], item["count"]), None
            except StepFailure as exc:
                return None, exc

        if len(items) <= 1 or not getattr(self.cloud, "creates_in_parallel", False):
            outcomes = []
            for item in items:
                outcomes.append(create(item))
                if outcomes[-1][1] is not None:
                    break
            return outcomes
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(items), MAX_CREATES_AT_ONCE)) as pool:
            return list(pool.map(create, items))

    def _uncordon_given_back(self, state):
        """Nodes our drain cordoned whose pair broke since: their capacity goes back; and nodes whose pair broke after
        we took them out of the load balancers but before their drain go back into those."""
        keys = core.AnnotationKeys(state.facts["annotation_prefix"])
        for name in state.plan["uncordon"]:
            self._timed("kube", self.kube.uncordon, name)
            state.did.append(dict(step="uncordon", name=name))
            self._back_in_load_balancers(state, name, keys)
        for name in state.plan.get("lb_release") or []:
            if self._back_in_load_balancers(state, name, keys):
                state.did.append(dict(step="lb_release", name=name))

    def _back_in_load_balancers(self, state, name, keys):
        """Our exclusion label off node `name` again; whether that changed it."""
        released = leaving_marks.lb_release_entry(state.nodes.get(name) or {}, keys)
        if released is None:
            return False
        status, after = self._timed("kube", self.kube.write_node, state.nodes[name], released)
        if status == "changed":
            state.nodes[name] = after
        return status == "changed"

    def _drain_donors(self, state):
        """One eviction round on each donor the guard allows; each drain's phase is written, a finished one's
        donor goes on to etcd and deletion in this pass (state.drained_now)."""
        self._read_fresh(state.plan["drain"])   # a heir the cloud deletes meanwhile must stop its donor's drain
        to_drain = [item for item in state.plan["drain"] if self._allowed(state, "drain", item)]
        # Out of the load balancers first: the drains the guard allows, and nodes a run without the label drained.
        draining = {item["name"] for item in state.plan["drain"]}
        labelled = set(state.plan.get("exclude_from_lb") or [])
        self._exclude_from_load_balancers(state, [i["name"] for i in to_drain if i["name"] in labelled]
                                          + sorted(labelled - draining))
        # Written before the drain cordons the node: a kill right after the cordon then leaves a node whose phase
        # says this upgrade cordoned it, so a pair broken later gives the capacity back (the plan's uncordon).
        self._record_phases(state.nodes, [item["name"] for item in to_drain], core.PHASE_DRAINING)
        outcomes = self._timed("drain", self._drain_all, to_drain, lambda: self._may_stop(state))
        if any(outcome is None for outcome in outcomes):
            # A Node changed while the wave's drains ran (_may_stop): those not begun wait for the next pass, at once,
            # which pairs that heir first; this one stops after the drains that began (_overtaken).
            state.cut_short = True
            self._stopped_early()
            begun = [n for n, outcome in enumerate(outcomes) if outcome is not None]
            to_drain, outcomes = [to_drain[n] for n in begun], [outcomes[n] for n in begun]
        for item, outcome in zip(to_drain, outcomes):
            state.drains.append(dict(outcome, item=item, node=item["name"]))
            self._reached("drain")
        self._record_phases(state.nodes, [item["name"] for item, outcome in zip(to_drain, outcomes)
                                          if outcome.get("drained")], core.PHASE_DRAINED)
        for item, outcome in zip(to_drain, outcomes):
            state.did.append(dict(step="drain", name=item["name"], drained=bool(outcome.get("drained")),
                                  evicted=len(outcome.get("evicted") or [])))
            if outcome.get("drained") and self._out_of_lb_long_enough(state, item):
                state.drained_now.append(item)

    def _remove_etcd_members(self, state):
        """The etcd members of the plan's and of this pass's drained control-plane donors: removed here, or
        returned in etcd_due where the removal is delegated; a removal that waits is left to a later pass."""
        facts = state.facts
        removals = state.plan["etcd_remove"] + [i for i in state.drained_now if i.get("control_plane")]
        self._read_fresh(removals)
        for item in removals:
            if not self._allowed(state, "etcd_remove", item):
                continue
            if self.etcd is None:
                state.etcd_due.append(dict(name=item["name"], node_ip=item.get("node_ip"),
                                           provider_id=item.get("provider_id"), group=item.get("group")))
                continue
            endpoints = self.settings.etcd_endpoints or facts["control_plane_endpoints"]
            outcome = self._timed("etcd", self.etcd, item, endpoints, len(facts["control_plane_endpoints"]))
            if (outcome or {}).get("waiting"):
                # Not removed: another member is unhealthy or quorum would be lost; the next pass checks again.
                self.say("WARNING: %s" % outcome["msg"])
                facts.setdefault("etcd_waiting", []).append(dict(name=item["name"], msg=outcome["msg"],
                                                                 waiting_on=outcome.get("waiting_on") or []))
                continue
            self._reached("etcd-remove")
            self._record_phase(state.nodes, item["name"], core.PHASE_ETCD_REMOVED)
            state.did.append(dict(step="etcd_remove", name=item["name"]))
            state.removed_now.append(item)

    def _delete_finished_donors(self, state):
        """The instances, then the Node objects, of the plan's finished donors and of this pass's drained workers
        and removed control-plane members."""
        nodes = state.nodes
        finishing = (state.plan["delete_nodes"] + [i for i in state.drained_now if not i.get("control_plane")]
                     + state.removed_now)
        self._read_fresh(finishing)
        state.finishing = [item for item in finishing if self._allowed(state, "delete_instance", item)]
        if not state.finishing:
            return
        # Owed (and journaled) before the deletions: a run cut off after them, before its pass ended, still leaves the
        # gate owed to the run that resumes.
        self._owe_gate()
        ids = [i["provider_id"] for i in state.finishing if i.get("provider_id")]
        if ids:
            self._timed("cloud", self.cloud.delete, ids)
            self._reached("delete-instance")
        allowed = [item for item in state.finishing if self._allowed(state, "delete_node", item)]
        present = [item for item in allowed if item["name"] in nodes]
        deleted = dict(zip((item["name"] for item in present),
                           self._kube_at_once(self.kube.delete_node, [(nodes[item["name"]],) for item in present])))
        for item in allowed:
            if deleted.get(item["name"]) is False:
                self.say("WARNING: node %s changed while being deleted; the next pass looks at it again" % item["name"])
                continue
            state.finished.append(item["name"])
            state.did.append(dict(step="delete", name=item["name"]))
            self._reached("delete-node")

    def _delete_orphan_instances(self, state):
        """The plan's instances that never joined, failed or were orphaned (plan.delete_instances)."""
        self._read_fresh(state.plan["delete_instances"])
        state.orphans = [item for item in state.plan["delete_instances"] if self._allowed(state, "delete_instance", item)]
        if state.orphans:
            self._timed("cloud", self.cloud.delete, [i["provider_id"] for i in state.orphans])
            state.did.extend(dict(step="delete_instance", provider_id=i["provider_id"], reason=i.get("reason"))
                             for i in state.orphans)

    def _journal_pass(self, state):
        if self.journal is not None:
            self._timed("kube", self.journal, progress.journal_record(
                state.facts, self.passes, state.drains, state.finished, run=self.settings.journal_run,
                api_seconds=self.timings, engine_id=self.engine_id, etcd_removed=[i["name"] for i in state.removed_now],
                cloud_calls=self.cloud_calls(), kube_calls=self.kube_calls()))

    def cloud_calls(self):
        """The cloud's count of this executor's calls (CloudAccess.calls), or None where the cloud keeps none."""
        calls = getattr(self.cloud, "calls", None)
        return calls() if calls is not None else None

    def kube_calls(self):
        """The Kubernetes requests of this executor's client by kind (KubeAccess.calls), or None where none are kept."""
        calls = getattr(self.kube, "calls", None)
        return calls() if calls is not None else None

    def _drain_all(self, items, stop=None):
        """One eviction round on each donor, in plan order; at once where the kube side offers it (its
        drain_concurrency), every donor whose heir is Ready in its own thread up to MAX_DRAINS_AT_ONCE, so that a wave of
        donors whose heirs turned Ready together is cordoned together and not one API round trip after another. Their
        number is the surge's: each has a Ready heir. Evictions a PodDisruptionBudget refuses are not an error: the
        round reports them blocked and the next pass tries again. At once, every drain begun is tried and the first
        failure in plan order is raised when all have ended; one after another, the first failure stops the rest (as a
        kill would). Once `stop()` says so (asked as each drain ends), the drains not begun are not (None for each)."""
        workers = min(int(getattr(self.kube, "drain_concurrency", 1) or 1), MAX_DRAINS_AT_ONCE)
        return each_at_once(self.kube.drain, [(item["name"],) for item in items], workers, stop=stop)

    def _set_group_images(self, items):
        """Point every group at the image at once: each is a template (or model) write and a wait on the cloud's
        operation, independent of the others, at most MAX_IMAGE_SETS_AT_ONCE at a time; every one is tried and the first
        failure in plan order is raised."""
        if len(items) <= 1:
            for item in items:
                self.cloud.set_group_image(item["group"], item["image"])
            return
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(items), MAX_IMAGE_SETS_AT_ONCE)) as pool:
            futures = [pool.submit(self.cloud.set_group_image, item["group"], item["image"]) for item in items]
            concurrent.futures.wait(futures)
        for future in futures:
            future.result()

    def _group_images_record(self, items):
        """{group_images: {group: {before, at}}}: the image each group of `items` has before it is pointed at the new
        one, as this executor's last read saw it (the journal keeps the first record of each group)."""
        before = {g.id: g.image for g in (self.last_read or (None, None))[1] or []}
        moment = self._stamp()
        return {"group_images": {item["group"]: {"before": before.get(item["group"]), "at": moment}
                                 for item in items if before.get(item["group"])}}

    def _replan_with_images(self, group_ids, facts):
        listed, groups = self.last_read
        target = facts["target_image"]
        groups = [dataclasses.replace(g, image=target) if g.id in group_ids else g for g in groups]
        replanned, nodes = self.plan(listed, groups, self.instances, self.group_errors)
        replanned["plan"]["set_group_image"] = []
        return replanned, nodes

    def _record_identified(self):
        """The instances of creates started without waiting that the cloud named since the last read (their create
        returned no providerID: CloudAccess.identified), recorded as this upgrade's own, each under the oldest intent
        of its group that still accounts for more instances than are recorded under it. Until recorded, their intent,
        settled with the count the cloud accepted, accounts for them (core.plan_upgrade `intents`): a kill loses
        nothing."""
        identified = getattr(self.cloud, "identified", None)
        for inst in identified() if identified is not None else []:
            intent = (self.unnamed.pop((inst.group_id, inst.name), None) or self._awaited(inst.group_id)
                      or self._open_intent(inst))
            if inst.provider_id not in self.settings.created:   # else a plan recovered it under its intent already
                # Not settled here: its create settled that intent with the count the cloud accepted, and an intent a
                # kill left unsettled keeps its intended count (a settle of 1 here, first record winning, would tell the
                # plan that intent made fewer instances than it may have, and one of them would read as foreign).
                self._record_created([inst], {}, intent=intent, settle=False)

    def _awaited(self, group_id):
        """The intent of this executor's oldest create in `group_id` whose instance came back with neither a
        providerID nor a name (AWS, Azure: the cloud picks both later), taken off the list; None when there is none.
        Before the oldest open intent of the group: after a kill, that is the cut-off create's, whose instance is
        not this one."""
        waiting = self.awaiting.get(core.group_key(group_id))
        return waiting.pop(0) if waiting else None

    def _open_intent(self, inst):
        """The key of the oldest create intent of `inst`'s group with fewer instances recorded under it than it settled
        (or intended) that can have made `inst`: written at most INTENT_WINDOW before its creation time, and, where a
        plan found the intent's instance among some it could not tell apart (`unclaimed`), one of those. None when
        there is none. (An executor started since the create knows no more: the oldest open intent of the group was
        a create that a kill cut off, whose instance is not this one, found by the property worlds.)"""
        recorded = recorded_per_intent(self.settings.created)
        normalize = getattr(self.cloud, "normalize", core.default_normalize)
        for key, intent in sorted(self.settings.intents.items(), key=lambda kv: (str(kv[1].get("at")), kv[0])):
            made = intent.get("settled", intent.get("count"))
            if not (core.same(intent.get("group"), inst.group_id) and isinstance(made, int) and recorded.get(key, 0) < made):
                continue
            at, found = core.parse_time(intent.get("at")), intent.get("unclaimed")
            if inst.created_at is not None and at is not None and not at <= inst.created_at <= at + core.INTENT_WINDOW:
                continue
            if isinstance(found, dict) and normalize(inst.provider_id) not in {normalize(str(p)) for p in found.get("among") or []}:
                continue
            return key
        return None

    def _record_intents(self, items, facts, groups=None):
        """Record, before the create calls, that `item["count"]` instances are about to be created in each item's
        group (one journal write): a kill after the cloud's create and before the record of what it made leaves
        instances that this record still proves ours (core.plan_upgrade `intents`). `groups`: the cloud's groups as
        this pass read them. Returns {group: the intent's key}."""
        from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import report

        # The group's target size before the call, as this pass read it: a kill before the call then claims no
        # instance the group made by itself in the same second (core.plan_upgrade `intents`).
        wanted = {core.group_key(item["group"]) for item in items}
        sizes = {g.id: g.target_size for g in groups or [] if core.group_key(g.id) in wanted}
        unsettled = {}
        for key, intent in self.settings.intents.items():
            if "settled" not in intent:
                unsettled.setdefault(core.group_key(intent.get("group")), []).append(key)
        record, keys = report.intent_record(items, self.clock(), target_sizes=sizes, open_before={
            item["group"]: unsettled.get(core.group_key(item["group"])) for item in items})
        self.settings.intents.update(record["create_intents"])
        # The groups' counts before this upgrade created anything go with its first intent (first record wins).
        record["start_counts"] = report.created_record([], facts.get("scaling_groups"), self.clock())["start_counts"]
        for group_id, count in record["start_counts"].items():
            self.settings.start_counts.setdefault(group_id, count)
        if self.record_created is not None:
            self._timed("kube", self.record_created, record)
        return keys

    def _record_created(self, created, facts, start_counts=None, delete_first=None, intent=None, recovered=None,
                        settle=True, intents=None):
        """Record new instances as this upgrade's own at once (_created_record, written)."""
        record = self._created_record(created, facts, start_counts, delete_first, intent, recovered, settle, intents)
        if created or recovered or start_counts or delete_first or intent or intents:
            self._write_created(record)

    def _write_created(self, record):
        if self.record_created is not None and record:
            self._timed("kube", self.record_created, record)

    def _created_record(self, created, facts, start_counts=None, delete_first=None, intent=None, recovered=None,
                        settle=True, intents=None):
        """The record of new instances as this upgrade's own, known to this executor at once (first record wins, as
        in the journal); with `intent`, they name the intent they came from, and (with `settle`: the create call's
        own record) the intent is settled with how many the call created (those the cloud has not named yet, with no
        providerID, among them: the intent accounts for them until they are recorded). `intents`: {key: fields} to
        record in create intents (what the plan found of an intent: PlanInputs.recover_intents)."""
        from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import report

        record = report.created_record(created, facts.get("scaling_groups"), self.clock())
        if intent is not None:
            record = report.settled_record(record, {self.settings.intents[intent]["group"]: intent})
            if settle:
                record.setdefault("create_intents", {})[intent] = {"settled": len(created)}
                self.settings.intents[intent].setdefault("settled", len(created))
                for inst in created:   # recorded under it once the cloud names it
                    if not inst.provider_id and inst.name:
                        self.unnamed[(inst.group_id, inst.name)] = intent
                    elif not inst.provider_id:
                        self.awaiting.setdefault(core.group_key(inst.group_id), []).append(intent)
            else:
                record.pop("create_intents", None)
        record["instances_created"].update(recovered or {})
        if intents:
            record.setdefault("create_intents", {}).update({k: dict(v) for k, v in intents.items()})
        if start_counts is not None:
            record["start_counts"] = dict(start_counts)
        record.update({k: dict(v) for k, v in (delete_first or {}).items() if v})
        for key, known in (("instances_created", self.settings.created), ("start_counts", self.settings.start_counts),
                           ("removed_first", self.settings.removed_first), ("refills", self.settings.refills)):
            if key not in record:
                continue
            for ident, value in record[key].items():
                known.setdefault(ident, value)
        return record

    def _record_phase(self, nodes, name, phase):
        self._record_phases(nodes, [name], phase)

    def _record_phases(self, nodes, names, phase):
        """`phase` written on each of these nodes (at once where the kube side allows it)."""
        writes = []
        for name in names:
            node = nodes.get(name)
            annotations = core.phase_patch(node, phase, self.settings.options, self.clock()) if node is not None else None
            if annotations:
                writes.append((node, {"annotations": annotations, "expect": {}}))
        for (node, _entry), (status, after) in zip(writes, self._write_nodes(writes)):
            if status == "changed":
                nodes[node["metadata"]["name"]] = after

    def _write_nodes(self, writes):
        """[(status, node after)] of kube.write_node on each (node, entry), in order (_kube_at_once)."""
        return self._kube_at_once(self.kube.write_node, writes)

    def _kube_at_once(self, call, calls):
        """each_at_once(call, calls): up to MAX_WRITES_AT_ONCE at a time where the kube side says its writes may overlap
        (writes_at_once), else one after another."""
        workers = min(int(getattr(self.kube, "writes_at_once", 1) or 1), MAX_WRITES_AT_ONCE)
        return self._timed("kube", each_at_once, call, calls, workers)

    def _hold_surge(self, in_flight, reasons):
        cap = max(int(in_flight), 1)
        if self.settings.surge_cap is None or cap < int(self.settings.surge_cap):
            self.settings.surge_cap = cap
        if not self.surge_cap_said:
            self.surge_cap_said = True
            self.say("WARNING: the cloud refused new instances for quota or capacity (%s); at most %d replacement(s) "
                     "stay in flight from now on (rerun with a higher quota to go faster)"
                     % ("; ".join(str(r) for r in reasons), self.settings.surge_cap))

    def _check_timeout(self, facts):
        s = self.settings
        if facts["done"] or s.timeout is None or s.started is None:
            return
        if self.clock() - float(s.started) >= float(s.timeout):
            raise StepFailure("the upgrade did not finish within rolling_upgrade_timeout (%ss); %s"
                              % (s.timeout, progress.progress_line(facts, self.passes)), reason="timeout")

    # -- a bounded slice -----------------------------------------------------------------------------
    def run_slice(self, seconds=DEFAULT_SLICE):
        """Passes until the upgrade is done, a delegated etcd removal is due, a health gate is due (gate_due: the
        role runs it before the next slice), or `seconds` passed; a finished replacement is journaled at once
        (flush_journal). Acts at once after a pass that moved; otherwise waits (_wait) first. Returns dict(done,
        passes, facts, did, finished, etcd_due, refused, progress, surge_cap, timings, gate_due)."""
        reading = getattr(self.cloud, "reading", None)
        with reading() if reading is not None else contextlib.nullcontext():
            return self._slice(seconds)

    def _slice(self, seconds):
        start = self.clock()
        did, finished, refused = [], [], []
        journal_owed = deferred = False
        while True:
            self.stop.check()
            result = self.run_pass()
            facts = result["facts"]
            did.extend(result["did"])
            finished.extend(result["finished"])
            refused.extend(p for p in result["refused"] if p not in refused)
            line = self.last_progress = progress.progress_line(facts, self.passes)
            self.say(line)
            gate_due = self._gate_due(result, facts)
            # A delegated etcd read due before a control-plane heir (core.HEALTH_UNREAD): the role makes it.
            health_due = bool(facts.get("etcd_health_due")) and not self.settings.check_mode
            stop = (gate_due or health_due or facts["done"] or result["etcd_due"] or self.settings.check_mode
                    or self.clock() - start + (0 if result["moved"] else self.settings.poll) >= seconds)
            journal_owed = journal_owed or bool(result["finished"])
            if journal_owed and not stop and self.flush_journal is not None:
                # A finished replacement is journaled at once, and the slice goes on: ending it there cost the role a
                # task round trip each time donors finished in different passes. Put off by one pass when a Node
                # changed meanwhile (a heir came: the write takes up to half a second at 1,000 nodes, and the next pass
                # pairs the heir first); never twice, and a slice that stops leaves it to the slice's end.
                if deferred or not self._changed_since_read():
                    self._timed("kube", self.flush_journal)
                    journal_owed = deferred = False
                else:
                    deferred = True
            if stop:
                return dict(done=bool(facts["done"]) and not self.settings.check_mode, passes=self.passes,
                            facts=facts, did=did, finished=finished, etcd_due=result["etcd_due"],
                            refused=refused, progress=line, surge_cap=self.settings.surge_cap,
                            timings=dict(self.timings), gate_due=gate_due, etcd_health_due=health_due)
            if not result["moved"]:
                waited = time.monotonic()
                self._wait(result)
                self.timings["wait"] += time.monotonic() - waited

    def wait_seconds(self, result):
        """How long to wait before the next pass after one that moved nothing: the poll interval, shortened to
        the moment a heir's heir_ready_seconds runs out (its donor is drained then, not a poll later), to the moment
        the cloud's next listing is due (CloudAccess.next_listing_in), and to DRAIN_POLL while evicted pods are still
        going (a drain finishes when they are gone; no Node changes)."""
        seconds = float(self.settings.poll)
        if any(d.get("pending") and not d.get("blocked") for d in result["drains"]):
            seconds = min(seconds, DRAIN_POLL)
        now = self.clock()
        for moment in self._gate_moments(result["facts"]):
            seconds = min(seconds, max(moment - now, 0.0) + GATE_MARGIN)
        listing = getattr(self.cloud, "next_listing_in", None)
        due = listing() if listing is not None else None
        if due is not None:
            # The next pass lists a group when its listing is due (an instance's deletion due to end), not up to a
            # poll interval later.
            seconds = min(seconds, max(due, LISTING_WAIT))
        return seconds

    def _gate_moments(self, facts):
        """The moments (clock seconds) the plan's clock-driven holds open: a drained node's load-balancer hold, a Ready
        heir's heir_ready_seconds."""
        moments = []
        for item in facts["plan"].get("waiting_for_lb") or []:
            until = core.parse_time(item.get("until"))
            if until is not None:
                moments.append(until)
        hold = float(self.settings.options.heir_ready_seconds or 0)
        for item in facts["plan"].get("waiting_for_heir") or []:
            since = core.parse_time(item.get("heir_ready_since")) if item.get("heir_ready") else None
            if since is not None:
                moments.append(since + hold)
        return moments

    def _wait(self, result):
        """Wait before the next pass (wait_seconds); where the cluster can be watched, a Node's change that the
        plan reads (a heir joined or turned Ready, a pairing, a cordon) ends the wait at once."""
        seconds = self.wait_seconds(result)
        wait_for_change = getattr(self.kube, "wait_for_change", None)
        with self.stop.interruptible():
            if wait_for_change is not None:
                wait_for_change(seconds)
            else:
                self.sleep(seconds)

    def _owe_gate(self):
        """A replacement finished: with gate_after, a gate is owed (no heir is created until it ran)."""
        if self.settings.gate_after and not self.gate_owed:
            self.gate_owed = True
            # Recorded at once (the role clears it when the gate passed): a run killed from here on, before the
            # gate is recorded as due, still owes it when resumed.
            if self.record_gate_owed is not None:
                self._timed("kube", self.record_gate_owed)

    def _gate_due(self, result, facts):
        """Whether the role runs the health gate now: after each finished replacement, or once the batch in flight
        finished (new creations are held meanwhile). The role runs it before the next slice, so it is owed no more."""
        if not self.settings.gate_after or self.settings.check_mode:
            return False
        if result["finished"]:
            self._owe_gate()
        due = self.gate_owed and (self.settings.gate_after == "replacement" or facts["done"]
                                  or not facts["budget"]["in_flight"])
        if due:
            self.gate_owed = False
        return due


def each_at_once(call, calls, workers, stop=None):
    """[call(*args) for args in calls], in order: with more than one worker, up to `workers` at a time, every call made
    and the first failure in order raised once all have ended; else one after another, the first failure stopping the
    rest (as a kill would). `stop()`, asked as each call ends: once it says True, the calls not begun are not made
    (None in their place); those begun end."""
    workers = min(int(workers), len(calls))
    if workers <= 1:
        results = []
        for args in calls:
            if results and stop is not None and stop():
                return results + [None] * (len(calls) - len(results))
            results.append(call(*args))
        return results
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(call, *args) for args in calls]
        waiting = set(futures)
        while stop is not None and waiting:
            _ended, waiting = concurrent.futures.wait(waiting, return_when=concurrent.futures.FIRST_COMPLETED)
            if waiting and stop():
                for future in waiting:
                    future.cancel()   # only those not begun are cancelled
                break
        concurrent.futures.wait(futures)
    return [None if future.cancelled() else future.result() for future in futures]


def cache_only(entry, keys):
    """Whether a Node write only caches the node's scaling group and image (annotations), nothing a step reads."""
    annotations = entry.get("annotations") or {}
    return (bool(annotations) and set(annotations) <= {keys.group, keys.image} and not entry.get("expect")
            and "labels" not in entry and "taints" not in entry)


def write_order(name, entry, keys):
    """A new pair is written heir first (its donor annotation), then the donor: an interruption between
    the two leaves a half pair that the next pass completes."""
    return (0 if (entry.get("annotations") or {}).get(keys.donor) else 1, name)
