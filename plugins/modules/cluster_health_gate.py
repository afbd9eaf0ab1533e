#!/usr/bin/python
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: cluster_health_gate
short_description: Wait until the cluster is healthy and has soaked, between batches of node replacements
version_added: 1.0.0
description:
  - With O(state=passed), looks at the Nodes and Pods until every check passed at O(looks) looks in a row,
    O(look_interval) seconds apart, or fails after O(timeout) seconds naming each check that failed and why (the
    nodes, pods and workloads it found). A look at which a check fails starts the count again, so a cluster that
    flaps (healthy at one look, not at the next) does not open the gate on one good look.
  - "The checks: every Node (but one being deleted) is Ready; every live pod of O(namespaces) is Running and
    Ready; no workload (the pod's controller, or a bare pod by name) listed in O(baseline) as having had a
    Running pod has a Pending pod now; O(soak_seconds) have passed since the last Node turned Ready (the
    latest C(lastTransitionTime) of a Ready condition)."
  - With O(state=snapshot), only reads the pods and returns RV(snapshot), the baseline for the next gate.
  - Only reads; it never changes the cluster, so it reports C(changed=false). The rolling_upgrade role
    records the baseline and the time each check took in the run journal (upgrade_journal).
  - In check mode it looks once, does not wait, and never fails on a failing check. It returns the checks as
    they stand, and RV(gates), the list of what it checks.
author:
  - kubenodes.image_upgrade maintainers (!UNKNOWN)
options:
  state:
    description:
      - V(passed) waits for the gate; V(snapshot) returns the baseline only.
    type: str
    choices: [passed, snapshot]
    default: passed
  baseline:
    description:
      - The workloads (C(namespace/Kind/name)) that had a Running pod before the batch, as RV(snapshot)
        returned them. Omitted, the no_new_pending check has nothing to compare with and passes.
    type: list
    elements: str
  soak_seconds:
    description:
      - Seconds that must have passed since the last Node turned Ready. V(0) is no soak.
    type: int
    default: 0
  timeout:
    description:
      - Seconds to wait for every check to pass before the module fails.
    type: int
    default: 600
  namespaces:
    description:
      - The namespaces whose every live pod must be Ready.
    type: list
    elements: str
    default: [kube-system]
  poll_interval:
    description:
      - Seconds between looks while a check fails (while only the soak is left, up to its end, at most six
        times this).
    type: float
    default: 5
  looks:
    description:
      - Looks in a row at which every check must pass before the gate opens; a failing look starts the count
        again. V(1) opens the gate at the first look that passes.
      - The default is kOps rolling-update's C(--validate-count) (2), which validates the cluster twice in a row
        after each node, to catch a cluster that flaps.
      - O(look_interval) times (O(looks) - 1) must be below O(timeout), or the gate could never open; the module
        refuses such values.
    type: int
    default: 2
  look_interval:
    description:
      - Seconds between the looks that passed, until O(looks) in a row did.
      - The default is kOps rolling-update's wait between two passing validations (10 s).
    type: int
    default: 10
  after:
    description:
      - What the gate follows (V(batch) or V(replacement)), only for the RV(gates) listing.
    type: str
    default: batch
  tasks_file:
    description:
      - The user's tasks file the role runs after these checks, only for the RV(gates) listing.
    type: str
    default: ""
extends_documentation_fragment:
  - kubenodes.image_upgrade.kube_auth
attributes:
  check_mode:
    support: full
    description: Looks once and reports; never waits, never fails on a failing check.
  diff_mode:
    support: none
    description: It changes nothing, so there is no difference to show.
"""

EXAMPLES = r"""
- name: Wait for a healthy cluster and a 5 minute soak
  kubenodes.image_upgrade.cluster_health_gate:
    kubeconfig: ~/.kube/config
    baseline: "{{ before.snapshot }}"
    soak_seconds: 300
    timeout: 900
  register: gate
"""

RETURN = r"""
passed:
  description: Whether every check passed (in check mode, at the one look).
  returned: always
  type: bool
checks:
  description: Each check at the last look, with C(name), C(passed) and C(detail) (what was found).
  returned: when state is passed
  type: list
  elements: dict
seconds:
  description: Per check, the seconds from the gate's start until it passed for good (a failing one, until
    the gate gave up).
  returned: when state is passed
  type: dict
waited:
  description: Seconds the gate took.
  returned: when state is passed
  type: float
looked:
  description: How many looks the gate took.
  returned: when state is passed
  type: int
streak:
  description: At how many looks in a row, up to the last, every check passed; O(looks) when the gate opened.
  returned: when state is passed
  type: int
snapshot:
  description: The workloads with a Running pod at the last look, sorted; the baseline of the next gate.
  returned: always
  type: list
  elements: str
gates:
  description: What the gate checks, one line each.
  returned: always
  type: list
  elements: str
"""

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import gate
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import KubenodesModule


def main():
    module = KubenodesModule(argument_spec=gate.ARGUMENT_SPEC, kube_auth=True, supports_check_mode=True,
                             validate=gate.VALIDATE)
    module.run(lambda: gate.apply_state(module, module.kube_client()), "the cluster's nodes and pods")


if __name__ == "__main__":
    main()
