#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_drain
short_description: Cordon, drain or uncordon a Kubernetes node, naming the pods and PodDisruptionBudgets that block
version_added: 1.0.0
description:
  - Cordons a node, drains it through the Eviction API so PodDisruptionBudgets (PDBs) are respected,
    or uncordons it.
  - Draining follows C(kubectl drain) - mirror pods are skipped, DaemonSet pods are left in place,
    pods with C(emptyDir) data and pods without a controller are only removed when allowed, and pods
    already terminating are waited for but never reported as blockers.
  - Evictions of many pods run concurrently, at most O(eviction_concurrency) at a time. An eviction
    refused with HTTP 429 (a PDB allows no disruption now) is retried with backoff until the deadline.
  - By default one pass is made (cordon, evict, report what is left) so that a task C(until) loop
    shows progress; with O(wait=true) the module waits up to O(wait_timeout) itself.
  - A node that an image upgrade is replacing (it carries the C(<annotation_prefix>/heir) or
    C(<annotation_prefix>/obsolete) annotation) is cordoned or drained only when the cluster agrees with that
    record, also when the module is used on its own - the heir exists, is Ready, names this node as its
    donor, is in its scaling group and runs another image; the phase is one before the drain; an obsolete mark
    was set by this collection. Otherwise nothing changes and the task fails with RV(reason=inconsistent)
    and each problem in RV(problems). Nodes without these annotations are drained as asked.
  - The result is structured - lists of evicted, pending, blocked and skipped pods (RV(skipped_pods),
    because Ansible reserves C(skipped) for tasks that did not run), each blocked pod with the PDB that
    blocks it and its C(disruptionsAllowed), and a stable RV(reason) code for C(until) expressions.
author:
  - kubenodes.image_upgrade contributors (!UNKNOWN)
options:
  name:
    description:
      - Name of the Node.
    type: str
    required: true
    aliases: [node]
  state:
    description:
      - V(cordoned) marks the node unschedulable. Nothing happens when it already is.
      - V(drained) cordons the node and evicts its pods.
      - V(uncordoned) makes the node schedulable again, only when it is cordoned.
      - V(cordon), V(drain) and V(uncordon), the state names of kubernetes.core's k8s_drain, are taken as
        V(cordoned), V(drained) and V(uncordoned), so a task moved from that module keeps working.
    type: str
    choices: [cordoned, drained, uncordoned, cordon, drain, uncordon]
    default: drained
  pod_selectors:
    description:
      - Label selectors; only pods matching all of them are drained, as C(kubectl drain --pod-selector).
      - A malformed selector fails the task before anything changes.
    type: list
    elements: str
    aliases: [label_selectors]
  ignore_daemonsets:
    description:
      - Leave pods managed by a DaemonSet in place. When V(false), such a pod fails the drain.
    type: bool
    default: true
  delete_emptydir_data:
    description:
      - Evict pods that use C(emptyDir) volumes; their data is lost. When V(false), such a pod fails the
        drain before anything changes.
    type: bool
    default: false
  force:
    description:
      - Evict pods that no controller owns; nothing recreates them. When V(false), such a pod fails the
        drain before anything changes.
    type: bool
    default: false
  terminate_grace_period:
    description:
      - Grace period in seconds given to each evicted pod, instead of the pod's own. V(0) deletes at once.
    type: int
  disable_eviction:
    description:
      - Delete pods with a plain DELETE instead of the Eviction API.
      - This bypasses PodDisruptionBudgets.
    type: bool
    default: false
  eviction_concurrency:
    description:
      - How many evictions may be in flight at the same time.
    type: int
    default: 10
  wait:
    description:
      - Wait until the node is drained or O(wait_timeout) has passed. Otherwise make one pass and return.
    type: bool
    default: false
  wait_timeout:
    description:
      - Seconds the drain may take.
      - With O(wait=true), counted from the start of this task.
      - With O(wait=false), counted from when the drain started, recorded in the node annotation
        C(<annotation_prefix>/drain-started) by the pass that cordoned the node; so a task C(until)
        loop, or a later run, meets the same deadline. Uncordoning removes the annotation.
      - When it has passed, O(on_timeout) decides.
    type: int
    default: 600
  not_before:
    description:
      - With O(wait=false), an RFC 3339 UTC time (C(2026-11-30T10:00:00Z)) before which the drain clock does
        not start, even when the node's C(drain-started) annotation is older. A new run of an upgrade passes its
        own start time, so a drain that an earlier, stopped run began gets a full O(wait_timeout) again once the
        cause (for example a PodDisruptionBudget) is fixed, instead of failing at once on the old deadline.
    type: str
  wait_sleep:
    description:
      - Longest pause in seconds between two eviction rounds. Rounds start 0.5 s apart and back off
        to this value while nothing moves; a server's Retry-After is honoured up to this value.
    type: float
    default: 5
  on_timeout:
    description:
      - What to do when pods are left at the deadline.
      - V(fail) fails the task with a message naming every remaining pod and, for each blocked one,
        the PDB and its C(disruptionsAllowed). The node stays cordoned.
      - V(force) deletes the remaining pods with a plain DELETE, which B(bypasses PodDisruptionBudgets);
        pods already terminating are deleted with grace period 0. The deleted pods are returned in RV(forced).
      - V(continue) returns without failing, with RV(reason=timeout) and the blockers listed, for
        playbooks that decide themselves.
    type: str
    choices: [fail, force, continue]
    default: fail
  annotation_prefix:
    description:
      - Prefix (a DNS subdomain) of the annotation that records when the drain started.
    type: str
    default: image-upgrade.kubenodes.io
