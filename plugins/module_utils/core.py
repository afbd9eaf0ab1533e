# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The planning core: where every node stands and what the next safe step is.

Pure functions of plain data (Kubernetes Node dicts, the providers' Group/Instance values, options and
the current time). No I/O: modules fetch, call plan_upgrade(), apply, return. Everything here is unit-
and property-tested without a cluster or a cloud.

State lives in node annotations under one prefix (see AnnotationKeys) and in the clouds' instance
lists. A donor (old node) goes through the phases
    paired -> draining -> drained -> [etcd-removed (control plane only)] -> gone
and its heir (new node) through
    heir -> replaced (its donor is gone; the heir is now an ordinary up-to-date node).

The planner's parts, in the order plan_upgrade() runs them:
    vocabulary.py        keys, phases, node groups, options, NodeInfo and the helpers all parts share
    plan_inputs.py       PlanInputs: the options, the cloud's answer in scope, the journal (with the creations
                         open create intents account for) and etcd's health, read once
    core.py (_Planner)   the node steps: locate, classify, screen, repair pairs, pair new nodes, cache, copy
                         labels; they fill plan_census.Census (where every node stands) and write the Plan
    plan_instances.py    Arrivals: instances without a Node (joining, failed, orphans)
    crosschecks.py       the agreement of cloud and cluster before every destructive step (also the executor's)
    plan_surge.py        per group budget and creations, control plane first and one at a time
    plan_delete_first.py delete-first replacements (max_unavailable) in worker groups
    plan_surplus.py      new nodes no donor needs, refills, capacity above the start that nothing proves ours
    upgrade_plan.py      the result: Plan inside UpgradeFacts, to_dict() as node_image_facts returns it
core re-exports the names of vocabulary.py and crosschecks.py that its callers use (core.<name>).
"""

from __future__ import annotations

import dataclasses

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import (  # pylint: disable=unused-import
    DELETING, FAILED, ROLE_CONTROL_PLANE, ROLE_WORKER, RUNNING,
)
# The vocabulary and the cross-checks live in their own files; core re-exports them (its callers use core.<name>).
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.vocabulary import (  # pylint: disable=unused-import
    DEFAULT_PREFIX, REFERENCE_PREFIX, CONTROL_PLANE_LABEL, DEFAULT_JOIN_TIMEOUT, INTENT_WINDOW, PHASE_PAIRED,
    PHASE_DRAINING, PHASE_DRAINED, PHASE_ETCD_REMOVED, PHASE_DELETING, DONOR_PHASES, KNOWN_DONOR_PHASES, PHASE_HEIR,
    PHASE_REPLACED, _POINT_OF_NO_RETURN, OUTDATED, UP_TO_DATE, DONOR, HEIR, NEW, OBSOLETE, INVALID, NODE_GROUPS,
    PlanInputError, AnnotationKeys, same, is_reserved_label, copyable_labels, copyable_taints, labels_to_copy,
    taints_to_copy, surge_limit, unavailable_limit, format_time, parse_time, default_normalize, NodeInfo, Options,
)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.crosschecks import (  # pylint: disable=unused-import
    STEP_CORDON, STEP_DRAIN, STEP_ETCD_REMOVAL, STEP_INSTANCE_DELETION, STEP_NODE_DELETION, DESTRUCTIVE_STEPS,
    TRAIL_OBSOLETE, _TRAIL_RANK, CLOCK_SKEW, valid_node_name, parse_trail, trail_with, CloudView, _problem,
    annotation_problems, check_cordon, check_drain, check_etcd_removal, check_instance_deletion,
    check_node_deletion, CHECKS, check_step,
)


from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_inputs import (  # pylint: disable=unused-import
    HEALTH_UNREAD, group_key, read_inputs,
)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_census import Census, NodeState
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_instances import Arrivals, instances_without_nodes
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_delete_first import plan_delete_first
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_surplus import (
    groups_short, open_slot, refills_on, surplus_decision, unproven_surplus, unrecorded_refill,
)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_surge import group_budgets, plan_creations
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.upgrade_plan import (
    Budget, Eta, Plan, Progress, UpgradeFacts,
)


# ---------------------------------------------------------------------------------------------------
# The plan

def plan_upgrade(nodes, options, groups=None, instances=None, group_errors=None, now=0.0,
                 normalize=default_normalize, scope=None, created=None, start_counts=None, removed_first=None,
                 refills=None, intents=None, control_plane_health=None):
    """Group every node, compute budgets and the plan for the next pass.

    nodes:        NodeInfo values (or Node API dicts).
    groups:       the providers' Group values, or None when the cloud was not consulted (then only cached
                  annotations say where a node belongs, and nothing is created or deleted in a cloud).
    instances:    {group id: [Instance]} for every group whose listing succeeded.
    group_errors: {group id: message} for groups that could not be read.
    scope:        optional list of group IDs; nodes of other groups are reported invalid and left alone.
    created:      {providerID: {group, created[, intent]}}: the instances this upgrade created, as its journal
                  recorded them (instances_created). Only these (and those an open create intent accounts for)
                  become heirs or are removed as surplus: any other node on the target image is capacity, left
                  alone and named in `foreign`. None (no journal: a module used on its own) keeps the older rule,
                  where an up-to-date node whose image was never cached may become a heir.
    intents:      {key: {group, at, count[, target_size, settled]}}: the creations this upgrade was about to make,
                  recorded before each create call (create_intents). An instance of that group that the cloud created
                  within INTENT_WINDOW after `at`, that no record claims, is the create a kill cut off before its
                  record, up to the count the intent leaves open (`settled`: how many the call did create) and, where
                  `target_size` (the group's before the call) is recorded, as many as the group's target size grew.
    control_plane_health: [{member, node_ip, message}]: what is wrong with the control plane's etcd now (empty:
                  healthy; None: not read; HEALTH_UNREAD: to be read before a control-plane heir, which waits for it
                  and the result's etcd_health_due says so). No control-plane heir is created while it names a problem.
    start_counts: {group id: number of nodes} when the upgrade started (the journal's start_counts).
                  A recorded node that no donor needs is removed only while its group holds more nodes.
    removed_first: {node name: {group, since, labels, taints}}: the workers this upgrade removed delete-first, as its
                  journal recorded them (max_unavailable); refills: {such name: the node that replaced it}.
    Returns a dict of plain data (see the RETURN documentation of node_image_facts).
    """
    inputs = read_inputs(nodes, options, groups, instances, group_errors, now, normalize, scope, created, start_counts,
                         removed_first, refills, intents, control_plane_health)
    planner = _Planner(inputs)
    # 1-5. Where every node stands, its pair repaired or made, and the Kubernetes-side writes (census, plan).
    planner.locate_nodes()
    planner.classify()
    planner.screen()
    planner.clear_stale_halves()
    planner.check_pairs()
    planner.control_plane_owed()
    planner.pair_new_nodes()
    planner.cache_annotations()
    planner.settle_groups()
    planner.copy_labels()
    # 6. Instances without a Node: joining, failed joins, orphans.
    planner.arrivals = instances_without_nodes(inputs, planner.census.states, planner.census.by_name)
    planner.plan.delete_instances = planner.arrivals.delete_instances
    # 7. Leaving nodes: drain, etcd removal, deletion, each once the cross-checks agree.
    planner.leaving_steps()
    # 8. Surge (and delete-first) creations per group.
    planner.creations()
    # 8c. Capacity not restored by nodes nothing proves we created (issue 13): named, never removed.
    planner.problems.extend(unproven_surplus(inputs, planner.census, planner.group_reports))
    # 9. Progress, ETA and the result.
    return planner.result()


class _Planner:
    """The node steps of plan_upgrade over its working state: the inputs (read only), the census, the arrivals,
    the Plan and the node patches it writes, the problems it names (pure: nothing here does I/O)."""

    def __init__(self, inputs):
        self.inputs = inputs
        self.plan = Plan(record_created=inputs.recovered)   # what the next pass does, filled in by the steps below
        self.node_patches = {}   # name -> {"annotations": {...}, "labels": {...}, "taints": [...], "expect": {...}}
        self.problems, self.foreign, self.stop, self.health_due = [], [], None, False
        self.census = Census()   # where every node stands (steps 1-5)
        self.arrivals = Arrivals()   # instances without a Node (step 6)
        self.group_reports = []
        self.in_flight_total = 0

    def patch(self, name, annotations=None, expect=None):
        entry = self.node_patches.setdefault(name, {"annotations": {}, "expect": {}})
        entry["annotations"].update(annotations or {})
        for key, value in (expect or {}).items():
            entry["expect"].setdefault(key, value)   # expectations are about the observed node: first wins

    # 1. Where each node belongs and which image it runs (cached annotations win, as in the reference).
    def locate_nodes(self):
        for info in self.inputs.infos:
            state = NodeState(info=info)
            self.census.states.append(state)
            self._locate(state)
        self.census.by_name = {s.name: s for s in self.census.states}
        self.census.valid = [s for s in self.census.states if s.category != INVALID]

    def _locate(self, state):
        keys, info, ann, inputs = self.inputs.keys, state.info, state.info.annotations, self.inputs
        if not info.provider_id:
            state.category, state.reason = INVALID, "no providerID"
            return
        inst = inputs.by_provider_id.get(inputs.normalize(info.provider_id))
        group_id = self._group_of(state, inst)
        # A node this collection marked obsolete is removed even when its scaling group cannot be told any
        # more (its instance is gone already, or it was never cached): only its Node object is left.
        ours_to_remove = ann.get(keys.obsolete) == "true" and inputs.cloud_consulted and not inputs.group_errors
        if group_id is None and not ours_to_remove:
            self._without_group(state)
            return
        gkey = group_key(group_id)
        in_scope = inputs.scope_keys is None or gkey in inputs.scope_keys
        if group_id is None or (inputs.cloud_consulted and gkey not in inputs.group_index and ours_to_remove and in_scope):
            state.group_id, state.image = group_id, ann.get(keys.image) or ""
            self._read_phase(state)
            return
        if (inputs.cloud_consulted and gkey not in inputs.group_index) or not in_scope:
            self._outside_groups(state, group_id, gkey, in_scope)
            return
        state.group_id = inputs.group_index[gkey].id if inputs.cloud_consulted else group_id
        if self._image_of(state, inst, ours_to_remove):
            self._read_phase(state)

    def _group_of(self, state, inst):
        """The node's scaling group: the cloud's, else its cached annotation (None when neither says). The cloud is
        the source of truth for where an instance belongs and what it runs: a cached annotation that disagrees with
        it is corrected, never believed."""
        keys, ann = self.inputs.keys, state.info.annotations
        if inst is None:
            return ann.get(keys.group) if keys.group in ann else None
        if keys.group not in ann or not same(ann[keys.group], inst.group_id):
            state.cache[keys.group] = inst.group_id
            if keys.group in ann:
                self._corrected(state, "scaling-group-id", ann[keys.group], inst.group_id)
        return inst.group_id

    def _without_group(self, state):
        """A node whose scaling group neither the cloud nor an annotation says is left alone, with the reason."""
        inputs = self.inputs
        state.category = INVALID
        if not inputs.cloud_consulted:
            state.reason = "no %s annotation and no cloud provider to look it up" % inputs.keys.group
        elif inputs.group_errors:
            state.reason = "cloud lookup failed: " + "; ".join("%s: %s" % kv for kv in sorted(inputs.group_errors.items()))
        else:
            state.reason = "its instance is in none of the listed scaling groups"
            state.out_of_scope = inputs.scope_keys is not None

    def _outside_groups(self, state, group_id, gkey, in_scope):
        """A node of a group not read (its lookup failed, or it is unknown) or out of scope is left alone."""
        state.category = INVALID
        if gkey in self.inputs.group_errors and self.inputs.cloud_consulted:
            state.reason = "cloud lookup failed for scaling group %s: %s" % (group_id, self.inputs.group_errors[gkey])
        elif not in_scope:
            state.reason = "scaling group %s is not in scaling_groups" % group_id
            state.out_of_scope = True
        else:
            state.reason = "unknown scaling group %s" % (group_id or "(empty)")

    def _image_of(self, state, inst, ours_to_remove):
        """Sets the node's image: the cloud's (a disagreeing cache is corrected), else its cached annotation. False
        (the node is left alone) when neither says and it is not one of ours to remove."""
        keys, ann = self.inputs.keys, state.info.annotations
        if inst is not None and inst.image:
            state.image = inst.image
            if keys.image not in ann or not same(ann[keys.image], inst.image):
                state.cache[keys.image] = inst.image
                if keys.image in ann:
                    self._corrected(state, "node-image", ann[keys.image], inst.image)
        elif keys.image in ann:
            state.image = ann[keys.image]
        elif ours_to_remove:
            state.image = ""
        else:
            state.category = INVALID
            state.reason = ("the cloud does not report its image yet" if inst is not None else
                            "no %s annotation and its instance was not found" % keys.image)
            return False
        return True

    def _corrected(self, state, what, cached, cloud):
        self.problems.append(dict(node=state.name, step=None, code="cache_disagrees", action="corrected",
                                  message="node %s: its cached %s annotation says %s but the cloud says %s; the cloud "
                                          "wins and the annotation is corrected" % (state.name, what, cached, cloud)))

    def _read_phase(self, state):
        ann = state.info.annotations
        state.phase = (ann.get(self.inputs.keys.phase) or "").strip()
        state.phase_since = parse_time(ann.get(self.inputs.keys.phase_since))

    # 2. First grouping, as in the reference (A.4), before pairs are checked.
    def classify(self):
        keys = self.inputs.keys
        for s in self.census.valid:
            ann = s.info.annotations
            if ann.get(keys.obsolete) == "true":
                s.category = OBSOLETE
            elif not same(s.image, self.inputs.target):
                s.category = DONOR if ann.get(keys.heir) else OUTDATED
                s.partner = ann.get(keys.heir) or None
            elif ann.get(keys.donor):
                s.category = HEIR
                s.partner = ann.get(keys.donor)
            else:
                s.category = UP_TO_DATE  # decided below: new or up to date

    # 2b. Inconsistent annotations are named problems, and the nodes they are on are left alone (invalid):
    #     garbage or self-referencing heir/donor names, 2-cycles, pairs across scaling groups, phase trails
    #     out of order, obsolete marks this collection did not record. So is the partner such a node names.
    def screen(self):
        found = {}
        for s in self.census.valid:
            if s.category == INVALID:
                continue
            problems = annotation_problems(s.info, self.inputs.keys, self.inputs.now) + self._obsolete_problems(s)
            problems.extend(self._partner_problems(s))
            if problems:
                found[s.name] = problems
        self._partners_of_held(found)
        for name in sorted(found):
            self._hold(self.census.by_name[name], found[name])
        self.census.valid = [s for s in self.census.states if s.category != INVALID]

    def _obsolete_problems(self, s):
        if s.category != OBSOLETE or not self.inputs.proof or self.obsolete_proven(s):
            return []
        return [_problem(s.name, None, "obsolete_not_proven", (
            "it is marked obsolete, but the journal records neither its instance as created by this upgrade "
            "nor the node as removed delete-first; an annotation alone never makes this collection remove a "
            "node, so it is left alone: if it should go, remove it by hand, else delete its %s annotation")
            % self.inputs.keys.obsolete)]

    def _partner_problems(self, s):
        """A 2-cycle of heir (or donor) names, or a pair (both halves written) across scaling groups; a one-sided
        name is only a dangling half."""
        keys, ann, problems = self.inputs.keys, s.info.annotations, []
        for key, back, what in ((keys.heir, keys.donor, "heir"), (keys.donor, keys.heir, "donor")):
            other = self.census.by_name.get(ann.get(key) or "")
            if other is None or other is s:
                continue
            if other.info.annotations.get(key) == s.name:
                problems.append(_problem(s.name, None, "cycle", "%s annotation names %s, whose %s annotation names "
                                         "%s back (a cycle)" % (what, other.name, what, s.name)))
            elif (other.info.annotations.get(back) == s.name and other.category != INVALID and other.group_id
                  and s.group_id and not same(other.group_id, s.group_id)):
                message = "%s annotation names %s, which is in scaling group %s, not in its group %s" % (
                    what, other.name, other.group_id, s.group_id)
                problems.append(_problem(s.name, None, "pair_across_groups", message))
        return problems

    def _partners_of_held(self, found):
        """The partner (named back) of a node left alone is left alone too."""
        keys = self.inputs.keys
        for name in list(found):
            ann = self.census.by_name[name].info.annotations
            for key in (keys.heir, keys.donor):
                other = self.census.by_name.get(ann.get(key) or "")
                if other is None or other.name in found or other.category == INVALID:
                    continue
                back = other.info.annotations
                if back.get(keys.heir) == name or back.get(keys.donor) == name:
                    found[other.name] = [_problem(other.name, None, "partner_has_problem", "its partner %s is left "
                                                  "alone: %s" % (name, found[name][0]["message"]))]

    def obsolete_proven(self, state):
        """An obsolete mark the journal backs: a surplus node this upgrade created, a worker it removed
        delete-first, or a Node whose instance the cloud no longer lists (nothing serves there any more)."""
        return (self.inputs.created_by_us(state) is not None or state.name in self.inputs.removed_first
                or (state.info.provider_id and self.inputs.instance_of(state) is None and self.inputs.cloud_view.complete))

    def _hold(self, state, problems):
        """Leave a node alone: invalid, with its problems named."""
        state.category = INVALID
        state.reason = "; ".join(p["message"] for p in problems)
        state.cache = {}
        self.problems.extend(dict(p, action="left alone") for p in problems)

    # Stale halves that mean nothing on this side (a current node cannot be a donor, nor an old one an heir).
    def clear_stale_halves(self):
        keys = self.inputs.keys
        for s in self.census.valid:
            ann = s.info.annotations
            if s.category in (HEIR, UP_TO_DATE) and ann.get(keys.heir):
                self.patch(s.name, {keys.heir: None}, expect={keys.heir: ann[keys.heir]})
                self.plan.repairs.append(dict(name=s.name, action="clear", heir=ann[keys.heir]))
            elif s.category in (OUTDATED, DONOR) and ann.get(keys.donor):
                self.patch(s.name, {keys.donor: None}, expect={keys.donor: ann[keys.donor]})
                self.plan.repairs.append(dict(name=s.name, action="clear", donor=ann[keys.donor]))

    # 3. Check existing pairs (A.9, improved): finish half-written pairs, promote heirs whose donor is gone,
    #    and only break pairs that cannot be completed.
    def check_pairs(self):
        for h in [s for s in self.census.valid if s.category == HEIR]:
            self._check_heir(h)
        for d in [s for s in self.census.valid if s.category == DONOR]:
            self._check_donor(d)

    def _check_heir(self, h):
        keys = self.inputs.keys
        d = self.census.by_name.get(h.partner)
        if d is None:
            self._promote(h)
        elif (self.inputs.proof and not self.inputs.ours(h)) or not self.inputs.alive(h):
            # A heir this upgrade cannot prove it created, or whose instance the cloud is removing, stopped or
            # failed, serves no donor: the pair is broken (the donor is given back below).
            self._unpair_heir(h, reason="its instance is not running" if self.inputs.ours(h) else
                              "this upgrade did not create it")
        elif d.category == DONOR and d.partner == h.name and same(d.group_id, h.group_id):
            sick = self.sick_instead(d) if d.info.control_plane else self.not_ready_instead(d)
            if sick is not None:
                self.swap_donor(h, d, sick)
        elif (d.category == OUTDATED and same(d.group_id, h.group_id) and not d.info.annotations.get(keys.heir)
              and h.phase == PHASE_HEIR):
            # Only a heir this collection wrote (phase heir, written with the donor annotation, heir first)
            # completes a half pair.
            d.category, d.partner, d.paired_now = DONOR, h.name, True
            d.phase = PHASE_PAIRED
            self.patch(d.name, self._pair_annotations(keys.heir, h.name, PHASE_PAIRED), expect={keys.heir: None})
            self.plan.repairs.append(dict(name=d.name, action="complete", heir=h.name))
        else:
            self._unpair_heir(h)

    def _promote(self, h):
        """A heir whose donor is gone is an ordinary up-to-date node now: its replacement is done."""
        keys = self.inputs.keys
        h.category = UP_TO_DATE
        h.phase = PHASE_REPLACED
        started = h.info.annotations.get(keys.started_at) or h.info.annotations.get(keys.phase_since)
        self.patch(h.name, {keys.donor: None, keys.phase: PHASE_REPLACED, keys.phase_since: self.inputs.stamp,
                            keys.phase_history: trail_with(h.info.annotations, keys, PHASE_REPLACED, self.inputs.now),
                            keys.started_at: started}, expect={keys.donor: h.partner})
        self.plan.repairs.append(dict(name=h.name, action="promote", donor=h.partner))

    def _unpair_heir(self, h, reason=None):
        keys = self.inputs.keys
        h.category, h.partner = UP_TO_DATE, None
        self.patch(h.name, {keys.donor: None}, expect={keys.donor: h.info.annotations.get(keys.donor)})
        repair = dict(name=h.name, action="unpair", donor=h.info.annotations.get(keys.donor))
        if reason is not None:
            repair["reason"] = reason
        self.plan.repairs.append(repair)

    def _check_donor(self, d):
        keys = self.inputs.keys
        h = self.census.by_name.get(d.partner)
        if h is not None and h.category == HEIR and h.partner == d.name:
            return
        if h is not None and self._may_complete_heir_half(h, d):
            # The other half is only written on a node that could be a new heir (never seen before): an
            # up-to-date node that has served for long is never made the heir of a donor by its annotation.
            h.category, h.partner = HEIR, d.name
            h.phase = PHASE_HEIR
            d.paired_now = True
            heir_annotations = dict(self._pair_annotations(keys.donor, d.name, PHASE_HEIR),
                                    **{keys.started_at: self.inputs.stamp})
            self.patch(h.name, dict(h.cache, **heir_annotations), expect={keys.donor: None})
            h.cache = {}
            self.plan.repairs.append(dict(name=h.name, action="complete", donor=d.name))
        elif d.phase in _POINT_OF_NO_RETURN:
            d.partner = None  # its heir is gone, but it cannot serve again: finish removing it
        else:
            d.category, d.partner = OUTDATED, None
            # The phase stays: a drained node that is outdated again must be uncordoned (see `uncordon`).
            self.patch(d.name, {keys.heir: None}, expect={keys.heir: d.info.annotations.get(keys.heir)})
            self.plan.repairs.append(dict(name=d.name, action="unpair", heir=d.info.annotations.get(keys.heir)))

    def _may_complete_heir_half(self, h, d):
        ann = h.info.annotations
        return (h.category == UP_TO_DATE and same(h.group_id, d.group_id) and h.phase != PHASE_REPLACED
                and not ann.get(self.inputs.keys.donor) and ann.get(self.inputs.keys.obsolete) != "true"
                and self.inputs.ours(h) and self.inputs.alive(h))

    def sick_instead(self, d):
        """For a control-plane donor whose own etcd member is healthy while that of another outdated control-plane node
        of its group is not (etcd then refuses the donor's removal, to keep quorum), that other node: its heir replaces
        it first. None when there is no such node or the donor's member may be gone already (drained or later)."""
        # Not once drained: a kill between the etcd removal and its record leaves the phase at drained with the
        # member gone, and giving such a node back would leave etcd a member short.
        if not d.info.control_plane or not self.inputs.health_read() or self.inputs.unhealthy_member(d) is not None \
                or d.phase not in ("", PHASE_PAIRED, PHASE_DRAINING):
            return None
        return next((u for u in self.census.valid if u.category == OUTDATED and u.info.control_plane and same(u.group_id, d.group_id)
                     and self.inputs.unhealthy_member(u) is not None and not u.info.annotations.get(self.inputs.keys.heir)
                     and not u.info.annotations.get(self.inputs.keys.donor)), None)

    def not_ready_instead(self, d):
        """The donor is chosen when it is drained: for a Ready worker donor not yet draining, an unpaired outdated
        worker of its group that is not Ready (it turned NotReady after the pairing) goes first. None when there is
        no such node."""
        if d.info.control_plane or not d.info.ready or d.phase not in ("", PHASE_PAIRED):
            return None
        return next((u for u in sorted(self.census.valid, key=self.inputs.donor_order)
                     if u.category == OUTDATED and not u.info.control_plane and same(u.group_id, d.group_id)
                     and not u.info.ready and not u.info.annotations.get(self.inputs.keys.heir)
                     and not u.info.annotations.get(self.inputs.keys.donor)), None)

    def swap_donor(self, h, d, sick):
        """Heir `h` replaces `sick` instead of `d`, which is given back (uncordoned if it was drained). Written heir
        first: a kill after that leaves `d` a dangling half, unpaired next pass, and `sick` a half pair completed."""
        keys, problem = self.inputs.keys, self.inputs.unhealthy_member(sick)
        self.patch(h.name, {keys.donor: sick.name}, expect={keys.donor: d.name})
        # The labels the heir took from `d` that `sick` does not carry go (copy_labels then adds sick's own).
        exclude = self.inputs.options.exclude_labels
        given_back = copyable_labels(d.info.labels, exclude)
        kept = copyable_labels(sick.info.labels, exclude)
        stale = {k: None for k, v in given_back.items() if k not in kept and (h.info.labels or {}).get(k) == v}
        if stale:
            self.node_patches.setdefault(h.name, {"annotations": {}, "expect": {}}).setdefault("labels", {}).update(stale)
        self.patch(d.name, {keys.heir: None}, expect={keys.heir: h.name})
        self.patch(sick.name, self._pair_annotations(keys.heir, h.name, PHASE_PAIRED), expect={keys.heir: None})
        d.category, d.partner = OUTDATED, None
        sick.category, sick.partner, sick.paired_now, sick.phase = DONOR, h.name, True, PHASE_PAIRED
        h.partner = sick.name
        if problem is not None:
            reason = ("the etcd member of %s is unhealthy (%s), so etcd would refuse to remove the member of %s: %s is "
                      "replaced first" % (sick.name, problem.get("message") or "unhealthy", d.name, sick.name))
        else:
            reason = ("%s is not Ready, so it is replaced first; %s, still Ready and not drained, waits for the next "
                      "heir" % (sick.name, d.name))
        self.plan.repairs.append(dict(name=h.name, action="swap", donor=sick.name, instead_of=d.name, reason=reason))

    def _pair_annotations(self, key, partner, phase):
        """One half of a new pair: the partner's name, the phase and a fresh phase trail."""
        return {key: partner, self.inputs.keys.phase: phase, self.inputs.keys.phase_since: self.inputs.stamp,
                self.inputs.keys.phase_history: trail_with({}, self.inputs.keys, phase, self.inputs.now, reset=True)}

    # 4. New nodes: current image, unpaired, never settled. Pair them with outdated nodes of their group.
    def pair_new_nodes(self):
        for s in self.census.valid:
            self.census.by_group.setdefault(group_key(s.group_id), []).append(s)
        for gkey in sorted(self.census.by_group):
            if self.census.cp_busy and self.census.group_role(self.inputs.group_index, gkey) == ROLE_WORKER:
                continue   # no worker is paired, nor removed as surplus, while the control plane is replaced
            self._pair_group(gkey, self.census.by_group[gkey])

    def _pair_group(self, gkey, members):
        inputs = self.inputs
        free_outdated, clearing = self._donors_to_be(members)
        # With a journal, only a node it proves this upgrade created serves as a heir (also after its image was
        # cached and its pairing lost); any other node on the image is capacity, named and left alone.
        fresh = [s for s in members if s.category == UP_TO_DATE and s.phase != PHASE_REPLACED]
        candidates = [s for s in fresh if inputs.ours(s) and inputs.alive(s)]
        if inputs.proof and free_outdated:
            self.foreign.extend(dict(name=s.name, group=s.group_id, provider_id=s.info.provider_id)
                                for s in fresh if not inputs.ours(s))
        nodes_now = sum(1 for s in members if s.category != OBSOLETE)
        for s in candidates:
            if free_outdated:
                self._pair(s, free_outdated.pop(0))
            elif clearing:
                clearing.pop(0)   # its donor-to-be is free from the next pass on: not surplus
            else:
                nodes_now -= self._unneeded(s, gkey, nodes_now)

    def _donors_to_be(self, members):
        """(the outdated nodes free to pair, in the order they are taken; those paired only next pass). The donor is
        the outdated node that most needs replacing: one that is not Ready, or whose etcd member is unhealthy, first;
        then the oldest instance. An outdated node whose stale donor annotation is cleared in this pass
        (clear_stale_halves) is paired only in the next one: a kill between the heir's half and the donor's patch
        would otherwise leave two nodes that name each other as donor, a cycle that is then left alone for good."""
        outdated = sorted((s for s in members if s.category == OUTDATED), key=self.inputs.donor_order)
        clearing = [s for s in outdated if s.info.annotations.get(self.inputs.keys.donor)]
        return [s for s in outdated if s not in clearing], clearing

    def _pair(self, s, d):
        """New node `s` becomes the heir of outdated node `d`: written heir first."""
        keys = self.inputs.keys
        d.partner, d.paired_now, d.phase = s.name, True, PHASE_PAIRED
        s.category, s.partner, s.phase = NEW, d.name, PHASE_HEIR
        self.plan.pairs.append(dict(heir=s.name, donor=d.name, group=s.group_id, reason=self.inputs.donor_reason(d)))
        heir_annotations = dict(self._pair_annotations(keys.donor, d.name, PHASE_HEIR),
                                **{keys.started_at: self.inputs.stamp})
        self.patch(s.name, dict(s.cache, **heir_annotations), expect={keys.donor: None})
        s.cache = {}
        self.patch(d.name, self._pair_annotations(keys.heir, s.name, PHASE_PAIRED), expect={keys.heir: None})

    def _unneeded(self, s, gkey, nodes_now):
        """A new node of ours that no donor needs: surplus, or the refill of a worker removed delete-first. Returns 1
        when it is marked for removal. A node that nothing needs and that the journal does not record as created by
        this upgrade is simply up to date: we cannot prove we created it, so it is never deleted."""
        keys = self.inputs.keys
        if s.phase == PHASE_HEIR and not self.inputs.proof:
            # It was created as a heir and no donor needs it any more: surplus, remove it (with a journal,
            # only above the group's start count: remove_surplus).
            s.category = NEW
            self.plan.obsolete.append(s.name)
            self.patch(s.name, dict(s.cache, **{
                keys.obsolete: "true", keys.phase: None, keys.phase_since: self.inputs.stamp,
                keys.phase_history: trail_with(s.info.annotations, keys, TRAIL_OBSOLETE, self.inputs.now)}))
            s.cache = {}
            return 1
        if self.inputs.created_by_us(s) is not None:
            return self.remove_surplus(s, gkey, nodes_now)
        if unrecorded_refill(self.inputs, self.census, self.plan.record_refills, s, nodes_now, gkey):
            self.refill_done(s)
        return 0

    # 3b. One ordering rule everywhere: while a control-plane node still has to be replaced, no worker is paired,
    #     drained, deleted or created.
    def control_plane_owed(self):
        self.census.cp_busy = any(s.category in (OUTDATED, DONOR) and s.info.control_plane for s in self.census.valid)

    def remove_surplus(self, s, gkey, nodes_now):
        """A node this upgrade created that no donor needs: marked obsolete (then drained and deleted) while its
        group holds more nodes than at the start (plan_surplus). Returns 1 when it was marked."""
        keys = self.inputs.keys
        entry = surplus_decision(self.inputs, s, gkey, nodes_now)
        self.plan.surplus.append(entry)
        if entry["action"] == "kept":
            if entry["start_count"] is not None and refills_on(self.inputs, s):
                self.refill_done(s)
            return 0
        s.category = NEW
        self.plan.obsolete.append(s.name)
        # A fresh trail, as a pairing starts one: an earlier upgrade's (heir, replaced) before the mark is out of
        # order, and the node would be left alone for good.
        self.patch(s.name, dict(s.cache, **{
            keys.obsolete: "true", keys.phase: None, keys.phase_since: self.inputs.stamp,
            keys.phase_history: trail_with({}, keys, TRAIL_OBSOLETE, self.inputs.now, reset=True)}),
            expect={keys.donor: None, keys.obsolete: s.info.annotations.get(keys.obsolete)})
        s.cache = {}
        return 1

    def refill_slot(self, s):
        """The worker removed delete-first that refill `s` replaces: the one the journal assigns to it, else the
        first of its group that no node replaced yet (None when there is none)."""
        for slot, refill in sorted(self.inputs.refills.items()):
            if refill == s.name:
                return slot
        slot = open_slot(self.inputs, self.census, self.plan.record_refills, s)
        if slot is not None:
            self.plan.record_refills[slot] = s.name
        return slot

    def refill_done(self, s):
        """A node this upgrade created to refill a group whose donor it replaces was removed delete-first (no
        outdated node was left to pair it with): it gets that worker's labels (journal) and is recorded as
        replaced, from its creation on."""
        keys = self.inputs.keys
        slot = self.refill_slot(s)
        entry = self.inputs.removed_first.get(slot) or {}
        labels = labels_to_copy(entry.get("labels") or {}, s.info.labels, self.inputs.options.exclude_labels)
        taints = taints_to_copy(entry.get("taints") or [], s.info.taints, self.inputs.options.exclude_labels) \
            if self.inputs.options.copy_taints else []
        if labels or taints:
            self.plan.label_copies.append(dict(heir=s.name, donor=slot, labels=labels, taints=taints))
            copies = self.node_patches.setdefault(s.name, {"annotations": {}, "expect": {}})
            if labels:
                copies["labels"] = labels
            if taints:
                copies["taints"] = list(s.info.taints) + taints
        inst = self.inputs.instance_of(s)
        created = ((self.inputs.created_by_us(s) or {}).get("created")
                   or (format_time(inst.created_at) if inst is not None and inst.created_at else self.inputs.stamp))
        s.phase, s.phase_since = PHASE_REPLACED, self.inputs.now
        before = s.info.annotations
        s.info = dataclasses.replace(s.info, annotations=dict(before, **{keys.started_at: created}))
        self.plan.refilled.append(dict(name=s.name, group=s.group_id, created=created, replaces=slot))
        self.patch(s.name, dict(s.cache, **{
            keys.phase: PHASE_REPLACED, keys.phase_since: self.inputs.stamp, keys.started_at: created,
            keys.phase_history: trail_with(s.info.annotations, keys, PHASE_REPLACED, self.inputs.now, reset=True)}),
            expect={keys.donor: None, keys.phase: before.get(keys.phase)})
        s.cache = {}

    # 5. Remaining cache writes (nodes not touched above).
    def cache_annotations(self):
        for s in self.census.states:
            if s.cache:
                self.patch(s.name, s.cache)
                self.plan.annotate.append(dict(name=s.name, annotations={self.inputs.keys.short(k): v for k, v in sorted(s.cache.items())}))

    def settle_groups(self):
        """What every node will be once the Kubernetes-side actions above are applied."""
        marked = set(self.plan.obsolete)
        for s in self.census.states:
            if s.category == NEW:
                self.census.final[s.name] = OBSOLETE if s.name in marked else HEIR
            elif s.paired_now:
                self.census.final[s.name] = DONOR
            else:
                self.census.final[s.name] = s.category

    # Label (and taint) copies for every pair, including the ones formed in this pass.
    def copy_labels(self):
        options = self.inputs.options
        for s in self.census.states:
            if self.census.final[s.name] != HEIR:
                continue
            d = self.census.by_name.get(s.partner)
            if d is None:
                continue
            labels = labels_to_copy(d.info.labels, s.info.labels, options.exclude_labels)
            taints = taints_to_copy(d.info.taints, s.info.taints, options.exclude_labels) if options.copy_taints else []
            if labels or taints:
                self.plan.label_copies.append(dict(heir=s.name, donor=d.name, labels=labels, taints=taints))
                entry = self.node_patches.setdefault(s.name, {"annotations": {}, "expect": {}})
                if labels:
                    entry["labels"] = dict(entry.get("labels") or {}, **labels)
                if taints:
                    entry["taints"] = list(s.info.taints) + taints

    # 7. Leaving nodes: donors whose heir is Ready, and obsolete nodes, go drain -> etcd -> delete.
    def leaving_steps(self):
        keys = self.inputs.keys
        marked = set(self.plan.obsolete)
        for s in self.census.states:
            cat = self.census.final[s.name]
            if cat == OUTDATED and s.info.unschedulable and s.info.annotations.get(keys.phase) in (PHASE_DRAINING, PHASE_DRAINED):
                self.plan.uncordon.append(s.name)  # our drain of it was undone by a broken pair: give the capacity back
            if cat not in (DONOR, OBSOLETE) or s.name in marked:
                continue   # (a node marked obsolete by this plan is drained once the mark is written)
            if self.census.cp_busy and not s.info.control_plane:
                # No worker leaves while a control-plane node still has to be replaced.
                self.plan.waiting_for_heir.append(dict(
                    name=s.name, since=format_time(s.phase_since) if s.phase_since else None, overdue=False,
                    heir=s.partner, heir_ready=None, heir_ready_since=None,
                    reason="waiting for the control plane to be replaced first"))
                continue
            self._leave(s, cat)

    def _leave(self, s, cat):
        """The next step of leaving node `s` (a donor or obsolete), by its phase, once the cross-checks agree."""
        heir_ready, gate = self._heir_gate(s, cat)
        phase = s.phase if s.phase in KNOWN_DONOR_PHASES else PHASE_PAIRED
        ip = s.info.internal_ips[0] if s.info.internal_ips else None
        if phase in (PHASE_PAIRED, PHASE_DRAINING):
            if not heir_ready:
                self._waiting(s, gate)
            elif self._agreed(s, cat, STEP_CORDON, STEP_DRAIN):
                # What follows a drain rides along, so a drain that finishes at once goes on in the same pass.
                self.plan.drain.append(dict(name=s.name, reason=cat, **gate, control_plane=s.info.control_plane,
                                            node_ip=ip, provider_id=s.info.provider_id, group=s.group_id))
        elif phase == PHASE_DRAINED and s.info.control_plane:
            if self._agreed(s, cat, STEP_ETCD_REMOVAL):
                self.plan.etcd_remove.append(dict(name=s.name, node_ip=ip, provider_id=s.info.provider_id,
                                                  group=s.group_id))
        elif self._agreed(s, cat, STEP_INSTANCE_DELETION, STEP_NODE_DELETION):
            self.plan.delete_nodes.append(dict(name=s.name, provider_id=s.info.provider_id, group=s.group_id,
                                               control_plane=s.info.control_plane))

    def _heir_gate(self, s, cat):
        """(whether the donor's heir is Ready for its drain, what the drain entry says of the heir). A pair formed by
        this plan is drained on the next pass, once node_pair has written it. A heir counts only while the cloud
        says its instance runs. An obsolete node has no heir to wait for."""
        if cat != DONOR or not s.partner:
            return True, dict(heir=None, heir_ready=None, heir_ready_since=None)
        h, now = self.census.by_name.get(s.partner), self.inputs.now
        settled = h is not None and h.info.ready and self.inputs.running(h) and (
            h.info.ready_since is None or now - h.info.ready_since >= float(self.inputs.options.heir_ready_seconds or 0))
        gate = dict(heir=s.partner, heir_ready=bool(h is not None and h.info.ready),
                    heir_ready_since=format_time(h.info.ready_since) if h is not None and h.info.ready_since else None)
        return bool(settled and not s.paired_now), gate

    def _waiting(self, s, gate):
        """A heir that is not Ready within join_timeout of the pairing will likely never be: say so (the reference
        waited forever without a word)."""
        overdue = bool(s.phase_since is not None and not gate["heir_ready"]
                       and self.inputs.now - s.phase_since > float(self.inputs.options.join_timeout))
        self.plan.waiting_for_heir.append(dict(
            name=s.name, since=format_time(s.phase_since) if s.phase_since else None, overdue=overdue, **gate))

    def _agreed(self, s, cat, *steps):
        """The cross-checks of these steps all pass; else the node (and its heir) are left alone."""
        inputs = self.inputs
        heir_info = self.census.by_name[s.partner].info if cat == DONOR and s.partner in self.census.by_name else None
        cloud = inputs.cloud_view if inputs.cloud_consulted else None
        problems = []
        for step in steps:
            problems.extend(CHECKS[step](s.info, heir_info, inputs.target, cloud, inputs.keys, inputs.now))
        if problems:
            self._hold_leaving(s, problems)
        return not problems

    def _hold_leaving(self, state, problems):
        seen, unique = set(), []
        for p in problems:
            if p["message"] not in seen:
                seen.add(p["message"])
                unique.append(p)
        self._hold(state, unique)
        self.census.final[state.name] = INVALID
        h = self.census.by_name.get(state.partner or "")
        if h is not None and self.census.final.get(h.name) == HEIR and h.partner == state.name:
            self._hold(h, [_problem(h.name, unique[0]["step"], "partner_has_problem", "its donor %s is left alone: %s"
                                    % (state.name, unique[0]["message"]))])
            self.census.final[h.name] = INVALID

    # 8. Budgets and creations, control plane first and one at a time (plan_surge); in worker groups with
    #    max_unavailable, delete-first replacements (plan_delete_first).
    def creations(self):
        self.group_reports, budgets, self.in_flight_total = group_budgets(self.inputs, self.census, self.arrivals,
                                                                          self.problems)
        surge = plan_creations(self.inputs, self.census, self.group_reports, budgets, self.in_flight_total,
                               self.delete_first)
        self.plan.create, self.plan.create_blocked = surge.create, surge.blocked
        self.health_due, self.stop = surge.health_due, surge.stop

    def delete_first(self, report, budget, cluster_room):
        """(instances to create, of which surge heirs, blocked reason) for a delete-first group, whose outdated nodes
        to remove first are marked now."""
        decision = plan_delete_first(self.inputs, self.census, self.arrivals, report, budget, cluster_room)
        for s in decision.remove:
            self.mark_removed_first(s, report["id"])
        if decision.record_start is not None:
            self.plan.record_start_counts[report["id"]] = decision.record_start
        return decision.create, decision.surge_heirs, decision.reason

    def mark_removed_first(self, s, group_id):
        """Outdated worker `s` is removed before its heir exists: marked obsolete, and its labels (and taints) outlive
        it in the journal, for the refill that replaces it. `since`: a fresh node the cloud created after it may be its
        refill (unrecorded_refill)."""
        keys, options = self.inputs.keys, self.inputs.options
        self.plan.record_removed_first[s.name] = dict(
            group=group_id, since=self.inputs.stamp, labels=copyable_labels(s.info.labels, options.exclude_labels),
            taints=copyable_taints(s.info.taints, options.exclude_labels) if options.copy_taints else [])
        self.census.final[s.name] = OBSOLETE
        self.plan.obsolete.append(s.name)
        self.plan.delete_first.append(dict(name=s.name, group=group_id, provider_id=s.info.provider_id))
        # A fresh trail, as a pairing starts one: an earlier upgrade's (heir, replaced) before the mark is out of
        # order, and the node would be left alone for good.
        self.patch(s.name, dict(s.cache, **{
            keys.obsolete: "true", keys.phase: None, keys.phase_since: self.inputs.stamp,
            keys.phase_history: trail_with({}, keys, TRAIL_OBSOLETE, self.inputs.now, reset=True)}),
            expect={keys.heir: None, keys.obsolete: s.info.annotations.get(keys.obsolete)})
        s.cache = {}

    # 9. Progress, ETA and the result.
    def result(self):
        set_group_image = [dict(group=r["id"], image=self.inputs.target) for r in self.group_reports if not r["image_current"]]
        self.plan.set_group_image = set_group_image
        replaced, done_count = self.replacements_done()
        progress = self.progress(done_count)
        eta = _eta(replaced, self.inputs.keys, progress.remaining, self.inputs.options.eta_min_samples, self.inputs.now)
        short = groups_short(self.inputs, self.census, self.group_reports)
        done = progress.remaining == 0 and self.settled() and not short
        for report in short:
            if not any(b["group"] == report["id"] for b in self.plan.create_blocked):
                self.plan.create_blocked.append(dict(group=report["id"], outdated=0, reason=(
                    "%d Ready node(s) on the image, fewer than the %d it had at the start: the upgrade is not done "
                    "until the group is whole again" % (report["ready_on_image"], report["start_count"]))))
        return UpgradeFacts(
            target_image=self.inputs.target, annotation_prefix=self.inputs.keys.prefix, nodes=self.grouped(), joining=self.arrivals.joining,
            leaving_instances=self.arrivals.leaving, scaling_groups=self.group_reports, budget=self.budget(), plan=self.plan,
            progress=progress, eta=Eta(**eta), done=done, problems=self.problems, foreign=self.foreign, stop=self.stop,
            etcd_health_due=self.health_due, node_patches=self.node_patches,
        ).to_dict()

    def grouped(self):
        """Every node's name under its group (an invalid one with its reason); a node paired in this pass is reported
        "new" until node_pair has written the pair."""
        grouped = {g: [] for g in NODE_GROUPS}
        for s in self.census.states:
            if s.category == INVALID:
                grouped[INVALID].append(dict(name=s.name, reason=s.reason, out_of_scope=s.out_of_scope))
            else:
                grouped[s.category].append(s.name)
        return grouped

    def replacements_done(self):
        """(the heirs whose donor is gone, promoted before this pass; how many replacements are done)."""
        promoted_now = [r for r in self.plan.repairs if r["action"] == "promote"]
        promoted_names = {r["name"] for r in promoted_now}
        replaced = [s for s in self.census.states if s.category == UP_TO_DATE and s.phase == PHASE_REPLACED
                    and same(s.image, self.inputs.target) and s.name not in promoted_names]
        return replaced, len(replaced) + len(promoted_now)

    def progress(self, done_count):
        # A node removed delete-first is still a replacement to make, and one in progress.
        vacating = len(self.census.vacating(self.census.states, self.inputs.target))
        remaining = sum(1 for s in self.census.states if self.census.final[s.name] in (OUTDATED, DONOR)) + vacating
        in_progress = sum(1 for s in self.census.states if self.census.final[s.name] == DONOR) + vacating
        total = done_count + remaining
        percent = 100.0 if total == 0 else round(100.0 * done_count / total, 1)
        return Progress(total=total, done=done_count, in_flight=in_progress, remaining=remaining, percent=percent)

    def settled(self):
        """Nothing is left in flight or to do in this plan, nor in the cloud (no instance being deleted)."""
        plan = self.plan
        return (not any(self.census.final[s.name] in (HEIR, OBSOLETE, NEW) for s in self.census.states)
                and not self.arrivals.joining and not plan.delete_instances and not plan.repairs and not plan.obsolete
                and not plan.pairs and not plan.set_group_image and not plan.create
                and not any(r.get("refill_owed") for r in self.group_reports)
                and not any(i.state == DELETING for i in self.inputs.by_provider_id.values()))

    def budget(self):
        options = self.inputs.options
        return Budget(max_surge=options.max_surge, max_surge_total=options.max_surge_total,
                      in_flight=self.in_flight_total, to_create=sum(c["count"] for c in self.plan.create),
                      control_plane_first=self.census.cp_busy, max_unavailable=options.max_unavailable,
                      no_surge=bool(options.no_surge),
                      unavailable=sum(r.get("unavailable_in_use", 0) for r in self.group_reports))


def _eta(replaced, keys, remaining, min_samples, now):
    """Throughput from completed replacements of this image: completions per second over the window from
    the first start to the last completion."""
    samples = []
    for s in replaced:
        end = s.phase_since
        start = parse_time(s.info.annotations.get(keys.started_at))
        if end is not None and start is not None and end >= start:
            samples.append((start, end))
    result = dict(samples=len(samples), seconds=None, finish=None, mean_replacement_seconds=None)
    if len(samples) < max(1, min_samples):
        return result
    result["mean_replacement_seconds"] = round(sum(e - s for s, e in samples) / len(samples), 1)
    window = max(end for start, end in samples) - min(start for start, end in samples)
    if window <= 0:
        return result
    rate = len(samples) / window
    seconds = remaining / rate
    result["seconds"] = int(round(seconds))
    result["finish"] = format_time(now + seconds)
    return result


def phase_patch(node, phase, options, now):
    """Annotations that record a donor (or obsolete node) entering `phase`, or None when it already is
    there. Raises PlanInputError for an unknown phase or a node that is not leaving."""
    keys = options.validate() if isinstance(options, Options) else AnnotationKeys(options)
    info = node if isinstance(node, NodeInfo) else NodeInfo.from_k8s(node)
    if phase not in DONOR_PHASES:
        raise PlanInputError("phase %r is not one of %s" % (phase, ", ".join(DONOR_PHASES)))
    ann = info.annotations
    if not ann.get(keys.heir) and ann.get(keys.obsolete) != "true":
        raise PlanInputError("node %s is neither a donor (no %s annotation) nor obsolete" % (info.name, keys.heir))
    if ann.get(keys.phase) == phase:
        return None
    return {keys.phase: phase, keys.phase_since: format_time(now),
            keys.phase_history: trail_with(ann, keys, phase, now)}
