"""Pure parts of the AWS provider: formats, state mapping, error classification, launch failures."""

import datetime
import threading

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import aws, base

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("provider_id, zone, instance_id", [
    ("aws:///us-east-2a/i-06888991e7138ed4e", "us-east-2a", "i-06888991e7138ed4e"),
    ("aws:///eu-west-1c/i-0123abcd", "eu-west-1c", "i-0123abcd"),
    ("aws:///us-gov-west-1a/i-0123456789abcdef0", "us-gov-west-1a", "i-0123456789abcdef0"),
    ("aws:///ap-southeast-1-bkk-1a/i-0123456789abcdef0", "ap-southeast-1-bkk-1a", "i-0123456789abcdef0"),
    ("aws:////i-0123456789abcdef0", "", "i-0123456789abcdef0"),
    ("  aws:///us-east-1a/i-0123456789abcdef0 ", "us-east-1a", "i-0123456789abcdef0"),
])
def test_good_provider_ids(provider_id, zone, instance_id):
    assert aws.parse_provider_id(provider_id) == (zone, instance_id)


@pytest.mark.parametrize("provider_id", [
    "aws:///us-east-2a/i-06888991e7138ed4e/x",   # too many parts
    "aws:///us-east-2a",                         # too few
    "aws://us-east-2a/i-06888991e7138ed4e",      # two slashes
    "gce://project/zone/name",
    "aws:///us-east-2a/06888991e7138ed4e",       # no i- prefix
    "aws:///us-east-2a/i-0688",                  # too short
    "aws:///us-east-2a/i-06888991E7138ED4E",     # upper-case hex
    "aws:///US-EAST-2A/i-06888991e7138ed4e",
    "",
    None,
    42,
])
def test_bad_provider_ids_name_the_format(provider_id):
    with pytest.raises(base.InvalidReferenceError) as err:
        aws.parse_provider_id(provider_id)
    assert "aws:///<availability-zone>/<instance-id>" in str(err.value)


def test_format_round_trips():
    assert aws.format_provider_id("us-east-1a", "i-0123456789abcdef0") == "aws:///us-east-1a/i-0123456789abcdef0"
    assert aws.parse_provider_id(aws.format_provider_id("us-east-1a", "i-0123abcd")) == ("us-east-1a", "i-0123abcd")


@pytest.mark.parametrize("group_id", ["workers", "eks-ng-1-abc", "a" * 255, "With Space Inside", "x.y_z-1"])
def test_good_group_ids(group_id):
    assert aws.validate_group_id(group_id) == group_id


@pytest.mark.parametrize("group_id", ["", "a" * 256, "arn:aws:autoscaling:x", " leading", "trailing ", None, 3])
def test_bad_group_ids_name_the_format(group_id):
    with pytest.raises(base.InvalidReferenceError) as err:
        aws.validate_group_id(group_id)
    assert "auto scaling group name" in str(err.value)


@pytest.mark.parametrize("image", ["ami-12c6146b", "ami-0123456789abcdef0", " ami-0123456789abcdef0"])
def test_good_images(image):
    assert aws.validate_image_reference(image) == image.strip()


@pytest.mark.parametrize("image", [
    "ami-123", "ami-0123456789", "ami-0123456789ABCDEF0", "ami-0123456789abcdef01", "ami-xyz12345",
    "i-0123456789abcdef0", "ubuntu-22.04", "projects/p/global/images/x", "", None,
])
def test_bad_images_name_the_format(image):
    with pytest.raises(base.InvalidReferenceError) as err:
        aws.validate_image_reference(image)
    assert "AMI ID" in str(err.value)


@pytest.mark.parametrize("tags, role", [
    ([{"Key": "kubenodes-role", "Value": "control-plane"}], base.ROLE_CONTROL_PLANE),
    ([{"Key": "kubenodes-role", "Value": "worker"}], base.ROLE_WORKER),
    ([{"Key": "constellation-role", "Value": "ControlPlane"}], base.ROLE_CONTROL_PLANE),
    ([{"Key": "constellation-role", "Value": "Worker"}], base.ROLE_WORKER),
    ([{"Key": "kubenodes-role", "Value": "database"}], None),
    ([{"Key": "Name", "Value": "worker"}], None),
    ([], None),
    (None, None),
])
def test_role_from_tags(tags, role):
    assert aws.role_from_tags(tags) == role


