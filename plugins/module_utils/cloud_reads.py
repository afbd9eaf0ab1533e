# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Which scaling groups a pass lists (pure: no I/O). The executor's cloud (cloud_access.CloudAccess) lists a group's
instances again only where something can have changed since its last listing (issue 22: at 300 workers in 10 groups
every group is busy in every pass, and listing each busy group every pass spent the cloud's call budget):

- a group where something this run can see happened since its last listing is listed at once: this run wrote to it (a
  create, a delete, its image or a setting), an operation this run follows there ended, or the Node watch saw a Node of
  it appear, turn Ready or NotReady, or go (changed_groups);
- a group where the cloud acts in a way no such event announces is listed again after BUSY_REREAD seconds: an
  instance being deleted (its going frees a surge slot, and nothing else says when), an instance being created that
  this run did not create, an error on an instance, an instance in a state this collection cannot read, or fewer or
  more instances than the group's target size (reread_after); where all it does is delete what this run deleted,
  once the first of those deletions is due to end (the least time this run's deletions took), then every
  DELETION_REREAD seconds (next_listing). The executor wakes for the next listing due (CloudAccess.next_listing_in);
- any other group is listed again after STEADY_REREAD seconds: every instance settled, or settled but for creates of
  this run (their operation's end and their Node's arrival are events). The clouds also act on their own (autoscalers,
  health repairs, issue 26), and that slower listing catches them.

A drain, an etcd member's removal and an instance's deletion are judged on a listing of their group made in the same
pass, not on a kept one (Executor._read_fresh before Executor.guard): a heir whose instance the cloud deletes by itself
must stop its donor's drain at once (tests/integration/test_upgrade_capacity.py
test_heir_deleted_by_the_cloud_before_its_donor_drains). So are a pairing (a heir counts only while its instance runs)
and a plan that says done (every group: the run must not end a node short): Executor.read lists those groups again
and plans once more. Those listings are of the groups the plan acts in, not of every group (CloudAccess counts them)."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import (
    CREATING, REFUSED_FOR, RUNNING, STATE_PROBLEM, STOPPED)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers.base import PENDING

# Seconds a steady group's listing is used before the group is listed again.
STEADY_REREAD = 30.0
# Seconds a listing is used while the cloud acts on the group in a way no event announces. Chiefly an instance being
# deleted: it holds its surge slot until a listing shows it gone, so each second of this interval can delay the next
# heir of its group. GCE takes about 30 s to delete an instance after deleteInstances (bench/makespan.py REALISTIC_GCE),
# so 3 s adds at most a tenth to that step (1.5 s on average, against about 1 s when every pass of about 2 s listed it),
# and lists such a group about 10 times per deletion instead of once per pass (a pass runs as often as every 0.5 s
# while pods terminate, or at once on a Node's change).
BUSY_REREAD = 3.0
# The most instance listings in flight at once (each still takes its token of the provider's call rate). At 1,000
# workers in 10 groups a wave's pass lists every group (its writes and their operations' ends): 4 at once took three
# round trips, about 1.3 s of each such pass (bench/README.md, E13), which a heir Ready meanwhile waits for.
READ_THREADS = 10
# A group where the cloud acts only by deleting instances this run deleted (and by this run's creates) is not listed
# every BUSY_REREAD: it is listed once when its first deletion is due to end (the least time this run's last
# DELETION_SAMPLES deletions took, as listings timed them), then every DELETION_REREAD seconds for DELETION_LATE
# seconds, then every BUSY_REREAD again. The instance's going frees a surge slot for the next heir (each second of lag
# delays it), and the listings before the end found nothing (bench/README.md, E13-E14).
DELETION_REREAD = 1.0
DELETION_LATE = 6.0
DELETION_SAMPLES = 20

# What a GCE managed instance reports while the group acts on it; "" / NONE when it does not.
_IDLE_ACTIONS = ("", "NONE", "UNDEFINED_CURRENT_ACTION")


def settled(instance):
    """Whether the cloud is done with this instance for now: running or stopped, no error, no action under way."""
    extra = instance.extra or {}
    if instance.state not in (RUNNING, STOPPED):
        return False
    if extra.get("errors") or extra.get(STATE_PROBLEM) or extra.get(REFUSED_FOR) or extra.get("listed") is False:
        return False
    return str(extra.get("current_action") or "").upper() in _IDLE_ACTIONS


