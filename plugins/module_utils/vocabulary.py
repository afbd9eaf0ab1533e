# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The planner's vocabulary: the annotation keys, phases and node groups it speaks in, the options it takes, what it
needs of a Node, and the small pure helpers every part of it shares (images compared, labels copied, surge and
unavailable budgets reckoned, times read and written). core.py re-exports every name."""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Dict, List, Optional

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import validate


DEFAULT_PREFIX = validate.DEFAULT_PREFIX
REFERENCE_PREFIX = "constellation.edgeless.systems"
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
# The zone a cloud puts a Node in (set by the cloud provider or the kubelet), used to keep a group's zones even.
ZONE_LABEL = "topology.kubernetes.io/zone"
DEFAULT_JOIN_TIMEOUT = 30 * 60
# Seconds after a recorded create intent within which the cloud's new instance of that group is taken as the one
# the create made. Clouds stamp an instance within seconds of the create call; someone else's scale-up a minute
# later is not taken. An instance stamped later is left alone (capacity), never taken: the safe side.
INTENT_WINDOW = 45
# Kubernetes' own label that takes a node out of the cloud load balancers' backends (the service controller acts on it).
LB_EXCLUDE_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"

# Donor phases, in order. The role records each one (node_pair `phases`) after the step succeeded.
PHASE_PAIRED = "paired"
PHASE_DRAINING = "draining"
PHASE_DRAINED = "drained"
PHASE_ETCD_REMOVED = "etcd-removed"
PHASE_DELETING = "deleting"   # read only: see KNOWN_DONOR_PHASES
DONOR_PHASES = (PHASE_PAIRED, PHASE_DRAINING, PHASE_DRAINED, PHASE_ETCD_REMOVED)
# Every phase a donor may carry. `deleting` was defined and accepted by earlier releases but never written
# (deleting the instance and the Node are idempotent steps that need no record); a node an older run left
# with it still resumes as before: it never serves again and goes straight to deletion.
KNOWN_DONOR_PHASES = DONOR_PHASES + (PHASE_DELETING,)
# Heir phases.
PHASE_HEIR = "heir"
PHASE_REPLACED = "replaced"
# Phases after which a node must not serve again (etcd member gone, or deletion under way).
_POINT_OF_NO_RETURN = (PHASE_ETCD_REMOVED, PHASE_DELETING)

# Node groups; every node is in exactly one.
OUTDATED = "outdated"
UP_TO_DATE = "up_to_date"
DONOR = "donor"
HEIR = "heir"
NEW = "new"
OBSOLETE = "obsolete"
INVALID = "invalid"
NODE_GROUPS = (OUTDATED, UP_TO_DATE, DONOR, HEIR, NEW, OBSOLETE, INVALID)

_RESERVED_DOMAINS = ("kubernetes.io", "k8s.io")
_SURGE = re.compile(r"^\s*(\d+)\s*(%?)\s*$")


class PlanInputError(ValueError):
    """An option the planner cannot work with (the message names it)."""


class AnnotationKeys:
    """Full annotation keys under one prefix."""

    NAMES = ("scaling-group-id", "node-image", "heir", "donor", "obsolete", "phase", "phase-since", "phase-history",
             "started-at")

    def __init__(self, prefix=DEFAULT_PREFIX):
        # One rule for every module (validate.annotation_prefix): no default in place of an empty prefix.
        problem = validate.annotation_prefix("annotation_prefix", prefix)
        if problem:
            raise PlanInputError(problem)
        self.prefix = prefix
        self.group = prefix + "/scaling-group-id"
        self.image = prefix + "/node-image"
        self.heir = prefix + "/heir"
        self.donor = prefix + "/donor"
        self.obsolete = prefix + "/obsolete"
        self.phase = prefix + "/phase"
        self.phase_since = prefix + "/phase-since"
        self.phase_history = prefix + "/phase-history"
        self.started_at = prefix + "/started-at"
        # When a leaving node got the exclude-from-external-load-balancers label (its hold before deletion counts from it).
        self.lb_excluded_since = prefix + "/lb-excluded-since"
        # The PreferNoSchedule taint on nodes this run will replace: pods evicted elsewhere avoid them (moved once).
        self.to_be_replaced = prefix + "/to-be-replaced"

    def short(self, key):
        return key[len(self.prefix) + 1:] if key.startswith(self.prefix + "/") else key


# ---------------------------------------------------------------------------------------------------
# Small pure helpers

def same(a, b):
    """Case-insensitive equality for images and scaling-group IDs."""
    return (a or "").strip().lower() == (b or "").strip().lower()


def is_reserved_label(key):
    """Labels that belong to Kubernetes and are never copied from donor to heir: exactly those whose
    prefix (the part before `/`) is kubernetes.io or k8s.io, or a subdomain of one of them
    (`node.kubernetes.io/x`, `foo.k8s.io/y`). `mykubernetes.io/x`, `notk8s.io/team`, `example.com/kubernetes.io`
    and keys without a prefix are user labels."""
    if "/" not in (key or ""):
        return False
    prefix = key.split("/", 1)[0].lower()
    return any(prefix == domain or prefix.endswith("." + domain) for domain in _RESERVED_DOMAINS)


def copyable_labels(labels, exclude=()):
    excluded = set(exclude or ())
    return {k: v for k, v in (labels or {}).items() if not is_reserved_label(k) and k not in excluded}


def copyable_taints(taints, exclude=()):
    excluded = set(exclude or ())
    return [t for t in (taints or []) if not is_reserved_label(t.get("key", "")) and t.get("key") not in excluded]


def labels_to_copy(donor_labels, heir_labels, exclude=()):
    """Donor labels the heir lacks or holds with another value (labels only the heir has stay)."""
    heir_labels = heir_labels or {}
    return {k: v for k, v in sorted(copyable_labels(donor_labels, exclude).items()) if heir_labels.get(k) != v}


def taints_to_copy(donor_taints, heir_taints, exclude=()):
    """Donor taints (by key and effect) the heir lacks or holds with another value."""
    have = {(t.get("key"), t.get("effect")): t.get("value") for t in (heir_taints or [])}
    missing = []
    for taint in copyable_taints(donor_taints, exclude):
        ident = (taint.get("key"), taint.get("effect"))
        if ident not in have or have[ident] != taint.get("value"):
            missing.append({k: taint[k] for k in ("key", "value", "effect") if taint.get(k) is not None})
    return missing


def surge_limit(max_surge, group_size):
    """max_surge as an integer, or `N%` of the group (rounded up, at least 1 when N > 0)."""
    if isinstance(max_surge, bool):
        raise PlanInputError("max_surge must be an integer or a percentage like '25%', got a boolean")
    if isinstance(max_surge, int):
        number, percent = max_surge, False
    else:
        match = _SURGE.match(str(max_surge))
        if not match:
            raise PlanInputError("max_surge must be an integer or a percentage like '25%%', got %r" % (max_surge,))
        number, percent = int(match.group(1)), bool(match.group(2))
    if number < 0:
        raise PlanInputError("max_surge must not be negative, got %r" % (max_surge,))
    if not percent:
        return number
    if number == 0:
        return 0
    return max(1, int(math.ceil(group_size * number / 100.0)))


def unavailable_limit(max_unavailable, group_size):
    """max_unavailable as an integer, or `N%` of the group rounded down (at least 1 when N > 0): how many nodes
    a worker group may lack while they are replaced delete-first. Rounded down, as Kubernetes rounds
    maxUnavailable, so a percentage never takes away more than it says, except that 1% of a small group is 1."""
    if isinstance(max_unavailable, bool):
        raise PlanInputError("max_unavailable must be an integer or a percentage like '25%', got a boolean")
    if isinstance(max_unavailable, int):
        number, percent = max_unavailable, False
    else:
        match = _SURGE.match(str(max_unavailable if max_unavailable is not None else 0))
        if not match:
            raise PlanInputError("max_unavailable must be an integer or a percentage like '25%%', got %r"
                                 % (max_unavailable,))
        number, percent = int(match.group(1)), bool(match.group(2))
    if number < 0:
        raise PlanInputError("max_unavailable must not be negative, got %r" % (max_unavailable,))
    if not percent or number == 0:
        return number
    return max(1, int(math.floor(group_size * number / 100.0)))


def format_time(epoch):
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text):
    """Epoch seconds from an RFC 3339 timestamp, or None when absent or unreadable."""
    if not text:
        return None
    if isinstance(text, str):
        return _parse_time_text(text)
    return _parse_time(text)


# Every plan reads each Node's moments (NodeInfo.from_k8s, five times a plan), and they seldom change: strptime took
# 3.7 of the 8.3 s of planning in a 3 + 100 run (bench/README.md, run E1).
@functools.lru_cache(maxsize=8192)
def _parse_time_text(text):
    return _parse_time(text)


def _parse_time(text):
    try:
        value = datetime.strptime(text.strip(), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        try:
            value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()


def default_normalize(provider_id):
    return (provider_id or "").strip().lower()


# ---------------------------------------------------------------------------------------------------
# Inputs

@dataclass
class NodeInfo:
    """What the planner needs of one Node, taken from its API object."""

    name: str
    provider_id: str = ""
    labels: Dict[str, str] = field(default_factory=dict)
    annotations: Dict[str, str] = field(default_factory=dict)
    taints: List[dict] = field(default_factory=list)
    ready: bool = False
    unschedulable: bool = False
    internal_ips: List[str] = field(default_factory=list)
    resource_version: str = ""
    ready_since: Optional[float] = None   # when the Ready condition last turned True (epoch seconds)

    @property
    def control_plane(self):
        return CONTROL_PLANE_LABEL in self.labels

    @classmethod
    def from_k8s(cls, node):
        """From a Node as the API returns it (plain JSON dict)."""
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        status = node.get("status") or {}
        ready_condition = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
        ready = ready_condition.get("status") == "True"
        ips = [a.get("address") for a in status.get("addresses") or [] if a.get("type") == "InternalIP" and a.get("address")]
        return cls(
            name=meta.get("name", ""),
            provider_id=spec.get("providerID") or "",
            labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            taints=list(spec.get("taints") or []),
            ready=ready,
            unschedulable=bool(spec.get("unschedulable")),
            internal_ips=ips,
            resource_version=meta.get("resourceVersion", ""),
            ready_since=parse_time(ready_condition.get("lastTransitionTime")) if ready else None,
        )


class PerNode:
    """What `make` gives for each Node of a read, made once per Node object: the Node cache hands out the same copy of
    a Node, which nobody changes, until the Node changes (node_cache.NodeStore.snapshot), so a pass makes it only for
    the Nodes that changed since the last read. A Node given as another object (changed, or from a source that copies
    every read) is made again; those of Nodes no longer read are dropped."""

    def __init__(self, make):
        self.make = make
        self.held = {}   # Node name -> (the Node object, what make gave for it)

    def of(self, nodes):
        kept, made = {}, []
        for node in nodes:
            name = (node.get("metadata") or {}).get("name")
            held = self.held.get(name)
            if held is None or held[0] is not node:
                held = (node, self.make(node))
            kept[name] = held
            made.append(held[1])
        self.held = kept
        return made


@dataclass
class Options:
    image: str
    annotation_prefix: str = DEFAULT_PREFIX
    max_surge: object = 1
    max_surge_total: Optional[int] = None
    join_timeout: float = DEFAULT_JOIN_TIMEOUT
    exclude_labels: tuple = ()
    copy_taints: bool = False
    eta_min_samples: int = 2
    heir_ready_seconds: float = 0   # how long a heir must have been Ready before its donor is drained
    max_unavailable: object = 0     # worker nodes a group may lack while replaced delete-first (see _DeleteFirst)
    no_surge: bool = False          # the quota leaves no room for one more instance: no heir beyond the start count
    lb_drain_seconds: float = 0     # how long a leaving node is out of the load balancers before it goes (0: no label)
    canary: bool = False            # a worker group's first replacement goes alone (plan_surge.canary_hold)
    canary_soak_seconds: float = 0  # ... and its heir Ready that long before the group goes to its full surge

    def taints_not_copied(self):
        """Taint keys never copied to a heir: the excluded ones and this collection's own taint on nodes to be replaced."""
        return tuple(self.exclude_labels or ()) + (AnnotationKeys(self.annotation_prefix).to_be_replaced,)

    def validate(self):
        if not isinstance(self.image, str) or not self.image.strip() or any(c.isspace() for c in self.image.strip()):
            raise PlanInputError("image must be a non-empty image reference without spaces, got %r" % (self.image,))
        surge_limit(self.max_surge, 1)
        # The rules of the modules and the role (validate.py): 0 would never replace a node, 10**20 is no count.
        for problem in validate.check(dict(max_surge=self.max_surge, max_surge_total=self.max_surge_total,
                                           max_unavailable=self.max_unavailable), validate.SURGE_RULES):
            raise PlanInputError(problem)
        unavailable_limit(self.max_unavailable, 1)
        if self.join_timeout is None or float(self.join_timeout) <= 0:
            raise PlanInputError("join_timeout must be a positive number of seconds, got %r" % (self.join_timeout,))
        if isinstance(self.lb_drain_seconds, bool) or not isinstance(self.lb_drain_seconds, (int, float)) or self.lb_drain_seconds < 0:
            raise PlanInputError("lb_drain_seconds must be a number of seconds, 0 or more, got %r" % (self.lb_drain_seconds,))
        return AnnotationKeys(self.annotation_prefix)
