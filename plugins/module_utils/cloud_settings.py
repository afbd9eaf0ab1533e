# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The settings of a scaling group with which the cloud acts on the group by itself while nodes are replaced, and
what a run does with each (pure: no I/O). The providers read them with the group (Group.settings, no extra call);
the executor sets them to their neutral value before its first change to a group and journals the values it
found, so that the run's end (finish, abort, or the next run after a kill) puts back what this run changed.

- GCE regional groups, updatePolicy.instanceRedistributionType PROACTIVE (the default): the group deletes a VM
  itself, without a drain, when its zones differ by more than one; a replacement (heir in one zone, donor
  deleted in another) can do that. Set to NONE.
- AWS AZRebalance (a scaling process, on unless suspended): after a terminate that lowers the desired capacity
  leaves the zones unbalanced, the group terminates an instance in the fullest zone. Suspended.
- AWS MinSize: a terminate that lowers the desired capacity to below MinSize is refused; removing a worker
  before its heir exists (max_unavailable) needs it lower. Lowered to what the run needs, only then.
- AWS AlarmNotification and ScheduledActions (scaling processes, on unless suspended): a scaling policy that its
  CloudWatch alarm triggers, or a scheduled action whose time comes, changes the desired capacity; a lower one
  terminates instances without a drain, a higher one launches instances the run did not ask for. Suspended on
  every group (telling whether a group has policies or scheduled actions would cost two more calls per read).
- AWS ReplaceUnhealthy (a scaling process): an instance its health check marks unhealthy is terminated without a
  drain and another launched; with ELB health checks, a node the run drains can fail them, and the group then
  launches an instance the plan does not count. Suspended on every group.
- GCE autoscalingPolicy.mode of an autoscaler attached to the group (the group names it in status.autoscaler):
  the autoscaler sets the group's target size itself; a scale-in deletes VMs without a drain, and it undoes the
  run's surge. Set to OFF, not ONLY_SCALE_OUT: a scale-out adds VMs the plan did not count (the run would delete
  them as surplus), and a surge the autoscaler does not expect is exactly what it scales in. The cluster-
  autoscaler is likewise paused in both directions.
- Azure autoscale settings (Microsoft.Insights/autoscalesettings) whose targetResourceUri is the scale set, when
  enabled: Azure sets the scale set's capacity itself, and a scale-in deletes VMs without a drain. Disabled
  (enabled false). When the identity may not read autoscale settings the run is refused: whether one would act
  cannot be told; unless the user says to go on without them (rolling_upgrade_allow_unreadable_autoscale), and the
  run then names each such scale set in a warning and in the report (`unread`).
- Azure overprovision (Uniform scale sets; on when the field is unset): a scale-out creates more VMs than asked and
  deletes the extras once enough run; an extra can join as a Node, be taken as the heir, and go undrained. Off.
- Azure automaticRepairsPolicy.enabled: an unhealthy VM is replaced (deleted, a new one created on the latest
  model); a drained node can read unhealthy, and its replacement is an instance the plan does not count. Off.
- Azure upgradePolicy.mode Automatic: once the model's image changes, the scale set upgrades its VMs itself,
  possibly all at once. Set to Manual. Rolling is refused: it goes with health probes and automatic OS image
  upgrades that the user relies on, which Manual would switch off; the user decides."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import vocabulary

GCE_REDISTRIBUTION = "updatePolicy.instanceRedistributionType"
AWS_AZ_REBALANCE = "AZRebalance"
AWS_MIN_SIZE = "MinSize"
AZURE_UPGRADE_POLICY = "upgradePolicy.mode"
AWS_ALARM_NOTIFICATION = "AlarmNotification"
AWS_SCHEDULED_ACTIONS = "ScheduledActions"
AWS_REPLACE_UNHEALTHY = "ReplaceUnhealthy"
GCE_AUTOSCALER = "autoscalingPolicy.mode"
AZURE_AUTOSCALE = "autoscaleSettings.enabled"
AZURE_OVERPROVISION = "overprovision"
AZURE_REPAIRS = "automaticRepairsPolicy.enabled"
# Its value when the autoscale settings could not be read (no permission).
UNREADABLE = "unreadable"
# The permission that reads them, and the role variable that lets a run go on without reading them.
AUTOSCALE_READ = "Microsoft.Insights/autoscalesettings/read"
ALLOW_UNREADABLE = "rolling_upgrade_allow_unreadable_autoscale"
# The AWS scaling processes a run suspends, each with its own entry.
AWS_PROCESSES = (AWS_AZ_REBALANCE, AWS_ALARM_NOTIFICATION, AWS_SCHEDULED_ACTIONS, AWS_REPLACE_UNHEALTHY)

