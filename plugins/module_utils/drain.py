# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The pure core of node_drain: which pods of a node are evicted, skipped or refused and why, which
PodDisruptionBudget blocks a pod, the backoff between eviction rounds, and the reason code of a pass.

Everything here works on plain dicts as the API server returns them (no client objects, no I/O, no
clock), so it is unit-tested exhaustively; plugins/module_utils/drain_api.py does the calls.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

# What happens to a pod of the node.
EVICT = "evict"            # evict it (or delete it when eviction is disabled)
SKIP = "skip"              # leave it in place; not an error
REFUSE = "refuse"          # it would have to go, but the options do not allow it: the drain fails
TERMINATING = "terminating"  # already being deleted: wait for it to go, never a blocker

# Why a pod is skipped or refused (stable words, returned to the user).
CAUSE_MIRROR = "mirror_pod"
CAUSE_DAEMONSET = "daemonset"
CAUSE_UNMANAGED = "unmanaged"
CAUSE_LOCAL_STORAGE = "local_storage"

# Why an eviction did not go through.
BLOCK_PDB = "pdb"                      # 429: a PodDisruptionBudget allows no disruption now
BLOCK_MULTIPLE_PDBS = "multiple_pdbs"  # the eviction API refuses pods covered by more than one PDB
BLOCK_API_ERROR = "api_error"          # anything else the API answered

# Reason codes of a pass, for `until:` loops (never parse the message).
REASON_DRAINED = "drained"
REASON_EVICTING = "evicting"
REASON_PDB_BLOCKED = "pdb_blocked"
REASON_EVICTION_FAILED = "eviction_failed"
REASON_PODS_REFUSED = "pods_refused"
REASON_TIMEOUT = "timeout"
REASON_FORCED = "forced"
REASON_CORDONED = "cordoned"
REASON_UNCORDONED = "uncordoned"
REASON_NODE_NOT_FOUND = "node_not_found"
REASON_INVALID_SELECTOR = "invalid_selector"
REASON_API_ERROR = "api_error"

ON_TIMEOUT_FAIL = "fail"
ON_TIMEOUT_FORCE = "force"
ON_TIMEOUT_CONTINUE = "continue"

# How a node is drained: the options node_drain and upgrade_step's `drain` share.
DRAIN_ARG_SPEC = dict(
    ignore_daemonsets=dict(type="bool", default=True),
    delete_emptydir_data=dict(type="bool", default=False),
    force=dict(type="bool", default=False),
    terminate_grace_period=dict(type="int"),
    eviction_concurrency=dict(type="int", default=10),
    wait_timeout=dict(type="int", default=600),
    on_timeout=dict(type="str", choices=[ON_TIMEOUT_FAIL, ON_TIMEOUT_FORCE, ON_TIMEOUT_CONTINUE], default=ON_TIMEOUT_FAIL),
    not_before=dict(type="str"),
    # The drain ladder (drain_policy.py): rules by namespace and labels, each with when its pods are deleted without
    # eviction and when they are forced. Options of their own, as a list of dictionaries (drain_policy.POLICY_SPEC).
    policies=dict(type="list", elements="dict", default=[]),
)

# Phases in which the eviction API ignores PDBs (pods that do not count as healthy anyway).
_PHASES_IGNORING_PDB = ("Pending", "Succeeded", "Failed")
_FINISHED_PHASES = ("Succeeded", "Failed")


@dataclass
class DrainOptions:
    ignore_daemonsets: bool = True
    delete_emptydir_data: bool = False
    force: bool = False


@dataclass
class PodDecision:
    namespace: str
    name: str
    action: str
    causes: List[str] = field(default_factory=list)
    message: str = ""

    @property
    def key(self):
        return (self.namespace, self.name)


def pod_key(pod):
    meta = pod.get("metadata") or {}
    return (meta.get("namespace") or "default", meta.get("name") or "")


