"""Makespan of a whole upgrade against its critical-path bound, per surge setting.

    .venv/bin/python bench/makespan.py [--control-planes 1|3] [--workers 8] [--quick]
                                       [--arms reference,defaults,surge4] [--realistic ARMS] [--json FILE] [--keep]

One fixed world per arm, each on a fresh sandbox with one cloud's emulator (--cloud, GCE by default): 1 (or 3)
control-plane nodes and
8 workers in 2 groups on image A, a 20 s join delay, a Deployment `app` (one replica per worker) with a
PodDisruptionBudget of maxUnavailable 1 and the cluster-autoscaler Deployment. Then playbooks/upgrade_nodes.yml
rolls it to image B. Arms: the reference's semantics (max_surge 1, max_surge_total 1), the role's defaults
(max_surge 1 per group, no cluster-wide cap) and max_surge 4, all in this one invocation; each is compared with
its critical-path bound and the reference arm with surge 4. With --realistic, the arms named there run once more
(named <arm>@realistic) with the emulator at a real cloud's per-call latency and operation durations
(REALISTIC_GCE, _AZURE or _AWS, scaled by REALISTIC_SCALE; bench/README.md gives the sources). bench/README.md gives the bound's
formula and keeps the figures recorded for the task-chain engine the role had until issue 27.
"""

import argparse
import concurrent.futures
import copy
import json
import pathlib
import re
import sys
import tempfile
import threading
import time

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import world  # noqa: E402  pylint: disable=wrong-import-position  (sets the import paths first)
from bench import bound  # noqa: E402  pylint: disable=wrong-import-position
from sandbox import scenario, seed  # noqa: E402  pylint: disable=wrong-import-position

ARMS = {
    "reference": {"rolling_upgrade_max_surge": 1, "rolling_upgrade_max_surge_total": 1},
    "defaults": {},
    "surge4": {"rolling_upgrade_max_surge": 4},
    # The large world's (issue 22): a tenth of each group at once.
    "surge10pct": {"rolling_upgrade_max_surge": "10%"},
}
DEFAULT_SURGE, DEFAULT_SURGE_TOTAL = 1, None   # roles/rolling_upgrade/defaults/main.yml
SMALL_SUFFIX = "@1+8"   # --small-arms: the arm on 1 + 8 workers in 2 groups, in the same run as a larger world
# A real GCE project's timings (bench/README.md gives the sources): seconds per API request, a createInstances or
# deleteInstances operation running, an instance from its creation to RUNNING, a deleted instance still listed.
REALISTIC_GCE = {"latency": 0.2, "op_delay": 5.0, "boot_delay": 25.0, "delete_delay": 30.0}
# The same figures for Azure and AWS (bench/README.md gives the sources and which are assumptions); EMULATOR_KNOBS
# says which knob of each emulator takes them. Azure: an ARM request; a scale-out or instance
# deletion's long-running operation until it reports done; a VM from the scale-out to running; a deleted VM still
# listed. AWS: an EC2 or Auto Scaling request (SetDesiredCapacity and TerminateInstanceInAutoScalingGroup answer at
# once: no operation to wait on); an instance from pending to running; a terminated instance still shutting down.
REALISTIC_AZURE = {"latency": 0.2, "op_delay": 60.0, "boot_delay": 60.0, "delete_delay": 60.0}
REALISTIC_AWS = {"latency": 0.15, "op_delay": 0.0, "boot_delay": 16.0, "delete_delay": 30.0}
REALISTIC = {"gcp": REALISTIC_GCE, "azure": REALISTIC_AZURE, "aws": REALISTIC_AWS}
# The durations (not the per-request latency) are halved so that one arm fits in about five minutes on this machine.
REALISTIC_SCALE = 0.5


# Which fault knob of each emulator takes each figure. The Azure emulator's scale-out operation ends when its VM runs
# (boot_delay), so its boot takes the longer of the operation and the boot; the AWS emulator launches launch_delay
# after SetDesiredCapacity (moto's instance then runs at once) and lists a terminated instance for terminate_delay.
EMULATOR_KNOBS = {"gcp": {"latency": "latency", "op_delay": "op_delay", "boot_delay": "boot_delay",
                          "delete_delay": "delete_delay"},
                  "azure": {"latency": "latency", "boot_delay": "boot_delay", "delete_delay": "delete_delay"},
                  "aws": {"latency": "latency", "boot_delay": "launch_delay", "delete_delay": "terminate_delay"}}


