# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The Kubernetes calls of node_drain, and the drain loop that strings them together.

Calls go through kube.request (so every auth option of kube.py applies, and errors are kube.ApiCallError)
and send and return plain JSON dicts, which is what the pure core in drain.py takes. Evictions of many
pods run in a bounded thread pool. The loop takes its clock and sleep as arguments so tests can
drive it without waiting.
"""

from __future__ import annotations

import datetime
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import List, Optional

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import drain as core
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import drain_policy, kube

# Kubernetes is reached one way (kube.py): these names are kube's, kept here for the callers of drain_api.
REQUEST_TIMEOUT = kube.REQUEST_TIMEOUT
PAGE_SIZE = 500
ApiCallError = kube.ApiCallError
request = kube.request
get_node = kube.get_node
patch_node = kube.patch_node
_path = kube.path_of


def list_pods_on_node(api_client, node_name, label_selector=None):
    """Every pod bound to the node, all namespaces, following continue tokens."""
    query = {"fieldSelector": "spec.nodeName=%s" % node_name, "limit": PAGE_SIZE}
    if label_selector:
        query["labelSelector"] = label_selector
    items = []
    for _page in range(10000):  # bounded: 5 million pods is more than any node holds
        page = request(api_client, "GET", "/api/v1/pods", query)
        items.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items
        query["continue"] = token
    raise RuntimeError("pod list of node %s did not end" % node_name)


def list_pdbs(api_client, namespaces):
    """The PodDisruptionBudgets of the given namespaces, or None when they cannot be read (then the
    PDB named in eviction refusals is all we know)."""
    pdbs = []
    for namespace in sorted(set(namespaces)):
        try:
            page = request(api_client, "GET", _path("/apis/policy/v1/namespaces", namespace, "poddisruptionbudgets"))
        except ApiCallError as exc:
            if exc.status in (401, 403):
                return None
            raise
        pdbs.extend(page.get("items") or [])
    return pdbs


@dataclass
class RemovalOutcome:
    """What the API said to one eviction or deletion."""

    namespace: str
    name: str
    status: int
    accepted: bool = False       # 2xx: the pod is going
    gone: bool = False           # 404: it was already gone
    message: str = ""
    causes: List[str] = field(default_factory=list)
    retry_after: Optional[int] = None


def _outcome(namespace, name, call):
    try:
        call()
        return RemovalOutcome(namespace, name, 201, accepted=True)
    except ApiCallError as exc:
        if exc.status == 404:
            return RemovalOutcome(namespace, name, 404, gone=True, message=exc.message)
        return RemovalOutcome(namespace, name, exc.status, message=exc.message, causes=exc.causes,
                              retry_after=exc.retry_after)
    except Exception as exc:  # a connection error for one pod must not lose the others' outcomes
        return RemovalOutcome(namespace, name, 0, message="%s: %s" % (type(exc).__name__, exc))


def evict_pod(api_client, namespace, name, grace_period=None):
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
    if grace_period is not None:
        body["deleteOptions"] = {"gracePeriodSeconds": grace_period}
    return _outcome(namespace, name, lambda: request(
        api_client, "POST", _path("/api/v1/namespaces", namespace, "pods", name, "eviction"), body=body))


def delete_pod(api_client, namespace, name, grace_period=None):
    """A plain DELETE: PodDisruptionBudgets are not consulted."""
    body = {"apiVersion": "v1", "kind": "DeleteOptions"}
    if grace_period is not None:
        body["gracePeriodSeconds"] = grace_period
    return _outcome(namespace, name, lambda: request(
        api_client, "DELETE", _path("/api/v1/namespaces", namespace, "pods", name), body=body))


def run_bounded(function, items, max_workers):
    """function(item) for every item, at most max_workers at a time; results in the items' order."""
    items = list(items)
    if not items:
        return []
    workers = max(1, min(max_workers, len(items)))
    if workers == 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(function, items))


def widen_connection_pool(api_client, size):
    """Let `size` concurrent requests each keep a connection (urllib3 would otherwise discard and
    re-handshake the surplus)."""
    configuration = api_client.configuration
    if (configuration.connection_pool_maxsize or 0) < size:
        configuration.connection_pool_maxsize = size
        kube.renew_rest_client(api_client)


