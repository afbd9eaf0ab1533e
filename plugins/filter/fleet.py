# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The play's `serial` of playbooks/upgrade_fleet.yml from fleet_batches: ansible-core works out `serial` before any
task runs and ends the play with an unexpected exception at a size it cannot read (`soon`), before the first batch's
check (fleet_report) could refuse it naming fleet_batches."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import fleet

# A bad fleet_batches runs as one cluster's batch, whose first task (fleet_report, on the controller) refuses it
# before that cluster is read or changed.
REFUSED_BATCHES = [1]


def fleet_serial(batches):
    """`batches` when every size in it is good, else REFUSED_BATCHES."""
    return REFUSED_BATCHES if fleet.batch_problems(batches) else batches


class FilterModule:
    def filters(self):
        return {"fleet_serial": fleet_serial}
