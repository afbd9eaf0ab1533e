#!/usr/bin/python
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_delete
short_description: Delete the Node object of a replaced (donor) or obsolete node
version_added: 1.0.0
description:
  - Deletes the Node object of a donor whose replacement is done, or of an obsolete node, once its instance is
    gone from the cloud (see M(kubenodes.image_upgrade.csp_node)).
  - Any other node is refused, so a mistake cannot delete a node that is not being replaced. A donor is a node
    with the C(<annotation_prefix>/heir) annotation; an obsolete node has C(<annotation_prefix>/obsolete=true).
  - Before anything is deleted, every node is cross-checked against the cluster, also when the module is used on
    its own. A donor's heir must exist, be Ready, name it as its donor, be in its scaling group and run a
    different image; the node must be cordoned, and this collection must have recorded its drain (and, for a
    control-plane node, its etcd removal) in C(<annotation_prefix>/phase-history). An obsolete node must have
    been marked by this collection. Any disagreement fails the task naming each problem in RV(problems), and
    nothing is deleted.
  - A node must also be drained, with or without O(provider) - cordoned, and running no pod other than DaemonSet
    pods, mirror pods of static pods and finished pods (C(Succeeded) or C(Failed)). A pod still being deleted
    counts. Otherwise the task fails naming the node, a few of its pods with their count (C(code=pods_left) or
    C(not_cordoned) in RV(problems)), and asking to drain it first with M(kubenodes.image_upgrade.node_drain);
    nothing is deleted. This costs one listing of the pods of each node, so the identity needs C(list) on pods in
    all namespaces, as for M(kubenodes.image_upgrade.node_drain) (C(roles/rolling_upgrade/files/rbac.yml) grants it).
  - With O(provider), the cloud is asked too (one lookup per node and heir, then one listing per scaling group
    they are in), and the Node is deleted only when the cloud agrees - its instance is gone or being deleted
    (a Node deleted while its instance runs comes back, or leaves a machine nobody sees), and the cloud lists
    its heir's instance, in the same scaling group. Without O(provider) only the cluster's
    side is checked. The role passes the cloud options to it (it is in the C(cloud) action group), and the step
    engine makes the same cross-check in process.
  - The delete carries a precondition on the resourceVersion read, so a node that changed in between is not
    deleted on stale grounds. A node already gone is not an error.
author:
  - kubenodes.image_upgrade maintainers (!UNKNOWN)
options:
  name:
    description:
      - Names of the nodes to delete.
    type: list
    elements: str
    required: true
  annotation_prefix:
    description:
      - Prefix of the annotation keys (the same as given to the other modules).
    type: str
    default: image-upgrade.kubenodes.io
  provider:
    description:
      - The cloud whose scaling groups hold the nodes. When given (with that cloud's options), the cloud must
        confirm each deletion as well; see the description.
    required: false
extends_documentation_fragment:
  - kubenodes.image_upgrade.kube_auth
  - kubenodes.image_upgrade.cloud_provider
  - kubenodes.image_upgrade.gcp
  - kubenodes.image_upgrade.azure
  - kubenodes.image_upgrade.aws
attributes:
  check_mode:
    support: full
    description: Reports which nodes would be deleted; deletes nothing.
  diff_mode:
    support: full
    description: Shows the named Node objects that exist before and after the deletion; no diff when none is deleted.
"""

EXAMPLES = r"""
- name: The donors' instances are gone; remove their Node objects
  kubenodes.image_upgrade.node_delete:
    name:
      - worker-a-0
      - worker-a-1

- name: The same, with the cloud confirming that each instance is gone
  kubenodes.image_upgrade.node_delete:
    name: [worker-a-0]
    provider: gcp
    gcp:
      project: my-project
"""

RETURN = r"""
deleted:
  description: Nodes deleted (or that would be, in check mode).
  returned: always
  type: list
  elements: str
absent:
  description: Nodes that did not exist.
  returned: always
  type: list
  elements: str
problems:
  description:
    - "Why nodes were refused (empty on success). Each names the node, the step, a stable code and a message
      such as C(node w-1: heir annotation names w-9, which does not exist)."
  returned: always
  type: list
  elements: dict
  sample: [{node: w-1, step: node-deletion, code: heir_missing, message: "node w-1: heir annotation names w-9, which does not exist"}]
"""

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import node_deletion, validate
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import CLOUD_OPTIONAL, KubenodesModule


def main():
    module = KubenodesModule(argument_spec=node_deletion.ARGUMENT_SPEC, kube_auth=True, cloud=CLOUD_OPTIONAL,
                             supports_check_mode=True, validate=validate.checker(node_deletion.OPTION_RULES))
    node_deletion.run(module)


if __name__ == "__main__":
    main()
