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

import time

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core, model, node_state
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import validate
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import CLOUD_OPTIONAL, KubenodesModule


def provider_id(node):
    return ((node or {}).get("spec") or {}).get("providerID") or ""


def cloud_view(module, pairs):
    """What the cloud says about the instances of the nodes and their heirs ({name: (node, heir)}), as a
    core.CloudView, or None without O(provider): each instance's own scaling group is asked of the instance,
    then each of those groups is listed once (for the state, image and group of its instances)."""
    if not module.params.get("provider"):
        return None
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import factory

    provider = factory.build_provider(module.params)
    homes = set()
    for node, heir in pairs.values():
        for pid in filter(None, (provider_id(node), provider_id(heir))):
            home = provider.instance_group(pid)
            if home:
                homes.add(home)
    listed = [inst for home in sorted(homes) for inst in provider.list_instances(home)]
    return core.CloudView(listed, provider.normalize_provider_id, complete=True)


def instance_problems(name, node, cloud):
    """The cloud's part that the planner's cross-check leaves to this step: the instance must be gone or going."""
    inst = cloud.instance_by_id(provider_id(node))
    if inst is None or inst.state == model.DELETING:
        return []
    return [dict(node=name, step=core.STEP_NODE_DELETION, code="instance_running", message=(
        "node %s: the cloud says its instance %s still exists in scaling group %s (state %s); delete the instance "
        "first (csp_node state=absent), then its Node" % (name, inst.provider_id, inst.group_id, inst.state)))]


def run(module, api_client):
    keys = core.AnnotationKeys(module.params["annotation_prefix"])
    nodes, result = {}, dict(changed=False, deleted=[], absent=[], problems=[])
    pairs = {}
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
        pairs[name] = (node, heir)
        nodes[name] = node
    # Then the cluster's side and, with O(provider), the cloud's: together, so that every problem is named.
    cloud = cloud_view(module, pairs)
    for name, (node, heir) in pairs.items():
        result["problems"].extend(core.check_node_deletion(node, heir, cloud=cloud, keys=keys, now=time.time()))
        if cloud is not None:
            result["problems"].extend(instance_problems(name, node, cloud))
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
    if module._diff and result["deleted"]:
        result["diff"] = dict(before={"nodes": sorted(nodes)},
                              after={"nodes": sorted(set(nodes) - set(result["deleted"]))})
    return result


def main():
    module = KubenodesModule(argument_spec=dict(
        name=dict(type="list", elements="str", required=True),
        annotation_prefix=dict(type="str", default=core.DEFAULT_PREFIX),
    ), kube_auth=True, cloud=CLOUD_OPTIONAL, supports_check_mode=True,
        validate=validate.checker(dict(name=validate.object_names, annotation_prefix=validate.annotation_prefix)))
    try:
        core.AnnotationKeys(module.params["annotation_prefix"])
    except core.PlanInputError as exc:
        module.fail_json(msg=str(exc))
    module.run(lambda: run(module, module.kube_client()), "deleting nodes %s" % ", ".join(module.params["name"]))


if __name__ == "__main__":
    main()
