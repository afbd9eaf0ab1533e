# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""AWS options, named as in amazon.aws (same aliases and AWS_* environment variables), so AWX
credential types work unchanged."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  aws:
    description:
      - How to reach AWS when O(provider=aws). Ignored for other providers.
      - Scaling groups are auto scaling groups with launch templates, named by the group name. Instances
        are named by their instance ID, which is also their Kubernetes node name; their providerID is
        C(aws:///<availability-zone>/<instance-id>). Images are AMI IDs (C(ami-) and 8 or 17 hex digits).
      - The role of a group comes from its C(kubenodes-role) tag (V(control-plane) or V(worker)).
      - Credentials follow boto3's chain when none are given here (environment, shared files, instance role).
    type: dict
    default: {}
    suboptions:
      region:
        description:
          - The AWS region of the auto scaling groups.
          - Falls back to E(AWS_REGION), then E(AWS_DEFAULT_REGION), then the profile's region.
        type: str
        aliases: [aws_region, ec2_region]
      profile:
        description:
          - A named profile of the shared AWS configuration files. Falls back to E(AWS_PROFILE), then
            E(AWS_DEFAULT_PROFILE).
          - Mutually exclusive with O(aws.access_key).
        type: str
        aliases: [aws_profile]
      access_key:
        description:
          - The AWS access key ID. Give O(aws.secret_key) with it.
          - Falls back to E(AWS_ACCESS_KEY_ID), then E(AWS_ACCESS_KEY), then E(EC2_ACCESS_KEY), as in amazon.aws;
            AWX's I(Amazon Web Services) credential sets E(AWS_ACCESS_KEY_ID).
        type: str
        aliases: [aws_access_key_id, aws_access_key]
      secret_key:
        description:
          - The AWS secret access key. Falls back to E(AWS_SECRET_ACCESS_KEY), then E(AWS_SECRET_KEY), then
            E(EC2_SECRET_KEY).
        type: str
        aliases: [aws_secret_access_key, aws_secret_key]
      session_token:
        description:
          - The session token of temporary credentials. Falls back to E(AWS_SESSION_TOKEN), then
            E(AWS_SECURITY_TOKEN) (what AWX's AWS credential sets for an STS token), then E(EC2_SECURITY_TOKEN).
        type: str
        aliases: [aws_session_token]
      endpoint_url:
        description:
          - One URL for the EC2 and Auto Scaling APIs instead of the public AWS endpoints, for example a
            local emulator or a private endpoint. Falls back to E(AWS_ENDPOINT_URL), then E(AWS_URL), then
            E(EC2_URL).
        type: str
        aliases: [aws_endpoint_url]
      aws_ca_bundle:
        description:
          - A CA bundle that verifies the endpoints' TLS certificates. Falls back to E(AWS_CA_BUNDLE).
        type: path
      validate_certs:
        description:
          - Whether to verify the endpoints' TLS certificates.
        type: bool
        default: true
      aws_config:
        description:
          - Parameters of the botocore client configuration (C(botocore.config.Config)), as in amazon.aws, for
            example C(proxies), C(connect_timeout), C(read_timeout) or C(max_pool_connections).
          - C(retries) is ignored, because the provider retries throttled and failed calls itself.
        type: dict
      debug_botocore_endpoint_logs:
        description:
          - Record every AWS API action called and return them as C(resource_actions) (for example
            C(ec2:DescribeInstances)), as amazon.aws does, to write a least-privilege IAM policy.
            M(kubenodes.image_upgrade.csp_node), M(kubenodes.image_upgrade.csp_scaling_group) and their
            C(_info) modules return it.
          - Falls back to E(ANSIBLE_DEBUG_BOTOCORE_LOGS).
        type: bool
        default: false
      group_tags:
        description:
          - When the scaling groups are not named, only auto scaling groups that carry all these tags are
            used. A tag whose value is empty or null matches any value, for example the tag
            C(kubernetes.io/cluster/prod) with an empty value.
          - Without it every auto scaling group of the region is used, including ones that are not part of
            the cluster. Set it (or name the groups) when the region holds other groups.
        type: dict
"""
