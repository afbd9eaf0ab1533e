"""module_utils/run.py: the parts of a run's life cycle that decide without I/O (the preflight's etcd check on a
read made through a control-plane host, abort of a run that had not begun)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import executor, run

NEEDS = dict(endpoints=["https://10.0.0.2:2379"], expected_member_count=3, retries=0)


def upgrade(health=None, **args):
    values = dict(etcd=dict(delegated=True, health=health), journal=None, lock=None, passes=0, finish=None)
    values.update(args)
    said = []
    return run.UpgradeRun(values, False, said.append, said.append, sleep=lambda s: None), said


def test_without_a_read_the_delegated_preflight_asks_for_one_with_the_count_to_expect():
    runner, _said = upgrade()
    with pytest.raises(run.EtcdReadDue) as due:
        runner._delegated_etcd_preflight(NEEDS)
    assert due.value.needs == dict(endpoints=NEEDS["endpoints"], expected_member_count=3)


def test_a_stale_read_or_one_without_a_verdict_does_not_stand_for_the_preflight():
    stale = dict(problems=[], read_at=time.time() - 120, healthy=True, messages=[])
    runner, _said = upgrade(health=stale)
    with pytest.raises(run.EtcdReadDue):
        runner._delegated_etcd_preflight(NEEDS)
    # A mid-run health read (no verdict: made for a control-plane heir) is not the preflight's.
    runner, _said = upgrade(health=dict(problems=[], read_at=time.time(), healthy=None, messages=[]))
    with pytest.raises(run.EtcdReadDue):
        runner._delegated_etcd_preflight(NEEDS)


def test_an_unhealthy_fresh_read_refuses_naming_its_problems():
    read = dict(problems=[], read_at=time.time(), healthy=False, messages=["member cp-1 is unreachable"])
    runner, _said = upgrade(health=read)
    with pytest.raises(executor.StepFailure) as refused:
        runner._delegated_etcd_preflight(NEEDS)
    assert str(refused.value) == "control-plane etcd is not healthy: member cp-1 is unreachable"
    assert refused.value.details["reason"] == "preflight"


def test_a_healthy_fresh_read_lets_the_run_start():
    runner, _said = upgrade(health=dict(problems=[], read_at=time.time(), healthy=True, messages=[]))
    assert runner._delegated_etcd_preflight(NEEDS) is None


def test_abort_of_a_run_that_had_not_begun_changes_nothing():
    # No journal.run: the run failed before it began (the preflight, the lock); no module is called.
    runner, said = upgrade(journal=dict(name="j", namespace="kube-system", events=False))
    assert runner.abort("the cause") is None and said == []


def test_a_wait_for_the_api_server_or_the_cloud_extends_the_last_progress_line():
    """Issue 28: an outage was silent, then said on a line of its own; now it is on the progress line."""
    upgrading, said = upgrade()
    upgrading._waiting("waiting for the gcp cloud API (503): trying again in 2s (attempt 2 of 5)")
    assert said == ["waiting for the gcp cloud API (503): trying again in 2s (attempt 2 of 5)"]   # no pass yet
    upgrading.engine = SimpleNamespace(last_progress="pass 4: 2/9 nodes on the image (22%)")
    upgrading._waiting("waiting for the Kubernetes API server https://127.0.0.1:6443 for 5s (Connection refused)")
    assert said[-1] == ("pass 4: 2/9 nodes on the image (22%); waiting for the Kubernetes API server "
                        "https://127.0.0.1:6443 for 5s (Connection refused)")


@pytest.mark.parametrize("holder, asked, stops", [
    ("run-1", "2026-01-01T00:00:00Z", True),    # an abort asked of this run: it stops before the pass
    ("run-2", "2026-01-01T00:00:00Z", False),   # asked of another holder (this run lost the lock): not this run's
    ("run-1", None, False),
])
def test_an_abort_asked_on_the_lease_stops_the_run_before_its_next_pass(monkeypatch, holder, asked, stops):
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import lease, stop_signals

    lock = dict(holder="run-1", name="kubenodes-image-upgrade", namespace="kube-system", lease_duration=60)
    runner, _said = upgrade(lock=lock)
    runner.api_client = object()
    held = {"metadata": {"annotations": {lease.ABORT_ANNOTATION: asked} if asked else {}},
            "spec": {"holderIdentity": holder}}
    reads = []
    monkeypatch.setattr(lease, "read_lease", lambda client, name, namespace: reads.append(name) or held)
    now = [100.0]
    watch = run.AbortWatch(stop_signals.NoStop(), runner.check_abort_requested, clock=lambda: now[0])
    if stops:
        with pytest.raises(stop_signals.Stopped, match="abort of this upgrade was asked at 2026-01-01T00:00:00Z"):
            watch.check()
        return
    watch.check()
    now[0] += run.ABORT_LOOK_SECONDS - 1
    watch.check()
    assert len(reads) == 1, "the Lease is read at most every ABORT_LOOK_SECONDS"
    now[0] += 1
    watch.check()
    assert len(reads) == 2 and watch.cause is None