extends_documentation_fragment:
  - kubenodes.image_upgrade.kube_auth
attributes:
  check_mode:
    support: full
    description:
      - Nothing is changed. RV(evicted) lists the pods that would be evicted now and RV(blocked) the
        pods a PDB would refuse now, from the PDBs' current C(disruptionsAllowed).
  diff_mode:
    support: full
    description:
      - Shows the node's C(unschedulable) flag and the pods that must leave, before and after.
notes:
  - A pod covered by more than one PDB cannot be evicted (the API refuses it); it is reported as blocked
    with RV(blocked[].cause=multiple_pdbs).
  - Reading PDBs needs C(list) on C(poddisruptionbudgets); without it every eviction is sent each round
    and the PDB named in the API's refusal is reported, with C(disruptions_allowed) null.
  - Pods a PDB would refuse now are not sent an eviction every round; one probe per spent PDB is, so the
    API's own answer is reported and a budget that frees up is used at once.
  - "RBAC: C(get) and C(patch) on C(nodes); C(list) on C(pods); C(create) on C(pods/eviction); C(list) on
    C(poddisruptionbudgets); C(delete) on C(pods) only for O(disable_eviction) or O(on_timeout=force)."
seealso:
  - name: kubectl drain
    description: The command whose pod selection this module follows.
    link: https://kubernetes.io/docs/tasks/administer-cluster/safely-drain-node/
"""

EXAMPLES = r"""
- name: Drain a node, one pass per retry, until it is empty
  kubenodes.image_upgrade.node_drain:
    name: worker-3
    state: drained
    delete_emptydir_data: true
    wait_timeout: 900
  register: drain
  # Retry while pods are on their way or a PDB holds them; stop when drained, past the deadline, or on
  # a cause a retry cannot fix (a refused pod, a bad selector, a missing node).
  until: drain.reason not in ['evicting', 'pdb_blocked', 'eviction_failed', 'api_error']
  retries: 180
  delay: 5

- name: Drain and wait here; delete what PDBs still protect after 10 minutes
  kubenodes.image_upgrade.node_drain:
    name: worker-3
    wait: true
    wait_timeout: 600
    on_timeout: force
    terminate_grace_period: 30

- name: Drain only some pods, and let the playbook decide at the deadline
  kubenodes.image_upgrade.node_drain:
    name: worker-3
    pod_selectors:
      - app!=csi-attacher
    wait: true
    wait_timeout: 300
    on_timeout: continue
  register: drain

