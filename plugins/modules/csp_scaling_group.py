#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: csp_scaling_group
short_description: Set the image that new instances of cloud scaling groups get
version_added: 1.0.0
description:
  - With O(state=present), makes the scaling groups in O(group) create new instances from O(image). Existing
    instances keep their image; replacing them is the rolling upgrade's job.
  - GCP managed instance groups get a copy of their instance template with the new source image; Azure
    scale sets get their model updated; AWS auto scaling groups get a new launch template version, made
    the default.
  - The image is checked first (well-formed and existing in the cloud), and every group is read before any
    is changed, so bad input changes nothing.
  - M(kubenodes.image_upgrade.csp_scaling_group_info) reports the groups and their images.
author:
  - kubenodes.image_upgrade maintainers (!UNKNOWN)
options:
  state:
    description:
      - V(present) sets the image of every group in O(group); groups that already use it are left alone.
    type: str
    choices: [present]
    default: present
  group:
    description:
      - Scaling group IDs in the provider's format. Required with O(state=present).
    type: list
    elements: str
    default: []
  image:
    description:
      - The image reference new instances should get, in the provider's format (for example an AMI ID on
        AWS). Required with O(state=present).
    type: str
extends_documentation_fragment:
  - kubenodes.image_upgrade.cloud_provider
  - kubenodes.image_upgrade.gcp
  - kubenodes.image_upgrade.azure
  - kubenodes.image_upgrade.aws
attributes:
  check_mode:
    support: full
    description:
      - The image is validated and the groups are read; nothing is changed, and C(changed) and the diff
        say what would be.
  diff_mode:
    support: full
    description:
      - The image of each group before and after.
requirements:
  - the SDK of the chosen cloud (google-cloud-compute, azure-mgmt-compute with azure-identity, or boto3)
"""

EXAMPLES = r"""
- name: New instances of two AWS auto scaling groups get a new AMI
  kubenodes.image_upgrade.csp_scaling_group:
    provider: aws
    aws:
      region: eu-west-1
    group:
      - control-planes
      - workers
    image: ami-0123456789abcdef0
"""

RETURN = r"""
groups:
  description: The groups, with the image new instances get after this task (or would get, in check mode).
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: The group's canonical ID.
      type: str
      sample: workers
    name:
      description: The group's short resource name.
      type: str
      sample: workers
    image:
      description: The image new instances get.
      type: str
      sample: ami-0123456789abcdef0
    role:
      description: control-plane or worker when the cloud's tags or labels say so, else null.
      type: str
      sample: worker
    target_size:
      description: How many instances the group is meant to have, when the cloud says.
      type: int
      sample: 3
    kind:
      description: What the cloud calls the group, for example V(Azure VM scale set (Flexible orchestration\)).
      type: str
      sample: AWS auto scaling group
    settings:
      description:
        - The group's settings with which the cloud acts on it by itself during an upgrade, by name, as the run reads
          and neutralises them; empty where the group has none. docs/cloud-settings.md lists them per cloud - for
          AWS the processes V(AlarmNotification), V(ScheduledActions), V(ReplaceUnhealthy) and V(AZRebalance) (V(active)
          or V(suspended)) and V(MinSize).
      type: dict
      sample: {AZRebalance: active, AlarmNotification: active, ScheduledActions: active, MinSize: 0}
changed_groups:
  description: IDs of the groups whose image was changed (or would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: [workers]
image:
  description: The canonical form of O(image).
  returned: always
  type: str
  sample: ami-0123456789abcdef0
resource_actions:
  description:
    - The AWS API actions called, with O(aws.debug_botocore_endpoint_logs=true) (as amazon.aws returns them).
  returned: when provider is aws and aws.debug_botocore_endpoint_logs is true
  type: list
  elements: str
  sample: [autoscaling:DescribeAutoScalingGroups, ec2:DescribeInstances]
"""

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import group_image
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import CLOUD_REQUIRED, KubenodesModule
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base


def main():
    # The options and work are group_image.py's: the upgrade_step action's run (module_utils/run.py) runs them too.
    module = KubenodesModule(argument_spec=group_image.ARGUMENT_SPEC, cloud=CLOUD_REQUIRED, supports_check_mode=True,
                             required_if=[("state", "present", ["image"])])
    try:
        result = group_image.apply_image(module)
    except base.ProviderError as exc:
        module.fail_from_exception(exc)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
