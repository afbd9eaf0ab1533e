"""Chaos benchmark: a whole upgrade under faults, with the safety invariants checked while it runs and at the end.

    .venv/bin/python bench/chaos.py [--cloud gcp|azure|aws] [--experiments kills,faults,etcd,apiserver]
                                    [--kills 20] [--quick] [--json FILE] [--keep]

Each experiment runs on a fresh sandbox: 3 control-plane nodes and 6 workers in 2 groups on image A, the
seeded workloads and a user label on every node (tests/integration/upgrade_helpers.prepare), rolled to
image B by playbooks/upgrade_nodes.yml. Without --cloud every experiment runs on each cloud in turn.

Experiments:
  kills      SIGKILL the run (upgrade_helpers.PlaybookRun.kill) at random moments, at least --kills times,
             each followed by a restart, until a run exits 0; with --aim draining,deleting each kill waits
             for a drain or an instance deletion in flight instead;
  faults     10 % of the cloud API calls answered 429, 500 or 503 (the emulator's fault knobs) for the
             whole upgrade;
  etcd       one etcd member SIGSTOPped while a control-plane node is being replaced: the run must refuse
             the removal (naming the member), remove nothing while it is stopped, and go on after SIGCONT;
  apiserver  kube-apiserver restarted mid-run (sandbox Sandbox.restart).

Invariants. Every second while the run goes (upgrade_helpers.Watcher): instances per group never above the
start plus the surge; Ready nodes per group never below the start; etcd members never fewer than at the start
(not in the etcd experiment, which counts them itself while its member is stopped). At the end, those and:
every node on the image; no instance orphaned; the donors' labels on the heirs; the autoscaler's replicas
restored; etcd members equal to the control-plane nodes, and healthy; the lock released.
"""

import argparse
import json
import pathlib
import random
import re
import signal
import sys
import tempfile
import time

import requests

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from bench import world  # noqa: E402  pylint: disable=wrong-import-position

helpers = world.upgrade_helpers
EXPERIMENTS = ("kills", "faults", "etcd", "apiserver")
TASK_LINE = re.compile(r"^TASK \[(.*)\]", re.M)
PASSES_STARTED = re.compile(r"\(pass 1\)\]|\(from pass \d+\)\]")  # the upgrade_step task of tasks/steps.yml


# ---------------------------------------------------------------- invariants

def etcd_state(handle, skip=(), timeout=3):
    """(member names, {name: health}) from the control-plane etcd, asking members not in `skip`."""
    etcd = handle.cp_etcd()
    members, health = None, {}
    for node, info in sorted(etcd["members"].items()):
        if node in skip or not info.get("client_url"):
            continue
        try:
            resp = requests.get(info["client_url"] + "/health", verify=etcd["ca"], cert=(etcd["cert"], etcd["key"]),
                                timeout=timeout)
            health[node] = resp.json().get("health") == "true"
        except (requests.RequestException, ValueError) as exc:
            health[node] = "unreachable: %s" % type(exc).__name__
        if members is None:
            try:
                resp = requests.post(info["client_url"] + "/v3/cluster/member/list", json={}, verify=etcd["ca"],
                                     cert=(etcd["cert"], etcd["key"]), timeout=timeout)
                members = sorted(m.get("name", "") for m in resp.json().get("members", []))
            except (requests.RequestException, ValueError):
                pass
    return members, health


def end_invariants(handle, values, start, watcher, surge):
    """Each invariant with its numbers: {name: {"ok": bool, ...}}; one that cannot be read is not ok, with
    the reason."""
    try:
        return _end_invariants(handle, values, start, watcher, surge)
    except Exception as exc:  # noqa: BLE001 - the figures of the run must survive a failed read
        return {"invariants readable": {"ok": False, "error": repr(exc)}}


