#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: csp_node
short_description: Create and delete instances of a cloud scaling group
version_added: 1.0.0
description:
  - Adds instances to a scaling group (GCP managed instance group, Azure VM scale set or AWS auto scaling
    group), or removes instances from it. M(kubenodes.image_upgrade.csp_node_info) reports them.
  - Each created instance is returned with the Kubernetes node name it will register as and its providerID,
    so the caller can wait for the node to join.
  - A create refused for quota or capacity does not fail the task; the result says so in
    RV(quota_exceeded) and RV(quota_message), so a role can lower its surge.
author:
  - kubenodes.image_upgrade maintainers (!UNKNOWN)
options:
  state:
    description:
      - V(present) creates O(count) new instances in O(group).
      - V(absent) deletes the instances named by O(provider_id) or O(node_name) and shrinks their group.
        Instances already gone count as deleted (RV(already_absent)). An instance that is not where it was
        looked for but still exists is not gone, so the task fails naming the groups searched and the instance's own
        group, or that it is in none (C(reason=other_group), RV(other_group)), and deletes nothing. For a
        providerID the cloud is asked which group the instance belongs to (GCE its C(created-by) metadata, Azure
        the VM's scale set, AWS DescribeAutoScalingInstances), so a group the discovery does not find counts
        too; a node name is looked for in the discovered groups.
      - V(absent) looks at the cluster first (O(cluster_check)) - drain the node first
        (M(kubenodes.image_upgrade.node_drain)), since the pods of an instance deleted under them go without
        eviction; give O(outdated_for) to refuse instances that run the target image.
        M(kubenodes.image_upgrade.node_delete) then removes the Node, and refuses one that was not drained.
    type: str
    choices: [present, absent]
    default: present
  group:
    description:
      - The scaling group ID, in the provider's format (AWS the auto scaling group name; GCP and Azure as their
        fragments describe).
      - Required with O(state=present) and with O(node_name). With O(state=absent) it limits the search for
        the instances to this group; without it they are looked for in the groups their providerIDs name
        (Azure), or in every scaling group the provider discovers (GCP, AWS).
    type: str
  count:
    description:
      - How many instances O(state=present) adds to O(group).
    type: int
    default: 1
  provider_id:
    description:
      - providerIDs (as in C(Node.spec.providerID)) of the instances to delete with O(state=absent).
    type: list
    elements: str
    default: []
  node_name:
    description:
      - Kubernetes node names of the instances of O(group) to delete with O(state=absent).
    type: list
    elements: str
    default: []
  outdated_for:
    description:
      - With O(state=absent), the target image of an image upgrade. Each instance to delete must then be outdated
        according to the cloud - an instance the cloud says runs this image (compared case-insensitively), or
        whose image the cloud does not report, is refused, the task fails naming each, and nothing is deleted.
      - This is the cloud's side of the cross-check before an upgrade deletes a replaced node's instance; leave
        it out to delete instances whatever they run (surplus heirs, failed joins).
    type: str
  wait:
    description:
      - With O(state=present), wait until the cloud reports every new instance running.
      - With O(state=absent), wait until the cloud no longer lists the deleted instances.
      - The task fails when O(wait_timeout) passes first.
    type: bool
    default: false
  wait_timeout:
    description:
      - Seconds to wait when O(wait=true).
    type: int
    default: 600
  wait_sleep:
    description:
      - Seconds between two looks at the scaling group while waiting.
    type: int
    default: 5
  cluster_check:
    description:
      - With O(state=absent), before anything is deleted, the Node of each instance (matched by its providerID) is
        read with the Kubernetes options. A Node that is not cordoned, or that still runs pods other than
        DaemonSet, mirror and finished pods, was not drained, so the task fails naming each such node and deletes
        nothing (C(reason=serving), RV(problems)). An instance without a Node (it never joined, or its Node is
        gone) is not held back.
      - The task also fails, deleting nothing, when the cluster cannot be read. V(false) deletes without looking
        at the cluster, for instances whose cluster is gone or unreachable, at the cost that their pods go
        without eviction.
    type: bool
    default: true
extends_documentation_fragment:
  - kubenodes.image_upgrade.kube_auth
  - kubenodes.image_upgrade.cloud_provider
  - kubenodes.image_upgrade.gcp
  - kubenodes.image_upgrade.azure
  - kubenodes.image_upgrade.aws
