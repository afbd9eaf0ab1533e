"""Where each provider looks for the scaling groups, in the words of the options that set it (issue 28 item 7: a
wrong subscription, project or region is named when nodes are in none of the groups found). No call is made."""

import boto3

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import aws, azure


def test_azure_names_the_subscription_and_the_resource_group():
    assert azure.AzureProvider(None, "0000-1111").searched() == (
        "Azure subscription 0000-1111 (azure.subscription_id or AZURE_SUBSCRIPTION_ID)")
    assert azure.AzureProvider(None, "0000-1111", resource_group="rg").searched().endswith(
        ", resource group rg (azure.resource_group)")


def test_aws_names_the_region():
    session = boto3.session.Session(region_name="eu-north-1", aws_access_key_id="AKIAEXAMPLE", aws_secret_access_key="x")
    assert aws.AwsProvider(session).searched() == "AWS region eu-north-1 (aws.region or AWS_REGION)"
