# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The preflight verdict (pure, no I/O): what the preflight's read (node_image_facts with report_pdbs and
report_quota) says about starting an upgrade (run.UpgradeRun.start, in every mode): the cloud quota, nodes outside
every known scaling group, nodes not Ready, pods of kube-system not Ready, what the control-plane etcd read needs,
and PodDisruptionBudgets that allow no disruption now."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import ROLE_CONTROL_PLANE, ROLE_WORKER


class Verdict:
    """refusal: why the upgrade must not start (None when it may); said: the lines to show, in order, before
    the etcd read; said_after: after it (the PodDisruptionBudgets, said last);
    surge_cap: the surge the quota allows (0: none, workers delete-first), None when not lowered;
    etcd: what the etcd read needs (endpoints, expected_member_count or None, retries), None when no
    control-plane node is to be replaced or the etcd preflight is off."""

    def __init__(self):
        self.refusal = None
        self.said = []
        self.said_after = []
        self.surge_cap = None
        self.etcd = None
        self.control_plane_left = False


def _descriptions(items):
    return "; ".join(item["description"] for item in items)


# The role's option that lets an upgrade start while pods of kube-system are not Ready.
ALLOW_UNREADY_SYSTEM_PODS = "rolling_upgrade_allow_unready_system_pods"
# Named in the preflight's line at most this many, then "and N more".
SYSTEM_PODS_NAMED = 10


def system_pods_named(pods):
    """How many pods of kube-system are not Ready, and which."""
    more = len(pods) - SYSTEM_PODS_NAMED
    return "%d kube-system pod(s) not Ready: %s%s" % (
        len(pods), _descriptions(pods[:SYSTEM_PODS_NAMED]), " and %d more" % more if more > 0 else "")


def system_pods_refusal(pods):
    return ("%s. The upgrade does not start while a kube-system pod is not Ready (%s is false): DNS, the network "
            "plugin, kube-proxy or the control plane may be short already, and every drain takes more away. Nothing was "
            "changed; make these pods Ready (or delete the ones no longer needed) and run again, or set %s: true to "
            "upgrade anyway" % (system_pods_named(pods), ALLOW_UNREADY_SYSTEM_PODS, ALLOW_UNREADY_SYSTEM_PODS))


def _quota(verdict, quota, max_unavailable, control_plane_left):
    limits = _descriptions(quota.get("limiting") or [])
    delete_first = core.unavailable_limit(max_unavailable, 1) > 0
    if quota["status"] == "none" and not (delete_first and not control_plane_left):
        if delete_first:
            help_text = ("Control-plane nodes always surge (one new instance at a time), so rolling_upgrade_max_unavailable "
                         "(%s) cannot help until they are replaced." % max_unavailable)
        else:
            help_text = ("rolling_upgrade_max_unavailable is %s: set it to 1 or more to replace workers "
                         "delete-first (drain and delete a node, then create its heir), with that many "
                         "fewer Ready nodes at a time." % max_unavailable)
        verdict.refusal = ("the cloud quota leaves no room for a new instance, and the upgrade needs %s in flight: %s. %s "
                           "Nothing was changed; raise the quota or free instances, then run again"
                           % (quota.get("surge_wanted"), limits, help_text))
        return
    if quota["status"] == "none":
        verdict.said.append(
            "WARNING: the cloud quota leaves no room for a new instance (%s); rolling_upgrade_max_unavailable is %s, so "
            "workers are replaced delete-first: each is drained and deleted before its heir is created, with at most "
            "that many fewer Ready nodes per scaling group than at the start" % (limits, max_unavailable))
        verdict.surge_cap = 0
    elif quota["status"] == "lower":
        verdict.said.append(
            "WARNING: the cloud quota allows %s replacement(s) in flight, not the %s the surge wants: %s; the surge is "
            "lowered to %s" % (quota["surge_allowed"], quota["surge_wanted"], limits, quota["surge_allowed"]))
        verdict.surge_cap = int(quota["surge_allowed"])
    if quota.get("unknown"):
        verdict.said.append("WARNING: cloud quota could not be read, so the run relies on the cloud refusing instances: "
                            "%s" % _descriptions(quota["unknown"]))


def _etcd_needs(read, etcd_endpoints):
    """What the etcd read needs: every control-plane Node has a member, except a donor whose member this
    collection removed already; a stopped run may have removed a drained donor's member without recording it,
    and a joining instance may have its member before its Node is labelled: no count then, and time to settle."""
    donors = [d for d in read.get("donors") or [] if d.get("role") == ROLE_CONTROL_PLANE]
    removed = [d for d in donors if d.get("phase") in ("etcd-removed", "deleting")]
    unsure = any(d.get("phase") == "drained" for d in donors) or bool(read.get("joining"))
    in_flight = (read.get("progress") or {}).get("in_flight") or 0
    endpoints = list(etcd_endpoints or read.get("control_plane_endpoints") or [])
    return dict(endpoints=endpoints,
                expected_member_count=None if unsure else len(read.get("control_plane_endpoints") or []) - len(removed),
                retries=24 if unsure or in_flight > 0 else 0)


# core.py's reason for a node whose instance the cloud found in no scaling group it listed.
IN_NO_LISTED_GROUP = "in none of the listed scaling groups"