- name: Show what blocks
  ansible.builtin.debug:
    msg: "{{ item.namespace }}/{{ item.pod }} is blocked by PDB {{ item.pdb }}"
  loop: "{{ drain.blocked }}"

- name: Make the node schedulable again
  kubenodes.image_upgrade.node_drain:
    name: worker-3
    state: uncordoned
"""

RETURN = r"""
node:
  description: Name of the node.
  returned: always
  type: str
  sample: worker-3
unschedulable:
  description: Whether the node is cordoned when the module returns (predicted in check mode).
  returned: success
  type: bool
  sample: true
reason:
  description:
    - Stable code for C(until) expressions.
    - V(drained) (nothing left to evict), V(evicting) (pods still terminating or waiting), V(pdb_blocked)
      (a PDB refused an eviction), V(eviction_failed) (another API error refused one), V(timeout),
      V(forced), V(pods_refused) (a pod may not be removed with these options), V(cordoned),
      V(uncordoned), V(node_not_found), V(invalid_selector), V(api_error), V(inconsistent) (the node's upgrade
      annotations disagree with the cluster; see RV(problems)).
  returned: always
  type: str
  sample: pdb_blocked
drained:
  description: Whether no pod that the drain must remove is left on the node.
  returned: success
  type: bool
  sample: false
evicted:
  description:
    - Pods whose eviction (or deletion) the API accepted during this task.
    - In check mode, the pods that would be evicted now.
  returned: always
  type: list
  elements: dict
  sample: [{pod: web-6d4f8-abcde, namespace: shop}]
  contains:
    pod:
      description: Pod name.
      type: str
    namespace:
      description: Pod namespace.
      type: str
pending:
  description: Pods that must still leave and are not blocked - terminating, or not evicted yet.
  returned: always
  type: list
  elements: dict
  sample: [{pod: web-6d4f8-fghij, namespace: shop, status: terminating}]
  contains:
    pod:
      description: Pod name.
      type: str
    namespace:
      description: Pod namespace.
      type: str
    status:
      description: V(terminating) or V(not_evicted).
      type: str
blocked:
  description:
    - Pods that cannot leave now, with what blocks them. In check mode, the pods a PDB would refuse now.
    - Pods refused by the options (no controller, emptyDir data, DaemonSet) when RV(reason=pods_refused).
  returned: always
  type: list
  elements: dict
  sample:
    - pod: db-0
      namespace: shop
      pdb: db
      disruptions_allowed: 0
      cause: pdb
      message: Cannot evict pod as it would violate the pod's disruption budget.
  contains:
    pod:
      description: Pod name.
      type: str
    namespace:
      description: Pod namespace.
      type: str
    pdb:
      description: Name of the PodDisruptionBudget that blocks the pod (several, comma-separated, for
        RV(blocked[].cause=multiple_pdbs)); null when no PDB is involved.
      type: str
    disruptions_allowed:
      description: C(status.disruptionsAllowed) of that PDB when it was read; null when unknown.
      type: int
    cause:
      description: V(pdb), V(multiple_pdbs), V(api_error), V(unmanaged), V(local_storage) or V(daemonset).
      type: str
    message:
      description: The API server's message, or why the options refuse the pod.
      type: str
skipped_pods:
  description:
    - Pods left on the node on purpose, with the reason.
    - Named C(skipped_pods) because Ansible reserves C(skipped) for tasks that did not run.
  returned: always
  type: list
  elements: dict
  sample: [{pod: kube-proxy-x2x9z, namespace: kube-system, reason: daemonset, message: managed by DaemonSet kube-proxy}]
  contains:
    pod:
      description: Pod name.
      type: str
    namespace:
      description: Pod namespace.
      type: str
    reason:
      description: V(daemonset) or V(mirror_pod).
      type: str
    message:
      description: Details.
      type: str
forced:
  description: Pods deleted without eviction because of O(on_timeout=force).
  returned: always
  type: list
  elements: dict
  sample: []
