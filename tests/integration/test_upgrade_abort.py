"""Abort and roll back (issue 23 item 4), end to end on each cloud: an upgrade of one worker group of 3 at surge 2
is killed with its whole process tree at a chosen moment, and abort_upgrade.yml then leaves the cluster as it was -
as many nodes per group as at the start, none cordoned, tainted, excluded from the load balancers or paired, no
instance beyond the nodes', the group on its old image, its cloud settings back, the lock free.

- Killed right after its first drain call (two heirs created, a donor cordoned and tainted, none deleted yet), on
  GCP, Azure and AWS: the abort removes both heirs and gives the donors back, so the start's nodes are left.
- Killed right after its first donor's Node deletion (AWS): the heirs whose donors are gone or going stay, and
  rollback_nodes.yml then replaces them onto the previous image with an upgrade's invariants (the watcher), after a
  rollback with no recorded image refused and changed nothing.
- A control-plane upgrade killed right after its donor's first drain call (GCP): the abort removes the heir's etcd
  member before the heir."""

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


def rollback_values(values, report_dir):
    """rollback_nodes.yml's variables: the short names, and the sandbox's role variables (its short waits, the labels
    not to copy), as an operator may pass them; never the upgrade's image or report directory."""
    role = {k: v for k, v in values.items()
            if k.startswith("rolling_upgrade_") and k not in ("rolling_upgrade_image", "rolling_upgrade_report_dir")}
    return dict(role, **short_names(values, report_dir))


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


def abort_and_check(handle, values, start, images, settings, report_dir, tmp_path, outcomes, may_keep=(), said=(),
                    extra=None):
    """abort_upgrade.yml, then the cluster as it was: as many nodes as at the start, the start's but for heirs in
    `may_keep` that replaced some, with no mark of the run; an instance for each node and no other; the groups'
    images and settings, the lock free, the abort journaled and the attempts' `outcomes`; its progress a line per
    step, each of `said` in one of them. Returns the heirs kept."""
    abort = uh.PlaybookRun(dict(short_names(values, report_dir), **(extra or {})), tmp_path / "abort.log",
                           playbook=REPO / "playbooks" / "abort_upgrade.yml")
    assert abort.wait(300) == 0, abort.output()[-6000:]
    abort.assert_no_secret_in_output()
    lines = [line for line in abort.output().splitlines() if line.startswith("abort: ")]
    assert lines and lines[-1].startswith("abort: done: the upgrade to "), abort.output()[-6000:]
    assert any(line.endswith("thing(s) were left to undo before this step)") for line in lines[:-1]), lines
    assert all(any(s in line for line in lines) for s in said), (said, lines)
    names = sorted(n["metadata"]["name"] for n in uh.nodes(handle))
    kept = sorted(set(names) - set(start["node_names"]))
    assert len(names) == len(start["node_names"]) and set(kept) <= set(may_keep), (names, may_keep)
    assert marks_left(handle) == {}
    assert sorted(i["node_name"] for i in uh.live_instances(handle)) == names, "an instance left behind"
    if not may_keep:
        assert {i["provider_id"] for i in uh.live_instances(handle)} == start["instances"]
    assert uh.group_images(values) == images
    uh.assert_settings_restored(values, settings, report_dir=report_dir)
    assert uh.lease_holder(handle) is None, "the abort did not release the run lock"
    journal = uh.journal(handle)
    assert journal["abort"]["outcome"] == "done", journal.get("abort")
    summary = json.loads((pathlib.Path(report_dir) / "image-upgrade-report.json").read_text())
    assert [a["outcome"] for a in summary["attempts"]] == outcomes, summary["attempts"]
    return kept


def killed_at(world, tmp_path, point):
    """The upgrade of `world` (worker_world) killed whole at hold point `point`; the world."""
    hold_file = tmp_path / "hold"
    run = uh.PlaybookRun(world[1], tmp_path / "killed.log",
                         env={hold_points.ENV_POINTS: point, hold_points.ENV_FILE: str(hold_file)})
    try:
        wait_for_hold(run, hold_file, point, 300)
        run.kill()
    finally:
        run.kill()
    assert uh.journal(world[0])["group_images"], "the group's image before the run is not in the journal"
    return world


