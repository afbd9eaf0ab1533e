# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""node_delete's work: delete the Node objects of replaced (donor) and obsolete nodes, all or nothing, once the
cluster (and, given the cloud options, the cloud) agrees that each one was drained and left.

Every node is checked before any is deleted: it must be a donor or obsolete node that the cross-checks before a
Node deletion accept (crosschecks.check_node_deletion: the pair, the phase trail, the cordon), that runs no pod
a drain would have evicted (crosschecks.pods_left_problems), and, with the cloud options, whose instance is gone.
The executor deletes the donors it drained itself through node_state.delete_node_as_read, as this file does."""

from __future__ import annotations

import time

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import crosschecks, drain_api, model, node_state
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import validate
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.vocabulary import AnnotationKeys, PlanInputError

ARGUMENT_SPEC = dict(
    name=dict(type="list", elements="str", required=True),
    annotation_prefix=dict(validate.ANNOTATION_PREFIX_SPEC),
)
OPTION_RULES = dict(name=validate.object_names, annotation_prefix=validate.annotation_prefix)

# The problems a drain with node_drain clears (the node is cordoned and emptied).
_DRAIN_FIRST = ("not_cordoned", "pods_left")


def provider_id(node):
    return ((node or {}).get("spec") or {}).get("providerID") or ""


def cloud_view(params, pairs):
    """What the cloud says about the instances of the nodes and their heirs ({name: (node, heir)}), as a
    crosschecks.CloudView, or None without the option provider: each instance's own scaling group is asked of the
    instance, then each of those groups is listed once (for the state, image and group of its instances)."""
    if not params.get("provider"):
        return None
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import factory

    provider = factory.build_provider(params)
    homes = set()
    for node, heir in pairs.values():
        for pid in filter(None, (provider_id(node), provider_id(heir))):
            home = provider.instance_group(pid)
            if home:
                homes.add(home)
    listed = [inst for home in sorted(homes) for inst in provider.list_instances(home)]
    return crosschecks.CloudView(listed, provider.normalize_provider_id, complete=True)


def instance_problems(name, node, cloud):
    """The cloud's part that the planner's cross-check leaves to this step: the instance must be gone or going."""
    inst = cloud.instance_by_id(provider_id(node))
    if inst is None or inst.state == model.DELETING:
        return []
    return [dict(node=name, step=crosschecks.STEP_NODE_DELETION, code="instance_running", message=(
        "node %s: the cloud says its instance %s still exists in scaling group %s (state %s); delete the instance "
        "first (csp_node state=absent), then its Node" % (name, inst.provider_id, inst.group_id, inst.state)))]


def refusal_message(problems):
    """Why nothing is deleted, and what to do where a drain is what is missing."""
    msg = ("refusing to delete any node; the cluster disagrees with the upgrade's records: %s"
           % "; ".join(p["message"] for p in problems))
    undrained = sorted({p["node"] for p in problems if p.get("code") in _DRAIN_FIRST})
    if undrained:
        msg += (". Drain %s first with node_drain (state=drained), which cordons and empties a node, then delete it"
                % ", ".join(undrained))
    return msg


def delete_nodes(module, api_client):
    """node_delete's result (fails through module.fail_json, before any deletion, when a node is refused)."""
    keys = AnnotationKeys(module.params["annotation_prefix"])
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
        heir = node_state.get_node(api_client, heir_name) if crosschecks.valid_node_name(heir_name) else None
        pairs[name] = (node, heir)
        nodes[name] = node
    # Then the cluster's side, the pods still on each node and, with the option provider, the cloud's: together, so
    # that every problem is named.
    cloud = cloud_view(module.params, pairs)
    for name, (node, heir) in pairs.items():
        result["problems"].extend(crosschecks.check_node_deletion(node, heir, cloud=cloud, keys=keys, now=time.time()))
        result["problems"].extend(crosschecks.pods_left_problems(name, drain_api.list_pods_on_node(api_client, name)))
        if cloud is not None:
            result["problems"].extend(instance_problems(name, node, cloud))
    if result["problems"]:
        module.fail_json(msg=refusal_message(result["problems"]), **result)
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


def run(module):
    """node_delete on the module base: delete, or fail naming what was refused."""
    try:
        AnnotationKeys(module.params["annotation_prefix"])
    except PlanInputError as exc:
        module.fail_json(msg=str(exc))
    module.run(lambda: delete_nodes(module, module.kube_client()), "deleting nodes %s" % ", ".join(module.params["name"]))
