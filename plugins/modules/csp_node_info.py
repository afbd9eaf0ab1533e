#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: csp_node_info
short_description: Report the instances of cloud scaling groups
version_added: 1.0.0
description:
  - Reports the instances of a scaling group (GCP managed instance group, Azure VM scale set or AWS auto scaling
    group), or of every scaling group the provider discovers, with their states, and the groups themselves.
  - Read-only; M(kubenodes.image_upgrade.csp_node) creates and deletes instances.
author:
  - kubenodes.image_upgrade maintainers (!UNKNOWN)
options:
  group:
    description:
      - The scaling group ID, in the provider's format (AWS the auto scaling group name; GCP and Azure as their
        fragments describe). Without it, every scaling group the provider discovers is reported.
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
      - The module only reads, in check mode as otherwise.
  diff_mode:
    support: none
    description:
      - The module changes nothing.
requirements:
  - the SDK of the chosen cloud (google-cloud-compute, azure-mgmt-compute with azure-identity, or boto3)
notes:
  - Every call costs a constant number of cloud API calls per scaling group. Throttling and server errors
    are retried with jittered backoff.
"""

EXAMPLES = r"""
- name: Report the instances of an Azure scale set
  kubenodes.image_upgrade.csp_node_info:
    provider: azure
    group: /subscriptions/0000/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/workers
  register: group_instances

- name: Report the instances of every AWS auto scaling group tagged for the cluster
  kubenodes.image_upgrade.csp_node_info:
    provider: aws
    aws:
      region: eu-west-1
      group_tags:
        kubernetes.io/cluster/prod: ""
  register: cluster_instances
"""

RETURN = r"""
instances:
  description: The instances of the group (or of every group).
  returned: always
  type: list
  elements: dict
  contains:
    provider_id:
      description: The providerID the kubelet writes into C(Node.spec.providerID).
      type: str
      sample: aws:///us-east-1a/i-0123456789abcdef0
    node_name:
      description: The Kubernetes node name the instance registers as.
      type: str
      sample: i-0123456789abcdef0
    group_id:
      description: The scaling group ID.
      type: str
      sample: workers
    image:
      description: The image the instance was created from (empty when the cloud cannot say yet).
      type: str
      sample: ami-0123456789abcdef0
    state:
      description: One of creating, running, deleting, stopped, failed, unknown.
      type: str
      sample: running
    created_at:
      description: Creation time in epoch seconds, when known.
      type: float
      sample: 1796000000.0
    name:
      description: The cloud's own name or ID of the instance.
      type: str
      sample: i-0123456789abcdef0
    extra:
      description: Cloud-specific details of the instance state.
      type: dict
      sample: {lifecycle_state: InService}
node_names:
  description: Node names of RV(instances).
  returned: always
  type: list
  elements: str
  sample: [i-0123456789abcdef0]
provider_ids:
  description: providerIDs of RV(instances).
  returned: always
  type: list
  elements: str
  sample: [aws:///us-east-1a/i-0123456789abcdef0]
groups:
  description:
    - The scaling groups reported (ID, name, image, role, target size, C(kind), what the cloud calls it, and
      C(settings), the settings with which the cloud acts on the group by itself, docs/cloud-settings.md).
  returned: always
  type: list
  elements: dict
  sample: [{id: workers, name: workers, image: ami-0123456789abcdef0, role: worker, target_size: 3,
            kind: AWS auto scaling group, settings: {AZRebalance: active, AlarmNotification: active,
                                                    ScheduledActions: active, MinSize: 0}}]
resource_actions:
  description:
    - The AWS API actions called, with O(aws.debug_botocore_endpoint_logs=true) (as amazon.aws returns them).
  returned: when provider is aws and aws.debug_botocore_endpoint_logs is true
  type: list
  elements: str
  sample: [autoscaling:DescribeAutoScalingGroups, ec2:DescribeInstances]
"""

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import group_instances
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import CLOUD_REQUIRED, KubenodesModule
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base, factory


def main():
    module = KubenodesModule(argument_spec=dict(group=dict(type="str")), cloud=CLOUD_REQUIRED, supports_check_mode=True)
    try:
        provider = factory.build_provider(module.params)
        result = group_instances.report(provider, module.params["group"])
        result.update(factory.provider_extras(provider))
    except base.ProviderError as exc:
        module.fail_from_exception(exc)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
