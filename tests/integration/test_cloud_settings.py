"""The cloud settings with which a cloud acts on a scaling group by itself (cloud_settings.py), on the emulators
over real HTTP: each emulator does what the cloud does with its default (a node removed without a drain after a
replacement's steps), and the provider reads, neutralises and restores the setting, after which the emulator
leaves the group alone. In-process emulators, no cluster: seconds per test."""

import time

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import cloud_settings
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import aws, azure, base, gce
from sandbox.clouds import azure as azure_emu
from sandbox.clouds.aws import AwsEmulator
from sandbox.clouds.gce import GceEmulator

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

REDISTRIBUTION, AZ_REBALANCE, MIN_SIZE, UPGRADE_POLICY = (
    cloud_settings.GCE_REDISTRIBUTION, cloud_settings.AWS_AZ_REBALANCE, cloud_settings.AWS_MIN_SIZE,
    cloud_settings.AZURE_UPGRADE_POLICY)
OVERPROVISION, REPAIRS = cloud_settings.AZURE_OVERPROVISION, cloud_settings.AZURE_REPAIRS
ALARMS, SCHEDULED, UNHEALTHY = (
    cloud_settings.AWS_ALARM_NOTIFICATION, cloud_settings.AWS_SCHEDULED_ACTIONS, cloud_settings.AWS_REPLACE_UNHEALTHY)


def _eventually(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met within %ss" % timeout)


def _serve(emulator):
    """An in-process emulator, started for the module and stopped after it."""
    try:
        yield emulator.start()
    finally:
        emulator.stop()


def _zone(provider_id):
    return provider_id.rstrip("/").split("/")[-2]


def _replace_one(provider, group_id):
    """A replacement as the planner pairs it, with no notion of zones: a heir created (the cloud picks its zone),
    then a donor from another zone deleted. Returns (the heir, the donor deleted)."""
    before = {i.provider_id for i in provider.list_instances(group_id)}
    heir = provider.create_instance(group_id)
    heir_id = _eventually(lambda: next((i.provider_id for i in provider.list_instances(group_id)
                                        if i.provider_id not in before and i.provider_id), None))
    donor = next(p for p in sorted(before) if _zone(p) != _zone(heir_id) and
                 sum(1 for q in before if _zone(q) == _zone(p)) == 1)
    assert provider.delete_instance(donor) is True
    return heir_id, donor


# ---- AWS --------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def aws_emulator():
    yield from _serve(AwsEmulator())


@pytest.fixture
def aws_admin(aws_emulator):
    admin = aws_emulator.admin()
    admin.set_faults(rebalance_delay=0.2)
    yield admin
    admin.set_faults()


@pytest.fixture
def aws_provider(aws_admin):
    provider = aws.from_params(dict(aws_admin.provider_options()["aws"]))
    provider.retry_base_delay, provider.poll_interval, provider.create_timeout = 0.01, 0.05, 10
    return provider


def _asg(admin, name):
    return admin.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]


def test_aws_az_rebalance_terminates_an_undrained_instance_unless_the_run_suspends_it(aws_admin, aws_provider):
    image = aws_admin.create_image("rebalance-base")
    exposed = aws_admin.create_group("rebalance-on", "worker", 3, image)
    zones = sorted(i["AvailabilityZone"] for i in _asg(aws_admin, exposed)["Instances"])
    assert zones == ["us-east-1a", "us-east-1b", "us-east-1c"], "launched one per zone, as AWS balances"
    [group] = aws_provider.list_groups([exposed])
    assert group.settings == {AZ_REBALANCE: "active", ALARMS: "active", SCHEDULED: "active", UNHEALTHY: "active",
                              MIN_SIZE: 0}
    # The default: the replacement leaves the zones 2/1/0 and AWS terminates an instance it was never told to.
    heir, donor = _replace_one(aws_provider, exposed)
    [rebalance] = _eventually(lambda: [r for r in aws_admin.rebalances() if r["group"] == exposed])
    assert rebalance["terminated"] != donor.rsplit("/", 1)[1] and rebalance["zone"] == _zone(heir), rebalance
    assert rebalance["terminated"] not in {i["InstanceId"] for i in _asg(aws_admin, exposed)["Instances"]}

    # Suspended for the run: the same replacement leaves the group alone; putting it back now would rebalance.
    guarded = aws_admin.create_group("rebalance-off", "worker", 3, image)
    assert aws_provider.set_run_setting(guarded, AZ_REBALANCE, "suspended") is True
    assert aws_provider.set_run_setting(guarded, AZ_REBALANCE, "suspended") is False
    assert aws_provider.list_groups([guarded])[0].settings[AZ_REBALANCE] == "suspended"
    _replace_one(aws_provider, guarded)
    time.sleep(0.6)
    assert not [r for r in aws_admin.rebalances() if r["group"] == guarded]
    problem = aws_provider.restore_problem(guarded, AZ_REBALANCE, "active")
    assert problem and "more than one instance apart" in problem and "us-east-1" in problem, problem
    assert aws_provider.set_run_setting(guarded, AZ_REBALANCE, "active") is True
    assert _asg(aws_admin, guarded)["SuspendedProcesses"] == []


