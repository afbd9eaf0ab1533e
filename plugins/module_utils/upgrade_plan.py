# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The planner's result as typed values: the plan of the next pass (Plan, its entries one dataclass each), the writes
on Nodes (NodePatches), what one step of the planner decides (Decided), and the facts around them (UpgradeFacts).

Their to_dict() is the plain data that node_image_facts returns, the executor, upgrade_step and the reports read, and
the progress lines print: the same keys, in the same order, holding the same lists and dicts (the RETURN
documentation of node_image_facts describes each field). An entry's optional field left UNSET is not a key of its
dict, as the modules that take the entries (node_pair, node_drain, csp_node, etcd_member_remove) expect."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Dict, List, Optional


class _Unset:
    """An optional field not given: absent from to_dict() (None is a value that is shown)."""

    def __repr__(self):
        return "UNSET"


UNSET = _Unset()


def _plain(value):
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


@dataclass
class _Record:
    def to_dict(self):
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self) if getattr(self, f.name) is not UNSET}


# ---------------------------------------------------------------------------------------------------
# The plan's entries, in the order Plan lists them

@dataclass
class CacheWrite(_Record):
    """Annotations a node did not cache yet (or cached wrong), by their short names."""

    name: str
    annotations: dict


@dataclass
class Repair(_Record):
    """A pair put right: `clear` a stale half, `complete` a half-written pair, `promote` a heir whose donor is gone,
    `unpair` a pair that cannot be completed, `swap` the donor a heir replaces. One of heir or donor names the other
    half (swap: the new donor, instead_of the old)."""

    name: str
    action: str
    heir: object = UNSET
    donor: object = UNSET
    instead_of: object = UNSET
    reason: object = UNSET


@dataclass
class Pair(_Record):
    """A new node of ours made the heir of an outdated node of its group."""

    heir: str
    donor: str
    group: str
    reason: str            # why this donor is chosen now


@dataclass
class LabelCopy(_Record):
    """The user labels (and taints) a heir takes from its donor (or a refill from the worker removed before it)."""

    heir: str
    donor: str
    labels: dict
    taints: list


@dataclass
class GroupImage(_Record):
    group: str
    image: str


@dataclass
class Creation(_Record):
    group: str
    count: int
    role: str


@dataclass
class CreateBlocked(_Record):
    """Why a group gets no (or fewer) heirs now."""

    group: str
    reason: str
    outdated: int          # the outdated nodes no joining instance will take


@dataclass
class GroupShort(_Record):
    """A group that holds fewer Ready nodes on the image than at the start: the upgrade is not done."""

    group: str
    outdated: int
    reason: str


@dataclass
class Drain(_Record):
    """A donor whose heir is Ready (or an obsolete node) to cordon and drain; what follows the drain rides along."""

    name: str
    reason: str            # donor or obsolete
    heir: Optional[str]
    heir_ready: Optional[bool]
    heir_ready_since: Optional[str]
    control_plane: bool
    node_ip: Optional[str]
    provider_id: Optional[str]
    group: Optional[str]


@dataclass
class WaitingForHeir(_Record):
    """A donor whose heir is not Ready (overdue past join_timeout), or a worker waiting for the control plane."""

    name: str
    since: Optional[str]
    overdue: bool
    heir: Optional[str]
    heir_ready: Optional[bool]
    heir_ready_since: Optional[str]
    reason: object = UNSET


@dataclass
class LoadBalancerHold(_Record):
    """A drained node out of the load balancers (LB_EXCLUDE_LABEL) for less than lb_drain_seconds: its etcd member and
    its instance stay until `until`, so connections the load balancers still hold to it can finish."""

    name: str
    since: Optional[str]
    until: Optional[str]


@dataclass
class EtcdRemoval(_Record):
    """A drained control-plane donor whose etcd member goes."""

    name: str
    node_ip: Optional[str]
    provider_id: Optional[str]
    group: Optional[str]


