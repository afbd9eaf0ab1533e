"""hold_points: inert without its environment; at a named point, the marker line, then the hold, once."""

import inspect
import os
import re

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import executor, hold_points


@pytest.fixture(autouse=True)
def fresh_points(monkeypatch):
    monkeypatch.setattr(hold_points, "_held", set())


def test_without_the_environment_nothing_holds():
    slept = []
    assert not hold_points.reached("drain", environ={}, sleep=slept.append)
    assert slept == []


def test_a_named_point_writes_its_line_and_holds_once(tmp_path):
    marker = tmp_path / "held"
    env = {hold_points.ENV_POINTS: "create, drain", hold_points.ENV_FILE: str(marker)}
    slept = []
    assert not hold_points.reached("etcd-remove", environ=env, sleep=slept.append)
    assert hold_points.reached("drain", environ=env, sleep=slept.append)
    assert marker.read_text() == "drain %d\n" % os.getpid()
    assert slept == [hold_points.HOLD_SECONDS]
    assert not hold_points.reached("drain", environ=env, sleep=slept.append)   # once per process
    assert slept == [hold_points.HOLD_SECONDS]


def test_every_point_the_executor_calls_is_named():
    called = set(re.findall(r'hold_points\.reached\("([a-z-]+)"\)', inspect.getsource(executor)))
    assert called == set(hold_points.POINTS), called
