"""Issue 25 ("donors are bound early and by name"), on the sandbox: the donor is chosen when it is drained. A worker
group of 2 whose heirs must be Ready 15 s before their donor drains: once the first heir is paired with the oldest
worker, the other worker's kubelet stops posting (its Node turns NotReady, its instance still runs). The heir goes
to the NotReady worker instead (swap), which is cordoned, drained and deleted first; the worker it was paired with,
still Ready and not drained, waits for the next heir. (Before issue 25 the pairing held: the Ready worker was
drained first while the NotReady one waited behind it.) On GCP: nodes, instances per group and etcd members are
compared before and after, and the report's counts are checked (assert_upgraded).

GCP alone (CI time, ci23): a Node's readiness and the swap are the planner's (plan_pairs), read from the apiserver;
no provider reads a Node, and the cloud sees only the usual create, then delete, of every end-to-end upgrade."""

import time

import pytest

import upgrade_helpers as uh
from sandbox import nodesim

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 420


def stop_kubelet(handle, name):
    """The Node's Ready condition as a kubelet that stopped posting leaves it (Unknown); its instance runs on. Nothing
    in the sandbox posts a Ready status again (no kubelet, no node-lifecycle controller)."""
    path = "/api/v1/nodes/" + name
    node = handle.kube().request("GET", path)
    [ip] = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
    handle.kube().merge_patch(path + "/status", nodesim.node_status(ip, name, node["status"]["nodeInfo"]["osImage"],
                                                                    ready=False))
    assert not uh.is_ready(handle.kube().request("GET", path))


def paired(handle, label, workers):
    """(heir, donor) of the first heir of the group with node label `label` once it names a donor among `workers`."""
    for node in uh.nodes(handle):
        donor = (node["metadata"].get("annotations") or {}).get(uh.PREFIX + "/donor")
        if node["metadata"]["labels"].get(uh.GROUP_LABEL) == label and donor in workers:
            return node["metadata"]["name"], donor
    return None


@pytest.mark.timeout(900)
@pytest.mark.parametrize("cloud", ["gcp"])   # why GCP alone: the module docstring
def test_a_worker_that_turns_not_ready_is_replaced_first(upgrade_cluster, cloud, tmp_path):
    began = time.monotonic()
    handle, values, start = upgrade_cluster(cloud, control_planes=1, workers=2, groups=1,
                                            rolling_upgrade_heir_ready_seconds=15)
    upgraded = uh.limit_to_groups(values, start, ["workers-0"])
    [label] = upgraded
    workers = set(start["groups"][label])
    members = uh.etcd_member_names(handle)
    per_group = uh.instances_per_group(handle)
    watcher = uh.Watcher(handle, etcd=True)
    watcher.start()
    run = uh.PlaybookRun(values, tmp_path / "upgrade.log")
    try:
        heir, first = uh.wait_until(lambda: paired(handle, label, workers), 240, "the first heir to be paired")
        [sick] = workers - {first}
        assert not uh.touched(watcher, first), "%s was %s before the test went on" % (first, uh.touched(watcher, first))
        stop_kubelet(handle, sick)
        print("%s paired with %s; %s NotReady at %.0f s" % (heir, first, sick, time.monotonic() - began))
        rc = run.wait(RUN_TIMEOUT)
    finally:
        run.close()
        watcher.stop()
    output = run.output()
    print("run took %.0f s" % (time.monotonic() - began))
    assert rc == 0, output[-6000:]
    # The heir went to the NotReady worker: it is the one the progress lines show draining onto that heir ...
    lines = [line for line in output.splitlines() if uh.PROGRESS.match(line)]
    assert any("%s draining" % sick in line and "(heir %s " % heir in line for line in lines), "\n".join(lines)
    assert not any("%s draining" % first in line and "(heir %s " % heir in line for line in lines), "\n".join(lines)
    # ... and it was cordoned first and gone before the worker first paired was cordoned (max_surge 1: that one waited
    # for the next heir).
    cordons = [(moment, name) for moment, _kind, name in watcher.seen(("cordon",)) if name in workers]
    assert [name for _moment, name in cordons] == [sick, first], cordons
    [gone] = [moment for moment, _kind, name in watcher.seen(("node-deletion",)) if name == sick]
    assert gone < cordons[1][0], (gone, cordons)
    # Ready never fell below the start less the node this test took away; never more instances than the surge allows;
    # etcd never lost a member.
    watcher.check(start, max_surge=1, max_unavailable=1)
    uh.assert_upgraded(handle, values, start, groups=upgraded)
    assert uh.instances_per_group(handle) == per_group
    assert uh.etcd_member_names(handle) == members
