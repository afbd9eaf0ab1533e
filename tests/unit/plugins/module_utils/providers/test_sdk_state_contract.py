"""Contract with the SDKs (issue 26 item 5): every instance state value the cloud SDKs installed here define maps to
one of the collection's states, read from the SDKs' own enum and model definitions, so a state that a new SDK version
adds fails here instead of passing as unknown."""

import botocore.session
from google.cloud import compute_v1

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import (
    CREATING, DELETING, RUNNING, STOPPED, UNKNOWN)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import aws, gce


def test_every_gce_current_action_and_instance_status_of_the_sdk_maps_to_a_state():
    actions = [a.name for a in compute_v1.ManagedInstance.CurrentAction]
    statuses = [s.name for s in compute_v1.ManagedInstance.InstanceStatus]
    assert len(actions) >= 12 and len(statuses) >= 13, (actions, statuses)
    # REPAIRING is unknown on purpose (gce.instance_state): an instance in repair is neither given up nor relied on.
    undecided = [(a, s) for a in actions for s in statuses if gce.instance_state(a, s) == UNKNOWN and s != "REPAIRING"]
    assert undecided == [], undecided
    # Spot checks of what the decisions mean.
    assert gce.instance_state("NONE", "PENDING") == CREATING
    assert gce.instance_state("NONE", "REPAIRING") == UNKNOWN
    assert gce.instance_state("UNDEFINED_CURRENT_ACTION", "RUNNING") == RUNNING
    assert gce.instance_state("NONE", "PENDING_STOP") == STOPPED and gce.instance_state("NONE", "DEPROVISIONING") == STOPPED
    # A status no SDK defines yet stays unknown: no step is taken on a state the collection cannot read.
    assert gce.instance_state("TELEPORTING", "RUNNING") == RUNNING and gce.instance_state("NONE", "MELTING") == UNKNOWN


def _model_enum(service, shape):
    return botocore.session.get_session().get_service_model(service).shape_for(shape).enum


# ASG lifecycle states whose instance is only decided by EC2's own state: EC2 lists the instance in all of them (it
# runs, is stopped, or is being prepared), so with no EC2 state they stay unknown.
AWS_DECIDED_BY_EC2 = {
    "Quarantined", "EnteringStandby", "Standby", "ReplacingRootVolume", "ReplacingRootVolume:Wait",
    "ReplacingRootVolume:Proceed", "RootVolumeReplaced", "Warmed:Pending", "Warmed:Pending:Wait",
    "Warmed:Pending:Proceed", "Warmed:Pending:Retained", "Warmed:Stopped", "Warmed:Running", "Warmed:Hibernated"}


def test_every_aws_lifecycle_state_and_ec2_state_of_the_sdk_maps_to_a_state():
    lifecycles = _model_enum("autoscaling", "LifecycleState")
    ec2_states = _model_enum("ec2", "InstanceStateName")
    assert "Terminating:Wait" in lifecycles and "running" in ec2_states
    undecided = [(lc, st) for lc in lifecycles for st in ec2_states if aws.instance_state(lc, st) == UNKNOWN]
    assert undecided == [], undecided
    without_ec2 = {lc for lc in lifecycles if aws.instance_state(lc, None) == UNKNOWN}
    assert without_ec2 == AWS_DECIDED_BY_EC2, without_ec2 ^ AWS_DECIDED_BY_EC2
    # Leaving the group, from service or from the warm pool, is deleting whatever EC2 says.
    for lifecycle in lifecycles:
        if lifecycle.replace("Warmed:", "").startswith(("Terminating", "Terminated", "Detach")):
            assert {aws.instance_state(lifecycle, st) for st in ec2_states + [None]} == {DELETING}, lifecycle
