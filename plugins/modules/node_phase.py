#!/usr/bin/python
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_phase
short_description: Record where a donor node's replacement stands, or remove a replaced node's Node object
version_added: 1.0.0
description:
  - With O(state=present), writes the phase of a donor (or obsolete) node and the time it entered it, as the
    annotations C(<annotation_prefix>/phase) and C(<annotation_prefix>/phase-since). The planner
    (M(kubenodes.image_upgrade.node_image_facts)) reads them to decide the next step, a resumed run picks up
    from them, and C(kubectl get nodes -L <annotation_prefix>/phase) shows them.
  - With O(state=absent), deletes the Node object of a donor or obsolete node once its instance is gone.
    Any other node is refused, so a mistake cannot delete a node that is not being replaced.
  - Writes are merge patches carrying the resourceVersion read; a conflict is read again and retried.
author:
  - kubenodes.image_upgrade maintainers
options:
  name:
    description:
      - Name of the node.
    type: str
    required: true
  state:
    description:
      - V(present) records O(phase); V(absent) deletes the Node object.
    type: str
    choices: [present, absent]
    default: present
  phase:
    description:
      - The phase the node enters. Required with O(state=present).
    type: str
    choices: [paired, draining, drained, etcd-removed, deleting]
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
    description: Reports whether the phase would change or the Node would be deleted; writes nothing.
  diff_mode:
    support: full
    description: Shows the phase annotations before and after.
"""

EXAMPLES = r"""
- name: The donor is drained
  kubenodes.image_upgrade.node_phase:
    name: worker-a-0
    phase: drained

- name: Its instance is gone; remove the Node object
  kubenodes.image_upgrade.node_phase:
    name: worker-a-0
    state: absent
"""

RETURN = r"""
node:
  description: Name of the node.
  returned: always
  type: str
phase:
  description: The node's phase after the call (empty when the Node was deleted or never had one).
  returned: always
  type: str
previous_phase:
  description: The phase before the call (empty when none was recorded).
  returned: always
  type: str
deleted:
  description: Whether the Node object was deleted (or would be, in check mode).
  returned: always
  type: bool
"""

import time
import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core, kube


def delete_node(api_client, name, resource_version):
    """DELETE with a precondition on the resourceVersion read, so a node that changed meanwhile is not
    deleted on stale grounds (the server answers 409)."""
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"resourceVersion": resource_version}}
    kube.raw_request(api_client, "DELETE", "/api/v1/nodes/" + name, body=body)


def get_node(api_client, name):
    try:
        return kube.raw_get(api_client, "/api/v1/nodes/" + name)
    except kube.ApiException as exc:
        if kube.is_status(exc, 404):
            return None
        raise


def run(module, api_client):
    params = module.params
    keys = core.AnnotationKeys(params["annotation_prefix"])
    name = params["name"]
    node = get_node(api_client, name)
    result = dict(changed=False, node=name, phase="", previous_phase="", deleted=False)
    if node is None:
        if params["state"] == "present":
            module.fail_json(msg="node %s does not exist" % name, **result)
        return result
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    result["previous_phase"] = result["phase"] = annotations.get(keys.phase, "")
    leaving = bool(annotations.get(keys.heir)) or annotations.get(keys.obsolete) == "true"

    if params["state"] == "absent":
        if not leaving:
            module.fail_json(msg="node %s is neither a donor (no %s annotation) nor obsolete; refusing to delete it"
                             % (name, keys.heir), **result)
        result.update(changed=True, deleted=True, phase="")
        if not module.check_mode:
            try:
                delete_node(api_client, name, node["metadata"].get("resourceVersion"))
            except kube.ApiException as exc:
                if kube.is_status(exc, 404):
                    return result
                if kube.is_status(exc, 409):
                    module.fail_json(msg="node %s changed while being deleted; run again" % name, **result)
                raise
        return result

    try:
        patch = core.phase_patch(node, params["phase"], keys.prefix, time.time())
    except core.PlanInputError as exc:
        module.fail_json(msg=str(exc), **result)
    if patch is None:
        return result
    result.update(changed=True, phase=params["phase"])
    if module._diff:
        result["diff"] = dict(before={k: annotations.get(k) for k in patch}, after=patch)
    if not module.check_mode:
        body = {"metadata": {"resourceVersion": node["metadata"].get("resourceVersion"), "annotations": patch}}
        try:
            kube.merge_patch(api_client, "/api/v1/nodes/" + name, body)
        except kube.ApiException as exc:
            if kube.is_status(exc, 409):
                # The node changed since it was read; the next pass reads it again and decides anew.
                module.fail_json(msg="node %s changed while its phase was written; run again" % name, **result)
            raise
    return result


def main():
    argument_spec = kube.auth_argument_spec(dict(
        name=dict(type="str", required=True),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        phase=dict(type="str", choices=list(core.DONOR_PHASES)),
        annotation_prefix=dict(type="str", default=core.DEFAULT_PREFIX),
    ))
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True,
                           required_if=[("state", "present", ["phase"])])
    kube.require_kubernetes(module)
    try:
        core.AnnotationKeys(module.params["annotation_prefix"])
    except core.PlanInputError as exc:
        module.fail_json(msg=str(exc))
    try:
        module.exit_json(**run(module, kube.build_api_client(module.params)))
    except kube.KubeAuthError as exc:
        module.fail_json(msg="Kubernetes authentication: %s" % exc)
    except kube.ApiException as exc:
        module.fail_json(msg="node %s: %s" % (module.params["name"], kube.api_error_message(exc)))
    except Exception as exc:  # pylint: disable=broad-except
        module.fail_json(msg="node %s: cannot talk to the Kubernetes API server: %s" % (module.params["name"], exc),
                         exception=traceback.format_exc())


if __name__ == "__main__":
    main()