def controller_of(pod):
    """The ownerReference marked controller, or None."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def is_mirror_pod(pod):
    return MIRROR_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {})


def is_terminating(pod):
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def pod_phase(pod):
    return (pod.get("status") or {}).get("phase") or ""


def has_emptydir(pod):
    return any("emptyDir" in (volume or {}) for volume in (pod.get("spec") or {}).get("volumes") or [])


_REFUSAL_HINTS = {
    CAUSE_DAEMONSET: "managed by a DaemonSet (set ignore_daemonsets=true to leave it in place)",
    CAUSE_UNMANAGED: "has no controller, so nothing recreates it (set force=true to delete it anyway)",
    CAUSE_LOCAL_STORAGE: "uses emptyDir data that is lost on eviction (set delete_emptydir_data=true to allow it)",
}


def classify_pod(pod, options):
    """Decide what a drain does with one pod of the node, the way `kubectl drain` does."""
    namespace, name = pod_key(pod)
    if is_mirror_pod(pod):
        # A static pod's mirror: the API cannot delete it for good, the kubelet would recreate it.
        return PodDecision(namespace, name, SKIP, [CAUSE_MIRROR], "mirror pod of a static pod")
    if is_terminating(pod):
        return PodDecision(namespace, name, TERMINATING, [], "already terminating")
    controller = controller_of(pod)
    if controller and controller.get("kind") == "DaemonSet":
        # Checked before emptyDir: a DaemonSet pod with an emptyDir is still only a DaemonSet pod.
        if options.ignore_daemonsets:
            return PodDecision(namespace, name, SKIP, [CAUSE_DAEMONSET], "managed by DaemonSet %s" % controller.get("name"))
        return PodDecision(namespace, name, REFUSE, [CAUSE_DAEMONSET], _REFUSAL_HINTS[CAUSE_DAEMONSET])
    if pod_phase(pod) in _FINISHED_PHASES:
        # Finished pods hold no data worth keeping and no PDB counts them.
        return PodDecision(namespace, name, EVICT, [], "finished (%s)" % pod_phase(pod))
    causes = []
    if controller is None and not options.force:
        causes.append(CAUSE_UNMANAGED)
    if has_emptydir(pod) and not options.delete_emptydir_data:
        causes.append(CAUSE_LOCAL_STORAGE)
    if causes:
        return PodDecision(namespace, name, REFUSE, causes, "; ".join(_REFUSAL_HINTS[c] for c in causes))
    return PodDecision(namespace, name, EVICT)


def pods_left_after_drain(pods):
    """The pods that show a node was not drained, sorted by namespace and name: every pod bound to it but the
    ones a drain leaves in place (DaemonSet pods, mirror pods of static pods) and the finished ones (Succeeded
    or Failed: nothing runs there). A pod being deleted still counts: it runs until it is gone."""
    left = []
    for pod in pods:
        controller = controller_of(pod) or {}
        if is_mirror_pod(pod) or controller.get("kind") == "DaemonSet" or pod_phase(pod) in _FINISHED_PHASES:
            continue
        left.append(pod)
    return sorted(left, key=pod_key)


def classify_pods(pods, options):
    """Decisions for every pod, sorted by namespace and name so results are stable."""
    return sorted((classify_pod(pod, options) for pod in pods), key=lambda d: d.key)


# ---------------------------------------------------------------------------------------------------
# Label selectors: the string form (pod_selectors) is checked here so a malformed one fails before
# anything changes; the structured form (a PDB's spec.selector) is matched against pod labels.

_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)*"
_KEY_RE = re.compile(r"^(?:%s/)?%s$" % (_PREFIX, _NAME))
_VALUE_RE = re.compile(r"^(?:%s)?$" % _NAME)
_SET_RE = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_CMP_RE = re.compile(r"^(?P<key>[^=!<>\s]+)\s*(?P<op>==|!=|=|<|>)\s*(?P<value>\S*)$")
_EXISTS_RE = re.compile(r"^(?P<neg>!)?\s*(?P<key>[^=!<>\s()]+)$")


_SUBDOMAIN_RE = re.compile(r"^%s$" % _PREFIX)


def is_dns_subdomain(text):
    """Whether text can prefix a label or annotation key (example.com)."""
    return isinstance(text, str) and 0 < len(text) <= 253 and bool(_SUBDOMAIN_RE.match(text))


class SelectorError(ValueError):
    """A label selector string that the API server would reject."""


def _split_requirements(selector):
    """Split at commas that are not inside parentheses."""
    parts, depth, current = [], 0, []
    for char in selector:
        if char == "(":
            depth += 1
            if depth > 1:
                raise SelectorError("nested parentheses")
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError("unbalanced ')'")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise SelectorError("unbalanced '('")
    parts.append("".join(current))
    return parts


def _check_key(key, selector):
    if len(key) > 316 or not _KEY_RE.match(key) or len(key.split("/")[-1]) > 63:
        raise SelectorError("invalid label key %r in selector %r" % (key, selector))


def _check_value(value, selector):
    if not _VALUE_RE.match(value):
        raise SelectorError("invalid label value %r in selector %r" % (value, selector))


def validate_label_selector(selector):
    """Raise SelectorError unless `selector` is a valid label selector string (set-based grammar)."""
    if not isinstance(selector, str) or not selector.strip():
        raise SelectorError("empty label selector")
    for raw in _split_requirements(selector):
        requirement = raw.strip()
        if not requirement:
            raise SelectorError("empty requirement in selector %r" % selector)
        match = _SET_RE.match(requirement)
        if match:
            _check_key(match.group("key"), selector)
            values = [v.strip() for v in match.group("values").split(",")]
            if values == [""]:
                raise SelectorError("empty value set in %r" % requirement)
            for value in values:
                _check_value(value, selector)
            continue
        match = _CMP_RE.match(requirement)
        if match:
            _check_key(match.group("key"), selector)
            value = match.group("value")
            if match.group("op") in ("<", ">"):
                if not re.match(r"^-?[0-9]+$", value):
                    raise SelectorError("%r needs an integer value in selector %r" % (requirement, selector))
            else:
                _check_value(value, selector)
            continue
        match = _EXISTS_RE.match(requirement)
        if match:
            _check_key(match.group("key"), selector)
            continue
        raise SelectorError("cannot parse requirement %r in selector %r" % (requirement, selector))


def join_selectors(selectors):
    """Validate each selector string and join them (every requirement must hold)."""
    selectors = list(selectors or [])
    for selector in selectors:
        validate_label_selector(selector)
    return ",".join(s.strip() for s in selectors) or None


def selector_matches(selector, labels):
    """Whether a structured LabelSelector (matchLabels, matchExpressions) selects `labels`.
    policy/v1 semantics: a null selector selects nothing, an empty one selects everything."""
    if selector is None:
        return False
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        if operator == "In":
            if key not in labels or labels[key] not in values:
                return False
        elif operator == "NotIn":
            if key in labels and labels[key] in values:
                return False
        elif operator == "Exists":
            if key not in labels:
                return False
        elif operator == "DoesNotExist":
            if key in labels:
                return False
        else:
            return False  # an operator we do not know cannot be shown to match
    return True


# ---------------------------------------------------------------------------------------------------
# PodDisruptionBudgets


def pdb_key(pdb):
    meta = pdb.get("metadata") or {}
    return (meta.get("namespace") or "default", meta.get("name") or "")


def disruptions_allowed(pdb):
    return int((pdb.get("status") or {}).get("disruptionsAllowed") or 0)


def pdbs_for_pod(pod, pdbs):
    """The PDBs of the pod's namespace whose selector selects it, by name."""
    namespace = pod_key(pod)[0]
    labels = (pod.get("metadata") or {}).get("labels") or {}
    found = [pdb for pdb in pdbs or []
             if pdb_key(pdb)[0] == namespace and selector_matches((pdb.get("spec") or {}).get("selector"), labels)]
    return sorted(found, key=pdb_key)