def test_aws_min_size_refuses_a_decrementing_terminate_until_lowered(aws_admin, aws_provider):
    image = aws_admin.create_image("minsize-base")
    name = aws_admin.create_group("minsize", "worker", 2, image, min_size=2)
    [group] = aws_provider.list_groups([name])
    assert group.settings[MIN_SIZE] == 2
    victim = aws_provider.list_instances(name)[0].provider_id
    with pytest.raises(base.ProviderError, match=r"desiredSize equals minSize \(2\)"):
        aws_provider.delete_instance(victim)
    assert _asg(aws_admin, name)["DesiredCapacity"] == 2, "the refused terminate changed nothing"
    assert aws_provider.set_run_setting(name, MIN_SIZE, 1) is True
    assert aws_provider.delete_instance(victim) is True
    problem = aws_provider.restore_problem(name, MIN_SIZE, 2)
    assert problem and "desired capacity is 1" in problem, problem
    assert aws_provider.restore_problem(name, MIN_SIZE, 1) is None


def test_aws_scaling_policies_and_scheduled_actions_resize_the_group_unless_the_run_suspends_them(aws_admin, aws_provider):
    image = aws_admin.create_image("own-scaling-base")
    exposed = aws_admin.create_group("own-scaling-on", "worker", 3, image)
    # The default: a policy's alarm and a scheduled action each terminate instances nobody drained.
    aws_admin.add_scaling_policy(exposed, -1, name="on-cpu-low")
    aws_admin.fire_alarm("on-cpu-low")
    assert _asg(aws_admin, exposed)["DesiredCapacity"] == 2
    aws_admin.add_scheduled_action(exposed, 1, delay=0.2, name="on-night")
    _eventually(lambda: _asg(aws_admin, exposed)["DesiredCapacity"] == 1)
    ran = [(r["cause"], r["desired"], r["skipped"]) for r in aws_admin.scalings() if r["group"] == exposed]
    assert ran == [("alarm of policy on-cpu-low", 2, None), ("scheduled action on-night", 1, None)], ran

    # Suspended for the run: neither changes the group; both processes are back as they were at the end.
    guarded = aws_admin.create_group("own-scaling-off", "worker", 3, image)
    [group] = aws_provider.list_groups([guarded])
    assert (group.settings[ALARMS], group.settings[SCHEDULED]) == ("active", "active")
    for name in (ALARMS, SCHEDULED):
        assert aws_provider.set_run_setting(guarded, name, "suspended") is True
        assert aws_provider.set_run_setting(guarded, name, "suspended") is False
    aws_admin.add_scaling_policy(guarded, -1, name="off-cpu-low")
    aws_admin.fire_alarm("off-cpu-low")
    aws_admin.add_scheduled_action(guarded, 1, delay=0.2, name="off-night")
    skipped = _eventually(lambda: [r for r in aws_admin.scalings() if r["group"] == guarded and "night" in r["cause"]])
    assert [r["skipped"] for r in aws_admin.scalings() if r["group"] == guarded] == [
        "AlarmNotification suspended", "ScheduledActions suspended"], skipped
    assert _asg(aws_admin, guarded)["DesiredCapacity"] == 3
    for name in (ALARMS, SCHEDULED):
        assert aws_provider.restore_problem(guarded, name, "active") is None
        assert aws_provider.set_run_setting(guarded, name, "active") is True
    assert [p["ProcessName"] for p in _asg(aws_admin, guarded)["SuspendedProcesses"]] == []
    [single] = aws_provider.list_groups([aws_admin.create_group("own-scaling-one-zone", "worker", 1, image,
                                                                zones=["us-east-1a"])])
    assert single.settings == {ALARMS: "active", SCHEDULED: "active", UNHEALTHY: "active", MIN_SIZE: 0}, \
        "no AZRebalance with one zone"