def _searched_note(unknown, searched):
    """Where the groups were looked for, when nodes are in none of them: a wrong subscription, project or region
    finds other groups, or none, and says nothing else."""
    if not searched or not any(IN_NO_LISTED_GROUP in (n.get("reason") or "") for n in unknown):
        return ""
    return (". The scaling groups were looked for in %s: when these nodes run in another, set it to theirs; when their "
            "groups are there, check that the collection may read them" % searched)


def whole_group_unavailable(read, max_unavailable):
    """Warnings for the worker groups with nodes left to replace that max_unavailable would let lack every node at
    once (it is as large as the group): said at the start, not found out when the group stands empty."""
    warnings = []
    for group in read.get("scaling_groups") or []:
        serving = group.get("nodes_serving") or 0
        if group.get("role") != ROLE_WORKER or not serving or not (group.get("outdated") or 0):
            continue
        if core.unavailable_limit(max_unavailable, serving) >= serving:
            warnings.append(
                "WARNING: rolling_upgrade_max_unavailable is %s, and scaling group %s has %d worker node(s): every one "
                "of them may be drained and deleted before their heirs are Ready (only PodDisruptionBudgets hold a "
                "drain back), so the group may have no node serving for a while; set it below %d to keep nodes "
                "serving" % (max_unavailable, group.get("id"), serving, serving))
    return warnings


def verdict(read, max_unavailable=0, etcd_preflight=True, etcd_endpoints=None, allow_unready_system_pods=False,
            check_mode=False):
    """The verdict on `read` (node_image_facts' result). A refusal stops at the first check that fails, as the
    preflight always did; what was said before it stays said. Pods of kube-system not Ready (read with
    report_system_pods) refuse unless `allow_unready_system_pods`, which says them in a warning instead; in
    `check_mode` they are said as where a real run would stop, and the plan goes on."""
    result = Verdict()
    control_plane_left = any(item.get("role") == ROLE_CONTROL_PLANE for item in read.get("replacement_order") or [])
    result.control_plane_left = control_plane_left
    if read.get("quota") is not None:
        _quota(result, read["quota"], max_unavailable, control_plane_left)
        if result.refusal:
            return result
    result.said.extend(whole_group_unavailable(read, max_unavailable))
    unknown = [n for n in (read.get("nodes") or {}).get("invalid") or [] if not n.get("out_of_scope")]
    if unknown:
        result.refusal = "%d node(s) cannot be upgraded: %s%s" % (
            len(unknown), "; ".join("%s: %s" % (n["name"], n["reason"]) for n in unknown),
            _searched_note(unknown, read.get("searched")))
        return result
    nothing_in_flight = not (read.get("progress") or {}).get("in_flight")
    if nothing_in_flight and read.get("not_ready"):
        result.refusal = "nodes not Ready before the upgrade: %s" % ", ".join(read["not_ready"])
        return result
    pods = read.get("unready_system_pods") or []
    if nothing_in_flight and pods:
        if not allow_unready_system_pods and check_mode:
            # Check mode says what a real run would do, and goes on to the plan.
            result.said.append("Check mode: a real run would stop here: %s" % system_pods_refusal(pods))
        elif not allow_unready_system_pods:
            result.refusal = system_pods_refusal(pods)
            return result
        else:
            result.said.append("WARNING: %s; %s is true, so the upgrade goes on"
                               % (system_pods_named(pods), ALLOW_UNREADY_SYSTEM_PODS))
    if etcd_preflight and control_plane_left:
        result.etcd = _etcd_needs(read, etcd_endpoints)
    pdbs = read.get("blocking_pdbs") or []
    if pdbs:
        blocking = ", ".join("%s/%s" % (p["namespace"], p["name"]) for p in pdbs)
        result.said_after.append("%d PodDisruptionBudget(s) allow no disruption now and will block the drain of nodes "
                                 "running their pods until they do: %s" % (len(pdbs), blocking))
    return result


# The role's variables of the etcd client certificate files, by connection option.
ETCD_FILE_VARIABLES = {"ca_cert": "rolling_upgrade_etcd_ca_cert", "client_cert": "rolling_upgrade_etcd_client_cert",
                       "client_key": "rolling_upgrade_etcd_client_key"}


def etcd_files_refusal(problems):
    """The refusal when a control-plane node is to be replaced and the etcd client files this controller removes its
    member with are missing or unreadable (certificate_file_problems, named by ETCD_FILE_VARIABLES)."""
    return ("a control-plane node is to be replaced, and this controller removes its etcd member with the etcd client "
            "certificate files, but %s. Nothing was changed: set rolling_upgrade_etcd_ca_cert, "
            "rolling_upgrade_etcd_client_cert and rolling_upgrade_etcd_client_key to files this controller may read, or "
            "rolling_upgrade_etcd_delegate_to to a control-plane host that has them, and run again" % "; ".join(problems))


def etcd_refusal(health):
    """The refusal for an etcd read (etcd_member_info's result), None when etcd is healthy."""
    if health.get("healthy"):
        return None
    return "control-plane etcd is not healthy: %s" % "; ".join(health.get("problems") or [])
