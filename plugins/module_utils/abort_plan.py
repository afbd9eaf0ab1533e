# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""What an abort of an upgrade does, decided from the Nodes, the clouds' instances and the journal; pure, no I/O.

The journal is the truth about what the upgrade made: only an instance it recorded as created (instances_created)
is ever removed, and a group is pointed back only at the image it recorded before pointing it at the new one
(group_images). Per node and instance:

- a donor whose replacement has not passed its point of no return is given back: uncordoned when this collection's
  drain cordoned it, its exclude-from-external-load-balancers label (when this collection set it) and its pairing
  annotations taken off;
- a donor past its point of no return (its etcd member removed, or its deletion under way: its instance deleting or
  gone in the cloud while its Node is still there) is not given back: it must never serve again, so its replacement
  is finished (its instance deleted, then its Node once the cloud confirms) and its heir stays;
- a node this upgrade created stays when the node it replaced is gone (a heir whose donor was deleted, a delete-first
  refill whose worker was removed) or its replacement is done (phase replaced): capacity never drops below the start.
  A heir that stays loses its pairing as the run's own promotion takes it off (donor annotation off, phase replaced,
  its trail carried on), so it is an ordinary up-to-date node to a later upgrade or rollback. Any other one is
  removed - drained, its instance deleted, then its Node once the cloud confirms; a control-plane one has its etcd
  member removed (with the quorum checks) after its drain and before its instance goes, and is only named, not
  touched, when the abort was given no way to reach etcd;
- an instance this upgrade created that has no Node yet is deleted;
- a node this upgrade did not create is never removed.

The taint on the nodes to be replaced, the cloud settings and the cluster-autoscaler are put back by the run's own
code (run.py) once this plan is done."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.crosschecks import trail_with
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import DELETING
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.vocabulary import (
    CONTROL_PLANE_LABEL, DONOR_PHASES, LB_EXCLUDE_LABEL, PHASE_REPLACED, _POINT_OF_NO_RETURN, default_normalize, format_time,
)

GIVE_BACK = "give_back"          # a donor uncordoned and unmarked
FINISH = "finish"                # a donor past its point of no return: its deletion finished
REMOVE = "remove"                # a node this upgrade created, whose donor still exists: drained and removed
KEEP = "keep"                    # a node this upgrade created whose donor is gone: it stays (its pairing ended: `write`)
HOLD = "hold"                    # a node the abort must not touch itself (a control-plane heir): named
RUNNING, GOING, GONE = "running", "going", "gone"   # a leaving node's instance (instance_state)


def _meta(node):
    return node.get("metadata") or {}


def _annotations(node):
    return _meta(node).get("annotations") or {}


def _provider_id(node):
    return (node.get("spec") or {}).get("providerID") or ""


def _internal_ip(node):
    return next((a.get("address") for a in (node.get("status") or {}).get("addresses") or []
                 if a.get("type") == "InternalIP" and a.get("address")), None)


def give_back_entry(node, keys, drain_annotation):
    """The Node write (node_state.write_node entry) that gives a donor back - its pairing annotations, the taint on the
    nodes to be replaced and, when this collection set it, its load-balancer exclusion off - and whether to uncordon
    it: only when this collection's drain cordoned it (an operator's own cordon stays). ({}, False) for a node the
    upgrade did not mark."""
    annotations = _annotations(node)
    drop = [k for k in (keys.heir, keys.lb_excluded_since) if k in annotations]
    if annotations.get(keys.phase) in DONOR_PHASES:
        # A plain outdated node again: a later upgrade pairs it with a fresh trail (a trail that ends in a phase the
        # annotation no longer says is refused as tampered with).
        drop += [k for k in (keys.phase, keys.phase_since, keys.phase_history) if k in annotations]
    entry = {}
    if drop:
        entry["annotations"] = {k: None for k in drop}
    if keys.lb_excluded_since in annotations and LB_EXCLUDE_LABEL in (_meta(node).get("labels") or {}):
        entry["labels"] = {LB_EXCLUDE_LABEL: None}
    if any(t.get("key") == keys.to_be_replaced for t in (node.get("spec") or {}).get("taints") or []):
        entry["drop_taints"] = [keys.to_be_replaced]
    uncordon = drain_annotation in annotations and bool((node.get("spec") or {}).get("unschedulable"))
    return (dict(entry, expect={}) if entry else {}), uncordon


