#!/usr/bin/python
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: fleet_report
short_description: The batches of a fleet of clusters and its aggregated upgrade report
version_added: 1.0.0
description:
  - Used by the playbook C(kubenodes.image_upgrade.upgrade_fleet), where each inventory host is a cluster and the
    play upgrades them in the batches of C(serial) (C(fleet_batches)). Run it on the controller, once per batch
    (C(run_once), C(delegate_to=localhost)).
  - With O(state=plan), checks O(batches) and O(soak_seconds) and returns the batches Ansible makes of
    O(hosts) (RV(batches)) and each cluster's batch (RV(batch_of)). Bad values fail naming the option, the value
    and what to do; nothing is written.
  - "With O(state=report), writes C(fleet-upgrade-report.json), C(.md) and C(.svg) to O(report_dir): every
    cluster with its batch, its outcome (succeeded, failed and why, not started because an earlier batch failed,
    or pending while later batches may still run), its start, end and time, and the nodes its own report
    (C(image-upgrade-report.json) in the cluster's C(report_dir)) says were replaced."
  - Writes only files on the host it runs on; reports C(changed) when a file's content changed.
author:
  - kubenodes.image_upgrade maintainers (!UNKNOWN)
options:
  state:
    description:
      - V(plan) checks and returns the batches; V(report) also writes the report.
    type: str
    choices: [plan, report]
    default: report
  batches:
    description:
      - The play's C(serial) (C(fleet_batches)), a list of whole numbers from 1 and percentages of the clusters
        from C(1%) to C(100%).
    type: list
    elements: raw
    required: true
  hosts:
    description:
      - Every cluster of the play in play order (C(ansible_play_hosts_all)).
    type: list
    elements: str
    required: true
  current:
    description:
      - The clusters of the batch that runs now (C(ansible_play_batch)), with O(state=plan). When they are not
        one of the batches O(batches) makes, the play's C(serial) was not O(batches) (C(fleet_batches) set as an
        inventory variable, which C(serial) never sees), and the module fails, saying to pass it as an extra
        variable.
    type: list
    elements: str
    default: []
  soak_seconds:
    description:
      - C(fleet_soak_seconds), checked with O(state=plan) (0 to 2592000).
    type: raw
    default: 0
  clusters:
    description:
      - What each cluster recorded, by host name (C(_fleet_cluster) of each host); a host without an entry has
        not started. Each entry may have C(outcome) (V(succeeded), V(failed), V(planned), V(running)),
        C(started), C(ended) (ISO 8601 UTC), C(cause), C(failed_task) and C(report_dir).
    type: dict
    default: {}
  report_dir:
    description:
      - Directory for the report files. Required with O(state=report).
    type: path
attributes:
  check_mode:
    support: full
    description: Returns the report it would write and whether it would change a file; writes nothing.
  diff_mode:
    support: full
    description:
      - With O(state=report), each report file that changes, before and after (as M(ansible.builtin.copy) shows a
        file); no diff when none changes. O(state=plan) changes nothing.
"""

EXAMPLES = r"""
- name: Fleet | the report of every cluster so far
  kubenodes.image_upgrade.fleet_report:
    batches: [1, "25%", "100%"]
    hosts: "{{ ansible_play_hosts_all }}"
    # What each cluster recorded so far; playbooks/upgrade_fleet.yml gathers it from every host's _fleet_cluster.
    clusters:
      canary: {outcome: succeeded, started: "2026-12-02T07:00:00Z", ended: "2026-12-02T07:05:00Z"}
      eu-1: {outcome: failed, started: "2026-12-02T07:05:10Z", ended: "2026-12-02T07:06:00Z", cause: "health gate failed"}
    report_dir: ./fleet-upgrade-report
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
batches:
  description: The clusters of each batch, in order.
  returned: always
  type: list
  elements: list
  sample: [["canary"], ["eu-1"], ["eu-2", "us-1"]]
batch_of:
  description: Each cluster's batch number, from 1.
  returned: always
  type: dict
  sample: {"canary": 1, "eu-1": 2}
summary:
  description: The fleet report (with O(state=report)) - outcome, message, batches, one row per cluster, failed.
  returned: when state is report
  type: dict
artifact:
  description: The summary cut for set_stats (C(image_upgrade_fleet)).
  returned: when state is report
  type: dict
files:
  description: The report files (written, or that would be written in check mode).
  returned: when state is report
  type: list
  elements: str
"""

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import fleet, report_files
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import KubenodesModule


def main():
    module = KubenodesModule(argument_spec=fleet.REPORT_ARGUMENT_SPEC, supports_check_mode=True,
                             required_if=fleet.REPORT_REQUIRED_IF, validate=fleet.option_problems)
    report_files.fleet_report(module)


if __name__ == "__main__":
    main()
