# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The rules every option of the role and of the modules is held to, as pure functions.

Each rule is called as ``rule(name, value)`` with the option's name as the caller knows it (the module
option ``max_surge`` or the role variable ``rolling_upgrade_max_surge``) and returns None when the value
is acceptable, or one message that names the option, the rule, the value given and what to do. The role
(plugins/action/role_options.py) and every module use the same rules, so check mode and a real run, the
role and a module called on its own, refuse the same values.

Imports nothing outside the standard library.
"""

from __future__ import annotations

import difflib
import re

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import drain_policy

DEFAULT_PREFIX = "image-upgrade.kubenodes.io"
# The option annotation_prefix, as every module and action that reads the upgrade's annotations takes it (a copy each).
ANNOTATION_PREFIX_SPEC = dict(type="str", default=DEFAULT_PREFIX)

# Kubernetes supports clusters of up to 5000 nodes: no count of nodes or instances can usefully exceed it.
MAX_NODES = 5000
# Thirty days: far above any real wait, and low enough to catch a value typed in milliseconds or worse.
MAX_SECONDS = 30 * 24 * 3600
# node_drain issues at most this many evictions at once per node.
MAX_EVICTION_CONCURRENCY = 100
# A health gate's passing looks in a row, and the seconds between them: beyond these, a typo.
MAX_GATE_LOOKS = 100
MAX_LOOK_INTERVAL = 3600

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN_RE = re.compile(r"^%s(\.%s)*$" % (_DNS_LABEL, _DNS_LABEL))
_DNS_LABEL_RE = re.compile(r"^%s$" % _DNS_LABEL)
_LABEL_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_PERCENT_RE = re.compile(r"^\s*(\d+)\s*%\s*$")
_INTEGER_RE = re.compile(r"^\s*[-+]?\d+\s*$")


def _shown(value):
    return repr(value)


def _integer(value):
    """`value` as an int when it is a whole number (an int, or a string of digits as `-e x=2` gives),
    else None. Booleans are not numbers here."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INTEGER_RE.match(value):
        return int(value)
    return None


