# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The cross-checks before every destructive step: pure functions of plain data that the planner, the executor and
the modules acting on their own share. core.py re-exports the names the planner uses."""

from __future__ import annotations

import re

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.drain import pod_key, pods_left_after_drain
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import DELETING, RUNNING, STATE_PROBLEM
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.vocabulary import (
    CONTROL_PLANE_LABEL, DEFAULT_PREFIX, KNOWN_DONOR_PHASES, PHASE_DELETING, PHASE_DRAINED, PHASE_DRAINING,
    PHASE_ETCD_REMOVED, PHASE_HEIR, PHASE_PAIRED, PHASE_REPLACED, AnnotationKeys, NodeInfo, default_normalize,
    format_time, parse_time, same,
)

# ---------------------------------------------------------------------------------------------------
# Cross-checks before every destructive step (cordon, drain, etcd removal, instance deletion, Node
# deletion). Pure functions of plain data: the planner, the executor and the modules that act on their own
# (node_drain, node_delete, csp_node) call the same ones. Each returns a list of problems; an empty list
# means the cloud and the cluster agree and the step may be taken. A problem is a dict with `node`,
# `step`, `code` and a `message` that starts with "node <name>: " and says what is inconsistent.

STEP_CORDON = "cordon"
STEP_DRAIN = "drain"
STEP_ETCD_REMOVAL = "etcd-removal"
STEP_INSTANCE_DELETION = "instance-deletion"
STEP_NODE_DELETION = "node-deletion"
DESTRUCTIVE_STEPS = (STEP_CORDON, STEP_DRAIN, STEP_ETCD_REMOVAL, STEP_INSTANCE_DELETION, STEP_NODE_DELETION)

# The phase trail (annotation <prefix>/phase-history): every phase this collection recorded for the
# node's current replacement, in order, as `phase@time` entries separated by commas. A step after the drain
# is only taken when the trail shows the drain (and, for a control-plane node, the etcd removal).
TRAIL_OBSOLETE = "obsolete"
_TRAIL_RANK = {PHASE_HEIR: 0, PHASE_PAIRED: 0, TRAIL_OBSOLETE: 1, PHASE_DRAINING: 2, PHASE_DRAINED: 3,
               PHASE_ETCD_REMOVED: 4, PHASE_DELETING: 5, PHASE_REPLACED: 6}
CLOCK_SKEW = 600          # seconds a recorded time may lie in the future (clocks of the hosts that ran us)
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def valid_node_name(name):
    """A Node name must be a DNS subdomain (RFC 1123): lower case, digits, '-' and '.', at most 253."""
    return isinstance(name, str) and 0 < len(name) <= 253 and bool(_NODE_NAME.match(name))


def parse_trail(text):
    """([(phase, epoch)], error message or None) from a phase-history annotation."""
    entries = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        phase, _sep, stamp = part.partition("@")
        when = parse_time(stamp)
        if phase not in _TRAIL_RANK or when is None:
            return entries, "its phase-history annotation holds %r, which is not a phase@time entry this collection writes" % part[:80]
        entries.append((phase, when))
    if text and not entries:
        # This collection never writes a trail without an entry (it removes the annotation instead).
        return entries, "its phase-history annotation holds %r, which has no phase@time entry this collection writes" % text[:80]
    return entries, None


def trail_with(annotations, keys, phase, now, reset=False):
    """The phase-history value after recording `phase` at `now` (a fresh trail with reset=True)."""
    entries = [] if reset else parse_trail((annotations or {}).get(keys.phase_history))[0]
    entries.append((phase, now))
    return ",".join("%s@%s" % (p, format_time(t)) for p, t in entries)


def _as_info(node):
    if node is None or isinstance(node, NodeInfo):
        return node
    return NodeInfo.from_k8s(node)


class CloudView:
    """What the cloud says about instances, for the cross-checks: the listed instances by providerID.
    `complete` says whether every group the nodes could be in was listed, so that an instance missing from
    the view is really absent from the cloud."""

    def __init__(self, instances, normalize=default_normalize, complete=True):
        self.normalize = normalize
        self.complete = complete
        self.by_provider_id = {}
        for inst in instances or []:
            self.by_provider_id[normalize(inst.provider_id)] = inst

    def instance(self, info):
        return self.instance_by_id(info.provider_id) if info is not None else None

    def instance_by_id(self, provider_id):
        return self.by_provider_id.get(self.normalize(provider_id)) if provider_id else None


def _problem(name, step, code, message):
    return dict(node=name, step=step, code=code, message="node %s: %s" % (name, message))


def annotation_problems(node, keys, now=None, step=None):
    """What is wrong with one node's own upgrade annotations, whoever wrote them: a heir or donor
    annotation that is no node name or names the node itself, an obsolete mark this collection did not
    record, a phase trail that is unreadable, out of order, in the future or disagrees with the phase."""
    info = _as_info(node)
    ann, name = info.annotations, info.name
    problems = _partner_name_problems(info, keys, step)
    entries, error = parse_trail(ann.get(keys.phase_history))
    if error:
        problems.append(_problem(name, step, "garbage_trail", error))
    problems.extend(_trail_order_problems(info, keys, entries, now, step))
    problems.extend(_phase_record_problems(info, keys, entries, step))
    if ann.get(keys.obsolete) == "true" and TRAIL_OBSOLETE not in [p for p, _t in entries]:
        problems.append(_problem(name, step, "obsolete_not_recorded", "obsolete=true was not set by this collection "
                                 "(no obsolete entry in its phase-history annotation)"))
    return problems


def _partner_name_problems(info, keys, step):
    """A heir or donor annotation that is no node name, or names the node itself."""
    problems = []
    for key, what in ((keys.heir, "heir"), (keys.donor, "donor")):
        value = info.annotations.get(key)
        if value is None or value == "":
            continue
        if not valid_node_name(value):
            problems.append(_problem(info.name, step, "garbage_" + what, "%s annotation holds %r, which is not a node "
                                     "name" % (what, value[:80])))
        elif value == info.name:
            problems.append(_problem(info.name, step, "self_" + what, "%s annotation names the node itself" % what))
    return problems


def _trail_order_problems(info, keys, entries, now, step):
    """A phase trail out of order (by phase or by time), or with a time in the future."""
    problems = []
    ranks = [_TRAIL_RANK[p] for p, _t in entries]
    if any(b <= a for a, b in zip(ranks, ranks[1:])) or any(b < a for (_p, a), (_q, b) in zip(entries, entries[1:])):
        problems.append(_problem(info.name, step, "phases_out_of_order", "its phase-history %r is out of order"
                                 % info.annotations.get(keys.phase_history)[:200]))
    if now is not None and any(t > now + CLOCK_SKEW for _p, t in entries):
        problems.append(_problem(info.name, step, "phase_in_future", "its phase-history records a time in the future"))
    return problems


def _phase_record_problems(info, keys, entries, step):
    """A phase annotation that is no phase, or that the trail does not record."""
    raw_phase = info.annotations.get(keys.phase)
    phase = (raw_phase or "").strip()
    if (phase and phase not in KNOWN_DONOR_PHASES + (PHASE_HEIR, PHASE_REPLACED)) or (raw_phase and not phase):
        return [_problem(info.name, step, "unknown_phase", "phase annotation holds %r, which is no phase" % raw_phase[:80])]
    if entries and entries[-1][0] != TRAIL_OBSOLETE and entries[-1][0] != phase:
        return [_problem(info.name, step, "phase_not_recorded", "phase annotation says %s but its phase-history ends "
                         "with %s" % (phase or "nothing", entries[-1][0]))]
    if phase in (PHASE_DRAINED, PHASE_ETCD_REMOVED, PHASE_DELETING) and phase not in [p for p, _t in entries]:
        return [_problem(info.name, step, "phase_not_recorded", "phase annotation says %s, but this collection did not "
                         "record it (no %s entry in its phase-history annotation)" % (phase, phase))]
    return []


# What each step needs the node's phase to be, and which recorded phases must be on its trail.
def _phase_needs(step, control_plane, obsolete):
    if step in (STEP_CORDON, STEP_DRAIN):
        return ("", PHASE_PAIRED, PHASE_DRAINING), ()
    if step == STEP_ETCD_REMOVAL:
        return (PHASE_DRAINED,), (PHASE_DRAINED,)
    if control_plane:
        return (PHASE_ETCD_REMOVED, PHASE_DELETING), (PHASE_DRAINED, PHASE_ETCD_REMOVED)
    return (PHASE_DRAINED, PHASE_DELETING), (PHASE_DRAINED,)


def _leaving_checks(step, node, heir, target, cloud, keys, now):
    info, heir = _as_info(node), _as_info(heir)
    keys = keys or AnnotationKeys()
    name, ann = info.name, info.annotations
    problems = annotation_problems(info, keys, now, step)
    obsolete = ann.get(keys.obsolete) == "true"
    heir_name = ann.get(keys.heir) or ""
    if not obsolete and not heir_name:
        problems.append(_problem(name, step, "not_leaving", "it is neither a donor (no %s annotation) nor obsolete"
                                 % keys.heir))
        return problems
    problems.extend(_phase_problems(step, info, keys, obsolete))
    donor_inst = cloud.instance(info) if cloud is not None else None
    if cloud is not None:
        problems.extend(_donor_instance_problems(step, info, donor_inst, target, cloud.complete, obsolete))
    if obsolete or not valid_node_name(heir_name) or heir_name == name:
        return problems       # an obsolete node has no heir; a garbage name is named by annotation_problems
    pairing, go_on = _pairing_problems(step, info, heir, heir_name, keys)
    problems.extend(pairing)
    if not go_on:
        return problems
    heir_inst = cloud.instance(heir) if cloud is not None else None
    if cloud is not None:
        problems.extend(_heir_instance_problems(step, info, heir_inst, donor_inst, heir_name, heir, target))
    if heir_inst is None or donor_inst is None:
        problems.extend(_cached_group_problems(step, info, heir, heir_name, keys))
    if heir_inst is None:
        problems.extend(_cached_image_problems(step, info, heir, heir_name, keys, target))
    return problems


def _phase_problems(step, info, keys, obsolete):
    """The node's phase and recorded trail against what `step` needs, and the cordon a recorded drain implies."""
    name, ann, problems = info.name, info.annotations, []
    phase = (ann.get(keys.phase) or "").strip()
    allowed, needed = _phase_needs(step, info.control_plane, obsolete)
    trail = [p for p, _t in parse_trail(ann.get(keys.phase_history))[0]]
    if step == STEP_ETCD_REMOVAL and not info.control_plane:
        problems.append(_problem(name, step, "not_control_plane", "it is no control-plane node (no %s label)"
                                 % CONTROL_PLANE_LABEL))
    if phase not in allowed:
        problems.append(_problem(name, step, "phase_order", "its phase is %s; the %s comes only at phase %s"
                                 % (phase or "(none)", step, " or ".join(p or "(none)" for p in allowed))))
    missing = [p for p in needed if p not in trail]
    if missing:
        problems.append(_problem(name, step, "phase_not_recorded", "this collection did not record %s for it (its "
                                 "phase-history annotation has no %s entry)" % (", ".join(missing), missing[0])))
    if needed and not info.unschedulable:
        problems.append(_problem(name, step, "not_cordoned", "it is not cordoned, so it was not drained"))
    return problems