def test_aws_health_check_replacement_terminates_an_undrained_instance_unless_the_run_suspends_it(aws_admin, aws_provider):
    # A drained node can fail an ELB health check: AWS then terminates it and launches another the plan does not count.
    aws_admin.set_faults(rebalance_delay=0.2, health_replace_delay=0.2)
    image = aws_admin.create_image("unhealthy-base")
    exposed = aws_admin.create_group("unhealthy-on", "worker", 2, image)
    victim = _asg(aws_admin, exposed)["Instances"][0]["InstanceId"]
    aws_admin.mark_unhealthy(victim)
    [replaced] = _eventually(lambda: [r for r in aws_admin.health_replacements() if r["group"] == exposed])
    assert replaced["terminated"] == victim and replaced["skipped"] is None, replaced
    _eventually(lambda: victim not in {i["InstanceId"] for i in _asg(aws_admin, exposed)["Instances"]}
                and len(_asg(aws_admin, exposed)["Instances"]) == 2)

    guarded = aws_admin.create_group("unhealthy-off", "worker", 2, image)
    assert aws_provider.set_run_setting(guarded, UNHEALTHY, "suspended") is True
    kept = _asg(aws_admin, guarded)["Instances"][0]["InstanceId"]
    aws_admin.mark_unhealthy(kept)
    [skipped] = _eventually(lambda: [r for r in aws_admin.health_replacements() if r["group"] == guarded])
    assert skipped == dict(skipped, terminated=None, skipped="ReplaceUnhealthy suspended"), skipped
    assert kept in {i["InstanceId"] for i in _asg(aws_admin, guarded)["Instances"]}
    assert aws_provider.restore_problem(guarded, UNHEALTHY, "active") is None
    assert aws_provider.set_run_setting(guarded, UNHEALTHY, "active") is True


# ---- GCE --------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gce_emulator():
    yield from _serve(GceEmulator())


@pytest.fixture
def gce_admin(gce_emulator):
    admin = gce_emulator.admin()
    admin.set_faults(boot_delay=0.2, op_delay=0.02, redistribution_delay=0.2)
    yield admin
    admin.set_faults()


@pytest.fixture
def gce_provider(gce_admin):
    return gce.GceProvider(gce_admin.provider_options()["gcp"], retry_base_delay=0.02, request_timeout=10)


def test_gce_proactive_redistribution_deletes_an_undrained_vm_unless_the_run_sets_none(gce_admin, gce_provider):
    image = gce_admin.create_image("redistribute-base")
    exposed = gce_admin.create_group("redistribute-on", "worker", 3, image, region="us-central1")
    zonal = gce_admin.create_group("redistribute-zonal", "worker", 1, image)
    groups = {g.id: g for g in gce_provider.list_groups([exposed, zonal])}
    assert groups[exposed].settings == {REDISTRIBUTION: "PROACTIVE"} and groups[zonal].settings == {}
    # The default: the replacement leaves the zones 2/1/0 and GCE deletes a VM in the fullest zone, without a drain.
    heir, _donor = _replace_one(gce_provider, exposed)
    [moved] = _eventually(lambda: [r for r in gce_admin.state()["redistributions"] if r["group"] == exposed])
    assert moved["zone"] == _zone(heir), moved
    _eventually(lambda: moved["deleted"] not in {i.name for i in gce_provider.list_instances(exposed)})
    live = [i for i in gce_provider.list_instances(exposed) if i.state != base.DELETING]
    assert len(live) == 3, "GCE keeps the target size: a new VM replaces the one it deleted"

    # NONE for the run: the same replacement leaves the group alone; PROACTIVE back now would delete a VM.
    guarded = gce_admin.create_group("redistribute-off", "worker", 3, image, region="us-central1")
    assert gce_provider.set_run_setting(guarded, REDISTRIBUTION, "NONE") is True
    assert gce_provider.set_run_setting(guarded, REDISTRIBUTION, "NONE") is False
    assert gce_provider.list_groups([guarded])[0].settings == {REDISTRIBUTION: "NONE"}
    _replace_one(gce_provider, guarded)
    time.sleep(0.6)
    assert not [r for r in gce_admin.state()["redistributions"] if r["group"] == guarded]
    problem = _eventually(lambda: gce_provider.restore_problem(guarded, REDISTRIBUTION, "PROACTIVE"))
    assert "more than one instance apart" in problem and "us-central1-" in problem, problem
    assert gce_provider.set_run_setting(guarded, REDISTRIBUTION, "PROACTIVE") is True
    with pytest.raises(base.ProviderError, match="no setting"):
        gce_provider.set_run_setting(zonal, REDISTRIBUTION, "NONE")


