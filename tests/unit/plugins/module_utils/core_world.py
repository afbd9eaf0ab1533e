"""A tiny in-memory world (nodes and cloud instances) for testing the planning core and the executor:
the production executor (module_utils/executor.py) carries out plans against it through in-memory
kube, cloud and etcd ports, and time passes so instances boot and join. There is no model of the role
here: only the outside worlds, and the rules they insist on (no drain before the heir is Ready, no
deletion of a control-plane node before its etcd member is gone).

Beyond that, for the world property tests (test_executor_worlds.py), the world can hold (all off by default):
  foreign nodes:    add_foreign(): a node on the target image that no upgrade created (no annotation of this
                    collection), what autohealing or a scale-up leaves;
  an etcd model:    `members`, one per control-plane Node (added when one registers, removed by the executor's
                    etcd port, which waits while another member is unhealthy); set_member_health();
                    etcd_health() is the executor's health port;
  lingering:        `linger` (a callable giving a number of ticks): a deleted instance stays listed DELETING for
                    that many ticks before it disappears; with `ccm`, a tick deletes the Nodes whose instance
                    the cloud no longer lists (the cloud controller manager), `ccm_delay` ticks later;
  world faults:     kill_instance() (an instance dies: stopped, failed or deleted, its Node reads Ready for a
                    tick or two, then NotReady, then the instance goes, and with `autoheal` the group creates a
                    replacement: a foreign node), blip() (a Node NotReady for some ticks); both are recorded in
                    `losses`, which active_losses() counts for the capacity invariant;
  refusals:         `refusing` (group id -> [ticks left, how]): while it lasts the group's creates are refused for
                    quota or capacity: at once ("now": create returns the cloud's words), or accepted and refused
                    later on the instance ("late": GCE, listed CREATING with the refusal and retried by the cloud;
                    "failed": Azure, a FAILED instance with the refusal); when it ends, a late-refused instance
                    still listed is created after all (it boots);
  the production cloud side: executor(access=seconds) puts the production CloudAccess (module_utils/cloud_access.py)
                    between the executor and this world, on a provider over it (WorldProvider): the pass then lists a
                    steady group only every `seconds` of world time, or after a write to it, and lists a group
                    again before a drain, an etcd removal or a deletion in it (cloud_reads.py);
  the journal:      `records`, where every executor's record_created writes (report.merge) and from which every
                    executor's Settings are read (a resumed run);
  action hooks:     `before` (kind, item, detail) and `after` (kind, item) callables around every mutating action
                    of the ports: before runs ahead of the kill gate (an attempted step is checked), after once
                    the step is done.
"""

import contextlib
import copy
import json

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import (
    cloud_access, core, executor, facts_views, node_cache, node_state, report)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import REFUSED_FOR
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers.base import (
    CREATING, DELETING, FAILED, RUNNING, Group, Instance)

