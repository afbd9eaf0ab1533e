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
extends_documentation_fragment:
  - kubenodes.image_upgrade.kube_auth
attributes:
  check_mode:
    support: full
    description: Reports which nodes would be deleted; deletes nothing.
  diff_mode:
    support: none
    description: No diff is shown.
"""

EXAMPLES = r"""
- name: The donors' instances are gone; remove their Node objects
  kubenodes.image_upgrade.node_delete:
    name:
      - worker-a-0
      - worker-a-1
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

import time

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core, node_state
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import validate
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import KubenodesModule


def run(module, api_client):
    keys = core.AnnotationKeys(module.params["annotation_prefix"])
    nodes, result = {}, dict(changed=False, deleted=[], absent=[], problems=[])
    # Check every node first: one refused node means nothing is deleted.
    for name in module.params["name"]:
        node = node_state.get_node(api_client, name)
        if node is None:
            result["absent"].append(name)
            continue
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        if not annotations.get(keys.heir) and annotations.get(keys.obsolete) != "true":
            module.fail_json(msg="node %s is neither a donor (no %s annotation) nor obsolete; refusing to delete it"
                             % (name, keys.heir), **result)
        heir_name = annotations.get(keys.heir) or ""
        heir = node_state.get_node(api_client, heir_name) if core.valid_node_name(heir_name) else None
        # The cluster's side of the cross-check (the cloud's was made when its instance was deleted).
        result["problems"].extend(core.check_node_deletion(node, heir, keys=keys, now=time.time()))
        nodes[name] = node
    if result["problems"]:
        module.fail_json(msg="refusing to delete any node; the cluster disagrees with the upgrade's records: %s"
                         % "; ".join(p["message"] for p in result["problems"]), **result)
    for name, node in nodes.items():
        if not module.check_mode:
            outcome = node_state.delete_node_as_read(api_client, node, keys.prefix)
            if outcome == "absent":
                result["absent"].append(name)
                continue
            if outcome == "changed":
                module.fail_json(msg="node %s changed while being deleted (its annotations, labels, cordon or taints); "
                                 "nothing more was deleted: run again" % name, **result)
        result["deleted"].append(name)
        result["changed"] = True
    return result


def main():
    module = KubenodesModule(argument_spec=dict(
        name=dict(type="list", elements="str", required=True),
        annotation_prefix=dict(type="str", default=core.DEFAULT_PREFIX),
    ), kube_auth=True, supports_check_mode=True,
        validate=validate.checker(dict(name=validate.object_names, annotation_prefix=validate.annotation_prefix)))
    try:
        core.AnnotationKeys(module.params["annotation_prefix"])
    except core.PlanInputError as exc:
        module.fail_json(msg=str(exc))
    module.run(lambda: run(module, module.kube_client()), "deleting nodes %s" % ", ".join(module.params["name"]))


if __name__ == "__main__":
    main()
