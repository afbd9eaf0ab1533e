"""Every rule of validate.py: the values it refuses, with the message (option, rule, value given, what to do),
and the values it accepts; the role's rules and the modules' rules are the same functions."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core, validate

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("value", [1, 2, "3", 5000, "1%", "25%", "100%", " 50 % "])
def test_max_surge_accepts_counts_and_percentages(value):
    assert validate.max_surge("max_surge", value) is None


@pytest.mark.parametrize("value,shown", [
    (0, "got 0: 0 would never replace a node"),
    ("0", "got '0': 0 would never replace a node"),
    (-1, "got -1"),
    ("0%", "got '0%'"),
    ("101%", "got '101%'"),
    (10 ** 20, "got 100000000000000000000"),
    (5001, "got 5001"),
    (True, "got True"),
    ("two", "got 'two'"),
    (None, "got None"),
    (1.5, "got 1.5"),
])
def test_max_surge_refusals_name_the_rule_and_the_value(value, shown):
    message = validate.max_surge("rolling_upgrade_max_surge", value)
    assert message.startswith("rolling_upgrade_max_surge must be a whole number from 1 to 5000 or a percentage "
                              "of the group from 1% to 100% (such as 25%)"), message
    assert shown in message


def test_max_surge_total():
    assert validate.max_surge_total("max_surge_total", None) is None
    assert validate.max_surge_total("max_surge_total", 3) is None
    message = validate.max_surge_total("max_surge_total", 0)
    assert message == ("max_surge_total must be a whole number from 1 to 5000, got 0; null means no cap across "
                       "groups (0 would never replace a node)")
    assert "got 100000000000000000000" in validate.max_surge_total("max_surge_total", 10 ** 20)
    assert "got -2" in validate.max_surge_total("max_surge_total", -2)


def test_timeouts_start_at_one_second_and_are_bounded():
    assert validate.seconds("join_timeout", 1) is None
    assert validate.seconds("join_timeout", "1800") is None
    assert validate.seconds("join_timeout", 0) == "join_timeout must be a whole number from 1 to 2592000 (seconds), got 0"
    assert "got -5" in validate.seconds("wait_timeout", -5)
    assert "got 100000000000000000000" in validate.seconds("join_timeout", 10 ** 20)
    assert "got 2592001" in validate.seconds("join_timeout", validate.MAX_SECONDS + 1)
    # 0 where it is documented to mean something (heir_ready_seconds: no wait)
    assert validate.seconds("heir_ready_seconds", 0, minimum=0) is None
    assert validate.optional_seconds("grace", None) is None
    assert validate.optional_seconds("grace", 0) is None
    assert "got -1" in validate.optional_seconds("grace", -1)


def test_drain_timeout_names_the_no_limit_setting():
    message = validate.ROLE_RULES["rolling_upgrade_drain_timeout"]("rolling_upgrade_drain_timeout", -1)
    assert message == ("rolling_upgrade_drain_timeout must be a whole number from 1 to 2592000 (seconds), got -1; "
                       "to wait with no limit, set rolling_upgrade_drain_on_timeout to continue")


def test_cloud_calls_per_minute_is_null_or_a_bounded_count():
    rule = validate.ROLE_RULES["rolling_upgrade_cloud_calls_per_minute"]
    for value in (None, 1, "150", 6000):
        assert rule("rolling_upgrade_cloud_calls_per_minute", value) is None, value
    for value, shown in ((0, "0"), (6001, "6001"), ("fast", "'fast'"), (True, "True")):
        assert rule("rolling_upgrade_cloud_calls_per_minute", value) == (
            "rolling_upgrade_cloud_calls_per_minute must be a whole number from 1 to 6000, got %s; leave it null for the "
            "cloud's default (docs/api-limits.md)" % shown)


def test_lease_seconds():
    assert validate.lease_seconds("lease_duration", 10) is None
    assert validate.lease_seconds("lease_duration", 1) == (
        "lease_duration must be a whole number from 10 to 2592000 (seconds), got 1")


def test_positive_number():
    assert validate.positive_number("wait_sleep", 0.5) is None
    assert validate.positive_number("wait_sleep", 0) == ("wait_sleep must be a number of seconds above 0 and at most "
                                                         "2592000, got 0")
    assert "got 'x'" in validate.positive_number("wait_sleep", "x")


def test_integer_bounds():
    assert validate.integer("count", 1, 1, 5000) is None
    assert validate.integer("count", 0, 1, 5000) == "count must be a whole number from 1 to 5000, got 0"
    assert "got 100000000000000000000" in validate.integer("count", 10 ** 20, 1, 5000)
    assert validate.optional_integer("count", None, 1, 5) is None


@pytest.mark.parametrize("value", ["image-upgrade.kubenodes.io", "constellation.edgeless.systems", "example.com", "a"])
def test_annotation_prefix_accepts_dns_subdomains(value):
    assert validate.annotation_prefix("annotation_prefix", value) is None


@pytest.mark.parametrize("value", ["", None, "Example.com", "example.com/", "-example.com", "example..com",
                                   "ex ample.com", "a" * 254, 7])
def test_annotation_prefix_refuses_everything_else(value):
    message = validate.annotation_prefix("annotation_prefix", value)
    assert message.startswith("annotation_prefix must be a DNS subdomain (lower-case letters, digits, '-' and '.', "
                              "starting and ending with a letter or digit, at most 253 characters) such as "
                              "image-upgrade.kubenodes.io, got "), message
    assert repr(value) in message


def test_an_empty_prefix_says_to_leave_it_unset():
    assert validate.annotation_prefix("annotation_prefix", "").endswith(
        "got ''; leave it unset for the default image-upgrade.kubenodes.io")


def test_the_planner_uses_the_same_prefix_rule():
    for value in ("", "example.com/"):
        with pytest.raises(core.PlanInputError) as err:
            core.AnnotationKeys(value)
        assert str(err.value) == validate.annotation_prefix("annotation_prefix", value)


def test_the_planner_uses_the_same_surge_rules():
    with pytest.raises(core.PlanInputError, match="max_surge must be a whole number from 1 to 5000"):
        core.Options(image="i", max_surge=0).validate()
    with pytest.raises(core.PlanInputError, match="max_surge_total must be a whole number from 1 to 5000, got 0"):
        core.Options(image="i", max_surge_total=0).validate()


def test_kubernetes_names():
    assert validate.object_name("name", "cluster-autoscaler") is None
    assert validate.object_name("name", "worker-0.zone-a") is None
    assert validate.object_name("name", "Bad_Name").startswith("name must be a DNS subdomain")
    assert "got ''" in validate.object_name("name", "")
    assert validate.namespace("namespace", "kube-system") is None
    assert validate.namespace("namespace", "kube.system") == (
        "namespace must be a DNS label (lower-case letters, digits and '-', starting and ending with a letter or "
        "digit, at most 63 characters) such as kube-system, got 'kube.system'")
    assert "got '%s'" % ("a" * 64) in validate.namespace("namespace", "a" * 64)
    assert validate.object_names("name", ["a", "b"]) is None
    assert validate.object_names("name", []) == "name must be a list of one or more names, got []"
    assert validate.object_names("name", ["a", "B"]).startswith("name item must be a DNS subdomain")


@pytest.mark.parametrize("value", ["team", "example.com/team", "a.b_c-d", "x" * 63])
def test_label_keys_accepted(value):
    assert validate.label_key("exclude_labels", value) is None


@pytest.mark.parametrize("value", ["", "/team", "Example.com/team", "a/b/c", "-team", "team-", "x" * 64, 3])
def test_label_keys_refused(value):
    assert validate.label_key("exclude_labels", value).startswith("exclude_labels must be a label key such as team")
    assert validate.label_keys("exclude_labels", [value]).startswith("exclude_labels item must be a label key")


def test_strings_and_choices():
    assert validate.image("image", "projects/p/global/images/family/f") is None
    assert validate.image("rolling_upgrade_image", "  ").startswith(
        "rolling_upgrade_image must be the image every node must run")
    assert validate.non_empty_strings("scaling_groups", []) is None
    assert validate.non_empty_strings("scaling_groups", ["a", ""], "scaling group IDs") == (
        "scaling_groups must be a list of scaling group IDs, none of them empty, got ['a', '']")
    assert validate.one_of("provider", "gce", ("gcp", "azure", "aws")) == (
        "provider must be one of gcp, azure, aws, got 'gce'")


def test_check_reports_each_broken_option_once_in_rule_order():
    params = dict(max_surge=0, join_timeout=0, annotation_prefix="ok.io", unrelated=1)
    problems = validate.check(params, validate.SURGE_RULES)
    assert len(problems) == 2
    assert problems[0].startswith("max_surge must") and problems[1].startswith("join_timeout must")
    assert validate.check({}, validate.SURGE_RULES) == []


def test_role_rules_cover_the_issue_list():
    cases = {
        "rolling_upgrade_max_surge": 0, "rolling_upgrade_max_surge_total": 0, "rolling_upgrade_join_timeout": 0,
        "rolling_upgrade_annotation_prefix": "", "rolling_upgrade_drain_timeout": -1,
    }
    for name, value in cases.items():
        problems = validate.check({name: value}, validate.ROLE_RULES)
        assert len(problems) == 1 and problems[0].startswith(name + " must"), problems
    assert validate.check({"rolling_upgrade_max_surge": "101%"}, validate.ROLE_RULES)
    assert validate.check({"rolling_upgrade_max_surge": 10 ** 20}, validate.ROLE_RULES)


def test_unknown_role_variables_get_the_closest_name():
    known = {"rolling_upgrade_max_surge", "rolling_upgrade_image"}
    warnings = validate.unknown_variables(
        ["rolling_upgrade_max_surj", "rolling_upgrade_image", "rolling_upgrade_zzz", "other", "_rolling_upgrade_x"],
        known, "rolling_upgrade_")
    assert warnings == [
        "unknown variable rolling_upgrade_max_surj is ignored; did you mean rolling_upgrade_max_surge?",
        "unknown variable rolling_upgrade_zzz is ignored (no role variable has this name; see the role's README)",
    ]


def test_unknown_playbook_variables():
    short = {"image", "provider", "max_surge"}
    warnings = validate.unknown_playbook_variables(
        ["image", "max_surj", "ansible_python_interpreter", "awx_job_id", "_private", "rolling_upgrade_timeout",
         "colour"], short, {"rolling_upgrade_timeout"})
    assert warnings == [
        "extra variable colour is not a variable of this playbook (image, max_surge, provider) and is ignored",
        "extra variable max_surj is not a variable of this playbook (image, max_surge, provider) and is ignored; "
        "did you mean max_surge?",
    ]


def test_a_short_name_of_a_role_variable_points_at_the_role_variable():
    short = {"image", "provider", "max_surge"}
    role = {"rolling_upgrade_max_unavailable", "rolling_upgrade_max_surge", "rolling_upgrade_timeout"}
    warnings = validate.unknown_playbook_variables(["max_unavailable", "max_unavailabel", "timeout"], short, role)
    assert warnings == [
        "extra variable max_unavailabel is not a variable of this playbook (image, max_surge, provider) and is ignored; "
        "did you mean rolling_upgrade_max_unavailable?",
        "extra variable max_unavailable is not a variable of this playbook (image, max_surge, provider) and is ignored; "
        "did you mean rolling_upgrade_max_unavailable?",
        "extra variable timeout is not a variable of this playbook (image, max_surge, provider) and is ignored; "
        "did you mean rolling_upgrade_timeout?",
    ]


def test_close_match():
    assert validate.close_match("imgae", ["image", "provider"]) == "image"
    assert validate.close_match("zzz", ["image", "provider"]) is None


class _Module:
    def __init__(self, params):
        self.params = params
        self.failed = None

    def fail_json(self, **kwargs):
        self.failed = kwargs
        raise SystemExit(1)


def test_enforce_fails_the_module_with_every_problem():
    module = _Module(dict(count=0, wait_timeout=5))
    with pytest.raises(SystemExit):
        validate.enforce(module, dict(count=lambda n, v: validate.integer(n, v, 1, 10), wait_timeout=validate.seconds))
    assert module.failed["msg"] == "count must be a whole number from 1 to 10, got 0. Nothing was changed"
    assert module.failed["reason"] == "invalid_argument"
    ok = _Module(dict(count=1))
    validate.enforce(ok, dict(count=lambda n, v: validate.integer(n, v, 1, 10)))
    assert ok.failed is None