# ---------------------------------------------------------------------------------------------------
# Timestamps in the drain-started annotation


def format_timestamp(epoch):
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_timestamp(text):
    """Epoch seconds from an RFC 3339 UTC timestamp, or None when it is not one."""
    try:
        parsed = datetime.datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return None
    return parsed.replace(tzinfo=datetime.timezone.utc).timestamp()


# ---------------------------------------------------------------------------------------------------
# The drain's own record on the node (node_drain and the upgrade executor share these)


def drain_annotation(prefix):
    """The annotation that records when this collection's drain of a node began."""
    return "%s/drain-started" % prefix


def is_cordoned(node):
    return bool((node.get("spec") or {}).get("unschedulable"))


def recorded_drain_start(node, annotation):
    """When our drain of `node` began, as recorded on it; None unless it is cordoned and carries the record."""
    if not is_cordoned(node):
        return None
    return parse_timestamp(((node.get("metadata") or {}).get("annotations") or {}).get(annotation))


def drain_deadline(drain_start, not_before, wait_timeout):
    """A drain gets wait_timeout from when it began, or from not_before when that is later (a drain an
    earlier, stopped run began gets a full timeout again)."""
    return ladder_start(drain_start, not_before) + wait_timeout


def ladder_start(drain_start, not_before):
    """What a drain's wait_timeout and its ladder (drain_policy.py) count from: when it began, or not_before when
    that is later (a drain a stopped run began starts again in full)."""
    return max(drain_start, not_before or drain_start)


def cordon_for_drain(api_client, node_name, annotation, drain_start):
    patch_node(api_client, node_name, {"spec": {"unschedulable": True},
                                       "metadata": {"annotations": {annotation: format_timestamp(drain_start)}}})


def uncordon(api_client, node_name, annotation):
    patch_node(api_client, node_name, {"spec": {"unschedulable": None}, "metadata": {"annotations": {annotation: None}}})


def timeout_message(node_name, deadline, wait_timeout, report):
    return ("drain of node %s timed out (deadline %s, wait_timeout %ds); the node stays cordoned; %d pod(s) remain: %s"
            % (node_name, format_timestamp(deadline), wait_timeout, len(report.blocked) + len(report.pending),
               "; ".join(core.describe_remaining(report.blocked, report.pending))))


# ---------------------------------------------------------------------------------------------------
# The drain loop


@dataclass
class DrainSettings:
    options: core.DrainOptions
    label_selector: Optional[str] = None
    grace_period: Optional[int] = None
    use_eviction: bool = True
    concurrency: int = 10
    wait: bool = False
    deadline: float = 0.0
    on_timeout: str = core.ON_TIMEOUT_FAIL
    max_delay: float = 5.0
    policies: list = field(default_factory=list)   # the drain ladder (drain_policy.py)
    started: Optional[float] = None                 # when the drain began (the ladder counts from it)


@dataclass
class DrainReport:
    """What a drain call did and what is left; the module turns it into its result."""

    reason: str = core.REASON_DRAINED
    evicted: list = field(default_factory=list)
    pending: list = field(default_factory=list)
    blocked: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    forced: list = field(default_factory=list)
    rounds: int = 0
    timed_out: bool = False

    @property
    def drained(self):
        return not (self.pending or self.blocked)


class PodsRefused(Exception):
    def __init__(self, refused):
        self.refused = refused
        super().__init__("; ".join(core.describe_refused(refused)))


def survey(api_client, node_name, settings):
    """List and classify the node's pods: (pods by key, decisions). Raises PodsRefused when one of them
    may not be removed with these options."""
    pods = list_pods_on_node(api_client, node_name, settings.label_selector)
    decisions = core.classify_pods(pods, settings.options)
    refused = [d for d in decisions if d.action == core.REFUSE]
    if refused:
        raise PodsRefused(refused)
    return {core.pod_key(p): p for p in pods}, decisions


def _skipped(decisions):
    return [core.pod_ref(d.namespace, d.name, reason=d.causes[0], message=d.message)
            for d in decisions if d.action == core.SKIP]


