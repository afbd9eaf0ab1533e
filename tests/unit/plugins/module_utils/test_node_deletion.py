"""node_delete's refusals that are pure (issue 28): which pods show a node was not drained, the problem that names
them, and the message that says to drain first. The module against the real apiserver is in
tests/integration/test_node_delete.py."""

import pytest

from test_drain import make_pod

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import crosschecks, drain, node_deletion

pytestmark = pytest.mark.timeout(60)


def pod(name, namespace="app", owner="ReplicaSet", phase="Running", mirror=False, terminating=False):
    return make_pod(name, namespace=namespace, owner_kind=owner, phase=phase, mirror=mirror, terminating=terminating)


def test_what_a_drain_leaves_does_not_count():
    left_alone = [pod("ds", owner="DaemonSet"), pod("etcd-cp", namespace="kube-system", owner="Node", mirror=True),
                  pod("job-done", owner="Job", phase="Succeeded"), pod("crashed", owner=None, phase="Failed")]
    assert drain.pods_left_after_drain(left_alone) == []
    assert crosschecks.pods_left_problems("w-1", left_alone) == []


def test_running_pending_unmanaged_and_terminating_pods_count_sorted():
    pods = [pod("web-2"), pod("bare", namespace="a", owner=None), pod("new", phase="Pending"),
            pod("going", terminating=True), pod("ds", owner="DaemonSet")]
    left = drain.pods_left_after_drain(pods)
    assert [drain.pod_key(p) for p in left] == [("a", "bare"), ("app", "going"), ("app", "new"), ("app", "web-2")]


def test_the_problem_names_the_node_a_few_pods_and_the_count():
    pods = [pod("web-%d" % n) for n in range(5)]
    [problem] = crosschecks.pods_left_problems("w-1", pods)
    assert (problem["node"], problem["step"], problem["code"]) == ("w-1", crosschecks.STEP_NODE_DELETION, "pods_left")
    assert problem["message"] == ("node w-1: 5 pod(s) other than DaemonSet, mirror and finished pods still run on it "
                                  "(app/web-0, app/web-1, app/web-2 and 2 more), so it was not drained")
    [one] = crosschecks.pods_left_problems("w-2", pods[:1])
    assert "1 pod(s)" in one["message"] and "(app/web-0)" in one["message"] and "more" not in one["message"]


def test_the_refusal_says_to_drain_the_nodes_that_were_not():
    problems = (crosschecks.pods_left_problems("w-1", [pod("web")])
                + [dict(node="w-2", step="node-deletion", code="not_cordoned", message="node w-2: it is not cordoned")]
                + [dict(node="w-3", step="node-deletion", code="heir_missing", message="node w-3: heir gone")])
    msg = node_deletion.refusal_message(problems)
    assert msg.startswith("refusing to delete any node; the cluster disagrees with the upgrade's records: node w-1: 1 pod")
    assert "node w-3: heir gone" in msg
    assert msg.endswith("Drain w-1, w-2 first with node_drain (state=drained), which cordons and empties a node, "
                        "then delete it")


def test_a_refusal_without_a_missing_drain_asks_for_none():
    msg = node_deletion.refusal_message([dict(node="w-3", step="node-deletion", code="heir_missing", message="node w-3: x")])
    assert "node_drain" not in msg


def test_the_crosscheck_refuses_an_uncordoned_donor_whatever_its_record():
    """The cordon is the cluster's own word on a drain; node_delete and the executor share this check."""
    keys = crosschecks.AnnotationKeys()
    stamp = crosschecks.format_time(1000)
    annotations = {keys.heir: "h-1", keys.phase: "drained", keys.phase_since: stamp,
                   keys.phase_history: "paired@%s,draining@%s,drained@%s" % (stamp, stamp, stamp)}
    node = {"metadata": {"name": "w-1", "annotations": annotations}, "spec": {}, "status": {}}
    heir = {"metadata": {"name": "h-1", "annotations": {keys.donor: "w-1"}}, "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    codes = [p["code"] for p in crosschecks.check_node_deletion(node, heir, keys=keys, now=2000)]
    assert codes == ["not_cordoned"]
    node["spec"]["unschedulable"] = True
    assert crosschecks.check_node_deletion(node, heir, keys=keys, now=2000) == []