def test_gce_autoscaler_resizes_the_group_undrained_unless_the_run_turns_it_off(gce_admin, gce_provider):
    AUTOSCALER = cloud_settings.GCE_AUTOSCALER
    gce_admin.set_faults(boot_delay=0.2, op_delay=0.02, redistribution_delay=0.2, autoscaling_delay=0.2)
    image = gce_admin.create_image("autoscaled-base")
    # The default of an autoscaler: the run's surge (one more VM) is scaled in again, the newest VM deleted undrained.
    exposed = gce_admin.create_group("autoscaled-on", "worker", 2, image)
    gce_admin.create_autoscaler(exposed, recommended=2)
    assert gce_provider.list_groups([exposed])[0].settings == {AUTOSCALER: "ON"}
    heir = gce_provider.create_instance(exposed)
    [scaled] = _eventually(lambda: [r for r in gce_admin.state()["autoscalings"] if r["group"] == exposed])
    assert scaled["size"] == 2 and [heir.provider_id.rsplit("/", 1)[1]] == scaled["deleted"], (scaled, heir)

    # OFF for the run (also for ONLY_SCALE_OUT, a regional group here); back as it was at the end.
    guarded = gce_admin.create_group("autoscaled-off", "worker", 3, image, region="us-central1")
    gce_admin.create_autoscaler(guarded, recommended=3, mode="ONLY_SCALE_OUT")
    assert gce_provider.list_groups([guarded])[0].settings == {REDISTRIBUTION: "PROACTIVE", AUTOSCALER: "ONLY_SCALE_OUT"}
    assert gce_provider.set_run_setting(guarded, AUTOSCALER, "OFF") is True
    assert gce_provider.set_run_setting(guarded, AUTOSCALER, "OFF") is False
    assert gce_provider.list_groups([guarded])[0].settings[AUTOSCALER] == "OFF"
    victim = gce_provider.list_instances(guarded)[0].provider_id
    assert gce_provider.delete_instance(victim) is True   # delete-first: one below what the autoscaler recommends
    time.sleep(0.6)
    assert not [r for r in gce_admin.state()["autoscalings"] if r["group"] == guarded]
    assert gce_provider.restore_problem(guarded, AUTOSCALER, "ONLY_SCALE_OUT") is None
    assert gce_provider.set_run_setting(guarded, AUTOSCALER, "ONLY_SCALE_OUT") is True
    [scaled] = _eventually(lambda: [r for r in gce_admin.state()["autoscalings"] if r["group"] == guarded])
    assert scaled["size"] == 3 and scaled["deleted"] == [], "back on, it grows the group again (out only)"


