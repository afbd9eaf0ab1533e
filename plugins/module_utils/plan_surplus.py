# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Surplus clean-up: what becomes of a new node that no donor needs, and of capacity above the start.

A node this upgrade created (the journal says so) is surplus while its group holds more nodes than at the start:
it is marked obsolete and removed like a donor. Within the start count it stays, and in a delete-first group it is
the refill of a worker removed before its heir existed. A node nothing proves ours is never removed: above the start
count it is named (unproven_surplus), and a group that holds fewer Ready nodes on the image than at the start is not
done (groups_short). remove_surplus and refill_done write what they decide into the pairing step's Decided (pure:
no I/O)."""

from __future__ import annotations

import dataclasses

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.crosschecks import _problem
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import RUNNING
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_inputs import group_key
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.crosschecks import trail_with
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.upgrade_plan import LabelCopy, Problem, Refilled, SurplusNode
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.vocabulary import (
    DONOR, HEIR, INVALID, NEW, OBSOLETE, OUTDATED, PHASE_REPLACED, UP_TO_DATE, format_time, labels_to_copy, parse_time,
    same, taints_to_copy, unavailable_limit,
)


def surplus_decision(inputs, s, gkey, nodes_now):
    """Its surplus entry (action obsolete or kept, and the reason) for node `s`, which this upgrade created and no
    donor needs, in a group of `nodes_now` nodes."""
    start = inputs.start_counts.get(gkey)
    entry = dict(name=s.name, provider_id=s.info.provider_id, group=s.group_id,
                 created=inputs.created_by_us(s).get("created"), nodes=nodes_now, start_count=start)
    if start is None:
        return SurplusNode(**entry, action="kept", reason="the journal does not record how many nodes scaling group %s "
                           "had at the start" % s.group_id)
    if nodes_now <= start:
        return SurplusNode(**entry, action="kept", reason="scaling group %s holds %d node(s), not more than the %d it "
                           "had at the start" % (s.group_id, nodes_now, start))
    return SurplusNode(**entry, action="obsolete", reason="created by this upgrade (journal), no donor needs it, and "
                       "scaling group %s holds %d node(s), more than the %d it had at the start"
                       % (s.group_id, nodes_now, start))


def remove_surplus(inputs, census, s, gkey, nodes_now, out):
    """A node this upgrade created that no donor needs: marked obsolete (then drained and deleted) while its group
    holds more nodes than at the start, else kept (and, in a delete-first group, a refill). Returns 1 when it was
    marked."""
    keys = inputs.keys
    entry = surplus_decision(inputs, s, gkey, nodes_now)
    out.plan.surplus.append(entry)
    if entry.action == "kept":
        if entry.start_count is not None and refills_on(inputs, s):
            refill_done(inputs, census, s, out)
        return 0
    s.category = NEW
    out.plan.obsolete.append(s.name)
    out.patches.annotate(s.name, dict(s.take_cache(), **inputs.obsolete_mark()),
                         expect={keys.donor: None, keys.obsolete: s.info.annotations.get(keys.obsolete)})
    return 1


def _refill_slot(inputs, census, s, out):
    """The worker removed delete-first that refill `s` replaces: the one the journal assigns to it, else the first of
    its group that no node replaced yet (None when there is none), then recorded."""
    for slot, refill in sorted(inputs.refills.items()):
        if refill == s.name:
            return slot
    slot = open_slot(inputs, census, out.plan.record_refills, s)
    if slot is not None:
        out.plan.record_refills[slot] = s.name
    return slot


def refill_done(inputs, census, s, out):
    """A node this upgrade created to refill a group whose donor it replaces was removed delete-first (no outdated
    node was left to pair it with): it gets that worker's labels (journal) and is recorded as replaced, from its
    creation on."""
    keys, options = inputs.keys, inputs.options
    slot = _refill_slot(inputs, census, s, out)
    entry = inputs.removed_first.get(slot) or {}
    labels = labels_to_copy(entry.get("labels") or {}, s.info.labels, options.exclude_labels)
    taints = taints_to_copy(entry.get("taints") or [], s.info.taints, options.taints_not_copied()) if options.copy_taints else []
    if labels or taints:
        out.plan.label_copies.append(LabelCopy(heir=s.name, donor=slot, labels=labels, taints=taints))
        if labels:
            out.patches.set_labels(s.name, labels)
        if taints:
            out.patches.set_taints(s.name, list(s.info.taints) + taints)
    inst = inputs.instance_of(s)
    created = ((inputs.created_by_us(s) or {}).get("created")
               or (format_time(inst.created_at) if inst is not None and inst.created_at else inputs.stamp))
    s.phase, s.phase_since = PHASE_REPLACED, inputs.now
    before = s.info.annotations
    s.info = dataclasses.replace(s.info, annotations=dict(before, **{keys.started_at: created}))
    out.plan.refilled.append(Refilled(name=s.name, group=s.group_id, created=created, replaces=slot))
    out.patches.annotate(s.name, dict(s.take_cache(), **{
        keys.phase: PHASE_REPLACED, keys.phase_since: inputs.stamp, keys.started_at: created,
        keys.phase_history: trail_with(s.info.annotations, keys, PHASE_REPLACED, inputs.now, reset=True)}),
        expect={keys.donor: None, keys.phase: before.get(keys.phase)})


def refills_on(inputs, s):
    """Whether a kept surplus node refills its group: a worker, where max_unavailable removes workers first."""
    return not s.info.control_plane and unavailable_limit(inputs.options.max_unavailable, 1) > 0


def open_slot(inputs, census, record_refills, s):
    """The first worker of `s`'s group removed delete-first that no node replaced yet, or None."""
    taken = set(inputs.refills) | set(record_refills)
    for slot, entry in sorted(inputs.removed_first.items()):
        if slot not in taken and slot not in census.by_name and same(entry.get("group"), s.group_id):
            return slot
    return None