attributes:
  check_mode:
    support: full
    description:
      - Nothing is created or deleted; C(changed) tells whether it would be. Created instances are not
        known yet, so RV(instances) is empty for O(state=present).
  diff_mode:
    support: full
    description:
      - Shows the providerIDs of the group's instances before and after a creation (a placeholder per instance
        in check mode, whose ID the cloud gives only when it creates it), and of the instances named before and
        after a deletion. No diff when nothing changes.
requirements:
  - the SDK of the chosen cloud (google-cloud-compute, azure-mgmt-compute with azure-identity, or boto3)
notes:
  - Every call costs a constant number of cloud API calls per scaling group, plus one or two per requested
    providerID that the listing does not find (to ask the cloud where it is). Throttling and server errors
    are retried with jittered backoff.
"""

EXAMPLES = r"""
- name: Add one instance to an AWS auto scaling group and wait until it runs
  kubenodes.image_upgrade.csp_node:
    provider: aws
    aws:
      region: eu-west-1
    group: workers-eu-west-1
    count: 1
    wait: true
    wait_timeout: 300
  register: heir

- name: Delete an instance by its providerID
  kubenodes.image_upgrade.csp_node:
    provider: aws
    state: absent
    provider_id:
      - aws:///eu-west-1a/i-0123456789abcdef0

- name: Delete an instance of a GCP managed instance group by its node name
  kubenodes.image_upgrade.csp_node:
    provider: gcp
    gcp:
      project: my-project
    state: absent
    group: projects/my-project/zones/europe-west1-b/instanceGroupManagers/workers
    node_name:
      - workers-abcd
"""

RETURN = r"""
instances:
  description:
    - With O(state=present), the instances created (empty in check mode).
    - With O(state=absent), the instances found and deleted (or that would be, in check mode).
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
deleted:
  description: With O(state=absent), providerIDs of the instances deleted now (or that would be, in check mode).
  returned: when state is absent
  type: list
  elements: str
  sample: [aws:///us-east-1a/i-0123456789abcdef0]
already_absent:
  description: With O(state=absent), the requested providerIDs and node names that no longer exist.
  returned: when state is absent
  type: list
  elements: str
  sample: [i-0fedcba9876543210]
other_group:
  description:
    - When the task failed with C(reason=other_group), the requested instances that exist outside the groups
      searched, each with its own group (empty when it is in no scaling group).
  returned: on failure with reason other_group
  type: list
  elements: dict
  sample: [{requested: "aws:///eu-west-1a/i-0123456789abcdef0", provider_id: "aws:///eu-west-1a/i-0123456789abcdef0",
            node_name: "", group: other-workers}]
problems:
  description:
    - When the task failed with C(reason=serving) (O(cluster_check)) or C(reason=inconsistent) (O(outdated_for)),
      why each instance was refused. C(reason=serving) entries name the node, the step, a stable code
      (C(not_cordoned), C(pods_left)) and a message.
  returned: on failure with reason serving or inconsistent
  type: list
  elements: raw
  sample: [{node: w-1, step: instance-deletion, code: not_cordoned, message: "instance ... is node w-1, which is not cordoned"}]
quota_exceeded:
  description: With O(state=present), whether the cloud refused a create for quota or capacity.
  returned: when state is present
  type: bool
  sample: false
quota_message:
  description: The cloud's reason when RV(quota_exceeded) is true, else an empty string.
  returned: when state is present
  type: str
  sample: ""
resource_actions:
  description:
    - The AWS API actions called, with O(aws.debug_botocore_endpoint_logs=true) (as amazon.aws returns them).
  returned: when provider is aws and aws.debug_botocore_endpoint_logs is true
  type: list
  elements: str
  sample: [autoscaling:DescribeAutoScalingGroups, ec2:DescribeInstances]
"""

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import group_instances, validate
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import CLOUD_REQUIRED, KubenodesModule


def main():
    module = KubenodesModule(argument_spec=group_instances.ARGUMENT_SPEC, kube_auth=True, cloud=CLOUD_REQUIRED,
                             supports_check_mode=True,
                             required_if=group_instances.REQUIRED_IF, validate=validate.checker(group_instances.OPTION_RULES))
    group_instances.run(module)


if __name__ == "__main__":
    main()
