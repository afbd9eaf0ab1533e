"""The plain-http rule: a plain http:// endpoint outside loopback is named in a warning; https://, loopback
(the sandbox's emulators) and the options of another provider stay quiet."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import plain_http


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.4.5", "localhost", "LOCALHOST", "api.localhost", "[::1]"])
def test_loopback_is_quiet(host):
    assert plain_http.plain_http_host("http://%s:8080/compute/v1/" % host) is None


@pytest.mark.parametrize("url", ["https://compute.example.com", "HTTPS://10.0.0.1:2379", "compute.example.com",
                                 "", None, "http://", "http://[not-an-ip/", 42])
def test_not_plain_http_is_quiet(url):
    assert plain_http.plain_http_host(url) is None


@pytest.mark.parametrize("url, host", [("http://10.0.0.5:2379", "10.0.0.5"), ("HTTP://Compute.Example.com/", "compute.example.com"),
                                       ("http://[fd00::1]:2379", "fd00::1"), (" http://128.0.0.1 ", "128.0.0.1"),
                                       ("http://localhost.example.com", "localhost.example.com")])
def test_plain_http_elsewhere_is_named(url, host):
    assert plain_http.plain_http_host(url) == host


def test_every_endpoint_option_is_checked_and_named():
    params = {
        "host": "http://kube.example.com:8080", "kubeconfig": None,
        "endpoints": ["https://10.0.0.1:2379", "http://10.0.0.2:2379", "http://127.0.0.1:2379"],
        "provider": "gcp",
        "gcp": {"endpoint": "http://compute.example.com/compute/v1/"},
        "aws": {"endpoint_url": "http://ec2.example.com"},
    }
    messages = plain_http.warnings(params, environ={})
    assert len(messages) == 3, messages
    host, etcd, gce = messages
    assert host.startswith("host is a plain http:// URL (http://kube.example.com:8080)")
    assert etcd.startswith("endpoints is a plain http:// URL (http://10.0.0.2:2379)")
    assert gce.startswith("gcp.endpoint is a plain http:// URL (http://compute.example.com/compute/v1/)")
    assert all("Use https://" in m for m in messages)


@pytest.mark.parametrize("provider, option, field", [("gcp", "gcp.endpoint", "endpoint"), ("aws", "aws.endpoint_url", "endpoint_url"),
                                                     ("azure", "azure.endpoint", "endpoint"),
                                                     ("azure", "azure.adfs_authority_url", "adfs_authority_url")])
def test_each_cloud_endpoint(provider, option, field):
    params = {"provider": provider, provider: {field: "http://203.0.113.7:8080"}}
    [message] = plain_http.warnings(params, environ={})
    assert message.startswith(option + " is a plain http:// URL (http://203.0.113.7:8080)")
    params[provider][field] = "http://127.0.0.1:8080"
    assert plain_http.warnings(params, environ={}) == []


def test_only_the_chosen_provider_counts_and_a_module_without_provider_checks_all():
    params = {"provider": "aws", "gcp": {"endpoint": "http://compute.example.com"}, "aws": {}}
    assert plain_http.warnings(params, environ={}) == []
    params.pop("provider")
    assert len(plain_http.warnings(params, environ={})) == 1


def test_kube_host_from_the_environment():
    params = {"host": None, "kubeconfig": None}
    [message] = plain_http.warnings(params, environ={"K8S_AUTH_HOST": "http://10.1.1.1:8080"})
    assert "host is a plain http:// URL (http://10.1.1.1:8080)" in message
    # A module without kube options (a cloud module) ignores K8S_AUTH_HOST.
    assert plain_http.warnings({"provider": "gcp", "gcp": {}}, environ={"K8S_AUTH_HOST": "http://10.1.1.1"}) == []


def test_warn_calls_module_warn():
    class Module:
        params = {"endpoints": ["http://192.0.2.1:2379"]}
        said = []

        def warn(self, message):
            self.said.append(message)

    module = Module()
    plain_http.warn(module, environ={})
    assert len(module.said) == 1 and "192.0.2.1" in module.said[0]
