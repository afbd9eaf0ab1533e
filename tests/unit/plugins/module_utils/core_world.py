"""A tiny in-memory world (nodes and cloud instances) for testing the planning core: it applies a plan
the way the rolling-upgrade role would, and lets instances boot and join. Pure test scaffolding; it
stands in for the cluster and the clouds only in unit and property tests of the pure core."""

import copy

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers.base import (
    CREATING, RUNNING, Group, Instance)

OLD = "projects/p/global/images/old"
NEW = "projects/p/global/images/NEW"   # compared case-insensitively with the target


def make_node(name, group, image=None, control_plane=False, ready=True, annotations=None, labels=None,
              prefix=core.DEFAULT_PREFIX, ip=None):
    ann = dict(annotations or {})
    if group is not None:
        ann.setdefault(prefix + "/scaling-group-id", group)
    if image is not None:
        ann.setdefault(prefix + "/node-image", image)
    lab = dict(labels or {})
    lab["kubernetes.io/hostname"] = name
    if control_plane:
        lab[core.CONTROL_PLANE_LABEL] = ""
    return {
        "metadata": {"name": name, "labels": lab, "annotations": ann, "resourceVersion": "1"},
        "spec": {"providerID": "gce://p/z/" + name},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                   "addresses": [{"type": "InternalIP", "address": ip or "10.0.0.%d" % (abs(hash(name)) % 250 + 1)}]},
    }


class World:
    def __init__(self, groups, prefix=core.DEFAULT_PREFIX):
        self.prefix = prefix
        self.groups = {g.id: g for g in groups}
        self.nodes = {}
        self.instances = {g.id: [] for g in groups}
        self.now = 1_000_000.0
        self.counter = 0
        self.drained = set()
        self.etcd_removed = set()

    def add_node(self, name, group_id, image, control_plane=False, ready=True, cached=True, annotations=None, labels=None):
        node = make_node(name, group_id if cached else None, image if cached else None, control_plane, ready,
                         annotations, labels, self.prefix)
        self.nodes[name] = node
        self.instances[group_id].append(Instance(provider_id=node["spec"]["providerID"], node_name=name,
                                                 group_id=group_id, image=image, state=RUNNING,
                                                 created_at=self.now - 86400, name=name))
        return node

    def plan(self, options, **kw):
        return core.plan_upgrade(list(copy.deepcopy(list(self.nodes.values()))), options,
                                 groups=[copy.copy(g) for g in self.groups.values()],
                                 instances={k: list(v) for k, v in self.instances.items()}, now=self.now, **kw)

    # -- applying a plan, step by step, like the role does ------------------------------------------
    def patch_node(self, name, entry):
        node = self.nodes.get(name)
        if node is None:
            return
        ann = node["metadata"]["annotations"]
        for key, expected in entry.get("expect", {}).items():
            if ann.get(key) != expected:
                return
        for key, value in entry["annotations"].items():
            if value is None:
                ann.pop(key, None)
            else:
                ann[key] = value
        node["metadata"]["labels"].update(entry.get("labels") or {})
        if "taints" in entry:
            node["spec"]["taints"] = entry["taints"]

    def record_phase(self, name, phase):
        node = self.nodes.get(name)
        if node is None:
            return
        ann = node["metadata"]["annotations"]
        ann[self.prefix + "/phase"] = phase
        ann[self.prefix + "/phase-since"] = core.format_time(self.now)

    def apply(self, result, take=lambda kind, item: True):
        plan = result["plan"]
        for name, entry in sorted(result["node_patches"].items()):
            if take("patch", name):
                self.patch_node(name, entry)
        for item in plan["set_group_image"]:
            if take("image", item["group"]):
                self.groups[item["group"]].image = item["image"]
        for item in plan["create"]:
            for _number in range(item["count"]):
                if take("create", item["group"]):
                    self.counter += 1
                    name = "n%d" % self.counter
                    self.instances[item["group"]].append(Instance(
                        provider_id="gce://p/z/" + name, node_name=name, group_id=item["group"],
                        image=self.groups[item["group"]].image, state=CREATING, created_at=self.now, name=name))
        for name in plan["uncordon"]:
            if take("uncordon", name) and name in self.nodes:
                self.nodes[name]["spec"]["unschedulable"] = False
        for item in plan["drain"]:
            if take("drain", item["name"]) and item["name"] in self.nodes:
                self.nodes[item["name"]]["spec"]["unschedulable"] = True
                self.drained.add(item["name"])
                if take("drain-record", item["name"]):
                    self.record_phase(item["name"], core.PHASE_DRAINED)
        for item in plan["etcd_remove"]:
            if take("etcd", item["name"]):
                self.etcd_removed.add(item["name"])
                if take("etcd-record", item["name"]):
                    self.record_phase(item["name"], core.PHASE_ETCD_REMOVED)
        for item in plan["delete_nodes"]:
            if take("delete", item["name"]):
                self.record_phase(item["name"], core.PHASE_DELETING)
                if take("delete-instance", item["name"]):
                    self._drop_instance(item["provider_id"])
                if take("delete-node", item["name"]):
                    self.nodes.pop(item["name"], None)
        for item in plan["delete_instances"]:
            if take("delete-instance", item["provider_id"]):
                self._drop_instance(item["provider_id"])

    def _drop_instance(self, provider_id):
        for gid in self.instances:
            self.instances[gid] = [i for i in self.instances[gid] if i.provider_id.lower() != provider_id.lower()]

    def tick(self, seconds=60.0):
        """Time passes: booting instances run, running ones register their Node, Nodes become Ready."""
        self.now += seconds
        for name, node in self.nodes.items():
            node["status"]["conditions"][0]["status"] = "True"
        for gid, items in self.instances.items():
            for inst in items:
                if inst.state == CREATING:
                    inst.state = RUNNING
                elif inst.state == RUNNING and inst.node_name not in self.nodes:
                    group = self.groups[gid]
                    node = make_node(inst.node_name, None, None, control_plane=group.role == "control-plane",
                                     ready=False, prefix=self.prefix)
                    node["spec"]["providerID"] = inst.provider_id
                    self.nodes[inst.node_name] = node


def group(gid, role=None, image=OLD):
    return Group(id=gid, name=gid.rsplit("/", 1)[-1], image=image, role=role)
