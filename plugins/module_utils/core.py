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

The planner's parts, in the order plan_upgrade() runs them (each step takes values and returns values; the
census is the one value the early steps move nodes in, and plan_upgrade sets what they settle):
    vocabulary.py        keys, phases, node groups, options, NodeInfo and the helpers all parts share
    plan_inputs.py       PlanInputs: the options, the cloud's answer in scope, the journal (with the creations
                         open create intents account for) and etcd's health, read once
    plan_nodes.py        the census (plan_census.Census): where each node belongs, its image and first group;
                         inconsistent annotations left alone; what every node will be once the writes are applied
    plan_pairs.py        stale halves cleared, pairs checked and repaired, new nodes paired, caches, label copies
    plan_instances.py    Arrivals: instances without a Node (joining, failed, orphans)
    plan_leaving.py      leaving nodes: drain, etcd removal, deletion, each once the cross-checks agree
    crosschecks.py       the agreement of cloud and cluster before every destructive step (also the executor's)
    plan_surge.py        per group budget and creations, control plane first and one at a time
    plan_delete_first.py delete-first replacements (max_unavailable) in worker groups
    plan_surplus.py      new nodes no donor needs, refills, capacity above the start that nothing proves ours
    upgrade_plan.py      the result: typed plan entries, NodePatches, Decided (one step's decisions), Plan inside
                         UpgradeFacts, to_dict() as node_image_facts returns it
core re-exports the names of vocabulary.py and crosschecks.py that its callers use (core.<name>).
"""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import (  # pylint: disable=unused-import
    DELETING, FAILED, ROLE_CONTROL_PLANE, ROLE_WORKER, RUNNING,
)
# The vocabulary and the cross-checks live in their own files; core re-exports them (its callers use core.<name>).
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.vocabulary import (  # pylint: disable=unused-import
    DEFAULT_PREFIX, REFERENCE_PREFIX, CONTROL_PLANE_LABEL, DEFAULT_JOIN_TIMEOUT, INTENT_WINDOW, LB_EXCLUDE_LABEL, PHASE_PAIRED,
    PHASE_DRAINING, PHASE_DRAINED, PHASE_ETCD_REMOVED, PHASE_DELETING, DONOR_PHASES, KNOWN_DONOR_PHASES, PHASE_HEIR,
    PHASE_REPLACED, _POINT_OF_NO_RETURN, OUTDATED, UP_TO_DATE, DONOR, HEIR, NEW, OBSOLETE, INVALID, NODE_GROUPS,
    PlanInputError, AnnotationKeys, same, is_reserved_label, copyable_labels, copyable_taints, labels_to_copy,
    taints_to_copy, surge_limit, unavailable_limit, format_time, parse_time, default_normalize, NodeInfo, Options,
    PerNode,
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
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_delete_first import mark_removed_first
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_instances import instances_without_nodes
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_leaving import leaving_steps
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_nodes import (
    by_group, control_plane_owed, screen, settle_groups, take_census,
)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_pairs import (
    cache_annotations, check_pairs, clear_stale_halves, copy_labels, pair_new_nodes,
)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_surge import group_budgets, plan_creations
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_surplus import groups_short, unproven_surplus
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.upgrade_plan import (
    Budget, Decided, Eta, GroupImage, GroupShort, InvalidNode, Plan, Progress, UpgradeFacts,
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
                  Where a group's windows hold more such instances than its intents leave open, none is taken (the
                  group's report names them `unclaimed`; they hold that many surge slots). What the plan finds of an
                  open intent is recorded in it and kept from then on (`grown`: how many the group grew by for it;
                  `unclaimed`: {open, recorded, among}), as the plan's record_intents asks.
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
    # 1-2. Where every node stands (caches the cloud corrects are problems); the nodes whose annotations do not hold
    #      together are left alone before any pair is touched, so no later step moves them.
    census, corrected = take_census(inputs)
    held = screen(inputs, census)
    # 3. Existing pairs put right before new ones are made: a pair completed, a heir promoted or unpaired changes which
    #    nodes are outdated and free; a stale half cleared now frees its node only next pass.
    cleared = clear_stale_halves(inputs, census)
    repaired = check_pairs(inputs, census)
    # 4. New nodes paired by group, once the pairs above say which outdated nodes are free; no worker moves while a
    #    control-plane node is still owed a replacement.
    census.cp_busy = control_plane_owed(census)
    census.by_group = by_group(census.valid)
    paired = pair_new_nodes(inputs, census)
    # 5. The caches no write above took; then what every node will be once these writes are applied (a node marked
    #    obsolete just now included), and the labels every heir, also one paired now, takes from its donor.
    cached = cache_annotations(inputs, census)
    census.final = settle_groups(census, paired.plan.obsolete)
    copied = copy_labels(inputs, census)
    # 6. Instances without a Node: joining, failed joins, orphans.
    arrivals = instances_without_nodes(inputs, census.states, census.by_name)
    # 7. Leaving nodes: drain, etcd removal, deletion, each once the cross-checks agree (a node marked obsolete now is
    #    drained once its mark is written); a node they refuse is left alone, and so holds its slot in step 8.
    leaving = leaving_steps(inputs, census, marked=paired.plan.obsolete)
    decided = Decided.joined(Decided(problems=corrected + held + arrivals.problems), cleared, repaired, paired, cached,
                             copied, leaving)
    # 8. Budgets and creations per group, control plane first and one at a time (plan_surge); in worker groups with
    #    max_unavailable, outdated nodes marked for removal before their heir (plan_delete_first).
    reports, budgets, in_flight = group_budgets(inputs, census, arrivals, decided.problems)
    surge = plan_creations(inputs, census, arrivals, reports, budgets, in_flight)
    decided = Decided.joined(decided, mark_removed_first(inputs, census, surge.removed_first))
    # 8c. Capacity not restored by nodes nothing proves we created (issue 13): named, never removed.
    decided.problems.extend(unproven_surplus(inputs, census, reports))
    # 9. The plan, progress, ETA and whether the upgrade is done.
    plan = Plan(record_created=inputs.recovered, record_intents=inputs.decided).joined(decided.plan)
    plan.delete_instances, plan.create, plan.create_blocked = arrivals.delete_instances, surge.create, surge.blocked
    plan.set_group_image = [GroupImage(group=r["id"], image=inputs.target) for r in reports if not r["image_current"]]
    replaced, done_count = _replacements_done(inputs, census, plan.repairs)
    progress = _progress(inputs, census, done_count)
    eta = _eta(replaced, inputs.keys, progress.remaining, inputs.options.eta_min_samples, inputs.now)
    short = groups_short(inputs, census, reports)
    done = progress.remaining == 0 and _settled(inputs, census, arrivals, plan, reports) and not short
    for report in short:
        if not any(b.group == report["id"] for b in plan.create_blocked):
            plan.create_blocked.append(GroupShort(group=report["id"], outdated=0, reason=(
                "%d Ready node(s) on the image, fewer than the %d it had at the start: the upgrade is not done "
                "until the group is whole again" % (report["ready_on_image"], report["start_count"]))))
    return UpgradeFacts(
        target_image=inputs.target, annotation_prefix=inputs.keys.prefix, nodes=_grouped(census),
        joining=arrivals.joining, leaving_instances=arrivals.leaving, scaling_groups=reports,
        budget=_budget(inputs, census, plan, reports, in_flight), plan=plan, progress=progress, eta=Eta(**eta), done=done,
        problems=decided.problems, foreign=decided.foreign, stop=surge.stop, etcd_health_due=surge.health_due,
        node_patches=decided.patches,
    ).to_dict()


def _grouped(census):
    """Every node's name under its group (an invalid one with its reason); a node paired in this pass is reported
    "new" until node_pair has written the pair."""
    grouped = {g: [] for g in NODE_GROUPS}
    for s in census.states:
        if s.category == INVALID:
            grouped[INVALID].append(InvalidNode(name=s.name, reason=s.reason, out_of_scope=s.out_of_scope))
        else:
            grouped[s.category].append(s.name)
    return grouped


def _replacements_done(inputs, census, repairs):
    """(the heirs whose donor is gone, promoted before this pass; how many replacements are done)."""
    promoted_now = [r for r in repairs if r.action == "promote"]
    promoted_names = {r.name for r in promoted_now}
    replaced = [s for s in census.states if s.category == UP_TO_DATE and s.phase == PHASE_REPLACED
                and same(s.image, inputs.target) and s.name not in promoted_names]
    return replaced, len(replaced) + len(promoted_now)


def _progress(inputs, census, done_count):
    # A node removed delete-first is still a replacement to make, and one in progress.
    vacating = len(census.vacating(census.states, inputs.target))
    remaining = sum(1 for s in census.states if census.final[s.name] in (OUTDATED, DONOR)) + vacating
    in_progress = sum(1 for s in census.states if census.final[s.name] == DONOR) + vacating
    total = done_count + remaining
    percent = 100.0 if total == 0 else round(100.0 * done_count / total, 1)
    return Progress(total=total, done=done_count, in_flight=in_progress, remaining=remaining, percent=percent)


OUT_OF_SERVICE_PHASES = (PHASE_DRAINING, PHASE_DRAINED, PHASE_ETCD_REMOVED, PHASE_DELETING)


def _settled(inputs, census, arrivals, plan, reports):
    """Nothing is left in flight or to do in this plan, nor in the cloud (no instance being deleted); no donor this run
    took out of service (drained, out of the load balancers) is left alone only because its heir is not Ready now:
    it goes once the heir is Ready again, or back into service once the pair breaks."""
    return (not any(census.final[s.name] in (HEIR, OBSOLETE, NEW) for s in census.states)
            and not any(census.final[s.name] == INVALID and s.held_for_now and s.phase in OUT_OF_SERVICE_PHASES
                        for s in census.states)
            and not arrivals.joining and not plan.delete_instances and not plan.repairs and not plan.obsolete
            and not plan.pairs and not plan.set_group_image and not plan.create
            and not any(r.get("refill_owed") for r in reports)
            and not any(i.state == DELETING for i in inputs.by_provider_id.values()))


def _budget(inputs, census, plan, reports, in_flight):
    options = inputs.options
    return Budget(max_surge=options.max_surge, max_surge_total=options.max_surge_total,
                  in_flight=in_flight, to_create=sum(c.count for c in plan.create),
                  control_plane_first=census.cp_busy, max_unavailable=options.max_unavailable,
                  no_surge=bool(options.no_surge),
                  unavailable=sum(r.get("unavailable_in_use", 0) for r in reports))


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
