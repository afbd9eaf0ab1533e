"""End to end, issue #8: an upgrade SIGKILLed at random points several times and started again finishes
the job from what the cluster and the cloud show, with nothing lost and nothing created twice. On each
cloud: 1 control plane and 2 workers in 2 worker groups (3 replacements), the role authenticating as a
ServiceAccount bound only to the role's rbac.yml."""

import random
import time

import pytest

import upgrade_helpers as uh

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 600


@pytest.mark.timeout(900)
@pytest.mark.parametrize("cloud", ["gcp", "azure", "aws"])
def test_killed_at_random_points_and_resumed(upgrade_cluster, cloud, tmp_path):
    handle, values, start = upgrade_cluster(cloud)
    rng = random.Random("killed-" + cloud)
    watcher = uh.Watcher(handle)
    watcher.start()
    kills = []
    try:
        # Three runs SIGKILLed (with every module process) at seeded random moments after they have
        # shown progress; each later run resumes from what the cluster and the cloud show.
        for attempt in range(3):
            run = uh.PlaybookRun(values, tmp_path / ("killed-%d.log" % attempt))
            try:
                wanted_pass = rng.randint(1, 3)
                alive = run.wait_for(lambda out, n=wanted_pass: len(uh.PROGRESS.findall(out)) >= n, RUN_TIMEOUT,
                                     "pass %d of run %d" % (wanted_pass, attempt))
                time.sleep(rng.uniform(0, 6))
                if run.proc.poll() is None and alive:
                    kills.append((attempt, wanted_pass, uh.PROGRESS.findall(run.output())[-1:]))
            finally:
                run.kill()
            run.assert_no_secret_in_output()
            if run.proc.returncode == 0:
                break
        rc, output = uh.run_upgrade(values, tmp_path / "final.log", timeout=RUN_TIMEOUT)
    finally:
        watcher.stop()
    assert rc == 0, output[-6000:]
    assert len(kills) >= 2, "the runs finished before they could be killed: %s" % kills
    watcher.check(start, max_surge=1)
    uh.assert_upgraded(handle, values, start, report=False)
    # Nothing was created twice: exactly one new instance per replaced node ever existed.
    created = [i for i in handle.nodesim.instances() if i["provider_id"] not in start["instances"]]
    assert len(created) == len(start["node_names"]), sorted((i["node_name"], i["state"]) for i in created)
