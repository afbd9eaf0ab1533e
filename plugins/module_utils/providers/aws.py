# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""AWS auto scaling groups with launch templates, through boto3.

Formats (the same as the AWS cloud provider of Kubernetes and the reference system):
- providerID  aws:///<availability-zone>/<instance-id>, e.g. aws:///us-east-2a/i-06888991e7138ed4e
- group ID    the auto scaling group's name
- image       an AMI ID, ami- followed by 8 or 17 lower-case hex digits
- node name   the instance ID, as in the reference system (its nodes register under their instance ID).
  Clusters whose nodes register under the private DNS name are not supported yet.

Calls go out with botocore's own retries switched off; with_retries() retries throttling and 5xx
answers with jittered backoff instead, so one policy (and one test) covers every call.
"""

from __future__ import annotations

import datetime
import re
import threading
import time
import traceback

from ansible.module_utils.basic import env_fallback

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import cloud_settings, quota
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import (
    CREATING, DELETING, RUNNING, STATE_PROBLEM, STOPPED, UNKNOWN, ROLE_CONTROL_PLANE, ROLE_WORKER, Group, Instance,
)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers.base import (
    PENDING, CloudProvider, Ended, InvalidReferenceError, NotFoundError, ProviderError, QuotaError, ReadingMemo,
    with_retries, zone_imbalance,
)

try:
    import boto3
    import botocore.config
    import botocore.exceptions
    import botocore.parsers
    HAS_BOTO3 = True
    BOTO3_IMPORT_ERROR = None
except ImportError:  # pragma: no cover - reported by from_params()
    HAS_BOTO3 = False
    BOTO3_IMPORT_ERROR = traceback.format_exc()

ARG_SPEC = dict(
    region=dict(type="str", aliases=["aws_region", "ec2_region"],
                fallback=(env_fallback, ["AWS_REGION", "AWS_DEFAULT_REGION"])),
    # The environment variables amazon.aws reads, in its order (AWX's AWS credential sets AWS_ACCESS_KEY_ID,
    # AWS_SECRET_ACCESS_KEY and AWS_SECURITY_TOKEN).
    profile=dict(type="str", aliases=["aws_profile"], fallback=(env_fallback, ["AWS_PROFILE", "AWS_DEFAULT_PROFILE"])),
    access_key=dict(type="str", aliases=["aws_access_key_id", "aws_access_key"], no_log=False,
                    fallback=(env_fallback, ["AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY", "EC2_ACCESS_KEY"])),
    secret_key=dict(type="str", aliases=["aws_secret_access_key", "aws_secret_key"], no_log=True,
                    fallback=(env_fallback, ["AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY", "EC2_SECRET_KEY"])),
    session_token=dict(type="str", aliases=["aws_session_token"], no_log=True,
                       fallback=(env_fallback, ["AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "EC2_SECURITY_TOKEN"])),
    endpoint_url=dict(type="str", aliases=["aws_endpoint_url"],
                      fallback=(env_fallback, ["AWS_ENDPOINT_URL", "AWS_URL", "EC2_URL"])),
    aws_config=dict(type="dict"),
    debug_botocore_endpoint_logs=dict(type="bool", default=False,
                                      fallback=(env_fallback, ["ANSIBLE_DEBUG_BOTOCORE_LOGS"])),
    aws_ca_bundle=dict(type="path", fallback=(env_fallback, ["AWS_CA_BUNDLE"])),
    validate_certs=dict(type="bool", default=True),
    group_tags=dict(type="dict"),
)

PROVIDER_ID_FORMAT = "aws:///<availability-zone>/<instance-id>, e.g. aws:///us-east-2a/i-06888991e7138ed4e"
IMAGE_FORMAT = "an AMI ID: ami- followed by 8 or 17 lower-case hex digits, e.g. ami-0abcdef1234567890"
GROUP_ID_FORMAT = "an auto scaling group name: 1 to 255 characters, no ':' and no leading or trailing space"

ROLE_TAG = "kubenodes-role"             # tag on the ASG: control-plane or worker
_ROLE_TAGS = (ROLE_TAG, "constellation-role")
_GROUP_TAG = "aws:autoscaling:groupName"  # AWS puts this on every instance an ASG launches

_PROVIDER_ID_RE = re.compile(r"^aws://(?P<account>[^/]*)/(?P<zone>[a-z]{2}(-[a-z0-9]+)+[a-z]?)?/(?P<instance>i-[0-9a-f]{8,17})$")
_INSTANCE_ID_RE = re.compile(r"^i-[0-9a-f]{8,17}$")
DESCRIBE_GROUPS_NAMES = 50   # DescribeAutoScalingGroups takes at most 50 names a call
_AMI_RE = re.compile(r"^ami-([0-9a-f]{8}|[0-9a-f]{17})$")

# Error codes that mean "try again later" (botocore's own throttling list, plus the 5xx family).
_THROTTLING_CODES = frozenset((
    "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottledException",
    "TooManyRequestsException", "ProvisionedThroughputExceededException", "TransactionInProgressException",
    "RequestLimitExceeded", "BandwidthLimitExceeded", "LimitExceededException", "RequestThrottled",
    "SlowDown", "PriorRequestNotComplete", "EC2ThrottledException",
))
# Of those, the ones that refuse a call for its rate (with_retries slows down and keeps trying until the run's deadline);
# the others (a transaction in progress, a resource limit some services answer as LimitExceededException) are retried as
# a server error is.
_RATE_CODES = frozenset((
    "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottledException", "TooManyRequestsException",
    "RequestLimitExceeded", "RequestThrottled", "SlowDown", "EC2ThrottledException",
))
_RETRYABLE_SERVER_CODES = frozenset(("InternalFailure", "InternalError", "ServiceUnavailable", "Unavailable",
                                     "RequestTimeout", "RequestTimeoutException"))
# Launch failures (scaling activities) that mean quota or capacity, not a broken template.
_QUOTA_MARKERS = ("limit", "capacity", "quota", "InstanceLimitExceeded", "VcpuLimitExceeded",
                  "InsufficientInstanceCapacity", "MaxSpotInstanceCountExceeded")

_EC2_STATES = {
    "pending": CREATING,
    "running": RUNNING,
    "shutting-down": DELETING,
    "terminated": DELETING,
    "stopping": STOPPED,
    "stopped": STOPPED,
}


# ----------------------------------------------------------------------------------------------------
# Pure parsing and mapping
# ----------------------------------------------------------------------------------------------------

def parse_provider_id(provider_id):
    """(availability zone, instance ID) of an AWS providerID. The zone may be empty (aws:////i-...),
    as some kubelets write it before the zone is known."""
    if not isinstance(provider_id, str):
        raise InvalidReferenceError("AWS providerID must be a string of the form %s" % PROVIDER_ID_FORMAT)
    match = _PROVIDER_ID_RE.match(provider_id.strip())
    if not match:
        raise InvalidReferenceError("malformed AWS providerID %r: expected %s" % (provider_id, PROVIDER_ID_FORMAT))
    return match.group("zone") or "", match.group("instance")


def format_provider_id(zone, instance_id):
    return "aws:///%s/%s" % (zone or "", instance_id)


def validate_group_id(group_id):
    """The ASG name, checked against AWS's naming rules."""
    if not isinstance(group_id, str) or not group_id or len(group_id) > 255 or ":" in group_id \
            or group_id != group_id.strip():
        raise InvalidReferenceError("malformed AWS scaling group ID %r: expected %s" % (group_id, GROUP_ID_FORMAT))
    return group_id


def _ami_problem(text):
    """Which part of a string that is no AMI ID is wrong, and why."""
    if not text:
        return "it is empty"
    if not text.startswith("ami-"):
        return "it starts with %r, not ami-" % text.split("-")[0]
    digits = text[len("ami-"):]
    wrong = sorted(set(c for c in digits if c not in "0123456789abcdef"))
    if wrong:
        return "its ID part %r holds %s, %s" % (digits, ", ".join(repr(c) for c in wrong), (
            "which is not a lower-case hex digit" if len(wrong) == 1 else "which are not lower-case hex digits"))
    return "its ID part %r has %d hex digits, not 8 or 17" % (digits, len(digits))


def validate_image_reference(image):
    """The AMI ID, or InvalidReferenceError naming the part that is wrong, why, and the expected format."""
    text = image.strip() if isinstance(image, str) else ""
    if not _AMI_RE.match(text):
        raise InvalidReferenceError("malformed AWS image reference %r: %s; expected %s" % (
            image, _ami_problem(text), IMAGE_FORMAT))
    return text


def role_from_tags(tags):
    """ROLE_* from the ASG's kubenodes-role (or constellation-role) tag, None when absent or unknown."""
    for tag in tags or ():
        if tag.get("Key") in _ROLE_TAGS:
            value = re.sub(r"[-_ ]", "", str(tag.get("Value", "")).lower())
            if value in ("controlplane", "master"):
                return ROLE_CONTROL_PLANE
            if value == "worker":
                return ROLE_WORKER
    return None


def instance_state(asg_lifecycle, ec2_state):
    """One word for an instance from the ASG's lifecycle state and EC2's state (None when EC2 does not
    list the instance yet: it was just launched, so it is being created, never gone)."""
    lifecycle = asg_lifecycle or ""
    # Leaving the group, from service or from its warm pool (Warmed:Terminating..., Warmed:Terminated), unless the
    # group's instance lifecycle policy retained it (Terminating:Retained): then it stays as EC2 says, and a named
    # problem (lifecycle_problem) keeps every step off it.
    if lifecycle.replace("Warmed:", "", 1).split(":")[0] in ("Terminating", "Terminated", "Detaching", "Detached") \
            and not _retained(lifecycle):
        return DELETING
    if ec2_state is None:
        return CREATING if lifecycle.startswith("Pending") or not lifecycle or lifecycle == "InService" else UNKNOWN
    state = _EC2_STATES.get(ec2_state, UNKNOWN)
    if state == RUNNING and lifecycle.startswith("Pending"):
        # EC2 runs it, the ASG has not put it in service yet: the node may join already.
        return RUNNING
    return state


# Lifecycle states in which someone or something other than this collection holds the instance: no step acts on it.
_HELD_LIFECYCLES = {
    "Standby": "it is in standby (taken out of service by a user: ExitStandby puts it back)",
    "EnteringStandby": "it is entering standby (taken out of service by a user: ExitStandby puts it back)",
    "Quarantined": "AWS quarantined it",
    "ReplacingRootVolume": "AWS is replacing its root volume (instance refresh)",
    "RootVolumeReplaced": "AWS replaced its root volume and has not put it back in service yet",
}


def _leaving(lifecycle):
    """Whether an ASG member in this lifecycle state is on its way out (it no longer counts in the desired capacity
    once a decrementing terminate took it)."""
    return str(lifecycle or "").startswith(("Terminating", "Terminated", "Detach")) and not _retained(lifecycle or "")


def _retained(lifecycle):
    return lifecycle.replace("Warmed:", "", 1) == "Terminating:Retained"


def lifecycle_problem(asg_lifecycle):
    """What no step may act on in an ASG lifecycle state, in words, else None: standby, quarantine, a root volume
    replacement, an instance retained after an abandoned termination (Terminating:Retained), or the warm pool (an
    instance there is no serving member, and cannot be terminated by TerminateInstanceInAutoScalingGroup)."""
    lifecycle = asg_lifecycle or ""
    if _retained(lifecycle):
        return ("AWS lifecycle state %s: the group's instance lifecycle policy retained it after its termination "
                "lifecycle action was abandoned or timed out, so it is not being deleted and stays until someone "
                "terminates it (aws ec2 terminate-instances, once nothing on it is needed); nothing is done to it"
                % lifecycle)
    if instance_state(lifecycle, "running") == DELETING:
        return None
    why = _HELD_LIFECYCLES.get(lifecycle.split(":")[0])
    if why is None and lifecycle.startswith("Warmed:"):
        why = "it is in the group's warm pool"
    if why is None:
        return None
    return "AWS lifecycle state %s: %s; nothing is done to it until it is InService again" % (lifecycle, why)


def has_tags(asg, wanted):
    """Whether the ASG carries every tag of `wanted` (a None or empty value matches any value)."""
    have = {t.get("Key"): t.get("Value") for t in asg.get("Tags") or ()}
    return all(key in have and (value in (None, "") or have[key] == str(value)) for key, value in wanted.items())


def _member_extra(member, ec2_state):
    extra = dict(lifecycle_state=member.get("LifecycleState"), health_status=member.get("HealthStatus"),
                 ec2_state=ec2_state)
    if lifecycle_problem(member.get("LifecycleState")):
        extra[STATE_PROBLEM] = lifecycle_problem(member.get("LifecycleState"))
    return extra


def run_settings(asg):
    """MinSize, ReplaceUnhealthy, AlarmNotification and ScheduledActions (whether the group has scaling policies or scheduled actions
    takes two more calls to tell; suspending them where it has none changes nothing), and AZRebalance only where the
    group spans several zones (with one there is nothing to balance)."""
    suspended = {p.get("ProcessName") for p in asg.get("SuspendedProcesses") or []}
    processes = [cloud_settings.AWS_ALARM_NOTIFICATION, cloud_settings.AWS_SCHEDULED_ACTIONS,
                 cloud_settings.AWS_REPLACE_UNHEALTHY]
    if len(asg.get("AvailabilityZones") or []) > 1:
        processes.append(cloud_settings.AWS_AZ_REBALANCE)
    settings = {name: "suspended" if name in suspended else "active" for name in processes}
    settings[cloud_settings.AWS_MIN_SIZE] = int(asg.get("MinSize") or 0)
    return settings


def launch_template_of(asg):
    """(template ID or None, template name or None, version string) of an ASG description, or
    ProviderError when the group uses a launch configuration."""
    spec = asg.get("LaunchTemplate")
    if not spec:
        spec = ((asg.get("MixedInstancesPolicy") or {}).get("LaunchTemplate") or {}).get("LaunchTemplateSpecification")
    if not spec:
        raise ProviderError("auto scaling group %s uses a launch configuration, not a launch template; only launch "
                            "templates are supported (AWS retired launch configurations)" % asg.get("AutoScalingGroupName"))
    return spec.get("LaunchTemplateId"), spec.get("LaunchTemplateName"), spec.get("Version") or "$Default"


def classify_client_error(operation, code, message, status):
    """The ProviderError for an AWS error answer: throttling and 5xx are retryable, a 4xx is not."""
    text = "AWS %s failed: %s: %s" % (operation, code or "HTTP %s" % status, message or "(no message)")
    throttled = code in _RATE_CODES or status == 429
    retryable = code in _THROTTLING_CODES or code in _RETRYABLE_SERVER_CODES or (status is not None and status >= 500)
    if code and (code.endswith(".NotFound") or code in ("InvalidAMIID.Unavailable",)):
        return NotFoundError(text, status=status, code=code)
    if code and (code.endswith(".Malformed") or code == "InvalidAMIID.Malformed"):
        return InvalidReferenceError(text, status=status, code=code)
    return ProviderError(text, status=status, code=code, retryable=retryable, throttled=throttled)


def launch_failure(activities, since, reported=()):
    """The failed launch activity of an ASG that started at or after `since` (epoch seconds), or None. `reported`:
    the ActivityIds of failures already answered for an earlier create (within the clock-skew allowance a failure
    just before this create would otherwise be taken for its own)."""
    for activity in activities or ():
        if activity.get("StatusCode") not in ("Failed", "Cancelled") or activity.get("ActivityId") in reported:
            continue
        start = activity.get("StartTime")
        if isinstance(start, datetime.datetime):
            start = start.timestamp()
        if start is not None and start < since - 5:  # allow some clock skew
            continue
        return activity
    return None


def is_quota_failure(message):
    lowered = (message or "").lower()
    return any(marker.lower() in lowered for marker in _QUOTA_MARKERS)


# EC2's "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances" quota, in vCPUs.
ON_DEMAND_STANDARD_QUOTA_CODE = "L-1216C47A"
_STANDARD_FAMILIES = frozenset("acdhimrtz")


def is_standard_instance_type(instance_type):
    """Whether an instance type counts against the on-demand Standard vCPU quota (its family letter is one of
    A, C, D, H, I, M, R, T, Z; G, P, X, Inf, F, DL and the like have quotas of their own)."""
    family = re.match(r"^([a-z]+)", instance_type or "")
    return bool(family) and family.group(1)[0] in _STANDARD_FAMILIES and not family.group(1).startswith(
        ("inf", "dl", "trn", "vt", "hpc", "mac"))


def group_limits(asgs):
    """One MaxSize limit per auto scaling group: a create raises the desired capacity by one, which AWS refuses
    above MaxSize (create_instance refuses it first)."""
    return [quota.known_limit("MaxSize", "auto scaling group %s" % asg["AutoScalingGroupName"],
                              int(asg.get("MaxSize") or 0), int(asg.get("DesiredCapacity") or 0),
                              {asg["AutoScalingGroupName"]: 1}) for asg in asgs]


def vcpu_limit(region, quota_value, running, vcpus_of, group_types):
    """The on-demand Standard vCPU limit of the region. `running`: instance types of the running and pending
    on-demand instances; `vcpus_of`: {instance type: vCPUs}; `group_types`: {group: its launch template's
    instance type}. Groups of other families are not constrained by this quota."""
    usage = sum(vcpus_of[t] for t in running if is_standard_instance_type(t))
    per_group = {g: vcpus_of[t] for g, t in group_types.items() if is_standard_instance_type(t)}
    return quota.known_limit("Running On-Demand Standard instances (%s)" % ON_DEMAND_STANDARD_QUOTA_CODE,
                             "EC2 in %s" % region, quota_value, usage, per_group, unit=quota.UNIT_VCPUS)


def action_name(endpoint_prefix, operation):
    """An API action as IAM policies and amazon.aws's resource_actions name it: ec2:DescribeInstances."""
    return "%s:%s" % (endpoint_prefix, operation)


# Set by the provider whatever aws_config says: with_retries() retries (see the module docstring), so
# botocore must not retry as well.
_FIXED_CONFIG = dict(retries={"total_max_attempts": 1})


def client_config(aws_config=None):
    """The botocore Config of every client: the provider's defaults, then the user's aws_config (as in
    amazon.aws: any botocore.config.Config parameter, e.g. proxies or read_timeout), except retries."""
    config = botocore.config.Config(connect_timeout=10, read_timeout=30, user_agent_extra="kubenodes.image_upgrade")
    if aws_config:
        try:
            config = config.merge(botocore.config.Config(**aws_config))
        except TypeError as exc:
            raise ProviderError("aws.aws_config: %s; give botocore.config.Config parameters such as "
                                "connect_timeout, read_timeout or proxies" % exc)
    return config.merge(botocore.config.Config(**_FIXED_CONFIG))


def _epoch(value):
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return value.timestamp()
    return None


# ----------------------------------------------------------------------------------------------------
# The provider
# ----------------------------------------------------------------------------------------------------

class AwsProvider(ReadingMemo, CloudProvider):
    """Within reading(): each launch template version is read once, and the group descriptions of a
    list_groups serve the list_instances calls that follow it (one each: a description carries the group's
    membership, which every pass must read fresh). Its own writes make it read again."""

    name = "aws"

    def __init__(self, session, endpoint_url=None, verify=None, create_timeout=120.0, poll_interval=2.0,
                 retry_attempts=6, retry_base_delay=0.5, sleep=time.sleep, clock=time.time, group_tags=None,
                 aws_config=None, record_actions=False):
        config = client_config(aws_config)
        kwargs = dict(config=config, endpoint_url=endpoint_url or None)
        if verify is not None:
            kwargs["verify"] = verify
        self.ec2 = session.client("ec2", **kwargs)
        self.autoscaling = session.client("autoscaling", **kwargs)
        self.servicequotas = session.client("service-quotas", **kwargs)
        # debug_botocore_endpoint_logs: every API action called, as amazon.aws returns them (resource_actions).
        self.resource_actions = [] if record_actions else None
        if record_actions:
            for client in (self.ec2, self.autoscaling, self.servicequotas):
                client.meta.events.register("before-call", self._record_action)
        self.region = session.region_name
        self.create_timeout = create_timeout
        self._reported_failures = set()   # ActivityIds of launch failures create_instance already raised
        self.group_tags = dict(group_tags or {})
        self.poll_interval = poll_interval
        self.retry_attempts = retry_attempts
        self.retry_base_delay = retry_base_delay
        self._sleep = sleep
        self._clock = clock
        # Creates started without waiting whose instance AWS has not launched yet: group -> [(started, raised to,
        # the group's instance IDs before)]; instance IDs already given to one of them (never to a second).
        self._launching = {}
        self._claimed = set()
        self._lock = threading.Lock()   # groups are listed from several threads

    # -- plumbing -----------------------------------------------------------------------------------

    def _record_action(self, model=None, **_kwargs):
        if model is not None:
            self.resource_actions.append(action_name(model.service_model.endpoint_prefix, model.name))

    def _call(self, client, operation, **kwargs):
        method = getattr(client, operation)

        def once():
            try:
                return method(**kwargs)
            except botocore.exceptions.ClientError as exc:
                error = exc.response.get("Error", {})
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                raise classify_client_error(operation, error.get("Code"), error.get("Message"), status)
            except botocore.parsers.ResponseParserError as exc:
                # An unparsable body (a proxy's or load balancer's HTML page): treat as a server error.
                raise ProviderError("AWS %s failed: unparsable answer: %s" % (operation, str(exc)[:300]),
                                    retryable=True)
            except (botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectTimeoutError,
                    botocore.exceptions.ReadTimeoutError, botocore.exceptions.ConnectionClosedError) as exc:
                raise ProviderError("AWS %s failed: %s" % (operation, exc), retryable=True)
            except botocore.exceptions.NoCredentialsError as exc:
                raise ProviderError("AWS %s failed: %s; give aws.access_key and aws.secret_key, aws.profile, or "
                                    "the AWS_* environment variables" % (operation, exc))
            except botocore.exceptions.BotoCoreError as exc:
                raise ProviderError("AWS %s failed: %s" % (operation, exc))

        # Counted by the API's action name (DescribeAutoScalingGroups), as CloudTrail and IAM name it.
        kind = client.meta.method_to_api_mapping.get(operation, operation)
        return with_retries(once, attempts=self.retry_attempts, base_delay=self.retry_base_delay, sleep=self._sleep,
                            on_wait=self.waiting, rate=self.call_rate, kind=kind)

    def _describe_groups(self, names=None):
        """The groups named (every group when None), in calls of at most DESCRIBE_GROUPS_NAMES names each (the API's
        limit), every page of each."""
        if names is None:
            return self._describe_group_pages({})
        names, groups = list(names), []
        for first in range(0, len(names), DESCRIBE_GROUPS_NAMES):
            groups.extend(self._describe_group_pages(dict(AutoScalingGroupNames=names[first:first + DESCRIBE_GROUPS_NAMES])))
        return groups

    def _describe_group_pages(self, kwargs):
        groups = []
        while True:
            page = self._call(self.autoscaling, "describe_auto_scaling_groups", **kwargs)
            groups.extend(page.get("AutoScalingGroups", []))
            token = page.get("NextToken")
            if not token:
                return groups
            kwargs = dict(kwargs, NextToken=token)

    def _group(self, group_id):
        validate_group_id(group_id)
        found = [g for g in self._describe_groups([group_id]) if g.get("AutoScalingGroupName") == group_id]
        if not found:
            raise NotFoundError("AWS auto scaling group %r does not exist in region %s (aws.region or AWS_REGION: "
                                "set the region the group is in)" % (group_id, self.region), status=404)
        return found[0]

    def _template_version(self, template_id, template_name, version):
        return self._recall("template", (template_id, template_name, version),
                            lambda: self._read_template_version(template_id, template_name, version))

    def _read_template_version(self, template_id, template_name, version):
        kwargs = dict(Versions=[version])
        if template_id:
            kwargs["LaunchTemplateId"] = template_id
        else:
            kwargs["LaunchTemplateName"] = template_name
        versions = self._call(self.ec2, "describe_launch_template_versions", **kwargs).get("LaunchTemplateVersions", [])
        if len(versions) != 1:
            raise ProviderError("launch template %s has no version %s" % (template_id or template_name, version))
        return versions[0]

    def _image_of_group(self, asg):
        template_id, template_name, version = launch_template_of(asg)
        data = self._template_version(template_id, template_name, version).get("LaunchTemplateData", {})
        return data.get("ImageId", "")

    def _ec2_instances_of_group(self, group_id):
        """EC2's view of every instance the ASG launched, by instance ID (one paged call)."""
        found = {}
        kwargs = dict(Filters=[{"Name": "tag:" + _GROUP_TAG, "Values": [group_id]}])
        while True:
            page = self._call(self.ec2, "describe_instances", **kwargs)
            for reservation in page.get("Reservations", []):
                for inst in reservation.get("Instances", []):
                    found[inst["InstanceId"]] = inst
            token = page.get("NextToken")
            if not token:
                return found
            kwargs["NextToken"] = token

    def _to_group(self, asg):
        return Group(
            id=asg["AutoScalingGroupName"],
            name=asg["AutoScalingGroupName"].lower(),
            image=self._image_of_group(asg),
            role=role_from_tags(asg.get("Tags")),
            target_size=asg.get("DesiredCapacity"),
            kind="AWS auto scaling group",
            settings=run_settings(asg),
        )

    # -- CloudProvider --------------------------------------------------------------------------------

    def list_groups(self, group_ids=None):
        if group_ids is not None:
            names = [validate_group_id(g) for g in group_ids]
            if not names:
                return []
            described = self._describe_groups(names)
            missing = sorted(set(names) - {g.get("AutoScalingGroupName") for g in described})
            if missing:
                raise NotFoundError("AWS auto scaling groups do not exist in region %s: %s (aws.region or AWS_REGION: "
                                    "set the region the groups are in)" % (self.region, ", ".join(missing)), status=404)
        else:
            # Discovery: the whole region, narrowed to the groups carrying aws.group_tags.
            described = [g for g in self._describe_groups() if has_tags(g, self.group_tags)]
        self._forget("asg")
        for asg in described:
            self._keep("asg", asg["AutoScalingGroupName"], asg)
        return [self._to_group(asg) for asg in described]

    def list_instances(self, group_id):
        asg = self._take("asg", group_id) or self._group(group_id)
        ec2_view = self._ec2_instances_of_group(group_id)
        instances = []
        seen = set()
        for member in asg.get("Instances", []):
            instance_id = member["InstanceId"]
            seen.add(instance_id)
            ec2 = ec2_view.get(instance_id)
            ec2_state = (ec2 or {}).get("State", {}).get("Name")
            zone = member.get("AvailabilityZone") or (ec2 or {}).get("Placement", {}).get("AvailabilityZone", "")
            instances.append(Instance(
                provider_id=format_provider_id(zone, instance_id),
                node_name=instance_id,
                group_id=group_id,
                image=(ec2 or {}).get("ImageId", ""),
                state=instance_state(member.get("LifecycleState"), ec2_state),
                created_at=_epoch((ec2 or {}).get("LaunchTime")),
                name=instance_id,
                extra=_member_extra(member, ec2_state),
            ))
        # Creates started without waiting whose instance the group does not list yet: being created (their slot held).
        waiting = [start for start, member in self._launched(group_id, asg) if member is None]
        image = self._image_of_group(asg) if waiting else ""
        instances.extend(Instance(provider_id="", node_name="", group_id=group_id, image=image, state=CREATING,
                                  created_at=start[0], name="", extra={PENDING: True, "listed": False})
                         for start in waiting)
        # Instances the ASG has already let go but EC2 still shuts down: deletion under way.
        for instance_id, ec2 in sorted(ec2_view.items()):
            ec2_state = ec2.get("State", {}).get("Name")
            if instance_id in seen or ec2_state == "terminated":
                continue
            zone = ec2.get("Placement", {}).get("AvailabilityZone", "")
            state = DELETING if ec2_state == "shutting-down" else _EC2_STATES.get(ec2_state, UNKNOWN)
            if state in (RUNNING, CREATING):
                # Tagged by the group but no longer in it (detached): not ours to count or delete.
                continue
            instances.append(Instance(
                provider_id=format_provider_id(zone, instance_id), node_name=instance_id, group_id=group_id,
                image=ec2.get("ImageId", ""), state=state, created_at=_epoch(ec2.get("LaunchTime")),
                name=instance_id, extra=dict(lifecycle_state=None, health_status=None, ec2_state=ec2_state),
            ))
        return instances

    #: create_instance(wait=False) raises the desired capacity and returns; follow_operations() names the instance
    #: once the group lists it, or tells the launch's failure. A deletion (TerminateInstanceInAutoScalingGroup) never
    #: waited: the instance lists Terminating (DELETING) from the answer on, and only a later listing shows it gone.
    creates_without_waiting = True

    def create_instance(self, group_id, wait=True):
        """Add one instance: raise the group's desired capacity by one and wait until the group lists the new instance
        (or its launch failed). With wait False, return at once an instance without a providerID (extra PENDING),
        listed as being created until follow_operations() names it."""
        asg = self._group(group_id)
        desired = int(asg.get("DesiredCapacity") or 0)
        maximum = int(asg.get("MaxSize") or 0)
        known = {m["InstanceId"] for m in asg.get("Instances", [])}
        started = self._clock()
        # A desired capacity above the group's instances is an earlier create whose launch has not come (it timed
        # out): its refusal may have come since, which holds the surge as any refusal does; else its launch is
        # waited for again instead of raising the capacity once more. The creates this object follows are not that.
        staying = [m for m in asg.get("Instances", []) if not _leaving(m.get("LifecycleState"))]
        raised_to = desired
        followed = sum(1 for dummy, member in self._launched(group_id, asg) if member is None)
        if desired > len(staying) + followed:
            activities = self._call(self.autoscaling, "describe_scaling_activities", AutoScalingGroupName=group_id,
                                    MaxRecords=20).get("Activities", [])
            latest = activities[:1]
            failure = launch_failure(latest, 0, self._reported_failures)
            if failure is not None:
                self._fail_launch(group_id, failure, raised_to, asg, " (the launch of an earlier create that timed out)")
        else:
            if desired + 1 > maximum:
                # AWS would refuse with a ValidationError; say it in a way the planner can act on.
                raise QuotaError("AWS auto scaling group %s is at its MaxSize %d (desired %d): cannot add an instance; "
                                 "raise MaxSize or lower the surge" % (group_id, maximum, desired), code="MaxSize")
            raised_to = desired + 1
            self._forget("asg")
            self._call(self.autoscaling, "set_desired_capacity", AutoScalingGroupName=group_id,
                       DesiredCapacity=raised_to, HonorCooldown=False)
        self._forget("asg")
        if not wait:
            with self._lock:
                self._launching.setdefault(group_id, []).append((started, raised_to, frozenset(known)))
            return Instance(provider_id="", node_name="", group_id=group_id, image=self._image_of_group(asg),
                            state=CREATING, created_at=started, name="", extra={PENDING: True, "listed": False})
        deadline = started + self.create_timeout
        while True:
            asg = self._group(group_id)
            new = sorted((m for m in asg.get("Instances", []) if m["InstanceId"] not in known),
                         key=lambda m: m["InstanceId"])
            if new:
                member = new[0]
                zone = member.get("AvailabilityZone", "")
                if not zone:
                    raise ProviderError("AWS launched %s in %s but reports no availability zone for it"
                                        % (member["InstanceId"], group_id))
                return Instance(
                    provider_id=format_provider_id(zone, member["InstanceId"]),
                    node_name=member["InstanceId"], group_id=group_id,
                    image=self._image_of_group(asg),
                    state=instance_state(member.get("LifecycleState"), None),
                    created_at=started, name=member["InstanceId"],
                    extra=dict(lifecycle_state=member.get("LifecycleState")),
                )
            activities = self._call(self.autoscaling, "describe_scaling_activities", AutoScalingGroupName=group_id,
                                    MaxRecords=20).get("Activities", [])
            failure = launch_failure(activities, started, self._reported_failures)
            if failure is not None:
                self._fail_launch(group_id, failure, raised_to, asg, "")
            if self._clock() >= deadline:
                # Leave the desired capacity raised: AWS may still launch it, and then it is a joining
                # instance the planner sees (the next create waits for it, or takes its refusal). Lowering it
                # could terminate a serving instance instead.
                raise ProviderError("AWS auto scaling group %s: desired capacity raised to %d, but no new instance "
                                    "appeared within %ds" % (group_id, raised_to, self.create_timeout),
                                    code="CreateTimeout", retryable=True)
            self._sleep(self.poll_interval)

    def _launched(self, group_id, asg):
        """[(create, member or None)]: each create of `group_id` started without waiting, in order, with the instance
        the group (as `asg` describes it) launched for it: the first, by instance ID, that was not in the group when
        that create raised the capacity and that no other create took (as create_instance takes it when it waits).
        The latest create chooses first: it knew the most instances, so the instances launched for the earlier ones
        (in the group by the time it raised the capacity) are not its own, while an earlier create may take any."""
        with self._lock:
            starts = list(self._launching.get(group_id, ()))
            taken = set(self._claimed)
        members = sorted(asg.get("Instances", []), key=lambda m: m["InstanceId"])
        found = []
        for start in reversed(starts):
            member = next((m for m in members if m["InstanceId"] not in start[2] and m["InstanceId"] not in taken), None)
            if member is not None:
                taken.add(member["InstanceId"])
            found.append((start, member))
        return found[::-1]

    def follow_operations(self):
        """The creates started without waiting that ended since the last call: [Ended] with the instance named once
        the group lists it; a failed launch (its raise undone) with a QuotaError when AWS names quota or capacity. One
        DescribeAutoScalingGroups per group with a create under way, and DescribeScalingActivities while one waits.
        One that waited create_timeout is no longer followed and no failure (AWS may still launch it: the group then
        lists it as joining, and the next create in the group waits for it instead of raising the capacity again)."""
        with self._lock:
            groups = sorted(g for g, starts in self._launching.items() if starts)
        ended = []
        for group_id in groups:
            self._forget("asg")
            asg = self._group(group_id)
            activities = None
            for start, member in self._launched(group_id, asg):
                if member is not None:
                    self._settle(group_id, start, member["InstanceId"])
                    zone = member.get("AvailabilityZone", "")
                    ended.append(Ended(group_id, member["InstanceId"], None, "create", Instance(
                        provider_id=format_provider_id(zone, member["InstanceId"]) if zone else "",
                        node_name=member["InstanceId"], group_id=group_id, image=self._image_of_group(asg),
                        state=instance_state(member.get("LifecycleState"), None), created_at=start[0],
                        name=member["InstanceId"], extra=dict(lifecycle_state=member.get("LifecycleState")))))
                    continue
                if activities is None:
                    activities = self._call(self.autoscaling, "describe_scaling_activities", AutoScalingGroupName=group_id,
                                            MaxRecords=20).get("Activities", [])
                failure = launch_failure(activities, start[0], self._reported_failures)
                if failure is not None:
                    self._settle(group_id, start)
                    try:
                        self._fail_launch(group_id, failure, start[1], asg, "")
                    except ProviderError as exc:
                        ended.append(Ended(group_id, "", exc, "create"))
                elif self._clock() >= start[0] + self.create_timeout:
                    self._settle(group_id, start)
                    if self.waiting_listener is not None:
                        self.waiting_listener("AWS auto scaling group %s: desired capacity raised to %d, but no new "
                                              "instance appeared within %ds; the next pass looks for it again"
                                              % (group_id, start[1], self.create_timeout))
        return ended

    def _settle(self, group_id, start, instance_id=None):
        with self._lock:
            self._launching[group_id].remove(start)
            if instance_id:
                self._claimed.add(instance_id)

    def _fail_launch(self, group_id, failure, raised_to, asg, which):
        """A failed launch activity: the raise undone, and a QuotaError when AWS names quota or capacity (the
        surge is held), else a ProviderError."""
        self._reported_failures.add(failure.get("ActivityId"))
        message = failure.get("StatusMessage") or failure.get("Description") or "launch failed"
        self._undo_desired(group_id, raised_to, asg)
        if is_quota_failure(message):
            raise QuotaError("AWS could not launch an instance in %s for quota or capacity%s: %s"
                             % (group_id, which, message), code="LaunchFailed")
        raise ProviderError("AWS could not launch an instance in %s%s: %s" % (group_id, which, message),
                            code="LaunchFailed")

    def _undo_desired(self, group_id, raised_to, asg):
        """Lower the desired capacity we raised when no instance came of it, only while nothing else
        changed it and no instance would be terminated by lowering it."""
        if int(asg.get("DesiredCapacity") or 0) == raised_to and len(asg.get("Instances", [])) < raised_to:
            self._call(self.autoscaling, "set_desired_capacity", AutoScalingGroupName=group_id,
                       DesiredCapacity=raised_to - 1, HonorCooldown=False)

    def delete_instance(self, provider_id):
        _zone, instance_id = parse_provider_id(provider_id)
        self._forget("asg")
        found = self._call(self.autoscaling, "describe_auto_scaling_instances",
                           InstanceIds=[instance_id]).get("AutoScalingInstances", [])
        if not found:
            # Not in any group: terminated already, or never an ASG instance.
            ec2_state = self._ec2_state(instance_id)
            if ec2_state in (None, "shutting-down", "terminated"):
                return False
            raise ProviderError("AWS instance %s is %s but belongs to no auto scaling group; it is not deleted"
                                % (instance_id, ec2_state), code="NotInGroup")
        if found[0].get("LifecycleState", "").startswith("Terminating"):
            return False
        return self._terminate(instance_id)

    def delete_instances(self, group_id, provider_ids):
        """Terminate instances of one group that a listing of it just named, each with its own
        TerminateInstanceInAutoScalingGroup (AWS has no call that takes several), with no DescribeAutoScalingInstances
        first: the listing said they are members not terminating. The call acts only on a member of an auto scaling
        group, and one that left it meanwhile is skipped. The providerIDs whose termination AWS accepted."""
        self._forget("asg")
        return [pid for pid in provider_ids if self._terminate(parse_provider_id(pid)[1])]

    def _terminate(self, instance_id):
        """TerminateInstanceInAutoScalingGroup, the capacity lowered with it; False when AWS no longer finds the
        instance in a group (terminated or detached meanwhile)."""
        try:
            self._call(self.autoscaling, "terminate_instance_in_auto_scaling_group", InstanceId=instance_id,
                       ShouldDecrementDesiredCapacity=True)
        except ProviderError as exc:
            if "Instance Id not found" in str(exc) or "No managed instance found" in str(exc):
                return False  # terminated since it was read
            raise
        return True

    def instance_group(self, provider_id):
        """The group DescribeAutoScalingInstances names (the instance's aws:autoscaling:groupName); an instance
        in none is absent once EC2 says it is terminating or gone."""
        _zone, instance_id = parse_provider_id(provider_id)
        found = self._call(self.autoscaling, "describe_auto_scaling_instances",
                           InstanceIds=[instance_id]).get("AutoScalingInstances", [])
        if found:
            return found[0].get("AutoScalingGroupName") or ""
        return None if self._ec2_state(instance_id) in (None, "shutting-down", "terminated") else ""

    def _ec2_state(self, instance_id):
        try:
            page = self._call(self.ec2, "describe_instances", InstanceIds=[instance_id])
        except NotFoundError:
            return None
        for reservation in page.get("Reservations", []):
            for inst in reservation.get("Instances", []):
                return inst.get("State", {}).get("Name")
        return None

    def group_image(self, group_id):
        return self._image_of_group(self._group(group_id))

    def set_group_image(self, group_id, image):
        image = self.validate_image(image)
        asg = self._group(group_id)
        template_id, template_name, version = launch_template_of(asg)
        # Read fresh, not from reading(): this call decides on them and may change them.
        current = self._read_template_version(template_id, template_name, version)
        if current.get("LaunchTemplateData", {}).get("ImageId") == image:
            return False
        template_id = current.get("LaunchTemplateId") or template_id
        latest = self._read_template_version(template_id, None, "$Latest")
        if latest.get("LaunchTemplateData", {}).get("ImageId") == image:
            # An earlier run created the version and stopped before making it the default.
            number = latest["VersionNumber"]
        else:
            created = self._call(
                self.ec2, "create_launch_template_version", LaunchTemplateId=template_id,
                SourceVersion=str(current["VersionNumber"]), LaunchTemplateData={"ImageId": image},
                VersionDescription="kubenodes.image_upgrade: image %s" % image,
            )
            number = (created.get("LaunchTemplateVersion") or {}).get("VersionNumber")
            if number is None:
                raise ProviderError("AWS created a launch template version for %s but did not return its number"
                                    % template_id)
        self._call(self.ec2, "modify_launch_template", LaunchTemplateId=template_id, DefaultVersion=str(number))
        self._forget("template")    # $Default and $Latest moved
        self._forget("asg")
        if version not in ("$Default", "$Latest"):
            if asg.get("LaunchTemplate"):
                self._call(self.autoscaling, "update_auto_scaling_group", AutoScalingGroupName=group_id,
                           LaunchTemplate={"LaunchTemplateId": template_id, "Version": "$Default"})
            else:
                raise ProviderError("auto scaling group %s pins launch template version %s inside a mixed instances "
                                    "policy; point it at $Default first" % (group_id, version))
        return True

    def set_run_setting(self, group_id, name, value):
        if name not in cloud_settings.AWS_PROCESSES + (cloud_settings.AWS_MIN_SIZE,):
            return super().set_run_setting(group_id, name, value)
        self._forget("asg")
        if run_settings(self._group(group_id)).get(name) == value:
            return False
        if name == cloud_settings.AWS_MIN_SIZE:
            self._call(self.autoscaling, "update_auto_scaling_group", AutoScalingGroupName=group_id, MinSize=int(value))
        else:
            operation = "suspend_processes" if value == "suspended" else "resume_processes"
            self._call(self.autoscaling, operation, AutoScalingGroupName=group_id, ScalingProcesses=[name])
        return True

    def restore_problem(self, group_id, name, value):
        """AZRebalance back on zones out of balance would terminate an instance at once; MinSize back above the
        desired capacity would launch instances at once."""
        asg = self._group(group_id)
        if name == cloud_settings.AWS_MIN_SIZE and int(value) > int(asg.get("DesiredCapacity") or 0):
            return ("the group's desired capacity is %s, below that MinSize, so AWS would launch instances at once; "
                    "set it back yourself once the group is whole" % asg.get("DesiredCapacity"))
        if name == cloud_settings.AWS_AZ_REBALANCE and value == "active":
            counts = {zone: 0 for zone in asg.get("AvailabilityZones") or []}
            for instance in asg.get("Instances") or []:
                if not str(instance.get("LifecycleState", "")).startswith(("Terminating", "Terminated", "Detach")):
                    counts[instance.get("AvailabilityZone")] = counts.get(instance.get("AvailabilityZone"), 0) + 1
            return zone_imbalance(counts)
        return None

    def searched(self):
        return "AWS region %s (aws.region or AWS_REGION)" % self.region

    def validate_image(self, image):
        image = validate_image_reference(image)
        try:
            images = self._call(self.ec2, "describe_images", ImageIds=[image]).get("Images", [])
        except NotFoundError:
            images = []
        if not images:
            raise NotFoundError("AWS image %s does not exist in region %s or is not shared with this account (an AMI "
                                "belongs to one region: set aws.region or AWS_REGION to the image's region, or copy the "
                                "image into %s)" % (image, self.region, self.region), status=404)
        state = images[0].get("State", "available")
        if state != "available":
            raise NotFoundError("AWS image %s is %s, not available" % (image, state))
        return image

    def instance_headroom(self, group_ids):
        """Each group's MaxSize against its desired capacity, and EC2's on-demand Standard vCPU quota (Service
        Quotas) against the vCPUs of the running on-demand instances, in instances of each group's type."""
        names = [validate_group_id(g) for g in group_ids]
        if not names:
            return []
        try:
            asgs = self._describe_groups(names)
        except ProviderError as exc:
            return [quota.unknown_limit("MaxSize", "auto scaling group %s" % n, [n], str(exc)) for n in names]
        limits = group_limits(asgs)
        vcpu_scope = "EC2 in %s" % self.region
        vcpu_name = "Running On-Demand Standard instances (%s)" % ON_DEMAND_STANDARD_QUOTA_CODE
        try:
            group_types = {}
            for asg in asgs:
                template_id, template_name, version = launch_template_of(asg)
                data = self._template_version(template_id, template_name, version).get("LaunchTemplateData", {})
                if not data.get("InstanceType"):
                    raise ProviderError("launch template of %s names no instance type" % asg["AutoScalingGroupName"])
                group_types[asg["AutoScalingGroupName"]] = data["InstanceType"]
            value = self._call(self.servicequotas, "get_service_quota", ServiceCode="ec2",
                               QuotaCode=ON_DEMAND_STANDARD_QUOTA_CODE)["Quota"]["Value"]
            running = self._on_demand_types()
            vcpus_of = self._vcpus(set(running) | set(group_types.values()))
        except ProviderError as exc:
            limits.append(quota.unknown_limit(vcpu_name, vcpu_scope, names, str(exc)))
            return limits
        limits.append(vcpu_limit(self.region, value, running, vcpus_of, group_types))
        return limits

    def _on_demand_types(self):
        """The instance type of every pending or running on-demand instance in the region (one paged call)."""
        types = []
        kwargs = dict(Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
        while True:
            page = self._call(self.ec2, "describe_instances", **kwargs)
            for reservation in page.get("Reservations", []):
                for inst in reservation.get("Instances", []):
                    if inst.get("InstanceLifecycle") not in ("spot", "capacity-block"):
                        types.append(inst.get("InstanceType", ""))
            token = page.get("NextToken")
            if not token:
                return types
            kwargs["NextToken"] = token

    def _vcpus(self, instance_types):
        wanted = sorted(t for t in instance_types if t)
        if not wanted:
            return {}
        found = self._call(self.ec2, "describe_instance_types", InstanceTypes=wanted).get("InstanceTypes", [])
        vcpus = {t["InstanceType"]: int(t["VCpuInfo"]["DefaultVCpus"]) for t in found}
        missing = [t for t in wanted if t not in vcpus]
        if missing:
            raise ProviderError("EC2 does not describe instance types %s" % ", ".join(missing))
        return vcpus

    def normalize_provider_id(self, provider_id):
        # Instance IDs are unique per region; the zone part may be missing in some kubelets' spelling.
        try:
            return "aws:///" + parse_provider_id(provider_id)[1]
        except InvalidReferenceError:
            return provider_id.strip().lower()

    def group_id_of(self, provider_id):
        return None


def from_params(options):
    """The AwsProvider for the module's `aws` option dict."""
    if not HAS_BOTO3:
        raise ProviderError("the Python packages boto3 and botocore are required for provider aws "
                            "(pip install boto3):\n%s" % BOTO3_IMPORT_ERROR)
    options = options or {}
    if bool(options.get("access_key")) != bool(options.get("secret_key")):
        raise ProviderError("aws.access_key and aws.secret_key must be given together")
    if options.get("profile") and options.get("access_key"):
        raise ProviderError("aws.profile and aws.access_key are mutually exclusive")
    try:
        session = boto3.session.Session(
            aws_access_key_id=options.get("access_key") or None,
            aws_secret_access_key=options.get("secret_key") or None,
            aws_session_token=options.get("session_token") or None,
            region_name=options.get("region") or None,
            profile_name=options.get("profile") or None,
        )
    except botocore.exceptions.ProfileNotFound as exc:
        raise ProviderError("aws.profile: %s" % exc)
    if not session.region_name:
        raise ProviderError("aws.region is required (or the AWS_REGION environment variable)")
    verify = None
    if options.get("validate_certs") is False:
        verify = False
    elif options.get("aws_ca_bundle"):
        verify = options["aws_ca_bundle"]
    return AwsProvider(session, endpoint_url=options.get("endpoint_url"), verify=verify,
                       group_tags=options.get("group_tags"), aws_config=options.get("aws_config"),
                       record_actions=bool(options.get("debug_botocore_endpoint_logs")))
