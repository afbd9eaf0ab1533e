"""The pure parts of issue 13 item 3's messages: which transport errors are TLS verification failures of the
API server, and which HTTP answers cannot come from etcd's v3 gateway."""

import ssl

from urllib3.exceptions import MaxRetryError, SSLError

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import etcd, kube


class _Client:
    class configuration:  # pylint: disable=invalid-name,too-few-public-methods
        host = "https://10.0.0.1:6443"
        ssl_ca_cert = "/etc/ca.pem"


def _verify_failure(text):
    return MaxRetryError(None, "/api/v1/nodes", reason=SSLError(ssl.SSLCertVerificationError(1, text)))


def test_an_untrusted_certificate_names_the_ca_options_and_the_value():
    error = kube.tls_verify_error("GET", "/api/v1/nodes", _verify_failure(
        "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain"), _Client)
    assert error.reason == kube.TLS_REASON and error.status == 0
    assert "ca_cert is /etc/ca.pem" in error.message and "certificate-authority" in error.message
    assert "validate_certs" in error.message and "https://10.0.0.1:6443" in error.message


def test_a_certificate_for_another_host_names_the_host_option():
    error = kube.tls_verify_error("GET", "/api", _verify_failure(
        "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: Hostname mismatch, certificate is not valid"), _Client)
    assert "does not name the host https://10.0.0.1:6443" in error.message and "set host" in error.message


def test_other_transport_errors_are_not_tls_verification_failures():
    assert kube.tls_verify_error("GET", "/api", ConnectionRefusedError("refused"), _Client) is None


def test_what_etcd_answers_is_etcd():
    assert etcd.not_etcd_reason("/v3/cluster/member/list", 200, {"header": {}, "members": []}, "") is None
    assert etcd.not_etcd_reason("/v3/cluster/member/remove", 404, {"error": "member not found", "code": 5}, "") is None
    assert etcd.not_etcd_reason("/health", 503, {"health": "false"}, "") is None
    # etcd's gateway answers a MoveLeader with an empty object (empty fields are left out).
    assert etcd.not_etcd_reason("/v3/maintenance/transfer-leadership", 200, {}, "{}") is None


def test_what_others_answer_is_named():
    status = {"kind": "Status", "apiVersion": "v1", "message": "forbidden", "code": 403}
    assert "Kubernetes API server" in etcd.not_etcd_reason("/v3/cluster/member/list", 403, status, "")
    assert "404 page not found" in etcd.not_etcd_reason("/v3/cluster/member/list", 404, None, "404 page not found\n")
    assert "without etcd's response header" in etcd.not_etcd_reason("/v3/maintenance/status", 200, {"ok": True}, "")
    assert "an empty body" in etcd.not_etcd_reason("/v3/maintenance/status", 502, None, "")