def _ladder_steps(api_client, settings, pods, decisions, elapsed, report):
    """The drain ladder's later steps (drain_policy.py): pods whose rule says to delete them now go without the
    Eviction API (their grace period kept), and pods to force go with grace 0, also when they are terminating
    already. Each is named in report.forced with its step and rule. Returns the keys of the pods it took."""
    steps = {}
    for decision in decisions:
        if decision.action not in (core.EVICT, core.TERMINATING):
            continue
        step, rule = drain_policy.step_for(pods[decision.key], settings.policies, elapsed)
        if step == drain_policy.FORCE or (step == drain_policy.DELETE and decision.action == core.EVICT):
            steps[decision.key] = (step, rule)
    if not steps:
        return set()
    outcomes = run_bounded(lambda key: delete_pod(api_client, key[0], key[1],
                                                  0 if steps[key][0] == drain_policy.FORCE else settings.grace_period),
                           sorted(steps), settings.concurrency)
    taken, named = set(), {(f["namespace"], f["pod"], f.get("step")) for f in report.forced}
    for outcome in outcomes:
        key = (outcome.namespace, outcome.name)
        taken.add(key)
        step, rule = steps[key]
        if (outcome.accepted or outcome.gone) and key + (step,) not in named:
            report.forced.append(core.pod_ref(*key, step=step, policy=rule))
    return taken


def _eviction_round(api_client, settings, pods, to_evict, report):
    """Evict (or delete) the pods of to_evict, concurrently within the bound; with the Eviction API,
    pods a PDB would refuse now are held back (drain.plan_round). Returns the blocked entries, the
    largest Retry-After the server asked for, and how many pods went."""
    candidates = [pods[d.key] for d in to_evict]
    if settings.use_eviction:
        pdbs = list_pdbs(api_client, [d.namespace for d in to_evict])
        to_send, held_back = core.plan_round(candidates, pdbs)
    else:
        pdbs, to_send, held_back = [], candidates, []
    remove = evict_pod if settings.use_eviction else delete_pod
    outcomes = run_bounded(lambda pod: remove(api_client, core.pod_key(pod)[0], core.pod_key(pod)[1], settings.grace_period),
                           to_send, settings.concurrency)
    evicted_keys = {(e["namespace"], e["pod"]) for e in report.evicted}
    if pdbs and (held_back or any(not (o.accepted or o.gone) for o in outcomes)):
        # Read the budgets again: what is reported blocked shows the budgets after this round.
        pdbs = list_pdbs(api_client, [d.namespace for d in to_evict])
    blocked = [core.blocker(pod, pdbs, core.HELD_BACK_MESSAGE, [], 429) for pod in held_back]
    retry_after = None
    for outcome in outcomes:
        key = (outcome.namespace, outcome.name)
        if outcome.accepted and key not in evicted_keys:
            evicted_keys.add(key)
            report.evicted.append(core.pod_ref(*key, owner=_owner(pods[key])))
        elif not (outcome.accepted or outcome.gone):
            blocked.append(core.blocker(pods[key], pdbs, outcome.message, outcome.causes, outcome.status))
            if outcome.retry_after:
                retry_after = max(retry_after or 0, outcome.retry_after)
    blocked.sort(key=lambda b: (b["namespace"], b["pod"]))
    return blocked, retry_after, sum(1 for o in outcomes if o.accepted or o.gone)