# What the cloud does with each setting's default, in the run's messages and the report.
WHY = {
    GCE_REDISTRIBUTION: "GCE would delete a VM itself, without a drain, whenever a replacement leaves the group's "
                        "zones more than one VM apart",
    AWS_AZ_REBALANCE: "AWS would terminate an instance itself, without a drain, whenever a replacement leaves the "
                      "group's zones unbalanced",
    AWS_MIN_SIZE: "AWS refuses to remove a worker before its heir exists (max_unavailable) while the group is at "
                  "its MinSize",
    AWS_ALARM_NOTIFICATION: "a scaling policy triggered by its alarm would change the group's desired capacity, "
                            "terminating instances without a drain or launching ones the run did not ask for",
    AWS_SCHEDULED_ACTIONS: "a scheduled action whose time comes would change the group's size, terminating instances "
                           "without a drain or launching ones the run did not ask for",
    AWS_REPLACE_UNHEALTHY: "AWS would terminate an instance its health check marks unhealthy, without a drain, and "
                           "launch another; with ELB health checks a drained node can fail them",
    GCE_AUTOSCALER: "the autoscaler attached to the group would resize it itself, deleting VMs without a drain and "
                    "undoing the run's surge",
    AZURE_AUTOSCALE: "the autoscale setting on the scale set would change its capacity itself, deleting VMs without "
                     "a drain and undoing the run's surge",
    AZURE_OVERPROVISION: "Azure would create extra VMs on each scale-out and delete them again, without a drain, "
                         "possibly the one taken as the heir",
    AZURE_REPAIRS: "Azure would replace a VM its health probe finds unhealthy (a drained node can be), without a drain, "
                   "with a VM the run did not ask for",
    AZURE_UPGRADE_POLICY: "Azure would upgrade the scale set's VMs itself, possibly all at once, once its model's "
                          "image changes",
}
# How to keep a setting as it is: take the group out of the run, or change it yourself first.
OPT_OUT = ("to keep it, leave the group out of the run (rolling_upgrade_scaling_groups) and replace its nodes another "
           "way")


def key_of(group, name):
    """The journal's key of one group's setting."""
    return "%s|%s" % (group, name)


def _neutral(name, value, size, unavailable):
    """(the value a run needs, or None when `value` is fine, and the refusal text or None)."""
    if name == GCE_REDISTRIBUTION:
        return (None if value == "NONE" else "NONE"), None
    if name in AWS_PROCESSES:
        return (None if value == "suspended" else "suspended"), None
    if name == GCE_AUTOSCALER:
        return (None if value == "OFF" else "OFF"), None
    if name == AWS_MIN_SIZE:
        if not unavailable or size is None or value is None:
            return None, None
        needed = max(0, int(size) - int(unavailable))
        return (needed if int(value) > needed else None), None
    if name == AZURE_AUTOSCALE:
        if value == UNREADABLE:
            return None, ("its autoscale settings could not be read (the identity needs %s, as in the Monitoring "
                          "Reader role): an enabled one would change the scale set's capacity during the run, deleting "
                          "VMs without a drain. Grant that permission and Microsoft.Insights/autoscalesettings/write, "
                          "or, when you know no autoscale setting targets the scale set, set %s to true (the run goes "
                          "on with a warning)" % (AUTOSCALE_READ, ALLOW_UNREADABLE))
        return (None if value == "false" else "false"), None
    if name in (AZURE_OVERPROVISION, AZURE_REPAIRS):
        return (None if value == "false" else "false"), None
    if name == AZURE_UPGRADE_POLICY:
        if value == "Rolling":
            return None, ("its upgradePolicy.mode is Rolling: Azure would replace its VMs itself, in batches, once the "
                          "model's image changes, and a Rolling policy goes with health probes or automatic OS image "
                          "upgrades that Manual would switch off, so this collection does not change it. Set "
                          "upgradePolicy.mode to Manual yourself (az vmss update --set upgradePolicy.mode=Manual) and "
                          "set it back after the run, or leave the group out (rolling_upgrade_scaling_groups)")
        return (None if value == "Manual" else "Manual"), None
    return None, None


