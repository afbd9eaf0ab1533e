"""csp_node and csp_scaling_group on Azure, run through ansible-playbook against the ARM emulator over HTTPS."""

import json
import time

import pytest

from sandbox.clouds import azure as emu
from tests.ansible_run import run_module

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    server = emu.AzureEmulator(str(tmp_path_factory.mktemp("azure-modules")), boot_delay=0.2, delete_delay=0.2,
                               page_size=3).start()
    yield server
    server.stop()


@pytest.fixture
def admin(emulator):
    admin = emu.Admin(emulator.info())
    admin.set_faults()
    yield admin
    admin.set_faults()


_counter = [0]


def unique(prefix):
    _counter[0] += 1
    return "%s-%d" % (prefix, _counter[0])


def args(admin, **extra):
    options = admin.provider_options()
    options.update(extra)
    return options


def capacity(emulator, group_id):
    name = group_id.rsplit("/", 1)[1]
    with emulator.lock:
        return emulator.scale_sets[emulator._key(emu.SUBSCRIPTION, emu.RESOURCE_GROUP, name)]["capacity"]  # pylint: disable=protected-access


def group_state(admin, group_id):
    return [s for s in admin.state()["scale_sets"] if s["id"].lower() == group_id.lower()][0]


def wait_running(admin, group_id, count, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        vmss = group_state(admin, group_id)
        states = [vm["properties"]["provisioningState"] for vm in vmss["vms"]]
        if len(states) == count and set(states) == {"Succeeded"}:
            return
        time.sleep(0.1)
    raise AssertionError("group %s did not reach %d running VMs" % (group_id, count))


def model_image(admin, group_id):
    profile = group_state(admin, group_id)["properties"]["virtualMachineProfile"]
    return emu.image_string(profile["storageProfile"]["imageReference"])


def test_csp_node_present_check_mode_then_for_real_with_wait(admin, emulator):
    image = admin.create_image(unique("img"))
    group_id = admin.create_group(unique("workers"), "worker", 1, image)
    checked = run_module("csp_node", args(admin, group=group_id, count=2), check=True)
    assert not checked["failed"], checked.get("msg")
    assert checked["changed"] is True and checked["instances"] == []
    assert capacity(emulator, group_id) == 1

    result = run_module("csp_node", args(admin, group=group_id, count=2, wait=True, wait_timeout=60, wait_sleep=1))
    assert not result["failed"], result.get("msg")
    assert result["changed"] is True and result["quota_exceeded"] is False
    assert len(result["instances"]) == 2 and {i["state"] for i in result["instances"]} == {"running"}
    assert capacity(emulator, group_id) == 3
    vmss = group_state(admin, group_id)
    computer_names = {vm["properties"]["osProfile"]["computerName"].lower() for vm in vmss["vms"]}
    assert set(result["node_names"]) <= computer_names
    for instance in result["instances"]:
        assert instance["provider_id"].startswith("azure:///subscriptions/%s/resourceGroups/" % emu.SUBSCRIPTION)
        assert instance["image"] == image and instance["group_id"] == group_id

    info = run_module("csp_node_info", args(admin, group=group_id))
    assert not info["failed"] and info["changed"] is False
    assert len(info["instances"]) == 3
    assert info["groups"][0]["target_size"] == 3 and info["groups"][0]["image"] == image


def test_csp_node_absent_by_name_and_provider_id_is_idempotent(admin, emulator):
    image = admin.create_image(unique("img"))
    group_id = admin.create_group(unique("workers"), "worker", 3, image)
    wait_running(admin, group_id, 3)
    vms = group_state(admin, group_id)["vms"]
    by_name = vms[0]["properties"]["osProfile"]["computerName"].lower()
    by_id = "azure://" + vms[1]["id"].replace("/resourceGroups/%s/" % emu.RESOURCE_GROUP,
                                              "/resourceGroups/%s/" % emu.RESOURCE_GROUP.lower())

    checked = run_module("csp_node", args(admin, state="absent", cluster_check=False, group=group_id, node_name=[by_name],
                                          provider_id=[by_id]), check=True)
    assert checked["changed"] is True and len(checked["deleted"]) == 2
    assert capacity(emulator, group_id) == 3

    result = run_module("csp_node", args(admin, state="absent", cluster_check=False, group=group_id, node_name=[by_name],
                                         provider_id=[by_id.lower()], wait=True, wait_timeout=60, wait_sleep=1))
    assert not result["failed"], result.get("msg")
    assert result["changed"] is True and len(result["deleted"]) == 2
    assert capacity(emulator, group_id) == 1

    again = run_module("csp_node", args(admin, state="absent", cluster_check=False, group=group_id, node_name=[by_name], provider_id=[by_id]))
    assert not again["failed"] and again["changed"] is False
    assert sorted(again["already_absent"]) == sorted([by_name, by_id])


def test_csp_node_absent_by_the_provider_id_of_a_flexible_vm_alone(admin, emulator):
    """No group given: the scale set is found from the VM (a Flexible providerID does not name it)."""
    image = admin.create_image(unique("img"))
    group_id = admin.create_group(unique("flex"), "worker", 2, image, orchestration="Flexible")
    wait_running(admin, group_id, 2)
    vm = group_state(admin, group_id)["vms"][0]
    provider_id = "azure://" + vm["id"].replace("/resourceGroups/%s/" % emu.RESOURCE_GROUP,
                                                "/resourceGroups/%s/" % emu.RESOURCE_GROUP.lower())
    assert "/providers/Microsoft.Compute/virtualMachines/" in provider_id
    result = run_module("csp_node", args(admin, state="absent", cluster_check=False, provider_id=[provider_id], wait=True, wait_timeout=60,
                                         wait_sleep=1))
    assert not result["failed"], result.get("msg")
    assert result["changed"] is True and len(result["deleted"]) == 1
    assert capacity(emulator, group_id) == 1
    again = run_module("csp_node", args(admin, state="absent", cluster_check=False, provider_id=[provider_id]))
    assert not again["failed"] and again["changed"] is False and again["already_absent"] == [provider_id]


@pytest.mark.parametrize("orchestration", ["Uniform", "Flexible"])
def test_csp_node_absent_names_the_scale_set_of_a_vm_the_discovery_does_not_find(admin, emulator, orchestration):
    """azure.resource_group names a resource group without these scale sets, so the discovery finds neither. A VM
    asked for in the wrong one is not absent: the VM's own scale set is read (a Uniform providerID names it, a
    Flexible VM references it), the task fails naming both, and nothing is deleted."""
    image = admin.create_image(unique("img"))
    home = admin.create_group(unique("home"), "worker", 1, image, orchestration=orchestration)
    other = admin.create_group(unique("other"), "worker", 0, image, orchestration=orchestration)
    wait_running(admin, home, 1)
    vm = group_state(admin, home)["vms"][0]
    provider_id = "azure://" + vm["id"].replace("/resourceGroups/%s/" % emu.RESOURCE_GROUP,
                                                "/resourceGroups/%s/" % emu.RESOURCE_GROUP.lower())
    options = admin.provider_options()
    options["azure"]["resource_group"] = "rg-without-them"
    result = run_module("csp_node", dict(options, state="absent", cluster_check=False, group=other, provider_id=[provider_id]))
    assert result["failed"] and result["reason"] == "other_group", result
    assert "%s is not in scaling group %s but in " % (provider_id, other) in result["msg"], result["msg"]
    assert [e["group"].lower() for e in result["other_group"]] == [home.lower()], result["other_group"]
    assert "nothing was deleted" in result["msg"] and "Set group" in result["msg"], result["msg"]
    assert capacity(emulator, home) == 1 and len(group_state(admin, home)["vms"]) == 1


def test_csp_node_quota_is_reported_not_failed(admin, emulator):
    image = admin.create_image(unique("img"))
    group_id = admin.create_group(unique("workers"), "worker", 1, image)
    with emulator.lock:
        in_use = emulator._vm_count()  # pylint: disable=protected-access
    admin.set_faults(quota=in_use + 1)
    result = run_module("csp_node", args(admin, group=group_id, count=3))
    assert not result["failed"], result.get("msg")
    assert result["changed"] is True and len(result["instances"]) == 1
    assert result["quota_exceeded"] is True and "quota" in result["quota_message"].lower()
    assert capacity(emulator, group_id) == 2


@pytest.mark.parametrize("extra,expected", [
    (dict(group="workers"), "virtualMachineScaleSets/<scale-set>"),
    (dict(state="absent", cluster_check=False, provider_id=["aws:///eu-west-1a/i-0123"]), "virtualMachines/<instance-id>"),
])
def test_csp_node_bad_references_fail_clearly(admin, extra, expected):
    result = run_module("csp_node", args(admin, **extra))
    assert result["failed"] and expected in result["msg"]
    assert result.get("changed", False) is False


def test_secrets_never_show_and_env_credentials_work(admin, emulator):
    image = admin.create_image(unique("img"))
    group_id = admin.create_group(unique("workers"), "worker", 1, image)
    options = admin.provider_options()["azure"]
    env = {"AZURE_SUBSCRIPTION_ID": options["subscription_id"], "AZURE_ACCESS_TOKEN": "env-token-value-123",
           "AZURE_SECRET": "client-secret-value-456", "AZURE_CLIENT_ID": "app", "AZURE_TENANT": "tenant"}
    result = run_module("csp_node_info", {"provider": "azure", "group": group_id,
                                          "azure": {"endpoint": options["endpoint"], "ca_bundle": options["ca_bundle"]}},
                        env=env)
    assert not result["failed"], result.get("msg")
    assert len(result["instances"]) == 1
    text = json.dumps(result)
    assert "env-token-value-123" not in text and "client-secret-value-456" not in text

    given = run_module("csp_node_info", args(admin, group=group_id,
                                             azure=dict(options, secret="client-secret-value-456")))
    assert "client-secret-value-456" not in json.dumps(given)
    assert "sandbox-token" not in json.dumps(given)


def test_csp_scaling_group_sets_image_idempotently_with_diff(admin, emulator):
    old = admin.create_image(unique("old"))
    new = admin.create_image(unique("new"), kind="community")
    groups = [admin.create_group(unique("cp"), "control-plane", 1, old),
              admin.create_group(unique("workers"), "worker", 2, old)]

    checked = run_module("csp_scaling_group", args(admin, group=groups, image=new), check=True, diff=True)
    assert not checked["failed"], checked.get("msg")
    assert checked["changed"] is True and sorted(checked["changed_groups"]) == sorted(groups)
    assert checked["diff"]["before"] == {g: old for g in groups}
    assert checked["diff"]["after"] == {g: new for g in groups}
    assert {model_image(admin, g) for g in groups} == {old}

    result = run_module("csp_scaling_group", args(admin, group=groups, image=new.lower()), diff=True)
    assert not result["failed"], result.get("msg")
    assert result["changed"] is True and result["image"] == new
    again = run_module("csp_scaling_group", args(admin, group=groups, image=new))
    assert again["changed"] is False and again["changed_groups"] == []
    assert {model_image(admin, g) for g in groups} == {new}
    assert {g["role"] for g in again["groups"]} == {"control-plane", "worker"}
    # existing VMs keep their image; only the model changed
    assert {emu.image_string(vm["properties"]["storageProfile"]["imageReference"])
            for g in groups for vm in group_state(admin, g)["vms"]} == {old}


@pytest.mark.parametrize("image,expected", [
    ("ubuntu", "expected one of"),
    ("nope:offer:sku:1.0.0", "HTTP 404"),
    ("/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/galleries/g/images/x/versions/9.9.9"
     % (emu.SUBSCRIPTION, emu.RESOURCE_GROUP), "HTTP 404"),
])
def test_csp_scaling_group_bad_image_changes_nothing(admin, image, expected):
    old = admin.create_image(unique("old"))
    group_id = admin.create_group(unique("workers"), "worker", 1, old)
    result = run_module("csp_scaling_group", args(admin, group=[group_id], image=image))
    assert result["failed"] and expected in result["msg"]
    assert model_image(admin, group_id) == old
