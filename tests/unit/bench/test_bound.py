"""The critical-path bound bench/makespan.py divides the makespan by (bench/bound.py, pure arithmetic)."""

import pytest

from bench import bound


def test_one_replacement_holds_its_slot_for_create_join_gate_drain_and_delete():
    assert bound.slot_seconds(0.3, 20, 5, 12.5, 0.2) == pytest.approx(38.0)


def test_the_load_balancer_hold_adds_only_what_outlasts_the_gate_and_the_drain():
    # Out of the load balancers from the heir's Ready: a hold within H + d costs nothing, a longer one its excess.
    assert bound.slot_seconds(0.3, 20, 5, 0.0, 15, lb_hold=2) == pytest.approx(40.3)
    assert bound.slot_seconds(0.3, 20, 5, 0.0, 15, lb_hold=300) == pytest.approx(335.3)
    assert bound.critical_path(1, [2], 1, None, 0, 20, 5, 0, 15, lb_hold=30)["slot_worker"] == pytest.approx(65.0)


def test_the_canary_goes_first_in_each_group_and_holds_the_rest_until_its_donors_node_is_gone():
    # 1 + 8 in two groups of 4 at surge 4: the canary (C + J + H + d, its instance's deletion not waited for), then the
    # other three of each group at once. L = 0.3 + 20 + 5 + 0 + 15 = 40.3, K = 25.3.
    parts = bound.critical_path(1, [4, 4], 4, None, 0.3, 20, 5, 0, 15, canary=True)
    assert parts["canary_seconds"] == pytest.approx(25.3)
    assert parts["worker_seconds"] == pytest.approx(25.3 + 40.3) and parts["bound"] == pytest.approx(40.3 + 65.6)
    # 30 per group at 10 % (3): the canary, then ceil(29 / 3) = 10 waves; a soak adds to the canary.
    parts = bound.critical_path(3, [30] * 10, "10%", None, 0.3, 20, 5, 0, 15, canary=True, canary_soak=10)
    assert parts["worker_seconds"] == pytest.approx(35.3 + 10 * 40.3)
    # At surge 1 there is no canary, and none when it is off.
    assert bound.critical_path(1, [4, 4], 1, None, 0.3, 20, 5, 0, 15, canary=True)["worker_seconds"] == pytest.approx(4 * 40.3)
    assert bound.critical_path(1, [4, 4], 4, None, 0.3, 20, 5, 0, 15)["worker_seconds"] == pytest.approx(40.3)
    # A cluster-wide cap that makes more waves than the canary does still bounds it.
    assert bound.critical_path(1, [4, 4], 4, 1, 0.3, 20, 5, 0, 15, canary=True)["worker_seconds"] == pytest.approx(8 * 40.3)


@pytest.mark.parametrize("sizes, surge, total, expected", [
    ([4, 4], 1, 1, (8, 1)),        # the reference: one node at a time in the whole cluster
    ([4, 4], 1, None, (4, 2)),     # the defaults: one per group, both groups at once
    ([4, 4], 4, None, (1, 8)),     # surge 4: every worker at once
    ([4, 4], 4, 3, (3, 3)),        # the cluster-wide cap wins over the groups' slots
    ([3, 1], 2, None, (2, 3)),     # the larger group needs two waves
    ([4, 4], "50%", None, (2, 4)),  # a percentage of each group, rounded up
    ([5], "1%", None, (5, 1)),     # at least one when the percentage is above 0
    ([], 1, None, (0, 0)),
])
def test_worker_waves(sizes, surge, total, expected):
    assert bound.worker_waves(sizes, surge, total) == expected


def test_control_planes_go_first_and_one_at_a_time():
    parts = bound.critical_path(3, [4, 4], 4, None, create=0, join=20, heir_ready=5, drain_worker=10,
                                delete_worker=1, drain_cp=0, delete_cp=2)
    assert parts["slot_cp"] == 27 and parts["cp_seconds"] == 81
    assert parts["slot_worker"] == 36 and parts["waves"] == 1 and parts["worker_seconds"] == 36
    assert parts["bound"] == 117


def test_control_plane_times_default_to_the_workers():
    parts = bound.critical_path(1, [2], 1, None, 0, 20, 5, 10, 1)
    assert parts["slot_cp"] == parts["slot_worker"] == 36 and parts["waves"] == 2 and parts["bound"] == 108


@pytest.mark.parametrize("surge, total", [(0, None), ("0%", None), (1, 0)])
def test_a_setting_with_no_slot_is_refused_with_its_value(surge, total):
    with pytest.raises(ValueError, match="cannot finish"):
        bound.worker_waves([4, 4], surge, total)


def test_median():
    assert bound.median([3, 1, 2]) == 2
    assert bound.median([4, 1, 2, 3]) == 2.5
    assert bound.median([None, 5]) == 5
    assert bound.median([], default=-1) == -1


def test_a_measured_control_plane_join_counts_for_the_control_planes_only():
    knob = bound.critical_path(1, [4, 4], 4, None, create=0.3, join=20, heir_ready=5, drain_worker=2, delete_worker=0)
    measured = bound.critical_path(1, [4, 4], 4, None, create=0.3, join=20, heir_ready=5, drain_worker=2,
                                   delete_worker=0, drain_cp=0, delete_cp=0, join_cp=27)
    assert measured["slot_worker"] == knob["slot_worker"] == 27.3
    assert measured["slot_cp"] == 32.3 and measured["bound"] == 32.3 + 27.3
