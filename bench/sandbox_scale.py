"""Benchmark: how the local sandbox holds a large cluster on this machine.

    .venv/bin/python bench/sandbox_scale.py [--nodes 1000] [--pods 10000] [--control-planes 3]
                                            [--groups 4] [--json FILE] [--keep]

Starts a fresh sandbox (no cloud emulators: nodes are created straight through the node simulator),
seeds N nodes (3 of them control plane, each with a real etcd member) and about P pods (a DaemonSet on
every node, PDB-guarded Deployments, a StatefulSet, emptyDir and bare pods, the cluster-autoscaler), and
reports: time until every node is Ready, time until every pod runs, the time of a full LIST of nodes
and pods, and the peak resident memory (VmHWM) of every component. Stops the sandbox at the end unless
--keep. Not a test: the figures depend on the machine and on what else runs on it.
"""

import argparse
import json
import pathlib
import shutil
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from sandbox import cli, seed  # noqa: E402  (after the path set-up above)


def peak_rss_mb(pid):
    """Peak resident set size of `pid` in MB (VmHWM), or None if it is gone."""
    try:
        with open("/proc/%d/status" % pid) as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024.0, 1)
    except OSError:
        return None
    return None


def workload_sizes(nodes, pods, deployments=30):
    """Deployment replicas so the seeded pods reach at least `pods` (pure). Fixed parts: one DaemonSet
    pod per node, 3 StatefulSet, 2 emptyDir, 2 bare and 1 autoscaler pod."""
    rest = max(pods - nodes - 8, deployments)
    return {"deployments": deployments, "replicas": max(-(-rest // deployments), 1)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--control-planes", type=int, default=3)
    parser.add_argument("--groups", type=int, default=4, help="worker scaling groups")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--keep", action="store_true", help="leave the sandbox running")
    args = parser.parse_args(argv)

    state_dir = pathlib.Path(tempfile.mkdtemp(prefix="kubenodes-bench-"))
    say = lambda msg: print("[%6.1fs] %s" % (time.monotonic() - t0, msg), flush=True)  # noqa: E731
    t0 = time.monotonic()
    results = {"nodes": args.nodes, "pods_wanted": args.pods, "control_planes": args.control_planes}
    handle = None
    try:
        handle = cli.Sandbox.start(state_dir, clouds=[], say=say)
        results["up_s"] = round(time.monotonic() - t0, 1)
        sizes = workload_sizes(args.nodes, args.pods)
        summary = seed.seed(handle.state, control_planes=args.control_planes, workers=args.nodes - args.control_planes,
                            worker_groups=args.groups, cloud="none", image="image-a", timeout=args.timeout, say=say,
                            **sizes)
        results.update(nodes_ready_s=summary["nodes_ready_after_s"], pods_running=summary["pods"],
                       pods_running_s=summary["pods_running_after_s"], deployments=sizes)
        kube = handle.kube()
        for what, path in (("list_nodes_s", "/api/v1/nodes"), ("list_pods_s", "/api/v1/pods")):
            started = time.monotonic()
            kube.request("GET", path, timeout=120)
            results[what] = round(time.monotonic() - started, 2)
        peaks = {name: peak_rss_mb(pid) for name, pid in handle.state["pids"].items()}
        for name, member in handle.cp_etcd()["members"].items():
            if member["pid"]:
                peaks["cp-etcd " + name] = peak_rss_mb(member["pid"])
        results["peak_rss_mb"] = peaks
    finally:
        if not args.keep:
            if handle is not None:
                handle.stop()
            else:
                cli.down(state_dir, say=lambda *_: None)
            shutil.rmtree(state_dir, ignore_errors=True)  # etcd data of a 10,000-pod cluster: hundreds of MB
    print(json.dumps(results, indent=2))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    if args.keep and handle is not None:
        print("sandbox kept in %s; stop it with: .venv/bin/python -m sandbox --state-dir %s down"
              % (state_dir, state_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
