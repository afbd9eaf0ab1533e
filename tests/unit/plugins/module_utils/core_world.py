"""A tiny in-memory world (nodes and cloud instances) for testing the planning core and the executor:
the production executor (module_utils/executor.py) carries out plans against it through in-memory
kube, cloud and etcd ports, and time passes so instances boot and join. There is no model of the role
here: only the outside worlds, and the rules they insist on (no drain before the heir is Ready, no
deletion of a control-plane node before its etcd member is gone)."""

import copy

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core, executor, facts_views, report
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


class Killed(Exception):
    """The run was killed at this moment (the property tests' random interruptions)."""


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
        self.created = []
        self.journal = []
        # What a run records at once in its journal ConfigMap (instances_created, start_counts, create_intents,
        # removed_first, refills), merged as the journal merges it: every executor of this world reads it back, as
        # a resumed run does.
        self.records = report.new_journal(NEW, None)

    def add_node(self, name, group_id, image, control_plane=False, ready=True, cached=True, annotations=None, labels=None,
                 ip=None):
        node = make_node(name, group_id if cached else None, image if cached else None, control_plane, ready,
                         annotations, labels, self.prefix, ip)
        self.nodes[name] = node
        self.instances[group_id].append(Instance(provider_id=node["spec"]["providerID"], node_name=name,
                                                 group_id=group_id, image=image, state=RUNNING,
                                                 created_at=self.now - 86400, name=name))
        return node

    def plan(self, options, **kw):
        return core.plan_upgrade(list(copy.deepcopy(list(self.nodes.values()))), options,
                                 groups=[copy.copy(g) for g in self.groups.values()],
                                 instances={k: list(v) for k, v in self.instances.items()}, now=self.now, **kw)

    # -- the executor's outside worlds, in memory ------------------------------------------------------
    def executor(self, options, take=None, etcd_delegated=False, **settings):
        """The production executor (module_utils/executor.py) wired to this world. `take(kind, item)`
        returning False kills the run at that moment (the step does not happen, nor anything after it)."""
        take = take or (lambda kind, item: True)
        world = self

        class Kube:
            def list_nodes(self):
                return copy.deepcopy(list(world.nodes.values()))

            def write_node(self, node, entry):
                world.gate(take, "patch", node["metadata"]["name"])
                return world.patch_node(node["metadata"]["name"], entry)

            def uncordon(self, name):
                world.gate(take, "uncordon", name)
                if name in world.nodes:
                    world.nodes[name]["spec"]["unschedulable"] = False

            def drain(self, name):
                world.gate(take, "drain", name)
                world.check_drain(name)
                world.nodes[name]["spec"]["unschedulable"] = True
                world.drained.add(name)
                return dict(drained=True, evicted=[], reason="drained")

            def delete_node(self, node):
                name = node["metadata"]["name"]
                world.gate(take, "delete-node", name)
                world.check_delete(name)
                world.nodes.pop(name, None)
                return True

        class Cloud:
            def read(self, scaling_groups):
                return ([copy.copy(g) for g in world.groups.values()], {k: list(v) for k, v in world.instances.items()}, {})

            def normalize(self, provider_id):
                return core.default_normalize(provider_id)

            def set_group_image(self, group_id, image):
                world.gate(take, "image", group_id)
                world.groups[group_id].image = image

            def create(self, group_id, count):
                created = []
                for _number in range(count):
                    world.gate(take, "create", group_id)
                    world.counter += 1
                    name = "n%d" % world.counter
                    inst = Instance(provider_id="gce://p/z/" + name, node_name=name, group_id=group_id,
                                    image=world.groups[group_id].image, state=CREATING, created_at=world.now, name=name)
                    world.instances[group_id].append(inst)
                    world.created.append(group_id)
                    created.append(inst)
                return created, ""

            def delete(self, provider_ids):
                for provider_id in provider_ids:
                    world.gate(take, "delete-instance", provider_id)
                    world.check_delete_instance(provider_id)
                    world._drop_instance(provider_id)
                return list(provider_ids)

        def etcd(item, endpoints, expected_member_count):
            world.gate(take, "etcd", item["name"])
            world.etcd_removed.add(item["name"])

        self.journal = []
        recorded = dict(created=self.records.get("instances_created"), start_counts=self.records.get("start_counts"),
                        removed_first=self.records.get("removed_first"), refills=self.records.get("refills"),
                        intents=self.records.get("create_intents"))
        ex = executor.Executor(executor.Settings(options, **dict(recorded, **settings)), Kube(), Cloud(),
                               etcd=None if etcd_delegated else etcd, journal=self.journal.append,
                               clock=lambda: world.now, sleep=world.tick)
        ex.record_created = lambda record: report.merge(world.records, copy.deepcopy(record))
        return ex

    def apply(self, result, take=None, **settings):
        """Carry out one plan (from self.plan) with the executor; a kill (take returning False) ends it."""
        ex = self.executor(core.Options(image=result["target_image"], annotation_prefix=result["annotation_prefix"],
                                        max_surge=result["budget"]["max_surge"],
                                        max_surge_total=result["budget"]["max_surge_total"]), take, **settings)
        keys = core.AnnotationKeys(result["annotation_prefix"])
        nodes = list(self.nodes.values())
        facts = dict(result, donors=facts_views.donors(nodes, result, keys),
                     control_plane_endpoints=facts_views.control_plane_endpoints(nodes))
        try:
            return ex.run_pass(facts=facts, nodes=copy.deepcopy(self.nodes),
                               instances={k: list(v) for k, v in self.instances.items()}, group_errors={})
        except Killed:
            return None

    def run_pass(self, options, take=None, **settings):
        """One pass of the executor (it reads this world itself); None when killed."""
        try:
            return self.executor(options, take, **settings).run_pass()
        except Killed:
            return None

    @staticmethod
    def gate(take, kind, item):
        if not take(kind, item):
            raise Killed("killed before %s %s" % (kind, item))

    # -- what the world itself insists on ---------------------------------------------------------------
    def check_drain(self, name):
        ann = self.nodes[name]["metadata"]["annotations"]
        heir = ann.get(self.prefix + "/heir")
        if heir:
            node = self.nodes.get(heir)
            assert node is not None and node["status"]["conditions"][0]["status"] == "True", \
                "%s drained before its heir %s is Ready" % (name, heir)
            assert node["metadata"]["annotations"].get(self.prefix + "/donor") == name
        else:
            assert ann.get(self.prefix + "/obsolete") == "true", "%s drained but neither donor nor obsolete" % name

    def check_delete(self, name):
        node = self.nodes.get(name)
        if node is None:
            return
        ann = node["metadata"]["annotations"]
        assert ann.get(self.prefix + "/heir") or ann.get(self.prefix + "/obsolete") == "true", name
        if core.CONTROL_PLANE_LABEL in node["metadata"]["labels"]:
            assert name in self.etcd_removed or ann.get(self.prefix + "/phase") in (
                core.PHASE_ETCD_REMOVED, core.PHASE_DELETING), "%s deleted before its etcd member was removed" % name

    def check_delete_instance(self, provider_id):
        for name, node in self.nodes.items():
            if node["spec"]["providerID"].lower() == provider_id.lower():
                self.check_delete(name)

    def patch_node(self, name, entry):
        node = self.nodes.get(name)
        if node is None:
            return "skipped", None
        ann = node["metadata"]["annotations"]
        for key, expected in entry.get("expect", {}).items():
            if ann.get(key) != expected:
                return "skipped", copy.deepcopy(node)
        for key, value in entry["annotations"].items():
            if value is None:
                ann.pop(key, None)
            else:
                ann[key] = value
        node["metadata"]["labels"].update(entry.get("labels") or {})
        if "taints" in entry:
            node["spec"]["taints"] = entry["taints"]
        return "changed", copy.deepcopy(node)

    def record_phase(self, name, phase):
        """Set a node's phase as an earlier run would have left it (test set-up), the way node_pair and the
        executor record it (core.phase_patch): the phase, its time and the phase trail."""
        node = self.nodes.get(name)
        if node is None:
            return
        node["metadata"]["annotations"].update(core.phase_patch(node, phase, self.prefix, self.now) or {})

    def capacity(self):
        """Ready, schedulable nodes."""
        return sum(1 for n in self.nodes.values()
                   if n["status"]["conditions"][0]["status"] == "True" and not n["spec"].get("unschedulable"))

    def _drop_instance(self, provider_id):
        for gid in self.instances:
            self.instances[gid] = [i for i in self.instances[gid] if i.provider_id.lower() != provider_id.lower()]

    def tick(self, seconds=60.0):
        """Time passes: booting instances run, running ones register their Node, Nodes become Ready."""
        self.now += seconds
        for name, node in self.nodes.items():
            ready = node["status"]["conditions"][0]
            if ready["status"] != "True":
                ready.update(status="True", lastTransitionTime=core.format_time(self.now))
        for gid, items in self.instances.items():
            for inst in items:
                if inst.state == CREATING:
                    inst.state = RUNNING
                elif inst.state == RUNNING and inst.node_name not in self.nodes:
                    group = self.groups[gid]
                    node = make_node(inst.node_name, None, None, control_plane=group.role == "control-plane",
                                     ready=False, prefix=self.prefix)
                    node["spec"]["providerID"] = inst.provider_id
                    node["metadata"]["creationTimestamp"] = core.format_time(self.now)
                    self.nodes[inst.node_name] = node


def group(gid, role=None, image=OLD):
    return Group(id=gid, name=gid.rsplit("/", 1)[-1], image=image, role=role)
