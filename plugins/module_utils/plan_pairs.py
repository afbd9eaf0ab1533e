# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Pairs: stale halves cleared, existing pairs checked (half-written pairs finished, heirs whose donor is gone
promoted, broken pairs undone, a donor swapped for a sicker one), new nodes paired with the outdated nodes of their
group, the caches no step wrote, and the labels (and taints) every heir takes from its donor.

Each step takes the inputs and the census, moves the nodes it pairs or unpairs in the census (category, partner,
phase), and returns what it decided (upgrade_plan.Decided: plan entries and writes on Nodes). Pure: no I/O."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.crosschecks import trail_with
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import ROLE_WORKER
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_surplus import (
    refill_done, remove_surplus, unrecorded_refill,
)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.upgrade_plan import (
    CacheWrite, Decided, ForeignNode, LabelCopy, Pair, Repair,
)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.vocabulary import (
    _POINT_OF_NO_RETURN, DONOR, HEIR, NEW, OBSOLETE, OUTDATED, PHASE_DRAINING, PHASE_HEIR, PHASE_PAIRED, PHASE_REPLACED, UP_TO_DATE,
    ZONE_LABEL,
    copyable_labels, labels_to_copy, same, taints_to_copy,
)


# 3. Stale halves that mean nothing on this side (a current node cannot be a donor, nor an old one an heir).
def clear_stale_halves(inputs, census):
    out, keys = Decided(), inputs.keys
    for s in census.valid:
        ann = s.info.annotations
        if s.category in (HEIR, UP_TO_DATE) and ann.get(keys.heir):
            out.patches.annotate(s.name, {keys.heir: None}, expect={keys.heir: ann[keys.heir]})
            out.plan.repairs.append(Repair(name=s.name, action="clear", heir=ann[keys.heir]))
        elif s.category in (OUTDATED, DONOR) and ann.get(keys.donor):
            out.patches.annotate(s.name, {keys.donor: None}, expect={keys.donor: ann[keys.donor]})
            out.plan.repairs.append(Repair(name=s.name, action="clear", donor=ann[keys.donor]))
    return out


# 3. Check existing pairs (A.9, improved): finish half-written pairs, promote heirs whose donor is gone, and only
#    break pairs that cannot be completed.
def check_pairs(inputs, census):
    out = Decided()
    # The workers that are not Ready, the only nodes _not_ready_instead may pick (readiness does not change in a plan;
    # categories do, so it judges them as it goes): one look at every node per plan, not one per heir.
    not_ready = [s for s in census.valid if not s.info.ready and not s.info.control_plane]
    for h in [s for s in census.valid if s.category == HEIR]:
        _check_heir(inputs, census, h, out, not_ready)
    for d in [s for s in census.valid if s.category == DONOR]:
        _check_donor(inputs, census, d, out)
    return out


def _check_heir(inputs, census, h, out, not_ready):
    keys = inputs.keys
    d = census.by_name.get(h.partner)
    if d is None:
        _promote(inputs, h, out)
    elif (inputs.proof and not inputs.ours(h)) or not inputs.alive(h):
        # A heir this upgrade cannot prove it created, or whose instance the cloud is removing, stopped or
        # failed, serves no donor: the pair is broken (the donor is given back below).
        _unpair_heir(inputs, h, out, reason="its instance is not running" if inputs.ours(h) else
                     "this upgrade did not create it")
    elif d.category == DONOR and d.partner == h.name and same(d.group_id, h.group_id):
        sick = _sick_instead(inputs, census, d) if d.info.control_plane else _not_ready_instead(inputs, d, not_ready)
        if sick is not None:
            _swap_donor(inputs, h, d, sick, out)
    elif (d.category == OUTDATED and same(d.group_id, h.group_id) and not d.info.annotations.get(keys.heir)
          and h.phase == PHASE_HEIR):
        # Only a heir this collection wrote (phase heir, written with the donor annotation, heir first)
        # completes a half pair.
        d.category, d.partner, d.paired_now = DONOR, h.name, True
        d.phase = PHASE_PAIRED
        out.patches.annotate(d.name, inputs.pair_annotations(keys.heir, h.name, PHASE_PAIRED), expect={keys.heir: None})
        out.plan.repairs.append(Repair(name=d.name, action="complete", heir=h.name))
    else:
        _unpair_heir(inputs, h, out)