def judge(groups, recorded, unavailable_of, allow_unreadable=False):
    """What a pass does with the settings of `groups` (Group values in scope): a dict of `changes` (a setting to set to
    its neutral value and to journal first: {group, name, original, neutral}), `again` (a setting this upgrade
    journaled that is off its neutral value again: set again, journaled already), `refusals` (texts, one per
    setting that cannot be changed safely) and `unread` (a setting whose value could not be read, which
    `allow_unreadable` lets the run leave unread instead of refusing: {group, name, text}). `recorded` is the
    journal's cloud_settings; `unavailable_of(group)` how many of its nodes the run may remove before their heir
    exists."""
    changes, again, refusals, unread = [], [], [], []
    for group in groups:
        for name, value in sorted((getattr(group, "settings", None) or {}).items()):
            entry = recorded.get(key_of(group.id, name))
            if entry and not entry.get("restored"):
                if value != entry.get("neutral"):
                    again.append(dict(group=group.id, name=name, original=entry.get("original"), neutral=entry.get("neutral")))
                continue
            neutral, refusal = _neutral(name, value, group.target_size, unavailable_of(group))
            if refusal and value == UNREADABLE and allow_unreadable:
                unread.append(dict(group=group.id, name=name, text=_unread_text(group.id, name)))
            elif refusal:
                refusals.append("scaling group %s: %s" % (group.id, refusal))
            elif neutral is not None:
                changes.append(dict(group=group.id, name=name, original=value, neutral=neutral))
    return dict(changes=changes, again=again, refusals=refusals, unread=unread)


def _unread_text(group, name):
    return ("scaling group %s: its %s could not be read (the identity lacks %s) and the run goes on without them (%s): "
            "an enabled autoscale setting on it may change its capacity during the run, deleting VMs without a drain"
            % (group, name, AUTOSCALE_READ, ALLOW_UNREADABLE))


def unread_record(unread, now):
    """The journal record of settings a run went on without reading (judge's `unread`): {cloud_settings_unread}."""
    return {"cloud_settings_unread": {key_of(u["group"], u["name"]): dict(group=u["group"], name=u["name"], seen=now)
                                      for u in unread}}


def unavailable(max_unavailable, role, size):
    """How many nodes of a group a run may remove before their heir exists: none in the control plane."""
    if role == "control-plane" or not size:
        return 0
    return vocabulary.unavailable_limit(max_unavailable, size)


def changed_record(changes, now):
    """The journal record of `changes`, written before they are made: {cloud_settings: {key: entry}}."""
    return {"cloud_settings": {key_of(c["group"], c["name"]): dict(group=c["group"], name=c["name"], original=c["original"],
                                                                   neutral=c["neutral"], changed=now) for c in changes}}


def restored_record(entry, now):
    return {"cloud_settings": {key_of(entry["group"], entry["name"]): dict(restored=now, held=None)}}


def held_record(entry, reason):
    return {"cloud_settings": {key_of(entry["group"], entry["name"]): dict(held=reason)}}


def to_restore(recorded):
    """The journaled entries not restored yet, in a stable order."""
    return [dict(entry) for _key, entry in sorted((recorded or {}).items())
            if isinstance(entry, dict) and not entry.get("restored")]


def merge(journal, record):
    """Fold a record's cloud_settings into the journal (report.merge): an entry's original, neutral and changed are
    its first record's, unless it was restored and a new change comes (a later upgrade's); restored and held are
    the last given. A setting a run went on without reading (cloud_settings_unread) keeps its first record."""
    for key, seen in ((record or {}).get("cloud_settings_unread") or {}).items():
        if isinstance(seen, dict):
            journal.setdefault("cloud_settings_unread", {}).setdefault(key, dict(seen))
    for key, seen in ((record or {}).get("cloud_settings") or {}).items():
        if not isinstance(seen, dict):
            continue
        known = journal.setdefault("cloud_settings", {}).setdefault(key, {})
        if known.get("restored") and seen.get("changed"):
            known.clear()
        for field, value in seen.items():
            if field in ("restored", "held"):
                if value is None:
                    known.pop(field, None)
                else:
                    known[field] = value
            elif value is not None:
                known.setdefault(field, value)


def carried(journal):
    """What a new journal keeps of an old one: the settings a run changed and nobody restored yet."""
    left = {k: v for k, v in ((journal or {}).get("cloud_settings") or {}).items()
            if isinstance(v, dict) and not v.get("restored")}
    return {"cloud_settings": left} if left else {}


def describe(change):
    """One change in words, for the run's output and check mode."""
    return "%s of %s from %s to %s for the run (%s)" % (change["name"], change["group"], change["original"],
                                                        change["neutral"], WHY.get(change["name"], "the cloud would act"))


def unread_rows(journal):
    """The report's rows of the settings a run went on without reading: {group, setting, seen}."""
    return [dict(group=e.get("group") or "", setting=e.get("name") or "", seen=e.get("seen"))
            for _key, e in sorted(((journal or {}).get("cloud_settings_unread") or {}).items()) if isinstance(e, dict)]


def rows(journal):
    """The report's rows: {group, setting, original, neutral, changed, restored, held}."""
    return [dict(group=e.get("group") or "", setting=e.get("name") or "", original=e.get("original"),
                 neutral=e.get("neutral"), changed=e.get("changed"), restored=e.get("restored"), held=e.get("held") or "")
            for _key, e in sorted(((journal or {}).get("cloud_settings") or {}).items()) if isinstance(e, dict)]
