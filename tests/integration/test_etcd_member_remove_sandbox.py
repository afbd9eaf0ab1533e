"""etcd_member_remove end to end through the sandbox: control-plane nodes (simulated) each run a real
etcd member on their node IP at the standard ports, and the module removes a node's member selected by
the node's first InternalIP, as the upgrade does for a drained control-plane donor."""

import time

import pytest

from tests.ansible_run import run_module

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(420)]


def internal_ip(core, name):
    node = core.read_node(name)
    return [a.address for a in node.status.addresses if a.type == "InternalIP"][0]


def test_remove_a_control_plane_nodes_member_through_the_sandbox(sandbox, new_nodes):
    cps = new_nodes(3, role="control-plane", group="grp-etcd-remove", timeout=120)
    donor = cps[0]
    core = sandbox.core_v1()
    donor_ip = internal_ip(core, donor)
    info = sandbox.cp_etcd()
    running = [n for n, m in info["members"].items() if m["running"]]
    assert set(cps) <= set(running)
    args = dict(endpoints=info["endpoints"], ca_cert=info["ca"], client_cert=info["cert"], client_key=info["key"],
                node_ip=donor_ip, expected_member_count=len(info["members"]), timeout=90, request_timeout=3,
                cluster=sandbox.auth_args())

    # Issue 28: the member's Node (found by its address) is not cordoned, so it still serves: refused, naming the
    # node and the option, and nothing is removed (force would go on, with a warning).
    serving = run_module("etcd_member_remove", args)
    assert serving["failed"] and not serving.get("changed"), serving
    [drained] = [c for c in serving["checks"] if c["name"] == "node_drained"]
    assert drained["passed"] is False and donor in drained["message"] and "not cordoned" in drained["message"], drained
    assert "cluster_check=false" in serving["msg"], serving["msg"]
    assert sandbox.cp_etcd()["members"][donor]["running"] is True
    core.patch_node(donor, {"spec": {"unschedulable": True}})

    predicted = run_module("etcd_member_remove", args, check=True)
    assert not predicted["failed"], predicted.get("msg")
    assert predicted["changed"] is True and predicted["member"]["name"] == donor
    assert predicted["member"]["peer_urls"] == ["https://%s:2380" % donor_ip]
    assert sandbox.cp_etcd()["members"][donor]["running"] is True

    removed = run_module("etcd_member_remove", args)
    assert not removed["failed"], removed.get("msg")
    assert removed["changed"] is True and removed["member"]["name"] == donor
    assert donor not in [m["name"] for m in removed["members_after"]]
    assert sorted(m["name"] for m in removed["members_after"]) == sorted(set(info["members"]) - {donor})
    assert removed["health_after"] and all(h["healthy"] for h in removed["health_after"])

    # etcd stops a removed member by itself; the sandbox sees its process gone
    deadline = time.monotonic() + 20
    while sandbox.cp_etcd()["members"][donor]["running"]:
        assert time.monotonic() < deadline, "the removed member's etcd process did not exit"
        time.sleep(0.2)

    # A re-run with the same options (expected_member_count counts the members while the donor's is in)
    again = run_module("etcd_member_remove", args)
    assert not again["failed"], again.get("msg")
    assert again["changed"] is False and again["member"] is None