def steady(group, instances):
    """Whether the group's listing can change only by someone acting on it: every instance settled and as many
    instances as the group's target size (a group resized up or down is still acting)."""
    if group is None or group.target_size is None:
        return False
    return len(instances) == int(group.target_size) and all(settled(i) for i in instances)


def _own_create(instance, own, normalize):
    """Whether `instance` is one this run created that the cloud is still creating, with no error: what comes next for it
    is its operation's end or its Node's arrival, which the run sees as they happen."""
    extra = instance.extra or {}
    if instance.state != CREATING or extra.get("errors") or extra.get(STATE_PROBLEM) or extra.get(REFUSED_FOR):
        return False
    return bool(extra.get(PENDING)) or bool(instance.provider_id) and normalize(instance.provider_id) in own


def reread_after(group, instances, interval=STEADY_REREAD, busy_interval=BUSY_REREAD, own=frozenset(), normalize=str):
    """Seconds the listing `instances` of `group` (as read now) serves while no event names the group: `interval` while
    the cloud does nothing there but this run's creates (`own`: their providerIDs, normalized by `normalize`), else
    `busy_interval`."""
    if group is None or group.target_size is None or len(instances) != int(group.target_size):
        return busy_interval
    if all(settled(i) or _own_create(i, own, normalize) for i in instances):
        return interval
    return busy_interval


def deleting_only(group, instances, own=frozenset(), normalize=str, deleting=None):
    """The moments this run asked the cloud to delete those of `instances` it is still deleting, when that is all the
    cloud does in `group` besides this run's creates (every other instance settled or one of this run's creates, and
    as many of them as the group's target size); else []. `deleting`: {normalized providerID: moment asked}."""
    deleting = deleting or {}
    if group is None or group.target_size is None:
        return []
    asked = [deleting[normalize(i.provider_id)] for i in instances if i.provider_id and normalize(i.provider_id) in deleting]
    others = [i for i in instances if not (i.provider_id and normalize(i.provider_id) in deleting)]
    if not asked or len(others) != int(group.target_size):
        return []
    return asked if all(settled(i) or _own_create(i, own, normalize) for i in others) else []


def next_listing(group, listed_at, instances, interval=STEADY_REREAD, busy_interval=BUSY_REREAD, own=frozenset(),
                 normalize=str, deleting=None, deletion_seconds=None):
    """The moment the listing `instances` of `group` made at `listed_at` is listed again while no event names the
    group (reread_after), or, where the cloud only deletes what this run deleted there and this run timed deletions
    (`deletion_seconds`: the least time they took), when the first is due to end (DELETION_REREAD)."""
    asked = deleting_only(group, instances, own, normalize, deleting) if deletion_seconds is not None else []
    if asked:
        end = min(asked) + deletion_seconds
        if listed_at < end:
            return end
        if listed_at < end + DELETION_LATE:
            return listed_at + DELETION_REREAD
    return listed_at + reread_after(group, instances, interval, busy_interval, own, normalize)


def due(groups, kept, changed, now, interval=STEADY_REREAD, busy_interval=BUSY_REREAD, own=frozenset(), normalize=str,
        deleting=None, deletion_seconds=None):
    """The IDs of `groups` (as read now) whose instances this pass lists. `kept`: {group ID: (listed at, Group as then
    read, [Instance])} of the last listings; `changed`: the groups where something happened since their last listing
    (a write, an operation's end, a Node's change); `own`: the normalized providerIDs of the instances this run created;
    `deleting` and `deletion_seconds`: as next_listing's."""
    listed = []
    for group in groups:
        last = kept.get(group.id)
        if (last is None or group.id in changed or now < last[0] or last[1].target_size != group.target_size
                or now >= next_listing(group, last[0], last[2], interval, busy_interval, own, normalize, deleting,
                                       deletion_seconds)):
            listed.append(group.id)
    return listed


def node_marks(nodes, normalize=str):
    """{normalized providerID: Ready} of `nodes` (NodeInfo), for changed_groups; Nodes without a providerID left out."""
    return {normalize(n.provider_id): bool(n.ready) for n in nodes if n.provider_id}


def changed_groups(before, after, where):
    """The groups where a Node appeared, turned Ready or NotReady, or went between two node_marks, by `where`
    ({normalized providerID: group ID} of the kept listings); None when such a Node is in no kept listing (its group is
    not known: every group may have changed)."""
    moved = {pid for pid in set(before) | set(after) if before.get(pid) != after.get(pid)}
    groups = {where.get(pid) for pid in moved}
    return None if None in groups else groups
