"""TLS verification is on unless the user turns it off: the clients the collection builds for Kubernetes,
etcd and AWS verify certificates with default options (GCE and Azure take the SDK's verifying default and
only ever add a CA bundle: gcp.ca_bundle, azure.ca_bundle). Built for real, nothing contacted."""

import os

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import etcd, kube
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import aws, gce, azure


def test_kubernetes_client_verifies_by_default(monkeypatch):
    for name in list(os.environ):
        if name.startswith("K8S_AUTH_"):
            monkeypatch.delenv(name)
    client = kube.build_api_client({"host": "https://kube.example.com:6443", "api_key": "t"})
    assert client.configuration.verify_ssl is True
    client = kube.build_api_client({"host": "https://kube.example.com:6443", "api_key": "t", "validate_certs": False})
    assert client.configuration.verify_ssl is False  # only when asked


def test_etcd_session_verifies_by_default():
    options = {key: spec.get("default") for key, spec in etcd.CONNECTION_ARG_SPEC.items()}
    client = etcd.EtcdClient(options["endpoints"], None, None, None)
    assert client._session().verify is True  # pylint: disable=protected-access
    assert etcd.EtcdClient(options["endpoints"], "/ca.crt")._session().verify == "/ca.crt"  # pylint: disable=protected-access


def test_aws_clients_verify_by_default():
    options = {key: spec.get("default") for key, spec in aws.ARG_SPEC.items()}
    assert options["validate_certs"] is True
    provider = aws.from_params(dict(options, region="us-east-1", access_key="a", secret_key="s"))
    for client in (provider.ec2, provider.autoscaling):
        # True, or the CA bundle of the environment (REQUESTS_CA_BUNDLE is set on this machine and in CI)
        verify = client._endpoint.http_session._verify  # pylint: disable=protected-access
        assert verify is True or (isinstance(verify, str) and os.path.isfile(verify)), verify


def test_gce_and_azure_have_no_switch_to_turn_verification_off():
    for spec in (gce.ARG_SPEC, azure.ARG_SPEC):
        assert not {"validate_certs", "verify_ssl", "verify", "insecure"} & set(spec)
