# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""upgrade_start: the reads before an upgrade and the run lock, in the controller process; documentation is in
plugins/modules/upgrade_start.py. It runs the modules' own code (their argument specs, rules and messages) in
one worker process, so the role starts without a module process (and an SDK import) per step."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import base, kube, lease
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.run import ReadFailed, prepare, read_etcd, take_lock
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import journal as journal_store
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import factory
from ansible_collections.kubenodes.image_upgrade.plugins.plugin_utils import action_base


def argument_spec():
    spec = kube.auth_argument_spec(dict(
        stage=dict(type="str", choices=["prepare", "etcd", "lock"], required=True),
        image=dict(type="str"),
        new_target=dict(type="bool", default=False),
        journal=dict(type="dict", options=journal_store.REFERENCE_SPEC),
        preflight=dict(type="dict"),
        lock=dict(type="dict", options=lease.RUN_LOCK_SPEC),
        # etcd_member_info's options (stage=etcd), validated against its own spec.
        etcd=dict(type="dict"),
    ))
    spec.update(factory.provider_argument_spec(required=False))
    return spec


class ActionModule(action_base.KubenodesActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def options_spec(self):
        return argument_spec()

    def run_action(self, result, task_vars):
        _valid, args = self.validate_argument_spec(argument_spec=argument_spec())
        check_mode = bool(self._task.check_mode or self._play_context.check_mode)
        try:
            if args["stage"] == "prepare":
                if not args["image"]:
                    raise AnsibleActionFail("stage=prepare needs image")
                result.update(prepare(args, check_mode), changed=False)
            elif args["stage"] == "etcd":
                if args["etcd"] is None:
                    raise AnsibleActionFail("stage=etcd needs etcd (etcd_member_info's options)")
                result.update(read_etcd(args["etcd"]), changed=False)
            else:
                result.update(take_lock(args, args["lock"] or {}, check_mode, diff=bool(self._play_context.diff)))
        except base.ModuleFailed as exc:
            result.update(exc.result)
        except ReadFailed as exc:
            result.update(exc.result, failed_step=exc.doing)
        # Each module's warnings, as its own task would have shown them.
        for step in ("resolved", "target", "preflight"):
            warnings = (result.get(step) or {}).pop("warnings", None)
            if warnings:
                result.setdefault("warnings", []).extend(warnings)
        return result