QUOTA_WORDS = "Quota 'CPUS' exceeded. Limit: 8.0 in region r"

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
        # See the module docstring: all of this stays idle unless a test uses it.
        self.created_ids = set()      # providerIDs (lower case) of the instances the executor created
        # What a run records at once in its journal ConfigMap (instances_created, start_counts, create_intents,
        # removed_first, refills), merged as the journal merges it: every executor of this world reads it back, as
        # a resumed run does.
        self.records = report.new_journal(NEW, None)
        self.members = {}             # etcd member name -> dict(node, ip, healthy)
        self.linger = None            # callable() -> ticks a deleted instance stays listed DELETING
        self.leaving = {}             # providerID (lower case) -> ticks left listed DELETING
        self.operations = []          # WorldProvider: the writes started without waiting, followed by the next read
        self.ccm = False              # a Node whose instance disappeared is deleted
        self.ccm_delay, self.unlisted = 0, {}   # ticks the Node outlives its instance; ticks each was unlisted
        self.autoheal = False         # an instance the world killed is replaced by the group
        self.down = {}                # Node name -> ticks it stays NotReady (None: for good)
        self.losses = []              # world-caused losses: dict(group, node, kind, replacement)
        self.scale_ups = []           # instances the groups created by themselves: dict(group, name, autoheal)
        self.dying = []               # kill_instance() timelines: [ticks to NotReady, ticks to gone, loss]
        self.node_group, self.node_image = {}, {}   # what the world knows of every Node it ever held
        self.refusing = {}            # group id -> [ticks left, "now" | "late" | "failed"]
        self.refused = []             # (tick, group, how, providerID or None) of every refusal
        self.ticks = 0
        self.ips = 0
        self.before, self.after = [], []

    def next_ip(self):
        self.ips += 1
        return "10.1.%d.%d" % (self.ips // 250, self.ips % 250 + 1)

    def add_node(self, name, group_id, image, control_plane=False, ready=True, cached=True, annotations=None, labels=None,
                 ip=None):
        node = make_node(name, group_id if cached else None, image if cached else None, control_plane, ready,
                         annotations, labels, self.prefix, ip or self.next_ip())
        self.nodes[name] = node
        self.instances[group_id].append(Instance(provider_id=node["spec"]["providerID"], node_name=name,
                                                 group_id=group_id, image=image, state=RUNNING,
                                                 created_at=self.now - 86400, name=name))
        self.resize(group_id, 1)
        self._known(name, group_id, image, control_plane)
        return node

    def resize(self, group_id, by):
        """The group's target size as the clouds keep it: our creates, our deletes and someone else's scale-ups change
        it, autohealing (an instance replaced by the group) does not."""
        self.groups[group_id].target_size = (self.groups[group_id].target_size or 0) + by

    def add_foreign(self, name, group_id, image=NEW, created_ago=3600.0):
        """A node on the target image that no upgrade created: no annotation of this collection (autohealing,
        a scale-up, a hand-made replacement). Its instance is younger than the old nodes'."""
        node = self.add_node(name, group_id, image, control_plane=self.groups[group_id].role == "control-plane",
                             cached=False)
        self.instances[group_id][-1].created_at = self.now - created_ago
        return node

    def _known(self, name, group_id, image, control_plane):
        self.node_group[name], self.node_image[name] = group_id, image
        if control_plane:
            ip = self.nodes[name]["status"]["addresses"][0]["address"]
            self.members[name] = dict(node=name, ip=ip, healthy=True)

    def plan(self, options, **kw):
        return core.plan_upgrade(list(copy.deepcopy(list(self.nodes.values()))), options,
                                 groups=[copy.copy(g) for g in self.groups.values()],
                                 instances={k: list(v) for k, v in self.instances.items()}, now=self.now, **kw)

    # -- the executor's outside worlds, in memory ------------------------------------------------------
    def executor(self, options, take=None, etcd_delegated=False, etcd_health=False, journaled=False, access=None,
                 cached_nodes=False, **settings):
        """The production executor (module_utils/executor.py) wired to this world. `take(kind, item)`
        returning False kills the run at that moment (the step does not happen, nor anything after it).
        Every executor reads the world's journal (`records`) back as a resumed run does, and its record_created
        merges into it as the journal does (report.merge). etcd_health: True gives the executor the world's etcd health
        port, a callable gives it that one.
        journaled: each record is written after a kill gate of kind "record" (a kill between a create and its
        record). access: the production CloudAccess between the executor and the world, listing a steady group every
        `access` seconds of world time (see the module docstring). cached_nodes (True, or a CachedNodes of this world):
        the Nodes are read as the production Node cache gives them (one copy per change, handed out again until the
        Node changes, and checked unchanged by those who read it), not as a fresh copy of every Node per read."""
        take = take or (lambda kind, item: True)
        world = self
        cached = cached_nodes if isinstance(cached_nodes, CachedNodes) else CachedNodes(world) if cached_nodes else None

        class Kube:
            def list_nodes(self):
                if cached is not None:
                    return cached.read()
                return copy.deepcopy(list(world.nodes.values()))

            def nodes_version(self):
                # Changes with any change to any Node (the production cache's generation), so that the executor
                # takes its last plan again exactly when nothing of the Nodes changed.
                return json.dumps(world.nodes, sort_keys=True, default=str)

            def write_node(self, node, entry):
                name = node["metadata"]["name"]
                world.gate(take, "patch", name, entry)
                outcome = world.patch_node(name, entry)
                world.acted("patch", name)
                return outcome

            def uncordon(self, name):
                world.gate(take, "uncordon", name)
                if name in world.nodes:
                    world.nodes[name]["spec"]["unschedulable"] = False
                world.acted("uncordon", name)

            def drain(self, name):
                world.gate(take, "drain", name)
                world.check_drain(name)
                world.nodes[name]["spec"]["unschedulable"] = True
                world.drained.add(name)
                world.acted("drain", name)
                return dict(drained=True, evicted=[], reason="drained")

            def delete_node(self, node):
                name = node["metadata"]["name"]
                world.gate(take, "delete-node", name)
                world.check_delete(name)
                world.nodes.pop(name, None)
                world.acted("delete-node", name)
                return True

        class Cloud:
            def read(self, scaling_groups):
                return ([copy.copy(g) for g in world.groups.values()],
                        {k: [copy.copy(i) for i in v] for k, v in world.instances.items()}, {})

            def normalize(self, provider_id):
                return core.default_normalize(provider_id)

            def set_setting(self, group_id, name, value):
                world.gate(take, "setting", group_id, (name, value))
                world.groups[group_id].settings[name] = value
                world.acted("setting", group_id)

            def set_group_image(self, group_id, image):
                world.gate(take, "image", group_id)
                world.groups[group_id].image = image
                world.acted("image", group_id)

            def create(self, group_id, count):
                created = []
                for _number in range(count):
                    world.gate(take, "create", group_id)
                    how = (world.refusing.get(group_id) or [0, None])[1]
                    if how == "now":
                        world.refused.append((world.ticks, group_id, how, None))
                        world.acted("create", group_id)
                        return created, QUOTA_WORDS
                    world.counter += 1
                    name = "n%d" % world.counter
                    inst = Instance(provider_id="gce://p/z/" + name, node_name=name, group_id=group_id,
                                    image=world.groups[group_id].image, state=CREATING, created_at=world.now, name=name)
                    if how in ("late", "failed"):
                        inst.extra = {REFUSED_FOR: QUOTA_WORDS}
                        world.refused.append((world.ticks, group_id, how, inst.provider_id))
                    world.instances[group_id].append(inst)
                    world.resize(group_id, 1)
                    world.created.append(group_id)
                    world.created_ids.add(inst.provider_id.lower())
                    created.append(copy.copy(inst))
                    world.acted("create", group_id)
                return created, ""

            def delete(self, provider_ids):
                deleted = []
                for provider_id in provider_ids:
                    inst = world.instance_by_id(provider_id)
                    if world.linger is not None and (inst is None or inst.state == DELETING):
                        continue   # as CloudAccess.delete: already gone, or the cloud deletes it already
                    world.gate(take, "delete-instance", provider_id)
                    world.check_delete_instance(provider_id)
                    if inst is not None:
                        world.resize(inst.group_id, -1)
                    world.delete_instance(provider_id)
                    deleted.append(provider_id)
                    world.acted("delete-instance", provider_id)
                return deleted

        def etcd(item, endpoints, expected_member_count):
            world.gate(take, "etcd", item["name"])
            outcome = world.remove_member(item)
            world.acted("etcd", item["name"])
            return outcome

        cloud = Cloud()
        if access is not None:
            # Both intervals `access` (a tick is 60 s): a group is listed again only on an event of its own
            # (a write, an operation's end, a Node's change), which is what the production rule relies on.
            cloud = cloud_access.CloudAccess(WorldProvider(self, cloud), clock=lambda: world.now, steady_reread=access,
                                             busy_reread=access)
        self.journal = []
        recorded = dict(created=self.records.get("instances_created"), start_counts=self.records.get("start_counts"),
                        removed_first=self.records.get("removed_first"), refills=self.records.get("refills"),
                        intents=self.records.get("create_intents"))
        ex = executor.Executor(executor.Settings(options, **dict(recorded, **settings)), Kube(), cloud,
                               etcd=None if etcd_delegated else etcd, journal=self.journal.append,
                               clock=lambda: world.now, sleep=world.tick,
                               etcd_health=self.etcd_health if etcd_health is True else (etcd_health or None))

        def record_created(record):
            if journaled:
                world.gate(take, "record", ",".join(sorted(record)), record)
            report.merge(world.records, copy.deepcopy(record))
            if journaled:
                world.acted("record", ",".join(sorted(record)))
        ex.record_created = record_created
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

    def gate(self, take, kind, item, detail=None):
        for hook in self.before:
            hook(kind, item, detail)
        if not take(kind, item):
            raise Killed("killed before %s %s" % (kind, item))

    def acted(self, kind, item):
        for hook in self.after:
            hook(kind, item)

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
        for key, value in (entry.get("annotations") or {}).items():
            if value is None:
                ann.pop(key, None)
            else:
                ann[key] = value
        for key, value in (entry.get("labels") or {}).items():   # a merge patch: None removes the label
            if value is None:
                node["metadata"]["labels"].pop(key, None)
            else:
                node["metadata"]["labels"][key] = value
        if "taints" in entry or entry.get("drop_taints"):
            # As node_state.write_node: wanted taints added (by key and effect), dropped keys taken off.
            taints = node_state.pending_changes(node, entry)[2]
            if taints is not None:
                node["spec"]["taints"] = taints
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

    def instance_by_id(self, provider_id):
        for items in self.instances.values():
            for inst in items:
                if inst.provider_id.lower() == (provider_id or "").lower():
                    return inst
        return None

    def instance_of(self, name):
        """The listed instance of Node `name` (None when the cloud no longer lists it)."""
        node = self.nodes.get(name)
        return self.instance_by_id(node["spec"]["providerID"]) if node is not None else None

    def delete_instance(self, provider_id):
        """The cloud deletes an instance: at once, or (with `linger`) listed DELETING for some ticks first."""
        ticks = self.linger() if self.linger is not None else 0
        inst = self.instance_by_id(provider_id)
        if ticks <= 0 or inst is None:
            self._drop_instance(provider_id)
            self._gone(provider_id)
            return
        inst.state = DELETING
        self.leaving[provider_id.lower()] = ticks

    def _gone(self, provider_id):
        """An instance is no longer listed: a loss the world caused is replaced by the group (with `autoheal`)."""
        for loss in self.losses:
            if loss.get("provider_id", "").lower() == provider_id.lower() and self.autoheal and not loss["replacement"]:
                loss["replacement"] = self.scale_up(loss["group"], "a")

    def scale_up(self, group_id, prefix="s"):
        """The group creates an instance by itself (autohealing, someone else's scale-up), on the group's image: a
        foreign node once it joins. Returns its name."""
        self.counter += 1
        name = "%s%d" % (prefix, self.counter)
        self.scale_ups.append(dict(group=group_id, name=name, autoheal=prefix == "a"))
        if prefix != "a":
            self.resize(group_id, 1)
        self.instances[group_id].append(Instance(provider_id="gce://p/z/" + name, node_name=name, group_id=group_id,
                                                 image=self.groups[group_id].image, state=CREATING,
                                                 created_at=self.now, name=name))
        return name

    # -- the etcd cluster ------------------------------------------------------------------------------
    def remove_member(self, item):
        """The executor's etcd port: remove the member of item["node_ip"]; while another member is unhealthy it
        waits (as etcd.MemberRemoval with on_refusal="wait")."""
        target = next((m for m, v in self.members.items() if v["ip"] == item.get("node_ip")), None)
        if target is None:
            self.etcd_removed.add(item["name"])
            return None
        sick = sorted(m for m, v in self.members.items() if m != target and not v["healthy"])
        if sick:
            return dict(waiting=True, waiting_on=sick, msg="etcd member(s) %s unhealthy: not removing %s"
                        % (", ".join(sick), target))
        del self.members[target]
        self.etcd_removed.add(item["name"])
        return None

    def etcd_health(self, endpoints=None):
        """The executor's etcd health port: one problem per unhealthy member."""
        return [dict(member=m, node_ip=v["ip"], message="member %s is unhealthy" % m)
                for m, v in sorted(self.members.items()) if not v["healthy"]]

    def set_member_health(self, member, healthy):
        if member in self.members:
            self.members[member]["healthy"] = healthy

    # -- what the world does to the cluster by itself -----------------------------------------------------
    def kill_instance(self, name, state, ready_for=1, gone_after=None):
        """Node `name`'s instance dies (`state`: STOPPED, FAILED or DELETING): the Node still reads Ready for
        `ready_for` ticks, then NotReady (and its etcd member unhealthy) for good; `gone_after` ticks from now
        (default: a tick after the Node turned NotReady, maybe before) the cloud deletes the instance (lingering as
        any deletion), and with `autoheal` the group replaces it."""
        inst = self.instance_of(name)
        if inst is None:
            return None
        inst.state = state
        loss = dict(group=self.node_group.get(name, inst.group_id), node=name, kind="instance died",
                    provider_id=inst.provider_id, replacement=None)
        self.losses.append(loss)
        self.dying.append(dict(ready=ready_for, gone=ready_for + 1 if gone_after is None else gone_after, loss=loss))
        return loss

    def blip(self, name, ticks):
        """Node `name` reads NotReady for `ticks` ticks (a kubelet or network hiccup), then Ready again."""
        node = self.nodes.get(name)
        if node is None:
            return None
        node["status"]["conditions"][0].update(status="False", lastTransitionTime=core.format_time(self.now))
        self.down[name] = ticks
        loss = dict(group=self.node_group.get(name), node=name, kind="NotReady", replacement=None)
        self.losses.append(loss)
        return loss

    def ready_schedulable(self, name):
        node = self.nodes.get(name)
        return bool(node is not None and node["status"]["conditions"][0]["status"] == "True"
                    and not node["spec"].get("unschedulable"))

    def active_losses(self, group_id):
        """World-caused losses of a group that still count: a Node NotReady for a while, or a dead instance
        whose replacement is not Ready and schedulable yet."""
        count = 0
        for loss in self.losses:
            if loss["group"] != group_id:
                continue
            if loss["kind"] == "NotReady":
                count += loss["node"] in self.down
            else:
                count += not (loss["replacement"] and self.ready_schedulable(loss["replacement"]))
        return count

    def tick(self, seconds=60.0):
        """Time passes: booting instances run, running ones register their Node, Nodes become Ready; what the
        world was set to do meanwhile happens (lingering deletions end, dying instances go, hiccups pass)."""
        self.now += seconds
        self.ticks += 1
        for name in list(self.down):
            if self.down[name] is not None:
                self.down[name] -= 1
                if self.down[name] <= 0:
                    del self.down[name]
        for name, node in self.nodes.items():
            ready = node["status"]["conditions"][0]
            if ready["status"] != "True" and name not in self.down:
                ready.update(status="True", lastTransitionTime=core.format_time(self.now))
        for gid in list(self.refusing):
            self.refusing[gid][0] -= 1
            if self.refusing[gid][0] <= 0:
                del self.refusing[gid]
        for gid, items in self.instances.items():
            for inst in items:
                if inst.extra.get(REFUSED_FOR) and inst.state == CREATING:
                    if (inst.provider_id, "failed") in {(r[3], r[2]) for r in self.refused}:
                        inst.state = FAILED    # Azure: the allocation failed, for good
                        continue
                    if gid in self.refusing:
                        continue               # GCE retries it while the quota lasts
                    inst.extra = {}            # the quota freed: created after all
                if inst.state == CREATING:
                    inst.state = RUNNING
                elif inst.state == RUNNING and inst.node_name not in self.nodes:
                    group = self.groups[gid]
                    node = make_node(inst.node_name, None, None, control_plane=group.role == "control-plane",
                                     ready=False, prefix=self.prefix, ip=self.next_ip())
                    node["spec"]["providerID"] = inst.provider_id
                    node["metadata"]["creationTimestamp"] = core.format_time(self.now)
                    self.nodes[inst.node_name] = node
                    self._known(inst.node_name, gid, inst.image, group.role == "control-plane")
        for timeline in list(self.dying):
            timeline["ready"] -= 1
            timeline["gone"] -= 1
            loss = timeline["loss"]
            if timeline["ready"] == 0 and loss["node"] in self.nodes:
                self.down[loss["node"]] = None
                self.nodes[loss["node"]]["status"]["conditions"][0].update(
                    status="False", lastTransitionTime=core.format_time(self.now))
                self.set_member_health(loss["node"], False)
            if timeline["gone"] == 0 and self.instance_by_id(loss["provider_id"]) is not None:
                self.delete_instance(loss["provider_id"])
            if timeline["ready"] <= 0 and timeline["gone"] <= 0:
                self.dying.remove(timeline)
        for provider_id in list(self.leaving):
            self.leaving[provider_id] -= 1
            if self.leaving[provider_id] <= 0:
                del self.leaving[provider_id]
                self._drop_instance(provider_id)
                self._gone(provider_id)
        if self.ccm:
            # The cloud controller manager deletes the Nodes whose instance the cloud no longer lists (after
            # `ccm_delay` more ticks: till then such a Node still reads as it did).
            listed = {i.provider_id.lower() for items in self.instances.values() for i in items}
            for name in [n for n, node in self.nodes.items() if node["spec"]["providerID"].lower() not in listed]:
                self.unlisted[name] = self.unlisted.get(name, 0) + 1
                if self.unlisted[name] > self.ccm_delay:
                    del self.nodes[name]


class _NoCallRate:
    @staticmethod
    def stats():
        return None


class WorldProvider(base.CloudProvider):
    """A cloud provider over a World, for the production CloudAccess: it reads the world as the clouds' listings do
    (copies), and acts through the world's own cloud port `port` (its kill gates, checks and refusals)."""

    call_rate = _NoCallRate()

    # Writes return once the world took them, as the clouds' do (issue 22): a create's instance named at once or, every
    # other one, only by the next follow_operations (AWS, Azure and regional GCE learn it later); a deletion followed
    # there too.
    creates_without_waiting = True
    deletes_without_waiting = True

    def __init__(self, world, port):   # pylint: disable=super-init-not-called
        self.world, self.port = world, port
        # The operations it follows live as long as the run's provider does: across slices (the run builds its
        # executor once), not across a kill (a killed run's successor knows only the journal: forget_operations).
        self.ended = world.operations

    def reading(self):
        return contextlib.nullcontext()

    def list_groups(self, group_ids=None):
        return [copy.copy(g) for gid, g in sorted(self.world.groups.items()) if not group_ids or gid in group_ids]

    def list_instances(self, group_id):
        return [copy.copy(i) for i in self.world.instances[group_id]]

    def create_instance(self, group_id, wait=True):
        created, refusal = self.port.create(group_id, 1)
        if refusal:
            raise base.QuotaError(refusal)
        made = created[0]
        if wait or self.world.counter % 2 == 0:
            return made
        self.ended.append(base.Ended(group_id, made.name, None, "create", copy.copy(made)))
        return Instance(provider_id="", node_name="", group_id=group_id, image=made.image, state=CREATING,
                        created_at=made.created_at, name="", extra={base.PENDING: True, "listed": False})

    def follow_operations(self):
        ended = list(self.ended)
        del self.ended[:]
        return ended

    def delete_instance(self, provider_id, wait=True):
        group_id = self.group_id_of(provider_id) or ""
        deleted = bool(self.port.delete([provider_id]))
        if deleted and not wait:
            self.ended.append(base.Ended(group_id, provider_id, None, "delete"))
        return deleted

    def group_image(self, group_id):
        return self.world.groups[group_id].image

    def set_group_image(self, group_id, image):
        self.port.set_group_image(group_id, image)
        return True

    def set_run_setting(self, group_id, name, value):
        self.port.set_setting(group_id, name, value)
        return True

    def normalize_provider_id(self, provider_id):
        return core.default_normalize(provider_id)

    def validate_image(self, image):
        return image

    def instance_headroom(self, group_ids):
        return []

    def searched(self):
        return "the world"

    def group_id_of(self, provider_id):
        inst = self.world.instance_by_id(provider_id)
        return inst.group_id if inst is not None else None


def group(gid, role=None, image=OLD):
    return Group(id=gid, name=gid.rsplit("/", 1)[-1], image=image, role=role)


class CachedNodes:
    """The world's Nodes as the production Node cache hands them out (node_cache.NodeStore.snapshot): a Node the world
    changed since the last read is held anew (as a watch event replaces it), and its copy is made once and handed out
    again by every read until the world changes it. Each read first checks that no copy handed out so far was changed
    by whoever read it (the executor and the planner must not: the next read would hand the change out again)."""

    def __init__(self, world, check=True):
        self.world, self.check = world, check
        self.store = node_cache.NodeStore()
        self.texts = {}      # name -> the world's Node as JSON when last held
        self.handed = {}     # id of a copy handed out -> (the copy, its JSON then)

    def refresh(self):
        """What the watch does: the store holds a new object for each Node the world changed, added or removed."""
        for name in [n for n in self.store.nodes if n not in self.world.nodes]:
            del self.store.nodes[name]
            del self.texts[name]
        for name, node in self.world.nodes.items():
            text = json.dumps(node, sort_keys=True, default=str)
            if self.texts.get(name) != text:
                self.texts[name] = text
                self.store.nodes[name] = copy.deepcopy(node)

    def read(self):
        if self.check:
            for held, text in self.handed.values():
                assert json.dumps(held, sort_keys=True, default=str) == text, (
                    "the copy of Node %s that a read gave was changed after it: %s, then %s" % (
                        held["metadata"]["name"], text, json.dumps(held, sort_keys=True, default=str)))
        self.refresh()
        nodes = self.store.snapshot()
        if self.check:
            self.handed = {id(n): self.handed.get(id(n)) or (n, json.dumps(n, sort_keys=True, default=str))
                           for n in nodes}
            # What the read gave is the world as it is now: no copy kept past its Node's change.
            assert [self.handed[id(n)][1] for n in nodes] == [self.texts[name] for name in sorted(self.texts)], (
                "a read gave a copy of a Node older than the world's")
        return nodes