def check_mode_names(values, tmp_path, handle, words, going=()):
    """abort_upgrade.yml --check says `words` and leaves the instances as they are, but those of the nodes in
    `going` (donors whose instance deletion the killed run asked: the cloud finishes it on its own)."""
    before = {i["provider_id"] for i in uh.live_instances(handle) if i["node_name"] not in going}
    check = uh.PlaybookRun(short_names(values, tmp_path / "check-report"), tmp_path / "abort-check.log", check=True,
                           playbook=REPO / "playbooks" / "abort_upgrade.yml")
    assert check.wait(120) == 0, check.output()[-4000:]
    assert all(w in check.output() for w in words), check.output()[-4000:]
    after = {i["provider_id"] for i in uh.live_instances(handle) if i["node_name"] not in going}
    assert after == before, "check mode changed the instances: %s, then %s" % (sorted(before), sorted(after))


@pytest.mark.timeout(900)
@pytest.mark.parametrize("cloud", ["gcp", "azure", "aws"])
def test_abort_after_a_kill_at_a_drain_leaves_the_start_nodes(upgrade_cluster, tmp_path, cloud):
    handle, values, start, images, settings = killed_at(worker_world(upgrade_cluster, cloud), tmp_path, "drain")
    created = [i for i in uh.live_instances(handle) if i["provider_id"] not in start["instances"]]
    assert len(created) == 2, created
    assert marks_left(handle), "the killed run left no donor marked: the abort would have nothing to undo"
    check_mode_names(values, tmp_path, handle, ["pointed back from", "remove: created by this upgrade"])
    abort_and_check(handle, values, start, images, settings, tmp_path / "abort-report", tmp_path, ["killed", "aborted"])


@pytest.mark.timeout(900)
def test_abort_after_a_kill_past_a_replacement_keeps_its_heirs_and_rollback_replaces_them(upgrade_cluster, tmp_path):
    world = worker_world(upgrade_cluster, "aws")
    handle, values, start = world[:3]
    # Before any upgrade no journal records a previous image: a rollback refuses and changes nothing.
    refused = uh.PlaybookRun(short_names(values, tmp_path / "refused-report"), tmp_path / "refused.log",
                             playbook=REPO / "playbooks" / "rollback_nodes.yml")
    assert refused.wait(120) != 0
    assert "records no image the groups had before the last upgrade" in refused.output(), refused.output()[-3000:]
    assert "nothing was changed" in refused.output()
    assert {i["provider_id"] for i in uh.live_instances(handle)} == start["instances"]

    handle, values, start, images, settings = killed_at(world, tmp_path, "delete-node")
    gone = sorted(set(start["node_names"]) - {n["metadata"]["name"] for n in uh.nodes(handle)})
    assert gone, "the killed run deleted no donor's Node: nothing would be kept"
    heirs = {n["metadata"]["name"]: (n["metadata"].get("annotations") or {}).get(uh.PREFIX + "/donor")
             for n in uh.nodes(handle) if n["metadata"]["name"] not in start["node_names"]}
    donors = gone + [n["metadata"]["name"] for n in uh.nodes(handle) if uh.PREFIX + "/heir" in (n["metadata"].get("annotations") or {})]
    check_mode_names(values, tmp_path, handle, ["pointed back from", "keep: "], going=donors)
    # The heir of each donor already gone stays (and one whose donor's instance is deleted); the others go.
    kept = abort_and_check(handle, values, start, images, settings, tmp_path / "abort-report", tmp_path,
                           ["killed", "aborted"], may_keep=heirs)
    assert {h for h, donor in heirs.items() if donor in gone} <= set(kept) and kept, (heirs, gone, kept)

    after_abort = uh.snapshot(handle)
    previous = sorted(set(images.values()))
    assert len(previous) == 1, images
    report_dir = tmp_path / "rollback-report"
    watcher = uh.Watcher(handle)
    watcher.start()
    try:
        rollback = uh.PlaybookRun(rollback_values(values, report_dir), tmp_path / "rollback.log",
                                  playbook=REPO / "playbooks" / "rollback_nodes.yml")
        rc = rollback.wait(400)
    finally:
        watcher.stop()
    assert rc == 0, rollback.output()[-6000:]
    rollback.assert_no_secret_in_output()
    watcher.check(after_abort, max_surge=2)
    # Every node on the previous image, as many per group; the heirs replaced, the start's nodes left on it untouched.
    nodes = uh.nodes(handle)
    names = {n["metadata"]["name"] for n in nodes}
    assert not names & set(kept), "heirs on the upgrade's image are still there: %s" % sorted(names)
    assert set(after_abort["node_names"]) - set(kept) <= names
    assert {g: len(v) for g, v in uh.snapshot(handle)["groups"].items()} == {g: len(v) for g, v in after_abort["groups"].items()}
    for node in nodes:
        assert node["status"]["nodeInfo"]["osImage"].lower() == previous[0].lower(), (
            node["metadata"]["name"], node["status"]["nodeInfo"]["osImage"])
        assert uh.is_ready(node) and not node["spec"].get("unschedulable"), node["metadata"]["name"]
    instances = uh.live_instances(handle)
    assert sorted(i["node_name"] for i in instances) == sorted(names)
    assert all(i["image"].lower() == previous[0].lower() for i in instances), instances
    assert marks_left(handle) == {}
    summary = json.loads((report_dir / "image-upgrade-report.json").read_text())
    assert sorted(r["node"] for r in summary["nodes"] if r["done"]) == kept, summary["nodes"]


