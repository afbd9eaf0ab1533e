"""End to end, issue 28 item 2: whatever fails, wherever, the run ends the same way. One upgrade on the sandbox
(GCP, 1 control plane and 1 worker in one group each, the role as a least-privilege ServiceAccount) is made to
fail at every moment of the run in turn (hold_points' KUBENODES_IMAGE_UPGRADE_FAIL_AT): right after it began,
right after each kind of destructive call (the groups pointed at the image, heirs created, a donor drained, an
etcd member removed, instances deleted, a Node deleted), inside the failure handler itself, and at the finish.

After each failed run: the task failed naming the failure; the cluster-autoscaler has its replicas back; the run
lock is free; the report so far was written, and its last attempt is failed with the cause; no group ever had
fewer Ready nodes than at the start nor more instances than the surge allows; etcd never lost a member it
needed. The next run goes on from there, and the last one finishes the upgrade."""

import json
import pathlib

import pytest

import upgrade_helpers as uh
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import hold_points

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 300

# In the order an upgrade reaches them: the control plane's replacement first, then the worker's.
# The health gate after the control plane's replacement comes between them.
FAILURES = ["begin", "set-group-image", "create", "drain", "etcd-remove", "delete-instance", "delete-node", "gate",
            "drain,abort", "finish"]


def autoscaler_replicas(handle):
    deployment = handle.kube().request("GET", "/apis/apps/v1/namespaces/kube-system/deployments/cluster-autoscaler")
    return deployment["spec"]["replicas"]


def attempts(values):
    path = pathlib.Path(values["rolling_upgrade_report_dir"]) / "image-upgrade-report.json"
    return json.loads(path.read_text())["attempts"] if path.exists() else []


@pytest.mark.timeout(1200)
def test_a_failure_at_every_moment_of_the_run_ends_it_the_same_way_and_the_next_run_goes_on(upgrade_cluster, tmp_path):
    handle, values, start = upgrade_cluster("gcp", control_planes=1, workers=1, groups=1)
    assert set(hold_points.POINTS) | set(hold_points.RUN_POINTS) == {p for f in FAILURES for p in f.split(",")}
    assert start["autoscaler_replicas"] > 0
    # A health gate after each batch, as short as it goes: one look, no soak.
    values.update(rolling_upgrade_gate_after="batch", rolling_upgrade_soak_seconds=0, rolling_upgrade_gate_looks=1,
                  rolling_upgrade_gate_look_interval=1, rolling_upgrade_gate_timeout=120)
    watcher = uh.Watcher(handle, etcd=True)
    watcher.start()
    try:
        for index, points in enumerate(FAILURES, 1):
            first = points.split(",")[0]
            run = uh.PlaybookRun(values, tmp_path / ("%d-%s.log" % (index, first)), env={hold_points.ENV_FAIL: points})
            try:
                rc = run.wait(RUN_TIMEOUT)
            finally:
                run.close()
            output = run.output()
            assert rc != 0, "the run told to fail at %s finished:\n%s" % (points, output[-4000:])
            cause = uh.fatal_message(output)
            assert "injected failure at %s" % first in cause, cause
            assert autoscaler_replicas(handle) == start["autoscaler_replicas"], "failed at %s: autoscaler paused" % points
            assert not uh.lease_holder(handle), "failed at %s: the run lock was kept" % points
            ended = attempts(values)
            assert len(ended) == index, (points, ended)
            if "abort" in points:
                # The failure handler failed too: its journal record is lost (said), the rest was done.
                assert "the failed attempt could not be recorded in the journal: injected failure at abort" in output, \
                    output[-4000:]
                assert ended[-1]["outcome"] != "failed", ended[-1]
            else:
                assert ended[-1]["outcome"] == "failed" and "injected failure at %s" % first in ended[-1]["cause"], ended[-1]
            if first == "gate":
                # The gate recorded its own failure, and stays due: the next run runs it first.
                recorded = uh.journal(handle)
                assert recorded["gate_due"] is True, recorded
                assert [g["outcome"] for g in recorded["gates"].values()] == ["failed"], recorded["gates"]
        rc, output = uh.run_upgrade(values, tmp_path / "last.log", timeout=RUN_TIMEOUT)
    finally:
        watcher.stop()
    assert rc == 0, output[-6000:]
    watcher.check(start, max_surge=1)
    assert watcher.min_etcd_members >= 1
    uh.assert_upgraded(handle, values, start)
    outcomes = [a["outcome"] for a in attempts(values)]
    assert outcomes.count("failed") == len(FAILURES) - 1 and outcomes[-1] == "done", outcomes
