# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The plain data the planning core and the clouds share: instance states, node roles, and the Group
and Instance values a cloud returns. No I/O and no imports from the collection, so the planner (core.py)
depends on nothing below it; providers/ import from here too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

# Instance states, the same words on every cloud.
CREATING = "creating"      # requested, booting, or read as "not found" shortly after creation
RUNNING = "running"        # the cloud says it runs
DELETING = "deleting"      # deletion requested or under way
STOPPED = "stopped"        # stopped or deallocated: exists but will not join
FAILED = "failed"          # the cloud gave up creating it
UNKNOWN = "unknown"
INSTANCE_STATES = (CREATING, RUNNING, DELETING, STOPPED, FAILED, UNKNOWN)

# Keys of Instance.extra that the planner reads, the same on every cloud.
# The cloud accepted the create, then refused the instance for quota or capacity (a GCE instance left CREATING with
# QUOTA_EXCEEDED, an Azure VM whose allocation failed): the cloud's words, naming the quota or the capacity.
REFUSED_FOR = "refused_for"
# A state the cloud reports that no step may act on (AWS Standby, a GCE VM in repair): what it is, and what to do.
STATE_PROBLEM = "state_problem"

ROLE_CONTROL_PLANE = "control-plane"
ROLE_WORKER = "worker"


@dataclass
class Group:
    """A scaling group: GCP MIG (zonal or regional), Azure VMSS or AWS ASG."""

    id: str                       # canonical ID, the value cached in the scaling-group-id annotation
    name: str                     # the short resource name
    image: str                    # image that new instances get now
    role: Optional[str] = None    # ROLE_* when the cloud tags say so; else the core derives it from nodes
    target_size: Optional[int] = None
    # What the cloud calls it, for the plan: "GCE managed instance group (regional)", "Azure VM scale set
    # (Flexible orchestration)", "AWS auto scaling group".
    kind: Optional[str] = None
    # The settings with which the cloud acts on the group by itself during a run ({name: value}, as
    # cloud_settings.py names them), read with the group; only those the cloud has for this kind of group.
    settings: dict = field(default_factory=dict)

    def to_dict(self):
        return asdict(self)


@dataclass
class Instance:
    """One instance of a scaling group, as the cloud sees it."""

    provider_id: str              # exactly what the kubelet writes into Node.spec.providerID
    node_name: str                # the Node name it registers as
    group_id: str
    image: str                    # image the instance was created from ("" when the cloud cannot say yet)
    state: str = UNKNOWN          # one of INSTANCE_STATES
    created_at: Optional[float] = None   # epoch seconds, for the join deadline
    name: str = ""                # the cloud's own instance name or ID
    extra: dict = field(default_factory=dict)

    def to_dict(self):
        return asdict(self)