def _end_invariants(handle, values, start, watcher, surge):
    image = values["rolling_upgrade_image"].lower()
    out = {}
    nodes = helpers.nodes(handle)
    names = {n["metadata"]["name"] for n in nodes}
    on_image = [n["metadata"]["name"] for n in nodes if n["status"].get("nodeInfo", {}).get("osImage", "").lower() == image]
    old_left = sorted(set(start["node_names"]) & names)
    out["every node on the image"] = {"ok": len(on_image) == len(nodes) and not old_left and len(nodes) == len(start["node_names"]),
                                      "on_image": len(on_image), "nodes": len(nodes),
                                      "start_nodes": len(start["node_names"]), "old_nodes_left": old_left}
    instances = helpers.live_instances(handle)
    orphans = sorted(i["node_name"] for i in instances if i["node_name"] not in names)
    without = sorted(names - {i["node_name"] for i in instances})
    out["no instance orphaned"] = {"ok": not orphans and not without, "instances": len(instances),
                                   "instances_without_node": orphans, "nodes_without_instance": without}
    over = {g: (watcher.max_instances.get(g), len(v) + surge) for g, v in start["groups"].items()
            if (watcher.max_instances.get(g) or 0) > len(v) + surge}
    out["instances per group <= start + surge"] = {
        "ok": not over and watcher.samples > 0, "samples": watcher.samples,
        "max_per_group": {g: "%s (limit %d)" % (watcher.max_instances.get(g), len(v) + surge)
                          for g, v in sorted(start["groups"].items())}}
    under = {g: (watcher.min_ready.get(g), len(v)) for g, v in start["groups"].items()
             if watcher.min_ready.get(g, 0) < len(v)}
    out["Ready nodes per group >= start"] = {
        "ok": not under, "min_per_group": {g: "%s (start %d)" % (watcher.min_ready.get(g), len(v))
                                           for g, v in sorted(start["groups"].items())}}
    key, value = helpers.USER_LABEL
    unlabelled = sorted(n["metadata"]["name"] for n in nodes if n["metadata"]["labels"].get(key) != value)
    out["donor labels on the heirs"] = {"ok": not unlabelled, "label": "%s=%s" % (key, value),
                                        "nodes_without": unlabelled}
    autoscaler = handle.kube().request("GET", "/apis/apps/v1/namespaces/kube-system/deployments/cluster-autoscaler")
    out["autoscaler replicas restored"] = {"ok": autoscaler["spec"]["replicas"] == start["autoscaler_replicas"],
                                           "replicas": autoscaler["spec"]["replicas"],
                                           "start": start["autoscaler_replicas"]}
    members, health = etcd_state(handle)
    cps = sorted(n["metadata"]["name"] for n in nodes if helpers.CONTROL_PLANE_LABEL in n["metadata"]["labels"])
    sick = {m: h for m, h in health.items() if h is not True and m in cps}
    out["etcd members == control planes, healthy"] = {"ok": members == cps and not sick, "members": members,
                                                      "control_planes": cps, "unhealthy": sick}
    if watcher.etcd:
        out["etcd members never below the start"] = {
            "ok": watcher.min_etcd_members is not None and watcher.min_etcd_members >= start["etcd_members"],
            "fewest_members": watcher.min_etcd_members, "start": start["etcd_members"]}
    holder = helpers.lease_holder(handle)
    out["lock released"] = {"ok": not holder, "holder": holder}
    return out


def watched(handle, interval=1.0, etcd=True):
    watcher = helpers.Watcher(handle, interval=interval, max_seconds=7200, etcd=etcd)
    watcher.start()
    return watcher


def last_line(output):
    """The run's last output line (in the passes: its progress line, what was in flight), shortened."""
    lines = [text.strip() for text in output.splitlines() if text.strip()]
    return lines[-1][:240] if lines else ""


def last_task(output):
    found = TASK_LINE.findall(output)
    return found[-1] if found else "(before the first task)"


# ---------------------------------------------------------------- experiments

AIMS = ("draining", "deleting")


def is_instance_deletion(cloud, entry):
    """A request of the emulator's log that deletes an instance from its group (the cloud's DELETE step)."""
    if cloud == "gcp":
        return (entry.get("path") or "").endswith("/deleteInstances")
    if cloud == "azure":
        return entry.get("method") == "POST" and (entry.get("template") or "").endswith("/delete")
    return entry.get("action") == "TerminateInstanceInAutoScalingGroup"


def aim_trigger(aim, watch, admin, cloud, since, requests_seen):
    """What an aimed kill waits for, or None yet: `draining`, a node that entered the draining phase (its
    <prefix>/phase annotation, as the watch first saw it) after `since`, so a resumed drain is let finish and
    every aimed kill meets a drain of its own; `deleting`, an instance deletion request in the emulator's log
    after the first `requests_seen` entries."""
    if aim == "draining":
        nodes, _ = watch.snapshot()
        entered = sorted((rec["phases"]["draining"], name) for name, rec in nodes.items()
                         if (rec.get("phases") or {}).get("draining", 0) > since and not rec.get("deleted"))
        return {"node": entered[0][1], "seen": entered[0][0]} if entered else None
    fresh = [e for e in admin.requests()[requests_seen:] if is_instance_deletion(cloud, e)]
    if not fresh:
        return None
    # GCE's log times each request; the others' are as seen now (at most one 0.2 s poll late).
    return {"request": fresh[0].get("path") or fresh[0].get("template") or fresh[0].get("action"),
            "seen": fresh[0].get("at") or time.time()}