@pytest.mark.parametrize("lifecycle, ec2_state, state", [
    ("InService", "running", base.RUNNING),
    ("Pending", "pending", base.CREATING),
    ("Pending", "running", base.RUNNING),
    ("Pending:Wait", None, base.CREATING),
    ("Pending", None, base.CREATING),          # just launched, EC2 does not list it yet: never gone
    ("InService", None, base.CREATING),
    ("Terminating", "running", base.DELETING),
    ("Terminating:Wait", "running", base.DELETING),
    ("Terminated", "terminated", base.DELETING),
    ("Detaching", "running", base.DELETING),
    ("InService", "stopped", base.STOPPED),
    ("InService", "stopping", base.STOPPED),
    ("InService", "shutting-down", base.DELETING),
    ("Standby", "running", base.RUNNING),
    ("InService", "weird", base.UNKNOWN),
])
def test_instance_state(lifecycle, ec2_state, state):
    assert aws.instance_state(lifecycle, ec2_state) == state


def test_launch_template_of_plain_and_mixed_and_launch_configuration():
    assert aws.launch_template_of({"LaunchTemplate": {"LaunchTemplateId": "lt-1", "LaunchTemplateName": "n",
                                                      "Version": "3"}}) == ("lt-1", "n", "3")
    assert aws.launch_template_of({"LaunchTemplate": {"LaunchTemplateName": "n"}}) == (None, "n", "$Default")
    mixed = {"MixedInstancesPolicy": {"LaunchTemplate": {"LaunchTemplateSpecification": {
        "LaunchTemplateId": "lt-2", "Version": "$Latest"}}}}
    assert aws.launch_template_of(mixed) == ("lt-2", None, "$Latest")
    with pytest.raises(base.ProviderError) as err:
        aws.launch_template_of({"AutoScalingGroupName": "old", "LaunchConfigurationName": "lc"})
    assert "launch configuration" in str(err.value) and "old" in str(err.value)


@pytest.mark.parametrize("code, status, cls, retryable", [
    ("Throttling", 400, base.ProviderError, True),
    ("RequestLimitExceeded", 503, base.ProviderError, True),
    ("InternalFailure", 500, base.ProviderError, True),
    ("ServiceUnavailable", 503, base.ProviderError, True),
    ("Unavailable", 503, base.ProviderError, True),
    ("SomethingNew", 502, base.ProviderError, True),
    (None, 429, base.ProviderError, True),
    ("ValidationError", 400, base.ProviderError, False),
    ("AccessDenied", 403, base.ProviderError, False),
    ("InvalidAMIID.NotFound", 400, base.NotFoundError, False),
    ("InvalidInstanceID.NotFound", 400, base.NotFoundError, False),
    ("InvalidAMIID.Malformed", 400, base.InvalidReferenceError, False),
])
def test_error_classification(code, status, cls, retryable):
    err = aws.classify_client_error("DescribeImages", code, "text", status)
    assert type(err) is cls  # pylint: disable=unidiomatic-typecheck  # the exact class, not a subclass
    assert err.retryable is retryable
    assert "DescribeImages" in str(err)


def test_launch_failure_picks_recent_failures_only():
    now = 1_800_000_000.0
    old = datetime.datetime.fromtimestamp(now - 600, datetime.timezone.utc)
    new = datetime.datetime.fromtimestamp(now + 1, datetime.timezone.utc)
    activities = [
        {"StatusCode": "Successful", "StartTime": new},
        {"StatusCode": "Failed", "StartTime": old, "StatusMessage": "old failure"},
    ]
    assert aws.launch_failure(activities, now) is None
    activities.append({"StatusCode": "Failed", "StartTime": new, "StatusMessage": "vCPU limit"})
    assert aws.launch_failure(activities, now)["StatusMessage"] == "vCPU limit"
    assert aws.launch_failure([], now) is None


