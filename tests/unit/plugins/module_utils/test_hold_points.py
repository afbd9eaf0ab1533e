"""hold_points: inert without its environment; at a named point, the marker line, then the hold, once; an injected
failure at a named point, once."""

import inspect
import os
import re

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import executor, hold_points


@pytest.fixture(autouse=True)
def fresh_points(monkeypatch):
    monkeypatch.setattr(hold_points, "_held", set())
    monkeypatch.setattr(hold_points, "_failed", set())


def test_without_the_environment_nothing_holds():
    slept = []
    assert not hold_points.reached("drain", environ={}, sleep=slept.append)
    assert slept == []


class Clock:
    """A clock that moves only when the hold sleeps."""

    def __init__(self):
        self.now, self.slept = 0.0, []

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def test_a_named_point_writes_its_line_and_holds_once(tmp_path):
    marker = tmp_path / "held"
    env = {hold_points.ENV_POINTS: "create, drain", hold_points.ENV_FILE: str(marker)}
    clock = Clock()
    assert not hold_points.reached("etcd-remove", environ=env, sleep=clock.sleep, clock=lambda: clock.now)
    assert hold_points.reached("drain", environ=env, sleep=clock.sleep, clock=lambda: clock.now)
    assert marker.read_text() == "drain %d\n" % os.getpid()
    # Held for HOLD_SECONDS while nobody takes the line out (a kill test kills it long before).
    assert clock.now == pytest.approx(hold_points.HOLD_SECONDS, abs=hold_points.RELEASE_LOOK_SECONDS)
    assert set(clock.slept) == {hold_points.RELEASE_LOOK_SECONDS}
    held = len(clock.slept)
    assert not hold_points.reached("drain", environ=env, sleep=clock.sleep, clock=lambda: clock.now)  # once per process
    assert len(clock.slept) == held


def test_a_hold_ends_when_the_test_takes_its_line_out_of_the_file(tmp_path):
    marker = tmp_path / "held"
    env = {hold_points.ENV_POINTS: "delete-node", hold_points.ENV_FILE: str(marker)}
    clock = Clock()

    def sleep(seconds):
        clock.sleep(seconds)
        if len(clock.slept) == 3:
            marker.write_text("")   # the release, three looks into the hold
    assert hold_points.reached("delete-node", environ=env, sleep=sleep, clock=lambda: clock.now)
    assert len(clock.slept) == 3


def test_without_a_file_a_hold_sleeps_its_whole_time():
    slept = []
    assert hold_points.reached("create", environ={hold_points.ENV_POINTS: "create"}, sleep=slept.append)
    assert slept == [hold_points.HOLD_SECONDS]


def test_every_point_the_executor_calls_is_named():
    called = set(re.findall(r'self\._reached\("([a-z-]+)"\)', inspect.getsource(executor)))
    assert called == set(hold_points.POINTS), called


def test_an_injected_failure_names_its_point_once_and_only_where_asked():
    env = {hold_points.ENV_FAIL: "drain, abort"}
    assert hold_points.failure_due("create", environ=env) is None
    assert hold_points.failure_due("drain", environ={}) is None
    assert hold_points.failure_due("drain", environ=env) == "injected failure at drain (%s)" % hold_points.ENV_FAIL
    assert hold_points.failure_due("drain", environ=env) is None   # once per process
    assert hold_points.failure_due("abort", environ=env).startswith("injected failure at abort")


def test_the_run_fails_where_a_failure_is_injected(monkeypatch):
    """The executor's points raise StepFailure, as a failed cloud or API call does, and the run's own points too."""
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import run
    monkeypatch.setenv(hold_points.ENV_FAIL, "create,finish")
    with pytest.raises(executor.StepFailure, match="injected failure at create"):
        executor.Executor._reached("create")
    with pytest.raises(executor.StepFailure, match="injected failure at finish"):
        run._fail_if_injected("finish")
    executor.Executor._reached("drain")
    run._fail_if_injected("begin")


def test_every_point_the_run_calls_is_named():
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import run
    called = set(re.findall(r'_fail_if_injected\("([a-z-]+)"\)', inspect.getsource(run)))
    assert called == set(hold_points.RUN_POINTS), called
