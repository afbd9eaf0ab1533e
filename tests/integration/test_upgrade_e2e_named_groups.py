"""End to end, issue 13: scaling groups named in rolling_upgrade_scaling_groups that the provider's discovery does
not find (here AWS groups without the aws.group_tags asked for) are upgraded. The provider refuses to delete an
instance it was not told the group of when that instance lives outside the groups it discovered (reason
other_group), so the run names each instance's group when it deletes donors. One worker group, one replacement,
on AWS (moto), to keep CI time down. Its own file, for pytest-xdist's --dist loadfile."""

import uuid

import pytest

import upgrade_helpers as uh

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 600


@pytest.mark.timeout(900)
def test_named_groups_the_discovery_does_not_find_are_upgraded(upgrade_cluster, tmp_path):
    handle, values, start = upgrade_cluster("aws")
    upgraded = uh.limit_to_groups(values, start, ["workers-0"])
    # No group carries this tag: the discovery finds none, only the named group is upgraded.
    values["rolling_upgrade_aws"] = dict(values["rolling_upgrade_aws"], group_tags={"kubenodes-undiscovered": uuid.uuid4().hex})
    rc, output, watcher = uh.run_watched(handle, values, tmp_path / "upgrade.log", timeout=RUN_TIMEOUT)
    assert rc == 0, output[-6000:]
    assert "other_group" not in output and "is not in scaling group" not in output
    watcher.check(start, max_surge=1)
    uh.assert_upgraded(handle, values, start, groups=upgraded)
    assert not uh.lease_holder(handle), "the run lock was not released"