@pytest.mark.parametrize("message, quota", [
    ("You have requested more vCPU capacity than your current vCPU limit of 32 allows", True),
    ("We currently do not have sufficient t3.micro capacity in the Availability Zone you requested", True),
    ("InsufficientInstanceCapacity", True),
    ("The image id '[ami-1234abcd]' does not exist", False),
    ("Invalid IAM Instance Profile name", False),
    ("", False),
])
def test_quota_failures_are_told_apart(message, quota):
    assert aws.is_quota_failure(message) is quota


def test_argument_spec_mirrors_amazon_aws():
    spec = aws.ARG_SPEC
    assert spec["secret_key"]["no_log"] is True and spec["session_token"]["no_log"] is True
    assert set(spec["region"]["aliases"]) == {"aws_region", "ec2_region"}
    assert set(spec["access_key"]["aliases"]) == {"aws_access_key_id", "aws_access_key"}
    assert set(spec["secret_key"]["aliases"]) == {"aws_secret_access_key", "aws_secret_key"}
    assert spec["region"]["fallback"][1] == ["AWS_REGION", "AWS_DEFAULT_REGION"]
    assert spec["endpoint_url"]["fallback"][1] == ["AWS_ENDPOINT_URL", "AWS_URL", "EC2_URL"]
    assert spec["aws_ca_bundle"]["fallback"][1] == ["AWS_CA_BUNDLE"]


@pytest.mark.parametrize("options, message", [
    ({"region": "us-east-1", "access_key": "AKIA"}, "given together"),
    ({"region": "us-east-1", "secret_key": "s"}, "given together"),
    ({"region": "us-east-1", "profile": "p", "access_key": "a", "secret_key": "s"}, "mutually exclusive"),
])
def test_from_params_refuses_bad_combinations(options, message):
    with pytest.raises(base.ProviderError) as err:
        aws.from_params(options)
    assert message in str(err.value)


def test_from_params_needs_a_region(monkeypatch, tmp_path):
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(base.ProviderError) as err:
        aws.from_params({"access_key": "a", "secret_key": "s"})
    assert "aws.region" in str(err.value)


def test_normalize_provider_id_ignores_zone_spelling():
    provider = aws.AwsProvider.__new__(aws.AwsProvider)
    assert provider.normalize_provider_id("aws:///us-east-1a/i-0123abcd") == \
        provider.normalize_provider_id("aws:////i-0123abcd")
    assert provider.normalize_provider_id("aws:///us-east-1a/i-0123abcd") != \
        provider.normalize_provider_id("aws:///us-east-1a/i-0123abce")


@pytest.mark.parametrize("wanted, matches", [
    ({}, True),
    ({"kubernetes.io/cluster/prod": ""}, True),
    ({"kubernetes.io/cluster/prod": None}, True),
    ({"kubenodes-role": "worker"}, True),
    ({"kubenodes-role": "control-plane"}, False),
    ({"kubernetes.io/cluster/test": ""}, False),
    ({"kubenodes-role": "worker", "team": "x"}, False),
])
def test_group_tags_select_discovered_groups(wanted, matches):
    asg = {"Tags": [{"Key": "kubernetes.io/cluster/prod", "Value": "owned"}, {"Key": "kubenodes-role", "Value": "worker"}]}
    assert aws.has_tags(asg, wanted) is matches