def _promote(inputs, h, out):
    """A heir whose donor is gone is an ordinary up-to-date node now: its replacement is done."""
    keys = inputs.keys
    h.category = UP_TO_DATE
    h.phase = PHASE_REPLACED
    started = h.info.annotations.get(keys.started_at) or h.info.annotations.get(keys.phase_since)
    out.patches.annotate(h.name, {keys.donor: None, keys.phase: PHASE_REPLACED, keys.phase_since: inputs.stamp,
                                  keys.phase_history: trail_with(h.info.annotations, keys, PHASE_REPLACED, inputs.now),
                                  keys.started_at: started}, expect={keys.donor: h.partner})
    out.plan.repairs.append(Repair(name=h.name, action="promote", donor=h.partner))


def _unpair_heir(inputs, h, out, reason=None):
    keys = inputs.keys
    h.category, h.partner = UP_TO_DATE, None
    out.patches.annotate(h.name, {keys.donor: None}, expect={keys.donor: h.info.annotations.get(keys.donor)})
    repair = Repair(name=h.name, action="unpair", donor=h.info.annotations.get(keys.donor))
    if reason is not None:
        repair.reason = reason
    out.plan.repairs.append(repair)


def _check_donor(inputs, census, d, out):
    keys = inputs.keys
    h = census.by_name.get(d.partner)
    if h is not None and h.category == HEIR and h.partner == d.name:
        return
    if h is not None and _may_complete_heir_half(inputs, h, d):
        # The other half is only written on a node that could be a new heir (never seen before): an
        # up-to-date node that has served for long is never made the heir of a donor by its annotation.
        h.category, h.partner = HEIR, d.name
        h.phase = PHASE_HEIR
        d.paired_now = True
        heir_annotations = dict(inputs.pair_annotations(keys.donor, d.name, PHASE_HEIR), **{keys.started_at: inputs.stamp})
        out.patches.annotate(h.name, dict(h.take_cache(), **heir_annotations), expect={keys.donor: None})
        out.plan.repairs.append(Repair(name=h.name, action="complete", donor=d.name))
    elif d.phase in _POINT_OF_NO_RETURN:
        d.partner = None  # its heir is gone, but it cannot serve again: finish removing it
    else:
        d.category, d.partner = OUTDATED, None
        # The phase stays: a drained node that is outdated again must be uncordoned (see `uncordon`).
        out.patches.annotate(d.name, {keys.heir: None}, expect={keys.heir: d.info.annotations.get(keys.heir)})
        out.plan.repairs.append(Repair(name=d.name, action="unpair", heir=d.info.annotations.get(keys.heir)))


def _may_complete_heir_half(inputs, h, d):
    ann = h.info.annotations
    return (h.category == UP_TO_DATE and same(h.group_id, d.group_id) and h.phase != PHASE_REPLACED
            and not ann.get(inputs.keys.donor) and ann.get(inputs.keys.obsolete) != "true"
            and inputs.ours(h) and inputs.alive(h))


def _sick_instead(inputs, census, d):
    """For a control-plane donor whose own etcd member is healthy while that of another outdated control-plane node
    of its group is not (etcd then refuses the donor's removal, to keep quorum), that other node: its heir replaces
    it first. None when there is no such node or the donor's member may be gone already (drained or later)."""
    # Not once drained: a kill between the etcd removal and its record leaves the phase at drained with the
    # member gone, and giving such a node back would leave etcd a member short.
    if not d.info.control_plane or not inputs.health_read() or inputs.unhealthy_member(d) is not None \
            or d.phase not in ("", PHASE_PAIRED, PHASE_DRAINING):
        return None
    keys = inputs.keys
    return next((u for u in census.valid if u.category == OUTDATED and u.info.control_plane and same(u.group_id, d.group_id)
                 and inputs.unhealthy_member(u) is not None and not u.info.annotations.get(keys.heir)
                 and not u.info.annotations.get(keys.donor)), None)


def _not_ready_instead(inputs, d, not_ready):
    """The donor is chosen when it is drained: for a Ready worker donor not yet draining, an unpaired outdated
    worker of its group that is not Ready (it turned NotReady after the pairing) goes first, the first in donor_order.
    None when there is no such node. `not_ready`: the valid workers that are not Ready."""
    if d.info.control_plane or not d.info.ready or d.phase not in ("", PHASE_PAIRED):
        return None
    keys = inputs.keys
    candidates = [u for u in not_ready if u.category == OUTDATED and same(u.group_id, d.group_id)
                  and not u.info.annotations.get(keys.heir) and not u.info.annotations.get(keys.donor)]
    return min(candidates, key=inputs.donor_order) if candidates else None


