"""Unit tests of the module base: secrets never leave a module, on the error paths above all.

Each test runs a real module class (or a real module's main()) in-process with patch_module_args, against
real parts where there is I/O (a local HTTP server that echoes the credentials it receives), and greps the
whole JSON the module printed for the canary, in every spelling (raw, JSON-escaped, repr-escaped).
"""

from __future__ import annotations

import http.server
import json
import threading

import pytest
from ansible.module_utils._internal import _traceback
from ansible.module_utils.common import warnings as ansible_warnings
from ansible.module_utils.common.parameters import PASS_VARS
from ansible.module_utils.testing import patch_module_args

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import base, lease
from ansible_collections.kubenodes.image_upgrade.plugins.modules import node_delete, upgrade_lock

CANARY = "canary-7f3a9c1e5b2d4e6f8091a2b3c4d5e6f7"
KEY_BODY = ["MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" + CANARY[:16], "BKcwggSjAgEAAoIBAQC7" + CANARY[16:]]
PRIVATE_KEY = "-----BEGIN PRIVATE KEY-----\n%s\n-----END PRIVATE KEY-----\n" % "\n".join(KEY_BODY)


@pytest.fixture(autouse=True)
def tracebacks_on(monkeypatch):
    """As at -vvv: tracebacks of errors and warnings go into the result."""
    monkeypatch.setattr(_traceback, "_module_tracebacks_enabled_events", frozenset(_traceback.TracebackEvent))
    # warnings and deprecations are collected per process: start each module run without earlier ones
    monkeypatch.setattr(ansible_warnings, "_global_warnings", {})
    monkeypatch.setattr(ansible_warnings, "_global_deprecations", {})


def leaks(text):
    """Every spelling of a secret found in `text`."""
    needles = [CANARY, CANARY[:16], CANARY[16:], json.dumps(PRIVATE_KEY)[1:-1], repr(PRIVATE_KEY)[1:-1]]
    needles += KEY_BODY
    return [n for n in needles if n in text]


def run_module(main, args, capsys):
    # ansible-core 2.21 returns the invocation (module_args) only when asked (INJECT_INVOCATION, as -vvv does);
    # ask for it where the core knows the switch, so the masking of module_args is checked on every core.
    if "inject_invocation" in PASS_VARS:
        args = dict(args, _ansible_inject_invocation=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            main()
    out = capsys.readouterr()
    text = out.out + out.err
    return json.loads(out.out), text


def kubeconfig_dict(token=CANARY, server="https://127.0.0.1:1", context="admin"):
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": token, "client-key-data": "a2V5" + CANARY}}],
        "contexts": [{"name": "admin", "context": {"cluster": "c", "user": "u"}}],
    }


# -- pure ---------------------------------------------------------------------------------------------

def test_secrets_in_finds_kubeconfig_and_gcp_key_values_at_any_depth():
    found = base.secrets_in(kubeconfig_dict())
    assert CANARY in found and "a2V5" + CANARY in found
    key = {"type": "service_account", "private_key": PRIVATE_KEY, "client_email": "sa@p.iam.gserviceaccount.com"}
    for given in (key, json.dumps(key)):
        found = base.secrets_in(given)
        assert json.dumps(PRIVATE_KEY)[1:-1] in found   # the JSON-escaped newlines
        assert all(line in found for line in KEY_BODY)
        assert "sa@p.iam.gserviceaccount.com" not in found   # not a secret: stays readable


def test_redact_masks_every_spelling_and_the_longest_first():
    secrets = base.spellings(PRIVATE_KEY)
    text = "key %s / %s / %r / line %s" % (PRIVATE_KEY, json.dumps({"k": PRIVATE_KEY}), PRIVATE_KEY, KEY_BODY[1])
    assert leaks(base.redact(text, secrets)) == []
    assert base.redact_data({"a": [text, ("x", text)]}, secrets)["a"][1][1].count(base.MASK) >= 1


def test_describe_error_says_what_to_do():
    msg, extra = base.describe_error(base.kube.KubeAuthError("no server"), "reading node x")
    assert msg.startswith("reading node x: Kubernetes authentication: no server") and "K8S_AUTH_" in msg
    assert extra["reason"] == "auth_error"
    msg, extra = base.describe_error(base.provider_base.ProviderError("throttled", status=429, retryable=True), "listing")
    assert "run again" in msg and extra["retryable"] is True


def test_data_of_an_unexpected_shape_is_not_called_a_connection_error():
    """Issue 28 item 7: "TypeError: 'int' object is not iterable (check that the endpoint is reachable...)"."""
    msg, extra = base.describe_error(TypeError("'int' object is not iterable"), "journal ConfigMap kube-system/j")
    assert msg.startswith("journal ConfigMap kube-system/j: TypeError: 'int' object is not iterable (data read from")
    assert "reachable" not in msg and "-vvv" in msg and extra["reason"] == "unexpected_error"
    msg, extra = base.describe_error(OSError("connection refused"), "reading")
    assert "reachable" in msg and extra["reason"] == "connection_error"


