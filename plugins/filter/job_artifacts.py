# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Filters that turn the plan and the report into the job artifacts the rolling_upgrade role publishes with
set_stats (pure formatting, in module_utils/artifacts.py)."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.artifacts import (  # noqa: F401 (re-exported)
    plan_artifact,
    report_artifact,
)


class FilterModule:
    def filters(self):
        return {"plan_artifact": plan_artifact, "report_artifact": report_artifact}
