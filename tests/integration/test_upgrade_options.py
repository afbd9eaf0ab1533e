"""The role on one GCP sandbox (one control plane, one worker group of two in scope):

(a) each bad option of issue 13 is refused, in check mode as in a real run, naming the one rule it breaks, before
    anything changes: no Lease, the autoscaler's replicas untouched, no group image changed, no annotation; a
    misspelt role variable and a misspelt playbook variable get a warning with the closest name;
(b) an image family published into mid-run does not change the target: the upgrade resolves the family once and
    records the exact image in its journal; a run killed after the new image was published is resumed onto the
    image it started with; a resumed run asking for another image stops naming rolling_upgrade_new_target.
"""

import time

import pytest

import upgrade_helpers as uh
from tests.integration import conftest as fixtures

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 600
SURGE_RULE = "must be a whole number from 1 to 5000 or a percentage of the group from 1% to 100%"
BAD_OPTIONS = [
    (dict(rolling_upgrade_max_surge=0), "rolling_upgrade_max_surge " + SURGE_RULE),
    (dict(rolling_upgrade_max_surge_total=0), "rolling_upgrade_max_surge_total must be a whole number from 1 to 5000"),
    (dict(rolling_upgrade_join_timeout=0), "rolling_upgrade_join_timeout must be a whole number from 1 to 2592000"),
    (dict(rolling_upgrade_max_surge="101%"), "rolling_upgrade_max_surge " + SURGE_RULE),
    (dict(rolling_upgrade_max_surge=10 ** 20), "rolling_upgrade_max_surge " + SURGE_RULE),
    (dict(rolling_upgrade_drain_timeout=-1), "rolling_upgrade_drain_timeout must be a whole number from 1 to 2592000"),
    (dict(rolling_upgrade_annotation_prefix=""), "rolling_upgrade_annotation_prefix must be a DNS subdomain"),
]


@pytest.fixture(scope="module")
def cluster():
    handle = fixtures._start("kubenodes-options-", ["gcp"])  # pylint: disable=protected-access
    try:
        values, start = uh.prepare(handle, "gcp", control_planes=1, workers=2, groups=1)
        upgraded = uh.limit_to_groups(values, start, ["workers-0"])
        yield handle, values, start, upgraded
    finally:
        fixtures._stop(handle)  # pylint: disable=protected-access


@pytest.mark.timeout(900)
def test_bad_options_are_refused_naming_the_rule_before_anything_changes(cluster, tmp_path):
    handle, values, _start, _upgraded = cluster
    before = uh.world(handle, values)
    assert before["lease"] is None
    for number, (bad, rule) in enumerate(BAD_OPTIONS):
        for check in (True, False):
            log = tmp_path / ("bad-%d-%s.log" % (number, "check" if check else "run"))
            rc, output = uh.run_upgrade(dict(values, **bad), log, timeout=RUN_TIMEOUT, check=check)
            assert rc != 0, output[-4000:]
            message = uh.fatal_message(output)
            assert message.startswith(rule), (bad, check, message)
            assert message.count(" must be ") == 1, "more than the one rule broken is named: %s" % message
            assert repr(list(bad.values())[0]) in message or str(list(bad.values())[0]) in message, message
            assert "Nothing was changed" in message
            assert "TASK [kubenodes.image_upgrade.rolling_upgrade : Target image" not in output, "it went on: %s" % bad
            assert uh.world(handle, values) == before, "%s (check mode %s) changed something" % (bad, check)
    # Misspelt variables: a warning with the closest name; check mode then plans and changes nothing.
    rc, output = uh.run_upgrade(dict(values, rolling_upgrade_max_surj=2, max_surj=2), tmp_path / "misspelt.log",
                                timeout=RUN_TIMEOUT, check=True)
    assert rc == 0, output[-4000:]
    flat = " ".join(output.split())
    assert "unknown variable rolling_upgrade_max_surj is ignored; did you mean rolling_upgrade_max_surge?" in flat
    assert "extra variable max_surj is not a variable of this playbook" in flat and "did you mean max_surge?" in flat
    assert uh.world(handle, values) == before


def _settled_world(handle, values, timeout=60):
    """uh.world once it stays the same for 3 s (what a killed run's last module call did has landed)."""
    deadline = time.monotonic() + timeout
    seen = uh.world(handle, values)
    while True:
        time.sleep(3)
        now = uh.world(handle, values)
        if now == seen or time.monotonic() > deadline:
            return now
        seen = now


def _instances_on(handle, image):
    return [i for i in uh.live_instances(handle) if i["image"].lower() == image.lower()]


@pytest.mark.timeout(1200)
def test_an_image_published_into_the_family_mid_run_does_not_change_the_target(cluster, tmp_path):
    handle, values, start, upgraded = cluster
    admin = handle.cloud("gcp")
    first = admin.create_image("node-fam-1", family="node-fam")
    family = first.rsplit("/", 1)[0] + "/family/node-fam"
    by_family = dict(values, rolling_upgrade_image=family)

    # Run 1: the family resolves to node-fam-1. Once a heir runs it, node-fam-2 is published, and the run is killed.
    run = uh.PlaybookRun(by_family, tmp_path / "first.log")
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while not _instances_on(handle, first):
            assert run.proc.poll() is None, run.output()[-4000:]
            assert time.monotonic() < deadline, run.output()[-4000:]
            time.sleep(0.5)
        second = admin.create_image("node-fam-2", family="node-fam")
        time.sleep(5)
    finally:
        run.kill()
    assert "Target image %s (%s)" % (first, family) in " ".join(run.output().split())

    # Another image on the unfinished upgrade: refused, naming the option, before anything changes.
    before = _settled_world(handle, values)
    rc, output = uh.run_upgrade(dict(values, rolling_upgrade_image=second), tmp_path / "other.log", timeout=RUN_TIMEOUT)
    assert rc != 0
    message = uh.fatal_message(output)
    assert "rolling_upgrade_new_target" in message and first in message and second in message, message
    assert uh.world(handle, values) == before
    assert not _instances_on(handle, second)

    # Run 2 resumes with the family reference: every heir gets node-fam-1, none node-fam-2.
    rc, output, watcher = uh.run_watched(handle, by_family, tmp_path / "resumed.log", timeout=RUN_TIMEOUT)
    assert rc == 0, output[-6000:]
    flat = " ".join(output.split())
    assert "now names %s, but this upgrade keeps %s" % (second, first) in flat, output[-6000:]
    watcher.check(start, max_surge=1)
    uh.assert_upgraded(handle, dict(by_family, rolling_upgrade_image=first), start, groups=upgraded)
    assert not _instances_on(handle, second)
    assert set(uh.group_images(values).values()) >= {first}
    assert second not in uh.group_images(values).values()
