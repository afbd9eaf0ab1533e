#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_pair
short_description: Pair new nodes with the old nodes they replace, and keep the upgrade state on the nodes
version_added: 1.0.0
description:
  - Writes, as node annotations under O(annotation_prefix), the state of an image upgrade that
    M(kubenodes.image_upgrade.node_image_facts) reads.
  - Caches each node's scaling group and image (C(scaling-group-id), C(node-image)); cached values are never
    recomputed. Without O(provider), only nodes that carry both already are handled.
  - Pairs each joined new node (on O(image), never seen before) with an outdated node of the same scaling
    group - the new node gets C(donor=<old>), the old node gets C(heir=<new>).
  - Repairs broken pairs - completes a half-written pair, promotes a heir whose donor is gone (C(phase=replaced)),
    unpairs halves that cannot be completed, clears stale halves - and marks a former heir that no donor needs
    C(obsolete=true).
  - Copies the donor's labels (and with O(copy_taints) its taints) to the heir, except reserved keys
    (C(*kubernetes.io/*), C(*k8s.io/*)) and O(exclude_labels). Labels only the heir has are kept.
  - Records the phase a donor or obsolete node has reached (O(phases)), with its time, and appends it to the
    node's phase trail (C(<annotation_prefix>/phase-history)), which the steps after a drain require.
  - Nodes whose annotations disagree with the cluster or the cloud (see RV(nodes)) are left alone - nothing is
    written on them, and a phase requested for one fails the task, naming the problem.
  - Every write is a JSON merge patch that carries the node's resourceVersion; a conflict re-reads the node
    and retries, and a change that no longer applies is skipped and reported.
author:
  - kubenodes.image_upgrade maintainers (!UNKNOWN)
options:
  image:
    description:
      - The image every node should run, in the cloud's format. Compared case-insensitively.
    type: str
    required: true
  provider:
    description:
      - The cloud whose scaling groups hold the nodes. Needed to cache the scaling group and image of nodes
        that do not carry them yet (new nodes always); without it only annotated nodes are handled.
    required: false
  annotation_prefix:
    description:
      - Prefix of the state annotations. V(constellation.edgeless.systems) continues an upgrade the
        Constellation node operator left half done.
    type: str
    default: image-upgrade.kubenodes.io
  scaling_groups:
    description:
      - Only nodes of these scaling group IDs. All groups when empty.
    type: list
    elements: str
    default: []
  exclude_labels:
    description:
      - Label (and taint) keys never copied from donor to heir, besides the reserved ones.
    type: list
    elements: str
    default: []
  copy_taints:
    description:
      - Also copy the donor's taints (except reserved keys) to its heir.
    type: bool
    default: false
  phases:
    description:
      - Phases to record on donors or obsolete nodes, after the step succeeded - V(draining), V(drained),
        V(etcd-removed) (control plane). V(paired) is written by the pairing itself.
      - C(deleting), which earlier releases accepted but never wrote, is no longer accepted; a node that
        carries it from an older run is still read and goes straight to deletion.
      - Every entry is checked before anything is written; a node that is neither a donor nor obsolete fails
        the task.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The node name.
        type: str
        required: true
      phase:
        description: The phase it reached.
        type: str
        required: true
        choices: [paired, draining, drained, etcd-removed]
extends_documentation_fragment:
  - kubenodes.image_upgrade.kube_auth
  - kubenodes.image_upgrade.journal_record
  - kubenodes.image_upgrade.cloud_provider
  - kubenodes.image_upgrade.gcp
  - kubenodes.image_upgrade.azure
  - kubenodes.image_upgrade.aws
attributes:
  check_mode:
    support: full
    description:
      - Nothing is written; C(changed) and the lists tell what would be.
  diff_mode:
    support: full
    description:
      - Shows, per node, the annotations, labels and taints before and after.
requirements:
  - kubernetes (the Python client)
  - the SDK of the chosen cloud, when O(provider) is given
seealso:
  - module: kubenodes.image_upgrade.node_image_facts
"""

EXAMPLES = r"""
- name: Pair joined heirs with their donors and copy labels
  kubenodes.image_upgrade.node_pair:
    image: ami-0123456789abcdef0
    provider: aws
    aws:
      region: eu-west-1
    exclude_labels: [example.com/pinned]

- name: Record that a donor is drained
  kubenodes.image_upgrade.node_pair:
    image: ami-0123456789abcdef0
    phases:
      - name: ip-10-0-1-23.eu-west-1.compute.internal
        phase: drained

- name: Continue an upgrade the Constellation operator left half done
  kubenodes.image_upgrade.node_pair:
    image: /communityGalleries/example/images/node/versions/2.0.0
    provider: azure
    azure:
      subscription_id: 00000000-0000-0000-0000-000000000000
    annotation_prefix: constellation.edgeless.systems
"""

RETURN = r"""
pairs:
  description: Pairs written (C(heir), C(donor), C(group)).
  returned: always
  type: list
  elements: dict
  sample: [{heir: w-5, donor: w-1, group: g}]
repairs:
  description: Pair repairs applied (C(name), C(action) one of complete, unpair, promote, clear).
  returned: always
  type: list
  elements: dict
  sample: [{name: w-4, action: promote, donor: w-0}]
obsolete:
  description: Nodes marked obsolete.
  returned: always
  type: list
  elements: str
  sample: []
annotated:
  description: Nodes whose scaling group and image were cached, with what was written.
  returned: always
  type: list
  elements: dict
  sample: [{name: w-1, annotations: {scaling-group-id: g, node-image: img-1}}]
label_copies:
  description: Labels (and taints) copied from C(donor) to C(heir).
  returned: always
  type: list
  elements: dict
  sample: [{heir: w-5, donor: w-1, labels: {team: a}, taints: []}]
phases:
  description: Phases recorded (C(name), C(phase)).
  returned: always
  type: list
  elements: dict
  sample: [{name: w-0, phase: drained}]
changed_nodes:
  description: Names of the nodes written (or that would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: [w-1, w-5]
skipped:
  description: Changes not written because the node changed meanwhile (C(name), C(reason)); the next run
    plans again.
  returned: always
  type: list
  elements: dict
  sample: []
nodes:
  description: Node names per group, as M(kubenodes.image_upgrade.node_image_facts) returns them, before
    this run's writes.
  returned: always
  type: dict
  sample: {outdated: [w-1], up_to_date: [], donor: [], heir: [], new: [w-5], obsolete: [], invalid: []}
"""

import time

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core, facts_views, journal, kube, node_state, progress
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import (
    CLOUD_OPTIONAL, KubenodesModule, merged_argument_spec)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.executor import write_order


def argument_spec():
    return merged_argument_spec(dict(
        image=dict(type="str", required=True),
        annotation_prefix=dict(type="str", default=core.DEFAULT_PREFIX),
        scaling_groups=dict(type="list", elements="str", default=[]),
        exclude_labels=dict(type="list", elements="str", default=[]),
        copy_taints=dict(type="bool", default=False),
        journal=dict(type="dict", options=journal.REFERENCE_SPEC),
        phases=dict(type="list", elements="dict", default=[], options=dict(
            name=dict(type="str", required=True),
            phase=dict(type="str", required=True, choices=list(core.DONOR_PHASES)),
        )),
    ), kube_auth=True, cloud=CLOUD_OPTIONAL)


def add_phase_patches(result, nodes, phases, options, now):
    """Merge the requested phase records into the planner's patches; fail before any write on bad input."""
    recorded = []
    left_alone = {}
    for problem in result.get("problems") or []:
        if problem.get("action") == "left alone":
            left_alone.setdefault(problem["node"], problem["message"])
    for item in phases:
        node = nodes.get(item["name"])
        if node is None:
            raise node_state.PlannerFailure("phases: node %s does not exist" % item["name"])
        try:
            annotations = core.phase_patch(node, item["phase"], options, now)
        except core.PlanInputError as exc:
            raise node_state.PlannerFailure("phases: %s" % exc)
        if annotations and item["name"] in left_alone:
            # A node the cross-checks leave alone gets no record either: its state stays as it was found.
            raise node_state.PlannerFailure("phases: node %s is left alone, so no phase is recorded on it: %s"
                                            % (item["name"], left_alone[item["name"]]))
        if annotations:
            entry = result["node_patches"].setdefault(item["name"], {"annotations": {}, "expect": {}})
            entry["annotations"].update(annotations)
            recorded.append(dict(name=item["name"], phase=item["phase"]))
    return recorded


def _journal_donors_gone(module, api_client, gone, now):
    """Before the promotion forgets their names: donors deleted by a run killed before it journaled them
    (only into a journal an upgrade started: a standalone call creates none)."""
    where = module.params["journal"]
    if not gone or not where or module.check_mode:
        return
    name, namespace = where["name"], where["namespace"]
    try:
        journal.merge_record(api_client, name, namespace, module.params["image"],
                             progress.donors_gone_record({"donors_gone": gone}, core.format_time(now)),
                             "the donors found gone", create=False)
    except (journal.MalformedJournal, journal.JournalConflict) as exc:
        module.fail_json(msg="journal: %s" % exc)
    except kube.ApiException as exc:
        module.fail_json(msg="cannot write the journal ConfigMap %s/%s (option journal): %s"
                         % (namespace, name, kube.api_error_message(exc)))


def _write_patches(module, api_client, nodes, patches, keys):
    """The plan's Node writes, in write_order: (changed node names, skipped ones with why, diff before, after)."""
    changed_nodes, skipped, before, after = [], [], {}, {}
    for name in sorted(patches, key=lambda n: write_order(n, patches[n], keys)):
        entry, node = patches[name], nodes[name]
        diff_before, diff_after = node_state.node_diff(node, entry)
        if not diff_before and not diff_after:
            continue
        if module.check_mode:
            status = "changed" if node_state.expectations_hold(node, entry) else "skipped"
        else:
            try:
                status = node_state.write_node(api_client, node, entry)[0]
            except node_state.NodeWriteError as exc:
                module.fail_json(msg=str(exc), changed=bool(changed_nodes), changed_nodes=changed_nodes)
        if status == "changed":
            changed_nodes.append(name)
            before[name], after[name] = diff_before, diff_after
        elif status == "skipped":
            skipped.append(dict(name=name, reason="the node changed since it was read; the next run plans again"))
    return changed_nodes, skipped, before, after


def main():
    module = KubenodesModule(argument_spec=argument_spec(), supports_check_mode=True)
    module.require("kubernetes")
    now = time.time()
    try:
        api_client, nodes, result = node_state.plan_from_cluster(module.params, now=now)[:3]
        options = node_state.planner_options(module.params)
        keys = core.AnnotationKeys(options.annotation_prefix)
        recorded = add_phase_patches(result, nodes, module.params["phases"], options, now)
    except node_state.PlannerFailure as exc:
        module.fail_json(msg=str(exc))
    except Exception as exc:  # pylint: disable=broad-except
        module.fail_from_exception(exc, "node_pair: reading the cluster and the cloud")

    _journal_donors_gone(module, api_client, facts_views.donors_gone(list(nodes.values()), result, keys), now)
    plan = result["plan"]
    changed_nodes, skipped, before, after = _write_patches(module, api_client, nodes, result["node_patches"], keys)
    written = set(changed_nodes)
    output = dict(
        changed=bool(changed_nodes),
        pairs=[p for p in plan["pairs"] if p["heir"] in written],
        repairs=[r for r in plan["repairs"] if r["name"] in written],
        obsolete=[n for n in plan["obsolete"] if n in written],
        annotated=[a for a in plan["annotate"] if a["name"] in written],
        label_copies=[c for c in plan["label_copies"] if c["heir"] in written],
        phases=[p for p in recorded if p["name"] in written],
        changed_nodes=changed_nodes,
        skipped=skipped,
        nodes=result["nodes"],
    )
    if module._diff:
        output["diff"] = dict(before=before, after=after)
    module.exit_json(**output)


if __name__ == "__main__":
    main()
