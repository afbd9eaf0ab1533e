# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The planner's view of instances without a Node: joining within their deadline, being deleted already, failed
(a late quota or capacity refusal included), past their join deadline, orphans of an interrupted run, or held in a
state the cloud reports that no step may act on (pure: no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, List

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import (
    DELETING, FAILED, REFUSED_FOR, RUNNING, STATE_PROBLEM)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.upgrade_plan import InstanceWithoutNode, Problem
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.vocabulary import format_time, same


@dataclass
class Arrivals:
    """The instances without a Node, sorted into what the plan does with them, and how many of each per group key."""

    joining: List[InstanceWithoutNode] = field(default_factory=list)    # within their join deadline (in flight)
    leaving: List[InstanceWithoutNode] = field(default_factory=list)    # the cloud is deleting them (they hold a slot)
    delete_instances: List[InstanceWithoutNode] = field(default_factory=list)  # failed, past the deadline, orphans
    joining_count: Dict[str, int] = field(default_factory=dict)
    joining_old: Dict[str, int] = field(default_factory=dict)   # joining on an old image: no heir, but capacity
    failed_count: Dict[str, int] = field(default_factory=dict)
    leaving_count: Dict[str, int] = field(default_factory=dict)
    # Left alone in a state the cloud reports that no step may act on: they hold their slot (counted as failed).
    problems: List[Problem] = field(default_factory=list)

    def count(self, counter, gkey):
        counter[gkey] = counter.get(gkey, 0) + 1


def instances_without_nodes(inputs, states, names):
    """Arrivals of the instances listed in scope that no Node (of `states`, by providerID, or of `names`) holds."""
    arrivals = Arrivals()
    normalize = inputs.normalize
    node_provider_ids = {normalize(s.info.provider_id) for s in states if s.info.provider_id}
    for gkey in sorted(inputs.instance_lists):
        group = inputs.group_index[gkey]
        for inst in sorted(inputs.instance_lists[gkey], key=lambda i: i.provider_id):
            if normalize(inst.provider_id) in node_provider_ids or (inst.node_name and inst.node_name in names):
                continue
            entry = InstanceWithoutNode(provider_id=inst.provider_id, node_name=inst.node_name, group=group.id,
                                        state=inst.state, image=inst.image,
                                        created_at=format_time(inst.created_at) if inst.created_at else None)
            _sort(inputs, arrivals, gkey, inst, entry)
    return arrivals


def late_refusal(inst):
    """The cloud's words when it accepted the create of `inst` and then refused it for quota or capacity, else None.
    A refused instance that runs after all, or is being deleted, is no refusal any more."""
    words = (inst.extra or {}).get(REFUSED_FOR)
    if not words or inst.state in (RUNNING, DELETING):
        return None
    return str(words)


def _sort(inputs, arrivals, gkey, inst, entry):
    timeout = float(inputs.options.join_timeout)
    problem = (inst.extra or {}).get(STATE_PROBLEM)
    if problem and inst.state != DELETING:
        # Nothing is done to it (neither waited for as joining nor deleted) until the cloud says otherwise.
        arrivals.problems.append(Problem(node=inst.node_name or inst.provider_id, step=None, code="instance_state",
                                         message="instance %s: %s" % (inst.provider_id, problem), action="left alone"))
        arrivals.count(arrivals.failed_count, gkey)
        return
    if inst.state == DELETING:
        # Deletion requested: it still occupies the group until the cloud no longer lists it.
        arrivals.leaving.append(entry)
        arrivals.count(arrivals.leaving_count, gkey)
        return
    expired = inst.created_at is not None and inputs.now - inst.created_at > timeout
    current = not inst.image or same(inst.image, inputs.target)
    deadline = format_time(inst.created_at + timeout) if inst.created_at else None
    refused = late_refusal(inst)
    if refused and current and inst.state != FAILED:
        # Accepted, then refused for quota or capacity (GCE retries it forever): never a joining heir. It is removed
        # and the surge held, as for a create refused at once, instead of waiting join_timeout to create it again.
        # (On an old image it is someone else's scale-up: left to the rules below.)
        arrivals.delete_instances.append(replace(entry, quota_exceeded=True, reason=(
            "the cloud accepted it but cannot create it for quota or capacity: %s" % refused)))
        arrivals.count(arrivals.failed_count, gkey)
    elif inst.state == FAILED:
        # A quota or capacity refusal can come late, on the instance (GCE, Azure): say so, so the
        # role holds the surge instead of creating the same refused instance again.
        errors = (inst.extra or {}).get("errors") or []
        errors = errors or ([refused] if refused else [])
        reason = "the cloud failed to create it" + (": " + "; ".join(errors) if errors else "")
        arrivals.delete_instances.append(replace(entry, reason=reason, quota_exceeded=bool(
            refused or (inst.extra or {}).get("quota_exceeded"))))
        arrivals.count(arrivals.failed_count, gkey)
    elif current and not expired:
        arrivals.joining.append(replace(entry, deadline=deadline))
        arrivals.count(arrivals.joining_count, gkey)
    elif current:
        arrivals.delete_instances.append(replace(entry, reason="no Node joined within %ds" % int(timeout)))
        arrivals.count(arrivals.failed_count, gkey)
    elif not expired:
        # Old image, no Node yet (someone else scaled the group; it may run a while before its Node
        # registers): let it join, then replace it. It occupies the group but will not become a heir.
        arrivals.joining.append(replace(entry, deadline=deadline))
        arrivals.count(arrivals.joining_count, gkey)
        arrivals.count(arrivals.joining_old, gkey)
    else:
        arrivals.delete_instances.append(replace(entry, reason="orphan: old image and no Node (interrupted run)"))
