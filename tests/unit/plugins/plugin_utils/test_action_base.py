"""The action plugins' secret handling (plugin_utils/action_base.py): what a plugin returns, raises or
displays never holds a secret of its task's arguments or of the environment."""

import importlib
import json

import pytest
from ansible.module_utils._internal import _traceback

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import base, kube

TOKEN = "kncanarytoken0123456789"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\nkncanarykeyline0123456789abcdef\n-----END PRIVATE KEY-----\n"


@pytest.fixture(scope="module", autouse=True)
def controller():
    """Imports the controller's code here, not at collection: importing it switches ansible-core's traceback
    capture to the controller's setting for the whole process, and the module tests (test_base) expect a
    module's. Restored after these tests."""
    global AnsibleActionFail, PlayContext, Task, connection_loader, action_base  # pylint: disable=global-statement
    saved = _traceback._is_traceback_enabled
    AnsibleActionFail = importlib.import_module("ansible.errors").AnsibleActionFail
    PlayContext = importlib.import_module("ansible.playbook.play_context").PlayContext
    Task = importlib.import_module("ansible.playbook.task").Task
    connection_loader = importlib.import_module("ansible.plugins.loader").connection_loader
    action_base = importlib.import_module(
        "ansible_collections.kubenodes.image_upgrade.plugins.plugin_utils.action_base")
    yield
    _traceback._is_traceback_enabled = saved


class Recorder:
    def __init__(self):
        self.lines = []

    def display(self, msg, *args, **kwargs):
        self.lines.append(msg)

    warning = vvv = display


def plugin(raise_or_return, task_args):
    display = action_base.MaskingDisplay()
    display._display = Recorder()

    class Plugin(action_base.KubenodesActionBase):
        def options_spec(self):
            return kube.auth_argument_spec({"gcp": {"type": "dict", "options": {
                "service_account_contents": {"type": "raw", "no_log": True}}}})

        def run_action(self, result, task_vars):
            self.display.display("using %s" % json.dumps(self._task.args))
            self.display.warning("token %s" % TOKEN)
            return raise_or_return(result)

    Plugin.display = display
    task = Task.load({"action": {"module": "kubenodes.image_upgrade.upgrade_step", "args": task_args}})
    context = PlayContext()
    connection = connection_loader.get("local", context, None)
    return Plugin(task, connection, context, None, None, None), display._display


ARGS = {"api_key": TOKEN, "kubeconfig": {"users": [{"name": "u", "user": {"token": TOKEN + "x"}}]},
        "gcp": {"service_account_contents": {"type": "service_account", "private_key": KEY}}}
SECRETS = [TOKEN, TOKEN + "x", "kncanarykeyline0123456789abcdef"]


def assert_clean(text):
    for secret in SECRETS:
        assert secret not in text


def test_a_result_and_every_message_are_masked():
    act, shown = plugin(lambda result: dict(result, msg="failed with %s and %s" % (TOKEN, KEY), echo=ARGS), ARGS)
    result = act.run(task_vars={})
    assert base.MASK in result["msg"]
    assert_clean(json.dumps(result))
    assert len(shown.lines) == 2
    assert_clean("\n".join(shown.lines))


def test_an_action_failure_is_masked():
    def fail(result):
        raise AnsibleActionFail("cannot use key %r" % KEY, result={"seen": TOKEN})
    act, _shown = plugin(fail, ARGS)
    with pytest.raises(AnsibleActionFail) as err:
        act.run(task_vars={})
    assert_clean(err.value.message + json.dumps(err.value.result))
    assert base.MASK in err.value.message


def test_an_unexpected_error_and_its_traceback_are_masked():
    def crash(result):
        raise ValueError("bad kubeconfig %s" % ARGS["kubeconfig"])
    act, _shown = plugin(crash, ARGS)
    result = act.run(task_vars={})
    assert result["failed"] is True and result["msg"].startswith("ValueError: bad kubeconfig")
    assert "Traceback" in result["exception"]
    assert_clean(result["msg"] + result["exception"])


def test_a_modules_failure_in_the_controller_is_a_failed_task_not_a_dead_worker():
    # base.ModuleFailed is a BaseException (as a module's SystemExit): uncaught, the worker process would die
    # ("A worker was found in a dead state") and the message be lost.
    def fail(result):
        raise base.ModuleFailed({"failed": True, "msg": "ca_cert file /nope/ca.crt does not exist (%s)" % TOKEN})
    act, _shown = plugin(fail, ARGS)
    result = act.run(task_vars={})
    assert result["failed"] is True and result["msg"].startswith("ca_cert file /nope/ca.crt does not exist")
    assert_clean(result["msg"])


def test_environment_secrets_are_masked(monkeypatch):
    monkeypatch.setenv("K8S_AUTH_API_KEY", "kncanaryenvtoken987654321")
    act, shown = plugin(lambda result: dict(result, msg="header Bearer kncanaryenvtoken987654321"), {})
    result = act.run(task_vars={})
    assert "kncanaryenvtoken987654321" not in result["msg"] and base.MASK in result["msg"]


def test_without_the_masking_the_secrets_would_show():
    # The tests above can fail: the same plugin with no secrets collected shows them.
    act, shown = plugin(lambda result: dict(result, msg="failed with %s" % TOKEN), ARGS)
    act.options_spec = lambda: {}
    original = action_base.task_secrets
    try:
        action_base.task_secrets = lambda spec, args, environ=None: frozenset()
        result = act.run(task_vars={})
    finally:
        action_base.task_secrets = original
    assert TOKEN in result["msg"] and any(TOKEN in line for line in shown.lines)
