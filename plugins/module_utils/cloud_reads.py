# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Which scaling groups a pass lists (pure: no I/O). The executor's cloud (cloud_access.CloudAccess) lists a group's
instances again only where something can have changed since its last listing:

- a group that is not steady (an instance being created, deleted, stopped in between, failed or in a state this
  collection cannot read; an error on an instance; fewer or more instances than the group's target size) is listed
  every pass: the cloud is acting there;
- a group this run wrote to since its last listing (a create, a delete, its image or a setting) is listed at once;
- a steady group is listed again after STEADY_REREAD seconds: the clouds also act on their own (autoscalers, health
  repairs, issue 26), and that slower listing catches them.

A drain, an etcd member's removal and an instance's deletion are judged on a listing of their group made in the same
pass, not on a kept one (Executor._read_fresh before Executor.guard): a heir whose instance the cloud deletes by itself
must stop its donor's drain at once (tests/integration/test_upgrade_capacity.py
test_heir_deleted_by_the_cloud_before_its_donor_drains). So are a pairing (a heir counts only while its instance runs)
and a plan that says done (every group: the run must not end a node short): Executor.read lists those groups again
and plans once more."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import (
    REFUSED_FOR, RUNNING, STATE_PROBLEM, STOPPED)

# Seconds a steady group's listing is used before the group is listed again.
STEADY_REREAD = 30.0
# The most instance listings in flight at once (each still takes its token of the provider's call rate).
READ_THREADS = 4

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


def due(groups, kept, written, now, interval=STEADY_REREAD):
    """The IDs of `groups` (as read now) whose instances this pass lists. `kept`: {group ID: (listed at, Group as then
    read, [Instance])} of the last listings; `written`: the groups written to since their last listing."""
    listed = []
    for group in groups:
        last = kept.get(group.id)
        if (last is None or group.id in written or now - last[0] >= interval or now < last[0]
                or last[1].target_size != group.target_size or not steady(group, last[2])):
            listed.append(group.id)
    return listed