def promote_entry(node, keys, now):
    """The Node write that ends a kept heir's pairing as the run's promotion does (plan_pairs): its donor annotation off,
    phase replaced from `now` (epoch seconds), its trail carried on; {} for a node with no donor annotation. It
    expects the donor annotation it read, so a node paired anew meanwhile is left alone."""
    annotations = _annotations(node)
    donor = annotations.get(keys.donor)
    if not donor:
        return {}
    started = annotations.get(keys.started_at) or annotations.get(keys.phase_since)
    return dict(annotations={keys.donor: None, keys.phase: PHASE_REPLACED, keys.phase_since: format_time(now),
                             keys.phase_history: trail_with(annotations, keys, PHASE_REPLACED, now),
                             keys.started_at: started}, expect={keys.donor: donor})


def past_return(node, keys, listed, normalize=default_normalize):
    """Why a donor never serves again - its phase past the point of no return, or its instance deleting or gone while
    its Node is there (the run deletes the instance before the Node) - or None. Only a paired donor (its heir
    annotation) is judged by its instance: it is in a group the upgrade touched, which the abort lists."""
    annotations = _annotations(node)
    phase = annotations.get(keys.phase)
    if phase in _POINT_OF_NO_RETURN:
        return "phase %s" % phase
    pid = normalize(_provider_id(node))
    if annotations.get(keys.heir) and pid and instance_state(listed, pid) != RUNNING:
        return "its instance is %s" % ("being deleted" if instance_state(listed, pid) == GOING else "deleted")
    return None


def decide(nodes, instances, journal, keys, drain_annotation, normalize=default_normalize, groups=None, now=0.0,
           etcd_reachable=False):
    """The abort's decision. `nodes`: {name: Node dict}; `instances`: {provider ID: {group, state}} as the clouds
    list them now; `journal`: the upgrade's journal (or None); `groups`: {group ID: its image now}; `now`: epoch
    seconds, for a kept heir's phase trail; `etcd_reachable`: whether the abort may remove etcd members (it was given
    etcd's TLS files). Returns
    {nodes: {name: {action, reason, ...}}, instances: [{provider_id, group}] to delete, groups: [{group, image,
    now}] to point back, unrecorded_groups: [group] on another image than before with nothing recorded}."""
    journal = journal or {}
    created = {normalize(pid): entry for pid, entry in (journal.get("instances_created") or {}).items()}
    refills = {refill: removed for removed, refill in (journal.get("refills") or {}).items() if refill}
    listed = {normalize(pid): inst for pid, inst in (instances or {}).items()}
    node_pids = {normalize(_provider_id(n)): name for name, n in nodes.items() if _provider_id(n)}
    decided = {}
    for name in sorted(nodes):
        node, annotations = nodes[name], _annotations(nodes[name])
        pid = normalize(_provider_id(node))
        ours = bool(pid) and pid in created
        replaced = annotations.get(keys.donor) or refills.get(name)
        if ours:
            if replaced and replaced not in nodes:
                decided[name] = dict(action=KEEP, write=promote_entry(node, keys, now),
                                     reason="the node it replaced (%s) is gone: it stays" % replaced)
            elif not replaced and annotations.get(keys.phase) == PHASE_REPLACED:
                decided[name] = dict(action=KEEP, write={}, reason="its replacement is done (phase %s): it stays" % PHASE_REPLACED)
            elif replaced and past_return(nodes[replaced], keys, listed, normalize):
                decided[name] = dict(action=KEEP, write={},
                                     reason="the node it replaces (%s) never serves again: it stays" % replaced)
            elif CONTROL_PLANE_LABEL in (_meta(node).get("labels") or {}) and not etcd_reachable:
                decided[name] = dict(action=HOLD, reason=(
                    "a control-plane node this upgrade created: its etcd member must go first, and the abort was given "
                    "no etcd TLS files (the playbook's etcd variable, or rolling_upgrade_etcd_ca_cert, _client_cert and "
                    "_client_key): give them and run the abort again, or remove it with etcd_member_remove, node_drain "
                    "and node_delete, or roll back"))
            else:
                control_plane = CONTROL_PLANE_LABEL in (_meta(node).get("labels") or {})
                decided[name] = dict(action=REMOVE, provider_id=pid, group=created[pid].get("group"),
                                     control_plane=control_plane, node_ip=_internal_ip(node),
                                     reason="created by this upgrade, and %s%s" % (
                                         "the node it replaces (%s) is still there" % replaced if replaced
                                         else "not yet paired with any node",
                                         "; its etcd member is removed before its instance" if control_plane else ""))
            continue
        past = past_return(node, keys, listed, normalize)
        if past:
            decided[name] = dict(action=FINISH, provider_id=pid, reason=(
                "its replacement passed the point of no return (%s): it never serves again; its instance and "
                "Node are deleted and its heir %s stays" % (past, annotations.get(keys.heir) or "(none)")))
            continue
        entry, uncordon = give_back_entry(node, keys, drain_annotation)
        if entry or uncordon:
            decided[name] = dict(action=GIVE_BACK, write=entry, uncordon=uncordon, reason="given back%s" % (
                ", uncordoned" if uncordon else ""))
    orphans = [dict(provider_id=pid, group=entry.get("group"))
               for pid, entry in sorted(created.items())
               if pid not in node_pids and pid in listed and listed[pid].get("state") != DELETING]
    before = {g: e.get("before") for g, e in (journal.get("group_images") or {}).items() if (e or {}).get("before")}
    back, unrecorded = [], []
    for group, image in sorted((groups or {}).items()):
        if group in before and before[group] != image:
            back.append(dict(group=group, image=before[group], now=image))
        elif group not in before and journal.get("target_image") and image == journal["target_image"]:
            unrecorded.append(group)
    for item in decided.values():
        if item["action"] in (REMOVE, FINISH):
            item["instance"] = instance_state(listed, item.get("provider_id"))
    return dict(nodes=decided, instances=orphans, groups=back, unrecorded_groups=unrecorded)


