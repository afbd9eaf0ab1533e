"""node_pair names the pairs it undoes (issue 28): a problem per undone pair, for its warning and its result."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import node_pairing

pytestmark = pytest.mark.timeout(60)


def test_each_undone_pair_is_a_problem_naming_both_halves_and_why():
    repairs = [dict(name="h-1", action="unpair", donor="w-1", reason="this upgrade did not create it"),
               dict(name="w-2", action="unpair", heir="h-2"),
               dict(name="h-3", action="promote", donor="w-3"), dict(name="w-4", action="complete", heir="h-4")]
    problems = node_pairing.undone_pair_problems(repairs)
    assert [(p["node"], p["code"]) for p in problems] == [("h-1", "pair_undone"), ("w-2", "pair_undone")]
    assert problems[0]["message"] == ("node h-1: its pair was undone (this upgrade did not create it): heir h-1 no "
                                      "longer replaces donor w-1")
    assert problems[1]["message"] == ("node w-2: its pair was undone (the pair could not be completed): donor w-2 waits "
                                      "for a new heir; h-2 no longer replaces it")


def test_no_undone_pair_no_problem():
    assert node_pairing.undone_pair_problems([dict(name="h", action="promote", donor="w")]) == []
