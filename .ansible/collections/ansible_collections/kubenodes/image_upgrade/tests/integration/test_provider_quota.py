"""instance_headroom of each provider through the official SDK, over real HTTP, against its emulator: the quota
knob (a cap on instances that creates beyond are refused by) reported as the limit the provider reads, generous
values without it, headroom that matches what a create then meets, and an identity that may not read quota
(the emulators' deny knob) giving an unknown limit with the reason instead of a failure."""

import time
import uuid

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import aws, azure, base, gce
from sandbox.clouds import azure as azure_emulator
from sandbox.clouds.aws import AwsEmulator
from sandbox.clouds.gce import GceEmulator

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def by_name(limits):
    return {l["name"]: l for l in limits}


def _unique(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:6])


def _wait(predicate, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in %ss" % timeout
        time.sleep(0.1)


# ---------------------------------------------------------------- GCE

@pytest.fixture(scope="module")
def gce_admin():
    with GceEmulator() as emu:
        yield emu.admin()


def test_gce_reports_the_region_quota_of_the_knob(gce_admin):
    gce_admin.set_faults()
    image = gce_admin.create_image(_unique("q"))
    zonal = gce_admin.create_group(_unique("qz"), "worker", 2, image)
    regional = gce_admin.create_group(_unique("qr"), "worker", 1, image, region="us-central1")
    provider = gce.GceProvider(gce_admin.provider_options()["gcp"], retry_base_delay=0.02, request_timeout=10)
    limits = by_name(provider.instance_headroom([zonal, regional]))
    assert set(limits) == {"INSTANCES", "CPUS"}    # e2 counts against CPUS; no family metric
    assert limits["INSTANCES"]["limit"] >= 1000 and limits["CPUS"]["units_per_instance"] == {zonal: 2, regional: 2}
    # Both groups are in us-central1: one shared limit, whose usage counts every live instance.
    assert limits["INSTANCES"]["groups"] == sorted([zonal, regional])
    used = limits["INSTANCES"]["usage"]
    assert used >= 3 and limits["CPUS"]["usage"] == 2 * used

    try:
        gce_admin.set_faults(quota=used + 1)
        limits = by_name(provider.instance_headroom([zonal]))
        assert (limits["INSTANCES"]["limit"], limits["INSTANCES"]["usage"]) == (used + 1, used)
        assert limits["INSTANCES"]["headroom"] == {zonal: 1}
        provider.create_instance(zonal)                          # the one that fits
        assert by_name(provider.instance_headroom([zonal]))["INSTANCES"]["headroom"] == {zonal: 0}
        with pytest.raises(base.QuotaError):
            provider.create_instance(zonal)                      # and the cloud refuses the next, as reported
    finally:
        gce_admin.set_faults()


def test_gce_quota_the_identity_may_not_read_is_unknown(gce_admin):
    image = gce_admin.create_image(_unique("q"))
    group = gce_admin.create_group(_unique("qd"), "worker", 1, image)
    provider = gce.GceProvider(gce_admin.provider_options()["gcp"], retry_base_delay=0.02, request_timeout=10)
    try:
        gce_admin.set_faults(deny=["/regions/us-central1"])
        [limit] = provider.instance_headroom([group])
        assert not limit["known"] and limit["groups"] == [group]
        assert "Required permission" in limit["reason"] and limit["headroom"] is None
        gce_admin.set_faults(deny=["/machineTypes/"])
        limits = by_name(provider.instance_headroom([group]))
        assert limits["INSTANCES"]["known"] and not limits["CPUS"]["known"]
    finally:
        gce_admin.set_faults()


# ---------------------------------------------------------------- Azure

@pytest.fixture(scope="module")
def azure_admin(tmp_path_factory):
    server = azure_emulator.AzureEmulator(str(tmp_path_factory.mktemp("azure")), boot_delay=0.1,
                                          delete_delay=0.1).start()
    try:
        yield azure_emulator.Admin(server.info())
    finally:
        server.stop()


def _azure_provider(admin):
    options = dict(admin.provider_options()["azure"], retries=1)
    return azure.from_params(options)


def test_azure_reports_the_location_usage_of_the_knob(azure_admin):
    azure_admin.set_faults()
    group = azure_admin.create_group(_unique("qa"), "worker", 2, azure_admin.create_image(_unique("q")))
    provider = _azure_provider(azure_admin)
    limits = by_name(provider.instance_headroom([group]))
    assert set(limits) == {"virtualMachines", "cores", "standardDSv5Family"}
    vms = limits["virtualMachines"]["usage"]
    assert vms >= 2 and limits["cores"]["usage"] == 2 * vms and limits["cores"]["limit"] >= 1000
    assert limits["cores"]["units_per_instance"] == {group: 2}       # Standard_D2s_v5 from the SKU list
    try:
        azure_admin.set_faults(quota=vms + 1)
        limits = by_name(provider.instance_headroom([group]))
        for name, per_instance in (("virtualMachines", 1), ("cores", 2), ("standardDSv5Family", 2)):
            assert (limits[name]["limit"], limits[name]["usage"]) == ((vms + 1) * per_instance, vms * per_instance)
            assert limits[name]["headroom"] == {group: 1}
        provider.create_instance(group)
        with pytest.raises(base.QuotaError):
            provider.create_instance(group)
    finally:
        azure_admin.set_faults()


def test_azure_quota_the_identity_may_not_read_is_unknown(azure_admin):
    group = azure_admin.create_group(_unique("qd"), "worker", 1, azure_admin.create_image(_unique("q")))
    provider = _azure_provider(azure_admin)
    try:
        azure_admin.set_faults(deny=["list_usages"])
        [limit] = provider.instance_headroom([group])
        assert not limit["known"] and "AuthorizationFailed" in limit["reason"]
        assert "Microsoft.Compute/locations/usages/read" in limit["reason"]
        azure_admin.set_faults(deny=["list_skus"])
        limits = by_name(provider.instance_headroom([group]))
        assert limits["virtualMachines"]["known"] and not limits["cores"]["known"]
    finally:
        azure_admin.set_faults()


# ---------------------------------------------------------------- AWS

@pytest.fixture(scope="module")
def aws_admin():
    emu = AwsEmulator().start()
    try:
        yield emu.admin()
    finally:
        emu.stop()


def _aws_provider(admin):
    provider = aws.from_params(dict(admin.provider_options()["aws"]))
    provider.retry_base_delay, provider.poll_interval, provider.create_timeout = 0.01, 0.05, 10
    return provider


def test_aws_reports_max_size_and_the_vcpu_quota_of_the_knob(aws_admin):
    aws_admin.set_faults()
    group = aws_admin.create_group(_unique("qa"), "worker", 2, aws_admin.create_image(_unique("img")), max_size=5)
    provider = _aws_provider(aws_admin)
    limits = provider.instance_headroom([group])
    max_size = by_name(limits)["MaxSize"]
    [vcpu] = [l for l in limits if "L-1216C47A" in l["name"]]
    assert (max_size["limit"], max_size["usage"], max_size["headroom"]) == (5, 2, {group: 3})
    assert vcpu["limit"] >= 1000 and vcpu["units_per_instance"] == {group: 2}   # t3.micro
    running = vcpu["usage"] // 2
    assert running >= 2
    try:
        aws_admin.set_faults(quota=running + 1)
        [vcpu] = [l for l in provider.instance_headroom([group]) if "L-1216C47A" in l["name"]]
        assert (vcpu["limit"], vcpu["usage"], vcpu["headroom"]) == (2 * (running + 1), 2 * running, {group: 1})
        provider.create_instance(group)
        with pytest.raises(base.QuotaError):
            provider.create_instance(group)
    finally:
        aws_admin.set_faults()
    # MaxSize is what create_instance checks: at MaxSize the headroom is 0 and the create is refused.
    aws_admin.autoscaling.update_auto_scaling_group(AutoScalingGroupName=group, MaxSize=3)
    _wait(lambda: len(aws_admin.group_instances(group)) == 3)
    assert by_name(provider.instance_headroom([group]))["MaxSize"]["headroom"] == {group: 0}
    with pytest.raises(base.QuotaError, match="MaxSize"):
        provider.create_instance(group)


def test_aws_quota_the_identity_may_not_read_is_unknown(aws_admin):
    group = aws_admin.create_group(_unique("qd"), "worker", 1, aws_admin.create_image(_unique("img")))
    provider = _aws_provider(aws_admin)
    try:
        aws_admin.set_faults(deny=["GetServiceQuota"])
        limits = provider.instance_headroom([group])
        assert by_name(limits)["MaxSize"]["known"]
        [vcpu] = [l for l in limits if "L-1216C47A" in l["name"]]
        assert not vcpu["known"] and "AccessDeniedException" in vcpu["reason"]
        aws_admin.set_faults(deny=["DescribeAutoScalingGroups"])
        [limit] = provider.instance_headroom([group])
        assert not limit["known"] and "AccessDenied" in limit["reason"]
    finally:
        aws_admin.set_faults()
