"""The step engine's own CPU per pass and per replaced node, with and without taking the last plan again (issue 22).

    .venv/bin/python bench/plan_cost.py [--workers 80,300,1000] [--groups 10] [--max-surge 10%] [--drain-rounds 6]
                                        [--control-planes 3] [--json FILE]

No cluster and no cloud: the production executor (plugins/module_utils/executor.py) runs against the in-memory world
of the unit and property tests (tests/unit/plugins/module_utils/core_world.py), 3 control-plane nodes and N workers in
G groups on the old image, until every node is replaced. Instances boot, join and turn Ready one world tick after
another (a tick is the executor's wait); each donor's drain reports pods still going for --drain-rounds eviction
rounds before it is empty, so passes follow each other at the executor's DRAIN_POLL while nothing the planner reads
changes, as they do while evicted pods terminate on a real cluster. Each size runs twice in this one invocation: with
the last plan taken again while nothing it was made from changed (`reuse`, the default) and with a plan every pass
(`every pass`, the baseline).

The Nodes are read as the production Node cache hands them out (core_world.CachedNodes over node_cache.NodeStore: a
Node's copy made once per change and handed out again until the Node changes).

Figures per arm: passes; plans made; CPU seconds (time.process_time) of the whole run (the executor, the Node store's
copies and the in-memory world's own copies of the instances, which stand in for the provider's parsing), of the
planning alone (Executor.plan), of the world's Node version (a JSON dump of every Node here; the production Node
cache's version is a counter) and of finding the Nodes the world changed (`watch`, a JSON dump of every Node per read;
in production the watch's events say it): those two parts are the benchmark's, not the engine's, and engine_cpu_*
leaves them out; each per pass and per replaced node. Not a test: the figures depend on the machine and what else runs
on it.
"""

import argparse
import json
import os
import pathlib
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
for _path in (REPO / "tests" / "unit" / "plugins" / "module_utils", REPO / ".build" / "collections"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import core_world  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core, executor  # noqa: E402


def build_world(control_planes, workers, groups):
    cp = core_world.group("cp", role="control-plane")
    worker_groups = [core_world.group("g%d" % i, role="worker") for i in range(groups)]
    world = core_world.World([cp] + worker_groups)
    for i in range(control_planes):
        world.add_node("cp-%d" % i, "cp", core_world.OLD, control_plane=True)
    for i in range(workers):
        world.add_node("w-%d" % i, worker_groups[i % groups].id, core_world.OLD)
    return world


class Measured:
    """CPU seconds and calls of one function, wrapped in place."""

    def __init__(self, owner, name):
        self.owner, self.name, self.seconds, self.calls = owner, name, 0.0, 0
        self.inner = getattr(owner, name)
        measured = self

        def wrapper(*args, **kwargs):
            start = time.process_time()
            try:
                return measured.inner(*args, **kwargs)
            finally:
                measured.seconds += time.process_time() - start
                measured.calls += 1
        setattr(owner, name, wrapper)

    def restore(self):
        setattr(self.owner, self.name, self.inner)


def run(control_planes, workers, groups, max_surge, drain_rounds, reuse):
    world = build_world(control_planes, workers, groups)
    # The Nodes as the production Node cache hands them out: a copy per change, the same copy again until the Node
    # changes. Finding what the world changed (a JSON dump of every Node per read) stands in for the watch's thread.
    cached = core_world.CachedNodes(world, check=False)
    ex = world.executor(core.Options(image=core_world.NEW.lower(), max_surge=max_surge), etcd_health=True, poll=2.0,
                        cached_nodes=cached)
    ex.plan_reuse = reuse
    rounds = {}
    inner_drain = ex.kube.drain

    def drain(name):
        """Pods still going for drain_rounds rounds, then the world's drain (empty node)."""
        rounds[name] = rounds.get(name, 0) + 1
        if rounds[name] <= drain_rounds:
            world.nodes[name]["spec"]["unschedulable"] = True   # cordoned on the first round, as a real drain does
            return dict(drained=False, evicted=[], pending=["app/pod-%s" % name], blocked=[], reason="pending")
        return inner_drain(name)
    ex.kube.drain = drain
    planning = Measured(executor.Executor, "plan")
    version = Measured(ex.kube, "nodes_version")
    watch = Measured(cached, "refresh")
    start_cpu, start_wall = time.process_time(), time.monotonic()
    try:
        done = False
        for _slice in range(10000):
            result = ex.run_slice(seconds=600)
            if result["done"]:
                done = True
                break
    finally:
        planning.restore()
    cpu, wall = time.process_time() - start_cpu, time.monotonic() - start_wall
    replaced = control_planes + workers - sum(1 for n in world.nodes.values()
                                              if (n["metadata"].get("annotations") or {}).get(core.DEFAULT_PREFIX + "/node-image")
                                              == core_world.OLD)
    passes = ex.passes
    return {"control_planes": control_planes, "workers": workers, "groups": groups, "max_surge": max_surge,
            "arm": "reuse" if reuse else "every pass", "done": done, "passes": passes, "plans_made": planning.calls,
            "plans_reused": ex.plans_reused, "replaced": replaced, "wall_s": round(wall, 2), "cpu_s": round(cpu, 3),
            "plan_cpu_s": round(planning.seconds, 3), "version_cpu_s": round(version.seconds, 3),
            "watch_cpu_s": round(watch.seconds, 3),
            "engine_cpu_ms_per_pass": round(1000 * (cpu - version.seconds - watch.seconds) / passes, 2) if passes else None,
            "cpu_ms_per_pass": round(1000 * cpu / passes, 2) if passes else None,
            "plan_cpu_ms_per_pass": round(1000 * planning.seconds / passes, 2) if passes else None,
            "cpu_s_per_replaced_node": round(cpu / replaced, 4) if replaced else None,
            "plan_cpu_s_per_replaced_node": round(planning.seconds / replaced, 4) if replaced else None,
            "engine_cpu_s_per_replaced_node": round((cpu - version.seconds - watch.seconds) / replaced, 4) if replaced else None}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="80,300,1000")
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--control-planes", type=int, default=3)
    parser.add_argument("--max-surge", default="10%")
    parser.add_argument("--drain-rounds", type=int, default=6)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    results = []
    header = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "load_start": os.getloadavg()}
    cols = ("workers", "arm", "done", "passes", "plans_made", "plans_reused", "cpu_s", "plan_cpu_s", "version_cpu_s",
            "watch_cpu_s", "cpu_ms_per_pass", "engine_cpu_ms_per_pass", "plan_cpu_ms_per_pass", "cpu_s_per_replaced_node",
            "plan_cpu_s_per_replaced_node", "engine_cpu_s_per_replaced_node")
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols), flush=True)
    for workers in [int(w) for w in args.workers.split(",")]:
        for reuse in (False, True):
            result = run(args.control_planes, workers, args.groups, args.max_surge, args.drain_rounds, reuse)
            results.append(result)
            print("| " + " | ".join(str(result[c]) for c in cols) + " |", flush=True)
            if args.json:
                pathlib.Path(args.json).write_text(json.dumps({"header": header, "results": results}, indent=2))
    header["load_end"] = os.getloadavg()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"header": header, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
