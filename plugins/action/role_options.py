# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The rolling_upgrade role's option check (documented in plugins/modules/role_options.py): runs on the
controller, in check mode as in a real run, before the role reads or changes anything."""

from __future__ import annotations

import yaml

from ansible.errors import AnsibleError
from ansible.utils.vars import load_extra_vars

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import validate
from ansible_collections.kubenodes.image_upgrade.plugins.plugin_utils import action_base

PREFIX = "rolling_upgrade_"


class ActionModule(action_base.KubenodesActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("options_file", "short_names"))

    def run_action(self, result, task_vars):
        task_vars = task_vars or {}
        args = self._task.args
        try:
            with open(args["options_file"]) as handle:
                known = set(yaml.safe_load(handle)["argument_specs"]["main"]["options"])
        except (KeyError, TypeError, OSError, yaml.YAMLError) as exc:
            return dict(result, failed=True, msg="role_options cannot read options_file %r: %s" % (
                args.get("options_file"), exc))
        short_names = list(args.get("short_names") or [])

        removed = set(validate.REMOVED_ROLE_VARIABLES)
        warnings = validate.unknown_variables(task_vars, known | removed, PREFIX)
        if short_names:
            try:
                extra = load_extra_vars(self._loader)
            except AnsibleError:  # the command line's -e was parsed once already; never fail on it here
                extra = {}
            warnings += validate.unknown_playbook_variables(extra, set(short_names), known)

        params, problems = {}, []
        for name in list(validate.ROLE_RULES) + sorted(removed):
            if name not in task_vars:
                continue
            try:
                params[name] = self._templar.template(task_vars[name])
            except AnsibleError as exc:
                problems.append("%s cannot be evaluated: %s" % (name, exc))
        problems += validate.check(params, validate.ROLE_RULES)
        problems += validate.role_image_problems(params)
        removed_problems, removed_warnings = validate.removed_variables(params)
        problems += removed_problems
        warnings += removed_warnings
        if not problems:
            problems += validate.role_gate_problems(params)
        if warnings:
            result["warnings"] = warnings
        result.update(changed=False, problems=problems, unknown=warnings)
        if problems:
            result.update(failed=True, msg="; ".join(problems) + ". Nothing was changed: correct the variable and run again")
        return result
