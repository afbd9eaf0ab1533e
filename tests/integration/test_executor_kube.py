"""The executor's Kubernetes side (kube_access.KubeAccess) against the sandbox's real kube-apiserver."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import kube_access

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
    access = kube_access.KubeAccess(sandbox.core_v1().api_client, "image-upgrade.kubenodes.io")

    assert access.delete_node(stale) is False
    assert kube.request("GET", "/api/v1/nodes/" + name, ok=(200, 404)).get("kind") == "Node"
    assert access.delete_node(kube.request("GET", "/api/v1/nodes/" + name)) is True
    assert kube.request("GET", "/api/v1/nodes/" + name, ok=(200, 404)).get("kind") != "Node"
    assert access.delete_node(stale) is True       # already gone


def test_a_wait_ends_on_a_change_the_plan_reads_and_not_on_others(sandbox, new_nodes):
    """wait_for_change: the watch from the last LIST ends the wait at once when a Node changes in what the planner
    reads, waits out its time for a change it does not read (a status heartbeat, another controller's
    annotation) or for the executor's own write or deletion, wakes for a change someone else made before
    that write, and ends at once when the listed version is too old to watch from (the next pass lists
    again). changed_since_read, which a pass asks before its drains, says the same."""
    import threading
    import time

    (name,) = new_nodes(1)
    kube = sandbox.kube()
    # The node lifecycle controller takes a new Node's not-ready taint off after it sees it Ready, late under
    # load; that is a change the planner reads, so the quiet wait below begins after it.
    deadline = time.monotonic() + 60
    while any(t.get("key", "").startswith("node.kubernetes.io/") for t in
              kube.request("GET", "/api/v1/nodes/" + name)["spec"].get("taints") or []):
        assert time.monotonic() < deadline, "the new node kept a node.kubernetes.io taint for 60 s"
        time.sleep(0.2)
    access = kube_access.KubeAccess(sandbox.core_v1().api_client, "image-upgrade.kubenodes.io")
    access.cache.WATCH_SECONDS = 1   # each watch request ends within a second (the compacted version below)
    node = next(n for n in access.list_nodes() if n["metadata"]["name"] == name)
    assert access.listed_version
    conditions = [dict(c, lastHeartbeatTime=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
                  for c in node["status"]["conditions"]]
    kube.request("PATCH", "/api/v1/nodes/%s/status" % name, {"status": {"conditions": conditions}},
                 content_type="application/strategic-merge-patch+json")
    kube.merge_patch("/api/v1/nodes/" + name, {"metadata": {"annotations": {"other.example.com/note": "not ours"}}})
    status, _after = access.write_node(node, {"labels": {"written-by-the-executor": "yes"}, "expect": {}})
    assert status == "changed"
    began = time.monotonic()
    assert access.wait_for_change(1.5) is False
    assert 1.4 <= time.monotonic() - began < 4.0
    assert access.changed_since_read() is False   # what a pass asks before its drains (Executor._overtaken)

    timer = threading.Timer(0.5, kube.merge_patch, ("/api/v1/nodes/" + name, {"spec": {"unschedulable": True}}))
    timer.start()
    began = time.monotonic()
    try:
        assert access.wait_for_change(20) is True
    finally:
        timer.cancel()
    assert time.monotonic() - began < 5.0, "the cordon did not end the wait at once"
    assert access.changed_since_read() is True

    # A change someone else made between the LIST and the executor's write (the write retried on its 409) was not
    # planned on: it wakes the wait, though the write's own result already holds it.
    node = next(n for n in access.list_nodes() if n["metadata"]["name"] == name)
    assert access.changed_since_read() is False, "a read takes the change in: nothing changed since"
    kube.merge_patch("/api/v1/nodes/" + name, {"metadata": {"labels": {"changed-by-someone-else": "yes"}}})
    status, after = access.write_node(node, {"labels": {"written-by-the-executor": "again"}, "expect": {}})
    assert status == "changed" and after["metadata"]["labels"]["changed-by-someone-else"] == "yes"
    began = time.monotonic()
    assert access.wait_for_change(20) is True
    assert time.monotonic() - began < 5.0, "a change before the executor's write did not end the wait"

    # The executor's own deletion of a Node wakes nothing either.
    node = next(n for n in access.list_nodes() if n["metadata"]["name"] == name)
    assert access.delete_node(node) is True
    began = time.monotonic()
    assert access.wait_for_change(1.5) is False
    assert time.monotonic() - began >= 1.4

    # A watch from a version long past: the server answers 410 Gone (the cache lists again) or replays what changed
    # since; either ends the wait.
    with access.cache.lock:
        access.cache.store.version = "1"
    began = time.monotonic()
    assert access.wait_for_change(20) is True
    assert time.monotonic() - began < 5.0


def test_passes_read_the_nodes_from_the_watch_with_their_own_writes_and_others_changes(sandbox, new_nodes):
    """issue 22 item 1: one LIST, then the watch keeps the Nodes; a pass's read makes no call, sees the executor's
    own writes and deletions at once, and others' changes as soon as the watch brings them."""
    import time

    first, second = new_nodes(2)
    kube = sandbox.kube()
    access = kube_access.KubeAccess(sandbox.core_v1().api_client, "image-upgrade.kubenodes.io")
    by_name = {n["metadata"]["name"]: n for n in access.list_nodes()}
    assert {first, second} <= set(by_name) and access.cache.lists == 1

    status, _after = access.write_node(by_name[first], {"labels": {"own-write": "yes"}, "expect": {}})
    assert status == "changed"
    assert next(n for n in access.list_nodes() if n["metadata"]["name"] == first)["metadata"]["labels"]["own-write"] == "yes"
    assert access.delete_node(by_name[second]) is True
    assert second not in {n["metadata"]["name"] for n in access.list_nodes()}

    kube.merge_patch("/api/v1/nodes/" + first, {"metadata": {"labels": {"someone-else": "yes"}}})
    deadline = time.monotonic() + 5
    while True:
        labels = next(n for n in access.list_nodes() if n["metadata"]["name"] == first)["metadata"]["labels"]
        if labels.get("someone-else") == "yes":
            break
        assert time.monotonic() < deadline, "the watch did not bring another writer's change within 5 s"
        time.sleep(0.05)
    assert labels["own-write"] == "yes"
    # A read is what the server holds (within a second: the watch may be a moment behind), and no read listed again.
    server = {n["metadata"]["name"]: n["metadata"]["resourceVersion"] for n in kube.request("GET", "/api/v1/nodes")["items"]}
    deadline = time.monotonic() + 1
    while {n["metadata"]["name"]: n["metadata"]["resourceVersion"] for n in access.list_nodes()} != server:
        assert time.monotonic() < deadline, "the cache's read differs from the server's Nodes after a second"
        time.sleep(0.05)
    assert access.cache.lists == 1