_PDB_IN_MESSAGE = re.compile(r"disruption budget ([a-z0-9]([-a-z0-9.]*[a-z0-9])?)")


def pdb_named_in(messages):
    """The PDB name an eviction refusal names in its causes ("The disruption budget web needs ...")."""
    for message in messages or []:
        match = _PDB_IN_MESSAGE.search(message or "")
        if match:
            return match.group(1)
    return None


def blocker(pod, pdbs, message, cause_messages=None, status=None):
    """Describe why the eviction of `pod` was refused: the PDB that blocks it and its budget.

    The PDB comes from the selectors of the PDBs we listed; when that is ambiguous or the list was not
    readable, from the name the API put in the refusal's causes."""
    namespace, name = pod_key(pod)
    entry = dict(pod=name, namespace=namespace, pdb=None, disruptions_allowed=None, message=message, cause=BLOCK_API_ERROR)
    matching = pdbs_for_pod(pod, pdbs) if pdbs is not None else []
    named = pdb_named_in(cause_messages)
    if len(matching) > 1 and not named:
        entry.update(cause=BLOCK_MULTIPLE_PDBS, pdb=", ".join(pdb_key(p)[1] for p in matching),
                     disruptions_allowed=min(disruptions_allowed(p) for p in matching))
        return entry
    if named:
        chosen = [p for p in matching if pdb_key(p)[1] == named]
    else:
        chosen = matching
    if (status == 429 and chosen) or named:
        entry["cause"] = BLOCK_PDB
    if chosen:
        entry["pdb"] = pdb_key(chosen[0])[1]
        entry["disruptions_allowed"] = disruptions_allowed(chosen[0])
    elif named:
        entry["pdb"] = named
    return entry


