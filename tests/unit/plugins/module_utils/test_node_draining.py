"""node_drain does not give back a node past the upgrade's point of no return (issue 28): the pure check."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import crosschecks

pytestmark = pytest.mark.timeout(60)
KEYS = crosschecks.AnnotationKeys()


def node(phase=None):
    annotations = {KEYS.phase: phase} if phase is not None else {}
    return {"metadata": {"name": "cp-1", "annotations": annotations}, "spec": {"unschedulable": True}, "status": {}}


@pytest.mark.parametrize("phase,what", [("etcd-removed", "its etcd member was removed"), ("deleting", "its deletion began")])
def test_a_node_past_the_point_of_no_return_is_leaving_for_good(phase, what):
    problem = crosschecks.leaving_for_good(node(phase), KEYS)
    assert (problem["node"], problem["step"], problem["code"]) == ("cp-1", "uncordon", "leaving")
    assert problem["message"] == "node cp-1: its phase is %s: %s, so it cannot serve again" % (phase, what)


@pytest.mark.parametrize("phase", [None, "", "paired", "draining", "drained", "replaced", "heir"])
def test_a_node_that_may_still_serve_may_be_given_back(phase):
    # A drained donor whose pair broke is given back (the planner's uncordon): only etcd-removed and deleting are final.
    assert crosschecks.leaving_for_good(node(phase), KEYS) is None


def test_another_prefix_is_not_read():
    other = crosschecks.AnnotationKeys("other.example.com")
    assert crosschecks.leaving_for_good(node("etcd-removed"), other) is None