def _donor_instance_problems(step, info, donor_inst, target, complete, obsolete):
    """What the cloud says of the leaving node's own instance: listed (before the steps that need it), outdated."""
    name, problems = info.name, []
    if donor_inst is None and step in (STEP_CORDON, STEP_DRAIN, STEP_ETCD_REMOVAL) and complete:
        problems.append(_problem(name, step, "instance_missing", "the cloud does not list its instance %s"
                                 % (info.provider_id or "(no providerID)")))
    if donor_inst is None:
        return problems
    problems.extend(_state_problems(name, step, donor_inst, "its instance"))
    if obsolete:
        return problems
    if not donor_inst.image:
        problems.append(_problem(name, step, "image_unknown", "the cloud does not say which image its "
                                 "instance runs, so it cannot be shown to be outdated"))
    elif target and same(donor_inst.image, target):
        problems.append(_problem(name, step, "not_outdated", "the cloud says its instance already runs the "
                                 "target image %s; it is not outdated" % target))
    return problems


def _state_problems(name, step, inst, what):
    """A state the cloud reports for `inst` that no step may act on (AWS Standby, a GCE VM in repair): named, so the
    pair is left alone until the cloud says otherwise. Not while the cloud deletes it: that is the step's own end."""
    problem = (inst.extra or {}).get(STATE_PROBLEM)
    if not problem or inst.state == DELETING:
        return []
    return [_problem(name, step, "instance_state", "%s: %s" % (what, problem))]


