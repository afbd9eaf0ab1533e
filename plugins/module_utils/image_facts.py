# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""What node_image_facts reports (the module and the upgrade_step action runs this code): the
plan of the nodes and the clouds (node_state.py, core.py) with the views of facts_views.py and, when asked, the
quota, the PodDisruptionBudgets and the kube-system pods."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import facts_views, journal, kube, node_state, quota, validate
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import CLOUD_REQUIRED, merged_argument_spec
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.core import DEFAULT_JOIN_TIMEOUT, AnnotationKeys


# The planner's options (node_state.planner_options), shared by node_image_facts and the upgrade_step action.
PLANNER_ARG_SPEC = dict(
    image=dict(type="str", required=True),
    annotation_prefix=dict(validate.ANNOTATION_PREFIX_SPEC),
    max_surge=dict(type="raw", default=1),
    max_surge_total=dict(type="int"),
    join_timeout=dict(type="int", default=DEFAULT_JOIN_TIMEOUT),
    scaling_groups=dict(type="list", elements="str", default=[]),
    exclude_labels=dict(type="list", elements="str", default=[]),
    copy_taints=dict(type="bool", default=False),
    heir_ready_seconds=dict(type="int", default=0),
    lb_drain_seconds=dict(type="int", default=0),
    canary=dict(type="bool", default=False),
    canary_soak_seconds=dict(type="int", default=0),
    max_unavailable=dict(type="raw", default=0),
)


def argument_spec():
    """node_image_facts' options (also validated in the controller by the upgrade_step action)."""
    return merged_argument_spec(dict(
        PLANNER_ARG_SPEC,
        no_surge=dict(type="bool", default=False),
        journal=dict(type="dict", options=journal.REFERENCE_SPEC),
        report_pdbs=dict(type="bool", default=False),
        report_system_pods=dict(type="bool", default=False),
        report_quota=dict(type="bool", default=False),
    ), kube_auth=True, cloud=CLOUD_REQUIRED)


def quota_report(provider, result):
    """node_image_facts' `quota`: the limits of the groups with nodes left to replace, against the surge."""
    rows = result["scaling_groups"]
    groups = [r["id"] for r in rows if (r.get("outdated") or 0) + (r.get("donor") or 0) > 0]
    limits = []
    if groups:
        try:
            limits = provider.instance_headroom(groups)
        except base.ProviderError as exc:
            # Quota is advice: a failure to read it is reported, never fatal.
            limits = [quota.unknown_limit("quota", "%s provider" % provider.name, groups, str(exc))]
    return quota.assess(rows, limits, result["budget"].get("max_surge_total"))


def facts(module, built=None):
    """node_image_facts' result: the plan with its views (fails through module.fail_json); also run in the
    controller by the upgrade_step action, with the provider it built already (`built`)."""
    reading = "cannot list PodDisruptionBudgets"
    try:
        api_client, nodes, result, provider = node_state.plan_from_cluster(module.params, built=built)
        keys = AnnotationKeys(result["annotation_prefix"])
        listed = list(nodes.values())
        result.update(
            donors=facts_views.donors(listed, result, keys),
            donors_gone=facts_views.donors_gone(listed, result, keys),
            not_ready=facts_views.not_ready(listed),
            control_plane_endpoints=facts_views.control_plane_endpoints(listed),
            replacement_order=facts_views.replacement_order(listed, result, keys),
            blocking_pdbs=[],
            unready_system_pods=[],
            quota=None,
            # Where the groups were looked for: a node in none of them may run in another account or region.
            searched=provider.searched() if provider is not None else "",
        )
        if module.params["report_quota"]:
            result["quota"] = quota_report(provider, result)
        if module.params["report_pdbs"]:
            pdbs = kube.list_all(api_client, "/apis/policy/v1/poddisruptionbudgets")
            result["blocking_pdbs"] = facts_views.blocking_pdbs(pdbs)
        reading = "cannot list the pods of %s" % facts_views.SYSTEM_NAMESPACE
        if module.params["report_system_pods"]:
            pods = kube.list_all(api_client, "/api/v1/namespaces/%s/pods" % facts_views.SYSTEM_NAMESPACE)
            result["unready_system_pods"] = facts_views.unready_system_pods(pods)
    except node_state.PlannerFailure as exc:
        module.fail_json(msg=str(exc))
    except kube.ApiException as exc:
        module.fail_from_exception(exc, reading)
    except Exception as exc:  # pylint: disable=broad-except
        module.fail_from_exception(exc, "node_image_facts: reading the cluster and the cloud")
    result.pop("node_patches", None)
    invalid = result["nodes"]["invalid"]
    if invalid:
        shown = ", ".join("%s (%s)" % (i["name"], i["reason"]) for i in invalid[:5])
        module.warn("%d node(s) are left alone: %s%s" % (len(invalid), shown, ", ..." if len(invalid) > 5 else ""))
    return dict(result, changed=False)
