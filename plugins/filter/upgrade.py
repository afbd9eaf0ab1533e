# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Filters the rolling_upgrade role and site playbooks use to show a pass and to record phases (pure formatting,
in module_utils/progress.py, which the upgrade_step action plugin uses too)."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.progress import (  # noqa: F401 (re-exported)
    phase_entries,
    progress_line,
)


class FilterModule:
    def filters(self):
        return {"progress_line": progress_line, "phase_entries": phase_entries}
