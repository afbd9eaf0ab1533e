"""The AWS emulator against the request shapes boto3 really sends, so it does not drift into accepting
what AWS would reject.

tests/fixtures/aws_request_shapes.json holds every (service, method, path, action, parameter keys)
the provider sends, recorded from the emulator's request log while the provider runs all its paths.
Re-record after a deliberate change with KUBENODES_RECORD_SHAPES=1.
"""

import json
import os
import pathlib
import time

import pytest
import requests

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import aws, base
from sandbox.clouds import aws as emulator_module
from sandbox.clouds.aws import AwsEmulator

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

FIXTURE = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "aws_request_shapes.json"


def _key(shape):
    return (shape["service"], shape["method"], shape["path"], shape["action"], tuple(shape["params"]))


@pytest.fixture(scope="module")
def emulator():
    emu = AwsEmulator().start()
    try:
        yield emu
    finally:
        emu.stop()


def _exercise(provider, admin):
    """Every code path of the provider that talks to AWS."""
    base_image, next_image = admin.create_image("shape-a"), admin.create_image("shape-b")
    group = admin.create_group("shapes", "worker", 1, base_image)
    provider.list_groups()
    provider.list_groups([group])
    provider.list_instances(group)
    provider.instance_headroom([group])                 # Service Quotas and DescribeInstanceTypes
    created = provider.create_instance(group)
    provider.group_image(group)
    provider.validate_image(base_image)
    with pytest.raises(base.NotFoundError):
        provider.validate_image("ami-0123456789abcdef0")
    provider.set_group_image(group, next_image)
    provider.set_group_image(group, next_image)
    described = admin.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"][0]
    admin.autoscaling.update_auto_scaling_group(AutoScalingGroupName=group, LaunchTemplate={
        "LaunchTemplateId": described["LaunchTemplate"]["LaunchTemplateId"], "Version": "1"})
    assert provider.set_group_image(group, next_image)  # pinned to the old version: moved to $Default
    provider.delete_instance(created.provider_id)
    provider.delete_instance(created.provider_id)       # terminating (the emulator's terminate_delay): nothing sent
    deadline = time.monotonic() + 30
    while created.provider_id in [i.provider_id for i in provider.list_instances(group)]:
        assert time.monotonic() < deadline, "the terminated instance is still listed"
        time.sleep(0.2)
    provider.delete_instance(created.provider_id)       # gone: describe_instances by ID
    # The cloud settings a run neutralises and restores (cloud_settings.py).
    provider.set_run_setting(group, "AZRebalance", "suspended")
    provider.restore_problem(group, "AZRebalance", "active")
    provider.set_run_setting(group, "AZRebalance", "active")
    provider.set_run_setting(group, "MinSize", 1)
    provider.restore_problem(group, "MinSize", 0)
    provider.set_run_setting(group, "MinSize", 0)
    admin.set_faults(quota=0)
    with pytest.raises(base.QuotaError):
        provider.create_instance(group)                 # scaling activities
    admin.set_faults()


def test_provider_sends_only_recorded_shapes(emulator):
    admin = emulator.admin()
    admin.clear_requests()
    provider = aws.from_params(admin.provider_options()["aws"])
    provider.poll_interval = 0.05
    _exercise(provider, admin)
    seen = {_key(r): r for r in admin.requests()}
    shapes = sorted(({k: v for k, v in r.items() if k != "fault"} for r in seen.values()), key=_key)
    if os.environ.get("KUBENODES_RECORD_SHAPES") == "1":
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(json.dumps(shapes, indent=1) + "\n")
    recorded = {_key(s) for s in json.loads(FIXTURE.read_text())}
    assert {_key(s) for s in shapes} == recorded, "the provider's requests changed; re-record deliberately"


def test_emulator_accepts_exactly_the_recorded_actions():
    recorded = json.loads(FIXTURE.read_text())
    by_service = {}
    for shape in recorded:
        assert shape["method"] == "POST" and shape["path"] == "/"
        by_service.setdefault(shape["service"], set()).add(shape["action"])
    assert by_service == emulator_module.SUPPORTED_ACTIONS


def _raw(endpoint, method, path, service, body=""):
    # A SigV4-shaped Authorization header is all the emulator needs to tell the service apart.
    headers = {"Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/%s/aws4_request, "
                                "SignedHeaders=host, Signature=0" % service,
               "Content-Type": "application/x-www-form-urlencoded"}
    session = requests.Session()
    session.trust_env = False
    return session.request(method, endpoint + path, data=body, headers=headers, timeout=10)


@pytest.mark.parametrize("method, path, service, body, marker", [
    ("POST", "/", "ec2", "Action=DescribeVpcs&Version=2016-11-15", b"<Response><Errors><Error><Code>InvalidAction"),
    ("POST", "/", "autoscaling", "Action=StartInstanceRefresh&Version=2011-01-01",
     b"<ErrorResponse xmlns=\"http://autoscaling.amazonaws.com/doc/2011-01-01/\"><Error><Type>Sender</Type>"
     b"<Code>InvalidAction"),
    ("GET", "/", "ec2", "", b"<Code>InvalidAction"),
    ("POST", "/moto-api/reset", "ec2", "", b"<Code>InvalidAction"),
    ("PUT", "/2015-03-31/functions", "lambda", "", b"<Code>InvalidAction"),
])
def test_unknown_actions_paths_and_methods_are_rejected_in_aws_format(emulator, method, path, service, body, marker):
    answer = _raw(emulator.endpoint, method, path, service, body)
    assert answer.status_code == 400
    assert marker in answer.content


def test_boto3_sees_an_unsupported_action_as_invalid_action(emulator):
    import boto3
    import botocore.exceptions

    client = boto3.client("ec2", endpoint_url=emulator.endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    with pytest.raises(botocore.exceptions.ClientError) as err:
        client.describe_vpcs()
    assert err.value.response["Error"]["Code"] == "InvalidAction"