def _swap_donor(inputs, h, d, sick, out):
    """Heir `h` replaces `sick` instead of `d`, which is given back (uncordoned if it was drained). Written heir
    first: a kill after that leaves `d` a dangling half, unpaired next pass, and `sick` a half pair completed."""
    keys, problem = inputs.keys, inputs.unhealthy_member(sick)
    out.patches.annotate(h.name, {keys.donor: sick.name}, expect={keys.donor: d.name})
    # The labels the heir took from `d` that `sick` does not carry go (copy_labels then adds sick's own).
    exclude = inputs.options.exclude_labels
    given_back = copyable_labels(d.info.labels, exclude)
    kept = copyable_labels(sick.info.labels, exclude)
    stale = {k: None for k, v in given_back.items() if k not in kept and (h.info.labels or {}).get(k) == v}
    if stale:
        out.patches.set_labels(h.name, stale)
    out.patches.annotate(d.name, {keys.heir: None}, expect={keys.heir: h.name})
    out.patches.annotate(sick.name, inputs.pair_annotations(keys.heir, h.name, PHASE_PAIRED), expect={keys.heir: None})
    d.category, d.partner = OUTDATED, None
    sick.category, sick.partner, sick.paired_now, sick.phase = DONOR, h.name, True, PHASE_PAIRED
    h.partner = sick.name
    if problem is not None:
        reason = ("the etcd member of %s is unhealthy (%s), so etcd would refuse to remove the member of %s: %s is "
                  "replaced first" % (sick.name, problem.get("message") or "unhealthy", d.name, sick.name))
    else:
        reason = ("%s is not Ready, so it is replaced first; %s, still Ready and not drained, waits for the next "
                  "heir" % (sick.name, d.name))
    out.plan.repairs.append(Repair(name=h.name, action="swap", donor=sick.name, instead_of=d.name, reason=reason))


# 4. New nodes: current image, unpaired, never settled. Pair them with outdated nodes of their group; the others are
#    surplus, or the refill of a worker removed delete-first (plan_surplus). No worker is paired, nor removed as
#    surplus, while the control plane is replaced (census.cp_busy).
def pair_new_nodes(inputs, census):
    out = Decided()
    for gkey in sorted(census.by_group):
        if census.cp_busy and census.group_role(inputs.group_index, gkey) == ROLE_WORKER:
            continue
        _pair_group(inputs, census, gkey, census.by_group[gkey], out)
    return out


def _pair_group(inputs, census, gkey, members, out):
    free_outdated, clearing = _donors_to_be(inputs, members)
    # With a journal, only a node it proves this upgrade created serves as a heir (also after its image was
    # cached and its pairing lost); any other node on the image is capacity, named and left alone.
    fresh = [s for s in members if s.category == UP_TO_DATE and s.phase != PHASE_REPLACED]
    candidates = [s for s in fresh if inputs.ours(s) and inputs.alive(s)]
    if inputs.proof and free_outdated:
        out.foreign.extend(ForeignNode(name=s.name, group=s.group_id, provider_id=s.info.provider_id)
                           for s in fresh if not inputs.ours(s))
    nodes_now = sum(1 for s in members if s.category != OBSOLETE)
    for s in candidates:
        if free_outdated:
            index, zone = _donor_for(inputs, s, free_outdated)
            _pair(inputs, s, free_outdated.pop(index), out, zone=zone)
        elif clearing:
            clearing.pop(0)   # its donor-to-be is free from the next pass on: not surplus
        else:
            nodes_now -= _unneeded(inputs, census, s, gkey, nodes_now, out)


def _donors_to_be(inputs, members):
    """(the outdated nodes free to pair, in the order they are taken; those paired only next pass). The donor is
    the outdated node that most needs replacing: one that is not Ready, or whose etcd member is unhealthy, first;
    then the oldest instance. An outdated node whose stale donor annotation is cleared in this pass
    (clear_stale_halves) is paired only in the next one: a kill between the heir's half and the donor's patch
    would otherwise leave two nodes that name each other as donor, a cycle that is then left alone for good."""
    outdated = sorted((s for s in members if s.category == OUTDATED), key=inputs.donor_order)
    clearing = [s for s in outdated if s.info.annotations.get(inputs.keys.donor)]
    return [s for s in outdated if s not in clearing], clearing


