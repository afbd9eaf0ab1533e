"""Option validation of etcd_member_remove (pure: nothing is contacted)."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import etcd

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def params(tmp_path):
    files = {}
    for option in ("ca_cert", "client_cert", "client_key"):
        path = tmp_path / (option + ".pem")
        path.write_text("x")
        files[option] = str(path)
    defaults = {name: spec.get("default") for name, spec in etcd.REMOVE_ARGUMENT_SPEC.items()}
    defaults.update(files, node_ip="10.0.0.5")
    return defaults


def test_defaults_are_kubeadm_paths():
    spec = etcd.REMOVE_ARGUMENT_SPEC
    assert spec["ca_cert"]["default"] == "/etc/kubernetes/pki/etcd/ca.crt"
    assert spec["client_cert"]["default"].startswith("/etc/kubernetes/pki/etcd/")
    assert spec["client_key"]["no_log"] is False  # a path, not key material
    assert spec["endpoints"]["default"] == ["https://127.0.0.1:2379"]


def test_valid_options_pass(params):
    assert etcd.validate_remove(params) == []


@pytest.mark.parametrize("change,fragment", [
    ({"endpoints": []}, "at least one client URL"),
    ({"endpoints": ["127.0.0.1:2379"]}, "endpoints:"),
    ({"node_ip": "cp-1"}, "is not an IP address"),
    ({"node_ip": None, "peer_url": "https://10.0.0.5:2380/path"}, "peer_url:"),
    ({"node_ip": None, "member_name": ""}, "member_name must not be empty"),
    ({"peer_port": 0}, "peer_port"),
    ({"timeout": 0}, "timeout must be a whole number from 1 to 2592000 (seconds), got 0"),
    ({"request_timeout": -1.0}, "request_timeout must be positive"),
    ({"expected_member_count": 0}, "expected_member_count"),
    ({"ca_cert": "/nonexistent/ca.crt"}, "ca_cert /nonexistent/ca.crt does not exist"),
])
def test_invalid_options_are_named(params, change, fragment):
    params.update(change)
    problems = etcd.validate_remove(params)
    assert any(fragment in p for p in problems), problems


def test_plain_http_endpoints_need_no_certificate_files(params):
    params.update(endpoints=["http://127.0.0.1:2379"], ca_cert="/nonexistent", client_cert="/nonexistent",
                  client_key="/nonexistent")
    assert etcd.validate_remove(params) == []


def test_member_labels():
    members = [{"name": "", "id_hex": "11", "peer_urls": ["https://10.0.0.9:2380"]}]
    assert etcd.member_labels(members) == ["<unstarted> 11 https://10.0.0.9:2380"]
