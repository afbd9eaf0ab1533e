"""End to end, issue #8, on each cloud: runs that must stop, or change nothing, and say why. Check mode
prints the plan; bad image references fail before anything changes; a PDB that blocks forever stops the
run naming the pod and the PDB, and the run after the fix finishes; of two concurrent runs the second
stops naming the holder of the run lock. The role authenticates as a ServiceAccount bound only to the
role's rbac.yml, so these failure paths are also least-privilege paths.

Check mode and bad images run on each cloud: each provider reads and checks an image reference its own way. The PDB
(GCP) and the run lock (AWS) run on one cloud each (CI time, ci23): a drain, its PDB and the Lease are the
apiserver's, reached by the same Kubernetes code whatever the cloud, and the cloud sees only the create and delete of
every end-to-end upgrade."""

import json
import pathlib
import time
import uuid

import pytest

from ansible_run import run_playbook
import upgrade_helpers as uh

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 600
CLOUDS = ["gcp", "azure", "aws"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("cloud", CLOUDS)
def test_check_mode_prints_the_plan_and_bad_images_change_nothing(upgrade_cluster, cloud):
    handle, values, start = upgrade_cluster(cloud)
    before = uh.world(handle, values)
    assert not uh.node_annotations_with_prefix(handle)

    # With health gates (issue 16 item 2), the plan lists them too.
    gated = dict(values, rolling_upgrade_gate_after="batch", rolling_upgrade_soak_seconds=30)
    rc, output = run_playbook(uh.PLAYBOOK, extra_vars=gated, check=True, timeout=RUN_TIMEOUT)
    assert rc == 0, uh.failed_messages(output)
    shown = uh.check_plan(output)
    gates = shown["gates"]
    for words in ("after each batch, within 600s: every node Ready", "the pods of kube-system Ready",
                  "no pod that was Running before the batch Pending", "soak of 30s since the last node turned Ready",
                  "Now: %d node(s) Ready" % len(start["node_names"])):
        assert words in gates, gates
    # The plan says how replacements go: the surge, no delete-first, the gates and the Events (issue 16).
    how = shown["how"]
    for words in ("Surge: up to 1 new instance(s) at a time per worker group", "max_unavailable 0: no node is drained "
                  "before its heir is Ready", "Health gates: after each batch (the health gates below)",
                  "Kubernetes Events on the Nodes: on (namespace default, source kubenodes-image-upgrade)"):
        assert words in how, how
    order = shown["order"]
    assert order.startswith("3 node(s) to replace"), order
    for name in start["node_names"]:
        assert name in order, (name, order)
    # The control plane goes first.
    [control_plane] = [n for g, names in start["groups"].items() if "control-plane" in g for n in names]
    assert all(order.index(control_plane) < order.index(n) for n in start["node_names"] if n != control_plane)
    plan = shown["next_pass"]
    assert plan["set_group_image"], plan
    assert uh.world(handle, values) == before
    assert not uh.node_annotations_with_prefix(handle)

    if cloud == "gcp":  # the role's refusal is cloud-independent: one cloud keeps CI time down
        # The removed task-chain engine asked for by name, and a soak with no gate or canary to time it: refused by the
        # option check, the role's first task, naming the variable and what to do.
        for given, words in ((dict(rolling_upgrade_engine="tasks"), "the task-chain engine was removed"),
                             (dict(rolling_upgrade_soak_seconds=30), "so nothing would run or time them")):
            rc, output = run_playbook(uh.PLAYBOOK, extra_vars=dict(values, **given), timeout=RUN_TIMEOUT)
            failures = uh.failed_messages(output)
            assert rc != 0 and any(words in m and "Nothing was changed" in m for m in failures), failures
            assert uh.world(handle, values) == before and not uh.lease_holder(handle)
        # Gates with delete-first are refused before the lock and the autoscaler are touched, naming both options.
        refused = dict(values, rolling_upgrade_gate_after="batch", rolling_upgrade_max_unavailable=1)
        rc, output = run_playbook(uh.PLAYBOOK, extra_vars=refused, timeout=RUN_TIMEOUT)
        failures = uh.failed_messages(output)
        assert rc != 0 and any("rolling_upgrade_gate_after is batch, but rolling_upgrade_max_unavailable is 1" in m
                               and "Nothing was changed" in m for m in failures), failures
        assert uh.world(handle, values) == before and not uh.lease_holder(handle)
    for image, cause in [uh.missing_image(values), ("not a valid image reference", "not a valid image reference")]:
        rc, output = run_playbook(uh.PLAYBOOK, extra_vars=dict(values, rolling_upgrade_image=image), timeout=RUN_TIMEOUT)
        failures = uh.failed_messages(output)
        assert rc != 0 and failures, "a run with image %r did not fail" % image
        assert any(cause in message for message in failures), failures
        assert uh.world(handle, values) == before, "the run with image %r changed something" % image
        assert not uh.node_annotations_with_prefix(handle)
    uh.wait_workloads_running(handle, start, timeout=30)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("cloud", ["gcp"])   # why one cloud: the module docstring
def test_pdb_that_blocks_forever_stops_the_run_naming_pod_and_pdb_then_resumes(upgrade_cluster, cloud, tmp_path):
    handle, values, start = upgrade_cluster(cloud, rolling_upgrade_drain_timeout=20, rolling_upgrade_drain_on_timeout="fail")
    upgraded = uh.limit_to_groups(values, start, ["workers-0"])  # one replacement keeps CI time down
    [group_label] = upgraded
    [worker] = start["groups"][group_label]
    kube = handle.kube()
    namespace = "guarded"
    kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}}, ok=(201,))
    labels = {"app": "guarded"}
    deadline = time.monotonic() + 30
    while True:  # pods are refused until the serviceaccount controller made `default`
        if kube.request("GET", "/api/v1/namespaces/%s/serviceaccounts/default" % namespace, ok=(200, 404)).get("kind") == "ServiceAccount":
            break
        assert time.monotonic() < deadline, "no default service account in %s" % namespace
        time.sleep(0.2)
    kube.request("POST", "/apis/apps/v1/namespaces/%s/deployments" % namespace, {
        "metadata": {"name": "guarded"},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"nodeSelector": {uh.GROUP_LABEL: group_label}, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}}}, ok=(201,))
    kube.request("POST", "/apis/policy/v1/namespaces/%s/poddisruptionbudgets" % namespace, {
        "metadata": {"name": "never-disrupt"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}}, ok=(201,))
    pod = uh.wait_pod_running(kube, namespace, "app=guarded", worker)

    rc, output = uh.run_upgrade(values, tmp_path / "blocked.log", timeout=RUN_TIMEOUT)
    assert rc != 0, output[-6000:]
    cause = uh.fatal_message(output)
    assert pod in cause and "never-disrupt" in cause and worker in cause, (
        "the failure does not name node %s, pod %s and PDB never-disrupt: %s" % (worker, pod, cause))
    # The run stopped with the pod still in place: nothing was forced past the PDB.
    assert uh.wait_pod_running(kube, namespace, "app=guarded", worker, timeout=5) == pod
    assert not uh.lease_holder(handle), "the stopped run kept the run lock"
    # The stopped run took its PreferNoSchedule taint off every node (issue 23); the resumed run puts it back.
    assert not uh.replacing_tainted(handle)

    kube.request("DELETE", "/apis/policy/v1/namespaces/%s/poddisruptionbudgets/never-disrupt" % namespace, ok=(200,))
    # The first run after the fix finishes: it gets a full drain timeout again (node_drain not_before).
    rc, resumed = uh.run_upgrade(values, tmp_path / "resumed.log", timeout=RUN_TIMEOUT)
    assert rc == 0, resumed[-6000:]
    uh.assert_upgraded(handle, values, start, groups=upgraded)
    uh.wait_pod_running(kube, namespace, "app=guarded", None)
    assert "1/1 nodes on the image" in resumed, resumed[-4000:]
    # The report of the whole upgrade counts the drain passes the PDB cost, across both runs.
    summary = json.loads((pathlib.Path(values["rolling_upgrade_report_dir"]) / "image-upgrade-report.json").read_text())
    [row] = [r for r in summary["nodes"] if r["node"] == worker]
    assert row["retries"].get("drain", 0) >= 2 and row["waits"].get("pdb_seconds", 0) >= 1, row