def _owner(pod):
    """`Kind/name` of the pod's controller (a Deployment's pods: their ReplicaSet), or None: the report counts the
    evictions per owner, since a Deployment's pod evicted comes back under another name."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return "%s/%s" % (ref.get("kind"), ref.get("name"))
    return None


def _what_is_left(decisions, last_blocked):
    """(blocked, pending) from the latest list: a pod refused in the last round and not yet going is
    blocked; every other pod that must go is pending (terminating, or arrived after the round)."""
    waiting = {d.key: d for d in decisions if d.action == core.EVICT}
    blocked = [b for b in last_blocked if (b["namespace"], b["pod"]) in waiting]
    blocked_keys = {(b["namespace"], b["pod"]) for b in blocked}
    pending = [core.pod_ref(d.namespace, d.name, status="terminating" if d.action == core.TERMINATING else "not_evicted")
               for d in decisions if d.action in (core.EVICT, core.TERMINATING) and d.key not in blocked_keys]
    return blocked, pending


def drain_node(api_client, node_name, settings, now=time.time, sleep=time.sleep, first_survey=None):
    """Evict the node's pods in rounds. Without `wait`, one round, then a fresh list says what is left;
    with `wait`, rounds with backoff until nothing is left or the deadline passes. Past the deadline,
    on_timeout decides. Raises PodsRefused when a pod may not be removed (before any eviction if the
    first list shows it)."""
    report = DrainReport()
    last_blocked = []
    stalled_rounds = 0
    last_remaining = None
    survey_result = first_survey
    for _round in range(1000000):  # bounded; the deadline ends it long before
        pods, decisions = survey_result or survey(api_client, node_name, settings)
        survey_result = None
        report.skipped = _skipped(decisions)
        to_evict = [d for d in decisions if d.action == core.EVICT]
        remaining = len(to_evict) + sum(1 for d in decisions if d.action == core.TERMINATING)
        if remaining == 0:
            report.blocked, report.pending, report.reason = [], [], core.REASON_DRAINED
            return report
        out_of_time = now() >= settings.deadline
        if report.rounds and (out_of_time or not settings.wait):
            report.blocked, report.pending = _what_is_left(decisions, last_blocked)
            report.reason = core.pass_reason([], report.blocked, report.pending)
            if out_of_time:
                return _on_timeout(api_client, node_name, settings, report, pods)
            return report
        report.rounds += 1
        if settings.policies:
            laddered = _ladder_steps(api_client, settings, pods, decisions, now() - (settings.started or now()), report)
            to_evict = [d for d in to_evict if d.key not in laddered]
        if to_evict:
            last_blocked, retry_after, went = _eviction_round(api_client, settings, pods, to_evict, report)
        else:
            last_blocked, retry_after, went = [], None, 0
        if settings.wait:
            progressed = went > 0 or (last_remaining is not None and remaining < last_remaining)
            stalled_rounds = 0 if progressed else stalled_rounds + 1
            last_remaining = remaining
            delay = core.backoff_delay(stalled_rounds, cap=settings.max_delay, retry_after=retry_after)
            sleep(core.clip_to_deadline(delay, now(), settings.deadline))
    raise RuntimeError("drain loop of node %s did not end" % node_name)


def _on_timeout(api_client, node_name, settings, report, pods):
    report.timed_out = True
    if settings.on_timeout != core.ON_TIMEOUT_FORCE:
        report.reason = core.REASON_TIMEOUT
        return report
    # A plain DELETE of everything still there bypasses PodDisruptionBudgets. Pods already terminating
    # get grace 0 so they go now; the others get the grace period asked for (or their own).
    targets = [(e["namespace"], e["pod"], e.get("status") == "terminating") for e in report.blocked + report.pending]
    outcomes = run_bounded(lambda t: delete_pod(api_client, t[0], t[1], 0 if t[2] else settings.grace_period),
                           targets, settings.concurrency)
    failed = []
    for outcome in outcomes:
        key = (outcome.namespace, outcome.name)
        if outcome.accepted or outcome.gone:
            report.forced.append(core.pod_ref(*key))
        else:
            failed.append(core.blocker(pods.get(key) or {"metadata": {"namespace": key[0], "name": key[1]}},
                                       [], outcome.message, outcome.causes, outcome.status))
    # Gracefully deleted pods may still be terminating: list again and report them as pending.
    decisions = survey(api_client, node_name, settings)[1]
    report.skipped = _skipped(decisions)
    failed_keys = {(b["namespace"], b["pod"]) for b in failed}
    report.blocked = failed
    report.pending = [core.pod_ref(d.namespace, d.name, status="terminating" if d.action == core.TERMINATING else "not_evicted")
                      for d in decisions if d.action in (core.EVICT, core.TERMINATING) and d.key not in failed_keys]
    report.reason = core.REASON_EVICTION_FAILED if failed else core.REASON_FORCED
    return report
