# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""csp_node's work (and csp_node_info's listing): create instances in a cloud scaling group, or delete named ones
from it, through one provider (providers/), refusing before any deletion an instance that is not where it was looked
for, that is not outdated (outdated_for), or whose Node the cluster shows still serving (cluster_check). The
executor's cloud port is cloud_access.py."""

from __future__ import annotations

import time

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import crosschecks, drain_api, kube, validate
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base, factory

ARGUMENT_SPEC = dict(
    state=dict(type="str", choices=["present", "absent"], default="present"),
    group=dict(type="str"),
    count=dict(type="int", default=1),
    provider_id=dict(type="list", elements="str", default=[]),
    node_name=dict(type="list", elements="str", default=[]),
    outdated_for=dict(type="str"),
    wait=dict(type="bool", default=False),
    wait_timeout=dict(type="int", default=600),
    wait_sleep=dict(type="int", default=5),
    cluster_check=dict(type="bool", default=True),
)
REQUIRED_IF = [("state", "present", ["group"])]
OPTION_RULES = dict(count=lambda n, v: validate.integer(n, v, 1, validate.MAX_NODES), wait_timeout=validate.seconds,
                    wait_sleep=validate.positive_number)


def report(provider, group):
    """csp_node_info's result: the groups (the named one, or every discoverable one) and all their instances."""
    groups = provider.list_groups([group] if group else None)
    instances = []
    for grp in groups:
        instances.extend(provider.list_instances(grp.id))
    return dict(changed=False, groups=[g.to_dict() for g in groups], instances=[i.to_dict() for i in instances],
                node_names=[i.node_name for i in instances], provider_ids=[i.provider_id for i in instances])


def _instance_dicts(instances):
    return [i.to_dict() for i in instances]


def _listing(provider, group_ids, missing_ok=False):
    """Instances of the groups in `group_ids`, or of every scaling group when it is None. With missing_ok,
    a group that no longer exists has no instances."""
    if group_ids is None:
        group_ids = [grp.id for grp in provider.list_groups()]
    found = []
    for group_id in group_ids:
        try:
            found.extend(provider.list_instances(group_id))
        except base.NotFoundError:
            if not missing_ok:
                raise
    return found


def _search_scope(provider, group, provider_ids):
    """The groups to list to find `provider_ids`: the named group, else the groups the providerIDs name
    (Azure's do), else None for every group (GCP and AWS providerIDs do not name their group)."""
    if group:
        return [group]
    group_ids = set()
    for provider_id in provider_ids:
        group_id = provider.group_id_of(provider_id)
        if group_id is None:
            return None
        group_ids.add(group_id)
    return sorted(group_ids)


def _check_provider_ids(cloud, provider_ids):
    """Refuse malformed providerIDs before anything changes (when the cloud file can parse them)."""
    parse = getattr(cloud, "parse_provider_id", None)
    if parse is None:
        return
    for provider_id in provider_ids:
        parse(provider_id)


def _wait(module, provider, group_ids, done, what):
    """Poll the groups' listing until done(listing) is true; fail when wait_timeout passes."""
    deadline = time.monotonic() + module.params["wait_timeout"]
    while True:
        listing = _listing(provider, group_ids, missing_ok=True)
        outcome = done(listing)
        if outcome is True:
            return listing
        if time.monotonic() >= deadline:
            module.fail_json(msg="timed out after %ds waiting for %s: %s" % (module.params["wait_timeout"], what, outcome),
                             reason="timeout", instances=_instance_dicts(listing))
        time.sleep(max(1, module.params["wait_sleep"]))


def _set_diff(module, result, before, after):
    """With --diff, the instances before and after (providerIDs; only when something changed)."""
    if module._diff and before != after:
        result["diff"] = dict(before=before, after=after)


