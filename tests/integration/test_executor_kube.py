"""The executor's Kubernetes side (executor.KubeAccess) against the sandbox's real kube-apiserver."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import executor

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_a_node_changed_since_it_was_read_is_left_to_the_next_pass_not_a_failed_run(sandbox, new_nodes):
    """bench/makespan.py, surge 4 with the step engine: the cloud's deletion of a donor's instance made the
    simulated node controller taint its Node, so the Node's deletion with the read resourceVersion got 409
    and the whole run stopped ("changed while being deleted; run again"). Now it is not deleted on stale
    grounds and the run goes on: the next pass reads it again."""
    (name,) = new_nodes(1)
    kube = sandbox.kube()
    stale = kube.request("GET", "/api/v1/nodes/" + name)
    kube.merge_patch("/api/v1/nodes/" + name, {"metadata": {"labels": {"changed-after-the-read": "yes"}}})
    access = executor.KubeAccess(sandbox.core_v1().api_client, "image-upgrade.kubenodes.io")

    assert access.delete_node(stale) is False
    assert kube.request("GET", "/api/v1/nodes/" + name, ok=(200, 404)).get("kind") == "Node"
    assert access.delete_node(kube.request("GET", "/api/v1/nodes/" + name)) is True
    assert kube.request("GET", "/api/v1/nodes/" + name, ok=(200, 404)).get("kind") != "Node"
    assert access.delete_node(stale) is True       # already gone
