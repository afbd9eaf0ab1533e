# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Leaving nodes: donors whose heir is Ready, and obsolete nodes, go drain -> etcd removal (control plane) ->
deletion, each step once the cross-checks of cloud and cluster agree; a node they refuse (and its heir) is left
alone. An outdated node our drain cordoned before its pair broke is uncordoned. Takes the census as the writes of the
steps before leave it (census.final) and returns what it decided (upgrade_plan.Decided); pure: no I/O."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.crosschecks import (
    CHECKS, STEP_CORDON, STEP_DRAIN, STEP_ETCD_REMOVAL, STEP_INSTANCE_DELETION, STEP_NODE_DELETION, _problem,
)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.upgrade_plan import (
    Decided, Drain, EtcdRemoval, LoadBalancerHold, NodeDeletion, WaitingForHeir,
)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.vocabulary import (
    DONOR, HEIR, INVALID, KNOWN_DONOR_PHASES, LB_EXCLUDE_LABEL, OBSOLETE, OUTDATED, PHASE_DRAINED, PHASE_DRAINING,
    PHASE_PAIRED, format_time, parse_time,
)


# 7. Leaving nodes: donors whose heir is Ready, and obsolete nodes, go drain -> etcd -> delete.
def leaving_steps(inputs, census, marked):
    """The next step of every leaving node. `marked`: the nodes this plan marks obsolete, drained only once the mark
    is written (next pass). Nodes left alone here are invalid in census.final from now on."""
    out, keys = Decided(), inputs.keys
    marked = set(marked)
    for s in census.states:
        cat = census.final[s.name]
        if cat == OUTDATED and s.info.unschedulable and s.info.annotations.get(keys.phase) in (PHASE_DRAINING, PHASE_DRAINED):
            out.plan.uncordon.append(s.name)  # our drain of it was undone by a broken pair: give the capacity back
        elif cat == OUTDATED and keys.lb_excluded_since in s.info.annotations:
            out.plan.lb_release.append(s.name)  # out of the load balancers for a pair that broke before its drain
        if cat not in (DONOR, OBSOLETE) or s.name in marked:
            continue
        if census.cp_busy and not s.info.control_plane:
            # No worker leaves while a control-plane node still has to be replaced.
            out.plan.waiting_for_heir.append(WaitingForHeir(
                name=s.name, since=format_time(s.phase_since) if s.phase_since else None, overdue=False,
                heir=s.partner, heir_ready=None, heir_ready_since=None,
                reason="waiting for the control plane to be replaced first"))
            continue
        _leave(inputs, census, s, cat, out)
    return out


def _leave(inputs, census, s, cat, out):
    """The next step of leaving node `s` (a donor or obsolete), by its phase, once the cross-checks agree."""
    heir_ready, gate = _heir_gate(inputs, census, s, cat)
    phase = s.phase if s.phase in KNOWN_DONOR_PHASES else PHASE_PAIRED
    ip = s.info.internal_ips[0] if s.info.internal_ips else None
    if phase in (PHASE_PAIRED, PHASE_DRAINING):
        if not heir_ready:
            out.plan.waiting_for_heir.append(_waiting(inputs, s, gate))
            if _heir_serving(inputs, census, s, cat) and _unlabelled(inputs, s) and _would_agree(inputs, census, s, cat):
                # Out of the load balancers once its heir is Ready: the hold runs under heir_ready_seconds and the
                # drain, and the instance goes in the pass that finds it drained.
                out.plan.exclude_from_lb.append(s.name)
        elif _agreed(inputs, census, s, cat, out, STEP_CORDON, STEP_DRAIN):
            # What follows a drain rides along, so a drain that finishes at once goes on in the same pass.
            out.plan.drain.append(Drain(name=s.name, reason=cat, **gate, control_plane=s.info.control_plane,
                                        node_ip=ip, provider_id=s.info.provider_id, group=s.group_id))
            # Out of the load balancers by the drain's start at the latest (from the heir's Ready where it was seen).
            if _unlabelled(inputs, s):
                out.plan.exclude_from_lb.append(s.name)
    elif phase == PHASE_DRAINED and _held_for_lb(inputs, s, out):
        pass
    elif phase == PHASE_DRAINED and s.info.control_plane:
        if _agreed(inputs, census, s, cat, out, STEP_ETCD_REMOVAL):
            out.plan.etcd_remove.append(EtcdRemoval(name=s.name, node_ip=ip, provider_id=s.info.provider_id,
                                                    group=s.group_id))
    elif _agreed(inputs, census, s, cat, out, STEP_INSTANCE_DELETION, STEP_NODE_DELETION):
        out.plan.delete_nodes.append(NodeDeletion(name=s.name, provider_id=s.info.provider_id, group=s.group_id,
                                                  control_plane=s.info.control_plane))