@pytest.mark.timeout(900)
@pytest.mark.parametrize("cloud", ["aws"])   # why one cloud: the module docstring
def test_second_concurrent_run_stops_naming_the_holder_and_the_first_finishes(upgrade_cluster, cloud, tmp_path):
    handle, values, start = upgrade_cluster(cloud)
    upgraded = uh.limit_to_groups(values, start, ["workers-1"])  # one replacement keeps CI time down
    first = uh.PlaybookRun(values, tmp_path / "first.log")
    try:
        first.wait_for(uh.PROGRESS.search, RUN_TIMEOUT, "the first run's first pass")
        holder = uh.lease_holder(handle)
        assert holder and "/%d/" % first.proc.pid in holder, holder
        # The first run is frozen (alive, holding its Lease) while the second one tries: the step engine would
        # otherwise finish this one replacement before the second run has waited its 10 s.
        frozen = uh.freeze_tree(first.proc.pid, first.marker)
        try:
            began = time.monotonic()
            rc_second, second_output = uh.run_upgrade(
                dict(values, rolling_upgrade_lock_wait=10, rolling_upgrade_run_id="second-" + uuid.uuid4().hex[:6],
                     rolling_upgrade_report_dir=str(tmp_path / "second-report")),
                tmp_path / "second.log", timeout=300)
        finally:
            uh.thaw_tree(frozen)
        assert first.proc.poll() is None, "the first run ended while the second waited"
        assert uh.lease_holder(handle) == holder, "the second run took the first run's Lease"
        rc_first = first.wait(RUN_TIMEOUT)
    finally:
        first.kill()
    assert rc_second != 0, second_output[-4000:]
    assert time.monotonic() - began >= 10
    assert uh.PROGRESS.search(second_output) is None, "the second run started passes"
    # The holder must be in the failure's message, not only in a result field.
    message = uh.fatal_message(second_output)
    assert holder in message, "the second run stopped with %r" % message
    assert rc_first == 0, first.output()[-6000:]
    uh.assert_upgraded(handle, values, start, groups=upgraded)
