# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Surge: each scaling group's budget and how many heirs it gets now, control plane first and one at a time.

group_budgets() reckons per group what is in flight (heirs, joining, failed, leaving, dying and held instances), the
surge limit and the demand (outdated nodes no joining instance will take), with the group's report. plan_creations()
then decides per group, in that order: nothing to do, the cloud not listed, the group not on the image yet,
delete-first (its own piece, plan_delete_first), no room in the quota, workers waiting for the control plane, one
control-plane heir at a time while etcd and the control-plane Nodes are healthy, else what the surge budget leaves;
a cluster-wide budget (max_surge_total) caps them all (pure: no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.crosschecks import parse_trail
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import DELETING, ROLE_CONTROL_PLANE, ROLE_WORKER
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_delete_first import delete_first_on, plan_delete_first
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_inputs import HEALTH_UNREAD, group_key
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.upgrade_plan import CreateBlocked, Creation
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.vocabulary import (
    DONOR, HEIR, INVALID, NODE_GROUPS, OBSOLETE, OUTDATED, PHASE_DELETING, PHASE_DRAINED, PHASE_ETCD_REMOVED,
    PHASE_HEIR, PHASE_REPLACED, UP_TO_DATE, same, surge_limit,
)


@dataclass
class GroupBudget:
    limit: int            # the surge limit (1 in the control plane)
    in_flight: int        # instances of this upgrade under way, and those holding a slot
    demand: int           # outdated nodes no joining instance will take
    held: List[str]       # heirs left alone for a problem: they keep their slot
    unclaimed: int = 0    # this upgrade's instances not told apart from the cloud's own (PlanInputs.unclaimed)
    unclaimed_among: List[str] = field(default_factory=list)   # the instances they are among (providerIDs)


@dataclass
class Decision:
    """One group's creations now."""

    count: int = 0
    reason: Optional[str] = None         # why none (or fewer), for create_blocked
    surge_only: Optional[int] = None     # delete-first: of `count`, the heirs that use surge room (refills do not)


@dataclass
class Surge:
    """Every group's creations now, and what stops them."""

    create: List[Creation] = field(default_factory=list)
    blocked: List[CreateBlocked] = field(default_factory=list)
    removed_first: List[tuple] = field(default_factory=list)   # (group id, DeleteFirstDecision): marks to write
    health_due: bool = False             # a control-plane heir waits for an etcd read through another host
    stop: Optional[str] = None           # nothing frees the budget by itself


def group_budgets(inputs, census, arrivals, problems):
    """(the groups' reports, their budgets by group key, what is in flight over all groups), the control plane first."""
    roles = {gkey: census.group_role(inputs.group_index, gkey) for gkey in inputs.group_index}
    problem_nodes = {p.node for p in problems if p.action == "left alone"}
    reports, budgets, in_flight_total = [], {}, 0
    for gkey in sorted(inputs.group_index, key=lambda k: (roles[k] != ROLE_CONTROL_PLANE, k)):
        report, budget = _group_budget(inputs, census, arrivals, gkey, roles[gkey], problem_nodes)
        in_flight_total += budget.in_flight
        budgets[gkey] = budget
        reports.append(report)
    return reports, budgets, in_flight_total


def _group_budget(inputs, census, arrivals, gkey, role, problem_nodes):
    group, final = inputs.group_index[gkey], census.final
    members = census.by_group.get(gkey, [])
    count = {g: 0 for g in NODE_GROUPS}
    for s in members:
        count[final[s.name]] += 1
    # Instances of this upgrade that a kill left unrecorded and that cannot be told apart from the cloud's own hold
    # their slots: none of them becomes a heir, and each is one more instance in the group, not one of its positions.
    unclaimed, unclaimed_among = inputs.unclaimed.get(gkey, (0, []))
    # A percentage surge counts the group's nodes, not a Node whose instance is gone or going.
    counted = [s for s in members if final[s.name] in (OUTDATED, DONOR, UP_TO_DATE) and inputs.alive(s)]
    among = {inputs.normalize(p) for p in unclaimed_among}
    ours = min(unclaimed, sum(1 for s in counted if s.info.provider_id and inputs.normalize(s.info.provider_id) in among))
    limit = 1 if role == ROLE_CONTROL_PLANE else surge_limit(inputs.options.max_surge, len(counted) - ours)
    joining = arrivals.joining_count.get(gkey, 0)
    leaving = arrivals.leaving_count.get(gkey, 0)
    held = _held(inputs, census, gkey, problem_nodes)
    # A Node whose instance the cloud is deleting (a heir it took back, say) still holds its instance's slot.
    dying = sum(1 for s in members if final[s.name] not in (HEIR, OBSOLETE)
                and getattr(inputs.instance_of(s), "state", None) == DELETING)
    in_flight = (count[HEIR] + count[OBSOLETE] + joining + arrivals.failed_count.get(gkey, 0) + leaving + dying
                 + len(held) + unclaimed)
    demand = max(0, count[OUTDATED] - (joining - arrivals.joining_old.get(gkey, 0)))
    report = dict(id=group.id, name=group.name, kind=group.kind, role=role, image=group.image,
                  image_current=same(group.image, inputs.target), listed=gkey in inputs.instance_lists,
                  nodes=len(members), nodes_serving=sum(1 for s in members if s.category != OBSOLETE),
                  **{k: count[k] for k in NODE_GROUPS if k != INVALID},
                  joining=joining, leaving=leaving, held=held, surge_limit=limit, in_flight=in_flight)
    if unclaimed:
        report["unclaimed"] = dict(count=unclaimed, among=list(unclaimed_among))
    return report, GroupBudget(limit=limit, in_flight=in_flight, demand=demand, held=held, unclaimed=unclaimed,
                               unclaimed_among=list(unclaimed_among))


def _held(inputs, census, gkey, problem_nodes):
    """Nodes left alone for a problem that this collection created as heirs keep their slot (they are extra
    instances of this upgrade); anything else was there before and is part of the start."""
    return sorted(s.name for s in census.states if s.name in problem_nodes and s.group_id
                  and group_key(s.group_id) == gkey and same(s.image, inputs.target)
                  and PHASE_HEIR in [p for p, _t in parse_trail(s.info.annotations.get(inputs.keys.phase_history))[0]])


def plan_creations(inputs, census, arrivals, reports, budgets, in_flight_total):
    """The creations of every group (its report gets `to_create`), and the delete-first groups' decisions, whose
    removals mark_removed_first writes (a group's decision reads only its own nodes, so the marks wait)."""
    surge = Surge()
    cluster_room = None
    if inputs.options.max_surge_total is not None:
        cluster_room = max(0, int(inputs.options.max_surge_total) - in_flight_total)
    cp_in_flight = sum(b.in_flight for k, b in budgets.items()
                       if census.group_role(inputs.group_index, k) == ROLE_CONTROL_PLANE)
    for report in reports:
        budget = budgets[group_key(report["id"])]
        decision = _decide(inputs, census, arrivals, report, budget, cp_in_flight, cluster_room, surge)
        count, reason = decision.count, _held_for_ever(report, budget, decision, surge) or decision.reason
        if count and cluster_room is not None and decision.surge_only is None:
            count = min(count, cluster_room)
            if not count:
                reason = "cluster-wide surge budget used"
        if count and report["role"] == ROLE_CONTROL_PLANE:
            cp_in_flight += count
        if cluster_room is not None:
            cluster_room -= count if decision.surge_only is None else decision.surge_only
        report["to_create"] = count
        if count:
            surge.create.append(Creation(group=report["id"], count=count, role=report["role"]))
        elif reason:
            surge.blocked.append(CreateBlocked(group=report["id"], reason=reason, outdated=budget.demand))
    return surge


def _held_for_ever(report, budget, decision, surge):
    """When nodes left alone for a problem, or instances that cannot be told apart (unclaimed), hold the whole surge
    budget, nothing frees it by itself: going on means waiting for ever. Then the reason, and the run is told to stop."""
    holding = len(budget.held) + budget.unclaimed
    if not (budget.demand and not decision.count and holding and budget.limit <= budget.in_flight <= holding):
        return None
    if budget.held:
        reason = "surge budget held by node(s) left alone for a problem: %s" % ", ".join(budget.held)
        what = "resolve the problem(s) named in `problems`"
    else:
        reason = ("surge budget held by %d instance(s) of this upgrade that a kill left unrecorded, among %s; the "
                  "cloud made the other(s) by itself in the same moment (autohealing or a scale-up), and which are "
                  "whose cannot be told" % (budget.unclaimed, ", ".join(budget.unclaimed_among)))
        what = "delete in the cloud the one(s) of them not needed, or raise max_surge"
    surge.stop = surge.stop or ("scaling group %s cannot go on: %s; %s, then run again" % (report["id"], reason, what))
    return reason


def _decide(inputs, census, arrivals, report, budget, cp_in_flight, cluster_room, surge):
    want = budget.demand
    delete_first_here = delete_first_on(inputs, report)
    if want == 0 and not delete_first_here:
        return Decision()
    if not report["listed"]:
        return Decision(reason="its instances could not be listed" if want else None)
    if not report["image_current"]:
        return Decision(reason="the scaling group does not use the image yet" if want else None)
    if delete_first_here:
        removal = plan_delete_first(inputs, census, arrivals, report, budget, cluster_room)
        surge.removed_first.append((report["id"], removal))
        return Decision(removal.create, removal.reason, removal.surge_heirs)
    if inputs.options.no_surge:
        return Decision(reason="the cloud quota leaves no room for a new instance")
    if report["role"] == ROLE_WORKER and census.cp_busy:
        return Decision(reason="waiting for the control plane to be replaced first")
    if report["role"] == ROLE_CONTROL_PLANE:
        return _control_plane_decision(inputs, census, budget, cp_in_flight, surge)
    held = canary_hold(inputs, census, report, budget)
    if held:
        count = min(want, max(0, 1 - budget.in_flight))
        return Decision(count, None if count else held)
    count = min(want, max(0, budget.limit - budget.in_flight))
    return Decision(count, None if count else "surge budget used (%d of %d in flight)" % (budget.in_flight, budget.limit))


def canary_hold(inputs, census, report, budget):
    """Why a worker group stays at one replacement in flight (the canary), or None: with options.canary and a surge
    limit above 1, until one of its nodes is a finished replacement of this upgrade (its donor gone, so a health gate,
    when one is set, ran after it) that has been Ready for canary_soak_seconds. At a surge of 1 every replacement goes
    alone anyway."""
    options = inputs.options
    if not options.canary or budget.limit <= 1:
        return None
    soak = float(options.canary_soak_seconds or 0)
    for s in census.by_group.get(group_key(report["id"]), []):
        if (census.final[s.name] == UP_TO_DATE and s.phase == PHASE_REPLACED and same(s.image, inputs.target)
                and s.info.ready and (s.info.ready_since is None or inputs.now - s.info.ready_since >= soak)):
            return None
    return ("canary: the group's first replacement goes alone; full surge (%d) once it is done and its heir has been "
            "Ready for %ss (rolling_upgrade_canary)" % (budget.limit, int(soak)))


def _control_plane_decision(inputs, census, budget, cp_in_flight, surge):
    """One control-plane heir at a time, and only while etcd and the control-plane Nodes are healthy (as read)."""
    room = max(0, budget.limit - budget.in_flight)
    if cp_in_flight != 0 or room <= 0:
        return Decision(reason="a control-plane replacement is in flight")
    unhealthy = control_plane_problems(inputs, census)
    if unhealthy:
        return Decision(reason="the control plane is not healthy, so no new etcd member is added: %s; repair it (or "
                               "remove that member by hand) and the run goes on" % "; ".join(unhealthy))
    if inputs.health == HEALTH_UNREAD:
        surge.health_due = True
        return Decision(reason="etcd is read through rolling_upgrade_etcd_delegate_to before each control-plane heir: "
                               "that read is due")
    return Decision(1)


def control_plane_problems(inputs, census):
    """What stops a control-plane heir now: an etcd problem the executor read (a member unhealthy, an alarm, a
    learner left over) and control-plane Nodes that serve but are not Ready."""
    found = [("etcd member %s: %s" % (p.get("member") or p.get("node_ip"), p.get("message") or "unhealthy"))
             if p.get("member") or p.get("node_ip") else (p.get("message") or "etcd is not healthy")
             for p in inputs.health_read()]
    found.extend("control-plane node %s is not Ready" % s.name for s in census.valid
                 if s.info.control_plane and not s.info.ready
                 and census.final.get(s.name) in (OUTDATED, UP_TO_DATE, HEIR, DONOR)
                 and s.phase not in (PHASE_DRAINED, PHASE_ETCD_REMOVED, PHASE_DELETING))
    return found
