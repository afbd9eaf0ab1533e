# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The base of the collection's action plugins (as community.crypto's ActionModuleBase): the secret handling
module_utils/base.py gives every module, for code that runs in the controller.

An action plugin does not go through AnsibleModule, so nothing masks its no_log options in what it returns
or displays. KubenodesActionBase.run collects the task's secrets by module_utils/base.py's rules (no_log
options at any depth, the secrets inside a kubeconfig or GCP key given as a dict or a JSON string, key
files, the K8S_AUTH_* and cloud environment variables, each in every spelling), hands them to the plugin's
MaskingDisplay, calls run_action(), and masks them in the result and in any error, expected or not.
"""

from __future__ import annotations

import traceback

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import base


def task_secrets(spec, args, environ=None):
    """Every spelling of every secret in the task's arguments (raw, before validation: a validation error
    must not echo them either) and in the environment."""
    found = set()
    for value in base.secret_values(spec, args) | base.environment_secrets(environ):
        found.update(base.spellings(value))
    return frozenset(found)


class MaskingDisplay:
    """Ansible's Display, with the running task's secrets masked in every message. One per plugin module:
    a worker process runs one task at a time, and KubenodesActionBase.run sets `secrets` for it."""

    def __init__(self):
        self._display = Display()
        self.secrets = frozenset()

    def display(self, msg, *args, **kwargs):
        self._display.display(base.redact(msg, self.secrets), *args, **kwargs)

    def warning(self, msg, *args, **kwargs):
        self._display.warning(base.redact(msg, self.secrets), *args, **kwargs)


class KubenodesActionBase(ActionBase):
    """Subclasses define options_spec() (the argument spec whose no_log options are secrets),
    run_action(result, task_vars) returning the result (it starts as ActionBase.run's), and `display`, the
    MaskingDisplay they use for every message."""

    display = None

    def options_spec(self):
        return {}

    def run_action(self, result, task_vars):
        raise NotImplementedError

    def run(self, tmp=None, task_vars=None):
        secrets = task_secrets(self.options_spec(), dict(self._task.args))
        if self.display is not None:
            self.display.secrets = secrets
        try:
            result = self.run_action(super().run(tmp, task_vars), task_vars)
        except AnsibleActionFail as exc:
            raise AnsibleActionFail(base.redact(exc.message, secrets), result=base.redact_data(exc.result, secrets))
        except AnsibleError as exc:
            raise AnsibleError(base.redact(exc.message, secrets))
        except base.ModuleFailed as exc:
            # A module's own code run in this process failed (base.InProcessModule): its result, as the module's
            # task would have failed. ModuleFailed is a BaseException; uncaught it would kill the worker.
            return base.redact_data(dict(exc.result, failed=True), secrets)
        except Exception as exc:  # pylint: disable=broad-except
            # An unexpected error's text and traceback may quote an argument: masked like the rest.
            return dict(failed=True, msg=base.redact("%s: %s" % (type(exc).__name__, exc), secrets),
                        exception=base.redact(traceback.format_exc(), secrets))
        return base.redact_data(result, secrets)
