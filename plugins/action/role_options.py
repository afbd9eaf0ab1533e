# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The rolling_upgrade role's option check (documented in plugins/modules/role_options.py): runs on the
controller, in check mode as in a real run, before the role reads or changes anything."""

from __future__ import annotations

import os

import yaml

from ansible.errors import AnsibleError
from ansible.utils.vars import load_extra_vars

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import report_files, validate
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
        if not problems and params.get("rolling_upgrade_gate_tasks"):
            problems += self._gate_tasks_problems(params["rolling_upgrade_gate_tasks"], task_vars)
        if not problems and params.get("rolling_upgrade_report_dir"):
            unwritable = report_files.report_dir_problems(params["rolling_upgrade_report_dir"])
            if self._task.check_mode or self._play_context.check_mode:
                # Check mode writes no report: it says where a real run would stop.
                warnings += ["Check mode: a real run would stop here: %s" % problem for problem in unwritable]
            else:
                problems += unwritable
        if warnings:
            result["warnings"] = warnings
        result.update(changed=False, problems=problems, unknown=warnings)
        if problems:
            result.update(failed=True, msg="; ".join(problems) + ". Nothing was changed: correct the variable and run again")
        return result

    def _gate_tasks_problems(self, tasks_file, task_vars):
        """Your gate tasks file where the role's include_tasks will look for it (the role's tasks directory, the role,
        the playbook's directory), now: not first found missing at a gate, after nodes were replaced."""
        role_path = task_vars.get("role_path") or getattr(getattr(self._task, "_role", None), "_role_path", None)
        found = self._loader.path_dwim_relative(role_path, "tasks", tasks_file, is_role=True) if role_path else \
            self._loader.path_dwim(tasks_file)
        if os.path.isfile(found):
            try:
                tasks = self._loader.load_from_file(found)
            except AnsibleError as exc:
                return [validate.gate_tasks_content_problem(tasks_file, found, " ".join(str(exc).split())[:300])]
            if tasks is not None and not isinstance(tasks, list):
                # Named by what YAML calls it: ansible-core's loader gives tagged subclasses.
                what = "a mapping" if isinstance(tasks, dict) else "a string" if isinstance(tasks, str) else "a scalar"
                return [validate.gate_tasks_content_problem(tasks_file, found, "it holds %s, not a list of tasks" % what)]
            return []
        if os.path.isabs(os.path.expanduser(tasks_file)):
            looked_in = "at %s" % os.path.expanduser(tasks_file)
        else:
            places = ([os.path.join(role_path, "tasks"), role_path] if role_path else []) + [self._loader.get_basedir()]
            looked_in = "in %s" % ", ".join(places)
        return [validate.gate_tasks_file_problem(tasks_file, looked_in)]
