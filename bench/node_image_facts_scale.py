"""Benchmark: the cost of one node_image_facts call as the cluster grows.

    .venv/bin/python bench/node_image_facts_scale.py [--sizes 500,1000,2500,5000] [--groups 10]
                                                     [--cloud gcp|aws] [--json FILE]

For every size N, starts a fresh real control plane (etcd, kube-apiserver, controller-manager, scheduler;
sandbox.controlplane) and a fresh cloud emulator in this process without the node simulator (GCE by
default; `--cloud aws` uses moto in server mode, whose own request handling slows down sharply beyond a
thousand instances), creates 10 scaling groups of N/10 instances on the old image, registers one Node per
instance (its providerID, cached scaling-group and image annotations), and runs the node_image_facts
module once as its own process (python plugins/modules/node_image_facts.py args.json, what AnsiballZ
runs), measuring:

  - wall time, CPU time (user + system) and peak resident memory (ru_maxrss from wait4) of the module
    process; wall time includes waiting for the emulator, which answers in this same process;
  - Kubernetes API calls, from the apiserver's own apiserver_request_total counters for nodes and pods
    (before/after difference; the controllers only watch, they do not LIST during the run);
  - cloud API calls, from the emulator's request log;
  - how each grows from the smallest to the largest size (ratio of the ratios: 1.0 is linear).

Not a test: the figures depend on the machine and on what else runs on it. Stops everything it started.
"""

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / ".build" / "collections"))

import requests  # noqa: E402

from sandbox import controlplane  # noqa: E402
from sandbox.clouds import aws as aws_emulator  # noqa: E402

MODULE = REPO / "plugins" / "modules" / "node_image_facts.py"
PREFIX = "image-upgrade.kubenodes.io"
_METRIC = re.compile(r'^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$')


def request_counts(state):
    """{(verb, resource): count} from the apiserver's metrics, for nodes and pods."""
    response = requests.get(state["apiserver"] + "/metrics", cert=(state["admin_cert"], state["admin_key"]),
                            verify=state["ca"], timeout=30)
    response.raise_for_status()
    counts = {}
    for line in response.text.splitlines():
        match = _METRIC.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group("labels")))
        if labels.get("resource") in ("nodes", "pods") and not labels.get("subresource"):
            key = (labels.get("verb"), labels["resource"])
            counts[key] = counts.get(key, 0) + float(match.group("value"))
    return counts


def kube_calls(before, after):
    diff = {}
    for key in set(before) | set(after):
        delta = int(after.get(key, 0) - before.get(key, 0))
        if delta:
            diff["%s %s" % key] = delta
    return diff


def make_node(instance_id, zone, group, image):
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": instance_id, "labels": {"kubernetes.io/hostname": instance_id, "team": group.rsplit("/", 1)[-1]},
                     "annotations": {PREFIX + "/scaling-group-id": group, PREFIX + "/node-image": image}},
        "spec": {"providerID": "aws:///%s/%s" % (zone, instance_id)},
    }


def register_nodes(api_client, nodes):
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import kube

    def create(node):
        kube.raw_request(api_client, "POST", "/api/v1/nodes", body=node)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(create, nodes))


def setup_gcp(groups, per_group):
    from sandbox.clouds import gce as gce_emulator

    emulator = gce_emulator.GceEmulator().start()
    admin = emulator.admin()
    old, new = admin.create_image("bench-old"), admin.create_image("bench-new")
    group_ids = [admin.create_group("bench-%02d" % i, "worker", per_group, old) for i in range(groups)]
    deadline = time.monotonic() + 300
    last_count, last_change = -1, time.monotonic()
    while True:   # the emulator creates the instances of a new group in the background
        instances = admin.state()["instances"]
        if len(instances) >= groups * per_group:
            break
        if len(instances) != last_count:
            last_count, last_change = len(instances), time.monotonic()
        elif instances and time.monotonic() - last_change > 15:
            break   # it stopped short (an instance it could not name or place): measure what exists
        if time.monotonic() > deadline:
            raise SystemExit("the GCE emulator created %d of %d instances" % (len(instances), groups * per_group))
        time.sleep(0.5)
    nodes = []
    for path in instances:      # "<project>/<zone>/<name>"
        project, zone, name = path.split("/")
        group = next(g for g in group_ids if g.endswith("/bench-%s" % name.split("-")[1]))
        node = make_node(name, zone, group, old)
        node["spec"]["providerID"] = "gce://%s/%s/%s" % (project, zone, name)
        nodes.append(node)
    return emulator, admin, new, group_ids, nodes


