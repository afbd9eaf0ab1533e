"""Benchmark: the cost of one node_image_facts call as the cluster grows.

    .venv/bin/python bench/node_image_facts_scale.py [--sizes 500,1000,2500,5000] [--groups 10] [--json FILE]

Starts a real control plane (etcd, kube-apiserver, controller-manager, scheduler; sandbox.controlplane)
and the AWS emulator (moto in server mode, in this process, no node simulator), then for every size N:
grows 10 auto scaling groups to N/10 instances each, registers one Node per instance (providerID
aws:///<zone>/<instance>, cached scaling-group and image annotations of the old image), and runs the
node_image_facts module once as its own process (python plugins/modules/node_image_facts.py args.json,
exactly what AnsiballZ runs), measuring:

  - wall time and peak resident memory (ru_maxrss from wait4) of the module process;
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
        "metadata": {"name": instance_id, "labels": {"kubernetes.io/hostname": instance_id, "team": group},
                     "annotations": {PREFIX + "/scaling-group-id": group, PREFIX + "/node-image": image}},
        "spec": {"providerID": "aws:///%s/%s" % (zone, instance_id)},
    }


def grow(admin, api_client, groups, per_group, image, existing):
    """Scale every group to `per_group` instances and register a Node for each new instance."""
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import kube

    for group in groups:
        admin.autoscaling.update_auto_scaling_group(AutoScalingGroupName=group, MaxSize=per_group + 10,
                                                    DesiredCapacity=per_group)
    new_nodes = []
    for group in groups:
        described = admin.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group])
        for member in described["AutoScalingGroups"][0]["Instances"]:
            if member["InstanceId"] not in existing:
                existing.add(member["InstanceId"])
                new_nodes.append(make_node(member["InstanceId"], member["AvailabilityZone"], group, image))

    def create(node):
        kube.raw_request(api_client, "POST", "/api/v1/nodes", body=node)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(create, new_nodes))
    return len(new_nodes)


def run_module(args, workdir):
    """Run the module as its own process; return (result, seconds, peak RSS in MB)."""
    args_file = workdir / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / ".build" / "collections")]))
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(MODULE), str(args_file)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=str(workdir))
    out_chunks = []
    # Read stdout fully before wait4 so a big result cannot block the child on a full pipe.
    out_chunks.append(proc.stdout.read())
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - started
    try:
        result = json.loads(b"".join(out_chunks))
    except ValueError:
        raise SystemExit("module printed no JSON (exit %s): %s" % (proc.returncode, err.decode()[-2000:]))
    return result, seconds, round(usage.ru_maxrss / 1024.0, 1)


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
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    t0 = time.monotonic()

    def say(msg):
        print("[%6.1fs] %s" % (time.monotonic() - t0, msg), flush=True)

    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import kube

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="kubenodes-bench-facts-"))
    plane = controlplane.ControlPlane(workdir / "cp")
    emulator = None
    rows = []
    try:
        state = plane.start(say=say)
        emulator = aws_emulator.AwsEmulator().start()
        admin = emulator.admin()
        say("AWS emulator at %s" % admin.endpoint)
        old, new = admin.create_image("bench-old"), admin.create_image("bench-new")
        groups = [admin.create_group("bench-%02d" % i, "worker", 0, old) for i in range(args.groups)]
        api_client = kube.build_api_client({"kubeconfig": state["kubeconfig"]})
        existing = set()
        module_args = dict(admin.provider_options(), kubeconfig=state["kubeconfig"], image=new, max_surge="10%")
        for size in sizes:
            added = grow(admin, api_client, groups, size // args.groups, old, existing)
            say("%d nodes registered (+%d)" % (len(existing), added))
            admin.clear_requests()
            before = request_counts(state)
            result, seconds, rss = run_module(module_args, workdir)
            after = request_counts(state)
            if result.get("failed"):
                raise SystemExit("node_image_facts failed: %s" % result.get("msg"))
            cloud = admin.requests()
            calls = kube_calls(before, after)
            row = dict(nodes=len(existing), groups=len(groups), seconds=round(seconds, 2), peak_rss_mb=rss,
                       kube_calls=calls, kube_calls_total=sum(calls.values()), cloud_calls=len(cloud),
                       cloud_call_kinds=sorted({"%s %s" % (c.get("service", ""), c.get("action", c.get("method", "")))
                                                for c in cloud}),
                       outdated=len(result["nodes"]["outdated"]), to_create=result["budget"]["to_create"])
            rows.append(row)
            say("N=%(nodes)d: %(seconds).2fs, peak RSS %(peak_rss_mb).1f MB, kube calls %(kube_calls)s, "
                "cloud calls %(cloud_calls)d" % row)
        summary = dict(rows=rows, growth=dict(seconds=growth(rows, "seconds"), peak_rss_mb=growth(rows, "peak_rss_mb"),
                                              kube_calls=growth(rows, "kube_calls_total"),
                                              cloud_calls=growth(rows, "cloud_calls")))
        print(json.dumps(summary, indent=2))
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(summary, indent=2))
    finally:
        if emulator is not None:
            emulator.stop()
        plane.stop(say=lambda *_: None)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