def instance_state(listed, provider_id):
    """Where a leaving node's instance stands, which says its next step: RUNNING - drained (a node of the upgrade),
    then its instance deleted; GOING - wait for the cloud (its pods cannot end any more, its kubelet is gone, so it is
    not drained again); GONE - its Node is deleted."""
    listed_as = listed.get(provider_id) if provider_id else None
    if listed_as is None:
        return GONE
    return GOING if listed_as.get("state") == DELETING else RUNNING


def left(decision):
    """How many things are left to do: donors to give back, nodes to remove or finish, kept heirs to unpair, orphans,
    groups to point back (HOLD and an unpaired KEEP are ends)."""
    nodes = [n for n, d in decision["nodes"].items() if d["action"] in (GIVE_BACK, REMOVE, FINISH)
             or (d["action"] == KEEP and d.get("write"))]
    return len(nodes) + len(decision["instances"]) + len(decision["groups"])


def done(decision):
    """Whether nothing is left to do (left)."""
    return not left(decision)


def describe(decision):
    """One line per thing the abort does or leaves, for its output and check mode."""
    lines = ["node %s: %s: %s" % (name, d["action"].replace("_", " "), d["reason"]) for name, d in sorted(decision["nodes"].items())]
    lines += ["instance %s in %s: created by this upgrade and never a node: deleted" % (i["provider_id"], i["group"])
              for i in decision["instances"]]
    lines += ["group %s: pointed back from %s to %s, its image before the upgrade" % (g["group"], g["now"], g["image"])
              for g in decision["groups"]]
    lines += ["group %s: on the upgrade's image, but the journal has no record of its image before: left as it is"
              % g for g in decision["unrecorded_groups"]]
    return lines


_STEP_WORDS = {"set_group_image": "pointed group %(group)s back at %(image)s", "give_back": "gave back %(name)s",
               "etcd_remove": "removed the etcd member of %(name)s",
               "unpair": "unpaired the kept heir %(name)s", "drain": "draining %(name)s",
               "delete_instance": "deleted the instance of %(name)s", "delete_node": "deleted the Node %(name)s"}


def progress_line(result):
    """One line per call of upgrade_abort (its result), as the upgrade's progress line is one per pass: what the call
    did and how much is left, or that it waits for the live run to stop, or the end."""
    if result.get("waiting"):
        return "abort: waiting for the live run to stop at its next safe point (asked through its run lock)"
    if result.get("done"):
        return "abort: done: %s" % result.get("msg", "")
    did = [_STEP_WORDS.get(d.get("step"), "%(step)s") % dict({"name": "?", "group": "?", "image": "?"}, **d)
           + (" (uncordoned)" if d.get("uncordoned") else "") for d in result.get("did") or []]
    return "abort: %s (%d thing(s) were left to undo before this step)" % (
        "; ".join(did) or "waiting for the cloud", result.get("left", 0))