def _pairing_problems(step, info, heir, heir_name, keys):
    """The pair as the cluster holds it: the heir exists, is the one named, names the donor back, is Ready and not
    obsolete. (problems, whether the heir can be checked further): not when it is missing or another node."""
    name = info.name
    if heir is None:
        return [_problem(name, step, "heir_missing", "heir annotation names %s, which does not exist" % heir_name)], False
    if heir.name != heir_name:
        return [_problem(name, step, "heir_mismatch", "heir annotation names %s, but %s was given as its heir"
                         % (heir_name, heir.name))], False
    problems = []
    back = heir.annotations.get(keys.donor) or ""
    if back != name:
        problems.append(_problem(name, step, "not_mutual", "heir annotation names %s, whose donor annotation names %s; "
                                 "the pair is not mutual" % (heir_name, back or "nothing")))
    if not heir.ready:
        problems.append(_problem(name, step, "heir_not_ready", "its heir %s is not Ready" % heir_name))
    if heir.annotations.get(keys.obsolete) == "true":
        problems.append(_problem(name, step, "heir_obsolete", "its heir %s is marked obsolete" % heir_name))
    return problems, True


def _heir_instance_problems(step, info, heir_inst, donor_inst, heir_name, heir, target):
    """What the cloud says of the heir's instance: listed, in the donor's group, on the target image, running (before
    the cordon and the drain)."""
    name = info.name
    if heir_inst is None:
        return [_problem(name, step, "heir_instance_missing", "the cloud does not list the instance of its heir %s (%s)"
                         % (heir_name, heir.provider_id or "no providerID"))]
    problems = _state_problems(name, step, heir_inst, "the instance of its heir %s" % heir_name)
    if donor_inst is not None and not same(donor_inst.group_id, heir_inst.group_id):
        problems.append(_problem(name, step, "heir_other_group", "its heir %s is in scaling group %s, not in its group "
                                 "%s" % (heir_name, heir_inst.group_id, donor_inst.group_id)))
    if not heir_inst.image:
        problems.append(_problem(name, step, "heir_image_unknown", "the cloud does not say which image its heir %s "
                                 "runs" % heir_name))
    elif target and not same(heir_inst.image, target):
        problems.append(_problem(name, step, "heir_not_on_target", "the cloud says its heir %s runs %s, not the target "
                                 "image %s" % (heir_name, heir_inst.image, target)))
    if step in (STEP_CORDON, STEP_DRAIN) and heir_inst.state != RUNNING:
        problems.append(_problem(name, step, "heir_not_running", "the cloud says the instance of its heir %s is %s, "
                                 "not running" % (heir_name, heir_inst.state)))
    return problems