def at_kill(aim, trigger, watch):
    """The state the aimed kill met: for a drain, the node's phase and the pods (not a DaemonSet's) still on it."""
    if aim != "draining":
        return {"s_after_request": round(time.time() - trigger["seen"], 2)}
    nodes, _ = watch.snapshot()
    rec = nodes.get(trigger["node"]) or {}
    with watch.lock:
        pods = sum(1 for p in watch.pods.values() if p["node"] == trigger["node"] and not p["daemonset"])
    return {"phase": rec.get("phase"), "pods_left": pods, "s_after_phase": round(time.time() - trigger["seen"], 2)}


def exp_kills(handle, values, workdir, args, rng):
    """Kill at random moments (or, with --aim, at the moment a drain or an instance deletion is in flight),
    restart each time; then let a run finish."""
    aims = [a for a in (args.aim or "").split(",") if a]
    if not aims:
        return _kill_series(values, workdir, args, _RandomMoment(args, rng))
    moment = _AimedMoment(handle, values["rolling_upgrade_provider"], aims, args, rng)
    try:
        result = _kill_series(values, workdir, args, moment)
    finally:
        moment.watch.stop()
    hits = [k for k in result["faults"]["kills"] if k["hit"]]
    result["faults"].update(aimed={a: sum(1 for k in hits if k["aim"] == a) for a in aims},
                            missed=len(result["faults"]["kills"]) - len(hits))
    return result


class _RandomMoment:
    """Four kills in five 1 s to --pass-kill-max after the run reaches its passes (the preflight alone can
    outlast a minute under load, and the step engine rolls the whole world in under a minute of passes, so
    that they land in every step of a pass); the others --kill-min to --kill-max into the run."""

    def __init__(self, args, rng):
        self.args, self.rng = args, rng

    def before_run(self):
        return None

    def wait(self, run, deadline, _ready, kills):
        in_passes = self.rng.random() < 0.8
        rc = _wait_for_passes(run, deadline) if in_passes else None
        if rc is None:
            rc = _wait_quietly(run, self.rng.uniform(1.0, self.args.pass_kill_max) if in_passes
                               else self.rng.uniform(self.args.kill_min, self.args.kill_max))
        return rc, {"in_passes": in_passes}

    def describe(self, record):
        return ""


class _AimedMoment:
    """Each kill aimed at a step in flight, the aims taken in turn: once the run reaches its passes, wait for
    the aim's trigger (at most --aim-wait), then 0-1 s more so the kill lands inside the step."""

    def __init__(self, handle, cloud, aims, args, rng):
        self.cloud, self.aims, self.args, self.rng = cloud, aims, args, rng
        self.admin = handle.cloud(cloud)
        self.watch = world.ClusterWatch(handle).start()

    def before_run(self):
        return len(self.admin.requests())

    def wait(self, run, deadline, requests_seen, kills):
        aim = self.aims[len(kills) % len(self.aims)]
        rc, trigger = _wait_for_passes(run, deadline), None
        until = min(deadline, time.monotonic() + self.args.aim_wait)
        while rc is None and trigger is None and time.monotonic() < until:
            trigger = aim_trigger(aim, self.watch, self.admin, self.cloud, run.started, requests_seen)
            rc = _wait_quietly(run, self.rng.uniform(0.0, 1.0) if trigger else 0.2)
        return rc, {"aim": aim, "hit": bool(trigger), "trigger": trigger,
                    "at_kill": at_kill(aim, trigger, self.watch) if trigger else {}}

    def describe(self, record):
        return " (aimed at %s: %s; at the kill %s)" % (
            record["aim"], json.dumps(record["trigger"]) if record["hit"] else "not seen within --aim-wait",
            json.dumps(record["at_kill"]))


