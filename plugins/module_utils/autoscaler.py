# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Pausing the cluster-autoscaler while nodes are replaced, as autoscaler_pause does (the module and the
upgrade_step action run this code): its Deployment goes to zero replicas, the count it had is remembered in an
annotation, and restoring brings that count back."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import kube, validate

# Where the autoscaler runs (also upgrade_step's begin.autoscaler and finish.autoscaler).
DEPLOYMENT_SPEC = dict(
    name=dict(type="str", default="cluster-autoscaler"),
    namespace=dict(type="str", default="kube-system"),
)
# autoscaler_pause's options and rules.
ARGUMENT_SPEC = dict(
    DEPLOYMENT_SPEC,
    state=dict(type="str", choices=["paused", "restored"], required=True),
    annotation_prefix=dict(validate.ANNOTATION_PREFIX_SPEC),
)
VALIDATE = validate.checker(dict(name=validate.object_name, namespace=validate.namespace,
                                 annotation_prefix=validate.annotation_prefix))


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


def apply_state(module, api_client):
    """autoscaler_pause's work: scale the Deployment to zero remembering its replicas (state=paused), or back
    (state=restored), as module.params ask; also run in the controller by the upgrade_step action."""
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
