"""Issue 25 ("annotations still stand in for proof"), on the sandbox: a node's annotations say where a replacement
stands, they never prove that this upgrade created a node. A worker that already runs the image the run asks for,
given a forged `obsolete: "true"` and a forged phase-history entry, in a cluster whose journal records nothing of
it, stops the run in its preflight, which names the node and the rule (code obsolete_not_proven) and changes
nothing: the node is never cordoned, drained or deleted, its instance and its pod stay, its mark is not cleared.
(Before issue 25 a run to the image it already ran removed it as surplus: 8 pods evicted, its instance deleted, the
group 2 -> 1, exit 0.) A worker group of 2, on GCP.

GCP alone (CI time, ci23): what a mark proves is the preflight's (the journal of this upgrade's creates, read from
the cluster), and the refusal comes before any cloud call that changes something; reading a group's image, the only
cloud part, is done by every end-to-end upgrade on each cloud."""

import datetime
import time

import pytest

import upgrade_helpers as uh

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 600
NOT_PROVEN = "it is marked obsolete, but the journal records neither its instance as created by this upgrade"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("cloud", ["gcp"])   # why GCP alone: the module docstring
def test_a_forged_obsolete_mark_removes_nothing(upgrade_cluster, cloud, tmp_path):
    handle, values, start = upgrade_cluster(cloud, control_planes=1, workers=2, groups=1)
    [label] = uh.limit_to_groups(values, start, ["workers-0"])
    group_id = start["group_ids"][label]
    # The run asks for the image the group already runs: every node is up to date.
    values["rolling_upgrade_image"] = uh.provider(values).group_image(group_id)
    victim = start["groups"][label][0]
    forged = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    marks = {uh.PREFIX + "/obsolete": "true", uh.PREFIX + "/phase-history": "obsolete@" + forged}
    handle.kube().merge_patch("/api/v1/nodes/" + victim, {"metadata": {"annotations": marks}})
    pod = uh.pin_bare_pod(handle, victim)
    instances = sorted(i["provider_id"] for i in uh.live_instances(handle) if i["group_id"] == group_id)
    began = time.monotonic()
    rc, output, watcher = uh.run_watched(handle, values, tmp_path / "upgrade.log", timeout=RUN_TIMEOUT)
    print("run took %.0f s" % (time.monotonic() - began))
    assert rc != 0, output[-6000:]
    assert NOT_PROVEN in output and "node %s: %s" % (victim, NOT_PROVEN) in output, output[-6000:]
    assert "The run had not begun: nothing was changed" in output, output[-6000:]
    assert not uh.touched(watcher, victim), "the node %s was %s" % (victim, uh.touched(watcher, victim))
    assert sorted(i["provider_id"] for i in uh.live_instances(handle) if i["group_id"] == group_id) == instances
    node = handle.kube().request("GET", "/api/v1/nodes/" + victim)
    assert uh.is_ready(node) and not node["spec"].get("unschedulable"), node["spec"]
    assert node["metadata"]["annotations"].get(uh.PREFIX + "/obsolete") == "true"   # nor is the mark cleared
    namespace, name, uid = pod
    now = handle.kube().request("GET", "/api/v1/namespaces/%s/pods/%s" % (namespace, name), ok=(200, 404))
    assert now.get("metadata", {}).get("uid") == uid and not now["metadata"].get("deletionTimestamp"), now.get("metadata")
    assert uh.snapshot(handle)["groups"][label] == start["groups"][label]
    assert uh.lease_holder(handle) is None
