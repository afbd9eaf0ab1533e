"""kube_access.KubeAccess.nodes_version: moves exactly when what the planner reads of the Nodes changed (issue 22)."""

import copy
import types

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import kube_access

PREFIX = "kubenodes.io"


def node(name, rv, labels=None, ready="True", since="2026-12-05T10:00:00Z", beat="2026-12-05T10:00:00Z"):
    return {"metadata": {"name": name, "uid": "uid-" + name, "resourceVersion": str(rv), "labels": dict(labels or {}),
                         "annotations": {}},
            "spec": {"providerID": "gce://p/z/" + name},
            "status": {"conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": since,
                                       "lastHeartbeatTime": beat}]}}


def access(listed):
    client = types.SimpleNamespace(configuration=types.SimpleNamespace(connection_pool_maxsize=1000))
    kube = kube_access.KubeAccess(client, PREFIX)
    kube.cache.read = lambda: (copy.deepcopy(listed), "1")
    return kube


def test_the_version_moves_with_what_the_planner_reads_and_not_with_a_heartbeat():
    listed = [node("a", 1), node("b", 1)]
    kube = access(listed)
    kube.list_nodes()
    first = kube.nodes_version()
    kube.list_nodes()
    assert kube.nodes_version() == first
    listed[0] = node("a", 2, beat="2026-12-05T10:05:00Z")   # a heartbeat: nothing the planner reads
    kube.list_nodes()
    assert kube.nodes_version() == first
    listed[0] = node("a", 3, labels={"team": "blue"})
    kube.list_nodes()
    second = kube.nodes_version()
    assert second != first
    # NotReady and Ready again between two reads: Ready as before, but since later (a heir's hold starts again).
    listed[1] = node("b", 4, since="2026-12-05T10:06:00Z")
    kube.list_nodes()
    assert kube.nodes_version() not in (first, second)
    third = kube.nodes_version()
    listed.pop()
    kube.list_nodes()
    assert kube.nodes_version() != third


def test_an_own_write_the_watch_brought_before_the_next_read_still_moves_the_version():
    listed = [node("a", 1)]
    kube = access(listed)
    kube.list_nodes()
    first = kube.nodes_version()
    written = node("a", 2, labels={"team": "blue"})
    kube._own_change_begins("a")                        # pylint: disable=protected-access
    kube._own_change_ends("a", written=written)         # pylint: disable=protected-access
    kube._changes_plan({"type": "MODIFIED", "object": written})   # pylint: disable=protected-access
    listed[0] = written
    kube.list_nodes()
    assert kube.nodes_version() != first
