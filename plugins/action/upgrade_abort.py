# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""upgrade_abort's action: the module runs as any (one step per call, its code in module_utils/abort.py), and this
shows one line per call on the controller while the abort runs (abort_plan.progress_line), as the upgrade shows one
per pass: abort_upgrade.yml repeats the task until it is done, and the task's result comes only at its end."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import abort, abort_plan, base
from ansible_collections.kubenodes.image_upgrade.plugins.plugin_utils import action_base

display = action_base.MaskingDisplay()   # masks the task's secrets in every message


def argument_spec():
    """The module's full argument spec (its own options, the Kubernetes auth and the cloud's)."""
    return base.merged_argument_spec(abort.ARGUMENT_SPEC, kube_auth=True, cloud=base.CLOUD_REQUIRED)


class ActionModule(action_base.KubenodesActionBase):
    TRANSFERS_FILES = False
    display = display

    def options_spec(self):
        return argument_spec()

    def run_action(self, result, task_vars):
        result.update(self._execute_module(module_name="kubenodes.image_upgrade.upgrade_abort",
                                           module_args=self._task.args, task_vars=task_vars))
        # A failed call says why in its own result; a check-mode call prints its plan at the end.
        if not result.get("failed") and not self._play_context.check_mode:
            display.display(abort_plan.progress_line(result))
        return result
