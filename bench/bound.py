"""The critical-path bound of a rolling upgrade (pure arithmetic, no I/O; bench/README.md gives the formula).

One replacement holds one surge slot for  L = C + J + max(H + d, h) + e :
  C  the cloud's create-to-boot time (the emulator's boot delay, a knob),
  J  the join delay (the node simulator's knob: instance booted to Node Ready); for a control-plane heir the
     measured join when given (join_cp): its real etcd member starts within the knob's time, and a start
     slower than the knob makes the join longer,
  H  heir_ready_seconds (the role's gate between heir Ready and the donor's cordon),
  d  the donor's drain (cordon to the last non-DaemonSet pod gone), measured,
  h  lb_drain_seconds: the donor is out of the load balancers from its heir's Ready, and its instance goes only
     after h; only the part longer than H + d adds to the slot,
  e  the donor's delete (the cloud's delete request to the instance gone), measured.
The control-plane nodes are replaced one at a time, before any worker (the planner's rule), so they add
n_cp * L_cp. Workers then run in waves: group g may hold s_g = min(surge_limit(max_surge, n_g), n_g)
replacements at once, the whole cluster at most T = max_surge_total (unbounded when unset), so
    W      = min(T, sum_g s_g)                                  replacements at once
    waves  = max(max_g ceil(n_g / s_g), ceil(N_w / W))          N_w = sum_g n_g
    bound  = n_cp * L_cp + waves * L_w
With the canary (the role's default), a worker group with s_g > 1 first replaces one node alone, and goes to its
full surge once that replacement is done (its donor's Node gone, not its instance) and its heir has been Ready for
the soak S:  K = C + J + max(H + d, h) + S,  then ceil((n_g - 1) / s_g) waves, so
    worker = max(max_g [K if canary_g] + ceil((n_g - canary_g) / s_g) * L_w,  ceil(N_w / W) * L_w)
"""

import math

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.core import surge_limit


def slot_seconds(create, join, heir_ready, drain, delete, lb_hold=0.0):
    """L: how long one replacement holds its surge slot."""
    return float(create) + float(join) + max(float(heir_ready) + float(drain), float(lb_hold)) + float(delete)


def worker_waves(group_sizes, max_surge, max_surge_total=None):
    """(waves, replacements at once) for worker groups of `group_sizes` under the two surge knobs."""
    sizes = [int(n) for n in group_sizes if int(n) > 0]
    if not sizes:
        return 0, 0
    slots = [min(max(surge_limit(max_surge, n), 0), n) for n in sizes]
    if min(slots) <= 0:
        raise ValueError("max_surge %r gives a group no surge slot: the upgrade cannot finish" % (max_surge,))
    at_once = sum(slots)
    if max_surge_total is not None:
        if int(max_surge_total) <= 0:
            raise ValueError("max_surge_total %r leaves no surge slot: the upgrade cannot finish" % (max_surge_total,))
        at_once = min(at_once, int(max_surge_total))
    waves = max(max(math.ceil(n / s) for n, s in zip(sizes, slots)), math.ceil(sum(sizes) / at_once))
    return waves, at_once


def canary_seconds(create, join, heir_ready, drain, lb_hold=0.0, soak=0.0):
    """K: how long a group's canary holds the rest of the group back (its donor's Node goes at once after the
    instance's delete call; the group's full surge waits for that, not for the instance to go)."""
    return slot_seconds(create, join, heir_ready, drain, 0.0, lb_hold) + float(soak)


def critical_path(control_planes, worker_groups, max_surge, max_surge_total, create, join, heir_ready,
                  drain_worker, delete_worker, drain_cp=None, delete_cp=None, join_cp=None, lb_hold=0.0,
                  canary=False, canary_soak=0.0):
    """The bound in seconds, and its parts: {bound, cp_seconds, worker_seconds, waves, at_once, slot_cp, slot_worker,
    canary_seconds}."""
    slot_cp = slot_seconds(create, join if join_cp is None else join_cp, heir_ready,
                           drain_worker if drain_cp is None else drain_cp, delete_worker if delete_cp is None else delete_cp,
                           lb_hold)
    slot_worker = slot_seconds(create, join, heir_ready, drain_worker, delete_worker, lb_hold)
    waves, at_once = worker_waves(worker_groups, max_surge, max_surge_total)
    cp_seconds = int(control_planes) * slot_cp
    worker_seconds = waves * slot_worker
    k = canary_seconds(create, join, heir_ready, drain_worker, lb_hold, canary_soak) if canary else 0.0
    if k and waves:
        sizes = [int(n) for n in worker_groups if int(n) > 0]
        per_group = []
        for n in sizes:
            s = min(surge_limit(max_surge, n), n)
            per_group.append(k + math.ceil((n - 1) / s) * slot_worker if s > 1 else n * slot_worker)
        worker_seconds = max([math.ceil(sum(sizes) / at_once) * slot_worker] + per_group)
    return {"bound": cp_seconds + worker_seconds, "cp_seconds": cp_seconds, "worker_seconds": worker_seconds,
            "waves": waves, "at_once": at_once, "slot_cp": slot_cp, "slot_worker": slot_worker, "canary_seconds": k}


def median(values, default=0.0):
    values = sorted(float(v) for v in values if v is not None)
    if not values:
        return default
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2.0
