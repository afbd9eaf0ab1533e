# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""What the planner reads, made once per plan: the options, the cloud's answer in scope (groups, instances by
providerID, errors), the journal's record (instances created, recovered create intents, start counts, delete-first
removals and refills) and the control plane's health. Every step of the planner takes it as it is; nothing here
changes after read_inputs() (pure: no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.crosschecks import TRAIL_OBSOLETE, CloudView, trail_with
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import (
    DELETING, FAILED, RUNNING, STOPPED,
)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.vocabulary import (
    INTENT_WINDOW, PHASE_HEIR, AnnotationKeys, NodeInfo, Options, format_time, parse_time, same,
)

# control_plane_health where etcd is read through another host (rolling_upgrade_etcd_delegate_to) and no fresh read is
# at hand: a control-plane heir waits for one, and the facts say it is due (etcd_health_due).
HEALTH_UNREAD = "unread"


def group_key(group_id):
    return (group_id or "").strip().lower()


def _int(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def recorded_per_intent(created):
    """{intent key: how many instances the journal's instances_created records under it}."""
    recorded = {}
    for entry in created.values():
        if isinstance(entry, dict) and entry.get("intent"):
            recorded[entry["intent"]] = recorded.get(entry["intent"], 0) + 1
    return recorded


@dataclass
class PlanInputs:
    """The planner's inputs, as read_inputs() makes them (see core.plan_upgrade for each one's meaning)."""

    keys: AnnotationKeys
    options: Options
    target: str                           # the image, stripped
    now: float
    stamp: str                            # `now` as the annotations write it
    normalize: object                     # providerID -> the spelling instances are matched by
    infos: List[NodeInfo]                 # the nodes, by name
    cloud_consulted: bool                 # groups were given (else only cached annotations say where a node is)
    scope_keys: Optional[set]             # group keys in scope, None: all
    group_errors: Dict[str, str]          # group key -> why it could not be read
    group_index: Dict[str, object]        # group key -> Group, in scope
    instance_lists: Dict[str, list]       # group key -> [Instance], for every group listed in scope
    by_provider_id: Dict[str, object]     # normalized providerID -> Instance
    cloud_view: CloudView                 # the same instances, for the cross-checks
    proof: bool                           # a journal was given: only what it proves ours becomes a heir or surplus
    created: Dict[str, dict]              # normalized providerID -> the journal's record (and recovered intents)
    intents: Dict[str, dict]
    start_counts: Dict[str, int]          # group key -> nodes at the start
    removed_first: Dict[str, dict]
    refills: Dict[str, str]
    health: object                        # [problem], None (not read) or HEALTH_UNREAD
    recovered: Dict[str, dict] = field(default_factory=dict)   # providerID -> record: what open intents account for
    # group key -> (instances of this upgrade among them, [providerID]): instances open intents account for, which
    # cannot be told apart from the cloud's own made in the same window (recover_intents)
    unclaimed: Dict[str, tuple] = field(default_factory=dict)
    decided: Dict[str, dict] = field(default_factory=dict)     # intent key -> {grown, unclaimed}: to record

    # 1b. Creations a kill cut off between the cloud's create and its record: the intent recorded before the
    #     call names the group and the moment; the cloud's own creation time names the instance.
    def recover_intents(self):
        """Claim, for each group, the instances its open create intents account for. Where the group's windows hold
        more unclaimed instances than its open intents leave open, they cannot be told apart: an instance the cloud
        made by itself in the second of a create (an autohealed heir's replacement, someone's scale-up that the
        target size does not tell apart) would read as ours and could become a heir or surplus. Then none is
        claimed: none becomes a heir or surplus until a record tells them apart (a live run records its create a
        moment later), and as many as the intents leave open hold a surge slot each (`unclaimed`): they are this
        upgrade's instances, wherever they are. What is found of an intent is recorded in it (`decided`, the journal's
        create_intents[key]: `grown`, how many the group grew by for it, and `unclaimed`) and kept from then on: the
        group's growth since the intent, which tells how many the create made, no longer says it once this upgrade
        deleted instances of the group."""
        claimed = set(self.created)
        recorded = recorded_per_intent(self.created)
        by_group, held = {}, {}
        for key, intent in sorted(self.intents.items(), key=lambda kv: (str(kv[1].get("at")), kv[0])):
            at, gkey = parse_time(intent.get("at")), group_key(intent.get("group"))
            made = intent.get("settled", intent.get("count"))
            if at is None or not gkey or not isinstance(made, int) or isinstance(made, bool):
                continue
            found = intent.get("unclaimed")
            if isinstance(found, dict):
                open_count = _int(found.get("open")) - (recorded.get(key, 0) - _int(found.get("recorded")))
                if open_count > 0:
                    held.setdefault(gkey, []).append((open_count, [str(p) for p in found.get("among") or []]))
                continue
            grown = made if "settled" in intent else intent.get("grown")
            if not isinstance(grown, int) or isinstance(grown, bool):
                grown = min(made, self.grown_since(key, intent, gkey, at, made))
                if grown > 0 and self.sized(intent, gkey):
                    # Kept: once this upgrade deletes instances of the group, its growth since no longer says it.
                    # (A settled intent needs none: its call returned, and `settled` says how many it made.)
                    self.decided.setdefault(key, {})["grown"] = grown
            open_count = min(made, grown) - recorded.get(key, 0)
            if open_count > 0:
                by_group.setdefault(gkey, []).append((key, at, open_count))
        for gkey, open_intents in sorted(by_group.items()):
            windows = [(key, [i for i in self.instance_lists.get(gkey, []) if self.normalize(i.provider_id) not in claimed
                              and i.created_at is not None and at <= i.created_at <= at + INTENT_WINDOW], open_count)
                       for key, at, open_count in open_intents]
            candidates = sorted({i.provider_id for dummy, fresh, dummy2 in windows for i in fresh})
            if len(candidates) > sum(open_count for dummy, dummy2, open_count in windows):
                for key, dummy, open_count in windows:
                    self.decided.setdefault(key, {})["unclaimed"] = dict(open=open_count, recorded=recorded.get(key, 0),
                                                                         among=candidates)
                    held.setdefault(gkey, []).append((open_count, candidates))
                continue
            for key, fresh, open_count in windows:
                fresh = sorted((i for i in fresh if self.normalize(i.provider_id) not in claimed),
                               key=lambda i: (i.created_at, i.provider_id))
                for inst in fresh[:open_count]:
                    entry = dict(group=inst.group_id, created=format_time(inst.created_at), intent=key)
                    claimed.add(self.normalize(inst.provider_id))
                    self.created[self.normalize(inst.provider_id)] = entry
                    self.recovered[inst.provider_id] = entry
        for gkey, found in sorted(held.items()):
            # Those still listed and not claimed since (an instance deleted in the cloud frees its slot).
            listed = {self.normalize(i.provider_id): i.provider_id for i in self.instance_lists.get(gkey, [])}
            among = sorted({listed[self.normalize(p)] for dummy, ids in found for p in ids
                            if self.normalize(p) in listed and self.normalize(p) not in claimed})
            count = min(sum(open_count for open_count, dummy in found), len(among))
            if count > 0:
                self.unclaimed[gkey] = (count, among)

    def sized(self, intent, gkey):
        """Whether the intent and the group both give a target size (grown_since reckons growth, not `made`)."""
        group = self.group_index.get(gkey)
        return all(isinstance(v, int) and not isinstance(v, bool)
                   for v in (intent.get("target_size"), group.target_size if group is not None else None))

    def grown_since(self, key, intent, gkey, at, made):
        """How many instances the intent's create may have made: by how much the group's target size grew since the
        intent recorded it, less the instances of this upgrade's other creates stamped since. The cloud stamps
        creation times to the second (AWS LaunchTime), so an instance the group made by itself (autohealing) in the
        second of a create that a kill cut off before the call reads as that create; autohealing replaces an
        instance without growing the target size, our create grows it. (Someone else's scale-up in that very second
        grows it too and is still not told apart.) `made` where either size is unknown (an older journal, a cloud
        that reports none): the time window alone, as before."""
        before, group = intent.get("target_size"), self.group_index.get(gkey)
        now = group.target_size if group is not None else None
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (before, now)):
            return made
        # The others that grew the group after this intent's size was read: the creates recorded after it (their
        # `after` names it; an instance of an earlier create stamped in the same second is in `before` already), or,
        # where an intent of the group has no `after` (an older journal), any stamped since its second.
        mine = [v for v in self.intents.values() if group_key(v.get("group")) == gkey]
        if all(isinstance(v.get("after"), list) for v in mine):
            # Counted from the journal, not the listing: a later create's instance that died since and was
            # autohealed (replaced without the target size shrinking) still grew the group.
            later = {k: v for k, v in self.intents.items() if isinstance(v.get("after"), list) and key in v["after"]}
            recorded = recorded_per_intent(self.created)
            others = sum(max(recorded.get(k, 0), _int(v.get("settled", v.get("grown")))) for k, v in later.items())
            return max(0, now - before - others)
        others = 0
        for inst in self.instance_lists.get(gkey, []):
            entry = self.created.get(self.normalize(inst.provider_id))
            if entry is not None and entry.get("intent") != key and inst.created_at is not None and inst.created_at >= at:
                others += 1
        return max(0, now - before - others)

    def unhealthy_member(self, state):
        """The control plane's named etcd problem on `state`'s member (matched by its InternalIP), or None."""
        ips = set(state.info.internal_ips)
        return next((p for p in self.health_read() if p.get("node_ip") and p["node_ip"] in ips), None)

    def health_read(self):
        """The etcd problems read, [] when none was read (or none is at hand yet)."""
        return [] if self.health in (None, HEALTH_UNREAD) else self.health

    def donor_reason(self, state):
        """Why `state` is the donor chosen now (the order of donor_order), in words."""
        problem = self.unhealthy_member(state)
        if not state.info.ready:
            return "it is not Ready"
        if problem is not None:
            return "its etcd member is unhealthy: %s" % (problem.get("message") or "unhealthy")
        return "the oldest outdated node of its group"

    def donor_order(self, state):
        inst = self.instance_of(state)
        created = inst.created_at if inst is not None and inst.created_at is not None else float("inf")
        return (state.info.ready and self.unhealthy_member(state) is None, created, state.name)

    def created_by_us(self, state):
        """The journal's record of `state`'s instance when this upgrade created it in the node's own scaling
        group (or an open create intent accounts for it), else None."""
        entry = self.created.get(self.normalize(state.info.provider_id)) if state.info.provider_id else None
        if entry is None or not entry.get("group") or not same(entry.get("group"), state.group_id):
            return None
        return entry

    def ours(self, state):
        """Whether `state` may serve as a heir or be removed as surplus: with a journal, only what it proves this
        upgrade created; without one (a module on its own), a heir this collection wrote or a node whose image
        was never cached (the older rule)."""
        if self.proof:
            return self.created_by_us(state) is not None
        return state.phase == PHASE_HEIR or self.keys.image not in state.info.annotations

    def running(self, state):
        """Whether the cloud says `state`'s instance runs (always, where the cloud was not read)."""
        inst = self.instance_of(state)
        return not self.cloud_consulted or (inst is not None and inst.state == RUNNING)

    def alive(self, state):
        """Whether the cloud may still run `state`'s instance: listed (where every group was read), and not as
        deleting, stopped or failed. A Node whose instance is gone is no heir, however Ready it still reads."""
        inst = self.instance_of(state)
        if inst is None:
            return not self.cloud_view.complete
        return inst.state not in (DELETING, STOPPED, FAILED)

    def pair_annotations(self, key, partner, phase):
        """One half of a new pair: the partner's name (under `key`), the phase and a fresh phase trail."""
        keys = self.keys
        return {key: partner, keys.phase: phase, keys.phase_since: self.stamp,
                keys.phase_history: trail_with({}, keys, phase, self.now, reset=True)}

    def obsolete_mark(self, annotations=None):
        """The annotations that mark a node obsolete, with a fresh trail (an earlier upgrade's heir, replaced before the
        mark is out of order, and the node would be left alone for good), or the trail of `annotations` carried on."""
        keys = self.keys
        trail = (trail_with({}, keys, TRAIL_OBSOLETE, self.now, reset=True) if annotations is None
                 else trail_with(annotations, keys, TRAIL_OBSOLETE, self.now))
        return {keys.obsolete: "true", keys.phase: None, keys.phase_since: self.stamp, keys.phase_history: trail}

    def instance_of(self, s):
        """The cloud's instance of node `s` as this read lists it, or None."""
        return self.by_provider_id.get(self.normalize(s.info.provider_id)) if s.info.provider_id else None


def read_inputs(nodes, options, groups, instances, group_errors, now, normalize, scope, created, start_counts,
                removed_first, refills, intents, control_plane_health):
    """The planner's inputs from plan_upgrade's arguments: validated, keyed by group, in scope, and with the
    creations that open create intents account for recovered."""
    keys = options.validate()
    inputs = PlanInputs(
        keys=keys, options=options, target=options.image.strip(), now=now, stamp=format_time(now), normalize=normalize,
        infos=sorted((n if isinstance(n, NodeInfo) else NodeInfo.from_k8s(n) for n in nodes), key=lambda n: n.name),
        **_cloud_fields(groups, instances, group_errors, scope, normalize),
        **_journal_fields(created, start_counts, removed_first, refills, intents, normalize),
        health=control_plane_health if control_plane_health in (None, HEALTH_UNREAD) else list(control_plane_health),
    )
    inputs.recover_intents()
    return inputs


def _cloud_fields(groups, instances, group_errors, scope, normalize):
    """What the cloud said, in scope and keyed by group (groups None: the cloud was not consulted)."""
    scope_keys = {group_key(g) for g in scope} if scope else None
    group_index = {group_key(g.id): g for g in groups or [] if scope_keys is None or group_key(g.id) in scope_keys}
    instance_lists = {group_key(gid): list(items or []) for gid, items in (instances or {}).items()
                      if group_key(gid) in group_index}
    listed = [i for items in instance_lists.values() for i in items]
    errors = {group_key(k): v for k, v in (group_errors or {}).items()}
    return dict(cloud_consulted=groups is not None, scope_keys=scope_keys, group_errors=errors, group_index=group_index,
                instance_lists=instance_lists, by_provider_id={normalize(inst.provider_id): inst for inst in listed},
                cloud_view=CloudView(listed, normalize, complete=groups is not None and not errors))


def _journal_fields(created, start_counts, removed_first, refills, intents, normalize):
    """What the journal recorded, the entries of a shape this collection writes (None created: no journal)."""
    return dict(
        proof=created is not None,
        created={normalize(pid): dict(entry or {}) for pid, entry in (created or {}).items()
                 if pid and isinstance(entry, dict)},
        intents={k: v for k, v in (intents or {}).items() if isinstance(v, dict)},
        start_counts={group_key(gid): value for gid, value in (start_counts or {}).items()
                      if isinstance(value, int) and not isinstance(value, bool) and value >= 0},
        removed_first={k: v for k, v in (removed_first or {}).items() if isinstance(v, dict)},
        refills={k: v for k, v in (refills or {}).items() if isinstance(v, str)},
    )
