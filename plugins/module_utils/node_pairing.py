# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""node_pair's work: the planner's node writes (pairs, repairs, cached scaling group and image, obsolete marks,
label copies) and the phases a caller records, written on the nodes in write order (executor.write_order), each a
merge patch that carries the resourceVersion read (node_state.write_node)."""

from __future__ import annotations

import time

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import (
    core, facts_views, image_facts, journal, kube, node_state, progress)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import CLOUD_OPTIONAL, merged_argument_spec
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.executor import write_order


# The planner's options node_pair takes (node_image_facts' and upgrade_step's: image_facts.PLANNER_ARG_SPEC).
_PLANNER_OPTIONS = ("image", "annotation_prefix", "scaling_groups", "exclude_labels", "copy_taints")


def argument_spec():
    return merged_argument_spec(dict(
        {name: image_facts.PLANNER_ARG_SPEC[name] for name in _PLANNER_OPTIONS},
        journal=dict(type="dict", options=journal.REFERENCE_SPEC),
        phases=dict(type="list", elements="dict", default=[], options=dict(
            name=dict(type="str", required=True),
            phase=dict(type="str", required=True, choices=list(core.DONOR_PHASES)),
        )),
    ), kube_auth=True, cloud=CLOUD_OPTIONAL)


def add_phase_patches(result, nodes, phases, options, now):
    """Merge the requested phase records into the planner's patches; fail before any write on bad input."""
    recorded = []
    left_alone = {}
    for problem in result.get("problems") or []:
        if problem.get("action") == "left alone":
            left_alone.setdefault(problem["node"], problem["message"])
    for item in phases:
        node = nodes.get(item["name"])
        if node is None:
            raise node_state.PlannerFailure("phases: node %s does not exist" % item["name"])
        try:
            annotations = core.phase_patch(node, item["phase"], options, now)
        except core.PlanInputError as exc:
            raise node_state.PlannerFailure("phases: %s" % exc)
        if annotations and item["name"] in left_alone:
            # A node the cross-checks leave alone gets no record either: its state stays as it was found.
            raise node_state.PlannerFailure("phases: node %s is left alone, so no phase is recorded on it: %s"
                                            % (item["name"], left_alone[item["name"]]))
        if annotations:
            entry = result["node_patches"].setdefault(item["name"], {"annotations": {}, "expect": {}})
            entry["annotations"].update(annotations)
            recorded.append(dict(name=item["name"], phase=item["phase"]))
    return recorded


def _journal_donors_gone(module, api_client, gone, now):
    """Before the promotion forgets their names: donors deleted by a run killed before it journaled them
    (only into a journal an upgrade started: a standalone call creates none)."""
    where = module.params["journal"]
    if not gone or not where or module.check_mode:
        return
    name, namespace = where["name"], where["namespace"]
    try:
        journal.merge_record(api_client, name, namespace, module.params["image"],
                             progress.donors_gone_record({"donors_gone": gone}, core.format_time(now)),
                             "the donors found gone", create=False)
    except (journal.MalformedJournal, journal.JournalConflict) as exc:
        module.fail_json(msg="journal: %s" % exc)
    except kube.ApiException as exc:
        module.fail_json(msg="cannot write the journal ConfigMap %s/%s (option journal): %s"
                         % (namespace, name, kube.api_error_message(exc)))


def _write_patches(module, api_client, nodes, patches, keys):
    """The plan's Node writes, in write_order: (changed node names, skipped ones with why, diff before, after)."""
    changed_nodes, skipped, before, after = [], [], {}, {}
    for name in sorted(patches, key=lambda n: write_order(n, patches[n], keys)):
        entry, node = patches[name], nodes[name]
        diff_before, diff_after = node_state.node_diff(node, entry)
        if not diff_before and not diff_after:
            continue
        if module.check_mode:
            status = "changed" if node_state.expectations_hold(node, entry) else "skipped"
        else:
            try:
                status = node_state.write_node(api_client, node, entry)[0]
            except node_state.NodeWriteError as exc:
                module.fail_json(msg=str(exc), changed=bool(changed_nodes), changed_nodes=changed_nodes)
        if status == "changed":
            changed_nodes.append(name)
            before[name], after[name] = diff_before, diff_after
        elif status == "skipped":
            skipped.append(dict(name=name, reason="the node changed since it was read; the next run plans again"))
    return changed_nodes, skipped, before, after


def undone_pair_problems(repairs):
    """A problem for each pair undone (repair action unpair): the pair could not be completed (its other half is gone,
    names another node, is in another group or its instance is not running), so the node no longer takes part in it."""
    problems = []
    for repair in repairs:
        if repair.get("action") != "unpair":
            continue
        name = repair["name"]
        if "donor" in repair:
            what = "heir %s no longer replaces donor %s" % (name, repair["donor"] or "(none)")
        else:
            what = "donor %s waits for a new heir; %s no longer replaces it" % (name, repair.get("heir") or "(none)")
        why = repair.get("reason") or "the pair could not be completed"
        problems.append(dict(node=name, step=None, code="pair_undone", action="unpaired",
                             message="node %s: its pair was undone (%s): %s" % (name, why, what)))
    return problems


def run(module):
    """node_pair on the module base: plan from the cluster (and the cloud), write what the plan asks for."""
    now = time.time()
    try:
        api_client, nodes, result = node_state.plan_from_cluster(module.params, now=now)[:3]
        options = node_state.planner_options(module.params)
        keys = core.AnnotationKeys(options.annotation_prefix)
        recorded = add_phase_patches(result, nodes, module.params["phases"], options, now)
    except node_state.PlannerFailure as exc:
        module.fail_json(msg=str(exc))
    except Exception as exc:  # pylint: disable=broad-except
        module.fail_from_exception(exc, "node_pair: reading the cluster and the cloud")

    _journal_donors_gone(module, api_client, facts_views.donors_gone(list(nodes.values()), result, keys), now)
    plan = result["plan"]
    changed_nodes, skipped, before, after = _write_patches(module, api_client, nodes, result["node_patches"], keys)
    written = set(changed_nodes)
    undone = undone_pair_problems([r for r in plan["repairs"] if r["name"] in written])
    for problem in undone:
        module.warn(problem["message"] + (" (check mode: nothing was written)" if module.check_mode else ""))
    output = dict(
        changed=bool(changed_nodes),
        pairs=[p for p in plan["pairs"] if p["heir"] in written],
        repairs=[r for r in plan["repairs"] if r["name"] in written],
        obsolete=[n for n in plan["obsolete"] if n in written],
        annotated=[a for a in plan["annotate"] if a["name"] in written],
        label_copies=[c for c in plan["label_copies"] if c["heir"] in written],
        phases=[p for p in recorded if p["name"] in written],
        changed_nodes=changed_nodes,
        skipped=skipped,
        nodes=result["nodes"],
        problems=list(result.get("problems") or []) + undone,
    )
    if module._diff:
        output["diff"] = dict(before=before, after=after)
    module.exit_json(**output)