def _kill_series(values, workdir, args, moment):
    """Kill each run at the moment's choosing and restart it, at least --kills times (none started after
    --kill-until), then let a run finish."""
    kills, attempts, survivors = [], [], []
    deadline = time.monotonic() + args.budget
    stop_killing = time.monotonic() + (args.kill_until if args.kill_until else args.budget)
    final_rc = None
    attempt = 0
    while time.monotonic() < deadline:
        attempt += 1
        ready = moment.before_run()
        run = live(world.MeasuredRun(values, workdir / ("kills-%02d.log" % attempt)))
        if len(kills) < args.kills and time.monotonic() < stop_killing:
            rc, record = moment.wait(run, deadline, ready, kills)
            if rc is None:
                output = run.output()
                task, line = last_task(output), last_line(output)
                left = run.kill()
                after = round(time.time() - run.started, 1)
                record.update(attempt=attempt, after_s=after, task=task, last_line=line, tree_survivors=len(left))
                kills.append(record)
                if left:
                    survivors.append({"attempt": attempt, "pids": left})
                attempts.append({"attempt": attempt, "ended": "killed", "after_s": after})
                world.log("kill %d at %.1fs in %r%s (%d of its processes survived the kill)"
                          % (len(kills), after, task, moment.describe(record), len(left)))
                continue
        else:
            rc = run.wait(max(deadline - time.monotonic(), 60))
        attempts.append({"attempt": attempt, "ended": "exit %s" % rc,
                         "after_s": round((run.ended or time.time()) - run.started, 1)})
        world.log("attempt %d exited %s after %.0fs" % (attempt, rc, (run.ended or time.time()) - run.started))
        if rc == 0:
            final_rc = 0
            break
    return {"faults": {"sigkills": len(kills), "kills": kills, "processes_surviving_a_kill": survivors},
            "attempts": attempts, "completed": final_rc == 0,
            "note": "" if len(kills) >= args.kills else "only %d kills (of %d asked) before the run was let finish"
            % (len(kills), args.kills)}


def _wait_for_passes(run, deadline):
    """Wait until the run's output shows a task of its first pass; its exit code if it ended first."""
    while time.monotonic() < deadline:
        if run.poll() is not None:
            return run.rc
        if PASSES_STARTED.search(run.output()):
            return None
        time.sleep(0.3)
    return None


