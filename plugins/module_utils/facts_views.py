# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Views of the cluster that node_image_facts returns next to the plan, for people and for the role:
the donors with where their replacement stands, the donors found gone, the nodes that are not Ready, the control-plane etcd
endpoints, the order of replacement, the PodDisruptionBudgets that allow no disruption now, and the pods of
kube-system that are not Ready.
Pure: plain dicts in, plain dicts out."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core, gate

# The namespace whose pods the preflight wants Ready (node_image_facts' report_system_pods).
SYSTEM_NAMESPACE = "kube-system"


def _infos(nodes):
    return [n if isinstance(n, core.NodeInfo) else core.NodeInfo.from_k8s(n) for n in nodes]


def _group_of(info, facts, keys):
    """The node's scaling group: its annotation, else the one this same plan is about to write there
    (plan.annotate), as on a cluster nobody has upgraded yet."""
    group = info.annotations.get(keys.group)
    if group:
        return group
    short = keys.short(keys.group)
    for entry in (facts.get("plan") or {}).get("annotate") or []:
        if entry.get("name") == info.name and (entry.get("annotations") or {}).get(short):
            return entry["annotations"][short]
    return None


def donors(nodes, facts, keys, instances=None, infos=None):
    """Per donor of facts['nodes']['donor']: heir, group, role, phase and since, whether the heir is Ready,
    and when its heir was created (the cloud's creation time of its instance, when `instances`, the cloud
    read as {group: [Instance]} or a list, is given), joined (its Node's creationTimestamp) and turned Ready:
    the report's creating, joined and heir-ready phases. `infos`: the NodeInfo of `nodes`, when the caller has them."""
    infos = {n.name: n for n in (_infos(nodes) if infos is None else infos)}
    registered = {n["metadata"]["name"]: (n["metadata"].get("creationTimestamp") or None)
                  for n in nodes if isinstance(n, dict) and n.get("metadata")}
    listed = [i for items in instances.values() for i in items] if isinstance(instances, dict) else list(instances or [])
    created = {core.default_normalize(i.provider_id): i.created_at for i in listed if i.created_at}
    result = []
    for name in facts.get("nodes", {}).get(core.DONOR, []):
        info = infos.get(name)
        if info is None:
            continue
        ann = info.annotations
        heir = infos.get(ann.get(keys.heir, ""))
        heir_created = created.get(core.default_normalize(heir.provider_id)) if heir is not None else None
        result.append(dict(
            name=name,
            heir=ann.get(keys.heir) or None,
            heir_ready=bool(heir and heir.ready),
            group=_group_of(info, facts, keys),
            role=core.ROLE_CONTROL_PLANE if info.control_plane else core.ROLE_WORKER,
            phase=ann.get(keys.phase) or core.PHASE_PAIRED,
            phase_since=ann.get(keys.phase_since) or None,
            heir_created=core.format_time(heir_created) if heir_created else None,
            heir_joined=registered.get(heir.name) if heir is not None else None,
            heir_ready_since=core.format_time(heir.ready_since) if heir is not None and heir.ready_since else None,
        ))
    return result


def donors_gone(nodes, facts, keys):
    """Donors whose Node is gone, seen through their heir, which this plan promotes (repair `promote`):
    C(name) (the donor), C(heir), C(group), C(role) and C(paired_at) (the heir's started-at). A run killed
    after it deleted a donor but before its journal record would otherwise leave that replacement out of
    the report: the next pass learns of it only here."""
    infos = {n.name: n for n in _infos(nodes)}
    result = []
    for repair in (facts.get("plan") or {}).get("repairs") or []:
        heir = infos.get(repair.get("name"))
        if repair.get("action") != "promote" or not repair.get("donor") or heir is None:
            continue
        result.append(dict(
            name=repair["donor"],
            heir=heir.name,
            group=_group_of(heir, facts, keys),
            role=core.ROLE_CONTROL_PLANE if heir.control_plane else core.ROLE_WORKER,
            paired_at=heir.annotations.get(keys.started_at) or None,
        ))
    return result


