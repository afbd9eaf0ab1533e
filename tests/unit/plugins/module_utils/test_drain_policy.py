"""The drain ladder's rules (drain_policy.py): which rule a pod falls under, which step it is at, and the
problems of bad rules."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import drain_policy as ladder


def pod(namespace="shop", **labels):
    return {"metadata": {"name": "p", "namespace": namespace, "labels": labels}}


RULES = [
    {"name": "cache", "namespaces": ["shop"], "match_labels": {"app": "cache"}, "delete_after": 300},
    {"name": "batch", "match_labels": {"tier": "batch"}, "delete_after": 120, "force_after": 240},
    {"name": "payments", "namespaces": ["payments"]},
    {"name": "stuck", "match_labels": {"app": "stuck"}, "force_after": 60},
]


@pytest.mark.parametrize("subject,elapsed,expected", [
    (pod(app="cache"), 0, ("evict", "cache")),
    (pod(app="cache"), 299.9, ("evict", "cache")),
    (pod(app="cache"), 300, ("delete", "cache")),
    (pod(app="cache"), 10000, ("delete", "cache")),           # no force_after: never forced
    (pod("other", app="cache"), 10000, ("evict", None)),       # not in the rule's namespaces: no rule
    (pod("other", tier="batch"), 119, ("evict", "batch")),
    (pod("other", tier="batch"), 120, ("delete", "batch")),
    (pod("other", tier="batch"), 240, ("force", "batch")),
    (pod("payments", tier="batch"), 10000, ("force", "batch")),    # the first rule that matches wins
    (pod("payments"), 10000, ("evict", "payments")),               # listed with no step: only ever evicted
    (pod(app="stuck"), 60, ("force", "stuck")),                    # force without a delete step first
    (pod(), 10000, ("evict", None)),
])
def test_the_step_of_a_pod_follows_its_first_matching_rule(subject, elapsed, expected):
    assert ladder.step_for(subject, RULES, elapsed) == expected


def test_without_rules_every_pod_is_evicted():
    assert ladder.step_for(pod(app="cache"), [], 1e9) == ("evict", None)
    assert ladder.longest_ladder([]) == 0 and ladder.longest_ladder(RULES) == 300


def test_good_rules_have_no_problems():
    assert ladder.policy_problems(RULES) == [] and ladder.policy_problems(None) == []


@pytest.mark.parametrize("rules,expected", [
    ("cache", "policies must be a list of rules"),
    (["cache"], "policies[0] must be a mapping"),
    ([{"match_labels": {"app": "x"}}], "policies[0]: name must be a non-empty string"),
    ([{"name": "a"}, {"name": "a"}], "policies[1]: name 'a' is used by an earlier rule"),
    ([{"name": "a", "delete_after": -1}], "policies[0] (a): delete_after must be a whole number of seconds"),
    ([{"name": "a", "force_after": "soon"}], "policies[0] (a): force_after must be a whole number of seconds"),
    ([{"name": "a", "delete_after": 60, "force_after": 30}], "force_after (30) comes before delete_after (60)"),
    ([{"name": "a", "namespaces": ["Not_A_Namespace"]}], "namespaces must be a list of namespace names"),
    ([{"name": "a", "match_labels": {"app": 1}}], "match_labels must map label keys to string values"),
    ([{"name": "a", "selector": "app=x"}], "unknown key(s) selector; a rule takes name, namespaces, match_labels"),
])
def test_bad_rules_are_named_with_the_rule_the_key_and_the_value(rules, expected):
    problems = ladder.policy_problems(rules)
    assert any(expected in p for p in problems), problems


def test_the_role_checks_its_variable_and_upgrade_step_its_option_before_anything_changes():
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import validate

    [problem] = validate.check({"rolling_upgrade_drain_policies": [{"name": "a", "delete_after": 9, "force_after": 3}]},
                               validate.ROLE_RULES)
    assert problem.startswith("rolling_upgrade_drain_policies[0] (a): force_after (3) comes before delete_after (9)")
    assert validate.check({"rolling_upgrade_drain_policies": []}, validate.ROLE_RULES) == []