def ensure_present(module, provider):
    group, count = module.params["group"], module.params["count"]
    result = dict(changed=False, instances=[], node_names=[], provider_ids=[], quota_exceeded=False, quota_message="")
    if count < 1:
        module.fail_json(msg="count must be at least 1, got %d" % count)
    # Reading the group first proves it exists (and the credentials work) before anything is created.
    listed = sorted(i.provider_id for i in provider.list_instances(group))
    if module.check_mode:
        result["changed"] = True
        _set_diff(module, result, {"group": group, "instances": listed},
                  {"group": group, "instances": listed + ["(new instance %d of %d)" % (n + 1, count) for n in range(count)]})
        return result
    created = []
    for _attempt in range(count):
        try:
            created.append(provider.create_instance(group))
        except base.QuotaError as exc:
            result.update(quota_exceeded=True, quota_message=str(exc))
            module.warn("created %d of %d instances in %s: %s" % (len(created), count, group, exc))
            break
        except base.ProviderError as exc:
            module.fail_json(msg="creating an instance in %s failed after %d created: %s" % (group, len(created), exc),
                             instances=_instance_dicts(created), changed=bool(created),
                             retryable=exc.retryable, error_code=exc.code)
    result["changed"] = bool(created)
    if created:
        _set_diff(module, result, {"group": group, "instances": listed},
                  {"group": group, "instances": listed + [i.provider_id for i in created]})
    if created and module.params["wait"]:
        wanted = {provider.normalize_provider_id(i.provider_id) for i in created}

        def all_running(listing):
            states = {provider.normalize_provider_id(i.provider_id): i for i in listing}
            failed = [pid for pid in wanted if pid in states and states[pid].state == base.FAILED]
            if failed:
                module.fail_json(msg="the cloud failed to create %s" % ", ".join(sorted(failed)), reason="failed",
                                 instances=_instance_dicts(created), changed=True)
            pending = sorted(pid for pid in wanted if pid not in states or states[pid].state != base.RUNNING)
            return True if not pending else "not running yet: %s" % ", ".join(pending)

        listing = _wait(module, provider, [group], all_running, "new instances of %s to run" % group)
        by_id = {provider.normalize_provider_id(i.provider_id): i for i in listing}
        created = [by_id.get(provider.normalize_provider_id(i.provider_id), i) for i in created]
    result["instances"] = _instance_dicts(created)
    result["node_names"] = [i.node_name for i in created]
    result["provider_ids"] = [i.provider_id for i in created]
    return result


def _same_group(one, other):
    return (one or "").strip().lower() == (other or "").strip().lower()


def _elsewhere(provider, group, scope, missing_ids, missing_names):
    """Where the instances the listing of the groups `scope` did not find really are. A providerID is asked of
    the cloud itself (its own record of its group: GCE's created-by, the Azure VM's scale set, the AWS
    instance's auto scaling group), so a group the discovery does not find still counts; a node name can only
    be looked for in the discovered groups. One dict per instance that exists outside `scope`."""
    found = []
    for provider_id in missing_ids:
        home = provider.instance_group(provider_id)
        if home is None or any(_same_group(home, listed) for listed in scope):
            continue    # gone, or in a group that was listed (and no longer lists it: it is leaving)
        found.append(dict(requested=provider_id, provider_id=provider_id, node_name="", group=home))
    if missing_names:
        wanted = set(missing_names)
        for instance in _listing(provider, None, missing_ok=True):
            if instance.node_name in wanted and not _same_group(instance.group_id, group):
                found.append(dict(requested=instance.node_name, provider_id=instance.provider_id,
                                  node_name=instance.node_name, group=instance.group_id))
    return found


