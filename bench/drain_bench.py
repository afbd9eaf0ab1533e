"""Benchmark: time to drain 110 pods from one node with node_drain, with and without PDBs.

    .venv/bin/python bench/drain_bench.py [--pods 110] [--repeat 1] [--scenarios a,b,...] [--json FILE]

Starts a fresh sandbox (real kube-apiserver, controller-manager with the disruption, ReplicaSet and
Deployment controllers, scheduler; simulated kubelets, no cloud emulators). For each scenario: a donor
node running one Deployment of --pods replicas (pod grace period 1 s), optionally a PDB, then an empty
heir node in the same group; then `kubenodes.image_upgrade.node_drain` with wait=true runs through
ansible-playbook. Reported per run: wall time of the ansible-playbook call, the module's own `elapsed`
(the drain, without Ansible's start-up), and the time until every replica runs again on the heir.

Scenarios:
  no_pdb_c1        no PDB, eviction_concurrency=1 (evictions one after another)
  no_pdb_c10       no PDB, eviction_concurrency=10 (the default)
  pdb_10_c10       PDB minAvailable = pods-10 (ten disruptions at a time), concurrency 10
  pdb_1_c10        PDB minAvailable = pods-1 (one disruption at a time), concurrency 10

Not a test: the figures depend on the machine and on what else runs on it.
"""

import argparse
import json
import pathlib
import shutil
import sys
import tempfile
import time
import uuid

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sandbox import cli  # noqa: E402  (after the path set-up above)
from tests import conftest as _tests_conftest  # noqa: E402,F401  (makes the collection importable)
from tests.ansible_run import run_module  # noqa: E402
from tests.integration import drain_helpers as helpers  # noqa: E402

SCENARIOS = {
    "no_pdb_c1": dict(pdb_budget=None, concurrency=1),
    "no_pdb_c10": dict(pdb_budget=None, concurrency=10),
    "pdb_10_c10": dict(pdb_budget=10, concurrency=10),
    "pdb_1_c10": dict(pdb_budget=1, concurrency=10),
}


def run_scenario(handle, name, pod_count, pdb_budget, concurrency, say):
    kube = handle.kube()
    namespace = "bench-" + uuid.uuid4().hex[:8]
    group = helpers.unique_group()
    kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}}, ok=(201,))
    helpers.wait_until("the default service account",
                       lambda: any(sa["metadata"]["name"] == "default" for sa in kube.request(
                           "GET", "/api/v1/namespaces/%s/serviceaccounts" % namespace).get("items", [])), 30)
    created = []

    def new_node():
        node_name = "bench-" + uuid.uuid4().hex[:8]
        provider_id = "sim://%s/%s" % (group, node_name)
        handle.nodesim.create_instance(provider_id, node_name, group_id=group, image="image-a")
        created.append((provider_id, node_name))
        handle.wait_nodes_ready([node_name], timeout=60)
        return node_name

    try:
        donor = new_node()
        helpers.create_deployment(kube, namespace, "load", pod_count, group, grace=1)
        helpers.wait_running_on(kube, namespace, donor, pod_count, timeout=600)
        if pdb_budget is not None:
            helpers.create_pdb(kube, namespace, "load", {"app": "load"}, min_available=pod_count - pdb_budget)
            helpers.wait_pdb_observed(kube, namespace, "load", pdb_budget, timeout=60)
        heir = new_node()
        say("%s: %d pods on %s, heir %s; draining" % (name, pod_count, donor, heir))
        started = time.monotonic()
        result = run_module("node_drain", dict(handle.auth_args(), name=donor, wait=True, wait_timeout=900,
                                               wait_sleep=1, eviction_concurrency=concurrency), timeout=1200)
        wall = time.monotonic() - started
        if result.get("failed") or result.get("reason") != "drained":
            raise RuntimeError("%s: drain did not finish: %s" % (name, result.get("msg") or result.get("reason")))
        helpers.wait_running_on(kube, namespace, heir, pod_count, timeout=600)
        rescheduled = time.monotonic() - started
        return {"scenario": name, "pods": pod_count, "pdb_disruptions_allowed": pdb_budget,
                "eviction_concurrency": concurrency, "evicted": len(result["evicted"]),
                "module_elapsed_s": round(result["elapsed"], 2), "ansible_wall_s": round(wall, 2),
                "all_running_on_heir_s": round(rescheduled, 2)}
    finally:
        for pod in kube.request("GET", "/api/v1/namespaces/%s/pods" % namespace).get("items", []):
            kube.request("DELETE", "/api/v1/namespaces/%s/pods/%s" % (namespace, pod["metadata"]["name"]),
                         {"gracePeriodSeconds": 0}, ok=(200, 202, 404))
        kube.request("DELETE", "/api/v1/namespaces/" + namespace, ok=(200, 202, 404))
        for provider_id, node_name in created:
            try:
                handle.nodesim.delete_instance(provider_id)
            except RuntimeError:
                pass
            kube.request("DELETE", "/api/v1/nodes/" + node_name, ok=(200, 202, 404))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=110, help="pods on the drained node (a node holds 110)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated, from: %s" % ", ".join(SCENARIOS))
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    chosen = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = set(chosen) - set(SCENARIOS)
    if unknown:
        parser.error("unknown scenarios: %s" % ", ".join(sorted(unknown)))
    if not 1 <= args.pods <= 110:
        parser.error("--pods must be between 1 and 110 (the simulated nodes hold 110 pods)")

    t0 = time.monotonic()
    say = lambda msg: print("[%6.1fs] %s" % (time.monotonic() - t0, msg), flush=True)  # noqa: E731
    state_dir = pathlib.Path(tempfile.mkdtemp(prefix="kubenodes-drain-bench-"))
    handle = cli.Sandbox.start(state_dir, clouds=[], say=say)
    results = []
    try:
        for round_number in range(args.repeat):
            for name in chosen:
                row = run_scenario(handle, name, args.pods, say=say, **SCENARIOS[name])
                row["round"] = round_number + 1
                say(json.dumps(row))
                results.append(row)
    finally:
        handle.stop()
        shutil.rmtree(state_dir, ignore_errors=True)
    print("\n| scenario | PDB disruptionsAllowed | concurrency | drain (module) s | ansible-playbook s | all running on heir s |")
    print("|---|---|---|---|---|---|")
    for row in results:
        print("| %s | %s | %d | %.1f | %.1f | %.1f |" % (
            row["scenario"], "none" if row["pdb_disruptions_allowed"] is None else row["pdb_disruptions_allowed"],
            row["eviction_concurrency"], row["module_elapsed_s"], row["ansible_wall_s"], row["all_running_on_heir_s"]))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