@pytest.mark.timeout(900)
def test_abort_removes_a_control_plane_heir_with_its_etcd_member(upgrade_cluster, tmp_path):
    """An upgrade of the control plane killed right after the donor's first drain call: the heir has joined etcd
    (two members). The abort, given etcd's TLS files, drains the heir, removes its etcd member with the quorum checks,
    then its instance and its Node: the start's control-plane node and etcd member are left, the donor given back."""
    handle, values, start = upgrade_cluster("gcp", workers=1, groups=1, rolling_upgrade_max_surge=1)
    planes = {uh.label_value(n["metadata"]["labels"][uh.GROUP_LABEL]) for n in uh.nodes(handle)
              if uh.CONTROL_PLANE_LABEL in n["metadata"]["labels"]}
    values["rolling_upgrade_scaling_groups"] = sorted(start["group_ids"][g] for g in planes)
    members = uh.etcd_member_names(handle)
    world = (handle, values, start, uh.group_images(values), uh.group_settings(values))
    handle, values, start, images, settings = killed_at(world, tmp_path, "drain")
    heirs = [n for n in uh.nodes(handle) if n["metadata"]["name"] not in start["node_names"]]
    assert len(heirs) == 1 and uh.CONTROL_PLANE_LABEL in heirs[0]["metadata"]["labels"], heirs
    assert len(uh.etcd_member_names(handle)) == len(members) + 1, "the control-plane heir never joined etcd"
    etcd = {"ca_cert": values["rolling_upgrade_etcd_ca_cert"], "client_cert": values["rolling_upgrade_etcd_client_cert"],
            "client_key": values["rolling_upgrade_etcd_client_key"]}
    abort_and_check(handle, values, start, images, settings, tmp_path / "abort-report", tmp_path, ["killed", "aborted"],
                    said=["removed the etcd member of %s; deleted the instance of" % heirs[0]["metadata"]["name"]], extra={"etcd": etcd})
    assert uh.etcd_member_names(handle) == members


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
        abort_and_check(handle, values, start, images, settings, tmp_path / "abort-report", tmp_path, ["stopped", "aborted"],
                        said=["abort: waiting for the live run to stop"])
        assert run.wait(60) != 0
    finally:
        run.kill()
    assert "an abort of this upgrade was asked at" in run.output(), run.output()[-4000:]
    assert "abort_upgrade.yml takes over and undoes it" in run.output(), run.output()[-4000:]
    print("the abort after the ask took %.1f s" % (time.monotonic() - asked))
