"""Abort and roll back (issue 23 item 4), end to end on each cloud: an upgrade of one worker group at surge 2 is killed with
its whole process tree right after its first drain call (two heirs created, a donor cordoned and tainted, none
deleted yet); abort_upgrade.yml then leaves the cluster as it was - the start's nodes, none cordoned, tainted or
excluded from the load balancers, no instance beyond the start's, the group on its old image, its cloud settings
back, the lock free - and on AWS rollback_nodes.yml, run next, replaces nothing (every node is on the previous image;
the playbook is the same on every cloud, so one run of it is enough)."""

import json
import pathlib
import time

import pytest

import upgrade_helpers as uh
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import hold_points
from test_upgrade_e2e_killed import wait_for_hold
from tests.ansible_run import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LB_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"


def short_names(values, report_dir):
    """The playbooks' short variable names for the role variables of `values`."""
    cloud = values["rolling_upgrade_provider"]
    drain = {k: v for k, v in values.items() if k.startswith("rolling_upgrade_drain_")}   # the seeded bare pods: force
    return dict(drain, provider=cloud, kube=values["rolling_upgrade_kube"], report_dir=str(report_dir),
                max_surge=values["rolling_upgrade_max_surge"], **{cloud: values["rolling_upgrade_" + cloud]})


def marks_left(handle):
    """Nodes still cordoned, tainted to be replaced, excluded from the load balancers or paired."""
    left = {}
    for node in uh.nodes(handle):
        meta, spec = node["metadata"], node["spec"]
        marks = [m for m, on in (
            ("cordoned", spec.get("unschedulable")),
            ("tainted", any(t.get("key") == uh.PREFIX + "/to-be-replaced" for t in spec.get("taints") or [])),
            ("lb-excluded", LB_LABEL in meta.get("labels", {})),
            ("paired", any(k in (meta.get("annotations") or {}) for k in (uh.PREFIX + "/heir", uh.PREFIX + "/donor"))),
        ) if on]
        if marks:
            left[meta["name"]] = marks
    return left


def worker_world(upgrade_cluster, cloud="aws", **overrides):
    """A sandbox on `cloud` with one worker group of 3 nodes (and a control plane the run leaves alone), upgraded at surge
    2; its start, the groups' images and cloud settings."""
    handle, values, start = upgrade_cluster(cloud, workers=3, groups=1, rolling_upgrade_max_surge=2, **overrides)
    workers = {uh.label_value(n["metadata"]["labels"][uh.GROUP_LABEL]) for n in uh.nodes(handle)
               if uh.CONTROL_PLANE_LABEL not in n["metadata"]["labels"]}
    values["rolling_upgrade_scaling_groups"] = sorted(start["group_ids"][w] for w in workers)
    return handle, values, start, uh.group_images(values), uh.group_settings(values)


def abort_and_check(handle, values, start, images, settings, report_dir, tmp_path, outcomes):
    """abort_upgrade.yml, then the cluster as it was: the start's nodes with no mark of the run, the start's
    instances, the groups' images and settings, the lock free, the abort journaled and the attempts' `outcomes`."""
    abort = uh.PlaybookRun(short_names(values, report_dir), tmp_path / "abort.log",
                           playbook=REPO / "playbooks" / "abort_upgrade.yml")
    assert abort.wait(300) == 0, abort.output()[-6000:]
    abort.assert_no_secret_in_output()
    assert sorted(n["metadata"]["name"] for n in uh.nodes(handle)) == start["node_names"]
    assert marks_left(handle) == {}
    assert {i["provider_id"] for i in uh.live_instances(handle)} == start["instances"]
    assert uh.group_images(values) == images
    uh.assert_settings_restored(values, settings, report_dir=report_dir)
    assert uh.lease_holder(handle) is None, "the abort did not release the run lock"
    journal = uh.journal(handle)
    assert journal["abort"]["outcome"] == "done", journal.get("abort")
    summary = json.loads((pathlib.Path(report_dir) / "image-upgrade-report.json").read_text())
    assert [a["outcome"] for a in summary["attempts"]] == outcomes, summary["attempts"]
    return abort


