# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The drain ladder (node_drain's and upgrade_step's drain `policies`, the role's rolling_upgrade_drain_policies):
rules by namespace and labels, each saying how far a pod of theirs climbs while a PodDisruptionBudget or a stuck
pod holds the drain - evicted first, then deleted without the Eviction API (past its budgets, with its grace
period) once `delete_after` seconds of the drain have passed, then forced (grace period 0, also when it is already
terminating) once `force_after` have. The first rule that matches a pod is its rule; a pod no rule matches is only
evicted, and the drain's wait_timeout and on_timeout decide what happens to it (the one-rule case).

Pure: no I/O and no clock; drain_api.py asks step_for() in each eviction round with the seconds since the drain
began (the node's recorded drain start, so a resumed run does not start the ladder again)."""

from __future__ import annotations

import re

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.drain import selector_matches

EVICT, DELETE, FORCE = "evict", "delete", "force"

POLICY_SPEC = dict(
    name=dict(type="str", required=True),
    namespaces=dict(type="list", elements="str", default=[]),
    match_labels=dict(type="dict", default={}),
    delete_after=dict(type="int"),
    force_after=dict(type="int"),
)
POLICY_KEYS = tuple(POLICY_SPEC)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _seconds_problem(where, key, value):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return "%s: %s must be a whole number of seconds, 0 or more, or left out (never); got %r" % (where, key, value)
    return None


def policy_problems(policies, option="policies"):
    """What is wrong with the rules (each problem names the rule, the key and the value), before any drain."""
    if policies is None:
        return []
    if not isinstance(policies, list):
        return ["%s must be a list of rules (name, namespaces, match_labels, delete_after, force_after); got %r"
                % (option, type(policies).__name__)]
    problems, names = [], set()
    for index, rule in enumerate(policies):
        where = "%s[%d]" % (option, index)
        if not isinstance(rule, dict):
            problems.append("%s must be a mapping; got %r" % (where, rule))
            continue
        unknown = sorted(set(rule) - set(POLICY_KEYS))
        if unknown:
            problems.append("%s: unknown key(s) %s; a rule takes %s" % (where, ", ".join(unknown), ", ".join(POLICY_KEYS)))
        name = rule.get("name")
        if not isinstance(name, str) or not name.strip():
            problems.append("%s: name must be a non-empty string (the report names forced pods by it)" % where)
        elif name in names:
            problems.append("%s: name %r is used by an earlier rule; names must differ" % (where, name))
        else:
            names.add(name)
            where = "%s (%s)" % (where, name)
        namespaces = rule.get("namespaces") or []
        if not isinstance(namespaces, list) or not all(isinstance(n, str) and _DNS_LABEL.match(n) for n in namespaces):
            problems.append("%s: namespaces must be a list of namespace names; got %r" % (where, namespaces))
        labels = rule.get("match_labels") or {}
        if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            problems.append("%s: match_labels must map label keys to string values; got %r" % (where, labels))
        for key in ("delete_after", "force_after"):
            problem = _seconds_problem(where, key, rule.get(key))
            if problem:
                problems.append(problem)
        delete_after, force_after = rule.get("delete_after"), rule.get("force_after")
        if (isinstance(delete_after, int) and isinstance(force_after, int) and not isinstance(force_after, bool)
                and force_after < delete_after):
            problems.append("%s: force_after (%d) comes before delete_after (%d); a pod is deleted before it is "
                            "forced" % (where, force_after, delete_after))
    return problems


def policy_for(pod, policies):
    """The first rule that matches the pod (its namespace among `namespaces`, when given, and every one of
    `match_labels`), or None."""
    meta = pod.get("metadata") or {}
    namespace, labels = meta.get("namespace") or "default", meta.get("labels") or {}
    for rule in policies or []:
        if rule.get("namespaces") and namespace not in rule["namespaces"]:
            continue
        if selector_matches({"matchLabels": rule.get("match_labels") or {}}, labels):
            return rule
    return None


def step_for(pod, policies, elapsed):
    """(step, rule name or None) for a pod that must go, `elapsed` seconds after the drain began."""
    rule = policy_for(pod, policies)
    if rule is None:
        return EVICT, None
    if rule.get("force_after") is not None and elapsed >= rule["force_after"]:
        return FORCE, rule["name"]
    if rule.get("delete_after") is not None and elapsed >= rule["delete_after"]:
        return DELETE, rule["name"]
    return EVICT, rule["name"]


def longest_ladder(policies):
    """The latest delete_after or force_after of the rules (0 without any): a drain's wait_timeout shorter than
    this ends the drain before the ladder's last step."""
    return max([r.get(k) or 0 for r in policies or [] for k in ("delete_after", "force_after")] or [0])