def realistic_knobs(scale=REALISTIC_SCALE, cloud="gcp"):
    """The realistic figures of `cloud`: the durations scaled, the per-request latency as measured."""
    figures = dict(REALISTIC[cloud])
    if cloud == "azure":
        figures["boot_delay"] = max(figures.pop("op_delay"), figures["boot_delay"])
    return {k: (v if k == "latency" else round(v * scale, 2)) for k, v in figures.items() if k in EMULATOR_KNOBS[cloud]}


def set_realistic(admin, cloud, figures):
    """Set `figures` (realistic_knobs) on the emulator: GCE changes only these knobs; the Azure and AWS set_faults
    set every knob, the others to their defaults (what the sandbox runs with)."""
    knobs = {EMULATOR_KNOBS[cloud][k]: v for k, v in figures.items()}
    if cloud == "gcp":
        admin._call("POST", "faults", knobs)  # pylint: disable=protected-access
    else:
        admin.set_faults(**knobs)


def listed_seconds(admin, cloud):
    """Off GCE, the emulator's seconds a deleted instance stays listed in its group (None on GCE, whose request log
    times each deletion: delete_times)."""
    if cloud == "aws":
        return float(admin._http("GET", "/_kubenodes/faults")["terminate_delay"])  # pylint: disable=protected-access
    return float(admin.state()["faults"]["delete_delay"]) if cloud == "azure" else None


def boot_seconds(admin, cloud):
    """The emulator's seconds from a create to a running instance, as set now (the bound's boot)."""
    if cloud == "aws":
        return float(admin._http("GET", "/_kubenodes/faults")["launch_delay"])  # pylint: disable=protected-access
    return float(admin.state()["faults"]["boot_delay"])
GROUP_LABEL, CONTROL_PLANE_LABEL = "sandbox.kubenodes.io/group", "node-role.kubernetes.io/control-plane"
PASS_LINE = re.compile(r"pass (\d+): \d+/\d+ nodes on the image")


