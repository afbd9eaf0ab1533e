# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The marks a run puts on the nodes it replaces, as Node writes (node_state.write_node entries) computed from the
Nodes and the plan; pure, no I/O:

- the PreferNoSchedule taint <prefix>/to-be-replaced on every node the plan will replace, from the run's first pass:
  the scheduler then places a pod evicted from one donor on a node that stays (a heir, an up-to-date node) rather than
  on another outdated node that would evict it again, so each pod moves once (kOps taints the nodes it will roll the
  same way). It comes off every node that stays: a node no longer to be replaced, and every node when the run ends;
- the exclude-from-external-load-balancers label, with the moment it was set, on a leaving node before its drain, so
  the clouds' load balancers stop sending it connections while it still serves the ones they hold (plan_leaving holds
  its deletion for lb_drain_seconds from that moment); off again when its pair broke and it stays."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.vocabulary import (
    DONOR, LB_EXCLUDE_LABEL, OBSOLETE, OUTDATED, format_time,
)

TAINT_EFFECT = "PreferNoSchedule"


def replacing_taint(keys):
    return {"key": keys.to_be_replaced, "value": "true", "effect": TAINT_EFFECT}


def has_replacing_taint(node, keys):
    return any(t.get("key") == keys.to_be_replaced for t in (node.get("spec") or {}).get("taints") or [])


def untaint_entry(keys):
    return {"drop_taints": [keys.to_be_replaced], "expect": {}}


def to_be_replaced(facts):
    """The nodes the plan will still replace: outdated ones, donors and surplus nodes marked obsolete."""
    grouped = facts.get("nodes") or {}
    return set(grouped.get(OUTDATED) or ()) | set(grouped.get(DONOR) or ()) | set(grouped.get(OBSOLETE) or ())


def taint_writes(nodes, facts, keys, enabled):
    """{node name: write}: the taint on each node to be replaced that lacks it (while `enabled` and the upgrade is not
    done), and off each node that carries it and stays (every one when not enabled or done)."""
    wanted = to_be_replaced(facts) if enabled and not facts.get("done") else set()
    writes = {}
    for name in sorted(nodes):
        tainted = has_replacing_taint(nodes[name], keys)
        if name in wanted and not tainted:
            writes[name] = {"taints": [replacing_taint(keys)], "expect": {}}
        elif tainted and name not in wanted:
            writes[name] = untaint_entry(keys)
    return writes


def lb_exclusion_entry(node, keys, now):
    """The label and its moment on a leaving node; a moment already recorded with the label is kept (a resumed run
    does not start the hold again from zero)."""
    meta = node.get("metadata") or {}
    since = (meta.get("annotations") or {}).get(keys.lb_excluded_since)
    if since and LB_EXCLUDE_LABEL in (meta.get("labels") or {}):
        return {"labels": {}, "annotations": {}, "expect": {}}
    return {"labels": {LB_EXCLUDE_LABEL: ""}, "annotations": {keys.lb_excluded_since: format_time(now)}, "expect": {}}


def lb_release_entry(node, keys):
    """The label and its moment off a node that stays (its pair broke), when this collection set them."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    if keys.lb_excluded_since not in annotations:
        return None
    return {"labels": {LB_EXCLUDE_LABEL: None}, "annotations": {keys.lb_excluded_since: None}, "expect": {}}
