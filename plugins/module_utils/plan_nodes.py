# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The census: where every node belongs, which image it runs, its first grouping (as in the reference, A.4), the
nodes whose annotations do not hold together left alone, and what every node will be once the plan's writes on
Nodes are applied. Each step takes the inputs and the census and returns what it found (pure: no I/O)."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.crosschecks import _problem, annotation_problems
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_census import Census, NodeState
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_inputs import group_key
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.upgrade_plan import CacheCorrected
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.vocabulary import (
    DONOR, HEIR, INVALID, NEW, OBSOLETE, OUTDATED, UP_TO_DATE, parse_time, same,
)


# 1. Where each node belongs and which image it runs (cached annotations win, as in the reference), and its first
#    grouping, before pairs are checked.
def take_census(inputs):
    """(the census of every node, the problems found: caches the cloud corrects)."""
    census, problems = Census(), []
    for info in inputs.infos:
        state = NodeState(info=info)
        census.states.append(state)
        _locate(inputs, state, problems)
    census.by_name = {s.name: s for s in census.states}
    census.valid = [s for s in census.states if s.category != INVALID]
    for s in census.valid:
        _classify(inputs, s)
    return census, problems


def _locate(inputs, state, problems):
    keys, info, ann = inputs.keys, state.info, state.info.annotations
    if not info.provider_id:
        state.category, state.reason = INVALID, "no providerID"
        return
    inst = inputs.by_provider_id.get(inputs.normalize(info.provider_id))
    group_id = _group_of(inputs, state, inst, problems)
    # A node this collection marked obsolete is removed even when its scaling group cannot be told any
    # more (its instance is gone already, or it was never cached): only its Node object is left.
    ours_to_remove = ann.get(keys.obsolete) == "true" and inputs.cloud_consulted and not inputs.group_errors
    if group_id is None and not ours_to_remove:
        _without_group(inputs, state)
        return
    gkey = group_key(group_id)
    in_scope = inputs.scope_keys is None or gkey in inputs.scope_keys
    if group_id is None or (inputs.cloud_consulted and gkey not in inputs.group_index and ours_to_remove and in_scope):
        state.group_id, state.image = group_id, ann.get(keys.image) or ""
        _read_phase(inputs, state)
        return
    if (inputs.cloud_consulted and gkey not in inputs.group_index) or not in_scope:
        _outside_groups(inputs, state, group_id, gkey, in_scope)
        return
    state.group_id = inputs.group_index[gkey].id if inputs.cloud_consulted else group_id
    if _image_of(inputs, state, inst, ours_to_remove, problems):
        _read_phase(inputs, state)


def _group_of(inputs, state, inst, problems):
    """The node's scaling group: the cloud's, else its cached annotation (None when neither says). The cloud is
    the source of truth for where an instance belongs and what it runs: a cached annotation that disagrees with
    it is corrected, never believed."""
    keys, ann = inputs.keys, state.info.annotations
    if inst is None:
        return ann.get(keys.group) if keys.group in ann else None
    if keys.group not in ann or not same(ann[keys.group], inst.group_id):
        state.cache[keys.group] = inst.group_id
        if keys.group in ann:
            problems.append(_corrected(state, "scaling-group-id", ann[keys.group], inst.group_id))
    return inst.group_id


def _without_group(inputs, state):
    """A node whose scaling group neither the cloud nor an annotation says is left alone, with the reason."""
    state.category = INVALID
    if not inputs.cloud_consulted:
        state.reason = "no %s annotation and no cloud provider to look it up" % inputs.keys.group
    elif inputs.group_errors:
        state.reason = "cloud lookup failed: " + "; ".join("%s: %s" % kv for kv in sorted(inputs.group_errors.items()))
    else:
        state.reason = "its instance is in none of the listed scaling groups"
        state.out_of_scope = inputs.scope_keys is not None


def _outside_groups(inputs, state, group_id, gkey, in_scope):
    """A node of a group not read (its lookup failed, or it is unknown) or out of scope is left alone."""
    state.category = INVALID
    if gkey in inputs.group_errors and inputs.cloud_consulted:
        state.reason = "cloud lookup failed for scaling group %s: %s" % (group_id, inputs.group_errors[gkey])
    elif not in_scope:
        state.reason = "scaling group %s is not in scaling_groups" % group_id
        state.out_of_scope = True
    else:
        state.reason = "unknown scaling group %s" % (group_id or "(empty)")


def _image_of(inputs, state, inst, ours_to_remove, problems):
    """Sets the node's image: the cloud's (a disagreeing cache is corrected), else its cached annotation. False
    (the node is left alone) when neither says and it is not one of ours to remove."""
    keys, ann = inputs.keys, state.info.annotations
    if inst is not None and inst.image:
        state.image = inst.image
        if keys.image not in ann or not same(ann[keys.image], inst.image):
            state.cache[keys.image] = inst.image
            if keys.image in ann:
                problems.append(_corrected(state, "node-image", ann[keys.image], inst.image))
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


