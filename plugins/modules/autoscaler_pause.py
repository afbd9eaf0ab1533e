#!/usr/bin/python
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: autoscaler_pause
short_description: Pause the cluster-autoscaler during an upgrade and restore it afterwards
version_added: 1.0.0
description:
  - With O(state=paused), scales the cluster-autoscaler Deployment to zero replicas and remembers its replica
    count in an annotation on the Deployment, in the same write. A resumed run therefore restores the value
    the cluster had before the upgrade, not zero.
  - With O(state=restored), scales it back to the remembered count and removes the annotation.
  - A cluster without that Deployment has nothing to pause or restore; the module reports RV(found=false)
    and changes nothing.
  - Every write carries the resourceVersion it read; a conflict is read again and retried.
author:
  - kubenodes.image_upgrade maintainers (!UNKNOWN)
options:
  name:
    description:
      - Name of the cluster-autoscaler Deployment.
    type: str
    default: cluster-autoscaler
  namespace:
    description:
      - Its namespace.
    type: str
    default: kube-system
  state:
    description:
      - V(paused) or V(restored).
    type: str
    choices: [paused, restored]
    required: true
  annotation_prefix:
    description:
      - Prefix of the annotation that remembers the replica count (C(<prefix>/paused-replicas)).
    type: str
    default: image-upgrade.kubenodes.io
extends_documentation_fragment:
  - kubenodes.image_upgrade.kube_auth
attributes:
  check_mode:
    support: full
    description: Reports the change it would make and makes none.
  diff_mode:
    support: full
    description: Shows the replica count and the annotation before and after.
"""

EXAMPLES = r"""
- name: Pause the autoscaler while nodes are replaced
  kubenodes.image_upgrade.autoscaler_pause:
    kubeconfig: ~/.kube/config
    state: paused

- name: Restore it afterwards
  kubenodes.image_upgrade.autoscaler_pause:
    kubeconfig: ~/.kube/config
    state: restored
"""

RETURN = r"""
found:
  description: Whether the Deployment exists.
  returned: always
  type: bool
replicas:
  description: The Deployment's replica count after the call (V(null) when not found).
  returned: always
  type: int
paused_replicas:
  description: The remembered replica count while paused (V(null) when not paused).
  returned: always
  type: int
"""

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import kube
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import validate
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import KubenodesModule


def desired_change(replicas, remembered, state):
    """(new replicas, new remembered value) or None when nothing is to change. `remembered` is the
    annotation's value (a string) or None."""
    if state == "paused":
        if remembered is not None:
            # Already paused by an earlier pass or run; keep the remembered value, make sure it is at zero.
            return (0, remembered) if replicas != 0 else None
        return 0, str(replicas)
    if remembered is None:
        return None
    return int(remembered), None


def deployment_path(namespace, name):
    return kube.path_of(kube.path_of("/apis/apps/v1/namespaces", namespace) + "/deployments", name)


def run(module, api_client):
    params = module.params
    path = deployment_path(params["namespace"], params["name"])
    key = "%s/paused-replicas" % params["annotation_prefix"]
    result = dict(changed=False, found=False, replicas=None, paused_replicas=None)
    for _attempt in range(3):
        try:
            deployment = kube.request(api_client, "GET", path)
        except kube.ApiCallError as exc:
            if kube.is_status(exc, 404):
                return result
            raise
        metadata = deployment.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        spec_replicas = (deployment.get("spec") or {}).get("replicas")
        replicas = spec_replicas if spec_replicas is not None else 1
        remembered = annotations.get(key)
        if remembered is not None and not remembered.isdigit():
            module.fail_json(msg="annotation %s on Deployment %s/%s is %r, not a replica count; fix or remove it"
                             % (key, params["namespace"], params["name"], remembered))
        result.update(found=True, replicas=replicas, paused_replicas=int(remembered) if remembered is not None else None)
        change = desired_change(replicas, remembered, params["state"])
        if change is None:
            return result
        new_replicas, new_remembered = change
        result.update(changed=True, replicas=new_replicas,
                      paused_replicas=int(new_remembered) if new_remembered is not None else None)
        if module._diff:
            result["diff"] = dict(before=dict(replicas=replicas, annotation=remembered),
                                  after=dict(replicas=new_replicas, annotation=new_remembered))
        if module.check_mode:
            return result
        patch = {"metadata": {"resourceVersion": metadata.get("resourceVersion"),
                              "annotations": {key: new_remembered}},
                 "spec": {"replicas": new_replicas}}
        try:
            kube.request(api_client, "PATCH", path, body=patch, content_type="application/merge-patch+json")
            return result
        except Exception as exc:  # pylint: disable=broad-except
            if not kube.is_status(exc, 409):
                raise
            result.update(changed=False)
    module.fail_json(msg="Deployment %s/%s kept changing under us (three conflicts in a row)"
                     % (params["namespace"], params["name"]))


# The module's own options and rules (also run in the controller by the upgrade_start and upgrade_step actions).
ARGUMENT_SPEC = dict(
    name=dict(type="str", default="cluster-autoscaler"),
    namespace=dict(type="str", default="kube-system"),
    state=dict(type="str", choices=["paused", "restored"], required=True),
    annotation_prefix=dict(type="str", default="image-upgrade.kubenodes.io"),
)
VALIDATE = validate.checker(dict(name=validate.object_name, namespace=validate.namespace,
                                 annotation_prefix=validate.annotation_prefix))


def main():
    module = KubenodesModule(argument_spec=ARGUMENT_SPEC, kube_auth=True, supports_check_mode=True, validate=VALIDATE)
    module.run(lambda: run(module, module.kube_client()),
               "Deployment %s/%s" % (module.params["namespace"], module.params["name"]))


if __name__ == "__main__":
    main()