def pod_why(pod):
    """Why a live pod is not Ready, in a few words: the pod's own reason, else the first container (init
    containers first) that waits, ended or is not ready, else why it is not scheduled, else its Ready condition."""
    status = pod.get("status") or {}
    if status.get("reason"):
        return status["reason"]
    for container in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        if container.get("ready"):
            continue
        state = container.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            return "container %s %s" % (container.get("name"), state["waiting"]["reason"])
        if state.get("terminated"):
            return "container %s terminated: %s" % (container.get("name"), state["terminated"].get("reason") or "no reason")
        if "running" in state:
            return "container %s not ready" % container.get("name")
    scheduled = gate.condition(pod, "PodScheduled")
    if scheduled and scheduled.get("status") != "True":
        return scheduled.get("reason") or "not scheduled"
    if not (pod.get("spec") or {}).get("nodeName"):
        return "not scheduled"
    ready = gate.condition(pod, "Ready")
    return (ready or {}).get("reason") or "not Ready"


def unready_system_pods(pods):
    """The live pods of kube-system (gate.live_pods: not finished, not being deleted) that are not Running and
    Ready, by name, each with namespace, name, node (null while not scheduled), phase, why (pod_why) and a
    description for people."""
    result = []
    for pod in gate.live_pods(pods, [SYSTEM_NAMESPACE]):
        if gate.pod_ready(pod):
            continue
        meta, phase = pod.get("metadata") or {}, (pod.get("status") or {}).get("phase") or "no phase"
        node, why = (pod.get("spec") or {}).get("nodeName") or None, pod_why(pod)
        result.append(dict(namespace=meta.get("namespace"), name=meta.get("name"), node=node, phase=phase, why=why,
                           description="%s/%s on %s (%s: %s)" % (meta.get("namespace"), meta.get("name"),
                                                                 node or "no node", phase, why)))
    return sorted(result, key=lambda p: p["name"] or "")


def not_ready(nodes):
    return sorted(n.name for n in _infos(nodes) if not n.ready)


def control_plane_endpoints(nodes, client_port=2379):
    """https://<first InternalIP>:<port> of every control-plane node (IPv6 in brackets), Ready ones first:
    where a kubeadm-style stacked etcd member listens."""
    infos = sorted((n for n in _infos(nodes) if n.control_plane and n.internal_ips), key=lambda n: (not n.ready, n.name))
    return ["https://%s:%d" % ("[%s]" % n.internal_ips[0] if ":" in n.internal_ips[0] else n.internal_ips[0], client_port)
            for n in infos]


def replacement_order(nodes, facts, keys):
    """Nodes still to replace (donors, then outdated), control plane first, then by group and name, with
    their group and role: the order the plan replaces them in."""
    infos = {n.name: n for n in _infos(nodes)}
    groups = facts.get("nodes", {})
    rows = []
    for category in (core.DONOR, core.OUTDATED):
        for name in groups.get(category, []):
            info = infos.get(name)
            if info is None:
                continue
            rows.append(dict(name=name, group=_group_of(info, facts, keys),
                             role=core.ROLE_CONTROL_PLANE if info.control_plane else core.ROLE_WORKER,
                             in_flight=category == core.DONOR))
    rows.sort(key=lambda r: (r["role"] != core.ROLE_CONTROL_PLANE, not r["in_flight"], (r["group"] or "").lower(), r["name"]))
    return rows


def blocking_pdbs(pdbs):
    """PodDisruptionBudgets (API dicts) whose status allows no disruption now."""
    result = []
    for pdb in pdbs:
        status = pdb.get("status") or {}
        if int(status.get("disruptionsAllowed") or 0) > 0:
            continue
        meta, spec = pdb.get("metadata") or {}, pdb.get("spec") or {}
        result.append(dict(namespace=meta.get("namespace"), name=meta.get("name"),
                           min_available=spec.get("minAvailable"), max_unavailable=spec.get("maxUnavailable"),
                           current_healthy=status.get("currentHealthy"), desired_healthy=status.get("desiredHealthy"),
                           expected_pods=status.get("expectedPods")))
    return sorted(result, key=lambda p: (p["namespace"] or "", p["name"] or ""))
