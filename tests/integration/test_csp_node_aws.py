"""csp_node on AWS specifics: credentials from the AWS_* environment (as AWX injects them) and kept out of
the output, the amazon.aws aliases, retries inside one task, a providerID error naming the format, and
instances that join the sandbox cluster as Nodes with the providerID a kubelet would write."""

import json
import time

import pytest

from sandbox.clouds.aws import AwsEmulator
from tests.ansible_run import run_module

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

SECRET = "s3cr3t-Value-Not-For-Logs"


@pytest.fixture(scope="module")
def emulator():
    emu = AwsEmulator().start()
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture(scope="module")
def group(emulator):
    admin = emulator.admin()
    return admin.create_group("envgroup", "worker", 2, admin.create_image("env-base"))


def _env(emulator):
    return {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": emulator.region,
            "AWS_ENDPOINT_URL": emulator.endpoint}


def test_credentials_from_environment_and_never_in_output(emulator, group):
    result = run_module("csp_node_info", {"provider": "aws", "group": group}, env=_env(emulator))
    assert not result["failed"], result.get("msg")
    assert len(result["instances"]) == 2
    assert SECRET not in json.dumps(result)
    # the same secret given as an option (with an amazon.aws alias) is masked too
    args = {"provider": "aws", "group": group,
            "aws": {"aws_region": emulator.region, "aws_endpoint_url": emulator.endpoint,
                    "aws_access_key_id": "AKIDEXAMPLE", "aws_secret_access_key": SECRET}}
    result = run_module("csp_node_info", args)
    assert not result["failed"], result.get("msg")
    assert SECRET not in json.dumps(result)


def test_older_amazon_aws_variable_names_and_the_called_actions(emulator, group):
    """AWS_ACCESS_KEY, AWS_SECRET_KEY, AWS_SECURITY_TOKEN (what AWX writes for an STS token) and AWS_URL, as
    amazon.aws reads them; debug_botocore_endpoint_logs returns the actions called."""
    env = {"AWS_ACCESS_KEY": "AKIDEXAMPLE", "AWS_SECRET_KEY": SECRET, "AWS_SECURITY_TOKEN": SECRET + "-token",
           "AWS_DEFAULT_REGION": emulator.region, "AWS_URL": emulator.endpoint, "ANSIBLE_DEBUG_BOTOCORE_LOGS": "1"}
    result = run_module("csp_node_info", {"provider": "aws", "group": group}, env=env)
    assert not result["failed"], result.get("msg")
    assert len(result["instances"]) == 2
    assert "autoscaling:DescribeAutoScalingGroups" in result["resource_actions"], result["resource_actions"]
    assert SECRET not in json.dumps(result)
    groups = run_module("csp_scaling_group_info", {"provider": "aws", "group": [group]}, env=env)
    assert not groups["failed"] and [g["id"] for g in groups["groups"]] == [group], groups
    assert "resource_actions" in groups


def test_option_beats_environment(emulator, group):
    # eu-west-1 is another region of the emulator: the group is not there
    result = run_module("csp_node_info", {"provider": "aws", "group": group,
                                          "aws": {"region": "eu-west-1"}}, env=_env(emulator))
    assert result["failed"] and group in result["msg"] and "not exist" in result["msg"]


def test_throttling_is_retried_within_the_task(emulator, group):
    admin = emulator.admin()
    admin.clear_requests()
    admin.set_faults(fail_next=2, codes=(429,))
    try:
        result = run_module("csp_node_info", {"provider": "aws", "group": group}, env=_env(emulator))
    finally:
        admin.set_faults()
    assert not result["failed"], result.get("msg")
    assert [r["fault"] for r in admin.requests()[:3]] == ["Throttling", "Throttling", None]


def test_malformed_provider_id_names_the_format(emulator, group):
    result = run_module("csp_node", {"provider": "aws", "state": "absent", "cluster_check": False, "provider_id": ["aws:///us-east-1a"]},
                        env=_env(emulator))
    assert result["failed"] and "aws:///<availability-zone>/<instance-id>" in result["msg"]


def test_instances_join_the_sandbox_as_nodes(sandbox, cloud_admin):
    admin = cloud_admin("aws")
    group = admin.create_group("joiners-%d" % int(time.time() * 1000), "worker", 1, admin.create_image("join-base"))
    options = admin.provider_options()
    created = run_module("csp_node", dict(options, state="present", group=group, count=1, wait=True,
                                          wait_timeout=60, wait_sleep=1))
    assert not created["failed"], created.get("msg")
    name, provider_id = created["node_names"][0], created["provider_ids"][0]
    sandbox.wait_nodes_ready([name], timeout=90)
    node = sandbox.core_v1().read_node(name)
    assert node.spec.provider_id == provider_id
    gone = run_module("csp_node", dict(options, state="absent", cluster_check=False, provider_id=[provider_id]))
    assert not gone["failed"] and gone["changed"] is True
    deadline = time.monotonic() + 60
    while True:
        states = {i["provider_id"]: i["state"] for i in sandbox.nodesim.instances()}
        if states.get(provider_id) == "deleted" or provider_id not in states:
            break
        assert time.monotonic() < deadline, "the node simulator never saw %s deleted: %s" % (provider_id, states)
        time.sleep(0.5)
