"""The AWS credential names amazon.aws reads and AWX's AWS credential writes, through Ansible's own
argument-spec validation (env fallbacks), into a real boto3 session; aws_config and
debug_botocore_endpoint_logs as in amazon.aws."""

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import aws, factory
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers.base import ProviderError

AWS_ENV = sorted({name for spec in aws.ARG_SPEC.values() if "fallback" in spec for name in spec["fallback"][1]}
                 | {"AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"})


@pytest.fixture
def env(monkeypatch, tmp_path):
    for name in AWS_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))

    def options(**variables):
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        result = ArgumentSpecValidator(aws.ARG_SPEC).validate({})
        assert not result.error_messages, result.error_messages
        return result.validated_parameters
    return options


def _credentials(provider):
    creds = provider.ec2._request_signer._credentials
    return creds.access_key, creds.secret_key, creds.token


def test_awx_aws_credential_with_a_security_token(env):
    # What AWX's injector writes for an AWS credential with an STS token.
    options = env(AWS_ACCESS_KEY_ID="AKIAAWX", AWS_SECRET_ACCESS_KEY="awx-secret", AWS_SECURITY_TOKEN="awx-token",
                  AWS_REGION="eu-west-1")
    assert (options["access_key"], options["session_token"]) == ("AKIAAWX", "awx-token")
    assert _credentials(aws.from_params(options)) == ("AKIAAWX", "awx-secret", "awx-token")


def test_the_older_names_amazon_aws_reads(env):
    options = env(AWS_ACCESS_KEY="AKIAOLD", AWS_SECRET_KEY="old-secret", AWS_URL="http://127.0.0.1:1",
                  AWS_DEFAULT_REGION="us-east-2")
    assert (options["access_key"], options["secret_key"], options["endpoint_url"]) == (
        "AKIAOLD", "old-secret", "http://127.0.0.1:1")
    provider = aws.from_params(options)
    assert _credentials(provider)[:2] == ("AKIAOLD", "old-secret")
    assert provider.ec2.meta.endpoint_url == "http://127.0.0.1:1" and provider.region == "us-east-2"


def test_aws_default_profile_names_the_profile(env, tmp_path):
    (tmp_path / "credentials").write_text("[ops]\naws_access_key_id = AKIAOPS\naws_secret_access_key = ops-secret\n")
    options = env(AWS_DEFAULT_PROFILE="ops", AWS_REGION="eu-west-1")
    assert options["profile"] == "ops"
    assert _credentials(aws.from_params(options))[:2] == ("AKIAOPS", "ops-secret")


def test_aws_config_reaches_the_clients_but_not_their_retries():
    config = aws.client_config({"read_timeout": 7, "max_pool_connections": 3, "retries": {"max_attempts": 9}})
    assert (config.read_timeout, config.max_pool_connections, config.connect_timeout) == (7, 3, 10)
    assert config.retries["total_max_attempts"] == 1 and "max_attempts" not in config.retries
    assert config.user_agent_extra == "kubenodes.image_upgrade"
    with pytest.raises(ProviderError, match="aws.aws_config: .*no_such_option"):
        aws.client_config({"no_such_option": 1})


def test_debug_botocore_endpoint_logs_records_the_actions(env):
    options = env(AWS_ACCESS_KEY_ID="AKIA", AWS_SECRET_ACCESS_KEY="s", AWS_REGION="eu-west-1",
                  ANSIBLE_DEBUG_BOTOCORE_LOGS="true")
    assert options["debug_botocore_endpoint_logs"] is True
    provider = aws.from_params(options)
    assert factory.provider_extras(provider) == {"resource_actions": []}
    provider.resource_actions.extend(["ec2:DescribeInstances", "autoscaling:DescribeAutoScalingGroups",
                                      "ec2:DescribeInstances"])
    assert factory.provider_extras(provider) == {
        "resource_actions": ["autoscaling:DescribeAutoScalingGroups", "ec2:DescribeInstances"]}
    quiet = aws.from_params(dict(options, debug_botocore_endpoint_logs=False))
    assert factory.provider_extras(quiet) == {}
    assert aws.action_name("ec2", "RunInstances") == "ec2:RunInstances"