def _refuse_elsewhere(module, provider, group, scope, missing_ids, missing_names):
    """An instance not found where it was looked for may live in another scaling group, or in none: then it
    is not absent, and deleting nothing while answering already_absent would mislead (and let the caller
    delete its Node while it runs on). Fails naming each instance's own group, before anything is deleted."""
    elsewhere = _elsewhere(provider, group, scope, missing_ids, missing_names)
    if not elsewhere:
        return
    where = ("scaling group %s" % group) if group else (
        "the scaling groups searched (%s)" % (", ".join(scope) if scope else "none found"))
    reasons = [("%s is not in %s but in %s" % (e["requested"], where, e["group"])) if e["group"] else
               ("%s is not in %s and exists in no scaling group; csp_node deletes only instances of scaling groups: "
                "leave it out, or delete it in the cloud yourself" % (e["requested"], where)) for e in elsewhere]
    if group:
        hint = "group=%s limits the deletion to that scaling group, so nothing was deleted. Set group to the " \
               "instance's own group" % group
    else:
        hint = ("nothing was deleted. Set group to the instance's own group, or widen the discovery (gcp.project, "
                "azure.resource_group, aws.group_tags) to include it")
    module.fail_json(msg="refusing to delete any instance: %s; %s" % ("; ".join(reasons), hint), reason="other_group",
                     other_group=elsewhere, deleted=[], changed=False)


def _targets(provider, listing, provider_ids, node_names):
    """The listed instances the options name, by normalized providerID, and the names that matched none."""
    by_provider_id = {provider.normalize_provider_id(i.provider_id): i for i in listing}
    by_node_name = {i.node_name: i for i in listing}
    targets, missing_ids, missing_names = {}, [], []
    for provider_id in provider_ids:
        instance = by_provider_id.get(provider.normalize_provider_id(provider_id))
        if instance is None:
            missing_ids.append(provider_id)
        else:
            targets[provider.normalize_provider_id(instance.provider_id)] = instance
    for node_name in node_names:
        instance = by_node_name.get(node_name)
        if instance is None:
            missing_names.append(node_name)
        else:
            targets[provider.normalize_provider_id(instance.provider_id)] = instance
    return targets, missing_ids, missing_names


def _refuse_not_outdated(module, targets):
    """With outdated_for: refuse every deletion unless the cloud shows each instance on another image."""
    target = (module.params.get("outdated_for") or "").strip()
    if not target:
        return
    refused = []
    for key in sorted(targets):
        instance = targets[key]
        if not instance.image:
            refused.append("instance %s: the cloud does not say which image it runs, so it cannot be shown to be "
                           "outdated" % instance.provider_id)
        elif instance.image.strip().lower() == target.lower():
            refused.append("instance %s: the cloud says it already runs the target image %s; it is not outdated"
                           % (instance.provider_id, target))
    if refused:
        module.fail_json(msg="refusing to delete any instance (outdated_for=%s): %s" % (target, "; ".join(refused)),
                         reason="inconsistent", problems=refused, deleted=[], changed=False)


def cluster_problems(nodes, pods_on, targets, normalize):
    """Before deleting instances with state=absent: the Node of each target instance (matched by providerID) must
    be cordoned and run no pod a drain would have evicted, since the pods of an instance deleted under them go
    without eviction. An instance with no Node (it never joined, or its Node is deleted) is the cloud's alone.
    `nodes` are the cluster's Nodes, pods_on(name) the pods bound to one (listed only for a cordoned node)."""
    by_provider_id = {normalize(n["spec"]["providerID"]): n for n in nodes if (n.get("spec") or {}).get("providerID")}
    problems = []
    for key in sorted(targets):
        node = by_provider_id.get(key)
        if node is None:
            continue
        name = node["metadata"]["name"]
        if not (node.get("spec") or {}).get("unschedulable"):
            problems.append(dict(node=name, step="instance-deletion", code="not_cordoned", message=(
                "instance %s is node %s, which is not cordoned, so it was not drained" % (targets[key].provider_id,
                                                                                          name))))
            continue
        problems.extend(crosschecks.pods_left_problems(name, pods_on(name), step="instance-deletion"))
    return problems


