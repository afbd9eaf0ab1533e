"""The Azure provider through azure-mgmt-compute against the local ARM emulator, over real HTTPS with the
emulator's own CA (REQUESTS_CA_BUNDLE in the environment must not matter), including injected faults."""

import json
import os
import pathlib
import signal
import threading
import time

import pytest
import requests

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import node_state
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.cloud_access import CloudAccess
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import azure as az
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers.base import (
    CREATING, DELETING, FAILED, PENDING, RUNNING, InvalidReferenceError, NotFoundError, ProviderError, QuotaError,
)
from sandbox import clouds
from sandbox.clouds import azure as emu

pytestmark = pytest.mark.timeout(120)

DEFAULTS = {name: spec.get("default") for name, spec in az.ARG_SPEC.items()}


class RecordingHooks:
    def __init__(self):
        self.created_calls = []
        self.deleted_calls = []

    def created(self, provider_id, node_name, group_id, image, role, zone=None):
        self.created_calls.append(dict(provider_id=provider_id, node_name=node_name, group_id=group_id, image=image,
                                       role=role))

    def deleted(self, provider_id):
        self.deleted_calls.append(provider_id)


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    hooks = RecordingHooks()
    server = emu.AzureEmulator(str(tmp_path_factory.mktemp("azure")), hooks=hooks, boot_delay=0.2,
                               delete_delay=0.2, page_size=2).start()
    server.recorded_hooks = hooks
    yield server
    server.stop()


@pytest.fixture
def admin(emulator):
    admin = emu.Admin(emulator.info())
    admin.set_faults()
    admin.clear_requests()
    yield admin
    admin.set_faults()


def make_provider(admin, **overrides):
    options = dict(DEFAULTS, **admin.provider_options()["azure"])
    options.update(overrides)
    provider = az.from_params(options)
    provider.retry_base_delay = 0.02   # keep fault tests fast; the backoff shape is unit-tested in base
    return provider


@pytest.fixture
def provider(admin):
    return make_provider(admin)


_counter = [0]


def unique(prefix):
    _counter[0] += 1
    return "%s-%d-%d" % (prefix, os.getpid(), _counter[0])