def test_gce_autohealing_is_left_on_it_recreates_a_vm_in_place_which_the_provider_reads_as_not_running(
        gce_admin, gce_provider):
    # By decision (docs/cloud-settings.md): autohealing adds no instance and takes none away for good, so a run leaves
    # it on; what the provider must get right is the VM while it is recreated.
    gce_admin.set_faults(boot_delay=0.3, op_delay=0.02, autohealing_delay=0.2)
    old, new = gce_admin.create_image("autoheal-old"), gce_admin.create_image("autoheal-new")
    group = gce_admin.create_group("autoheal", "worker", 2, old, autohealing=True)
    judged = cloud_settings.judge(gce_provider.list_groups([group]), {}, lambda g: 0)
    assert judged == dict(changes=[], again=[], refusals=[], unread=[])
    _eventually(lambda: len([i for i in gce_provider.list_instances(group) if i.state == base.RUNNING]) == 2)
    gce_provider.set_group_image(group, new)
    victim = gce_provider.list_instances(group)[0]
    gce_admin.fail_health(group, victim.name)
    recreating = _eventually(lambda: next((i for i in gce_provider.list_instances(group)
                                           if i.name == victim.name and i.state != base.RUNNING), None))
    assert recreating.state == base.CREATING, recreating
    [healed] = [r for r in gce_admin.state()["autoheals"] if r["group"] == group]
    assert healed["instance"] == victim.name
    again = _eventually(lambda: next((i for i in gce_provider.list_instances(group)
                                      if i.name == victim.name and i.state == base.RUNNING), None))
    assert again.provider_id == victim.provider_id and new.rsplit("/", 1)[1] in again.image, again
    # A new VM under the same name: its creation time is read again, not kept from the VM it replaced.
    assert again.created_at > victim.created_at, (again.created_at, victim.created_at)
    assert len(gce_provider.list_instances(group)) == 2, "recreated in place: the group's size is unchanged"


# ---- Azure ------------------------------------------------------------------------------------------------------
class _Hooks:
    def __init__(self):
        self.gone = []

    def created(self, *args, **kwargs):
        pass

    def deleted(self, provider_id):
        self.gone.append(provider_id)


@pytest.fixture(scope="module")
def azure_emulator(tmp_path_factory):
    yield from _serve(azure_emu.AzureEmulator(str(tmp_path_factory.mktemp("azure")), hooks=_Hooks(), boot_delay=0.2,
                                              delete_delay=0.2))


@pytest.fixture
def azure_admin(azure_emulator):
    admin = azure_emu.Admin(azure_emulator.info())
    admin.set_faults(upgrade_delay=0.2)   # the Automatic policy's reimage 0.2 s after the model changed
    yield admin
    admin.set_faults()


@pytest.fixture
def azure_provider(azure_admin):
    options = {name: spec.get("default") for name, spec in azure.ARG_SPEC.items()}
    options.update(azure_admin.provider_options()["azure"])
    return azure.from_params(options)


def _running(provider, group_id, size):
    return _eventually(lambda: len([i for i in provider.list_instances(group_id) if i.state == base.RUNNING]) == size)


def test_azure_automatic_upgrade_policy_reimages_every_vm_unless_the_run_sets_manual(
        azure_emulator, azure_admin, azure_provider):
    old, new = azure_admin.create_image("policy-old"), azure_admin.create_image("policy-new")
    exposed = azure_admin.create_group("policy-auto", "worker", 2, old, upgrade_policy="Automatic")
    _running(azure_provider, exposed, 2)
    assert azure_provider.list_groups([exposed])[0].settings == {UPGRADE_POLICY: "Automatic", OVERPROVISION: "false",
                                                                 REPAIRS: "false"}
    # The default of such a set: pointing it at the image reimages both VMs at once, their Nodes gone undrained.
    assert azure_provider.set_group_image(exposed, new) is True
    vms = [i.provider_id for i in azure_provider.list_instances(exposed)]
    _eventually(lambda: set(vms) <= set(azure_emulator.hooks.gone))
    reimaged = next(s for s in azure_admin.state()["scale_sets"] if s["name"] == "policy-auto")["reimaged"]
    assert len(reimaged) == 2 and reimaged[0]["at"] == reimaged[1]["at"], reimaged

    # Manual for the run: the image changes for new VMs only; Automatic back now would reimage the old ones.
    guarded = azure_admin.create_group("policy-guarded", "worker", 2, old, upgrade_policy="Automatic")
    _running(azure_provider, guarded, 2)
    assert azure_provider.set_run_setting(guarded, UPGRADE_POLICY, "Manual") is True
    assert azure_provider.set_run_setting(guarded, UPGRADE_POLICY, "Manual") is False
    assert azure_provider.set_group_image(guarded, new) is True
    time.sleep(0.6)
    state = next(s for s in azure_admin.state()["scale_sets"] if s["name"] == "policy-guarded")
    assert state["reimaged"] == [] and state["properties"]["upgradePolicy"] == {"mode": "Manual"}
    problem = azure_provider.restore_problem(guarded, UPGRADE_POLICY, "Automatic")
    assert problem and problem.startswith("2 VM(s) are not on the scale set's latest model"), problem
    assert azure_provider.restore_problem(exposed, UPGRADE_POLICY, "Automatic") is None   # all on the latest model
    rolling = azure_admin.create_group("policy-rolling", "worker", 1, old, upgrade_policy="Rolling")
    assert azure_provider.list_groups([rolling])[0].settings[UPGRADE_POLICY] == "Rolling"