def _cached_group_problems(step, info, heir, heir_name, keys):
    """What the cluster says of the pair's groups, where the cloud cannot be asked (a module used on its own)."""
    mine, theirs = info.annotations.get(keys.group), heir.annotations.get(keys.group)
    if mine and theirs and not same(mine, theirs):
        return [_problem(info.name, step, "heir_other_group", "its heir %s is in scaling group %s, not in its group %s"
                         % (heir_name, theirs, mine))]
    return []


def _cached_image_problems(step, info, heir, heir_name, keys, target):
    """What the cluster says of the heir's image, where the cloud does not list its instance."""
    heir_image, my_image = heir.annotations.get(keys.image), info.annotations.get(keys.image)
    if target and heir_image and not same(heir_image, target):
        return [_problem(info.name, step, "heir_not_on_target", "its heir %s runs %s, not the target image %s"
                         % (heir_name, heir_image, target))]
    if heir_image and my_image and same(heir_image, my_image):
        return [_problem(info.name, step, "heir_not_newer", "its heir %s runs the same image %s" % (heir_name, heir_image))]
    return []


def check_cordon(node, heir=None, target=None, cloud=None, keys=None, now=None):
    """Before cordoning `node` (a donor or an obsolete node). `heir` is the Node its heir annotation names
    (None when absent), `target` the upgrade's image, `cloud` a CloudView (None when the cloud cannot be
    asked: its checks are then made on the cached annotations). Returns the problems (empty: go ahead)."""
    return _leaving_checks(STEP_CORDON, node, heir, target, cloud, keys, now)


