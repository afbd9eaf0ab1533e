"""`make demo`: set up, start the local sandbox, seed a small cluster on image A, show it.

    python -m sandbox.demo [--cloud gcp|azure|aws|none] [--keep] [--state-dir DIR]

It builds or reuses the control-plane binaries, starts the sandbox, seeds 3 control-plane and 6 worker
nodes in 2 worker groups with workloads (through the cloud emulator when it exists), prints the nodes,
and stops the sandbox again unless --keep is given.
"""

import argparse
import pathlib
import sys
import time

from sandbox import binaries, cli, controlplane, seed

REPO = pathlib.Path(__file__).resolve().parent.parent
UPGRADE_PLAYBOOK = REPO / "playbooks" / "upgrade_nodes.yml"


def node_table(nodes, now=None):
    """`kubectl get nodes`-style lines for Node dicts (pure)."""
    import datetime

    now = now or datetime.datetime.now(datetime.timezone.utc)
    rows = [("NAME", "STATUS", "ROLES", "AGE", "INTERNAL-IP", "IMAGE", "PROVIDER-ID")]
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        meta, status = node["metadata"], node.get("status", {})
        ready = next((c["status"] for c in status.get("conditions", []) if c["type"] == "Ready"), "Unknown")
        state = "Ready" if ready == "True" else "NotReady"
        if node.get("spec", {}).get("unschedulable"):
            state += ",SchedulingDisabled"
        roles = ",".join(sorted(k.split("/", 1)[1] for k in meta.get("labels", {})
                                if k.startswith("node-role.kubernetes.io/"))) or "<none>"
        created = datetime.datetime.strptime(meta["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.timezone.utc)
        age = int((now - created).total_seconds())
        ip = next((a["address"] for a in status.get("addresses", []) if a["type"] == "InternalIP"), "")
        image = status.get("nodeInfo", {}).get("osImage", "")
        rows.append((meta["name"], state, roles, "%ds" % age if age < 120 else "%dm" % (age // 60), ip,
                     image.rsplit("/", 1)[-1], node.get("spec", {}).get("providerID", "")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["   ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cloud", default=None, help="gcp (default when its emulator exists), azure, aws or none")
    parser.add_argument("--keep", action="store_true", help="leave the sandbox running afterwards")
    parser.add_argument("--state-dir", default=str(controlplane.default_state_dir() / "demo"))
    args = parser.parse_args(argv)
    started = time.monotonic()
    print("== set-up: control-plane binaries", flush=True)
    binaries.ensure()
    cloud = args.cloud or ("gcp" if "gcp" in cli.available_clouds() else "none")
    if cloud != "none" and cloud not in cli.available_clouds():
        print("demo: the %s emulator does not exist in this checkout" % cloud, file=sys.stderr)
        return 1
    print("== starting the sandbox in %s" % args.state_dir, flush=True)
    try:
        state = cli.up(args.state_dir, clouds=[] if cloud == "none" else [cloud])
    except cli.SandboxError as exc:
        print("demo: %s" % exc, file=sys.stderr)
        return 1
    try:
        print("== seeding 3 control-plane + 6 worker nodes in 2 worker groups on image-a (cloud: %s)" % cloud,
              flush=True)
        seed.seed(state, control_planes=3, workers=6, worker_groups=2, cloud=cloud, image="image-a", timeout=300)
        kube = cli.Sandbox(args.state_dir).kube()
        print()
        print("\n".join(node_table(kube.request("GET", "/api/v1/nodes")["items"])))
        print()
        if UPGRADE_PLAYBOOK.exists():
            print("The upgrade playbook %s exists, but the demo does not run it yet." % UPGRADE_PLAYBOOK)
        else:
            print("The upgrade job (playbooks/upgrade_nodes.yml) is not implemented yet: this demo only builds and "
                  "shows the cluster it will upgrade.")
        if args.keep:
            print("\nThe sandbox keeps running. Try:\n  KUBECONFIG=%s %s get nodes\n"
                  "Stop it with:\n  .venv/bin/python -m sandbox --state-dir %s down"
                  % (state["kubeconfig"], binaries.path_of("kubectl"), args.state_dir))
    finally:
        if not args.keep:
            print("== stopping the sandbox", flush=True)
            cli.down(args.state_dir, say=lambda *_: None)
    print("demo finished in %.0fs" % (time.monotonic() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