def test_azure_autoscale_setting_resizes_the_scale_set_undrained_unless_the_run_disables_it(
        azure_emulator, azure_admin, azure_provider):
    AUTOSCALE = cloud_settings.AZURE_AUTOSCALE
    azure_admin.set_faults(upgrade_delay=0.2, autoscale_delay=0.2)
    image = azure_admin.create_image("autoscale-base")
    # The default of an enabled autoscale setting: the run's surge is scaled in again, the newest VM deleted undrained.
    exposed = azure_admin.create_group("autoscale-on", "worker", 2, image)
    _running(azure_provider, exposed, 2)
    azure_admin.create_autoscale(exposed, recommended=2)
    assert azure_provider.list_groups([exposed])[0].settings[AUTOSCALE] == "true"
    heir = azure_provider.create_instance(exposed)
    _eventually(lambda: heir.provider_id in azure_emulator.hooks.gone)
    [scaled] = next(s for s in azure_admin.state()["scale_sets"] if s["name"] == "autoscale-on")["autoscaled"]
    assert scaled["capacity"] == 2 and heir.provider_id.endswith("/" + scaled["deleted"][0]), (scaled, heir)

    # Disabled for the run: a delete-first leaves the set one below what the setting recommends, and it stays so.
    guarded = azure_admin.create_group("autoscale-off", "worker", 2, image)
    _running(azure_provider, guarded, 2)
    azure_admin.create_autoscale(guarded, recommended=2)
    assert azure_provider.set_run_setting(guarded, AUTOSCALE, "false") is True
    assert azure_provider.set_run_setting(guarded, AUTOSCALE, "false") is False
    assert azure_provider.list_groups([guarded])[0].settings[AUTOSCALE] == "false"
    assert azure_provider.delete_instance(azure_provider.list_instances(guarded)[0].provider_id) is True
    time.sleep(0.6)
    state = next(s for s in azure_admin.state()["scale_sets"] if s["name"] == "autoscale-off")
    assert state["autoscaled"] == [] and len([v for v in state["vms"] if v["properties"]["provisioningState"] != "Deleting"]) == 1
    assert azure_provider.restore_problem(guarded, AUTOSCALE, "true") is None
    assert azure_provider.set_run_setting(guarded, AUTOSCALE, "true") is True
    _running(azure_provider, guarded, 2)   # back on, it fills the set again
    # A scale set no autoscale setting targets has none to change; one whose settings cannot be read is refused.
    plain = azure_admin.create_group("autoscale-none", "worker", 1, image)
    assert AUTOSCALE not in azure_provider.list_groups([plain])[0].settings
    with pytest.raises(base.ProviderError, match="no setting"):
        azure_provider.set_run_setting(plain, AUTOSCALE, "false")
    azure_admin.set_faults(deny=["list_autoscale"])
    [unread] = azure_provider.list_groups([guarded])
    assert unread.settings[AUTOSCALE] == cloud_settings.UNREADABLE
    [refusal] = cloud_settings.judge([unread], {}, lambda g: 0)["refusals"]
    assert "Microsoft.Insights/autoscalesettings/read" in refusal and cloud_settings.ALLOW_UNREADABLE in refusal
    # With rolling_upgrade_allow_unreadable_autoscale: named, not refused.
    judged = cloud_settings.judge([unread], {}, lambda g: 0, allow_unreadable=True)
    assert judged["refusals"] == [] and [(u["group"], u["name"]) for u in judged["unread"]] == [(unread.id, AUTOSCALE)]


