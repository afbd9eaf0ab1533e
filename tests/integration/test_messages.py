"""Issue 13, item 3, on real parts: messages that lead somewhere. A TLS verification failure to the real
kube-apiserver names the CA options to set; a real etcd's peer port (an endpoint that answers, but not as etcd)
is named as not etcd, with the option to fix; an instance asked for in the wrong scaling group of the AWS
emulator, or in a group the discovery does not find, is named with its real group instead of answering
already_absent (the GCE and Azure twins are in test_provider_gce_modules and test_provider_azure_modules)."""

import uuid

import pytest

from tests.ansible_run import run_module
from test_etcd_member_remove import module_args
from test_etcd_member_remove import etcd_cluster  # noqa: F401 pylint: disable=unused-import # a fixture, used by name

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_an_untrusted_api_server_certificate_names_the_ca_options(sandbox, etcd_cluster):
    wrong_ca = etcd_cluster(1).client_tls()[0]      # a real CA, but not the one that signed the API server's certificate
    result = run_module("upgrade_journal", dict(host=sandbox.apiserver, ca_cert=wrong_ca, state="absent",
                                                client_cert=sandbox.state["admin_cert"],
                                                client_key=sandbox.state["admin_key"]))
    assert result["failed"] and result["reason"] == "tls_error", result
    msg = result["msg"]
    assert "could not be verified" in msg and sandbox.apiserver in msg, msg
    assert "ca_cert is %s" % wrong_ca in msg and "certificate-authority" in msg and "validate_certs" in msg, msg


def test_an_endpoint_that_answers_but_is_not_etcd_is_named(etcd_cluster):
    cluster = etcd_cluster(1)
    [name] = cluster.members
    peer = cluster.peer_url(name)             # etcd's peer port: TLS with the same CA, but no client API
    args = module_args(cluster, endpoints=[peer])
    args.pop("timeout")
    result = run_module("etcd_member_info", args)
    assert result["failed"], result
    msg = result["msg"]
    assert "not etcd's client API" in msg and peer in msg, msg
    assert "set endpoints" in msg and "2379" in msg, msg


def test_an_instance_in_another_group_is_not_already_absent(sandbox, cloud_admin):
    admin = cloud_admin("aws")
    tag = uuid.uuid4().hex[:8]
    image = admin.create_image("msg-" + tag)
    home, other = admin.create_group("home-" + tag, "worker", 1, image), admin.create_group("other-" + tag, "worker", 0, image)
    [(instance, _state)] = admin.group_instances(home)
    cloud = admin.provider_options()
    for target in (dict(node_name=[instance]), dict(provider_id=["aws:///%s/%s" % (admin.region + "a", instance)])):
        result = run_module("csp_node", dict(cloud, state="absent", cluster_check=False, group=other, **target))
        assert result["failed"] and result["reason"] == "other_group", result
        assert "is not in scaling group %s but in %s" % (other, home) in result["msg"], result["msg"]
        assert "Set group" in result["msg"] and result["deleted"] == []
    # Groups the discovery does not find (neither carries these aws.group_tags): the instance's own group comes
    # from DescribeAutoScalingInstances, with the group named or not.
    undiscovered = dict(cloud, aws=dict(cloud["aws"], group_tags={"kubenodes-msg": tag}))
    provider_id = "aws:///%s/%s" % (admin.region + "a", instance)
    for scope, searched in ((dict(group=other), "scaling group %s" % other), ({}, "the scaling groups searched (none found)")):
        result = run_module("csp_node", dict(undiscovered, state="absent", cluster_check=False, provider_id=[provider_id], **scope))
        assert result["failed"] and result["reason"] == "other_group", result
        assert "%s is not in %s but in %s" % (provider_id, searched, home) in result["msg"], result["msg"]
        assert result["other_group"] == [dict(requested=provider_id, provider_id=provider_id, node_name="", group=home)]
        assert "nothing was deleted" in result["msg"] and "Set group" in result["msg"], result["msg"]
    assert [i for i, _s in admin.group_instances(home)] == [instance]     # nothing was deleted
