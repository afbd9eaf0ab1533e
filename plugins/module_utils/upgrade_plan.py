# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The planner's result as typed values: the plan of the next pass (Plan) and the facts around it (UpgradeFacts).

Their to_dict() is the plain data that node_image_facts returns, the executor, upgrade_step and the reports read, and
the progress lines print: the same keys, in the same order, holding the same lists and dicts (the RETURN
documentation of node_image_facts describes each field). Entries stay plain dicts: they go as they are to the modules
that take them (node_pair, node_drain, csp_node, etcd_member_remove)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Dict, List, Optional


def _plain(value):
    return value.to_dict() if hasattr(value, "to_dict") else value


@dataclass
class _Record:
    def to_dict(self):
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


@dataclass
class Plan(_Record):
    """What the next pass does, in the order the executor takes it."""

    annotate: List[dict] = field(default_factory=list)          # cached annotations to write: {name, annotations}
    repairs: List[dict] = field(default_factory=list)           # pair repairs: {name, action, ...}
    pairs: List[dict] = field(default_factory=list)             # new pairs: {heir, donor, group, reason}
    obsolete: List[str] = field(default_factory=list)           # nodes marked obsolete now (surplus, delete-first)
    label_copies: List[dict] = field(default_factory=list)      # {heir, donor, labels, taints}
    set_group_image: List[dict] = field(default_factory=list)   # {group, image}
    create: List[dict] = field(default_factory=list)            # {group, count, role}
    create_blocked: List[dict] = field(default_factory=list)    # {group, reason, outdated}
    drain: List[dict] = field(default_factory=list)             # {name, reason, heir, heir_ready, ...}
    waiting_for_heir: List[dict] = field(default_factory=list)  # donors whose heir is not Ready (or not written)
    etcd_remove: List[dict] = field(default_factory=list)       # {name, node_ip, provider_id, group}
    delete_nodes: List[dict] = field(default_factory=list)      # {name, provider_id, group, control_plane}
    delete_instances: List[dict] = field(default_factory=list)  # instances without a Node: {provider_id, reason, ...}
    uncordon: List[str] = field(default_factory=list)           # outdated nodes whose pair broke after our drain
    surplus: List[dict] = field(default_factory=list)           # recorded nodes no donor needs: {name, action, ...}
    delete_first: List[dict] = field(default_factory=list)      # workers marked for removal before their heir
    record_start_counts: Dict[str, int] = field(default_factory=dict)   # journal: start_counts
    record_removed_first: Dict[str, dict] = field(default_factory=dict)  # journal: removed_first
    record_refills: Dict[str, str] = field(default_factory=dict)         # journal: refills
    record_created: Dict[str, dict] = field(default_factory=dict)        # journal: instances_created (recovered)
    refilled: List[dict] = field(default_factory=list)          # refills recorded as replaced: {name, group, ...}


@dataclass
class Budget(_Record):
    """The surge budget as the plan used it."""

    max_surge: object
    max_surge_total: Optional[int]
    in_flight: int                 # heirs, joining, failed, leaving and held instances over all groups
    to_create: int
    control_plane_first: bool      # a control-plane node is still to replace: no worker moves
    max_unavailable: object
    no_surge: bool
    unavailable: int               # nodes missing or leaving delete-first over all groups


@dataclass
class Progress(_Record):
    total: int
    done: int
    in_flight: int
    remaining: int
    percent: float


@dataclass
class Eta(_Record):
    """From the completed replacements of this image (None until there are enough samples)."""

    samples: int
    seconds: Optional[int] = None
    finish: Optional[str] = None
    mean_replacement_seconds: Optional[float] = None


@dataclass
class UpgradeFacts(_Record):
    """Where every node stands and what the next pass does (core.plan_upgrade's result, as to_dict() gives it)."""

    target_image: str
    annotation_prefix: str
    nodes: Dict[str, list]               # node group -> names (invalid: {name, reason, out_of_scope})
    joining: List[dict]                  # instances without a Node within their join deadline
    leaving_instances: List[dict]        # instances without a Node the cloud is deleting
    scaling_groups: List[dict]           # one report per scaling group
    budget: Budget
    plan: Plan
    progress: Progress
    eta: Eta
    done: bool
    problems: List[dict]                 # {node, step, code, message, action}
    foreign: List[dict]                  # nodes on the image this upgrade did not create: {name, group, provider_id}
    stop: Optional[str]                  # why the run cannot go on by itself, or None
    etcd_health_due: bool                # a control-plane heir waits for an etcd read through another host
    node_patches: Dict[str, dict]        # name -> {annotations, labels, taints, expect}