def world_objects(namespace, replicas, groups=None):
    """The Deployment with its maxUnavailable-1 PDB, and the cluster-autoscaler (pure). With `groups` ({group label
    value: replicas}), one such Deployment per worker group instead, its pods kept on that group's nodes."""
    objs = [("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})]
    apps = {"app": (replicas, None)} if groups is None else {
        "app-%d" % i: (count, {GROUP_LABEL: value}) for i, (value, count) in enumerate(sorted(groups.items()))}
    for name, (count, selector) in apps.items():
        labels = {"app": name}
        template = seed._pod_template(labels, {"nodeSelector": selector} if selector else None)  # pylint: disable=protected-access
        objs += [("/apis/apps/v1/namespaces/%s/deployments" % namespace, {
                     "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                     "spec": {"replicas": count, "selector": {"matchLabels": labels}, "template": template}}),
                 ("/apis/policy/v1/namespaces/%s/poddisruptionbudgets" % namespace, {
                     "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
                     "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}})]
    objs += [o for o in seed.workload_objects() if o[1]["metadata"].get("name") == "cluster-autoscaler"]
    return objs


def worker_groups(kube):
    """{group label value: worker count} of the seeded cluster's workers."""
    groups = {}
    for node in kube.request("GET", "/api/v1/nodes").get("items") or []:
        labels = node["metadata"].get("labels") or {}
        if CONTROL_PLANE_LABEL not in labels and labels.get(GROUP_LABEL):
            groups[labels[GROUP_LABEL]] = groups.get(labels[GROUP_LABEL], 0) + 1
    return groups


def prepare(handle, args, knobs):
    # The cloud's default call rate (not the sandbox scenario's): the figures are measured against it.
    values = scenario.prepare(str(handle.state_dir), args.cloud, control_planes=args.control_planes, workers=args.workers,
                              groups=args.groups, workloads=False, say=world.quiet, rolling_upgrade_heir_ready_seconds=args.heir_ready,
                              rolling_upgrade_cloud_calls_per_minute=None,
                              # The role's own limit follows --timeout (its default, 1,800 s, stopped run E4).
                              rolling_upgrade_timeout=int(args.timeout), **knobs)
    kube = handle.kube()
    # The large world: one small Deployment per group (--app-replicas each), else one replica per worker.
    objs = world_objects("bench", args.workers,
                         {g: args.app_replicas for g in worker_groups(kube)} if args.app_replicas else None)
    for path, obj in objs:
        kube.request("POST", path, obj)
        if obj["kind"] == "Namespace":
            seed._wait_default_sa(kube, "bench")  # pylint: disable=protected-access
    seed.wait_pods_running(handle.state, seed.expected_pods(objs, 0), 300, say=world.quiet)
    handle.nodesim.knobs(join_delay=args.join_delay, jitter=0)
    return values


def delete_times(requests, heirs_gone):
    """Per donor: seconds from its deleteInstances request to its instance gone (its Node got the unreachable taint,
    or the node simulator saw the cloud remove it), as {donor: seconds}. `heirs_gone`: {donor: (group label, gone,
    Node deleted)}. Its request is the group's last one before its Node was deleted (the collection deletes the Node
    right after the call): the group's last one before the instance was gone can be a later donor's, when passes
    come quickly (E10 read 6.6 s for the emulator's 15 s that way). GCE only: the Azure and AWS emulators' request
    logs do not say when or which group (node_delete_times)."""
    by_group = {}
    for req in requests:
        path = req.get("path", "")
        if req.get("method") == "POST" and path.endswith("/deleteInstances") and req.get("at"):
            by_group.setdefault(path.rstrip("/").split("/")[-2], []).append(req["at"])
    out = {}
    for donor, (group, gone, node_deleted) in heirs_gone.items():
        until = min(gone, node_deleted) if node_deleted is not None else gone
        times = [t for igm, ts in by_group.items() if group and group.endswith(igm) for t in ts if t <= until]
        if times:
            out[donor] = gone - max(times)
    return out


def node_delete_times(donors, gone):
    """Per donor: seconds from its Node's deletion to its instance gone. The collection deletes the Node right after
    its delete call returns, so this is shorter than the time from the call by the call's own duration (the bound is
    then lower, the ratio higher). `donors`: the watch's records, `gone`: {donor: when its instance was gone}."""
    return {n: gone[n] - r["deleted"] for n, r in donors.items() if gone.get(n) and r.get("deleted")
            and gone[n] >= r["deleted"]}


def role_value(values, name):
    """The role variable `name` as the arm's run sets it, else the role's default."""
    if name in values:
        return values[name]
    defaults = ROOT / "roles" / "rolling_upgrade" / "defaults" / "main.yml"
    return (yaml.safe_load(defaults.read_text()) or {}).get(name)


def run_arm(args, engine, arm, workdir, realistic=False, suffix=""):
    knobs = dict(ARMS[arm])
    arm_name = arm + ("@realistic" if realistic else "") + suffix
    label = "%s/%s" % (engine, arm_name)
    world.log("arm %s: fresh sandbox, seeding %d+%d nodes" % (label, args.control_planes, args.workers))
    with world.fresh_sandbox(args.cloud, keep=args.keep) as handle:
        values = prepare(handle, args, knobs)
        admin = handle.cloud(args.cloud)
        if realistic:
            # Set after seeding (the world's own nodes come up fast).
            set_realistic(admin, args.cloud, realistic_knobs(cloud=args.cloud))
        boot = boot_seconds(admin, args.cloud)
        listed_for = listed_seconds(admin, args.cloud)
        before = {i["provider_id"] for i in handle.nodesim.instances()}
        watch = world.ClusterWatch(handle).start()
        load_before = world.loadavg()
        world.log("arm %s: running the upgrade (load %s)" % (label, load_before))
        run = world.MeasuredRun(values, workdir / ("%s-%s.log" % (engine, arm_name)))
        rc = run.wait(args.timeout)
        watch.stop()
        requests = admin.requests()
        instances = handle.nodesim.instances()
        nodes_now = upgrade_nodes(handle, values["rolling_upgrade_image"])
        # Read before the sandbox (and the report directory in its state) goes.
        summary = report_summary(values)
    started = run.started
    nodes, _ = watch.snapshot()
    initial = watch.initial_nodes
    donors = {n: r for n, r in nodes.items() if n in initial}
    cp = sorted(n for n, r in donors.items() if r.get("control_plane"))
    workers = sorted(n for n in donors if n not in cp)
    groups = {}
    for name in workers:
        groups[donors[name]["group"]] = groups.get(donors[name]["group"], 0) + 1
    drains = watch.drains()
    # A donor's instance is gone when its Node got the unreachable taint, or, since the collection deletes the Node right
    # after the deleteInstances call (before the cloud removes the instance), when the node simulator saw the cloud
    # remove it.
    removed = {i["node_name"]: i["removed_at"] for i in instances if i.get("removed_at")}
    # Off GCE, when the node simulator saw the instance leave the group: the AWS emulator's EC2 says shutting-down (the
    # Node turns unreachable) halfway through the terminate_delay the group still lists it for.
    gone = {n: (r["gone"] or removed.get(n)) if args.cloud == "gcp" else (removed.get(n) or r["gone"])
            for n, r in donors.items()}
    deletes = (delete_times(requests, {n: (r["group"], gone[n], r.get("deleted")) for n, r in donors.items() if gone[n]})
               if args.cloud == "gcp" else node_delete_times(donors, gone))
    d_w, e_w = bound.median([drains.get(n) for n in workers]), bound.median([deletes.get(n) for n in workers])
    d_cp, e_cp = bound.median([drains.get(n) for n in cp]), bound.median([deletes.get(n) for n in cp])
    if listed_for is not None:
        # Off GCE the group lists a deleted instance (its slot held) for the emulator's knob from the delete call:
        # the bound takes that, not the measured time from the Node's deletion (node_delete_times), which is shorter.
        e_w, e_cp = max(e_w, listed_for), max(e_cp, listed_for)
    surge = ARMS[arm].get("rolling_upgrade_max_surge", DEFAULT_SURGE)
    surge_total = ARMS[arm].get("rolling_upgrade_max_surge_total", DEFAULT_SURGE_TOTAL)
    # The joins as the node simulator timed them (instance created to Node registered): a control-plane heir also
    # starts its real etcd member, within the join_delay knob unless that start is slower, so its bound takes the
    # measured join (the knobs-only bound is printed too).
    joins = {"control-plane": [], "worker": []}
    for i in instances:
        if i["provider_id"] not in before and i.get("created") and i.get("joined"):
            joins.setdefault(i.get("role") or "worker", []).append(i["joined"] - i["created"])
    j_cp, j_w = bound.median(joins["control-plane"], default=None), bound.median(joins["worker"], default=None)
    lb_hold = float(role_value(values, "rolling_upgrade_lb_drain_seconds") or 0)
    canary = dict(canary=bool(role_value(values, "rolling_upgrade_canary")),
                  canary_soak=float(role_value(values, "rolling_upgrade_soak_seconds") or 0))
    crit = bound.critical_path(len(cp), list(groups.values()), surge, surge_total, boot, args.join_delay,
                               args.heir_ready, d_w, e_w, d_cp, e_cp, join_cp=j_cp, lb_hold=lb_hold, **canary)
    crit_knobs = bound.critical_path(len(cp), list(groups.values()), surge, surge_total, boot, args.join_delay,
                                     args.heir_ready, d_w, e_w, d_cp, e_cp, lb_hold=lb_hold, **canary)
    heir_boots = [i["created"] for i in instances if i["provider_id"] not in before and i.get("created")]
    # The first create request (GCE's log times them); elsewhere the first heir instance the node simulator saw.
    creates = [r["at"] for r in requests if r.get("method") == "POST" and r.get("at", 0) >= started
               and r.get("path", "").endswith(("/createInstances", "/resize"))] if args.cloud == "gcp" else heir_boots
    reaction = watch.reaction(args.heir_ready)
    replaced = sum(1 for n in donors if donors[n]["deleted"])
    output = run.output()
    passes = summary.get("passes") or summary.get("slices") or max([int(m.group(1)) for m in PASS_LINE.finditer(output)]
                                                                    or [0])
    makespan = (run.ended or time.time()) - started
    last_delete = max([r["deleted"] for r in donors.values() if r["deleted"]] or [0]) - started
    result = {
        "engine": engine, "arm": arm_name, "knobs": ARMS[arm], "rc": rc, "cloud_name": args.cloud,
        "cloud": realistic_knobs(cloud=args.cloud) if realistic else {"latency": 0.0, "boot_delay": boot},
        # The run report's count of the step engine's cloud requests (calls, peak per minute, limit).
        "cloud_calls": summary.get("cloud_calls"),
        # The run report's Kubernetes requests of the step engine, by kind and per replaced node (issue 22).
        "kube_calls": summary.get("kube_calls"),
        "completed": rc == 0 and replaced == len(donors) and nodes_now["on_image"] == nodes_now["total"],
        "nodes": {"control_planes": len(cp), "workers": len(workers), "replaced": replaced,
                  "on_image_at_end": "%d/%d" % (nodes_now["on_image"], nodes_now["total"])},
        "makespan_s": round(makespan, 1), "start_to_last_old_node_deleted_s": round(last_delete, 1),
        "passes": passes,
        "bound_s": round(crit["bound"], 1), "bound_parts": {k: round(v, 2) for k, v in crit.items()},
        # Only a finished upgrade has a makespan to compare with the bound of the whole world.
        "ratio": round(makespan / crit["bound"], 2) if crit["bound"] and rc == 0 else None,
        # The same with the knob's join for the control planes too (what the bound was before join_cp).
        "bound_knobs_only_s": round(crit_knobs["bound"], 1),
        "ratio_knobs_only": round(makespan / crit_knobs["bound"], 2) if crit_knobs["bound"] and rc == 0 else None,
        "measured": {"drain_worker_median_s": round(d_w, 2), "delete_worker_median_s": round(e_w, 2),
                     "drain_cp_median_s": round(d_cp, 2), "delete_cp_median_s": round(e_cp, 2),
                     "drains_s": {k: round(v, 2) for k, v in sorted(drains.items())},
                     "deletes_s": {k: round(v, 2) for k, v in sorted(deletes.items())},
                     "create_boot_s": boot, "join_delay_s": args.join_delay, "heir_ready_s": args.heir_ready, "lb_hold_s": lb_hold, **canary,
                     "join_cp_median_s": round(j_cp, 2) if j_cp is not None else None,
                     "join_worker_median_s": round(j_w, 2) if j_w is not None else None},
        "cpu_s": round(run.cpu or 0, 1),
        "cpu_s_per_replaced_node": round((run.cpu or 0) / replaced, 2) if replaced else None,
        "start_to_first_create_s": round(min(creates) - started, 1) if creates else None,
        "start_to_first_heir_booted_s": round(min(heir_boots) - started, 1) if heir_boots else None,
        "ready_to_paired_s": _spread([r["ready_to_paired"] for r in reaction.values()]),
        "ready_to_cordon_minus_gate_s": _spread([r["ready_to_cordon"] for r in reaction.values()]),
        # Where the time went: each node's moments as the watch saw them, and each create request, from the start.
        "timeline": {name: {k: round(v - started, 2) for k, v in rec.items() if isinstance(v, float)}
                     for name, rec in sorted(nodes.items())},
        "creates_s": [round(t - started, 2) for t in sorted(creates)],
        "load_before": load_before, "load_after": world.loadavg(),
        "watch_errors": watch.errors[:5],
    }
    world.log("arm %s: rc %s, makespan %.0f s, bound %.0f s, ratio %s, %s passes, CPU %.1f s/node"
              % (label, rc, makespan, crit["bound"], result["ratio"], passes, result["cpu_s_per_replaced_node"] or 0))
    return result


def upgrade_nodes(handle, image):
    """{total, on_image}: the Nodes, and those Ready on `image` (the node simulator reports the cloud's image reference
    as the osImage, as assert_upgraded reads it)."""
    items = world.upgrade_helpers.nodes(handle)
    on_image = sum(1 for n in items if (n["status"].get("nodeInfo") or {}).get("osImage", "").lower() == image.lower()
                   and world.upgrade_helpers.is_ready(n))
    return {"total": len(items), "on_image": on_image}


def report_summary(values):
    path = pathlib.Path(values["rolling_upgrade_report_dir"]) / "image-upgrade-report.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data.get("summary", data)



def _spread(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    return {"n": len(values), "min": round(values[0], 2), "median": round(bound.median(values), 2),
            "max": round(values[-1], 2)}


def ratios(results):
    """The reference arm against surge 4 (each arm's ratio to its bound is in its own row)."""
    by = {(r["engine"], r["arm"]): r for r in results if r.get("completed")}   # a stopped arm compares with nothing
    out = {}
    for engine in sorted({r["engine"] for r in results}):
        ref, fast = by.get((engine, "reference")), by.get((engine, "surge4"))
        if ref and fast:
            out["%s: reference over surge4" % engine] = {"makespan_s": _div(ref["makespan_s"], fast["makespan_s"])}
    return out


def _div(a, b):
    return round(a / b, 2) if a and b else None


def print_table(results):
    cols = ("engine", "arm", "rc", "makespan_s", "passes", "bound_s", "ratio", "cpu_s_per_replaced_node",
            "start_to_first_create_s")
    print("\n| " + " | ".join(cols) + " | drain/delete median s (workers) | Ready->paired s (median/max) | "
          "Ready->cordon-gate s (median/max) | cloud calls (peak/min, of limit) | cloud calls per replaced node | "
          "Kubernetes calls (per replaced node) |")
    print("|" + "---|" * (len(cols) + 6))
    for r in results:
        m = r["measured"]
        rp, rc_ = r["ready_to_paired_s"] or {}, r["ready_to_cordon_minus_gate_s"] or {}
        calls, kubes = r.get("cloud_calls") or {}, r.get("kube_calls") or {}
        replaced = r["nodes"]["replaced"]
        print("| " + " | ".join(str(r.get(c)) for c in cols)
              + " | %s / %s | %s / %s | %s / %s | %s (%s, %s) | %s | %s (%s) |" % (
                  m["drain_worker_median_s"], m["delete_worker_median_s"], rp.get("median"), rp.get("max"),
                  rc_.get("median"), rc_.get("max"), calls.get("calls"), calls.get("peak_per_minute"),
                  calls.get("peak_fraction_of_limit"), _div(calls.get("calls"), replaced), kubes.get("calls"),
                  kubes.get("per_replaced_node")))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cloud", default="gcp", choices=sorted(REALISTIC),
                        help="the cloud emulator the world runs on (default gcp)")
    parser.add_argument("--control-planes", type=int, default=1, choices=(1, 3))
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--groups", type=int, default=2, help="worker scaling groups")
    parser.add_argument("--app-replicas", type=int, default=0,
                        help="one Deployment of this many replicas (PDB maxUnavailable 1) per worker group, instead of "
                             "one replica per worker")
    parser.add_argument("--large", action="store_true",
                        help="issue 22's large world: 3 control planes and 1,000 workers in 10 groups, 2 replicas per "
                             "group, only surge10pct@realistic (--workers and --groups still override the sizes)")
    parser.add_argument("--quick", action="store_true", help="2 workers (1 per group): a fast check of the script")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--realistic", default="", help="these arms once more with realistic cloud timings (after --arms)")
    parser.add_argument("--join-delay", type=float, default=20.0)
    parser.add_argument("--heir-ready", type=float, default=5.0, help="rolling_upgrade_heir_ready_seconds")
    parser.add_argument("--small-arms", default="",
                        help="after the others, these arms with realistic cloud timings on 1 + 8 workers in 2 groups "
                             "(issue 22 asks for them in the same run as the large world)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="per arm, for ansible-playbook")
    parser.add_argument("--parallel", type=int, default=1, help="run this many arms at once (default 1)")
    parser.add_argument("--json", default=None, help="write every figure to FILE")
    parser.add_argument("--keep", action="store_true", help="keep each sandbox's state directory (logs)")
    parser.add_argument("--workdir", default=None, help="where the playbook logs go (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.quick:
        args.workers = 2
    if args.large:
        given = argv if argv is not None else sys.argv[1:]
        args.control_planes, args.app_replicas = 3, args.app_replicas or 2
        args.workers = args.workers if "--workers" in given else 1000
        args.groups = args.groups if "--groups" in given else 10
        args.arms, args.realistic = ("" if "--arms" not in given else args.arms), (args.realistic or "surge10pct")
    engines = [world.ENGINE]
    arms = [a for a in args.arms.split(",") if a]
    realistic = [a for a in args.realistic.split(",") if a]
    small = [a for a in args.small_arms.split(",") if a]
    if set(arms + realistic + small) - set(ARMS):
        parser.error("--arms, --realistic and --small-arms: choose from %s" % ",".join(ARMS))
    small_args = copy.copy(args)
    small_args.control_planes, small_args.workers, small_args.groups, small_args.app_replicas = 1, 8, 2, 0
    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="kubenodes-makespan-"))
    workdir.mkdir(parents=True, exist_ok=True)
    header = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "commit": world.commit(), "cloud": args.cloud,
              "engines": engines, "arms": arms, "parallel": args.parallel, "control_planes": args.control_planes, "workers": args.workers,
              "groups": args.groups, "app_replicas": args.app_replicas,
              "join_delay_s": args.join_delay, "heir_ready_s": args.heir_ready, "load_start": world.loadavg(),
              "realistic_arms": realistic, "small_arms": small, "realistic_knobs": realistic_knobs(cloud=args.cloud),
              "realistic_scale": REALISTIC_SCALE}
    counted, burn = world.check_cpu_accounting(workdir)
    header["cpu_accounting_check"] = {"module_burned_s": burn, "wait4_counted_s": round(counted, 2),
                                      "workers_counted": counted >= 0.9 * burn}
    world.log("makespan benchmark %s; CPU accounting: a module burning %.1f s added %.2f s to the wait4 figure (%s)"
              % (header["commit"], burn, counted, "counted" if counted >= 0.9 * burn else "NOT COUNTED"))
    results = []
    lock = threading.Lock()

    def one(engine, arm, real=False, suffix=""):
        try:
            result = run_arm(small_args if suffix else args, engine, arm, workdir, realistic=real, suffix=suffix)
        except Exception as exc:  # noqa: BLE001 - one broken arm must not lose the others' figures
            world.log("arm %s/%s FAILED: %r" % (engine, arm, exc))
            result = {"engine": engine, "arm": arm + ("@realistic" if real else "") + suffix, "error": repr(exc),
                      "measured": {}}
        with lock:
            results.append(result)
            if args.json:
                pathlib.Path(args.json).write_text(json.dumps({"header": header, "results": results}, indent=2))

    # With --parallel N, N arms run at once (each on its own sandbox), which shortens the wall time on a busy
    # machine.
    todo = [(engine, arm, False, "") for arm in arms for engine in engines]
    todo += [(engine, arm, True, "") for arm in realistic for engine in engines]
    todo += [(engine, arm, True, SMALL_SUFFIX) for arm in small for engine in engines]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
        for future in [pool.submit(one, *item) for item in todo]:
            future.result()
    order = {(engine, arm + ("@realistic" if real else "") + suffix): i for i, (engine, arm, real, suffix) in enumerate(todo)}
    results.sort(key=lambda r: order[(r["engine"], r["arm"])])
    done = [r for r in results if "error" not in r]
    header["load_end"] = world.loadavg()
    print("\nmakespan benchmark, %s, %s, commit %s, load average %s -> %s, logs in %s"
          % (args.cloud, header["date"], header["commit"], header["load_start"], header["load_end"], workdir))
    print_table(done)
    rat = ratios(done)
    for key, value in rat.items():
        print("ratio %s: %s" % (key, value))
    for r in results:
        if "error" in r:
            print("arm %s/%s did not run: %s" % (r["engine"], r["arm"], r["error"]))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"header": header, "results": results, "ratios": rat}, indent=2))
    return 0 if all(r.get("completed") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