# -- a kubeconfig dict that fails to load ---------------------------------------------------------------

def test_kubeconfig_dict_that_fails_to_load_is_neither_quoted_nor_echoed(capsys):
    broken = kubeconfig_dict(context="no-such-context")
    result, text = run_module(node_delete.main, dict(name=["n1"], kubeconfig=broken), capsys)
    assert result["failed"] is True
    assert "kubeconfig given as a dictionary" in result["msg"], result["msg"]
    assert leaks(text) == [], text
    # -vvv shows the invocation: the kubeconfig's secrets are masked there too
    user = result["invocation"]["module_args"]["kubeconfig"]["users"][0]["user"]
    assert CANARY not in json.dumps(user)


def test_kubeconfig_dict_secrets_are_masked_when_validation_fails(capsys):
    # lease_duration is not an int: AnsibleModule fails while validating, before the module runs.
    result, text = run_module(upgrade_lock.main, dict(kubeconfig=kubeconfig_dict(), lease_duration="soon"), capsys)
    assert result["failed"] is True and "lease_duration" in result["msg"]
    assert leaks(text) == [], text


# -- an API error whose body echoes the token -------------------------------------------------------------

class _Echo(http.server.BaseHTTPRequestHandler):
    """An API server that refuses every request and quotes the credentials it got (some proxies do)."""

    def do_GET(self):  # noqa: N802 - the http.server API
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 401,
                           "reason": "Unauthorized",
                           "message": "token %s is not valid" % self.headers.get("Authorization")}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_DELETE = do_PUT = do_POST = do_PATCH = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture
def echo_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


def test_api_error_echoing_the_api_key_is_masked(echo_server, capsys):
    result, text = run_module(node_delete.main, dict(name=["n1"], host=echo_server, api_key=CANARY), capsys)
    assert result["failed"] is True
    assert "401" in result["msg"] and "renew the token" in result["msg"], result["msg"]
    assert leaks(text) == [], text


def test_api_error_echoing_a_kubeconfig_dict_token_is_masked(echo_server, capsys):
    result, text = run_module(upgrade_lock.main, dict(kubeconfig=kubeconfig_dict(server=echo_server)), capsys)
    assert result["failed"] is True and "401" in result["msg"], result["msg"]
    assert leaks(text) == [], text


# -- a GCP key dict, and exception texts with secrets ----------------------------------------------------

def gcp_key():
    return {"type": "service_account", "project_id": "p", "private_key_id": "k" + CANARY[:20],
            "private_key": PRIVATE_KEY, "client_email": "sa@p.iam.gserviceaccount.com"}


@pytest.mark.parametrize("form", ["dict", "json"])
def test_gcp_key_never_leaves_the_module(form, capsys):
    contents = gcp_key() if form == "dict" else json.dumps(gcp_key())

    def main():
        module = base.KubenodesModule(argument_spec={}, cloud=base.CLOUD_REQUIRED, supports_check_mode=True)
        module.warn("the key was %s" % json.dumps(gcp_key()))
        module.deprecate("do not pass %r" % PRIVATE_KEY, version="2.0.0", collection_name="kubenodes.image_upgrade")
        try:
            raise ValueError("could not deserialize key data %r" % gcp_key())
        except ValueError as exc:
            module.fail_json(msg="cannot use the key: %s" % exc, exception=exc, echoed=[PRIVATE_KEY])

    result, text = run_module(main, dict(provider="gcp", gcp=dict(auth_kind="serviceaccount", project="p",
                                                                  service_account_contents=contents)), capsys)
    assert result["failed"] is True and result["msg"].startswith("cannot use the key")
    assert "exception" in result and "ValueError" in json.dumps(result["exception"])
    assert leaks(text) == [], text


def test_exception_texts_with_cloud_and_etcd_secrets_are_masked(tmp_path, capsys):
    key_file = tmp_path / "etcd-client.key"
    key_file.write_text(PRIVATE_KEY)

    def main():
        module = base.KubenodesModule(argument_spec={}, cloud=base.CLOUD_OPTIONAL, etcd_connection=True,
                                      supports_check_mode=True)
        module.warn("azure said: bad secret s3-" + CANARY)
        try:
            raise RuntimeError("aws: SignatureDoesNotMatch for %s/%s; etcd key: %s"
                               % ("k/" + CANARY[:16], "tok-" + CANARY[16:], KEY_BODY[0]))
        except RuntimeError as exc:
            module.fail_from_exception(exc, "listing groups")

    args = dict(provider="aws", aws=dict(region="eu-west-1", access_key="AKIAEXAMPLE", secret_key="k/" + CANARY[:16],
                                         session_token="tok-" + CANARY[16:]),
                azure=dict(secret="s3-" + CANARY), client_key=str(key_file))
    result, text = run_module(main, args, capsys)
    assert result["failed"] is True and result["msg"].startswith("listing groups: RuntimeError")
    assert result["reason"] == "connection_error"
    assert "AKIAEXAMPLE" in text   # an access key ID is not a secret
    assert leaks(text) == [], text


