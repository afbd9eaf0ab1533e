# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Delete-first replacements (max_unavailable), in worker groups only: the control plane always surges.

A group lends capacity instead of borrowing it. An outdated node is marked obsolete, the removal path of surplus
nodes (cordon, drain with PDBs respected, delete; every cross-check, resumable at any phase), and the group is
refilled from the new image up to the node count it had at the start, as the journal records it (start_counts,
written before the first mark). A refill joins and pairs with the next outdated node like any heir; one that finds
none is the replacement of a node already gone and is recorded as replaced. A donor removed delete-first is told from
a surplus heir by its image: the cloud says it runs an outdated one. Ready nodes never drop below the start minus the
limit. plan_delete_first decides a group's removals and creations; mark_removed_first writes the marks of every group's
removals (pure: no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import DELETING, FAILED, ROLE_WORKER
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.plan_inputs import group_key
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.upgrade_plan import (
    Decided, RemovedFirst, RemovedFirstRecord,
)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.vocabulary import (
    OBSOLETE, OUTDATED, copyable_labels, copyable_taints, unavailable_limit,
)


@dataclass
class DeleteFirstDecision:
    create: int = 0                   # instances to create: refills owed and surge heirs
    surge_heirs: int = 0              # of them, those that use surge room
    reason: Optional[str] = None      # why nothing is created nor removed
    remove: List[object] = field(default_factory=list)   # outdated nodes (NodeState) to mark for removal now
    record_start: Optional[int] = None   # the start count to record (the journal had none)


def delete_first_on(inputs, report):
    return report["role"] == ROLE_WORKER and unavailable_limit(inputs.options.max_unavailable, 1) > 0


@dataclass
class _Room:
    start: int
    limit: int            # nodes the group may lack
    listed: int           # instances listed, in any state
    live: int             # of them, neither being deleted nor failed
    in_use: int           # nodes missing or leaving now
    available: int        # Ready, schedulable nodes that go on serving
    refill_owed: int
    refill: int           # refills created now
    surge_heirs: int      # heirs created now beyond the refills


def plan_delete_first(inputs, census, arrivals, report, budget, cluster_room):
    """The decision for a worker group with max_unavailable above 0; `report` gets the delete-first figures."""
    gkey = group_key(report["id"])
    members = census.by_group.get(gkey, [])
    vacating = census.vacating(members, inputs.target)
    start = inputs.start_counts.get(gkey)
    provisional = start is None
    if provisional and vacating:
        # A node already removed delete-first cannot be counted back without the journal's record.
        return DeleteFirstDecision(reason=(
            "the journal does not record how many nodes scaling group %s had at the start, and %s is being removed "
            "delete-first: rolling_upgrade_max_unavailable needs the journal"
            % (report["id"], ", ".join(s.name for s in vacating))))
    room = _room(inputs, census, gkey, members, report["nodes_serving"] if provisional else start, budget, cluster_room)
    joining_new = arrivals.joining_count.get(gkey, 0) - arrivals.joining_old.get(gkey, 0)
    free = [s for s in members if census.final[s.name] == OUTDATED and not s.paired_now
            and not s.info.annotations.get(inputs.keys.donor)]
    # Outdated nodes no heir on its way (joining, created now, or a refill still owed) will take.
    spare = max(0, len(free) - joining_new - room.refill_owed - room.surge_heirs)
    count = 0 if census.cp_busy else min(max(0, room.limit - room.in_use), spare)
    report.update(start_count=room.start, unavailable_limit=room.limit, unavailable_in_use=room.in_use + count,
                  ready_serving=room.available, refill_owed=room.refill_owed - room.refill,
                  delete_first=sorted(s.name for s in vacating + free[:count]))
    create = room.refill + room.surge_heirs
    reason = None
    if not create and not count and (budget.demand or room.refill_owed):
        reason = _why_none(census, report, room)
    return DeleteFirstDecision(create=create, surge_heirs=room.surge_heirs, reason=reason, remove=free[:count],
                               record_start=room.start if count and provisional else None)


def _room(inputs, census, gkey, members, start, budget, cluster_room):
    limit = unavailable_limit(inputs.options.max_unavailable, start)
    surge = 0 if inputs.options.no_surge else budget.limit
    listed = inputs.instance_lists.get(gkey, [])
    # An instance the cloud is still deleting (or gave up creating) is no capacity, but it holds its slot (and
    # the quota) until it is gone: the refill it leaves owed is created once there is room.
    live = sum(1 for i in listed if i.state not in (DELETING, FAILED))
    room = max(0, start + surge - len(listed))
    available = census.available(members)
    refill_owed = max(0, start - live)
    refill = min(refill_owed, room)
    surge_heirs = 0
    if not census.cp_busy:
        surge_heirs = min(max(0, budget.demand - refill_owed), max(0, room - refill))
        if cluster_room is not None:
            surge_heirs = min(surge_heirs, cluster_room)
    return _Room(start=start, limit=limit, listed=len(listed), live=live, in_use=max(0, start - available),
                 available=available, refill_owed=refill_owed, refill=refill, surge_heirs=surge_heirs)


def _why_none(census, report, room):
    if census.cp_busy:
        return "waiting for the control plane to be replaced first"
    if room.refill_owed:
        return ("%d refill(s) owed, waiting for room: %d instance(s) listed, %d of them still being deleted or failed, "
                "%d at the start" % (room.refill_owed, room.listed, room.listed - room.live, room.start))
    return ("unavailable budget used (%d of %d node(s) missing or leaving) and no room for a heir (%d instance(s), %d "
            "at the start)" % (room.in_use, room.limit, room.listed, room.start))


def mark_removed_first(inputs, census, decisions):
    """The marks of the outdated workers to remove before their heir exists, for each (group id, DeleteFirstDecision):
    marked obsolete (census.final too), and their labels (and taints) outlive them in the journal, for the refill
    that replaces them. `since`: a fresh node the cloud created after it may be its refill (unrecorded_refill)."""
    out, keys, options = Decided(), inputs.keys, inputs.options
    for group_id, decision in decisions:
        for s in decision.remove:
            out.plan.record_removed_first[s.name] = RemovedFirstRecord(
                group=group_id, since=inputs.stamp, labels=copyable_labels(s.info.labels, options.exclude_labels),
                taints=copyable_taints(s.info.taints, options.taints_not_copied()) if options.copy_taints else [])
            census.final[s.name] = OBSOLETE
            out.plan.obsolete.append(s.name)
            out.plan.delete_first.append(RemovedFirst(name=s.name, group=group_id, provider_id=s.info.provider_id))
            out.patches.annotate(s.name, dict(s.take_cache(), **inputs.obsolete_mark()),
                                 expect={keys.heir: None, keys.obsolete: s.info.annotations.get(keys.obsolete)})
        if decision.record_start is not None:
            out.plan.record_start_counts[group_id] = decision.record_start
    return out
