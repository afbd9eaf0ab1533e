"""`make demo`: set up, start the local sandbox, seed a small cluster on image A, and run the main job
(playbooks/upgrade_nodes.yml) that rolls every node onto image B.

    python -m sandbox.demo [--cloud gcp|azure|aws|none] [--no-upgrade] [--keep] [--state-dir DIR]

It builds or reuses the control-plane binaries, starts the sandbox, seeds 3 control-plane and 6 worker
nodes in 2 worker groups with workloads through the cloud emulator (gcp by default), shows the nodes,
runs the upgrade playbook with ansible-playbook against the sandbox, shows the nodes again, and stops
the sandbox unless --keep is given. With --cloud none or --no-upgrade it only builds and shows the cluster.
"""

import argparse
import json
import os
import pathlib
import subprocess
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


def _collections_path():
    """ansible finds the collection as ansible_collections/kubenodes/image_upgrade: link this checkout."""
    root = REPO / ".build" / "collections"
    link = root / "ansible_collections" / "kubenodes" / "image_upgrade"
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(REPO)
    return root


def run_upgrade(state_dir, cloud):
    """Seed through `cloud` on image A, then run the upgrade playbook to image B; return its exit code."""
    from sandbox import scenario

    print("== seeding 3 control-plane + 6 worker nodes in 2 worker groups on %s (cloud: %s)"
          % (scenario.IMAGE_A, cloud), flush=True)
    values = scenario.prepare(state_dir, cloud, control_planes=3, workers=6, groups=2)
    show_nodes(state_dir)
    vars_path = pathlib.Path(state_dir) / "upgrade-vars.json"
    vars_path.write_text(json.dumps(values, indent=2) + "\n")
    playbook = pathlib.Path(sys.executable).parent / "ansible-playbook"
    cmd = [str(playbook), "-i", "localhost,", str(UPGRADE_PLAYBOOK), "-e", "@" + str(vars_path)]
    print("== running the upgrade: %s" % " ".join(cmd), flush=True)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(_collections_path()), ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    started = time.monotonic()
    try:
        code = subprocess.run(cmd, env=env, cwd=str(REPO), timeout=values.get("rolling_upgrade_timeout", 1800) + 600,
                              check=False).returncode
    except subprocess.TimeoutExpired:
        print("demo: the upgrade playbook did not finish in time", file=sys.stderr)
        return 124
    print("== upgrade playbook exit code %d after %.0fs; report in %s"
          % (code, time.monotonic() - started, values.get("rolling_upgrade_report_dir")), flush=True)
    show_nodes(state_dir)
    return code


def show_nodes(state_dir):
    kube = cli.Sandbox(state_dir).kube()
    print()
    print("\n".join(node_table(kube.request("GET", "/api/v1/nodes")["items"])))
    print(flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cloud", default=None, help="gcp (default when its emulator exists), azure, aws or none")
    parser.add_argument("--no-upgrade", action="store_true", help="only build and show the cluster")
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
    upgrade = not args.no_upgrade and cloud != "none" and UPGRADE_PLAYBOOK.exists()
    print("== starting the sandbox in %s" % args.state_dir, flush=True)
    try:
        state = cli.up(args.state_dir, clouds=[] if cloud == "none" else [cloud])
    except cli.SandboxError as exc:
        print("demo: %s" % exc, file=sys.stderr)
        return 1
    code = 0
    try:
        if upgrade:
            code = run_upgrade(args.state_dir, cloud)
        else:
            print("== seeding 3 control-plane + 6 worker nodes in 2 worker groups on image-a (cloud: %s)" % cloud,
                  flush=True)
            seed.seed(state, control_planes=3, workers=6, worker_groups=2, cloud=cloud, image="image-a", timeout=300)
            show_nodes(args.state_dir)
            if not UPGRADE_PLAYBOOK.exists():
                print("The upgrade job (playbooks/upgrade_nodes.yml) is not implemented yet: this demo only builds "
                      "and shows the cluster it will upgrade.")
            else:
                print("Upgrade skipped (--no-upgrade or --cloud none).")
        if args.keep:
            print("\nThe sandbox keeps running. Try:\n  KUBECONFIG=%s %s get nodes\n"
                  "Stop it with:\n  .venv/bin/python -m sandbox --state-dir %s down"
                  % (state["kubeconfig"], binaries.path_of("kubectl"), args.state_dir))
    finally:
        if not args.keep:
            print("== stopping the sandbox (logs stay in %s/logs)" % args.state_dir, flush=True)
            cli.down(args.state_dir, say=lambda *_: None)
    print("demo finished in %.0fs%s" % (time.monotonic() - started, "" if code == 0 else " (the upgrade FAILED)"))
    return code


if __name__ == "__main__":
    sys.exit(main())