def test_validate_hook_fails_before_anything_is_contacted(capsys):
    def main():
        base.KubenodesModule(argument_spec=dict(count=dict(type="int", default=0)), supports_check_mode=True,
                             validate=lambda p: ["count must be at least 1, got %d" % p["count"]] if p["count"] < 1 else [])

    result, _text = run_module(main, {}, capsys)
    assert result["msg"] == "invalid options: count must be at least 1, got 0" and result["reason"] == "invalid"


def test_every_module_is_a_kubenodes_module():
    """One base for all: no module builds a bare AnsibleModule (it would miss the secret handling)."""
    import pathlib

    modules = sorted((pathlib.Path(base.__file__).parent.parent / "modules").glob("*.py"))
    assert len(modules) >= 11
    for path in modules:
        source = path.read_text()
        if "def main(" not in source:
            continue   # the documentation of an action plugin (upgrade_step): no module code runs
        assert "KubenodesModule(" in source, path.name
        assert "AnsibleModule(" not in source and "import AnsibleModule" not in source, path.name


def test_a_gcp_key_dict_masks_its_key_but_not_the_project(capsys):
    def main():
        module = base.KubenodesModule(argument_spec={}, cloud=base.CLOUD_REQUIRED, supports_check_mode=True)
        module.exit_json(group="projects/my-project-42/zones/z/instanceGroupManagers/g", key=PRIVATE_KEY)

    key = dict(gcp_key(), project_id="my-project-42")
    result, text = run_module(main, dict(provider="gcp", gcp=dict(auth_kind="serviceaccount",
                                                                  service_account_contents=key)), capsys)
    assert result["group"] == "projects/my-project-42/zones/z/instanceGroupManagers/g"
    assert leaks(text) == [], text


# -- a module's own code run in the controller (base.InProcessModule, the upgrade_step action) --

def in_process(backend, args, run=None):
    """A module's backend in-process, as the actions call it: (result, None) or (None, failure)."""
    try:
        call = base.InProcessModule(backend.ARGUMENT_SPEC, args, kube_auth=True, validate=backend.VALIDATE)
        run = run or backend.apply_state
        doing = "Lease %s/%s" % (call.params["namespace"], call.params["name"])   # as upgrade_lock.main names it
        return call.run(lambda: run(call, base.kube.build_api_client(call.params)), doing), None
    except base.ModuleFailed as exc:
        return None, exc.result


@pytest.mark.parametrize("args", [dict(lease_duration=5), dict(state="held"), dict(namespace="Not_A_Namespace")])
def test_in_process_refuses_bad_options_with_the_modules_own_message(args, capsys):
    expected, _text = run_module(upgrade_lock.main, dict(args, host="http://127.0.0.1:1"), capsys)
    result, failure = in_process(lease, dict(args, host="http://127.0.0.1:1"))
    assert result is None and failure["failed"] is True
    assert failure["msg"] == expected["msg"], (failure["msg"], expected["msg"])


def test_in_process_api_error_echoing_the_api_key_is_masked_as_in_the_module(echo_server, capsys):
    expected, _text = run_module(upgrade_lock.main, dict(host=echo_server, api_key=CANARY), capsys)
    result, failure = in_process(lease, dict(host=echo_server, api_key=CANARY))
    assert result is None and "401" in failure["msg"] and "renew the token" in failure["msg"], failure
    assert leaks(json.dumps(failure)) == [], failure
    assert failure["msg"] == expected["msg"]


def test_in_process_fail_json_is_not_caught_by_the_modules_except_exception():
    # A module's fail_json ends the module (SystemExit); in-process it must end the call too, not be turned
    # into another error by an `except Exception` around it (node_image_facts.facts has one).
    def run(module, _client):
        try:
            module.fail_json(msg="Lease x/y: token %s refused" % CANARY, reason="held")
        except Exception:  # pylint: disable=broad-except
            return dict(changed=False, swallowed=True)
    result, failure = in_process(lease, dict(host="http://127.0.0.1:1", api_key=CANARY), run=run)
    assert result is None and failure["reason"] == "held" and failure["failed"] is True
    assert CANARY not in failure["msg"] and base.MASK in failure["msg"]


def test_in_process_fills_the_modules_defaults_and_keeps_its_warnings():
    def run(module, _client):
        module.warn("a warning naming %s" % CANARY)
        return dict(changed=False, params=dict(module.params))
    result, failure = in_process(lease, dict(host="http://127.0.0.1:1", api_key=CANARY), run=run)
    assert failure is None
    assert result["params"]["name"] == "kubenodes-image-upgrade" and result["params"]["lease_duration"] == 300
    assert result["params"]["api_key"] == base.MASK
    assert result["warnings"] == ["a warning naming %s" % base.MASK]


def test_given_options_leave_out_what_is_unset_at_any_depth():
    spec = dict(provider=dict(type="str"), azure=dict(type="dict"), host=dict(type="str"))
    args = dict(provider="azure", azure=dict(subscription_id="s", cert_validation_mode=None), host=None, other=1)
    assert base.given_options(args, spec) == dict(provider="azure", azure=dict(subscription_id="s"))