def _wait_quietly(run, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if run.poll() is not None:
            return run.rc
        time.sleep(0.2)
    return run.poll()


def fault_counts(admin, cloud):
    reqs = admin.requests()
    if cloud == "gcp":
        faults = [r.get("fault") for r in reqs if r.get("fault")]
    elif cloud == "azure":
        faults = [r.get("status") for r in reqs if r.get("status") in (429, 500, 503)]
    else:
        faults = [r.get("fault") for r in reqs if r.get("fault")]
    counts = {}
    for code in faults:
        counts[str(code)] = counts.get(str(code), 0) + 1
    return len(reqs), counts


def exp_faults(handle, values, workdir, args, rng):
    admin = handle.cloud(values["rolling_upgrade_provider"])
    admin.clear_requests()
    admin.set_faults(error_rate=0.1, codes=(429, 500, 503))
    try:
        run = live(world.MeasuredRun(values, workdir / "faults.log"))
        rc = run.wait(args.budget)
    finally:
        admin.set_faults()
    total, counts = fault_counts(admin, values["rolling_upgrade_provider"])
    return {"faults": {"error_rate": 0.1, "cloud_requests": total, "answered_with_error": counts},
            "attempts": [{"attempt": 1, "ended": "exit %s" % rc, "after_s": round((run.ended or time.time()) - run.started, 1)}],
            "completed": rc == 0}


def exp_etcd(handle, values, workdir, args, rng):
    """SIGSTOP one etcd member once a control-plane heir is paired, while its donor is still a member (its
    removal comes next); SIGCONT once the run has refused the removal for 10 s, or after --etcd-hold seconds."""
    watch = world.ClusterWatch(handle).start()
    run = live(world.MeasuredRun(values, workdir / "etcd.log"))
    stopped = None
    notes = {}
    try:
        deadline = time.monotonic() + args.budget
        while run.poll() is None and time.monotonic() < deadline and stopped is None:
            nodes, _ = watch.snapshot()
            # Once a control-plane heir is paired: its donor's drain and etcd removal come next (the step
            # engine drains a control plane without pods and removes its member in the same pass, too fast to
            # catch in between with a poll).
            heirs = [(n, r) for n, r in nodes.items() if n not in watch.initial_nodes and r.get("control_plane")
                     and r.get("paired") and r.get("donor_of")]
            for heir, rec in sorted(heirs):
                members = handle.cp_etcd()["members"]
                victims = sorted(n for n in members if n not in (heir, rec["donor_of"]) and members[n].get("pid")
                                 and members[n].get("running", True))
                if not victims:
                    continue
                victim = rng.choice(victims)
                before, _ = etcd_state(handle, skip=(victim,))
                # Only while the donor is still a member: its removal is what the stop must meet (the step
                # engine drains, removes and deletes a donor in one pass; a later replacement comes next).
                if rec["donor_of"] not in (before or ()):
                    continue
                pid = members[victim]["pid"]
                offset = len(run.output())
                world.signal_process(pid, signal.SIGSTOP)
                stopped = {"member": victim, "pid": pid, "heir": heir, "donor": rec["donor_of"],
                           "at_s": round(time.time() - run.started, 1), "members_before": before}
                world.log("SIGSTOP etcd member %s (pid %d) while %s replaces %s" % (victim, pid, heir, rec["donor_of"]))
                break
            time.sleep(0.5)
        if stopped:
            low = None
            hold_end = time.monotonic() + args.etcd_hold
            refused_at = None
            while time.monotonic() < hold_end and run.poll() is None:
                members, _ = etcd_state(handle, skip=(stopped["member"],))
                if members is not None:
                    low = len(members) if low is None else min(low, len(members))
                if refused_at is None and _refusals(run.output()[offset:], stopped["member"]):
                    refused_at = time.monotonic()
                    stopped["refused_after_s"] = round(time.time() - run.started - stopped["at_s"], 1)
                if refused_at is not None and time.monotonic() > refused_at + 10:
                    break
                time.sleep(1.0)
            named = _refusals(run.output()[offset:], stopped["member"])
            world.signal_process(stopped["pid"], signal.SIGCONT)
            stopped.update(held_s=round(time.time() - run.started - stopped["at_s"], 1), fewest_members_while_stopped=low,
                           refusal_naming_member=bool(named), refusal_lines=named[:3],
                           removed_while_stopped=(low is not None and low < len(stopped["members_before"] or [])))
            world.log("SIGCONT etcd member %s; refusal naming it seen: %s; fewest members while stopped: %s"
                      % (stopped["member"], bool(named), low))
        else:
            notes["not_injected"] = "no control-plane heir was paired before the run ended"
        rc = run.wait(max(deadline - time.monotonic(), 60))
    finally:
        watch.stop()
        if stopped:
            world.signal_process(stopped["pid"], signal.SIGCONT)
    return {"faults": {"etcd_sigstop": stopped, **notes},
            "attempts": [{"attempt": 1, "ended": "exit %s" % rc, "after_s": round((run.ended or time.time()) - run.started, 1)}],
            "completed": rc == 0 and bool(stopped) and stopped.get("refusal_naming_member")
            and not stopped.get("removed_while_stopped")}


def _refusals(text, member):
    return [line.strip()[:300] for line in text.splitlines()
            if member in line and ("unhealthy" in line or "quorum" in line)]


def exp_apiserver(handle, values, workdir, args, rng):
    """Restart kube-apiserver once the first donor is cordoned (or 10-30 s after the run reaches its passes,
    or after 300 s), 3 s down before it starts again (the restart itself takes longer under load)."""
    watch = world.ClusterWatch(handle).start()
    run = live(world.MeasuredRun(values, workdir / "apiserver-1.log"))
    restart = None
    attempts = []
    fallback = time.monotonic() + 300
    in_passes = rng.uniform(10, 30)
    try:
        deadline = time.monotonic() + args.budget
        while run.poll() is None and restart is None and time.monotonic() < deadline:
            if in_passes is not None and PASSES_STARTED.search(run.output()):
                fallback, in_passes = min(fallback, time.monotonic() + in_passes), None
            nodes, _ = watch.snapshot()
            cordoned = [n for n, r in nodes.items() if n in watch.initial_nodes and r.get("cordoned")]
            if cordoned or time.monotonic() > fallback:
                task = last_task(run.output())
                restart = handle.restart("kube-apiserver", down_seconds=3)
                restart.update(at_s=round(time.time() - run.started, 1), task=task,
                               trigger="cordon of %s" % cordoned[0] if cordoned else "time")
                world.log("restarted kube-apiserver (%s s down) during %r" % (restart["down_s"], task))
            time.sleep(0.5)
        rc = run.wait(max(deadline - time.monotonic(), 60))
        attempts.append({"attempt": 1, "ended": "exit %s" % rc, "after_s": round((run.ended or time.time()) - run.started, 1)})
        if rc != 0:   # a failed run must leave a state a new run resumes from
            world.log("the run exited %s after the restart; resuming with a new run" % rc)
            again = live(world.MeasuredRun(values, workdir / "apiserver-2.log"))
            rc2 = again.wait(max(deadline - time.monotonic(), 60))
            attempts.append({"attempt": 2, "ended": "exit %s" % rc2,
                             "after_s": round((again.ended or time.time()) - again.started, 1)})
    finally:
        watch.stop()
    return {"faults": {"apiserver_restart": restart}, "attempts": attempts,
            "completed": attempts[0]["ended"] == "exit 0",
            "resumed_after_failure": len(attempts) > 1 and attempts[-1]["ended"] == "exit 0"}


class Interrupted(Exception):
    """SIGTERM to the benchmark: stop the experiment, kill its run, still read the invariants."""


LIVE = []


def live(run):
    LIVE.append(run)
    return run


def _interrupt(signum, frame):
    raise Interrupted("signal %d" % signum)


RUNNERS = {"kills": exp_kills, "faults": exp_faults, "etcd": exp_etcd, "apiserver": exp_apiserver}


def run_experiment(name, cloud, args, workdir, rng):
    control_planes = 3 if (not args.quick or name == "etcd") else 1
    workers = 2 if args.quick else 6
    world.log("experiment %s on %s: fresh sandbox, %d control-plane + %d workers" % (name, cloud, control_planes, workers))
    with world.fresh_sandbox(cloud, keep=args.keep, prefix="kubenodes-chaos-") as handle:
        overrides = {}
        # The upgrade's own overall timeout (15 min in the tests' FAST set) must not end a run that a
        # loaded machine makes slow: the benchmark's --budget bounds the experiment instead.
        overrides["rolling_upgrade_timeout"] = int(args.budget) + 600
        if name == "etcd":
            # A window between a control-plane pair and its donor's drain and etcd removal for the stop to
            # fall in: with the tests' FAST gate the step engine does all of it within a second of the pairing.
            overrides["rolling_upgrade_heir_ready_seconds"] = 30
        values, start = helpers.prepare(handle, cloud, control_planes=control_planes, workers=workers, groups=2,
                                        **overrides)
        surge = int(values.get("rolling_upgrade_max_surge", 1))
        start["etcd_members"] = len(helpers.etcd_member_names(handle))
        load = world.loadavg()
        # The etcd experiment counts the members itself: a poll that asks the stopped member first would
        # hang for its timeout and stall the other invariants' 1 s polls.
        watcher = watched(handle, etcd=name != "etcd")
        began = time.time()
        try:
            result = RUNNERS[name](handle, values, workdir / cloud, args, rng)
        except Interrupted as exc:
            result = {"interrupted": "%s at %s: the run was killed, the invariants below are of that moment"
                                     % (exc, time.strftime("%H:%M:%S")), "completed": False}
            for run in LIVE:
                run.kill()
        finally:
            watcher.stop()
        result["wall_s"] = round(time.time() - began, 1)
        result["invariants"] = end_invariants(handle, values, start, watcher, surge)
        result["watcher_errors"] = len(watcher.errors)
    result.update(experiment=name, cloud=cloud, control_planes=control_planes, workers=workers, load_before=load,
                  load_after=world.loadavg(), broken=[k for k, v in result["invariants"].items() if not v["ok"]])
    return result


def print_result(r):
    print("\n== %s on %s (%d+%d nodes, load %s -> %s, %ss)" % (r["experiment"], r["cloud"], r["control_planes"],
                                                              r["workers"], r["load_before"], r["load_after"], r.get("wall_s")))
    faults = dict(r.get("faults") or {})
    kills = faults.pop("kills", None)
    print("faults injected: %s" % json.dumps(faults, default=str)[:1500])
    for kill in kills or []:
        if kill.get("aim"):
            when = "aimed at %s: %s, at the kill %s" % (kill["aim"], json.dumps(kill["trigger"]) if kill["hit"]
                                                         else "not seen", json.dumps(kill["at_kill"]))
        else:
            when = "in the passes" if kill.get("in_passes") else "from the start"
        print("  kill at %ss (attempt %s, %s): %s | %s | %d of its processes survived" % (
            kill["after_s"], kill["attempt"], when, kill["task"], kill.get("last_line", ""), kill["tree_survivors"]))
    print("attempts: %s" % ", ".join("%s after %ss" % (a["ended"], a["after_s"]) for a in r.get("attempts", [])))
    print("completed: %s%s" % (r.get("completed"), (" (" + r["note"] + ")") if r.get("note") else ""))
    if r.get("interrupted"):
        print("INTERRUPTED: %s" % r["interrupted"])
    for name, inv in r.get("invariants", {}).items():
        numbers = {k: v for k, v in inv.items() if k != "ok"}
        print("  [%s] %s: %s" % ("ok" if inv["ok"] else "BROKEN", name, json.dumps(numbers, default=str)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cloud", choices=("gcp", "azure", "aws"), default=None, help="default: each in turn")
    parser.add_argument("--experiments", default=",".join(EXPERIMENTS))
    parser.add_argument("--kills", type=int, default=None, help="at least this many kills (default 20, --quick 5)")
    parser.add_argument("--kill-min", type=float, default=3.0, help="earliest kill, seconds after a run starts")
    parser.add_argument("--kill-max", type=float, default=60.0, help="latest kill, seconds after a run starts")
    parser.add_argument("--pass-kill-max", type=float, default=15.0,
                        help="latest kill, seconds after a run reaches its passes (four kills in five)")
    parser.add_argument("--kill-until", type=float, default=None,
                        help="start no kill later than this many seconds into the experiment; then a run finishes")
    parser.add_argument("--aim", default="",
                        help="kills: aim every kill at a step in flight, taken in turn: draining (a node entering "
                             "the draining phase), deleting (an instance deletion request in the emulator's log)")
    parser.add_argument("--aim-wait", type=float, default=180.0,
                        help="with --aim, the longest a run waits for its trigger before it is killed anyway")
    parser.add_argument("--etcd-hold", type=float, default=300.0,
                        help="the longest the etcd member stays stopped (it is resumed 10 s after the first refusal)")
    parser.add_argument("--budget", type=float, default=3600.0, help="wall-time limit per experiment")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="2 workers, 1 control plane (3 for etcd), 5 kills")
    parser.add_argument("--json", default=None)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    if args.kills is None:
        args.kills = 5 if args.quick else 20
    if set(a for a in args.aim.split(",") if a) - set(AIMS):
        parser.error("--aim: choose from %s" % ",".join(AIMS))
    experiments = args.experiments.split(",")
    if set(experiments) - set(EXPERIMENTS):
        parser.error("--experiments: choose from %s" % ",".join(EXPERIMENTS))
    clouds = [args.cloud] if args.cloud else ["gcp", "azure", "aws"]
    seed_value = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed_value)
    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="kubenodes-chaos-"))
    header = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "commit": world.commit(),
              "seed": seed_value, "clouds": clouds, "experiments": experiments, "load_start": world.loadavg()}
    world.log("chaos benchmark %s, seed %d, logs in %s" % (header["commit"], seed_value, workdir))
    results = []
    for cloud in clouds:
        (workdir / cloud).mkdir(parents=True, exist_ok=True)
        for name in experiments:
            try:
                results.append(run_experiment(name, cloud, args, workdir, rng))
                print_result(results[-1])
            except Exception as exc:  # noqa: BLE001 - report it and go on with the next experiment
                world.log("experiment %s on %s FAILED to run: %r" % (name, cloud, exc))
                results.append({"experiment": name, "cloud": cloud, "error": repr(exc)})
            sys.stdout.flush()
            if args.json:
                pathlib.Path(args.json).write_text(json.dumps({"header": header, "results": results}, indent=2,
                                                              default=str))
    header["load_end"] = world.loadavg()
    print("\nchaos benchmark, %s, commit %s, load %s -> %s" % (header["date"], header["commit"], header["load_start"],
                                                              header["load_end"]))
    for r in results:
        print("  %s/%s: %s" % (r["cloud"], r["experiment"], "did not run: " + r["error"] if "error" in r else
                               "completed %s, broken invariants: %s" % (r.get("completed"), r.get("broken") or "none")))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"header": header, "results": results}, indent=2, default=str))
    return 0 if all(r.get("completed") and not r.get("broken") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