def check_drain(node, heir=None, target=None, cloud=None, keys=None, now=None):
    """Before draining `node` (evicting its pods); the same agreement as for the cordon."""
    return _leaving_checks(STEP_DRAIN, node, heir, target, cloud, keys, now)


def check_etcd_removal(node, heir=None, target=None, cloud=None, keys=None, now=None):
    """Before removing the etcd member of control-plane `node`: also its drain must be recorded."""
    return _leaving_checks(STEP_ETCD_REMOVAL, node, heir, target, cloud, keys, now)


def check_instance_deletion(node, heir=None, target=None, cloud=None, keys=None, now=None):
    """Before deleting the instance of `node`: its drain (and etcd removal) must be recorded, and the cloud
    must say the instance is outdated (an instance already gone is no problem)."""
    return _leaving_checks(STEP_INSTANCE_DELETION, node, heir, target, cloud, keys, now)


def check_node_deletion(node, heir=None, target=None, cloud=None, keys=None, now=None):
    """Before deleting the Node object of `node`; the same agreement as for its instance."""
    return _leaving_checks(STEP_NODE_DELETION, node, heir, target, cloud, keys, now)


def leaving_for_good(node, keys):
    """A problem when `node` is past the upgrade's point of no return (phase etcd-removed or deleting, as recorded on
    it): it cannot be given back (uncordoned) to serve again, only removed. None otherwise."""
    info = _as_info(node)
    phase = (info.annotations.get(keys.phase) or "").strip()
    if phase not in (PHASE_ETCD_REMOVED, PHASE_DELETING):
        return None
    what = "its etcd member was removed" if phase == PHASE_ETCD_REMOVED else "its deletion began"
    return _problem(info.name, "uncordon", "leaving", "its phase is %s: %s, so it cannot serve again" % (phase, what))


# Pods named in a refusal: a few, with the count of the rest.
PODS_SHOWN = 3


def pods_left_problems(name, pods, step=STEP_NODE_DELETION):
    """Before deleting the Node object of `name` (or its instance) as drained: `pods` are the pods bound to it
    (as the API lists them). Any pod a drain would not leave in place (drain.pods_left_after_drain) shows that the
    node still serves, whatever its annotations say. The executor deletes only donors its own drain emptied, so it
    does not list pods again; a module acting on its own (node_delete) does."""
    left = pods_left_after_drain(pods)
    if not left:
        return []
    shown = ["%s/%s" % pod_key(pod) for pod in left[:PODS_SHOWN]]
    more = " and %d more" % (len(left) - PODS_SHOWN) if len(left) > PODS_SHOWN else ""
    return [_problem(name, step, "pods_left", "%d pod(s) other than DaemonSet, mirror and finished pods still run on "
                     "it (%s%s), so it was not drained" % (len(left), ", ".join(shown), more))]


