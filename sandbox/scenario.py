"""An upgrade scenario on a running sandbox: a cluster seeded on image A through one cloud emulator, image
B created in that cloud, and the rolling_upgrade role's variables that upgrade it to B. Used by the demo,
the end-to-end tests and the molecule scenario, so all three run the same job.

    python -m sandbox.scenario --state-dir DIR --cloud gcp --vars-out vars.json [--control-planes 3 ...]
"""

import argparse
import importlib
import json
import pathlib

from sandbox import cli, nodesim, seed

IMAGE_A = "image-a"
IMAGE_B = "image-b"


def admin_of(state, cloud):
    info = (state.get("clouds") or {}).get(cloud)
    if not info:
        raise RuntimeError("the %s emulator does not run in this sandbox" % cloud)
    return importlib.import_module(cli.CLOUD_MODULES[cloud]).Admin(info)


def role_vars(state_dir, cloud, image_ref, report_dir=None, **overrides):
    """The rolling_upgrade variables that upgrade this sandbox's cluster to `image_ref` on `cloud`."""
    handle = cli.Sandbox(state_dir)
    admin = admin_of(handle.state, cloud)
    options = admin.provider_options()
    etcd = handle.cp_etcd()
    values = {
        "rolling_upgrade_image": image_ref,
        "rolling_upgrade_provider": cloud,
        "rolling_upgrade_" + cloud: options[cloud],
        "rolling_upgrade_kube": handle.auth_args(),
        "rolling_upgrade_etcd_ca_cert": etcd["ca"],
        "rolling_upgrade_etcd_client_cert": etcd["cert"],
        "rolling_upgrade_etcd_client_key": etcd["key"],
        # A simulated node joins in seconds: short pauses and gates keep the run quick.
        "rolling_upgrade_pass_delay": 2,
        "rolling_upgrade_heir_ready_seconds": 2,
        # No cloud load balancer here: a short hold keeps the run quick (the role's 300 s is for real clouds).
        "rolling_upgrade_lb_drain_seconds": 2,
        "rolling_upgrade_join_timeout": 300,
        "rolling_upgrade_drain_timeout": 300,
        "rolling_upgrade_timeout": 1800,
        # The emulators answer in milliseconds and set no limit. The cloud's default rate, a quarter of a real cloud's
        # documented limit (docs/api-limits.md), would pace passes that a real cloud's slower answers space out anyway
        # (a GCE e2e run's requests waited 17 s for tokens in 45 s at the default).
        "rolling_upgrade_cloud_calls_per_minute": 3000,
        # The seeded workloads include bare pods on purpose; the demo replaces their nodes anyway.
        "rolling_upgrade_drain_force": True,
        # Labels the simulated kubelet sets per node (like a cloud's bootstrap labels): not the donor's to give.
        "rolling_upgrade_copy_labels_exclude": [nodesim.IMAGE_LABEL, nodesim.GROUP_LABEL],
        "rolling_upgrade_report_dir": str(report_dir or pathlib.Path(state_dir) / "report"),
    }
    values.update(overrides)
    return values


def prepare(state_dir, cloud, control_planes=3, workers=6, groups=2, workloads=True, say=print,
            azure_orchestration=None, worker_group_options=None, **overrides):
    """Seed the cluster on image A through `cloud` (Azure scale sets in `azure_orchestration` mode, worker groups with
    `worker_group_options`, seed.seed_nodes), create image B; return the role variables."""
    handle = cli.Sandbox(state_dir)
    seed.seed(handle.state, control_planes=control_planes, workers=workers, worker_groups=groups, cloud=cloud,
              image=IMAGE_A, workloads=workloads, timeout=300, say=say, azure_orchestration=azure_orchestration,
              worker_group_options=worker_group_options)
    image_b = admin_of(handle.state, cloud).create_image(IMAGE_B)
    say("image B in %s: %s" % (cloud, image_b))
    return role_vars(state_dir, cloud, image_b, **overrides)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--cloud", default="gcp", choices=["gcp", "azure", "aws"])
    parser.add_argument("--control-planes", type=int, default=3)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--no-workloads", action="store_true")
    parser.add_argument("--azure-orchestration", choices=["Uniform", "Flexible"],
                        help="orchestration mode of the Azure scale sets (with --cloud azure; default Uniform)")
    parser.add_argument("--vars-out", required=True, help="where to write the role variables (JSON)")
    args = parser.parse_args(argv)
    values = prepare(args.state_dir, args.cloud, args.control_planes, args.workers, args.groups,
                     workloads=not args.no_workloads, azure_orchestration=args.azure_orchestration)
    pathlib.Path(args.vars_out).write_text(json.dumps(values, indent=2) + "\n")
    print("role variables written to %s" % args.vars_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