def lb_hold_until(labels, annotations, keys, seconds):
    """When a leaving node's hold out of the load balancers ends (epoch seconds): its lb-excluded-since annotation plus
    `seconds`, or 0.0 when there is no hold (`seconds` 0); None when it does not carry the label and the annotation
    yet (they are written first, and the hold counts from then)."""
    if not float(seconds or 0):
        return 0.0
    since = parse_time((annotations or {}).get(keys.lb_excluded_since))
    if since is None or LB_EXCLUDE_LABEL not in (labels or {}):
        return None
    return since + float(seconds)


def _unlabelled(inputs, s):
    """Whether leaving node `s` is still to be labelled out of the load balancers (never with lb_drain_seconds 0)."""
    return lb_hold_until(s.info.labels, s.info.annotations, inputs.keys, inputs.options.lb_drain_seconds) is None


def _held_for_lb(inputs, s, out):
    """Whether drained node `s` waits out of the load balancers before its etcd member and its instance go (labelled
    first when a run before this one drained it without the label)."""
    until = lb_hold_until(s.info.labels, s.info.annotations, inputs.keys, inputs.options.lb_drain_seconds)
    if until is None:
        out.plan.exclude_from_lb.append(s.name)
    elif until <= inputs.now:
        return False
    since = s.info.annotations.get(inputs.keys.lb_excluded_since) if until else None
    out.plan.waiting_for_lb.append(LoadBalancerHold(name=s.name, since=since, until=format_time(until) if until else None))
    return True


def _heir_gate(inputs, census, s, cat):
    """(whether the donor's heir is Ready for its drain, what the drain entry says of the heir). A pair formed by
    this plan is drained on the next pass, once node_pair has written it. A heir counts only while the cloud
    says its instance runs. An obsolete node has no heir to wait for."""
    if cat != DONOR or not s.partner:
        return True, dict(heir=None, heir_ready=None, heir_ready_since=None)
    h, now = census.by_name.get(s.partner), inputs.now
    settled = h is not None and h.info.ready and inputs.running(h) and (
        h.info.ready_since is None or now - h.info.ready_since >= float(inputs.options.heir_ready_seconds or 0))
    gate = dict(heir=s.partner, heir_ready=bool(h is not None and h.info.ready),
                heir_ready_since=format_time(h.info.ready_since) if h is not None and h.info.ready_since else None)
    return bool(settled and not s.paired_now), gate


def _heir_serving(inputs, census, s, cat):
    """Whether donor `s` has a heir that is Ready on a running instance, in a pair written before this plan: its
    heir_ready_seconds may still run."""
    h = census.by_name.get(s.partner) if cat == DONOR and s.partner else None
    return bool(h is not None and h.info.ready and inputs.running(h) and not s.paired_now)


def _would_agree(inputs, census, s, cat):
    """Whether the drain's cross-checks would pass now (nothing recorded: they are judged again when it is due)."""
    return not _problems(inputs, census, s, cat, (STEP_CORDON, STEP_DRAIN))


def _waiting(inputs, s, gate):
    """A heir that is not Ready within join_timeout of the pairing will likely never be: say so (the reference
    waited forever without a word)."""
    overdue = bool(s.phase_since is not None and not gate["heir_ready"]
                   and inputs.now - s.phase_since > float(inputs.options.join_timeout))
    return WaitingForHeir(name=s.name, since=format_time(s.phase_since) if s.phase_since else None, overdue=overdue,
                          **gate)


def _agreed(inputs, census, s, cat, out, *steps):
    """The cross-checks of these steps all pass; else the node (and its heir) are left alone."""
    problems = _problems(inputs, census, s, cat, steps)
    if problems:
        out.problems.extend(_hold_leaving(census, s, problems))
    return not problems


def _problems(inputs, census, s, cat, steps):
    """What the cross-checks of these steps find against leaving node `s`."""
    heir_info = census.by_name[s.partner].info if cat == DONOR and s.partner in census.by_name else None
    cloud = inputs.cloud_view if inputs.cloud_consulted else None
    problems = []
    for step in steps:
        problems.extend(CHECKS[step](s.info, heir_info, inputs.target, cloud, inputs.keys, inputs.now))
    return problems


def _hold_leaving(census, state, problems):
    """Leaves `state` alone (and its heir, when it names it back); returns their problems."""
    seen, unique = set(), []
    for p in problems:
        if p["message"] not in seen:
            seen.add(p["message"])
            unique.append(p)
    held = state.hold(unique)
    census.final[state.name] = INVALID
    h = census.by_name.get(state.partner or "")
    if h is not None and census.final.get(h.name) == HEIR and h.partner == state.name:
        held.extend(h.hold([_problem(h.name, unique[0]["step"], "partner_has_problem", "its donor %s is left alone: %s"
                                     % (state.name, unique[0]["message"]))]))
        census.final[h.name] = INVALID
    return held