def _corrected(state, what, cached, cloud):
    return CacheCorrected(node=state.name, step=None, code="cache_disagrees", action="corrected",
                          message="node %s: its cached %s annotation says %s but the cloud says %s; the cloud wins and the "
                                  "annotation is corrected" % (state.name, what, cached, cloud))


def _read_phase(inputs, state):
    ann = state.info.annotations
    state.phase = (ann.get(inputs.keys.phase) or "").strip()
    state.phase_since = parse_time(ann.get(inputs.keys.phase_since))


def _classify(inputs, s):
    keys, ann = inputs.keys, s.info.annotations
    if ann.get(keys.obsolete) == "true":
        s.category = OBSOLETE
    elif not same(s.image, inputs.target):
        s.category = DONOR if ann.get(keys.heir) else OUTDATED
        s.partner = ann.get(keys.heir) or None
    elif ann.get(keys.donor):
        s.category = HEIR
        s.partner = ann.get(keys.donor)
    else:
        s.category = UP_TO_DATE  # decided below: new or up to date


# 2. Inconsistent annotations are named problems, and the nodes they are on are left alone (invalid): garbage or
#    self-referencing heir/donor names, 2-cycles, pairs across scaling groups, phase trails out of order, obsolete
#    marks this collection did not record. So is the partner such a node names.
def screen(inputs, census):
    """Leaves alone the nodes whose annotations do not hold together; returns their problems."""
    found = {}
    for s in census.valid:
        if s.category == INVALID:
            continue
        problems = annotation_problems(s.info, inputs.keys, inputs.now) + _obsolete_problems(inputs, s)
        problems.extend(_partner_problems(inputs, census, s))
        if problems:
            found[s.name] = problems
    _partners_of_held(inputs, census, found)
    held = []
    for name in sorted(found):
        held.extend(census.by_name[name].hold(found[name]))
    census.valid = [s for s in census.states if s.category != INVALID]
    return held


def _obsolete_problems(inputs, s):
    if s.category != OBSOLETE or not inputs.proof or obsolete_proven(inputs, s):
        return []
    return [_problem(s.name, None, "obsolete_not_proven", (
        "it is marked obsolete, but the journal records neither its instance as created by this upgrade "
        "nor the node as removed delete-first; an annotation alone never makes this collection remove a "
        "node, so it is left alone: if it should go, remove it by hand, else delete its %s annotation")
        % inputs.keys.obsolete)]


def _partner_problems(inputs, census, s):
    """A 2-cycle of heir (or donor) names, or a pair (both halves written) across scaling groups; a one-sided
    name is only a dangling half."""
    keys, ann, problems = inputs.keys, s.info.annotations, []
    for key, back, what in ((keys.heir, keys.donor, "heir"), (keys.donor, keys.heir, "donor")):
        other = census.by_name.get(ann.get(key) or "")
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


def _partners_of_held(inputs, census, found):
    """The partner (named back) of a node left alone is left alone too."""
    keys = inputs.keys
    for name in list(found):
        ann = census.by_name[name].info.annotations
        for key in (keys.heir, keys.donor):
            other = census.by_name.get(ann.get(key) or "")
            if other is None or other.name in found or other.category == INVALID:
                continue
            back = other.info.annotations
            if back.get(keys.heir) == name or back.get(keys.donor) == name:
                found[other.name] = [_problem(other.name, None, "partner_has_problem", "its partner %s is left "
                                              "alone: %s" % (name, found[name][0]["message"]))]


def obsolete_proven(inputs, state):
    """An obsolete mark the journal backs: a surplus node this upgrade created, a worker it removed
    delete-first, or a Node whose instance the cloud no longer lists (nothing serves there any more)."""
    return (inputs.created_by_us(state) is not None or state.name in inputs.removed_first
            or (state.info.provider_id and inputs.instance_of(state) is None and inputs.cloud_view.complete))


# 4. One ordering rule everywhere: while a control-plane node still has to be replaced, no worker is paired,
#     drained, deleted or created.
def control_plane_owed(census):
    return any(s.category in (OUTDATED, DONOR) and s.info.control_plane for s in census.valid)


def by_group(states):
    """The nodes by group key, in census order."""
    grouped = {}
    for s in states:
        grouped.setdefault(group_key(s.group_id), []).append(s)
    return grouped


# 5. What every node will be once the writes on Nodes of the steps before are applied.
def settle_groups(census, marked):
    """{name: its group once applied}: a new node is a heir, or obsolete when `marked` (just marked obsolete); a donor
    paired now is a donor."""
    final = {}
    for s in census.states:
        if s.category == NEW:
            final[s.name] = OBSOLETE if s.name in marked else HEIR
        elif s.paired_now:
            final[s.name] = DONOR
        else:
            final[s.name] = s.category
    return final
