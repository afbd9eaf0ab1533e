"""The Azure emulator inside the real sandbox: scale-set VMs it boots join the cluster as Nodes (through the
node simulator) with exactly the name and providerID the provider predicted, and deleted VMs' Nodes go."""

import time

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import azure as az
from tests.ansible_run import run_module

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]


def _node(sandbox, name):
    from kubernetes import client
    try:
        return sandbox.core_v1().read_node(name)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _ready(node):
    return node is not None and any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def test_created_vms_join_as_predicted_and_deleted_ones_leave(sandbox, cloud_admin):
    admin = cloud_admin("azure")
    options = {name: spec.get("default") for name, spec in az.ARG_SPEC.items()}
    options.update(admin.provider_options()["azure"])
    provider = az.from_params(options)
    image = admin.create_image("sbx-%d" % int(time.time()))
    group_id = admin.create_group("sbx%d" % (int(time.time()) % 100000), "worker", 1, image)

    heir = provider.create_instance(group_id)
    assert provider.wait_running([heir.provider_id], timeout=60)[heir.provider_id] == "running"
    sandbox.wait_nodes_ready([heir.node_name], timeout=120)
    node = _node(sandbox, heir.node_name)
    assert node.spec.provider_id == heir.provider_id
    assert provider.normalize_provider_id(node.spec.provider_id) == provider.normalize_provider_id(heir.provider_id)

    # A wrong subscription finds none of the groups: the node is in none of the listed scaling groups, and where they
    # were looked for is named (issue 28 item 7: the subscription was never named).
    wrong = "00000000-0000-4000-8000-00000000beef"
    cloud = admin.provider_options()
    cloud["azure"] = dict(cloud["azure"], subscription_id=wrong)
    facts = run_module("node_image_facts", dict(sandbox.auth_args(), image=image, **cloud))
    assert not facts.get("failed"), facts.get("msg")
    assert facts["searched"].startswith("Azure subscription %s (azure.subscription_id or AZURE_SUBSCRIPTION_ID)" % wrong)
    [entry] = [n for n in facts["nodes"]["invalid"] if n["name"] == heir.node_name]
    assert "in none of the listed scaling groups" in entry["reason"], entry

    assert provider.delete_instance(heir.provider_id) is True
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        node = _node(sandbox, heir.node_name)
        if not _ready(node):
            break
        time.sleep(0.5)
    assert not _ready(_node(sandbox, heir.node_name)), "the deleted VM's node is still Ready"
