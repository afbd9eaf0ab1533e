"""End to end: with no room for surge (the cloud quota is full) and rolling_upgrade_max_unavailable 1, the role
replaces the workers delete-first (issue 16 item 1): each worker is cordoned, drained and deleted before its heir
is created, Ready nodes never fall below the start minus one and the group never holds more instances than at the
start; on GCP and on AWS. Without the option the same cluster stops in the preflight (test_upgrade_quota.py).
Issue 25: the run ends only with the group back at its start count on the image (assert_upgraded)."""

import pytest

import upgrade_helpers as uh

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 600


@pytest.mark.timeout(900)
@pytest.mark.parametrize("cloud", ["gcp", "aws"])
def test_no_room_for_surge_replaces_workers_delete_first(upgrade_cluster, cloud, tmp_path):
    # AWS: the worker group at its MinSize (AWS refuses a decrementing terminate there: the run lowers it by one for
    # its duration); GCE: a regional group (its proactive redistribution is set to NONE for the run).
    handle, values, start = upgrade_cluster(cloud, control_planes=1, workers=2, groups=1,
                                            rolling_upgrade_max_unavailable=1, worker_group_options=dict(
                                                {"aws": {"min_size": 2}, "gcp": {"region": "us-central1"}}[cloud]))
    upgraded = uh.limit_to_groups(values, start, ["workers-0"])
    settings = uh.group_settings(values)
    handle.cloud(cloud).set_faults(quota=len(uh.live_instances(handle)))
    # Check mode's plan shows the delete-first mode, and changes nothing.
    before = uh.world(handle, values)
    rc, checked = uh.run_upgrade(dict(values, rolling_upgrade_events=False), tmp_path / "check.log", timeout=RUN_TIMEOUT,
                                 check=True)
    assert rc == 0, checked[-6000:]
    assert "max_unavailable 1: workers may be drained and deleted before their heir exists" in checked, checked[-6000:]
    # Nothing is marked before the groups point at the image (the first pass does that), so the plan says none yet.
    assert "Ready nodes per worker group never below the start minus 1 (marked now: none)" in checked, checked[-6000:]
    assert "Kubernetes Events on the Nodes: off (rolling_upgrade_events is false)" in checked
    (worker_group,) = [g for g in settings if g.endswith("workers-0")]
    wanted = {"aws": {"AZRebalance": ("active", "suspended"), "AlarmNotification": ("active", "suspended"),
                      "ScheduledActions": ("active", "suspended"), "ReplaceUnhealthy": ("active", "suspended"),
                      "MinSize": (2, 1)},
              "gcp": {"updatePolicy.instanceRedistributionType": ("PROACTIVE", "NONE")}}[cloud]
    for name, (was, neutral) in wanted.items():
        assert "would set %s of %s from %s to %s for the run" % (name, worker_group, was, neutral) in checked, checked[-6000:]
    assert uh.world(handle, values) == before
    rc, output, watcher = uh.run_watched(handle, values, tmp_path / "upgrade.log", timeout=RUN_TIMEOUT)
    assert rc == 0, output[-6000:]
    assert "workers are replaced delete-first" in output, output[-6000:]
    assert "the cloud refused new instances" not in output, "the quota was hit instead of respected"
    watcher.check(start, max_surge=0, max_unavailable=1)
    (group,) = upgraded
    # Delete-first for real: the group lent a node (with surge, Ready never dips below the start).
    assert watcher.min_ready[group] == len(start["groups"][group]) - 1, watcher.min_ready
    uh.assert_upgraded(handle, values, start, groups=upgraded)
    rows = uh.assert_settings_restored(values, settings)
    assert {r["setting"]: (r["original"], r["neutral"]) for r in rows if r["group"] == worker_group} == wanted, rows
    assert {r["group"] for r in rows} == {worker_group}, "only the group in scope was touched: %s" % rows
