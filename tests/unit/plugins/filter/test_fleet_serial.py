"""The fleet play's serial: a bad fleet_batches becomes one cluster's batch, whose first task refuses it by name
(ansible-core would end the play on a size it cannot read, before any task)."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.filter.fleet import FilterModule, fleet_serial


@pytest.mark.parametrize("good", [[1, "25%", "100%"], [2], "50%", 3, ["1", " 10 % "]])
def test_good_batches_are_the_serial_unchanged(good):
    assert fleet_serial(good) == good


@pytest.mark.parametrize("bad", ["soon", ["soon"], [1, "later"], [1, 0], ["150%"], [], [True], None])
def test_bad_batches_run_one_cluster_whose_first_task_refuses_them(bad):
    assert fleet_serial(bad) == [1]


def test_the_filter_is_registered():
    assert FilterModule().filters()["fleet_serial"] is fleet_serial