drain_started:
  description: When the drain of this node started (the annotation), RFC 3339 UTC; null when not draining.
  returned: success
  type: str
  sample: "2026-11-30T04:10:00Z"
deadline:
  description: The deadline of this drain, RFC 3339 UTC; null when not draining.
  returned: success
  type: str
  sample: "2026-11-30T04:20:00Z"
problems:
  description:
    - "With RV(reason=inconsistent), why the node was not touched - each with the node, the step, a stable
      code and a message such as C(node w-1: heir annotation holds 'garbage!!', which is not a node name)."
  returned: when reason is inconsistent
  type: list
  elements: dict
  sample: [{node: w-1, step: drain, code: heir_not_ready, message: "node w-1: its heir w-7 is not Ready"}]
elapsed:
  description: Seconds this task took.
  returned: always
  type: float
  sample: 3.2
"""

import time
import traceback

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core as planner
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import drain as core
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import drain_api as api
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import validate as option_rules
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import KubenodesModule
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.kube import KubeAuthError, build_api_client

# kubernetes.core.k8s_drain's state names, and the ones of this module they mean.
K8S_DRAIN_STATES = {"cordon": "cordoned", "drain": "drained", "uncordon": "uncordoned"}

# The drain options upgrade_step shares (drain.py), with this module's own.
ARGUMENT_SPEC = dict(
    core.DRAIN_ARG_SPEC,
    name=dict(type="str", required=True, aliases=["node"]),
    state=dict(type="str", choices=["cordoned", "drained", "uncordoned"] + sorted(K8S_DRAIN_STATES), default="drained"),
    pod_selectors=dict(type="list", elements="str", aliases=["label_selectors"]),
    disable_eviction=dict(type="bool", default=False),
    wait=dict(type="bool", default=False),
    wait_sleep=dict(type="float", default=5),
    annotation_prefix=dict(type="str", default=planner.DEFAULT_PREFIX),
)

OPTION_RULES = dict(
    name=option_rules.object_name,
    terminate_grace_period=option_rules.optional_seconds,
    eviction_concurrency=lambda n, v: option_rules.integer(n, v, 1, option_rules.MAX_EVICTION_CONCURRENCY),
    wait_timeout=option_rules.seconds,
    wait_sleep=option_rules.positive_number,
    annotation_prefix=option_rules.annotation_prefix,
)


class DrainModule:
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.started = time.time()
        self.node_name = self.params["name"]
        self.result = dict(changed=False, node=self.node_name, reason=None, evicted=[], pending=[], blocked=[],
                           skipped_pods=[], forced=[])

    # -- helpers --------------------------------------------------------------------------------------

    def finish(self, **extra):
        self.result.update(extra)
        self.result["elapsed"] = round(time.time() - self.started, 3)
        self.module.exit_json(**self.result)

    def fail(self, msg, reason, **extra):
        self.result.update(extra)
        self.result["reason"] = reason
        self.result["elapsed"] = round(time.time() - self.started, 3)
        self.module.fail_json(msg=msg, **self.result)

    def validate(self):
        p = self.params
        problems = option_rules.check(p, OPTION_RULES)
        if problems:
            self.fail("; ".join(problems) + ". Nothing was changed", "invalid_argument")
        self.not_before = api.parse_timestamp(p["not_before"]) if p["not_before"] else None
        if p["not_before"] and self.not_before is None:
            self.fail("not_before must be an RFC 3339 UTC time such as 2026-11-30T10:00:00Z, got %r" % p["not_before"],
                      "invalid_argument")
        try:
            self.label_selector = core.join_selectors(p["pod_selectors"])
        except core.SelectorError as exc:
            self.fail("pod_selectors: %s" % exc, core.REASON_INVALID_SELECTOR)

    @property
    def annotation(self):
        return api.drain_annotation(self.params["annotation_prefix"])

    def read_node(self):
        node = api.get_node(self.client, self.node_name)
        if node is None:
            self.fail("node %s not found" % self.node_name, core.REASON_NODE_NOT_FOUND)
        return node

    def cross_check(self, node, step):
        """A node an upgrade is replacing is only cordoned or drained when the cluster agrees with the record
        (planner.check_cordon / check_drain, the cluster's side); other nodes are drained as asked."""
        keys = planner.AnnotationKeys(self.params["annotation_prefix"])
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        if not annotations.get(keys.heir) and annotations.get(keys.obsolete) != "true":
            return
        heir_name = annotations.get(keys.heir) or ""
        heir = api.get_node(self.client, heir_name) if planner.valid_node_name(heir_name) else None
        check = planner.check_cordon if step == "cordon" else planner.check_drain
        problems = check(node, heir, keys=keys, now=time.time())
        if problems:
            self.fail("refusing to %s node %s; the cluster disagrees with the upgrade's record of it: %s"
                      % (step, self.node_name, "; ".join(p["message"] for p in problems)), "inconsistent",
                      problems=problems)

    is_cordoned = staticmethod(api.is_cordoned)

    def set_diff(self, before, after):
        if self.module._diff:
            self.result["diff"] = dict(before=before, after=after)

    # -- states ---------------------------------------------------------------------------------------

    def cordon(self):
        node = self.read_node()
        cordoned = self.is_cordoned(node)
        if not cordoned:
            self.cross_check(node, "cordon")
        self.set_diff({"unschedulable": cordoned}, {"unschedulable": True})
        if not cordoned and not self.module.check_mode:
            api.patch_node(self.client, self.node_name, {"spec": {"unschedulable": True}})
        self.finish(changed=not cordoned, unschedulable=True, reason=core.REASON_CORDONED)

    def uncordon(self):
        node = self.read_node()
        cordoned = self.is_cordoned(node)
        self.set_diff({"unschedulable": cordoned}, {"unschedulable": False})
        if cordoned and not self.module.check_mode:
            api.uncordon(self.client, self.node_name, self.annotation)
        self.finish(changed=cordoned, unschedulable=False, reason=core.REASON_UNCORDONED)

    def settings(self, deadline):
        p = self.params
        return api.DrainSettings(
            options=core.DrainOptions(ignore_daemonsets=p["ignore_daemonsets"],
                                      delete_emptydir_data=p["delete_emptydir_data"], force=p["force"]),
            label_selector=self.label_selector,
            grace_period=p["terminate_grace_period"],
            use_eviction=not p["disable_eviction"],
            concurrency=p["eviction_concurrency"],
            wait=p["wait"],
            deadline=deadline,
            on_timeout=p["on_timeout"],
            max_delay=p["wait_sleep"],
        )

    def refuse(self, refused, cordoned_before):
        blocked = [core.pod_ref(d.namespace, d.name, pdb=None, disruptions_allowed=None, cause=d.causes[0],
                                message=d.message) for d in refused]
        state = "the node is still cordoned" if cordoned_before or self.result["changed"] else "nothing was changed"
        self.fail("cannot drain node %s (%s): %s" % (self.node_name, state, "; ".join(core.describe_refused(refused))),
                  core.REASON_PODS_REFUSED, blocked=blocked, unschedulable=cordoned_before or self.result["changed"])

    def drain(self):
        node = self.read_node()
        cordoned = self.is_cordoned(node)
        self.cross_check(node, "drain")
        recorded_start = api.recorded_drain_start(node, self.annotation)
        drain_start = recorded_start or self.started
        deadline = (self.started + self.params["wait_timeout"] if self.params["wait"]
                    else api.drain_deadline(drain_start, self.not_before, self.params["wait_timeout"]))
        settings = self.settings(deadline)
        self.result.update(drain_started=api.format_timestamp(drain_start), deadline=api.format_timestamp(deadline))

        # The first list comes before any change: a bad selector or a refused pod changes nothing.
        try:
            first = api.survey(self.client, self.node_name, settings)
        except api.PodsRefused as exc:
            self.refuse(exc.refused, cordoned)
        except api.ApiCallError as exc:
            if exc.status == 400 and self.label_selector:
                self.fail("pod_selectors %r rejected by the API server: %s" % (self.label_selector, exc.message),
                          core.REASON_INVALID_SELECTOR)
            raise
        pods, decisions = first
        must_go = [d for d in decisions if d.action in (core.EVICT, core.TERMINATING)]
        self.set_diff({"unschedulable": cordoned, "pods": ["%s/%s" % d.key for d in must_go]},
                      {"unschedulable": True, "pods": []})

        if self.module.check_mode:
            self.predict(cordoned, recorded_start, pods, decisions)
            return

        if not cordoned or recorded_start is None:
            api.cordon_for_drain(self.client, self.node_name, self.annotation, drain_start)
            self.result["changed"] = True
        api.widen_connection_pool(self.client, settings.concurrency + 2)
        try:
            report = api.drain_node(self.client, self.node_name, settings, first_survey=first)
        except api.PodsRefused as exc:
            self.refuse(exc.refused, True)
        if report.evicted or report.forced:
            self.result["changed"] = True
        self.result.update(evicted=report.evicted, pending=report.pending, blocked=report.blocked,
                           skipped_pods=report.skipped, forced=report.forced, unschedulable=True,
                           drained=report.drained, reason=report.reason)
        if report.timed_out and self.params["on_timeout"] == core.ON_TIMEOUT_FAIL:
            self.fail(api.timeout_message(self.node_name, deadline, self.params["wait_timeout"], report),
                      core.REASON_TIMEOUT)
        if report.reason == core.REASON_EVICTION_FAILED and report.timed_out:
            self.fail("drain of node %s: forced deletion failed for: %s"
                      % (self.node_name, "; ".join(core.describe_remaining(report.blocked, []))),
                      core.REASON_EVICTION_FAILED)
        self.finish()

    def predict(self, cordoned, recorded_start, pods, decisions):
        to_evict = [pods[d.key] for d in decisions if d.action == core.EVICT]
        if self.params["disable_eviction"]:
            # A plain DELETE, as the real run sends: PodDisruptionBudgets do not apply.
            accepted, blocked = to_evict, []
        else:
            pdbs = api.list_pdbs(self.client, [d.namespace for d in decisions if d.action == core.EVICT]) if to_evict else []
            accepted, blocked = core.predict_evictions(to_evict, pdbs or [])
        pending = [core.pod_ref(d.namespace, d.name, status="terminating") for d in decisions if d.action == core.TERMINATING]
        evicted = [core.pod_ref(*core.pod_key(p)) for p in accepted]
        skipped = [core.pod_ref(d.namespace, d.name, reason=d.causes[0], message=d.message)
                   for d in decisions if d.action == core.SKIP]
        changed = not cordoned or recorded_start is None or bool(accepted)
        self.finish(changed=changed, unschedulable=True, evicted=evicted, pending=pending, blocked=blocked,
                    skipped_pods=skipped, drained=not (to_evict or pending),
                    reason=core.pass_reason([], blocked, pending + evicted))

    def run(self):
        self.validate()
        try:
            self.client = build_api_client(self.params)
        except KubeAuthError as exc:
            self.fail("cannot connect to Kubernetes: %s" % exc, core.REASON_API_ERROR)
        state = K8S_DRAIN_STATES.get(self.params["state"], self.params["state"])
        try:
            if state == "cordoned":
                self.cordon()
            elif state == "uncordoned":
                self.uncordon()
            else:
                self.drain()
        except api.ApiCallError as exc:
            self.fail("node %s (%s): %s %s failed: %s %s: %s" % (self.node_name, state, exc.method, exc.path,
                                                                 exc.status, exc.reason, exc.message),
                      core.REASON_API_ERROR, exception=traceback.format_exc())
        except Exception as exc:  # connection refused, TLS errors, timeouts: say so instead of a traceback
            self.fail("node %s (%s): %s: %s" % (self.node_name, state, type(exc).__name__, exc),
                      core.REASON_API_ERROR, exception=traceback.format_exc())


def main():
    module = KubenodesModule(argument_spec=ARGUMENT_SPEC, kube_auth=True, supports_check_mode=True)
    DrainModule(module).run()


if __name__ == "__main__":
    main()
