#!/usr/bin/python
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: cluster_health_gate
short_description: Wait until the cluster is healthy and has soaked, between batches of node replacements
version_added: 1.1.0
description:
  - With O(state=passed), looks at the Nodes and Pods until every check passes, or fails after O(timeout)
    seconds naming each check that failed and why (the nodes, pods and workloads it found).
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
      - Seconds between looks.
    type: float
    default: 5
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

import time

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import gate, kube, validate
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import KubenodesModule

RULES = {
    "soak_seconds": lambda n, v: validate.seconds(n, v, minimum=0),
    "timeout": validate.seconds,
    "poll_interval": validate.positive_number,
    "after": lambda n, v: validate.one_of(n, v, ("batch", "replacement")),
}


def _namespaces_problem(params):
    for name in params.get("namespaces") or []:
        problem = validate.namespace("namespaces item", name)
        if problem:
            return problem
    return None


def look(api_client, params, baseline):
    nodes = kube.list_nodes(api_client)
    pods = kube.list_all(api_client, "/api/v1/pods")
    return gate.evaluate(nodes, pods, baseline, params["soak_seconds"], time.time(), params["namespaces"]), pods


def run(module, api_client):
    params = module.params
    gates = gate.describe(params["soak_seconds"], params["namespaces"], params["tasks_file"], params["after"],
                          params["timeout"])
    if params["state"] == "snapshot":
        pods = kube.list_all(api_client, "/api/v1/pods")
        return dict(changed=False, passed=True, snapshot=gate.running_workloads(pods), gates=gates)
    baseline = params["baseline"]
    start = time.monotonic()
    seconds = {}
    while True:
        checks, pods = look(api_client, params, baseline)
        elapsed = time.monotonic() - start
        gate.track(seconds, checks, elapsed)
        passed = all(c["passed"] for c in checks)
        result = dict(changed=False, passed=passed, checks=checks, seconds=gate.final_seconds(seconds, elapsed),
                      waited=round(elapsed, 1), snapshot=gate.running_workloads(pods), gates=gates)
        if passed or module.check_mode:
            return result
        if elapsed >= params["timeout"]:
            module.fail_json(msg=gate.failure_message(checks, elapsed, params["timeout"]), reason="gate_failed",
                             **{k: v for k, v in result.items() if k != "changed"})
        # The soak needs no look until it ends; the other checks are looked at every poll interval.
        soak = next(c for c in checks if c["name"] == "soak")
        others_pass = all(c["passed"] for c in checks if c["name"] != "soak")
        pause = min(soak["wait"], params["poll_interval"] * 6) if others_pass else params["poll_interval"]
        time.sleep(max(0.2, min(pause, params["timeout"] - elapsed)))


def main():
    module = KubenodesModule(argument_spec=dict(
        state=dict(type="str", choices=["passed", "snapshot"], default="passed"),
        baseline=dict(type="list", elements="str"),
        soak_seconds=dict(type="int", default=0),
        timeout=dict(type="int", default=600),
        namespaces=dict(type="list", elements="str", default=["kube-system"]),
        poll_interval=dict(type="float", default=5),
        after=dict(type="str", default="batch"),
        tasks_file=dict(type="str", default=""),
    ), kube_auth=True, supports_check_mode=True,
        validate=lambda params: validate.check(params, RULES) + [_namespaces_problem(params)])
    module.run(lambda: run(module, module.kube_client()), "the cluster's nodes and pods")


if __name__ == "__main__":
    main()
