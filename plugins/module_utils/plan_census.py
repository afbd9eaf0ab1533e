# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Where every node stands as the planner works it out: one NodeState per Node, by name, by group, and the group
each node will be in once this plan's Kubernetes-side writes are applied (`final`). The planner's first steps make
it and move nodes in it (plan_nodes: locate, classify, screen; plan_pairs: repairs and pairs); plan_upgrade sets what
they settle (cp_busy, by_group, final); the later steps (leaving, surge, delete-first, surplus) read it and leave
alone (hold) the nodes a cross-check refuses (pure: no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import ROLE_CONTROL_PLANE, ROLE_WORKER
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.upgrade_plan import Problem
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.vocabulary import (
    DONOR, HEIR, INVALID, OBSOLETE, OUTDATED, PHASE_PAIRED, UP_TO_DATE, NodeInfo, same,
)


@dataclass
class NodeState:
    """One Node as the planner sees it."""

    info: NodeInfo
    group_id: Optional[str] = None     # canonical spelling (as the cloud lists it) when known
    image: Optional[str] = None
    cache: dict = field(default_factory=dict)   # annotations to write because they are not cached yet
    category: Optional[str] = None
    reason: str = ""
    partner: Optional[str] = None
    phase: str = ""
    phase_since: Optional[float] = None
    paired_now: bool = False            # a donor paired by this plan (observed as outdated until applied)
    out_of_scope: bool = False          # invalid only because scaling_groups leaves its group out
    held_for_now: bool = False          # invalid only because its heir is not Ready (it may be again)

    @property
    def name(self):
        return self.info.name

    def hold(self, problems):
        """Leave this node alone: invalid, with its problems named. Returns the problems as the result lists them."""
        self.category = INVALID
        self.reason = "; ".join(p["message"] for p in problems)
        self.held_for_now = all(p.get("code") == "heir_not_ready" for p in problems)
        self.cache = {}
        return [Problem(**p, action="left alone") for p in problems]

    def take_cache(self):
        """The annotations to cache on this node, handed to the write that takes them (once)."""
        cache, self.cache = self.cache, {}
        return cache


@dataclass
class Census:
    """Made by plan_nodes.take_census (states, by_name, valid; screen narrows valid); plan_upgrade sets the rest
    from the steps that settle it, in order: cp_busy and by_group before the pairing, final after it."""

    states: List[NodeState] = field(default_factory=list)       # every Node, by name
    by_name: Dict[str, NodeState] = field(default_factory=dict)
    valid: List[NodeState] = field(default_factory=list)        # those not left alone (invalid)
    by_group: Dict[str, List[NodeState]] = field(default_factory=dict)   # group key -> valid nodes
    final: Dict[str, str] = field(default_factory=dict)         # name -> its group once this plan's writes are applied
    cp_busy: bool = False                # a control-plane node is still to replace: no worker moves

    def group_role(self, group_index, gkey):
        """The role of a scaling group: as the cloud tags it, else control-plane when a node of it is one."""
        group = group_index.get(gkey)
        role = group.role if group is not None else None
        if role in (ROLE_CONTROL_PLANE, ROLE_WORKER):
            return role
        return ROLE_CONTROL_PLANE if any(s.info.control_plane for s in self.by_group.get(gkey, [])) else ROLE_WORKER

    def vacating(self, members, target):
        """Outdated nodes being removed delete-first (marked obsolete, still listed as nodes)."""
        return [s for s in members if self.final[s.name] == OBSOLETE and s.image and not same(s.image, target)]

    def available(self, members):
        """Nodes of a group that serve and will go on serving: Ready, schedulable, not leaving. A donor whose
        heir is Ready is leaving (its drain is next), one whose heir is not Ready yet still serves."""
        return sum(1 for s in members if self._serves_on(s))

    def _serves_on(self, s):
        category = self.final[s.name]
        if category not in (OUTDATED, UP_TO_DATE, HEIR, DONOR) or not s.info.ready or s.info.unschedulable:
            return False
        if category != DONOR:
            return True
        heir = self.by_name.get(s.partner or "")
        return heir is not None and not heir.info.ready and s.phase in ("", PHASE_PAIRED)