def test_groups_are_described_at_most_fifty_names_a_call_every_page_of_each():
    """DescribeAutoScalingGroups takes at most 50 names: 120 groups take 3 calls (plus a second page of the first)."""
    calls = []

    class AutoScaling:
        def describe_auto_scaling_groups(self, **kwargs):
            names = kwargs.get("AutoScalingGroupNames") or []
            assert len(names) <= 50, "AWS refuses more than 50 names (ValidationError)"
            calls.append((len(names), kwargs.get("NextToken")))
            if names and names[0] == "g000" and not kwargs.get("NextToken"):
                return {"AutoScalingGroups": [{"AutoScalingGroupName": n} for n in names[:10]], "NextToken": "t"}
            skip = 10 if kwargs.get("NextToken") else 0
            return {"AutoScalingGroups": [{"AutoScalingGroupName": n} for n in names[skip:]]}
    provider = aws.AwsProvider.__new__(aws.AwsProvider)
    provider.autoscaling = AutoScaling()
    provider._call = lambda client, operation, **kwargs: getattr(client, operation)(**kwargs)
    names = ["g%03d" % i for i in range(120)]
    described = provider._describe_groups(names)
    assert [g["AutoScalingGroupName"] for g in described] == names
    assert calls == [(50, None), (50, "t"), (50, None), (20, None)]


def test_a_member_in_standby_carries_a_named_problem_and_an_in_service_one_none():
    held = aws._member_extra({"InstanceId": "i-0123456789abcdef0", "LifecycleState": "Standby"}, "running")
    assert held["state_problem"].startswith("AWS lifecycle state Standby: it is in standby")
    assert "state_problem" not in aws._member_extra({"LifecycleState": "InService"}, "running")
    assert aws.lifecycle_problem("Warmed:Running") == ("AWS lifecycle state Warmed:Running: it is in the group's warm "
                                                       "pool; nothing is done to it until it is InService again")
    assert aws.lifecycle_problem("Warmed:Terminating:Wait") is None
    # Retained after an abandoned termination: not deleting (the run would wait for it for ever), a named problem.
    retained = aws._member_extra({"LifecycleState": "Terminating:Retained"}, "running")
    assert "retained it after its termination lifecycle action" in retained["state_problem"]
    assert aws.instance_state("Terminating:Retained", "stopped") == "stopped"


def test_a_launch_failure_already_reported_is_not_taken_for_the_next_create():
    failed = {"ActivityId": "a1", "StatusCode": "Failed", "StartTime": 1000.0, "StatusMessage": "no capacity"}
    assert aws.launch_failure([failed], since=1002.0) is failed      # within the clock-skew allowance
    assert aws.launch_failure([failed], since=1002.0, reported={"a1"}) is None


def _following(starts, claimed=()):
    provider = aws.AwsProvider.__new__(aws.AwsProvider)
    provider._lock = threading.Lock()
    provider._launching = {"g": list(starts)}
    provider._claimed = set(claimed)
    return provider


def test_creates_followed_are_each_given_a_different_new_instance_whichever_order_the_ids_sort_in():
    """Issue 22: three creates started without waiting; the emulator (and AWS, when it is quick) launched each before
    the next raised the capacity, so each create knew the instances of the ones before it. The lowest new instance ID
    is the last create's: the earlier creates must not take it, or the last one waits for an instance that came."""
    old = frozenset({"i-9"})
    starts = [(1.0, 2, old), (2.0, 3, old | {"i-5"}), (3.0, 4, old | {"i-5", "i-7"})]
    asg = {"Instances": [{"InstanceId": i} for i in ("i-9", "i-5", "i-7", "i-1")]}
    found = _following(starts)._launched("g", asg)
    assert [(start[0], member["InstanceId"]) for start, member in found] == [(1.0, "i-5"), (2.0, "i-7"), (3.0, "i-1")]
    # Launches that came after all three raises: each create gets one of them, none twice; one still coming waits.
    starts = [(1.0, 2, old), (2.0, 3, old), (3.0, 4, old)]
    asg = {"Instances": [{"InstanceId": i} for i in ("i-9", "i-5", "i-1")]}
    found = _following(starts)._launched("g", asg)
    assert sorted(m["InstanceId"] for _s, m in found if m) == ["i-1", "i-5"] and found[0][1] is None
    # An instance an earlier follow gave to a create is no other's.
    assert _following(starts[:1], claimed={"i-1", "i-5"})._launched("g", asg) == [(starts[0], None)]
