"""Contract with the SDKs (issue 26 item 5): every instance state value the cloud SDKs installed here define maps to
one of the collection's states, read from the SDKs' own enum and model definitions, so a state that a new SDK version
adds fails here instead of passing as unknown. A value no step may act on (unknown on purpose, or a state in which
someone else holds the instance) must come with a named problem (model.STATE_PROBLEM) that stops every step on it."""

import botocore.session
from google.cloud import compute_v1

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import (
    CREATING, DELETING, RUNNING, STOPPED, UNKNOWN)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import aws, azure, gce


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


def test_every_gce_pair_that_maps_to_unknown_has_a_named_problem():
    actions = [a.name for a in compute_v1.ManagedInstance.CurrentAction]
    statuses = [s.name for s in compute_v1.ManagedInstance.InstanceStatus]
    unnamed = [(a, s) for a in actions for s in statuses
               if gce.instance_state(a, s) == UNKNOWN and not gce.state_problem(a, s)]
    assert unnamed == [], unnamed
    named = [(a, s) for a in actions for s in statuses if gce.state_problem(a, s)]
    assert named and all(gce.instance_state(a, s) == UNKNOWN for a, s in named), named
    assert "REPAIRING" in gce.state_problem("NONE", "REPAIRING") and "host error" in gce.state_problem("NONE", "REPAIRING")
    assert gce.state_problem("NONE", "RUNNING") is None
    assert "MELTING" in gce.state_problem("NONE", "MELTING")


def _model_enum(service, shape):
    return botocore.session.get_session().get_service_model(service).shape_for(shape).enum


# ASG lifecycle states whose instance is only decided by EC2's own state: EC2 lists the instance in all of them (it
# runs, is stopped, or is being prepared), so with no EC2 state they stay unknown.
AWS_DECIDED_BY_EC2 = {
    "Quarantined", "EnteringStandby", "Standby", "ReplacingRootVolume", "ReplacingRootVolume:Wait",
    "ReplacingRootVolume:Proceed", "RootVolumeReplaced", "Warmed:Pending", "Warmed:Pending:Wait",
    "Warmed:Pending:Proceed", "Warmed:Pending:Retained", "Warmed:Stopped", "Warmed:Running", "Warmed:Hibernated",
    "Terminating:Retained", "Warmed:Terminating:Retained"}
# Kept by the group's instance lifecycle policy after an abandoned termination: not leaving, a named problem.
AWS_RETAINED = {"Terminating:Retained", "Warmed:Terminating:Retained"}


def test_every_aws_lifecycle_state_and_ec2_state_of_the_sdk_maps_to_a_state():
    lifecycles = _model_enum("autoscaling", "LifecycleState")
    ec2_states = _model_enum("ec2", "InstanceStateName")
    assert "Terminating:Wait" in lifecycles and "running" in ec2_states
    undecided = [(lc, st) for lc in lifecycles for st in ec2_states if aws.instance_state(lc, st) == UNKNOWN]
    assert undecided == [], undecided
    without_ec2 = {lc for lc in lifecycles if aws.instance_state(lc, None) == UNKNOWN}
    assert without_ec2 == AWS_DECIDED_BY_EC2, without_ec2 ^ AWS_DECIDED_BY_EC2
    # Leaving the group, from service or from the warm pool, is deleting whatever EC2 says; a retained one is not.
    assert AWS_RETAINED <= set(lifecycles)
    for lifecycle in set(lifecycles) - AWS_RETAINED:
        if lifecycle.replace("Warmed:", "").startswith(("Terminating", "Terminated", "Detach")):
            assert {aws.instance_state(lifecycle, st) for st in ec2_states + [None]} == {DELETING}, lifecycle


def test_every_aws_lifecycle_state_someone_else_holds_is_a_named_problem():
    """Standby, quarantine, root volume replacement and the warm pool: the instance may run, but no step acts on it."""
    lifecycles = _model_enum("autoscaling", "LifecycleState")
    named = {lc for lc in lifecycles if aws.lifecycle_problem(lc)}
    held = {lc for lc in lifecycles if lc.split(":")[0] in ("Standby", "EnteringStandby", "Quarantined",
                                                            "ReplacingRootVolume", "RootVolumeReplaced")
            or (lc.startswith("Warmed:") and aws.instance_state(lc, "running") != DELETING) or lc in AWS_RETAINED}
    assert {"Standby", "Quarantined", "ReplacingRootVolume", "Warmed:Running"} <= held
    assert named == held, named ^ held
    # The lifecycle states decided by EC2 alone are all held ones: none passes unnamed.
    assert AWS_DECIDED_BY_EC2 <= named, AWS_DECIDED_BY_EC2 - named
    assert aws.lifecycle_problem("InService") is None and aws.lifecycle_problem("Pending:Wait") is None
    assert aws.lifecycle_problem("Terminating:Wait") is None
    assert aws.instance_state("Terminating:Retained", "running") == "running"
    assert aws.lifecycle_problem("Terminating:Retained").startswith(
        "AWS lifecycle state Terminating:Retained: the group's instance lifecycle policy retained it")
    assert aws.lifecycle_problem("Standby") == ("AWS lifecycle state Standby: it is in standby (taken out of service by "
                                                "a user: ExitStandby puts it back); nothing is done to it until it is "
                                                "InService again")


# azure-mgmt-compute defines no enum for a VM's provisioning or power state (both are strings), so the values are
# the ones Azure documents: learn.microsoft.com/azure/virtual-machines/states-billing (power states, and the
# instance view's ProvisioningState/<state>[/<errorCode>]); Migrating and Canceled from ARM's provisioning states.
AZURE_PROVISIONING_STATES = ("Creating", "Updating", "Migrating", "Succeeded", "Failed", "Canceled", "Deleting")
AZURE_POWER_STATES = ("creating", "starting", "running", "stopping", "stopped", "deallocating", "deallocated", "unknown")


def _azure_vm(provisioning, power):
    statuses = [{"code": "ProvisioningState/%s" % provisioning.lower()}]
    if power is not None:
        statuses.append({"code": "PowerState/%s" % power})
    return {"properties": {"provisioningState": provisioning, "instanceView": {"statuses": statuses}}}


def test_every_documented_azure_vm_state_maps_to_a_state_or_a_named_problem():
    unnamed, named = [], []
    for provisioning in AZURE_PROVISIONING_STATES:
        for power in AZURE_POWER_STATES + (None,):
            vm = _azure_vm(provisioning, power)
            if azure.vm_state(vm) == UNKNOWN:
                (named if azure.vm_state_problem(vm) else unnamed).append((provisioning, power))
            else:
                assert azure.vm_state_problem(vm) is None, (provisioning, power)
    assert unnamed == [], unnamed
    # A power state Azure cannot say is the one left to a named problem (the VM may or may not run).
    assert ("Succeeded", "unknown") in named and ("Updating", "unknown") in named, named
    assert "power state unknown" in azure.vm_state_problem(_azure_vm("Succeeded", "unknown"))
    # Spot checks of what the decisions mean.
    assert azure.vm_state(_azure_vm("Succeeded", "creating")) == CREATING
    assert azure.vm_state(_azure_vm("Updating", "running")) == RUNNING
    assert azure.vm_state(_azure_vm("Migrating", "running")) == RUNNING
    assert azure.vm_state(_azure_vm("Succeeded", "deallocated")) == STOPPED
    assert azure.vm_state(_azure_vm("Deleting", "running")) == DELETING
