# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Cloud quota against the surge: how many more instances the clouds allow, and what that means for the
surge the plan wants. Pure: plain dicts in, plain dicts out; the providers do the reading.

A *limit* is one quota or cap that new instances count against (a region's INSTANCES or CPUS quota, an
Azure location's cores or VM-family cores, an AWS group's MaxSize, EC2's on-demand vCPU quota). It holds
its limit and usage in its own unit and, per scaling group it constrains, how many units one instance of
that group takes (1 for an instance count, the vCPUs of the machine type for a CPU quota). A limit the
identity may not read is *unknown*: it names the reason and constrains nothing.
"""

from __future__ import annotations

import math

UNIT_INSTANCES = "instances"
UNIT_VCPUS = "vCPUs"

STATUS_OK = "ok"            # the quota allows the whole surge (or nothing is left to replace)
STATUS_LOWER = "lower"      # it allows fewer new instances than the surge wants, but at least one
STATUS_NONE = "none"        # it allows no new instance where one is needed
STATUS_UNKNOWN = "unknown"  # every known limit allows the surge, but some limit could not be read

ROLE_CONTROL_PLANE = "control-plane"


def instances_that_fit(room, units_per_instance):
    """Whole instances of `units_per_instance` units each that fit into `room` units (never negative)."""
    if units_per_instance <= 0:
        raise ValueError("units per instance must be positive, got %r" % (units_per_instance,))
    # Quotas come as floats (GCE) or strings of integers; a tiny epsilon keeps 4.0/2.0 from flooring to 1.
    return max(0, int(math.floor(float(room) / float(units_per_instance) + 1e-9)))


def known_limit(name, scope, limit, usage, units_per_instance, unit=UNIT_INSTANCES):
    """A limit that was read. `units_per_instance`: {group ID: units one instance of that group takes}."""
    limit, usage = float(limit), float(usage)
    per_group = {g: float(u) for g, u in units_per_instance.items()}
    headroom = {g: instances_that_fit(limit - usage, u) for g, u in per_group.items()}
    return dict(
        name=name, scope=scope, known=True, unit=unit, limit=_plain(limit), usage=_plain(usage),
        groups=sorted(per_group), units_per_instance={g: _plain(u) for g, u in per_group.items()},
        headroom=headroom, reason=None,
        description="%s of %s: limit %s, usage %s %s (room for %s)" % (
            name, scope, _plain(limit), _plain(usage), unit,
            _room_text(headroom)),
    )


def unknown_limit(name, scope, groups, reason):
    """A limit that could not be read (no permission, not reported): it constrains nothing, and says why."""
    return dict(name=name, scope=scope, known=False, unit=None, limit=None, usage=None, groups=sorted(groups),
                units_per_instance={}, headroom=None, reason=reason,
                description="%s of %s could not be read: %s" % (name, scope, reason))


def _plain(number):
    return int(number) if float(number).is_integer() else number


def _room_text(headroom):
    counts = sorted(set(headroom.values()))
    if len(counts) == 1:
        return "%d new instance(s)" % counts[0]
    return ", ".join("%d in %s" % (n, g) for g, n in sorted(headroom.items()))


def allocate(wants, limits):
    """Grant new instances group by group, in the order of `wants` ([(group ID, how many)]), as far as every
    known limit that covers the group allows; a limit shared by several groups (a region's quota) is drawn
    down by each grant. Returns ({group: granted}, {group: the limit that cut its grant, or None})."""
    room = [float(l["limit"]) - float(l["usage"]) if l["known"] else None for l in limits]
    granted, binding = {}, {}
    for group, wanted in wants:
        take, cut_by = max(0, int(wanted)), None
        for index, lim in enumerate(limits):
            units = lim["units_per_instance"].get(group) if lim["known"] else None
            if units is None:
                continue
            fit = instances_that_fit(room[index], units)
            if fit < take:
                take, cut_by = fit, lim
        for index, lim in enumerate(limits):
            units = lim["units_per_instance"].get(group) if lim["known"] else None
            if units is not None:
                room[index] -= take * float(units)
        granted[group] = granted.get(group, 0) + take
        if cut_by is not None:
            binding[group] = cut_by
        else:
            binding.setdefault(group, None)
    return granted, binding


def surge_phases(group_reports, max_surge_total=None):
    """The phases of the upgrade, each with what it keeps in flight at most: the control plane (one
    replacement at a time, alone) and then the workers (per group up to its surge limit, capped by
    max_surge_total). Each phase: {name, cap, groups: [(group ID, peak in flight, in flight now)]}.
    `group_reports` are node_image_facts' scaling_groups rows."""
    control, workers = [], []
    for report in group_reports:
        left = int(report.get("outdated") or 0) + int(report.get("donor") or 0)
        if left == 0:
            continue
        peak = min(int(report.get("surge_limit") or 0), left)
        row = (report["id"], peak, int(report.get("in_flight") or 0))
        (control if report.get("role") == ROLE_CONTROL_PLANE else workers).append(row)
    phases = []
    if control:
        phases.append(dict(name="control-plane", cap=1, groups=control))
    if workers:
        phases.append(dict(name="workers", cap=None if max_surge_total is None else int(max_surge_total),
                           groups=workers))
    return phases


def _capped(number, cap):
    return number if cap is None else min(number, cap)


def _phase_grant(phase, limits, limiting):
    """{name, wanted, allowed} of one phase of the surge; the limits that cut its grant are added to `limiting`."""
    cap = phase["cap"]
    wanted = _capped(sum(row[1] for row in phase["groups"]), cap)
    wants = [(gid, max(0, peak - now)) for gid, peak, now in phase["groups"]]
    granted, binding = allocate(wants, limits)
    allowed = _capped(sum(min(peak, now + granted[gid]) for gid, peak, now in phase["groups"]), cap)
    for gid, peak, now in phase["groups"]:
        cut = binding.get(gid)
        if cut is not None and now + granted[gid] < peak and cut not in limiting:
            limiting.append(cut)
    return dict(name=phase["name"], wanted=wanted, allowed=allowed)


def assess(group_reports, limits, max_surge_total=None):
    """What the quota means for the surge.

    surge_wanted: the most replacements the budget keeps in flight at once (max_surge per group,
    max_surge_total, the control plane alone and one at a time) for the nodes left. surge_allowed: the most
    the known limits let be in flight at once (instances in flight now already count in the usage).
    status: ok, lower (warn and cap the surge), none (fail: not one new instance fits) or unknown (known
    limits allow the surge, some could not be read). limiting: the limits that cut a grant; unknown: the
    limits that could not be read."""
    phases_out, limiting = [], []
    for phase in surge_phases(group_reports, max_surge_total):
        phases_out.append(_phase_grant(phase, limits, limiting))
    short = [p for p in phases_out if p["allowed"] < p["wanted"]]
    wanted = max([p["wanted"] for p in phases_out] or [0])
    allowed = min(p["allowed"] for p in short) if short else wanted
    unknown = [l for l in limits if not l["known"]]
    if short and allowed == 0:
        status = STATUS_NONE
    elif short:
        status = STATUS_LOWER
    elif unknown:
        status = STATUS_UNKNOWN
    else:
        status = STATUS_OK
    return dict(status=status, surge_wanted=wanted, surge_allowed=allowed, phases=phases_out,
                limiting=limiting, unknown=unknown, limits=list(limits))
