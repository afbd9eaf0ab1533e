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

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import CLOUD_REQUIRED, KubenodesModule
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base, factory


def plan_image_changes(groups, image):
    """IDs of the groups whose image differs from `image` (pure, for the diff and check mode)."""
    return [g.id for g in groups if g.image != image]


def ensure_image(module, provider):
    group_ids, image = module.params["group"], module.params["image"]
    if not group_ids and module.check_mode and image:
        # No group in check mode: only the exact image the reference names now (a family: its newest image),
        # as the rolling_upgrade role resolves it once per upgrade.
        return dict(changed=False, changed_groups=[], image=provider.validate_image(image.strip()), groups=[])
    if not group_ids:
        module.fail_json(msg="state=present needs at least one group")
    if not image:
        module.fail_json(msg="state=present needs image")
    image = provider.validate_image(image)
    groups = provider.list_groups(group_ids)
    to_change = plan_image_changes(groups, image)
    result = dict(changed=bool(to_change), changed_groups=to_change, image=image)
    if module._diff:
        result["diff"] = dict(before={g.id: g.image for g in groups},
                              after={g.id: (image if g.id in to_change else g.image) for g in groups})
    if not module.check_mode:
        done = []
        for group_id in to_change:
            try:
                provider.set_group_image(group_id, image)
            except base.ProviderError as exc:
                module.fail_json(msg="setting the image of %s to %s failed: %s" % (group_id, image, exc),
                                 changed=bool(done), changed_groups=done, retryable=exc.retryable,
                                 error_code=exc.code)
            done.append(group_id)
    for group in groups:
        if group.id in to_change:
            group.image = image
    result["groups"] = [g.to_dict() for g in groups]
    return result


# The module's own options (also run in the controller by the upgrade_start action).
ARGUMENT_SPEC = dict(
    state=dict(type="str", choices=["present"], default="present"),
    group=dict(type="list", elements="str", default=[]),
    image=dict(type="str"),
)


def main():
    module = KubenodesModule(argument_spec=ARGUMENT_SPEC, cloud=CLOUD_REQUIRED, supports_check_mode=True,
                             required_if=[("state", "present", ["image"])])
    try:
        provider = factory.build_provider(module.params)
        result = ensure_image(module, provider)
        result.update(factory.provider_extras(provider))
    except base.ProviderError as exc:
        module.fail_from_exception(exc)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