CHECKS = {STEP_CORDON: check_cordon, STEP_DRAIN: check_drain, STEP_ETCD_REMOVAL: check_etcd_removal,
          STEP_INSTANCE_DELETION: check_instance_deletion, STEP_NODE_DELETION: check_node_deletion}

# The executor's step names, and the checks each runs.
_EXECUTOR_STEPS = {"drain": ((STEP_CORDON, STEP_DRAIN), "drain"), "etcd_remove": ((STEP_ETCD_REMOVAL,), "etcd_remove"),
                   "delete_instance": ((STEP_INSTANCE_DELETION,), None), "delete_node": ((STEP_NODE_DELETION,), None)}


def check_step(step, item, facts, nodes=None, instances=None, now=None):
    """The executor's entry point: before `step` ("drain", "etcd_remove", "delete_instance", "delete_node")
    on plan entry `item` of `facts` (a plan_upgrade result). Returns None when the step may go ahead, else
    the problems' messages joined by "; ".

    Without `nodes`, it only checks that the plan holds that entry for that step (the planner ran the
    cross-checks when it planned it). With `nodes` ({name: Node dict} as fresh as the executor has them)
    the cluster side is checked again on them, and with `instances` ({group: [Instance]} or a list, as the
    cloud was read for this plan, or a CloudView that compares by the provider's providerID spelling and
    knows whether every group answered) the cloud side too."""
    checks, plan_key = _EXECUTOR_STEPS[step]
    plan = facts.get("plan") or {}
    name = item.get("name")
    if step == "delete_instance" and not name:
        return _nodeless_instance_problem(item, plan, nodes)
    if plan_key is not None and not _planned(plan, plan_key, name):
        return "node %s: the plan has no %s step for it" % (name, step)
    if nodes is None:
        return None
    node = nodes.get(name)
    if node is None:
        return None if step in ("delete_node", "delete_instance") else "node %s: it no longer exists" % name
    keys = AnnotationKeys(facts.get("annotation_prefix") or DEFAULT_PREFIX)
    heir = nodes.get(((node.get("metadata") or {}).get("annotations") or {}).get(keys.heir) or "")
    cloud = _cloud_view(instances)
    problems = []
    for check in checks:
        problems.extend(CHECKS[check](node, heir, facts.get("target_image"), cloud, keys, now))
    return "; ".join(p["message"] for p in problems) or None


def _planned(plan, plan_key, name):
    """Whether the plan has node `name` under `plan_key` or in its drains (what follows a drain rides along)."""
    return any(name == e.get("name") for key in (plan_key, "drain") for e in plan.get(key) or [])


def _nodeless_instance_problem(item, plan, nodes):
    """An instance without a Node (never joined, failed, orphaned): only what the plan found, and still no Node."""
    listed = {(i.get("provider_id") or "").lower() for i in plan.get("delete_instances") or []}
    if (item.get("provider_id") or "").lower() not in listed:
        return "instance %s is not in the plan's delete_instances" % item.get("provider_id")
    for node in (nodes or {}).values():
        if default_normalize((node.get("spec") or {}).get("providerID")) == default_normalize(item.get("provider_id")):
            return "instance %s has a Node (%s); it is no instance without a node" % (
                item.get("provider_id"), node["metadata"]["name"])
    return None


def _cloud_view(instances):
    """A CloudView of `instances` as check_step takes them (a CloudView, {group: [Instance]}, a list, or None)."""
    if instances is None or isinstance(instances, CloudView):
        return instances
    return CloudView([i for items in instances.values() for i in items] if isinstance(instances, dict) else list(instances))
