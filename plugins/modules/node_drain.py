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
      - V(uncordoned) makes the node schedulable again, only when it is cordoned. A node an upgrade has taken past
        its point of no return (C(<annotation_prefix>/phase) V(etcd-removed) or V(deleting)) is refused with
        C(reason=inconsistent), naming its phase, and nothing changes - it can only be removed.
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
  policies:
    description:
      - The drain ladder - rules, each a dictionary with C(name) (required, unique), C(namespaces) (a list; empty or
        left out is any), C(match_labels) (a mapping every label of which the pod must carry), C(delete_after) and
        C(force_after) (seconds from when the drain began - O(not_before) when that is later - or left out for
        never). The first rule that matches a pod is its rule.
      - A pod whose rule's C(delete_after) has passed is deleted without the Eviction API, which B(bypasses
        PodDisruptionBudgets), keeping its grace period; once C(force_after) has passed it is deleted with grace
        period 0, also when it is already terminating. Each is returned in RV(forced) with its step and rule.
      - A pod no rule matches is only evicted until O(wait_timeout), when O(on_timeout) decides. The rules are
        checked before anything is changed.
    type: list
    elements: dict
    default: []
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
    - Pods whose eviction (or deletion) the API accepted during this task, each with C(pod), C(namespace) and, for a pod
      with a controller, C(owner) (C(Kind/name), a Deployment's pod its ReplicaSet).
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
  description:
    - Pods deleted without eviction because of O(on_timeout=force), or by a rule of O(policies) (then with
      C(step) V(delete) or V(force) and C(policy), the rule's name).
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

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import node_draining
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import KubenodesModule


def main():
    module = KubenodesModule(argument_spec=node_draining.ARGUMENT_SPEC, kube_auth=True, supports_check_mode=True)
    node_draining.run(module)


if __name__ == "__main__":
    main()