def setup_aws(groups, per_group):
    emulator = aws_emulator.AwsEmulator().start()
    admin = emulator.admin()
    old, new = admin.create_image("bench-old"), admin.create_image("bench-new")
    names = [admin.create_group("bench-%02d" % i, "worker", per_group, old, max_size=per_group + 10)
             for i in range(groups)]
    nodes = []
    for group in names:
        described = admin.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group])
        for member in described["AutoScalingGroups"][0]["Instances"]:
            nodes.append(make_node(member["InstanceId"], member["AvailabilityZone"], group, old))
    return emulator, admin, new, names, nodes


def run_module(args, workdir):
    """Run the module as its own process; return (result, wall seconds, CPU seconds, peak RSS in MB). CPU time
    excludes the time the module waits for the apiserver and the emulator (both run on this machine)."""
    args_file = workdir / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / ".build" / "collections")]))
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(MODULE), str(args_file)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=str(workdir))
    out_chunks = []
    try:
        # Read stdout fully before wait4 so a big result cannot block the child on a full pipe.
        out_chunks.append(proc.stdout.read())
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
    except BaseException:
        proc.kill()  # interrupted: never leave the module process behind
        proc.wait(timeout=30)
        raise
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - started
    try:
        result = json.loads(b"".join(out_chunks))
    except ValueError:
        raise SystemExit("module printed no JSON (exit %s): %s" % (proc.returncode, err.decode()[-2000:]))
    return result, seconds, usage.ru_utime + usage.ru_stime, round(usage.ru_maxrss / 1024.0, 1)


def growth(rows, key):
    """(value at largest / value at smallest) / (size ratio): about 1.0 means linear growth."""
    first, last = rows[0], rows[-1]
    if not first[key]:
        return None
    return round((last[key] / first[key]) / (last["nodes"] / first["nodes"]), 2)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,1000,2500,5000")
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--cloud", choices=["gcp", "aws"], default="gcp")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    t0 = time.monotonic()

    def say(msg):
        print("[%6.1fs] %s" % (time.monotonic() - t0, msg), flush=True)

    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import kube

    rows = []
    for size in sizes:
        workdir = pathlib.Path(tempfile.mkdtemp(prefix="kubenodes-bench-facts-"))
        plane = controlplane.ControlPlane(workdir / "cp")
        emulator = None
        try:
            state = plane.start(say=lambda *_: None)
            setup = setup_gcp if args.cloud == "gcp" else setup_aws
            emulator, admin, new, groups, nodes = setup(args.groups, size // args.groups)
            api_client = kube.build_api_client({"kubeconfig": state["kubeconfig"]})
            register_nodes(api_client, nodes)
            say("N=%d: %d nodes in %d %s groups registered" % (size, len(nodes), len(groups), args.cloud))
            module_args = dict(admin.provider_options(), kubeconfig=state["kubeconfig"], image=new, max_surge="10%")
            admin.clear_requests()
            before = request_counts(state)
            result, seconds, cpu, rss = run_module(module_args, workdir)
            after = request_counts(state)
            if result.get("failed"):
                raise SystemExit("node_image_facts failed: %s" % result.get("msg"))
            cloud = admin.requests()
            calls = kube_calls(before, after)
            row = dict(nodes=len(nodes), groups=len(groups), cloud=args.cloud, seconds=round(seconds, 2),
                       cpu_seconds=round(cpu, 2), peak_rss_mb=rss, kube_calls=calls,
                       kube_calls_total=sum(calls.values()), cloud_calls=len(cloud),
                       outdated=len(result["nodes"]["outdated"]), invalid=len(result["nodes"]["invalid"]),
                       to_create=result["budget"]["to_create"])
            rows.append(row)
            say("N=%(nodes)d: %(seconds).2fs wall, %(cpu_seconds).2fs CPU, peak RSS %(peak_rss_mb).1f MB, "
                "kube calls %(kube_calls)s, cloud calls %(cloud_calls)d, outdated %(outdated)d" % row)
        finally:
            if emulator is not None:
                emulator.stop()
            plane.stop(say=lambda *_: None)
            shutil.rmtree(workdir, ignore_errors=True)
    summary = dict(rows=rows, growth=dict(seconds=growth(rows, "seconds"), cpu_seconds=growth(rows, "cpu_seconds"),
                                          peak_rss_mb=growth(rows, "peak_rss_mb"),
                                          kube_calls=growth(rows, "kube_calls_total"),
                                          cloud_calls=growth(rows, "cloud_calls")))
    print(json.dumps(summary, indent=2))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