def _refuse_serving(module, provider, targets):
    """cluster_check: refuse every deletion while a target's Node is not cordoned and emptied."""
    if not module.params["cluster_check"] or not targets:
        return
    try:
        api_client = kube.build_api_client(module.params)
        nodes = kube.list_nodes(api_client)
        problems = cluster_problems(nodes, lambda name: drain_api.list_pods_on_node(api_client, name), targets,
                                    provider.normalize_provider_id)
    except Exception as exc:  # pylint: disable=broad-except
        module.fail_from_exception(exc, "reading the cluster's Nodes and pods before deleting instances (cluster_check;"
                                   " set cluster_check=false only to delete instances whose pods may go without "
                                   "eviction)", deleted=[], changed=False)
    if problems:
        undrained = sorted({p["node"] for p in problems})
        module.fail_json(msg="refusing to delete any instance: %s. Drain %s first with node_drain (state=drained), "
                         "which cordons and empties a node; cluster_check=false deletes without looking at the "
                         "cluster" % ("; ".join(p["message"] for p in problems), ", ".join(undrained)),
                         reason="serving", problems=problems, deleted=[], changed=False)


def _delete(module, provider, targets):
    """(deleted providerIDs, the instances found); an instance the cloud deletes already is found, not deleted."""
    deleted, found = [], []
    for key in sorted(targets):
        instance = targets[key]
        found.append(instance)
        if instance.state == base.DELETING:
            continue  # the cloud deletes it already
        if module.check_mode:
            deleted.append(instance.provider_id)
            continue
        try:
            if provider.delete_instance(instance.provider_id):
                deleted.append(instance.provider_id)
        except base.ProviderError as exc:
            module.fail_json(msg="deleting %s failed: %s" % (instance.provider_id, exc), deleted=deleted,
                             changed=bool(deleted), retryable=exc.retryable, error_code=exc.code)
    return deleted, found


def ensure_absent(module, provider, cloud):
    group = module.params["group"]
    provider_ids, node_names = module.params["provider_id"], module.params["node_name"]
    if not provider_ids and not node_names:
        module.fail_json(msg="state=absent needs provider_id or node_name")
    if node_names and not group:
        module.fail_json(msg="node_name needs group: node names are looked up among the group's instances")
    _check_provider_ids(cloud, provider_ids)
    scope = _search_scope(provider, group, provider_ids)
    # A named group must exist; groups taken from providerIDs may be gone, and their instances with them.
    if scope is None:
        scope = [grp.id for grp in provider.list_groups()]
    listing = _listing(provider, scope, missing_ok=not group)
    targets, missing_ids, missing_names = _targets(provider, listing, provider_ids, node_names)
    if missing_ids or missing_names:
        _refuse_elsewhere(module, provider, group, scope, missing_ids, missing_names)
    _refuse_not_outdated(module, targets)
    _refuse_serving(module, provider, {k: i for k, i in targets.items() if i.state != base.DELETING})
    deleted, found = _delete(module, provider, targets)
    if module.params["wait"] and found and not module.check_mode:
        wanted = {provider.normalize_provider_id(i.provider_id) for i in found}

        def all_gone(current):
            left = sorted(wanted & {provider.normalize_provider_id(i.provider_id) for i in current})
            return True if not left else "still listed: %s" % ", ".join(left)

        _wait(module, provider, scope, all_gone, "deleted instances to disappear")
    result = dict(changed=bool(deleted), deleted=deleted, already_absent=missing_ids + missing_names,
                  instances=_instance_dicts(found), node_names=[i.node_name for i in found],
                  provider_ids=[i.provider_id for i in found])
    if deleted:
        _set_diff(module, result, {"instances": sorted(i.provider_id for i in found)},
                  {"instances": sorted(i.provider_id for i in found if i.provider_id not in deleted)})
    return result


def run(module):
    """csp_node on the module base: the state the options ask for, or a failure naming the cloud's error."""
    try:
        provider = factory.build_provider(module.params)
        if module.params["state"] == "present":
            result = ensure_present(module, provider)
        else:
            result = ensure_absent(module, provider, factory.PROVIDERS[module.params["provider"]])
        result.update(factory.provider_extras(provider))
    except base.ProviderError as exc:
        module.fail_from_exception(exc)
    module.exit_json(**result)