@pytest.mark.timeout(900)
@pytest.mark.parametrize("cloud", ["gcp", "azure", "aws"])
def test_abort_after_a_kill_leaves_the_cluster_as_it_was_and_rollback_replaces_nothing(upgrade_cluster, tmp_path, cloud):
    handle, values, start, images, settings = worker_world(upgrade_cluster, cloud)
    hold_file = tmp_path / "hold"
    run = uh.PlaybookRun(values, tmp_path / "killed.log",
                         env={hold_points.ENV_POINTS: "drain", hold_points.ENV_FILE: str(hold_file)})
    try:
        wait_for_hold(run, hold_file, "drain", 300)
        run.kill()
    finally:
        run.kill()
    created = [i for i in uh.live_instances(handle) if i["provider_id"] not in start["instances"]]
    assert len(created) == 2, created
    assert marks_left(handle), "the killed run left no donor marked: the abort would have nothing to undo"
    assert uh.journal(handle)["group_images"], "the group's image before the run is not in the journal"

    report_dir = tmp_path / "abort-report"
    check = uh.PlaybookRun(short_names(values, report_dir), tmp_path / "abort-check.log", check=True,
                           playbook=REPO / "playbooks" / "abort_upgrade.yml")
    assert check.wait(120) == 0, check.output()[-4000:]
    assert "pointed back from" in check.output() and "remove: created by this upgrade" in check.output(), check.output()[-4000:]
    assert len(uh.live_instances(handle)) == len(start["instances"]) + 2, "check mode changed the instances"

    abort_and_check(handle, values, start, images, settings, report_dir, tmp_path, ["killed", "aborted"])
    if cloud != "aws":
        return

    rollback = uh.PlaybookRun(short_names(values, tmp_path / "rollback-report"), tmp_path / "rollback.log",
                              playbook=REPO / "playbooks" / "rollback_nodes.yml")
    assert rollback.wait(300) == 0, rollback.output()[-6000:]
    assert sorted(n["metadata"]["name"] for n in uh.nodes(handle)) == start["node_names"]
    assert set(uh.group_images(values).values()) == set(images.values())
    assert {i["provider_id"] for i in uh.live_instances(handle)} == start["instances"]
    # The rollback pointed no group anywhere, so its own journal records no previous image: a second one refuses.
    again = uh.PlaybookRun(short_names(values, tmp_path / "again-report"), tmp_path / "again.log",
                           playbook=REPO / "playbooks" / "rollback_nodes.yml")
    assert again.wait(120) != 0
    assert "records no image the groups had before the last upgrade" in again.output(), again.output()[-3000:]
    assert "nothing was changed" in again.output()
    assert {i["provider_id"] for i in uh.live_instances(handle)} == start["instances"]


@pytest.mark.timeout(600)
def test_a_live_run_stops_for_the_abort_within_seconds_and_the_abort_undoes_it(upgrade_cluster, tmp_path):
    """The abort asks the live run to stop through its Lease: the run ends as stopped at its next pass, releases the
    lock, and the abort takes over and undoes the heirs it had made. Heirs wait 30 s Ready before their donor is
    drained, so no donor is gone when the abort comes."""
    handle, values, start, images, settings = worker_world(upgrade_cluster, rolling_upgrade_heir_ready_seconds=30)
    run = uh.PlaybookRun(values, tmp_path / "live.log")
    try:
        uh.wait_until(lambda: len(uh.live_instances(handle)) > len(start["instances"]), 240, "a heir created")
        asked = time.monotonic()
        abort_and_check(handle, values, start, images, settings, tmp_path / "abort-report", tmp_path, ["stopped", "aborted"])
        assert run.wait(60) != 0
    finally:
        run.kill()
    assert "an abort of this upgrade was asked at" in run.output(), run.output()[-4000:]
    assert "abort_upgrade.yml takes over and undoes it" in run.output(), run.output()[-4000:]
    print("the abort after the ask took %.1f s" % (time.monotonic() - asked))