def _number(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


# ------------------------------------------------------------------ numbers


def integer(name, value, minimum, maximum, what="", hint=""):
    """A whole number from `minimum` to `maximum`; `what` says what it counts (", in seconds"), `hint`
    what to do besides picking a value in range."""
    number = _integer(value)
    if number is None or not minimum <= number <= maximum:
        return "%s must be a whole number from %d to %d%s, got %s%s" % (
            name, minimum, maximum, what, _shown(value), ("; " + hint) if hint else "")
    return None


def optional_integer(name, value, minimum, maximum, what="", hint=""):
    """As integer(), or null (the documented "none")."""
    return None if value is None else integer(name, value, minimum, maximum, what, hint)


def seconds(name, value, minimum=1, maximum=MAX_SECONDS, hint=""):
    """A duration in whole seconds; timeouts start at 1 (0 is not "no limit": it is refused)."""
    return integer(name, value, minimum, maximum, " (seconds)", hint)


def optional_seconds(name, value, minimum=0, maximum=MAX_SECONDS, hint=""):
    return None if value is None else seconds(name, value, minimum, maximum, hint)


def lease_seconds(name, value):
    """How long a Lease stays valid after a renewal: at least 10 seconds (a shorter one expires while a pass
    still runs, and another run could take it)."""
    return seconds(name, value, minimum=10)


def positive_number(name, value, maximum=MAX_SECONDS):
    """A number of seconds above 0 that may have a fraction (polling intervals)."""
    number = _number(value)
    if number is None or not 0 < number <= maximum:
        return "%s must be a number of seconds above 0 and at most %d, got %s" % (name, maximum, _shown(value))
    return None


def max_surge(name, value):
    """Replacements in flight per group: a whole number from 1 to MAX_NODES, or a percentage of the group
    from 1% to 100%."""
    rule = ("%s must be a whole number from 1 to %d or a percentage of the group from 1%% to 100%% (such as 25%%), "
            "got %s" % (name, MAX_NODES, _shown(value)))
    if isinstance(value, str):
        match = _PERCENT_RE.match(value)
        if match:
            return None if 1 <= int(match.group(1)) <= 100 else rule
    number = _integer(value)
    if number is None or not 1 <= number <= MAX_NODES:
        if number == 0:
            return rule + ": 0 would never replace a node (1 replaces one node at a time)"
        return rule
    return None


def max_unavailable(name, value):
    """Worker nodes a group may lack while they are replaced delete-first: a whole number from 0 to MAX_NODES,
    or a percentage of the group from 0% to 100%. 0 (the default) never takes a node away before its heir."""
    rule = ("%s must be a whole number from 0 to %d or a percentage of the group from 0%% to 100%% (such as 25%%), "
            "got %s; 0 keeps every replacement surge-first" % (name, MAX_NODES, _shown(value)))
    if isinstance(value, str):
        match = _PERCENT_RE.match(value)
        if match:
            return None if int(match.group(1)) <= 100 else rule
    number = _integer(value)
    if number is None or not 0 <= number <= MAX_NODES:
        return rule
    return None


def max_surge_total(name, value):
    """Cap on replacements in flight across groups: null (no cap) or 1 to MAX_NODES."""
    if value is None:
        return None
    problem = integer(name, value, 1, MAX_NODES, hint="null means no cap across groups")
    if problem and _integer(value) == 0:
        return problem + " (0 would never replace a node)"
    return problem


# ------------------------------------------------------------------ names


def dns_subdomain(name, value, example="example.com"):
    """A DNS subdomain (RFC 1123): lower-case letters, digits, '-' and '.', starting and ending with a
    letter or digit, at most 253 characters."""
    if not isinstance(value, str) or not 0 < len(value) <= 253 or not _DNS_SUBDOMAIN_RE.match(value):
        return ("%s must be a DNS subdomain (lower-case letters, digits, '-' and '.', starting and ending with a "
                "letter or digit, at most 253 characters) such as %s, got %s" % (name, example, _shown(value)))
    return None


def dns_label(name, value, example="kube-system"):
    """A DNS label (RFC 1123): as a subdomain without dots, at most 63 characters (namespaces)."""
    if not isinstance(value, str) or not 0 < len(value) <= 63 or not _DNS_LABEL_RE.match(value):
        return ("%s must be a DNS label (lower-case letters, digits and '-', starting and ending with a letter or "
                "digit, at most 63 characters) such as %s, got %s" % (name, example, _shown(value)))
    return None


def annotation_prefix(name, value):
    """The prefix of the annotations that hold the upgrade's state: a DNS subdomain, with no '/' and no
    default put in its place when it is empty (the same rule in the planner and in every module)."""
    problem = dns_subdomain(name, value, example=DEFAULT_PREFIX)
    if problem and value in ("", None):
        return problem + "; leave it unset for the default %s" % DEFAULT_PREFIX
    return problem


def object_name(name, value):
    """The name of a Kubernetes object named as a DNS subdomain (Node, Lease, ConfigMap, Deployment)."""
    return dns_subdomain(name, value, example="cluster-autoscaler")


def namespace(name, value):
    return dns_label(name, value)


def object_names(name, value):
    """A non-empty list of object names (node_delete's names)."""
    if not isinstance(value, list) or not value:
        return "%s must be a list of one or more names, got %s" % (name, _shown(value))
    for item in value:
        problem = object_name("%s item" % name, item)
        if problem:
            return problem
    return None


def label_key(name, value):
    """A label key: an optional DNS subdomain prefix and '/', then a name of at most 63 characters
    (letters, digits, '-', '_', '.', starting and ending with a letter or digit)."""
    rule = ("%s must be a label key such as team or example.com/team (an optional DNS subdomain and '/', then at "
            "most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit), got %s"
            % (name, _shown(value)))
    if not isinstance(value, str):
        return rule
    prefix, dummy, key = value.rpartition("/")
    if "/" in value and (not prefix or dns_subdomain(name, prefix)):
        return rule
    if not 0 < len(key) <= 63 or not _LABEL_NAME_RE.match(key):
        return rule
    return None


def label_keys(name, value):
    if not isinstance(value, list):
        return "%s must be a list of label keys, got %s" % (name, _shown(value))
    for item in value:
        problem = label_key("%s item" % name, item)
        if problem:
            return problem
    return None


def non_empty_string(name, value, what="a value"):
    if not isinstance(value, str) or not value.strip():
        return "%s must be %s, got %s" % (name, what, _shown(value))
    return None


def image(name, value):
    return non_empty_string(name, value, what=(
        "the image every node must run (GCP projects/<p>/global/images/<name> or .../images/family/<f>, an Azure "
        "image ID, an AWS ami-...)"))


def image_reference_problem(name, value, provider):
    """Why `value` is no image reference of `provider` (gcp, azure or aws), by the format alone (no cloud is
    asked): the option, the value, the part that is wrong and why. None when it fits or cannot be judged."""
    if not isinstance(value, str) or not value.strip() or provider not in ("gcp", "azure", "aws"):
        return None
    # Imported here: the provider modules import this one's callers, and load no cloud SDK when imported.
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import aws, azure, base, gce
    parse = {"gcp": gce.parse_image, "azure": azure.parse_image, "aws": aws.validate_image_reference}[provider]
    try:
        parse(value.strip())
    except base.InvalidReferenceError as exc:
        return "%s is not a %s image reference: %s" % (name, provider, exc)
    return None


def role_image_problems(params):
    """The role's image, checked against its provider's format before anything is read."""
    problem = image_reference_problem("rolling_upgrade_image", params.get("rolling_upgrade_image"),
                                      params.get("rolling_upgrade_provider"))
    return [problem] if problem else []


def non_empty_strings(name, value, what="strings"):
    """A list (possibly empty) of non-empty strings."""
    if not isinstance(value, list) or any(not isinstance(i, str) or not i.strip() for i in value):
        return "%s must be a list of %s, none of them empty, got %s" % (name, what, _shown(value))
    return None


def one_of(name, value, choices):
    if value not in choices:
        return "%s must be one of %s, got %s" % (name, ", ".join(str(c) for c in choices), _shown(value))
    return None


# ------------------------------------------------------------------ applying rules


def check(params, rules):
    """Messages of every option in `rules` ({option: rule(name, value)}) whose value in `params` breaks
    its rule, in the order of `rules`. An option absent from `params` is not checked."""
    problems = []
    for option, rule in rules.items():
        if option in params:
            problem = rule(option, params[option])
            if problem:
                problems.append(problem)
    return problems


def enforce(module, rules):
    """Fail an AnsibleModule, changing nothing, when one of its options breaks its rule."""
    problems = check(module.params, rules)
    if problems:
        module.fail_json(msg="; ".join(problems) + ". Nothing was changed", reason="invalid_argument",
                         invalid_options=problems)


# Rules of the options the modules share.
SURGE_RULES = {
    "max_surge": max_surge,
    "max_surge_total": max_surge_total,
    "max_unavailable": max_unavailable,
    "join_timeout": seconds,
    "heir_ready_seconds": lambda n, v: seconds(n, v, minimum=0),
    "lb_drain_seconds": lambda n, v: seconds(n, v, minimum=0, maximum=3600),
    "canary_soak_seconds": lambda n, v: seconds(n, v, minimum=0),
}
PREFIX_RULES = {"annotation_prefix": annotation_prefix}
PLANNER_RULES = dict(SURGE_RULES, annotation_prefix=annotation_prefix, image=image, exclude_labels=label_keys,
                     scaling_groups=lambda n, v: non_empty_strings(n, v, "scaling group IDs"))


# ------------------------------------------------------------------ unknown variables


def close_match(name, known):
    """The known name closest to `name`, or None when none is close (difflib)."""
    matches = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
    return matches[0] if matches else None


def unknown_variables(names, known, prefix):
    """Warnings for the variables in `names` that start with `prefix` but are not in `known`, each with the
    closest known name when there is one."""
    warnings = []
    for name in sorted(set(names)):
        if name.startswith(prefix) and name not in known:
            # Compared without the shared prefix, which would make every name look close.
            match = close_match(name[len(prefix):], [k[len(prefix):] for k in known if k.startswith(prefix)])
            match = prefix + match if match else None
            warnings.append("unknown variable %s is ignored%s" % (
                name, ("; did you mean %s?" % match) if match else " (no role variable has this name; see the role's README)"))
    return warnings


def _role_variable_match(name, role_variables, prefix="rolling_upgrade_"):
    """The role variable whose name without `prefix` is `name` or closest to it (max_unavailable is
    rolling_upgrade_max_unavailable): compared whole, the shared prefix makes no short name look close."""
    match = close_match(name, [known[len(prefix):] for known in role_variables if known.startswith(prefix)])
    return prefix + match if match else None


def unknown_playbook_variables(names, short_names, role_variables, ignored_prefixes=("ansible_", "awx_", "tower_", "_")):
    """Warnings for the extra variables in `names` that are neither a short playbook variable, nor a role
    variable (checked separately), nor Ansible's, AWX's or private; each with the closest short name."""
    warnings = []
    for name in sorted(set(names)):
        if name in short_names or name in role_variables or name.startswith(ignored_prefixes):
            continue
        if name.startswith("rolling_upgrade_"):
            continue
        match = close_match(name, short_names) or _role_variable_match(name, role_variables) or close_match(
            name, role_variables)
        warnings.append("extra variable %s is not a variable of this playbook (%s) and is ignored%s" % (
            name, ", ".join(sorted(short_names)), ("; did you mean %s?" % match) if match else ""))
    return warnings


# ------------------------------------------------------------------ the role's variables

def flag(name, value):
    """A yes/no variable: a boolean, or what Ansible reads as one (`-e x=false` gives a string)."""
    try:
        boolean(value, strict=True)
    except TypeError:
        return "%s must be true or false, got %s" % (name, _shown(value))
    return None


ROLE_RULES = {
    "rolling_upgrade_image": image,
    "rolling_upgrade_provider": lambda n, v: one_of(n, v, ("gcp", "azure", "aws")),
    "rolling_upgrade_scaling_groups": lambda n, v: non_empty_strings(n, v, "scaling group IDs"),
    "rolling_upgrade_annotation_prefix": annotation_prefix,
    "rolling_upgrade_max_surge": max_surge,
    "rolling_upgrade_max_surge_total": max_surge_total,
    "rolling_upgrade_max_unavailable": max_unavailable,
    "rolling_upgrade_join_timeout": seconds,
    "rolling_upgrade_heir_ready_seconds": lambda n, v: seconds(n, v, minimum=0),
    "rolling_upgrade_lb_drain_seconds": lambda n, v: seconds(n, v, minimum=0, maximum=3600),
    "rolling_upgrade_drain_timeout": lambda n, v: seconds(n, v, hint=(
        "to wait with no limit, set rolling_upgrade_drain_on_timeout to continue")),
    "rolling_upgrade_drain_on_timeout": lambda n, v: one_of(n, v, ("fail", "force", "continue")),
    "rolling_upgrade_drain_grace_period": optional_seconds,
    "rolling_upgrade_drain_concurrency": lambda n, v: integer(n, v, 1, MAX_EVICTION_CONCURRENCY),
    "rolling_upgrade_drain_policies": lambda n, v: "; ".join(drain_policy.policy_problems(v, n)) or None,
    "rolling_upgrade_pass_delay": lambda n, v: seconds(n, v, minimum=0, maximum=3600),
    "rolling_upgrade_timeout": seconds,
    "rolling_upgrade_etcd_endpoints": lambda n, v: non_empty_strings(n, v, "etcd client URLs"),
    "rolling_upgrade_etcd_delegate_to": lambda n, v: non_empty_string(n, v, "the host that runs the etcd steps"),
    "rolling_upgrade_copy_labels_exclude": label_keys,
    "rolling_upgrade_autoscaler_name": object_name,
    "rolling_upgrade_autoscaler_namespace": namespace,
    "rolling_upgrade_lock_name": object_name,
    "rolling_upgrade_lock_namespace": namespace,
    "rolling_upgrade_lock_duration": lease_seconds,
    "rolling_upgrade_lock_wait": lambda n, v: seconds(n, v, minimum=0),
    "rolling_upgrade_report_dir": lambda n, v: non_empty_string(n, v, "a directory on the controller"),
    "rolling_upgrade_gate_after": lambda n, v: one_of(n, v, ("none", "batch", "replacement")),
    "rolling_upgrade_soak_seconds": lambda n, v: seconds(n, v, minimum=0),
    "rolling_upgrade_canary": flag,   # read here too: with the canary on, a soak needs no gate
    "rolling_upgrade_gate_tasks": lambda n, v: None if isinstance(v, str) else (
        "%s must be the path of a tasks file, or empty for none, got %s" % (n, _shown(v))),
    "rolling_upgrade_gate_timeout": seconds,
    "rolling_upgrade_gate_namespaces": lambda n, v: non_empty_strings(n, v, "namespaces"),
    "rolling_upgrade_gate_looks": lambda n, v: integer(n, v, 1, MAX_GATE_LOOKS),
    "rolling_upgrade_gate_look_interval": lambda n, v: seconds(n, v, maximum=MAX_LOOK_INTERVAL),
}

GATE_LOOK_NAMES = ("rolling_upgrade_gate_looks", "rolling_upgrade_gate_look_interval", "rolling_upgrade_gate_timeout")


def gate_looks_fit(params, names=GATE_LOOK_NAMES):
    """A health gate's passing looks in a row must fit in its timeout, or it could never open: the problem, or None
    (also None while one of the three is missing or breaks its own rule)."""
    values = [_integer(params.get(name)) for name in names]
    if None in values:
        return None
    looks, interval, timeout = values
    needed = (looks - 1) * interval
    if needed < timeout:
        return None
    return ("%s is %s and %s is %s, so a gate needs %ss of passing looks, but %s is %s: it could never open; raise %s, "
            "or lower %s or %s" % (names[0], looks, names[1], interval, needed, names[2], timeout, names[2], names[0],
                                   names[1]))


def role_gate_problems(params):
    """The role's gate variables together (after each holds to its own rule): with a gate, its passing looks in a
    row must fit in its timeout, and there is no delete-first; without one, nothing is given that only a gate runs
    (the soak also times the canary: with the canary on, a soak without a gate holds each group's canary heir)."""
    gate_after = params.get("rolling_upgrade_gate_after", "none")
    if gate_after == "none":
        soak, tasks_file = params.get("rolling_upgrade_soak_seconds", 0), params.get("rolling_upgrade_gate_tasks", "")
        canary = boolean(params.get("rolling_upgrade_canary", True), strict=False)   # checked by flag() before
        if ((_integer(soak) or 0) > 0 and not canary) or tasks_file:
            return ['rolling_upgrade_soak_seconds is %s and rolling_upgrade_gate_tasks is "%s", but '
                    "rolling_upgrade_gate_after is none (and rolling_upgrade_canary is off), so nothing would run or "
                    "time them: set rolling_upgrade_gate_after to batch or replacement" % (soak, tasks_file)]
        return []
    unavailable = params.get("rolling_upgrade_max_unavailable", 0)
    if str(unavailable).replace("%", "").strip() not in ("0", ""):
        # Delete-first refills follow their donor's removal: a gate held after it would wait on a missing node.
        return ["rolling_upgrade_gate_after is %s, but rolling_upgrade_max_unavailable is %s: health gates do not work "
                "with delete-first replacements yet (a gate held after a worker's removal would wait on the missing "
                "node): set rolling_upgrade_gate_after to none, or rolling_upgrade_max_unavailable to 0"
                % (gate_after, unavailable)]
    return [p for p in [gate_looks_fit(params)] if p]


def gate_tasks_file_problem(value, looked_in):
    """rolling_upgrade_gate_tasks names a tasks file found nowhere `looked_in` says ("at <path>", or "in <the
    directories the role's include looks in, in its order>"): the message, found at the start rather than at the first gate, after nodes were
    replaced already."""
    return ("rolling_upgrade_gate_tasks names the tasks file %s, which does not exist (looked for it %s): give the path "
            "of your tasks file, absolute or relative to the playbook's directory (such as \"{{ playbook_dir }}"
            "/checks/smoke.yml\"), or leave it empty for none" % (_shown(value), looked_in))


def gate_tasks_content_problem(value, path, why):
    """rolling_upgrade_gate_tasks names a file that is no tasks file (`why`): found at the start, not when the first
    gate includes it, after nodes were replaced."""
    return ("rolling_upgrade_gate_tasks names %s (%s), which is not a tasks file: %s; make it a YAML list of tasks, as "
            "for include_tasks" % (_shown(value), path, why))


def report_dir_problem(value, blocker, is_directory, missing=False):
    """rolling_upgrade_report_dir cannot be written: `blocker` is the path itself when it is no directory, or the
    nearest existing directory at or above it (above it: the directory is `missing`), which this user may not write.
    Found at the start, not when the report is written at the end."""
    if not is_directory:
        why = "%s is not a directory" % blocker
    else:
        why = "this user may not write %s%s" % (blocker, ", where it would be created" if missing else "")
    return ("rolling_upgrade_report_dir is %s, but the report could not be written there at the end: %s; set it to a "
            "directory on the controller this user may write (it is created when missing)" % (_shown(value), why))


# Variables the role had and no longer has, and what a run given one says: a value silently ignored could make a
# user believe the run does what it no longer can.
REMOVED_ROLE_VARIABLES = {
    # The step engine is the only engine; a playbook that still says so is told, one that asks for another stops.
    "rolling_upgrade_engine": ("step", (
        "rolling_upgrade_engine is %s, but the task-chain engine was removed: every run uses the step engine "
        "(upgrade_step). Remove rolling_upgrade_engine; to compose the modules yourself, start from "
        "examples/site-playbook")),
}


def removed_variables(params):
    """(problems, warnings) for the removed role variables in `params` (their templated values): the value the
    role behaves as anyway is a warning, any other a problem."""
    problems, warnings = [], []
    for name, (kept, message) in REMOVED_ROLE_VARIABLES.items():
        if name in params:
            value = params[name]
            if value == kept:
                warnings.append("%s is no longer a role variable (%s is what every run does): remove it" % (name, kept))
            else:
                problems.append(message % _shown(value))
    return problems, warnings


# Rules of the etcd modules' own options (the connection options are checked by etcd.validate_connection).
# etcd allows far fewer members than this; the bound only catches nonsense.
MAX_ETCD_MEMBERS = 100
ETCD_RULES = {
    "timeout": seconds,
    "expected_member_count": lambda n, v: optional_integer(n, v, 1, MAX_ETCD_MEMBERS),
}
# etcd_member_info documents timeout 0 as "read the cluster once".
ETCD_INFO_RULES = dict(ETCD_RULES, timeout=lambda n, v: seconds(n, v, minimum=0))


def checker(rules):
    """The `validate=` hook of base.KubenodesModule: params -> the problems of the options in `rules`."""
    return lambda params: check(params, rules)