def wait_until(predicate, timeout=10.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met within %ss" % timeout)


def running_group(admin, provider, size=2, role="worker", image=None):
    image = image or admin.create_image(unique("img"))
    group_id = admin.create_group(unique("vmss"), role, size, image)
    wait_until(lambda: all(i.state == RUNNING for i in provider.list_instances(group_id)))
    return group_id, image


def by_template(requests_log, suffix, method="GET"):
    return [r for r in requests_log if r["method"] == method and (r["template"] or "").endswith(suffix)]


# ------------------------------------------------------------------------------------------ happy paths

def test_groups_and_instances_listed_in_constant_calls(admin, provider):
    group_id, image = running_group(admin, provider, size=5, role="control-plane")
    admin.clear_requests()
    instances = provider.list_instances(group_id)
    assert len(instances) == 5
    log = admin.requests()
    # page size 2: three list pages for five VMs, and no per-VM call
    assert len(log) == 3 and all(r["template"].endswith("/virtualMachines") for r in log)
    assert all("$expand" in r["query"] for r in log)
    for inst in instances:
        assert inst.state == RUNNING and inst.image == image and inst.group_id == group_id
        assert inst.provider_id == provider.group_id_of(inst.provider_id).replace(
            "/subscriptions/", "azure:///subscriptions/", 1) + "/virtualMachines/" + inst.extra["instance_id"]
        assert inst.node_name.startswith(group_id.rsplit("/", 1)[1]) and inst.node_name == inst.node_name.lower()
        assert inst.created_at and abs(inst.created_at - time.time()) < 60
    group = provider.list_groups([group_id])[0]
    assert (group.id, group.image, group.role, group.target_size) == (group_id, image, "control-plane", 5)
    assert group_id in [g.id for g in provider.list_groups()]   # discovery in the resource group


def test_create_instance_names_the_future_node_and_boots(admin, provider, emulator):
    group_id, image = running_group(admin, provider, size=1)
    inst = provider.create_instance(group_id)
    assert inst.state == CREATING
    assert inst.image == image and inst.group_id == group_id
    assert provider.list_groups([group_id])[0].target_size == 2
    states = provider.wait_running([inst.provider_id], timeout=10)
    assert states == {inst.provider_id: RUNNING}
    # the emulator told the node simulator about exactly this providerID and node name
    hooked = [h for h in emulator.recorded_hooks.created_calls if h["provider_id"] == inst.provider_id]
    assert hooked == [dict(provider_id=inst.provider_id, node_name=inst.node_name, group_id=group_id, image=image,
                           role="worker")]


def test_creates_not_waited_for_come_back_unnamed_and_are_named_by_the_listing_that_shows_their_vms(admin, provider):
    """Issue 22: create_instance(wait=False) returns once the scale-out was accepted, without a providerID (PENDING);
    follow_operations() names each new VM once (two in a row: two VMs, never one twice), and no placeholder stays."""
    group_id, image = running_group(admin, provider, size=1)
    made = [provider.create_instance(group_id, wait=False) for dummy in range(2)]
    assert [(i.provider_id, i.state, i.image, i.extra[PENDING]) for i in made] == [("", CREATING, image, True)] * 2
    assert provider.list_groups([group_id])[0].target_size == 3
    assert len(provider.list_instances(group_id)) == 3   # the new VMs, or their placeholders until they are listed
    ended = []
    wait_until(lambda: ended.extend(provider.follow_operations()) or len(ended) == 2)
    assert [(e.group_id, e.failure, e.kind) for e in ended] == [(group_id, None, "create")] * 2
    named = {e.instance.provider_id for e in ended}
    listed = provider.list_instances(group_id)
    assert len(named) == 2 and named <= {i.provider_id for i in listed} and all(i.provider_id for i in listed)
    assert provider.follow_operations() == []   # told once
    assert provider.wait_running(sorted(named), timeout=10) == {pid: RUNNING for pid in named}


def test_delete_is_idempotent_and_shrinks_the_group(admin, provider, emulator):
    group_id, _vms = running_group(admin, provider, size=3)
    victim = provider.list_instances(group_id)[1]
    assert provider.delete_instance(victim.provider_id) is True
    assert provider.list_groups([group_id])[0].target_size == 2
    # The deletion was not waited for (delete-instances with polling=False): that it ends is known only from a later
    # listing, which names the VM Deleting until it is gone.
    states = {i.provider_id: i.state for i in provider.list_instances(group_id)}
    assert states.get(victim.provider_id, DELETING) == DELETING
    assert provider.delete_instance(victim.provider_id) is False       # deletion already under way
    wait_until(lambda: victim.provider_id not in [i.provider_id for i in provider.list_instances(group_id)])
    assert provider.delete_instance(victim.provider_id) is False       # gone
    assert victim.provider_id in emulator.recorded_hooks.deleted_calls
    # another spelling of the same providerID is the same VM
    other = provider.list_instances(group_id)[0]
    assert provider.delete_instance(other.provider_id.upper().replace("AZURE:", "azure:")) is True


def test_a_pass_deleting_several_vms_of_a_set_sends_one_call_and_one_more_for_a_vm_a_concurrent_delete_took(
        admin, provider):
    """Issue 22: CloudAccess.delete takes the scale set from the pass's listing and sends one delete-instances with
    all its VMs, with no VM read. Azure refuses the whole call when one VM is no longer active (400 InvalidParameter
    naming its instanceId): that VM is left out and the call goes again, so the others are deleted all the same."""
    group_id, _image = running_group(admin, provider, size=4)
    vms = provider.list_instances(group_id)
    cloud = CloudAccess(provider)
    cloud.read([group_id])
    assert provider.delete_instance(vms[1].provider_id) is True    # another run deletes it meanwhile
    admin.clear_requests()
    deleted = cloud.delete([vm.provider_id for vm in vms])
    assert sorted(deleted) == sorted(vm.provider_id for i, vm in enumerate(vms) if i != 1)
    deletes = by_template(admin.requests(), "/virtualMachineScaleSets/{vmScaleSetName}/delete", "POST")
    assert [r["status"] for r in deletes] == [400, 202], deletes   # refused for the one, then the other three
    assert [r for r in admin.requests() if r["method"] == "GET"] == []
    assert provider.list_groups([group_id])[0].target_size == 0


def test_set_group_image_is_idempotent_and_only_new_instances_change(admin, provider):
    group_id, old_image = running_group(admin, provider, size=2)
    new_image = admin.create_image(unique("img2"))
    admin.clear_requests()
    assert provider.set_group_image(group_id, new_image.upper().replace("/SUBSCRIPTIONS/", "/subscriptions/")) is True
    assert provider.group_image(group_id) == new_image
    assert provider.set_group_image(group_id, new_image) is False
    patches = by_template(admin.requests(), "/virtualMachineScaleSets/{vmScaleSetName}", "PATCH")
    assert len(patches) == 1
    olds = provider.list_instances(group_id)
    assert {i.image for i in olds} == {old_image}
    assert {i.extra["latest_model_applied"] for i in olds} == {False}
    fresh = provider.create_instance(group_id)
    assert fresh.image == new_image


@pytest.mark.parametrize("kind", ["gallery", "managed", "community", "shared", "marketplace"])
def test_every_image_kind_validates_and_is_settable(admin, provider, kind):
    group_id, _vms = running_group(admin, provider, size=0)
    image = admin.create_image(unique("k"), kind=kind)
    assert provider.validate_image(image) == az.canonical_image(image)
    assert provider.set_group_image(group_id, image) is True
    assert provider.group_image(group_id) == az.canonical_image(image)
    inst = provider.create_instance(group_id)
    assert inst.image == az.canonical_image(image)


@pytest.mark.parametrize("kind,missing", [
    ("gallery", "/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/galleries/g/images/nope/versions/1.0.0"
     % (emu.SUBSCRIPTION, emu.RESOURCE_GROUP)),
    ("managed", "/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/images/nope"
     % (emu.SUBSCRIPTION, emu.RESOURCE_GROUP)),
    ("community", "/CommunityGalleries/nope/Images/x/Versions/1.0.0"),
    ("shared", "/SharedGalleries/nope/Images/x/Versions/1.0.0"),
    ("marketplace", "nope:offer:sku:1.0.0"),
])
def test_absent_image_is_a_clear_error_and_changes_nothing(admin, provider, kind, missing):
    group_id, image = running_group(admin, provider, size=1)
    admin.clear_requests()
    with pytest.raises(NotFoundError) as err:
        provider.set_group_image(group_id, missing)
    assert "HTTP 404" in str(err.value) and az.canonical_image(missing) in str(err.value)
    assert not [r for r in admin.requests() if r["method"] != "GET"]
    assert provider.group_image(group_id) == image


def test_malformed_image_fails_before_any_request(admin, provider):
    group_id, image = running_group(admin, provider, size=1)
    admin.clear_requests()
    with pytest.raises(InvalidReferenceError) as err:
        provider.validate_image("ubuntu-latest")
    assert "<publisher>:<offer>:<sku>:<version>" in str(err.value)
    assert admin.requests() == []
    with pytest.raises(InvalidReferenceError):
        provider.set_group_image(group_id, "Canonical:ubuntu:22_04:latest")
    assert not [r for r in admin.requests() if r["method"] != "GET"]
    assert provider.group_image(group_id) == image


def test_unknown_group_and_instance(admin, provider):
    missing = "/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/virtualMachineScaleSets/nope" % (
        emu.SUBSCRIPTION, emu.RESOURCE_GROUP)
    with pytest.raises(NotFoundError, match="nope"):
        provider.list_instances(missing)
    assert provider.delete_instance("azure://" + missing + "/virtualMachines/0") is False
    with pytest.raises(InvalidReferenceError, match="virtualMachineScaleSets/<scale-set>"):
        provider.list_instances("nope")


# ------------------------------------------------------------------------------------------ Flexible orchestration

def flexible_group(admin, provider, size=2, role="worker", image=None):
    image = image or admin.create_image(unique("img"))
    group_id = admin.create_group(unique("flex"), role, size, image, orchestration="Flexible")
    wait_until(lambda: all(i.state == RUNNING for i in provider.list_instances(group_id)))
    return group_id, image


def test_flexible_vms_are_listed_as_virtual_machines_in_constant_calls(admin, provider):
    group_id, image = flexible_group(admin, provider, size=5, role="control-plane")
    running_group(admin, provider, size=1)          # a Uniform set in the same resource group stays apart
    admin.clear_requests()
    instances = provider.list_instances(group_id)
    assert len(instances) == 5
    log = admin.requests()
    # page size 2: three pages of the resource group's VMs filtered on the scale set, nothing per VM, and no
    # call to the scale set VM API (which Azure refuses for a Flexible set)
    assert len(log) == 3 and all(r["template"].endswith("/Microsoft.Compute/virtualMachines") for r in log), log
    assert all({"$filter", "$expand"} <= set(r["query"]) for r in log)
    sub, rg, name = az.parse_group_id(group_id)
    for inst in instances:
        assert inst.state == RUNNING and inst.image == image and inst.group_id == group_id
        assert inst.provider_id == "azure:///subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/" \
            "virtualMachines/%s" % (sub, rg, inst.name)
        assert inst.name.startswith(name + "_") and inst.extra["instance_id"] == inst.name
        assert inst.node_name.startswith(name) and inst.node_name == inst.node_name.lower()
        assert provider.group_id_of(inst.provider_id) == group_id
    group = provider.list_groups([group_id])[0]
    assert (group.id, group.image, group.role, group.target_size) == (group_id, image, "control-plane", 5)
    assert group_id in [g.id for g in provider.list_groups()]


def test_flexible_scale_out_model_image_and_delete(admin, provider, emulator):
    group_id, old_image = flexible_group(admin, provider, size=2)
    inst = provider.create_instance(group_id)
    assert inst.state == CREATING and inst.image == old_image and inst.group_id == group_id
    assert provider.list_groups([group_id])[0].target_size == 3
    assert provider.wait_running([inst.provider_id], timeout=10) == {inst.provider_id: RUNNING}
    hooked = [h for h in emulator.recorded_hooks.created_calls if h["provider_id"] == inst.provider_id]
    assert hooked == [dict(provider_id=inst.provider_id, node_name=inst.node_name, group_id=group_id, image=old_image,
                           role="worker")]
    # the scale set's model gives new VMs the new image; the VMs already there keep theirs
    new_image = admin.create_image(unique("img2"))
    assert provider.set_group_image(group_id, new_image) is True
    assert provider.set_group_image(group_id, new_image) is False
    assert provider.group_image(group_id) == new_image
    assert {i.image for i in provider.list_instances(group_id)} == {old_image}
    fresh = provider.create_instance(group_id)
    assert fresh.image == new_image
    # delete through a provider that never listed the set: the VM names its scale set
    other = make_provider(admin)
    admin.clear_requests()
    assert other.delete_instance(inst.provider_id.upper().replace("AZURE:", "azure:")) is True
    deletes = by_template(admin.requests(), "/virtualMachineScaleSets/{vmScaleSetName}/delete", "POST")
    assert len(deletes) == 1
    assert provider.list_groups([group_id])[0].target_size == 3
    assert other.delete_instance(inst.provider_id) is False          # deletion under way
    wait_until(lambda: inst.provider_id not in [i.provider_id for i in provider.list_instances(group_id)])
    assert other.delete_instance(inst.provider_id) is False          # gone
    assert inst.provider_id in emulator.recorded_hooks.deleted_calls


def test_flexible_quota_reads_and_refusals_are_those_of_uniform(admin, provider, emulator):
    flex_id, _image = flexible_group(admin, provider, size=1)
    uniform_id, _vms = running_group(admin, provider, size=1)
    limits = provider.instance_headroom([flex_id, uniform_id])
    by_name = {limit["name"]: limit for limit in limits}
    assert by_name["virtualMachines"]["units_per_instance"] == {flex_id: 1, uniform_id: 1}
    assert by_name["cores"]["units_per_instance"] == {flex_id: emu.VM_SIZE_VCPUS, uniform_id: emu.VM_SIZE_VCPUS}
    with emulator.lock:
        in_use = emulator._vm_count()   # pylint: disable=protected-access
    admin.set_faults(quota=in_use)
    with pytest.raises(QuotaError) as err:
        provider.create_instance(flex_id)
    assert err.value.code == "OperationNotAllowed" and len(provider.list_instances(flex_id)) == 1


def test_emulator_refuses_the_scale_set_vm_api_for_a_flexible_set(admin, provider):
    group_id, _image = flexible_group(admin, provider, size=1)
    _sub, rg, name = az.parse_group_id(group_id)
    from azure.core.exceptions import HttpResponseError
    with pytest.raises(HttpResponseError) as err:
        list(provider.client().virtual_machine_scale_set_vms.list(rg, name))
    assert err.value.status_code == 400 and "orchestration mode 'Flexible'" in str(err.value)
    # without a $filter the resource group's VMs are listed; instanceView needs the filter
    assert len(list(provider.client().virtual_machines.list(rg))) >= 1
    with pytest.raises(HttpResponseError):
        list(provider.client().virtual_machines.list(rg, expand="instanceView"))


# ------------------------------------------------------------------------------------------ faults

@pytest.mark.parametrize("code", [429, 500, 503])
def test_throttling_and_server_errors_are_retried(admin, provider, code):
    group_id, _vms = running_group(admin, provider, size=1)
    admin.clear_requests()
    admin.set_faults(codes=[code], fail_next=3)
    assert len(provider.list_instances(group_id)) == 1
    statuses = [r["status"] for r in admin.requests()]
    assert statuses == [code, code, code, 200]


def test_a_4xx_that_will_not_change_is_not_retried(admin, provider):
    group_id, _vms = running_group(admin, provider, size=1)
    admin.clear_requests()
    admin.set_faults(codes=[400], fail_next=3)
    with pytest.raises(ProviderError) as err:
        provider.list_instances(group_id)
    assert err.value.retryable is False and err.value.status == 400
    assert [r["status"] for r in admin.requests()] == [400]


def test_retries_are_bounded(admin):
    provider = make_provider(admin, retries=3)
    group_id, _vms = running_group(admin, provider, size=1)
    admin.clear_requests()
    admin.set_faults(codes=[503], fail_next=10)
    started = time.monotonic()
    with pytest.raises(ProviderError) as err:
        provider.group_image(group_id)
    assert err.value.retryable is True and "ServiceUnavailable" in str(err.value)
    assert [r["status"] for r in admin.requests()] == [503, 503, 503]
    assert time.monotonic() - started < 10


def test_random_error_rate_is_absorbed(admin, provider):
    group_id, _vms = running_group(admin, provider, size=2)
    admin.set_faults(error_rate=0.3, seed=1)
    for _attempt in range(10):
        assert len(provider.list_instances(group_id)) == 2
    assert any(r["status"] in (429, 500, 503) for r in admin.requests())


def test_latency(admin, provider):
    group_id, _vms = running_group(admin, provider, size=1)
    admin.set_faults(latency=0.3)
    started = time.monotonic()
    assert provider.group_image(group_id)
    assert time.monotonic() - started >= 0.3


def test_never_booting_instance_stays_creating(admin, provider):
    group_id, _vms = running_group(admin, provider, size=1)
    admin.set_faults(never_boot=[group_id])
    inst = provider.create_instance(group_id)
    states = provider.wait_running([inst.provider_id], timeout=1.0)
    assert states == {inst.provider_id: CREATING}
    listed = {i.provider_id: i.state for i in provider.list_instances(group_id)}
    assert listed[inst.provider_id] == CREATING


def test_allocation_failure_shows_as_a_failed_instance_with_its_reason(admin, provider, emulator):
    group_id, _vms = running_group(admin, provider, size=1)
    admin.set_faults(allocation_failure=[group_id.rsplit("/", 1)[1]])
    inst = provider.create_instance(group_id)
    assert inst.state == CREATING
    states = provider.wait_running([inst.provider_id], timeout=10)
    assert states == {inst.provider_id: FAILED}
    failed = [i for i in provider.list_instances(group_id) if i.provider_id == inst.provider_id][0]
    assert failed.state == FAILED
    assert failed.extra["error_code"] == "AllocationFailed" and failed.extra["capacity_refusal"] is True
    assert "sufficient capacity" in failed.extra["error_message"]
    assert failed.extra["refused_for"].startswith("AllocationFailed: Allocation failed. We do not have sufficient")
    assert inst.provider_id not in [h["provider_id"] for h in emulator.recorded_hooks.created_calls]
    # a failed VM can be deleted like any other
    assert provider.delete_instance(inst.provider_id) is True


def test_late_refusals_fail_the_allocation_of_the_next_new_vms_only(admin, provider):
    group_id, _vms = running_group(admin, provider, size=1)
    admin.set_faults(late_refusals=1)
    refused, booted = provider.create_instance(group_id), provider.create_instance(group_id)
    states = provider.wait_running([refused.provider_id, booted.provider_id], timeout=10)
    assert states[refused.provider_id] == FAILED
    listed = {i.provider_id: i for i in provider.list_instances(group_id)}
    assert listed[refused.provider_id].extra["refused_for"].startswith("AllocationFailed: ")
    assert provider.wait_running([booted.provider_id], timeout=10) == {booted.provider_id: RUNNING}


def test_quota_refusal_is_a_quota_error_and_creates_nothing(admin, provider, emulator):
    group_id, _vms = running_group(admin, provider, size=1)
    with emulator.lock:
        in_use = emulator._vm_count()   # pylint: disable=protected-access
    admin.set_faults(quota=in_use)
    with pytest.raises(QuotaError) as err:
        provider.create_instance(group_id)
    assert "quota" in str(err.value).lower() and err.value.code == "OperationNotAllowed"
    assert provider.list_groups([group_id])[0].target_size == 1
    assert len(provider.list_instances(group_id)) == 1
    admin.set_faults(quota=in_use + 1)
    assert provider.create_instance(group_id).state == CREATING


def test_concurrent_creates_never_collapse_into_one(admin):
    # Separate provider objects (as separate processes would be): only the ETag protects the capacity.
    providers = [make_provider(admin) for _attempt in range(3)]
    group_id, _vms = running_group(admin, providers[0], size=1)
    admin.set_faults(latency=0.15)   # widen the read-modify-write window so the creates overlap
    admin.clear_requests()
    results, errors = [], []

    def create(p):
        try:
            results.append(p.create_instance(group_id))
        except Exception as exc:  # pylint: disable=broad-except
            errors.append(exc)
    threads = [threading.Thread(target=create, args=(p,)) for p in providers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    admin.set_faults()
    assert errors == []
    assert len({r.provider_id for r in results}) == 3
    assert providers[0].list_groups([group_id])[0].target_size == 4
    assert len(providers[0].list_instances(group_id)) == 4
    assert any(r["status"] == 412 for r in admin.requests()), "the creates did not race; widen the window"


# ------------------------------------------------------------------------------------------ transport

def test_untrusted_server_is_a_clear_error_not_retried(admin, tmp_path):
    other_ca = tmp_path / "other"
    from sandbox import pki
    bundle = str(pki.CA(other_ca).cert_path)
    provider = make_provider(admin, ca_bundle=bundle, retries=5)
    provider.retry_base_delay = 2.0   # a retry would show in the time taken
    started = time.monotonic()
    with pytest.raises(ProviderError) as err:
        provider.list_groups()
    assert err.value.retryable is False
    assert "CERTIFICATE_VERIFY_FAILED" in str(err.value) and "azure.ca_bundle" in str(err.value)
    assert time.monotonic() - started < 2.0


def test_refused_connection_is_retried(admin):
    from sandbox import netutil
    provider = make_provider(admin, endpoint="https://127.0.0.1:%d" % netutil.free_port(), retries=2)
    with pytest.raises(ProviderError) as err:
        provider.list_groups()
    assert err.value.retryable is True and "cannot reach Azure Resource Manager" in str(err.value)


def test_throttling_honours_retry_after(emulator, admin, provider):
    group_id, _vms = running_group(admin, provider, size=1)
    emulator.throttle_retry_after = 1
    try:
        admin.clear_requests()
        admin.set_faults(codes=[429], fail_next=1)
        started = time.monotonic()
        assert provider.group_image(group_id)
        assert time.monotonic() - started >= 1.0
        assert [r["status"] for r in admin.requests()][:2] == [429, 200]
    finally:
        emulator.throttle_retry_after = 0


def test_ca_bundle_wins_over_requests_ca_bundle(admin, monkeypatch):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    monkeypatch.setenv("CURL_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    assert isinstance(make_provider(admin).list_groups(), list)


def _raw(emulator, method, path, **kwargs):
    headers = kwargs.pop("headers", {"Authorization": "Bearer x"})
    return requests.request(method, emulator.endpoint + path, headers=headers, verify=emulator.ca_cert, timeout=10,
                            **kwargs)


VMSS_PATH = "/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/virtualMachineScaleSets/x" % (
    emu.SUBSCRIPTION, emu.RESOURCE_GROUP)


@pytest.mark.parametrize("method,path,kwargs,status,code", [
    ("GET", VMSS_PATH.replace("virtualMachineScaleSets", "virtualMachineScaleSetz") + "?api-version=2026-04-01", {},
     404, "InvalidResourceType"),
    ("GET", "/subscriptions/%s/somethingElse?api-version=2026-04-01" % emu.SUBSCRIPTION, {}, 404, "InvalidRequestUri"),
    ("DELETE", VMSS_PATH + "?api-version=2026-04-01", {}, 405, "MethodNotAllowed"),
    ("GET", VMSS_PATH, {}, 400, "MissingApiVersionParameter"),
    ("GET", VMSS_PATH + "?api-version=latest", {}, 400, "InvalidApiVersionParameter"),
    ("GET", VMSS_PATH + "?api-version=2026-04-01", {"headers": {}}, 401, "AuthenticationFailed"),
    ("GET", VMSS_PATH + "?api-version=2026-04-01&$bogus=1", {}, 400, "InvalidQueryParameterValue"),
    ("PATCH", VMSS_PATH + "?api-version=2026-04-01", {"json": {"sku": {"capacity": 1}, "capacityy": 2}}, 400,
     "InvalidRequestContent"),
    ("POST", VMSS_PATH + "/delete?api-version=2026-04-01", {"json": {"instanceIds": "0"}}, 404, "ResourceNotFound"),
    ("GET", VMSS_PATH + "?api-version=2025-01-02", {}, 404, "ResourceNotFound"),   # any dated api-version is fine
])
def test_emulator_rejects_like_arm(emulator, admin, method, path, kwargs, status, code):
    response = _raw(emulator, method, path, **kwargs)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code and response.json()["error"]["message"]


def test_stale_etag_is_refused(emulator, admin, provider):
    group_id, _vms = running_group(admin, provider, size=1)
    path = group_id + "?api-version=2026-04-01"
    etag = _raw(emulator, "GET", path).json()["etag"]
    ok = _raw(emulator, "PATCH", path, json={"tags": {"a": "b"}},
              headers={"Authorization": "Bearer x", "If-Match": etag})
    assert ok.status_code == 200 and ok.headers["Azure-AsyncOperation"] and ok.headers["Retry-After"] == "0"
    stale = _raw(emulator, "PATCH", path, json={"tags": {"a": "c"}},
                 headers={"Authorization": "Bearer x", "If-Match": etag})
    assert stale.status_code == 412 and stale.json()["error"]["code"] == "PreconditionFailed"


def test_emulator_as_a_process(tmp_path):
    proc, info = clouds.launch("azure", tmp_path, log_path=str(tmp_path / "azure.log"))
    try:
        assert info["cloud"] == "azure" and info["endpoint"].startswith("https://127.0.0.1:") and info["pid"] == proc.pid
        admin = emu.Admin(info)
        image = admin.create_image("proc-image")
        group_id = admin.create_group("proc-vmss", "worker", 1, image)
        provider = make_provider(admin)
        assert provider.list_groups([group_id])[0].image == image
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    assert proc.returncode == 0


# ------------------------------------------------------------------------------------------ recorded shapes

SHAPES_FILE = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "azure_request_shapes.json"


def _shape(entry):
    return {"method": entry["method"], "path": entry["template"], "query": sorted(entry["query"]),
            "body": sorted(entry["body"]), "headers": sorted(entry.get("headers", []))}


def _sdk_scenario(admin, provider, emulator):
    """Every call the collection makes, plus PUT and instance view through the SDK directly."""
    group_id, image = running_group(admin, provider, size=3)
    admin.clear_requests()
    provider.list_groups()
    provider.list_groups([group_id])
    provider.list_instances(group_id)
    provider.instance_headroom([group_id])      # compute usage and resource SKUs
    inst = provider.create_instance(group_id)
    provider.wait_running([inst.provider_id], timeout=10)
    for kind in ("gallery", "managed", "community", "shared", "marketplace"):
        provider.validate_image(admin.create_image(unique("shape"), kind=kind))
    provider.set_group_image(group_id, admin.create_image(unique("shape")))
    provider.delete_instance(inst.provider_id)
    # The cloud setting a run neutralises and restores (cloud_settings.py).
    provider.set_run_setting(group_id, "upgradePolicy.mode", "Automatic")
    provider.restore_problem(group_id, "upgradePolicy.mode", "Automatic")
    provider.set_run_setting(group_id, "upgradePolicy.mode", "Manual")
    for name in ("overprovision", "automaticRepairsPolicy.enabled"):
        provider.set_run_setting(group_id, name, "true")
        provider.set_run_setting(group_id, name, "false")
    admin.set_faults(autoscale=False)   # the autoscale setting's shapes, not what it does
    admin.create_autoscale(group_id, recommended=3)
    provider.list_groups([group_id])
    provider.set_run_setting(group_id, "autoscaleSettings.enabled", "false")
    provider.set_run_setting(group_id, "autoscaleSettings.enabled", "true")
    sub, rg, name = az.parse_group_id(group_id)
    client = provider.client()
    client.virtual_machine_scale_set_vms.get_instance_view(rg, name, "0")
    model = client.virtual_machine_scale_sets.get(rg, name)
    model.sku.capacity = model.sku.capacity + 1
    client.virtual_machine_scale_sets.begin_create_or_update(rg, name, model).result(timeout=30)
    key = emulator._key(sub, rg, name)  # pylint: disable=protected-access
    wait_until(lambda: not [o for o in emulator.operations.values() if o["status"] == "InProgress" and o["vmss"] == key])
    # Flexible orchestration: VMs listed as the resource group's virtual machines, read one by one, deleted by name
    flex_id, _image = flexible_group(admin, provider, size=3)
    provider.list_instances(flex_id)
    flex = provider.create_instance(flex_id)
    provider.wait_running([flex.provider_id], timeout=10)
    provider.set_group_image(flex_id, admin.create_image(unique("shape")))
    make_provider(admin).delete_instance(flex.provider_id)
    flex_key = emulator._key(*az.parse_group_id(flex_id))  # pylint: disable=protected-access
    wait_until(lambda: not [o for o in emulator.operations.values()
                            if o["status"] == "InProgress" and o["vmss"] == flex_key])
    return admin.requests()


def test_recorded_sdk_request_shapes(tmp_path):
    # A fresh emulator, so that what earlier tests left behind (more pages, stuck operations) changes nothing.
    emulator = emu.AzureEmulator(str(tmp_path), boot_delay=0.1, delete_delay=0.1, page_size=2).start()
    try:
        admin = emu.Admin(emulator.info())
        log = _sdk_scenario(admin, make_provider(admin), emulator)
    finally:
        emulator.stop()
    assert all(r["status"] < 400 for r in log), [r for r in log if r["status"] >= 400]
    seen = sorted({json.dumps(_shape(r), sort_keys=True) for r in log})
    shapes = [json.loads(s) for s in seen]
    if os.environ.get("KUBENODES_RECORD_SHAPES") == "1":
        SHAPES_FILE.parent.mkdir(parents=True, exist_ok=True)
        SHAPES_FILE.write_text(json.dumps({"sdk": "azure-mgmt-compute", "shapes": shapes}, indent=1) + "\n")
    recorded = json.loads(SHAPES_FILE.read_text())["shapes"]
    assert shapes == recorded, "the SDK's requests changed; re-record with KUBENODES_RECORD_SHAPES=1 after review"


def test_recorded_shapes_are_exactly_what_the_emulator_accepts():
    recorded = json.loads(SHAPES_FILE.read_text())["shapes"]
    routes = {template: methods for template, _regex, methods in emu.ROUTES}
    for shape in recorded:
        assert shape["path"] in routes, shape
        assert shape["method"] in routes[shape["path"]], shape
        _handler, query_keys, body_keys = routes[shape["path"]][shape["method"]]
        assert set(shape["query"]) <= query_keys, shape
        if body_keys is None:
            assert shape["body"] == [], shape
        else:
            assert all(p in body_keys or p.startswith(emu._FREE_SUBTREES) for p in shape["body"]), shape  # pylint: disable=protected-access
    # and every route the emulator serves is one the SDK was seen to use
    used = {(s["path"], s["method"]) for s in recorded}
    served = {(t, m) for t, methods in routes.items() for m in methods}
    assert served <= used, sorted(served - used)


def test_one_read_of_each_scale_set_per_read_and_per_slice(admin, provider):
    """Issue 12 item 8, counted in the emulator's request log: node_state.read_cloud reads each scale set once
    and lists its VMs; within reading() (one executor slice) later reads list only the VMs, until this
    provider changes a scale set (scale out, delete, image), whose effect the next read shows."""
    groups = [running_group(admin, provider, size=2)[0] for _n in range(2)]
    image = admin.create_image(unique("img"))

    def counts():
        log = admin.requests()
        return (len(by_template(log, "/virtualMachineScaleSets/{vmScaleSetName}")),
                len(by_template(log, "/virtualMachineScaleSets/{vmScaleSetName}/virtualMachines")))

    admin.clear_requests()
    _groups, instances, errors = node_state.read_cloud(provider, groups)
    gets, lists = counts()
    assert not errors and gets == 2 and lists >= 2 and [len(instances[g]) for g in groups] == [2, 2]
    with provider.reading():
        admin.clear_requests()
        for _pass in range(3):
            node_state.read_cloud(provider, groups)
        assert counts() == (2, 3 * lists)
        created = provider.create_instance(groups[0])
        admin.clear_requests()
        listed, instances, _errors = node_state.read_cloud(provider, groups)
        assert counts() == (2, lists + 1)      # page size 2: the group of three VMs lists in two pages
        assert created.provider_id in [i.provider_id for i in instances[groups[0]]]
        assert {g.id: g.target_size for g in listed} == {groups[0]: 3, groups[1]: 2}
        assert provider.set_group_image(groups[1], image) is True
        admin.clear_requests()
        listed, _instances, _errors = node_state.read_cloud(provider, groups)
        assert counts()[0] == 2 and {g.id: g.image for g in listed}[groups[1]] == image
        assert provider.delete_instance(created.provider_id) is True
        admin.clear_requests()
        listed, _instances, _errors = node_state.read_cloud(provider, groups)
        assert counts()[0] == 2 and {g.id: g.target_size for g in listed}[groups[0]] == 2