def _donor_for(inputs, heir, free_outdated):
    """(the index in `free_outdated`, in donor order, of the donor for `heir`; the zone it was chosen in, or None).
    A node that is not Ready or whose etcd member is unhealthy goes first, wherever it is; else the oldest in the
    heir's zone, so each replacement leaves the group's zones as they were (the cloud picked the heir's zone; a donor
    from another zone would unbalance them, and GCE redistribution or AWS AZRebalance would then delete an instance
    without a drain, or stay held at the run's end); else the oldest. A zone is the Node's topology.kubernetes.io/zone
    label."""
    zone = heir.info.labels.get(ZONE_LABEL)
    if zone and inputs.donor_order(free_outdated[0])[0]:
        for index, d in enumerate(free_outdated):
            if d.info.labels.get(ZONE_LABEL) == zone:
                return index, zone
    return 0, None


def _pair(inputs, s, d, out, zone=None):
    """New node `s` becomes the heir of outdated node `d` (chosen in `zone`, the heir's, when given): written heir
    first."""
    keys = inputs.keys
    d.partner, d.paired_now, d.phase = s.name, True, PHASE_PAIRED
    s.category, s.partner, s.phase = NEW, d.name, PHASE_HEIR
    reason = "the oldest outdated node of its group in its heir's zone %s" % zone if zone else inputs.donor_reason(d)
    out.plan.pairs.append(Pair(heir=s.name, donor=d.name, group=s.group_id, reason=reason))
    heir_annotations = dict(inputs.pair_annotations(keys.donor, d.name, PHASE_HEIR), **{keys.started_at: inputs.stamp})
    out.patches.annotate(s.name, dict(s.take_cache(), **heir_annotations), expect={keys.donor: None})
    out.patches.annotate(d.name, inputs.pair_annotations(keys.heir, s.name, PHASE_PAIRED), expect={keys.heir: None})


def _unneeded(inputs, census, s, gkey, nodes_now, out):
    """A new node of ours that no donor needs: surplus, or the refill of a worker removed delete-first. Returns 1
    when it is marked for removal. A node that nothing needs and that the journal does not record as created by
    this upgrade is simply up to date: we cannot prove we created it, so it is never deleted."""
    if s.phase == PHASE_HEIR and not inputs.proof:
        # It was created as a heir and no donor needs it any more: surplus, remove it (with a journal,
        # only above the group's start count: remove_surplus).
        s.category = NEW
        out.plan.obsolete.append(s.name)
        out.patches.annotate(s.name, dict(s.take_cache(), **inputs.obsolete_mark(s.info.annotations)))
        return 1
    if inputs.created_by_us(s) is not None:
        return remove_surplus(inputs, census, s, gkey, nodes_now, out)
    if unrecorded_refill(inputs, census, out.plan.record_refills, s, nodes_now, gkey):
        refill_done(inputs, census, s, out)
    return 0


# 5. Remaining cache writes (nodes not written above).
def cache_annotations(inputs, census):
    out = Decided()
    for s in census.states:
        if s.cache:
            out.patches.annotate(s.name, s.cache)
            out.plan.annotate.append(CacheWrite(name=s.name, annotations={
                inputs.keys.short(k): v for k, v in sorted(s.cache.items())}))
    return out


# 5. Label (and taint) copies for every pair, including the ones formed in this pass (census.final: once applied).
def copy_labels(inputs, census):
    out, options = Decided(), inputs.options
    for s in census.states:
        if census.final[s.name] != HEIR:
            continue
        d = census.by_name.get(s.partner)
        if d is None:
            continue
        labels = labels_to_copy(d.info.labels, s.info.labels, options.exclude_labels)
        taints = taints_to_copy(d.info.taints, s.info.taints, options.taints_not_copied()) if options.copy_taints else []
        if labels or taints:
            out.plan.label_copies.append(LabelCopy(heir=s.name, donor=d.name, labels=labels, taints=taints))
            if labels:
                out.patches.set_labels(s.name, labels)
            if taints:
                out.patches.set_taints(s.name, list(s.info.taints) + taints)
    return out