@dataclass
class NodeDeletion(_Record):
    """A leaving node whose instance and Node object go."""

    name: str
    provider_id: Optional[str]
    group: Optional[str]
    control_plane: bool


@dataclass
class InstanceWithoutNode(_Record):
    """An instance no Node holds: joining (with its deadline), leaving, or to delete (with the reason)."""

    provider_id: str
    node_name: Optional[str]
    group: str
    state: str
    image: Optional[str]
    created_at: Optional[str]
    deadline: object = UNSET
    reason: object = UNSET
    quota_exceeded: object = UNSET


@dataclass
class SurplusNode(_Record):
    """A node this upgrade created that no donor needs: marked obsolete above the group's start count, else kept."""

    name: str
    provider_id: Optional[str]
    group: str
    created: Optional[str]
    nodes: int
    start_count: Optional[int]
    action: str            # obsolete or kept
    reason: str


@dataclass
class RemovedFirst(_Record):
    """A worker marked for removal before its heir exists (max_unavailable)."""

    name: str
    group: str
    provider_id: Optional[str]


@dataclass
class RemovedFirstRecord(_Record):
    """The journal's record of a worker removed delete-first: what its refill takes from it."""

    group: str
    since: str
    labels: dict
    taints: list


@dataclass
class Refilled(_Record):
    """A node this upgrade created that replaces a worker removed delete-first, recorded as replaced."""

    name: str
    group: str
    created: str
    replaces: Optional[str]


@dataclass
class Problem(_Record):
    """What the planner found wrong on a node, and what it does about it: `left alone` (the node is invalid until the
    problem is resolved), `kept` (named, never removed). step: the destructive step whose cross-check refused it."""

    node: str
    step: Optional[str]
    code: str
    message: str
    action: str


@dataclass
class CacheCorrected(_Record):
    """A cached annotation the cloud contradicts: corrected (the cloud wins). Its key order is older than Problem's."""

    node: str
    step: Optional[str]
    code: str
    action: str
    message: str


@dataclass
class ForeignNode(_Record):
    """A node on the image that the journal does not prove this upgrade created: capacity, named and left alone."""

    name: str
    group: str
    provider_id: Optional[str]


@dataclass
class InvalidNode(_Record):
    """A node left alone, with the reason (out_of_scope: only because scaling_groups leaves its group out)."""

    name: str
    reason: str
    out_of_scope: bool


@dataclass
class Plan(_Record):
    """What the next pass does, in the order the executor takes it."""

    annotate: List[CacheWrite] = field(default_factory=list)
    repairs: List[Repair] = field(default_factory=list)
    pairs: List[Pair] = field(default_factory=list)
    obsolete: List[str] = field(default_factory=list)           # nodes marked obsolete now (surplus, delete-first)
    label_copies: List[LabelCopy] = field(default_factory=list)
    set_group_image: List[GroupImage] = field(default_factory=list)
    create: List[Creation] = field(default_factory=list)
    create_blocked: List[object] = field(default_factory=list)  # CreateBlocked, GroupShort
    drain: List[Drain] = field(default_factory=list)
    waiting_for_heir: List[WaitingForHeir] = field(default_factory=list)
    exclude_from_lb: List[str] = field(default_factory=list)     # leaving nodes to label out of the load balancers
    waiting_for_lb: List[LoadBalancerHold] = field(default_factory=list)
    etcd_remove: List[EtcdRemoval] = field(default_factory=list)
    delete_nodes: List[NodeDeletion] = field(default_factory=list)
    delete_instances: List[InstanceWithoutNode] = field(default_factory=list)
    uncordon: List[str] = field(default_factory=list)           # outdated nodes whose pair broke after our drain
    lb_release: List[str] = field(default_factory=list)         # outdated nodes whose pair broke before it, back in the LBs
    surplus: List[SurplusNode] = field(default_factory=list)
    delete_first: List[RemovedFirst] = field(default_factory=list)
    record_start_counts: Dict[str, int] = field(default_factory=dict)                 # journal: start_counts
    record_removed_first: Dict[str, RemovedFirstRecord] = field(default_factory=dict)  # journal: removed_first
    record_refills: Dict[str, str] = field(default_factory=dict)                       # journal: refills
    record_created: Dict[str, dict] = field(default_factory=dict)   # journal: instances_created (recovered)
    record_intents: Dict[str, dict] = field(default_factory=dict)   # journal: create_intents (what an intent found)
    refilled: List[Refilled] = field(default_factory=list)

    def joined(self, other):
        """This plan with `other`'s entries after its own (lists in order; records: other's win)."""
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, list):
                mine.extend(theirs)
            else:
                mine.update(theirs)
        return self


