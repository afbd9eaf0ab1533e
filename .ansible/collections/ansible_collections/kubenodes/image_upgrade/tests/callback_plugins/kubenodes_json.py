# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Test-harness stdout callback: the whole run as one JSON document {"plays": [{"play", "tasks": [{"task",
"hosts": {host: result}}]}], "stats"}. ansible-core 2.19 ships no JSON callback (ansible.posix has one),
so tests/ansible_run.py uses this one. Results keep diff and warnings (as strings) for assertions."""

from __future__ import annotations

DOCUMENTATION = r"""
name: kubenodes_json
type: stdout
short_description: Whole-run JSON output for the collection's test harness
description:
  - Prints one JSON document at the end of the run with every task result per host.
author:
  - kubenodes.image_upgrade maintainers
"""

import json

from ansible.plugins.callback import CallbackBase
from ansible.vars.clean import module_response_deepcopy, strip_internal_keys


def _message_text(item):
    details = getattr(item, "details", None)
    if details:
        return " ".join(str(getattr(detail, "msg", detail)) for detail in details)
    return str(item)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "kubenodes_json"

    def __init__(self, display=None):
        super().__init__(display)
        self.plays = []

    def v2_playbook_on_play_start(self, play):
        self.plays.append({"play": {"name": play.get_name()}, "tasks": []})

    def _task_start(self, task):
        self.plays[-1]["tasks"].append({"task": {"name": task.get_name(), "action": task.action}, "hosts": {}})

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task_start(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._task_start(task)

    def _record(self, result, **flags):
        data = strip_internal_keys(module_response_deepcopy(result._result))
        for key in ("warnings", "deprecations"):
            if data.get(key):
                data[key] = [_message_text(item) for item in data[key]]
        if data.get("exception") is not None and not isinstance(data["exception"], str):
            data["exception"] = str(data["exception"])
        data.update(flags)
        self.plays[-1]["tasks"][-1]["hosts"][result._host.get_name()] = data

    def v2_runner_on_ok(self, result):
        self._record(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, failed=True)

    def v2_runner_on_skipped(self, result):
        self._record(result, skipped=True)

    def v2_runner_on_unreachable(self, result):
        self._record(result, unreachable=True)

    def v2_playbook_on_stats(self, stats):
        summary = {host: stats.summarize(host) for host in sorted(stats.processed)}
        self._display.display(json.dumps({"plays": self.plays, "stats": summary}, default=str, sort_keys=True))
