"""End to end: the rolling_upgrade role's preflight reads the cloud quota through each emulator (whose quota
knob caps instances and is reported through the API the provider reads) and

(a) with room for one new instance where max_surge 2 wants two, warns naming the limit, lowers the surge,
    and finishes with never more than one replacement in flight;
(b) with room for none, fails in the preflight naming the limit, and changes nothing.

Each test upgrades one worker group of two workers (the control-plane group is left out) to keep CI short.
"""

import pytest

import upgrade_helpers as uh

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 600
# The limit each emulator reports for its quota knob, as the preflight names it.
LIMIT_NAMES = {"gcp": "INSTANCES", "azure": "virtualMachines", "aws": "Running On-Demand Standard instances"}


@pytest.fixture
def cluster(upgrade_cluster):
    """cluster(cloud) -> (handle, role variables, start snapshot, labels of the upgraded group): one control
    plane and one worker group of two, only the worker group in scope, max_surge 2."""
    def make(cloud):
        handle, values, start = upgrade_cluster(cloud, control_planes=1, workers=2, groups=1, rolling_upgrade_max_surge=2)
        upgraded = uh.limit_to_groups(values, start, ["workers-0"])
        return handle, values, start, upgraded
    return make


@pytest.mark.timeout(900)
@pytest.mark.parametrize("cloud", ["gcp", "aws"])
def test_quota_for_one_new_instance_lowers_the_surge_with_a_warning(cluster, cloud, tmp_path):
    handle, values, start, upgraded = cluster(cloud)
    live = len(uh.live_instances(handle))
    handle.cloud(cloud).set_faults(quota=live + 1)
    rc, output, watcher = uh.run_watched(handle, values, tmp_path / "upgrade.log", timeout=RUN_TIMEOUT)
    assert rc == 0, output[-6000:]
    warning = next((line for line in output.splitlines() if "WARNING: the cloud quota allows 1 replacement" in line),
                   None)
    assert warning is not None, output[-6000:]
    assert LIMIT_NAMES[cloud] in output and "the 2 the surge" in output, output[-6000:]
    # The limit is named with its numbers: for the vCPU quota in vCPUs (2 per t3.micro), else in instances.
    per_instance = 2 if cloud == "aws" else 1
    assert "limit %d, usage %d" % ((live + 1) * per_instance, live * per_instance) in output, output[-6000:]
    assert "the cloud refused new instances" not in output, "the quota was hit instead of respected"
    watcher.check(start, max_surge=1)
    uh.assert_upgraded(handle, values, start, groups=upgraded)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("cloud", ["gcp", "azure", "aws"])
def test_quota_for_no_new_instance_fails_the_preflight_and_changes_nothing(cluster, cloud, tmp_path):
    handle, values, start, _upgraded = cluster(cloud)
    live = len(uh.live_instances(handle))
    handle.cloud(cloud).set_faults(quota=live)
    before = uh.world(handle, values)
    rc, output = uh.run_upgrade(values, tmp_path / "refused.log", timeout=RUN_TIMEOUT)
    assert rc != 0, output[-6000:]
    assert "the cloud quota leaves no room for a new instance" in output, output[-6000:]
    assert LIMIT_NAMES[cloud] in output, output[-6000:]
    assert "Nothing was changed" in output
    # It says which option would let workers be replaced without room for surge.
    assert "rolling_upgrade_max_unavailable is 0: set it to 1 or more" in output, output[-6000:]
    assert uh.world(handle, values) == before
    assert not uh.node_annotations_with_prefix(handle)