def predict_evictions(pods, pdbs):
    """Which of `pods` (all to be evicted) the eviction API would accept right now, and which a PDB
    would refuse, spending each PDB's disruptionsAllowed in order. Returns (accepted, blocked)."""
    budgets = {pdb_key(p): disruptions_allowed(p) for p in pdbs or []}
    accepted, blocked = [], []
    for pod in pods:
        namespace, name = pod_key(pod)
        matching = pdbs_for_pod(pod, pdbs)
        if not matching or pod_phase(pod) in _PHASES_IGNORING_PDB:
            accepted.append(pod)
            continue
        if len(matching) > 1:
            names = ", ".join(pdb_key(p)[1] for p in matching)
            blocked.append(dict(pod=name, namespace=namespace, pdb=names,
                                disruptions_allowed=min(budgets[pdb_key(p)] for p in matching),
                                cause=BLOCK_MULTIPLE_PDBS,
                                message="would be refused: the pod is covered by more than one PodDisruptionBudget (%s)" % names))
            continue
        key = pdb_key(matching[0])
        if budgets[key] > 0:
            budgets[key] -= 1
            accepted.append(pod)
        else:
            blocked.append(dict(pod=name, namespace=namespace, pdb=key[1], disruptions_allowed=disruptions_allowed(matching[0]),
                                cause=BLOCK_PDB,
                                message="would be refused: PodDisruptionBudget %s/%s allows %d more disruption(s) now"
                                % (key[0], key[1], disruptions_allowed(matching[0]))))
    return accepted, blocked


def is_healthy(pod):
    """Running and Ready: the pods a PDB counts."""
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


HELD_BACK_MESSAGE = "eviction not sent this round: the pod's disruption budget allows no more disruptions now"


def plan_round(pods, pdbs):
    """Which of `pods` to send an eviction for in this round, and which to hold back.

    Sending all of them every round would cost one refused request per protected pod per round (100
    requests a round for 110 pods behind a PDB allowing 10). So pods a PDB would refuse now, by its
    current disruptionsAllowed, are held back, except one probe per such PDB: the API's own answer is
    then what gets reported, and a status that lags behind the disruption controller costs no round.
    Pods that are not healthy are always sent (the API may let them go whatever the budget says).
    Returns (to_send, held_back), both lists of pods sorted by namespace and name."""
    if pdbs is None:
        return sorted(pods, key=pod_key), []
    accepted, predicted_blocked = predict_evictions([p for p in pods if is_healthy(p)], pdbs)
    by_key = {pod_key(p): p for p in pods}
    to_send = [p for p in pods if not is_healthy(p)] + accepted
    held_back, probed = [], set()
    for entry in predicted_blocked:
        pod = by_key[(entry["namespace"], entry["pod"])]
        budget = (entry["namespace"], entry["pdb"])
        if budget in probed:
            held_back.append(pod)
        else:
            probed.add(budget)
            to_send.append(pod)
    return sorted(to_send, key=pod_key), sorted(held_back, key=pod_key)


# ---------------------------------------------------------------------------------------------------
# Timing


def backoff_delay(attempt, initial=0.5, cap=5.0, factor=2.0, retry_after=None):
    """Seconds to wait before eviction round `attempt` + 1 (attempt counts rounds without progress).
    Grows from `initial` by `factor` up to `cap`; a server's Retry-After raises it, but never past cap."""
    if attempt < 0:
        attempt = 0
    delay = min(cap, initial * (factor ** min(attempt, 32)))
    if retry_after:
        delay = max(delay, min(float(retry_after), cap))
    return max(0.0, delay)


def clip_to_deadline(delay, now, deadline):
    """Never sleep past the deadline."""
    return max(0.0, min(delay, deadline - now))


# ---------------------------------------------------------------------------------------------------
# Results


def pod_ref(namespace, name, **extra):
    entry = dict(pod=name, namespace=namespace)
    entry.update(extra)
    return entry


def pass_reason(refused, blocked, pending):
    """The reason code of a drain pass from what is left on the node."""
    if refused:
        return REASON_PODS_REFUSED
    if blocked:
        if any(b.get("cause") in (BLOCK_PDB, BLOCK_MULTIPLE_PDBS) for b in blocked):
            return REASON_PDB_BLOCKED
        return REASON_EVICTION_FAILED
    if pending:
        return REASON_EVICTING
    return REASON_DRAINED


def describe_remaining(blocked, pending):
    """One line per pod still on the node, naming the PDB and its budget where one blocks."""
    lines = []
    for entry in blocked:
        where = "%s/%s" % (entry["namespace"], entry["pod"])
        if entry.get("pdb"):
            lines.append("%s blocked by PodDisruptionBudget %s/%s (disruptionsAllowed=%s): %s"
                         % (where, entry["namespace"], entry["pdb"],
                            "?" if entry.get("disruptions_allowed") is None else entry["disruptions_allowed"],
                            entry.get("message") or ""))
        else:
            lines.append("%s not evicted: %s" % (where, entry.get("message") or entry.get("cause")))
    for entry in pending:
        lines.append("%s/%s %s" % (entry["namespace"], entry["pod"], entry.get("status") or "pending"))
    return lines


def describe_refused(refused):
    return ["%s/%s %s" % (d.namespace, d.name, d.message) for d in refused]
