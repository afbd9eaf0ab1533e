# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The planner's view of instances without a Node: joining within their deadline, being deleted already, failed
(a late quota refusal included), past their join deadline, or orphans of an interrupted run (pure: no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, List

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import DELETING, FAILED
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.upgrade_plan import InstanceWithoutNode
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


def _sort(inputs, arrivals, gkey, inst, entry):
    timeout = float(inputs.options.join_timeout)
    if inst.state == DELETING:
        # Deletion requested: it still occupies the group until the cloud no longer lists it.
        arrivals.leaving.append(entry)
        arrivals.count(arrivals.leaving_count, gkey)
        return
    expired = inst.created_at is not None and inputs.now - inst.created_at > timeout
    current = not inst.image or same(inst.image, inputs.target)
    deadline = format_time(inst.created_at + timeout) if inst.created_at else None
    if inst.state == FAILED:
        # A quota or capacity refusal can come late, on the instance (GCE): say so, so the
        # role holds the surge instead of creating the same refused instance again.
        errors = (inst.extra or {}).get("errors") or []
        reason = "the cloud failed to create it" + (": " + "; ".join(errors) if errors else "")
        arrivals.delete_instances.append(replace(entry, reason=reason,
                                                 quota_exceeded=bool((inst.extra or {}).get("quota_exceeded"))))
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