def unrecorded_refill(inputs, census, record_refills, s, nodes_now, gkey):
    """Whether `s`, a fresh worker (its image never cached) that the journal does not record, is the refill
    of a worker removed delete-first: a run killed between the cloud's create and its record leaves such a
    node. It is when its group is not above its start count and the cloud created its instance after that
    removal was decided. It then gets the removed worker's labels, which is additive: nothing proves it is
    ours, so it is still never removed as surplus."""
    start = inputs.start_counts.get(gkey)
    if (s.info.control_plane or start is None or nodes_now > start or inputs.keys.image in s.info.annotations
            or unavailable_limit(inputs.options.max_unavailable, 1) == 0):
        return False
    slot = open_slot(inputs, census, record_refills, s)
    since = parse_time((inputs.removed_first.get(slot) or {}).get("since")) if slot is not None else None
    inst = inputs.instance_of(s)
    return since is not None and inst is not None and inst.created_at is not None and inst.created_at >= since


def unproven_surplus(inputs, census, reports):
    """Capacity not restored by nodes nothing proves we created (issue 13): named, never removed. A settled group
    (every node up to date, nothing joining, leaving or marked) that holds more nodes than at the start, with no
    surplus the journal proves ours: the extra nodes may be heirs a run created and was killed before recording.
    Nothing proves which, so none is removed; each of the newest unrecorded nodes (as many as the excess) is a
    problem with action "kept"."""
    problems = []
    for report in reports:
        gkey = group_key(report["id"])
        start = inputs.start_counts.get(gkey)
        busy = any(report[k] for k in (OUTDATED, DONOR, HEIR, NEW, OBSOLETE)) or report["joining"] or report["leaving"]
        if start is None or busy or not report["image_current"] or report["nodes_serving"] <= start:
            continue
        extra = report["nodes_serving"] - start
        unrecorded = [s for s in census.by_group.get(gkey, []) if census.final.get(s.name) == UP_TO_DATE
                      and inputs.created_by_us(s) is None]
        created = {s.name: getattr(inputs.instance_of(s), "created_at", None) for s in unrecorded}
        unrecorded.sort(key=lambda s: (created[s.name] is None, -(created[s.name] or 0), s.name))
        for s in unrecorded[:extra]:
            problems.append(Problem(**_problem(s.name, None, "unproven_surplus", (
                "scaling group %s holds %d nodes, %d more than the %d it had when the upgrade started, and the "
                "journal records none of them as created by this upgrade; this node is one of the %d newest "
                "(instance %s, created %s) and may be a heir whose creation a killed run never recorded. Nothing "
                "proves it is ours, so it is kept: if it is surplus, remove it by hand (kubectl drain %s, csp_node "
                "state=absent for its instance, kubectl delete node %s)") % (
                report["id"], report["nodes_serving"], extra, start, extra, s.info.provider_id or "unknown",
                format_time(created[s.name]) if created[s.name] is not None else "at an unknown time",
                s.name, s.name)), action="kept"))
    return problems


def groups_short(inputs, census, reports):
    """The groups (their reports, with ready_on_image set) that hold fewer Ready nodes on the target image (as the
    cloud says their instances run) than the journal says they had at the start."""
    short = []
    for report in reports:
        gkey = group_key(report["id"])
        start = inputs.start_counts.get(gkey)
        report["ready_on_image"] = sum(1 for s in census.by_group.get(gkey, []) if _ready_on_image(inputs, census, s))
        if start is not None and report["ready_on_image"] < start:
            report.setdefault("start_count", start)
            short.append(report)
    return short


def _ready_on_image(inputs, census, s):
    inst = inputs.instance_of(s)
    on_image = (inst is not None and inst.state == RUNNING and same(inst.image, inputs.target)
                if inputs.cloud_consulted else same(s.image, inputs.target))
    # (A node someone else cordoned still counts: the cordon is theirs to lift.)
    return census.final.get(s.name) not in (OBSOLETE, INVALID) and s.info.ready and on_image