def test_azure_overprovisioning_deletes_an_extra_vm_that_ran_unless_the_run_turns_it_off(
        azure_emulator, azure_admin, azure_provider):
    azure_admin.set_faults(overprovision_delay=0.3)
    image = azure_admin.create_image("overprovision-base")

    def extras(name):
        return next(s for s in azure_admin.state()["scale_sets"] if s["name"] == name)["overprovisioned"]

    # Created without the field, as ARM reads it: on. Each scale-out (the creation too) runs a VM more than asked,
    # then deletes it undrained.
    exposed = azure_admin.create_group("overprovision-on", "worker", 1, image, overprovision=None)
    guarded = azure_admin.create_group("overprovision-off", "worker", 1, image, overprovision=None)
    for name, group in (("overprovision-on", exposed), ("overprovision-off", guarded)):
        _eventually(lambda name=name: len(extras(name)) == 1)
        _running(azure_provider, group, 1)
        assert azure_provider.list_groups([group])[0].settings[OVERPROVISION] == "true"
    azure_provider.create_instance(exposed)
    extra = _eventually(lambda: extras("overprovision-on")[1:])[0]
    _eventually(lambda: any(p.endswith("/virtualMachines/%s" % extra["vm"]) for p in azure_emulator.hooks.gone))
    _running(azure_provider, exposed, 2)

    assert azure_provider.set_run_setting(guarded, OVERPROVISION, "false") is True
    assert azure_provider.set_run_setting(guarded, OVERPROVISION, "false") is False
    gone = len(azure_emulator.hooks.gone)
    azure_provider.create_instance(guarded)
    _running(azure_provider, guarded, 2)
    time.sleep(0.6)
    assert len(extras("overprovision-off")) == 1, "only the creation's extra"
    assert not [p for p in azure_emulator.hooks.gone[gone:] if "/overprovision-off/" in p]
    assert azure_provider.restore_problem(guarded, OVERPROVISION, "true") is None
    assert azure_provider.set_run_setting(guarded, OVERPROVISION, "true") is True
    flexible = azure_admin.create_group("overprovision-flex", "worker", 0, image, orchestration="Flexible")
    assert OVERPROVISION not in azure_provider.list_groups([flexible])[0].settings, "Flexible sets have none"


def test_azure_automatic_repairs_replace_an_unhealthy_vm_unless_the_run_turns_them_off(
        azure_emulator, azure_admin, azure_provider):
    azure_admin.set_faults(repair_delay=0.2)
    image = azure_admin.create_image("repairs-base")
    exposed = azure_admin.create_group("repairs-on", "worker", 1, image, automatic_repairs=True)
    [vm] = _eventually(lambda: [i for i in azure_provider.list_instances(exposed) if i.state == base.RUNNING])
    assert azure_provider.list_groups([exposed])[0].settings[REPAIRS] == "true"
    azure_admin.fail_health(exposed, vm.provider_id.rsplit("/", 1)[1])
    _eventually(lambda: vm.provider_id in azure_emulator.hooks.gone)
    [repaired] = next(s for s in azure_admin.state()["scale_sets"] if s["name"] == "repairs-on")["repaired"]
    assert repaired["replacement"] and vm.provider_id.endswith("/" + repaired["vm"]), repaired

    guarded = azure_admin.create_group("repairs-off", "worker", 1, image, automatic_repairs=True)
    [kept] = _eventually(lambda: [i for i in azure_provider.list_instances(guarded) if i.state == base.RUNNING])
    assert azure_provider.set_run_setting(guarded, REPAIRS, "false") is True
    azure_admin.fail_health(guarded, kept.provider_id.rsplit("/", 1)[1])
    time.sleep(0.6)
    assert next(s for s in azure_admin.state()["scale_sets"] if s["name"] == "repairs-off")["repaired"] == []
    assert kept.provider_id not in azure_emulator.hooks.gone
    assert azure_provider.set_run_setting(guarded, REPAIRS, "true") is True
    assert azure_provider.list_groups([guarded])[0].settings[REPAIRS] == "true"
