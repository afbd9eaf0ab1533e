#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: csp_scaling_group_info
short_description: Report cloud scaling groups and the image their new instances get
version_added: 1.0.0
description:
  - Reports scaling groups (GCP managed instance groups, Azure VM scale sets, AWS auto scaling groups) with the
    image new instances get, their role and target size; all discoverable ones when O(group) is empty.
  - Read-only; M(kubenodes.image_upgrade.csp_scaling_group) sets the image.
author:
  - kubenodes.image_upgrade maintainers (!UNKNOWN)
options:
  group:
    description:
      - Scaling group IDs in the provider's format. Empty means every scaling group the provider discovers.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - kubenodes.image_upgrade.cloud_provider
  - kubenodes.image_upgrade.gcp
  - kubenodes.image_upgrade.azure
  - kubenodes.image_upgrade.aws
attributes:
  check_mode:
    support: full
    description:
      - The module only reads, in check mode as otherwise.
  diff_mode:
    support: none
    description:
      - The module changes nothing.
requirements:
  - the SDK of the chosen cloud (google-cloud-compute, azure-mgmt-compute with azure-identity, or boto3)
"""

EXAMPLES = r"""
- name: Report every scale set's image
  kubenodes.image_upgrade.csp_scaling_group_info:
    provider: azure
    azure:
      subscription_id: "00000000-0000-0000-0000-000000000000"
      resource_group: prod-cluster
  register: scale_sets

- name: Report two managed instance groups
  kubenodes.image_upgrade.csp_scaling_group_info:
    provider: gcp
    group:
      - projects/my-project/zones/europe-west1-b/instanceGroupManagers/workers
      - projects/my-project/regions/europe-west1/instanceGroupManagers/control-plane
  register: migs
"""

RETURN = r"""
groups:
  description: The groups, with the image new instances get.
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
resource_actions:
  description:
    - The AWS API actions called, with O(aws.debug_botocore_endpoint_logs=true) (as amazon.aws returns them).
  returned: when provider is aws and aws.debug_botocore_endpoint_logs is true
  type: list
  elements: str
  sample: [autoscaling:DescribeAutoScalingGroups, ec2:DescribeLaunchTemplateVersions]
"""

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import CLOUD_REQUIRED, KubenodesModule
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base, factory


def main():
    module = KubenodesModule(argument_spec=dict(group=dict(type="list", elements="str", default=[])), cloud=CLOUD_REQUIRED, supports_check_mode=True)
    try:
        provider = factory.build_provider(module.params)
        groups = provider.list_groups(module.params["group"] or None)
        result = dict(changed=False, groups=[g.to_dict() for g in groups])
        result.update(factory.provider_extras(provider))
    except base.ProviderError as exc:
        module.fail_from_exception(exc)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
