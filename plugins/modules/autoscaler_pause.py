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

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import autoscaler
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import KubenodesModule


def main():
    # The options, rules and work are autoscaler.py's: the upgrade_step action runs them too.
    module = KubenodesModule(argument_spec=autoscaler.ARGUMENT_SPEC, kube_auth=True, supports_check_mode=True,
                             validate=autoscaler.VALIDATE)
    module.run(lambda: autoscaler.apply_state(module, module.kube_client()),
               "Deployment %s/%s" % (module.params["namespace"], module.params["name"]))


if __name__ == "__main__":
    main()