# ---------------------------------------------------------------------------------------------------
# Writes on Nodes

@dataclass
class NodePatch(_Record):
    """What to write on one Node, and what it must still say for the write to go ahead."""

    annotations: dict = field(default_factory=dict)   # full annotation key -> value (None: remove it)
    expect: dict = field(default_factory=dict)        # full annotation key -> the value observed (first wins)
    labels: object = UNSET                            # label -> value (None: remove it)
    taints: object = UNSET                            # the node's whole taint list after the copy


class NodePatches:
    """The writes on Nodes by node name, in the order their nodes were first written."""

    def __init__(self):
        self.by_name = {}

    def _entry(self, name):
        return self.by_name.setdefault(name, NodePatch())

    def annotate(self, name, annotations=None, expect=None):
        entry = self._entry(name)
        entry.annotations.update(annotations or {})
        for key, value in (expect or {}).items():
            entry.expect.setdefault(key, value)   # expectations are about the observed node: first wins

    def set_labels(self, name, labels):
        entry = self._entry(name)
        entry.labels = dict({} if entry.labels is UNSET else entry.labels, **labels)

    def set_taints(self, name, taints):
        self._entry(name).taints = taints

    def joined(self, other):
        """These writes with `other`'s after them, as if both had been made on one set of patches in that order."""
        for name, patch in other.by_name.items():
            self.annotate(name, patch.annotations, patch.expect)
            if patch.labels is not UNSET:
                self.set_labels(name, patch.labels)
            if patch.taints is not UNSET:
                self.set_taints(name, patch.taints)
        return self

    def to_dict(self):
        return {name: patch.to_dict() for name, patch in self.by_name.items()}


@dataclass
class Decided:
    """What one step of the planner decides: plan entries, writes on Nodes, the problems it names and the nodes on
    the image it cannot prove ours (foreign). plan_upgrade joins them in the order the steps ran."""

    plan: Plan = field(default_factory=Plan)
    patches: NodePatches = field(default_factory=NodePatches)
    problems: List[object] = field(default_factory=list)    # Problem, CacheCorrected
    foreign: List[ForeignNode] = field(default_factory=list)

    @classmethod
    def joined(cls, *steps):
        total = cls()
        for step in steps:
            total.plan.joined(step.plan)
            total.patches.joined(step.patches)
            total.problems.extend(step.problems)
            total.foreign.extend(step.foreign)
        return total


# ---------------------------------------------------------------------------------------------------
# The facts around the plan

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
    nodes: Dict[str, list]               # node group -> names (invalid: InvalidNode)
    joining: List[InstanceWithoutNode]   # instances without a Node within their join deadline
    leaving_instances: List[InstanceWithoutNode]   # instances without a Node the cloud is deleting
    scaling_groups: List[dict]           # one report per scaling group
    budget: Budget
    plan: Plan
    progress: Progress
    eta: Eta
    done: bool
    problems: List[object]               # Problem, CacheCorrected
    foreign: List[ForeignNode]
    stop: Optional[str]                  # why the run cannot go on by itself, or None
    etcd_health_due: bool                # a control-plane heir waits for an etcd read through another host
    node_patches: NodePatches
