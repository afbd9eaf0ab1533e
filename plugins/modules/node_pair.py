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
    C(obsolete=true). A pair undone is named in a warning and in RV(problems).
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
problems:
  description:
    - What the planner found wrong (as M(kubenodes.image_upgrade.node_image_facts) returns it), and each pair this run
      undid (or would undo, in check mode) with C(code=pair_undone) - a warning names it too.
    - Each names the C(node), a stable C(code) and a C(message).
  returned: always
  type: list
  elements: dict
  sample: [{node: w-5, step: null, code: pair_undone, action: unpaired,
            message: "node w-5: its pair was undone (this upgrade did not create it): heir w-5 no longer replaces donor w-1"}]
nodes:
  description: Node names per group, as M(kubenodes.image_upgrade.node_image_facts) returns them, before
    this run's writes.
  returned: always
  type: dict
  sample: {outdated: [w-1], up_to_date: [], donor: [], heir: [], new: [w-5], obsolete: [], invalid: []}
"""

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import node_pairing
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import KubenodesModule


def main():
    module = KubenodesModule(argument_spec=node_pairing.argument_spec(), supports_check_mode=True)
    module.require("kubernetes")
    node_pairing.run(module)


if __name__ == "__main__":
    main()
