# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""node_drain's work: cordon, drain or uncordon one node as the module's options ask, on the pure core of drain.py
and the calls of drain_api.py. A node an upgrade is replacing is cordoned or drained only when the cluster agrees
with the upgrade's record of it (the cross-checks of crosschecks.py). The executor drains through
kube_access.KubeAccess.drain, on the same drain_api calls."""

from __future__ import annotations

import time
import traceback

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import crosschecks
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import drain as core
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import drain_api as api
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import drain_policy
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import validate as option_rules
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.kube import KubeAuthError, build_api_client

# kubernetes.core.k8s_drain's state names, and the ones of this module they mean.
K8S_DRAIN_STATES = {"cordon": "cordoned", "drain": "drained", "uncordon": "uncordoned"}

# The drain options upgrade_step shares (drain.py), with this module's own.
ARGUMENT_SPEC = dict(
    core.DRAIN_ARG_SPEC,
    name=dict(type="str", required=True, aliases=["node"]),
    state=dict(type="str", choices=["cordoned", "drained", "uncordoned"] + sorted(K8S_DRAIN_STATES), default="drained"),
    pod_selectors=dict(type="list", elements="str", aliases=["label_selectors"]),
    disable_eviction=dict(type="bool", default=False),
    wait=dict(type="bool", default=False),
    wait_sleep=dict(type="float", default=5),
    annotation_prefix=dict(option_rules.ANNOTATION_PREFIX_SPEC),
)

OPTION_RULES = dict(
    name=option_rules.object_name,
    terminate_grace_period=option_rules.optional_seconds,
    eviction_concurrency=lambda n, v: option_rules.integer(n, v, 1, option_rules.MAX_EVICTION_CONCURRENCY),
    wait_timeout=option_rules.seconds,
    wait_sleep=option_rules.positive_number,
    annotation_prefix=option_rules.annotation_prefix,
    policies=lambda n, v: "; ".join(drain_policy.policy_problems(v, n)) or None,
)


class DrainModule:
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.started = time.time()
        self.node_name = self.params["name"]
        self.result = dict(changed=False, node=self.node_name, reason=None, evicted=[], pending=[], blocked=[],
                           skipped_pods=[], forced=[])

    # -- helpers --------------------------------------------------------------------------------------

    def finish(self, **extra):
        self.result.update(extra)
        self.result["elapsed"] = round(time.time() - self.started, 3)
        self.module.exit_json(**self.result)

    def fail(self, msg, reason, **extra):
        self.result.update(extra)
        self.result["reason"] = reason
        self.result["elapsed"] = round(time.time() - self.started, 3)
        self.module.fail_json(msg=msg, **self.result)

    def validate(self):
        p = self.params
        problems = option_rules.check(p, OPTION_RULES)
        if problems:
            self.fail("; ".join(problems) + ". Nothing was changed", "invalid_argument")
        self.not_before = api.parse_timestamp(p["not_before"]) if p["not_before"] else None
        if p["not_before"] and self.not_before is None:
            self.fail("not_before must be an RFC 3339 UTC time such as 2026-11-30T10:00:00Z, got %r" % p["not_before"],
                      "invalid_argument")
        try:
            self.label_selector = core.join_selectors(p["pod_selectors"])
        except core.SelectorError as exc:
            self.fail("pod_selectors: %s" % exc, core.REASON_INVALID_SELECTOR)

    @property
    def annotation(self):
        return api.drain_annotation(self.params["annotation_prefix"])

    def read_node(self):
        node = api.get_node(self.client, self.node_name)
        if node is None:
            self.fail("node %s not found" % self.node_name, core.REASON_NODE_NOT_FOUND)
        return node

    def cross_check(self, node, step):
        """A node an upgrade is replacing is only cordoned or drained when the cluster agrees with the record
        (crosschecks.check_cordon / check_drain, the cluster's side); other nodes are drained as asked."""
        keys = crosschecks.AnnotationKeys(self.params["annotation_prefix"])
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        if not annotations.get(keys.heir) and annotations.get(keys.obsolete) != "true":
            return
        heir_name = annotations.get(keys.heir) or ""
        heir = api.get_node(self.client, heir_name) if crosschecks.valid_node_name(heir_name) else None
        check = crosschecks.check_cordon if step == "cordon" else crosschecks.check_drain
        problems = check(node, heir, keys=keys, now=time.time())
        if problems:
            self.fail("refusing to %s node %s; the cluster disagrees with the upgrade's record of it: %s"
                      % (step, self.node_name, "; ".join(p["message"] for p in problems)), "inconsistent",
                      problems=problems)

    def refuse_leaving(self, node):
        """A node past the upgrade's point of no return (its etcd member removed, or its deletion begun) cannot serve
        again: uncordoning it would schedule pods on a node about to go. Refused before anything changes."""
        keys = crosschecks.AnnotationKeys(self.params["annotation_prefix"])
        problem = crosschecks.leaving_for_good(node, keys)
        if problem:
            self.fail("refusing to uncordon node %s: %s. Nothing was changed; let the upgrade finish removing it "
                      "(rolling_upgrade, or csp_node state=absent then node_delete)" % (self.node_name, problem["message"]),
                      "inconsistent", problems=[problem])

    is_cordoned = staticmethod(api.is_cordoned)

    def set_diff(self, before, after):
        if self.module._diff:
            self.result["diff"] = dict(before=before, after=after)

    # -- states ---------------------------------------------------------------------------------------

    def cordon(self):
        node = self.read_node()
        cordoned = self.is_cordoned(node)
        if not cordoned:
            self.cross_check(node, "cordon")
        self.set_diff({"unschedulable": cordoned}, {"unschedulable": True})
        if not cordoned and not self.module.check_mode:
            api.patch_node(self.client, self.node_name, {"spec": {"unschedulable": True}})
        self.finish(changed=not cordoned, unschedulable=True, reason=core.REASON_CORDONED)

    def uncordon(self):
        node = self.read_node()
        cordoned = self.is_cordoned(node)
        if cordoned:
            self.refuse_leaving(node)
        self.set_diff({"unschedulable": cordoned}, {"unschedulable": False})
        if cordoned and not self.module.check_mode:
            api.uncordon(self.client, self.node_name, self.annotation)
        self.finish(changed=cordoned, unschedulable=False, reason=core.REASON_UNCORDONED)

    def settings(self, deadline, started=None):
        p = self.params
        return api.DrainSettings(
            options=core.DrainOptions(ignore_daemonsets=p["ignore_daemonsets"],
                                      delete_emptydir_data=p["delete_emptydir_data"], force=p["force"]),
            label_selector=self.label_selector,
            grace_period=p["terminate_grace_period"],
            use_eviction=not p["disable_eviction"],
            concurrency=p["eviction_concurrency"],
            wait=p["wait"],
            deadline=deadline,
            on_timeout=p["on_timeout"],
            max_delay=p["wait_sleep"],
            policies=p["policies"] or [],
            started=started,
        )

    def refuse(self, refused, cordoned_before):
        blocked = [core.pod_ref(d.namespace, d.name, pdb=None, disruptions_allowed=None, cause=d.causes[0],
                                message=d.message) for d in refused]
        state = "the node is still cordoned" if cordoned_before or self.result["changed"] else "nothing was changed"
        self.fail("cannot drain node %s (%s): %s" % (self.node_name, state, "; ".join(core.describe_refused(refused))),
                  core.REASON_PODS_REFUSED, blocked=blocked, unschedulable=cordoned_before or self.result["changed"])

    def drain(self):
        node = self.read_node()
        cordoned = self.is_cordoned(node)
        self.cross_check(node, "drain")
        recorded_start = api.recorded_drain_start(node, self.annotation)
        drain_start = recorded_start or self.started
        deadline = (self.started + self.params["wait_timeout"] if self.params["wait"]
                    else api.drain_deadline(drain_start, self.not_before, self.params["wait_timeout"]))
        settings = self.settings(deadline, api.ladder_start(drain_start, self.not_before))
        self.result.update(drain_started=api.format_timestamp(drain_start), deadline=api.format_timestamp(deadline))

        # The first list comes before any change: a bad selector or a refused pod changes nothing.
        try:
            first = api.survey(self.client, self.node_name, settings)
        except api.PodsRefused as exc:
            self.refuse(exc.refused, cordoned)
        except api.ApiCallError as exc:
            if exc.status == 400 and self.label_selector:
                self.fail("pod_selectors %r rejected by the API server: %s" % (self.label_selector, exc.message),
                          core.REASON_INVALID_SELECTOR)
            raise
        pods, decisions = first
        must_go = [d for d in decisions if d.action in (core.EVICT, core.TERMINATING)]
        self.set_diff({"unschedulable": cordoned, "pods": ["%s/%s" % d.key for d in must_go]},
                      {"unschedulable": True, "pods": []})

        if self.module.check_mode:
            self.predict(cordoned, recorded_start, pods, decisions)
            return

        if not cordoned or recorded_start is None:
            api.cordon_for_drain(self.client, self.node_name, self.annotation, drain_start)
            self.result["changed"] = True
        api.widen_connection_pool(self.client, settings.concurrency + 2)
        try:
            report = api.drain_node(self.client, self.node_name, settings, first_survey=first)
        except api.PodsRefused as exc:
            self.refuse(exc.refused, True)
        if report.evicted or report.forced:
            self.result["changed"] = True
        self.result.update(evicted=report.evicted, pending=report.pending, blocked=report.blocked,
                           skipped_pods=report.skipped, forced=report.forced, unschedulable=True,
                           drained=report.drained, reason=report.reason)
        if report.timed_out and self.params["on_timeout"] == core.ON_TIMEOUT_FAIL:
            self.fail(api.timeout_message(self.node_name, deadline, self.params["wait_timeout"], report),
                      core.REASON_TIMEOUT)
        if report.reason == core.REASON_EVICTION_FAILED and report.timed_out:
            self.fail("drain of node %s: forced deletion failed for: %s"
                      % (self.node_name, "; ".join(core.describe_remaining(report.blocked, []))),
                      core.REASON_EVICTION_FAILED)
        self.finish()

    def predict(self, cordoned, recorded_start, pods, decisions):
        to_evict = [pods[d.key] for d in decisions if d.action == core.EVICT]
        if self.params["disable_eviction"]:
            # A plain DELETE, as the real run sends: PodDisruptionBudgets do not apply.
            accepted, blocked = to_evict, []
        else:
            pdbs = api.list_pdbs(self.client, [d.namespace for d in decisions if d.action == core.EVICT]) if to_evict else []
            accepted, blocked = core.predict_evictions(to_evict, pdbs or [])
        pending = [core.pod_ref(d.namespace, d.name, status="terminating") for d in decisions if d.action == core.TERMINATING]
        evicted = [core.pod_ref(*core.pod_key(p)) for p in accepted]
        skipped = [core.pod_ref(d.namespace, d.name, reason=d.causes[0], message=d.message)
                   for d in decisions if d.action == core.SKIP]
        changed = not cordoned or recorded_start is None or bool(accepted)
        self.finish(changed=changed, unschedulable=True, evicted=evicted, pending=pending, blocked=blocked,
                    skipped_pods=skipped, drained=not (to_evict or pending),
                    reason=core.pass_reason([], blocked, pending + evicted))

    def run(self):
        self.validate()
        try:
            self.client = build_api_client(self.params)
        except KubeAuthError as exc:
            self.fail("cannot connect to Kubernetes: %s" % exc, core.REASON_API_ERROR)
        state = K8S_DRAIN_STATES.get(self.params["state"], self.params["state"])
        try:
            if state == "cordoned":
                self.cordon()
            elif state == "uncordoned":
                self.uncordon()
            else:
                self.drain()
        except api.ApiCallError as exc:
            self.fail("node %s (%s): %s %s failed: %s %s: %s" % (self.node_name, state, exc.method, exc.path,
                                                                 exc.status, exc.reason, exc.message),
                      core.REASON_API_ERROR, exception=traceback.format_exc())
        except Exception as exc:  # connection refused, TLS errors, timeouts: say so instead of a traceback
            self.fail("node %s (%s): %s: %s" % (self.node_name, state, type(exc).__name__, exc),
                      core.REASON_API_ERROR, exception=traceback.format_exc())


def run(module):
    """node_drain on the module base."""
    DrainModule(module).run()
