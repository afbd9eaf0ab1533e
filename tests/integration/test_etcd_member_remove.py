"""etcd_member_remove through ansible-playbook against real etcd 3.6 clusters (mutual TLS on loopback).

Every test starts its own small cluster (sandbox/etcd_cluster.py): a 3-member cluster starts in well
under a second, and removals change membership, so sharing clusters between tests would couple them.
Members get distinct loopback IPs in a random 127.x.y.0/24 (like control-plane nodes) so that node_ip
selection is real; the last octets 1 and 11/12/13 make a substring match select the wrong member.
"""

import os
import random
import signal
import time

import pytest

from sandbox import netutil, pki
from sandbox.etcd_cluster import EtcdCluster
from tests import ansible_run

pytestmark = pytest.mark.timeout(180)

MODULE = "etcd_member_remove"
LAST_OCTETS = [1, 11, 12, 13, 14]


def distinct_ip_members(count, prefix="cp"):
    """[(name, ip, client port, peer port)] on one random 127.x.y.0/24, one port pair free on every IP."""
    for attempt in range(50):
        base = "127.%d.%d." % (random.randint(2, 254), random.randint(0, 255))
        ips = [base + str(octet) for octet in LAST_OCTETS[:count]]
        client, peer = netutil.free_port(ips[0]), netutil.free_port(ips[0])
        if client != peer and all(netutil.port_is_free(p, ip) for ip in ips for p in (client, peer)):
            return [("%s-%d" % (prefix, i), ip, client, peer) for i, ip in enumerate(ips)]
    raise RuntimeError("no free port pair on a random loopback /24")


@pytest.fixture
def etcd_cluster(tmp_path):
    """Factory: etcd_cluster(count, distinct_ips=True) -> a started EtcdCluster, stopped at teardown."""
    clusters = []

    def start(count, distinct_ips=True):
        cluster = EtcdCluster(tmp_path / ("etcd%d" % len(clusters)), "emr")
        clusters.append(cluster)
        if distinct_ips:
            cluster.start(distinct_ip_members(count))
        else:
            cluster.start([("cp-%d" % i, "127.0.0.1") for i in range(count)])
        return cluster

    yield start
    for cluster in clusters:
        cluster.stop(grace=0.5)  # throw-away data: no need to wait for a graceful leader hand-over


def run_module(name, args, **options):
    """ansible_run.run_module; etcd_member_remove without its cluster_check, as these clusters are etcd alone."""
    if name == MODULE:
        args = dict(args, cluster_check=False)
    return ansible_run.run_module(name, args, **options)


def module_args(cluster, **extra):
    ca, cert, key = cluster.client_tls()
    args = dict(endpoints=cluster.client_endpoints(running_only=True), ca_cert=ca, client_cert=cert,
                client_key=key, timeout=40, request_timeout=3)
    args.update(extra)
    return args


def member_names(cluster):
    return sorted(m.get("name", "") for m in cluster.member_list())


def wait_exit(cluster, name, timeout=15.0):
    """etcd stops by itself once removed from the cluster."""
    deadline = time.monotonic() + timeout
    while cluster.member_pid(name) is not None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def check_names(result):
    return {c["name"]: c for c in result["checks"]}


def test_check_mode_then_remove_a_follower_by_node_ip_then_absent(etcd_cluster):
    cluster = etcd_cluster(3)
    # The member on 127.x.y.1 (a substring of .11/.12) is the target; make sure it is a follower.
    follower = "cp-0"
    cluster.move_leader("cp-1")
    ip, peer_port = cluster.members[follower].ip, cluster.members[follower].peer_port
    # The member's peer port is not the default 2380 the module assumes: node_ip finds it at any port. The
    # count is the members while the follower's is in, the same on every re-run.
    assert peer_port != 2380
    args = module_args(cluster, node_ip=ip, node_name=follower, expected_member_count=3)

    predicted = run_module(MODULE, args, check=True, diff=True)
    assert not predicted["failed"], predicted.get("msg")
    assert predicted["changed"] is True
    assert predicted["member"]["name"] == follower
    assert predicted["member"]["peer_urls"] == [cluster.peer_url(follower)]
    assert all(c["passed"] in (True, None) for c in predicted["checks"])
    assert check_names(predicted)["member_count"]["passed"] is True
    assert len(predicted["health"]) == 3 and all(h["healthy"] for h in predicted["health"])
    assert sorted(m["name"] for m in predicted["members_after"]) == sorted(set(cluster.members) - {follower})
    assert len(predicted["diff"]["before"]["members"]) == 3 and len(predicted["diff"]["after"]["members"]) == 2
    assert member_names(cluster) == sorted(cluster.members)  # check mode removed nothing
    assert cluster.member_pid(follower) is not None

    removed = run_module(MODULE, args)
    assert not removed["failed"], removed.get("msg")
    assert removed["changed"] is True and removed["leader_transfer"] is None
    assert removed["member"]["name"] == follower
    assert sorted(m["name"] for m in removed["members_after"]) == sorted(set(cluster.members) - {follower})
    assert member_names(cluster) == sorted(set(cluster.members) - {follower})
    assert len(removed["health_after"]) == 2 and all(h["healthy"] for h in removed["health_after"])
    assert wait_exit(cluster, follower)

    again = run_module(MODULE, args)  # a re-run with the same options: two of three left, it is gone
    assert not again["failed"], again.get("msg")
    assert again["changed"] is False and again["member"] is None
    assert len(again["members_before"]) == 2 and again["checks"] == []
    # Issue 28: said so, in the result and a warning, naming the selector and the members left.
    assert again["msg"].startswith("no etcd member matches node_ip %s" % ip) and "nothing was removed" in again["msg"]
    assert all(cluster.peer_url(m) in again["msg"] for m in set(cluster.members) - {follower}), again["msg"]
    assert any("no etcd member matches node_ip %s" % ip in w for w in again.get("warnings") or []), again

    # A count that says the member should still be in: no match is no proof that it went.
    counted = run_module(MODULE, dict(args, expected_member_count=2), check=True)
    assert counted["failed"] and counted["reason"] == "refused"
    assert "no etcd member matches node_ip %s" % ip in counted["msg"] and "etcd still lists 2 members" in counted["msg"]
    assert [c["name"] for c in counted["checks"] if c["passed"] is False] == ["member_count"]
    assert member_names(cluster) == sorted(set(cluster.members) - {follower})


def test_remove_the_leader_of_five_moves_leadership_first(etcd_cluster):
    cluster = etcd_cluster(5, distinct_ips=False)
    leader = cluster.leader_name()
    cluster.put("/before", "1")

    planned = run_module(MODULE, module_args(cluster, member_name=leader, expected_member_count=5), check=True)
    assert not planned["failed"], planned.get("msg")
    assert planned["changed"] is True and planned["leader_transfer"]["planned"] is True
    assert planned["leader_transfer"]["from_name"] == leader and planned["leader_transfer"]["to_name"] != leader
    assert cluster.leader_name() == leader and len(cluster.member_list()) == 5  # nothing moved or removed

    result = run_module(MODULE, module_args(cluster, member_name=leader, expected_member_count=5))
    assert not result["failed"], result.get("msg")
    assert result["changed"] is True
    transfer = result["leader_transfer"]
    assert transfer["from_name"] == leader and transfer["to_name"] not in ("", leader)
    assert transfer["planned"] is False
    assert check_names(result)["quorum_after_removal"]["message"] == "4 of 4 remaining voters healthy, 3 needed"
    assert [h["name"] for h in result["health"] if h["is_leader"]] == [leader]
    assert len(result["members_after"]) == 4 and leader not in [m["name"] for m in result["members_after"]]
    assert all(h["healthy"] for h in result["health_after"])
    assert {h["leader_id"] for h in result["health_after"]} == {transfer["to_id"]}

    assert wait_exit(cluster, leader)
    cluster.forget_member(leader)
    # the cluster keeps serving: writes and linearizable reads succeed on the remaining members
    cluster.put("/after", "2")
    assert cluster.get("/before") == "1" and cluster.get("/after") == "2"
    assert cluster.leader_name() == transfer["to_name"]


def test_refuses_while_another_member_is_down_then_removes_the_down_member(etcd_cluster):
    cluster = etcd_cluster(3)
    leader = cluster.leader_name()
    down, healthy = [n for n in cluster.members if n != leader][:2]
    cluster.stop_member(down)

    refused = run_module(MODULE, module_args(cluster, member_name=healthy))
    assert refused["failed"] is True and refused["reason"] == "refused"
    assert "refusing to remove etcd member %s" % healthy in refused["msg"]
    assert "unhealthy members: %s" % down in refused["msg"]
    checks = check_names(refused)
    assert checks["members_healthy"]["passed"] is False and checks["quorum_after_removal"]["passed"] is False
    assert checks["quorum_after_removal"]["message"] == "1 of 2 remaining voters healthy, 2 needed"
    assert member_names(cluster) == sorted(cluster.members)  # nothing was removed

    removed = run_module(MODULE, module_args(cluster, peer_url=cluster.peer_url(down)))
    assert not removed["failed"], removed.get("msg")
    assert removed["changed"] is True and removed["member"]["name"] == down
    assert [h["reachable"] for h in removed["health"] if h["name"] == down] == [False]
    assert member_names(cluster) == sorted(set(cluster.members) - {down})
    assert all(h["healthy"] for h in removed["health_after"]) and len(removed["health_after"]) == 2


def test_a_stopped_member_makes_the_removal_wait_and_it_goes_ahead_after_sigcont(etcd_cluster):
    """bench/chaos.py's etcd experiment at module level: 4 members (3 control planes and a joined heir), one
    SIGSTOPped (its port accepts, it never answers). on_refusal=wait returns a named waiting state, naming the
    stopped member and what the removal would do to quorum, and removes nothing (the default, on_refusal=fail,
    fails: test_refuses_while_another_member_is_down_then_removes_the_down_member). After SIGCONT the same call
    removes the member."""
    cluster = etcd_cluster(4)
    leader = cluster.leader_name()
    stopped, donor = [n for n in cluster.members if n != leader][:2]
    pid = cluster.member_pid(stopped)
    os.kill(pid, signal.SIGSTOP)
    try:
        args = module_args(cluster, member_name=donor, on_refusal="wait", expected_member_count=4)
        waiting = run_module(MODULE, args)
        assert not waiting["failed"], waiting.get("msg")
        assert waiting["waiting"] is True and waiting["changed"] is False and waiting["waiting_on"] == [stopped]
        message = waiting["msg"]
        assert message.startswith("etcd member %s (" % stopped) and " is not healthy (" in message, message
        assert ("removing etcd member %s (" % donor) in message, message
        assert message.endswith("now would leave 2 of 3 remaining voters healthy (2 needed for quorum); waiting")
        assert message in " ".join(waiting.get("warnings", [])), waiting.get("warnings")
        assert member_names(cluster) == sorted(cluster.members)
    finally:
        os.kill(pid, signal.SIGCONT)
    cluster.wait_healthy()

    removed = run_module(MODULE, args)
    assert not removed["failed"], removed.get("msg")
    assert removed["waiting"] is False and removed["changed"] is True and removed["member"]["name"] == donor
    assert member_names(cluster) == sorted(set(cluster.members) - {donor})
    assert wait_exit(cluster, donor)


def test_peer_url_is_normalised_and_force_overrides_a_failed_check(etcd_cluster):
    cluster = etcd_cluster(3)
    leader = cluster.leader_name()
    target = next(n for n in cluster.members if n != leader)
    member = cluster.members[target]
    # same URL, different spelling: upper-case scheme, trailing slash
    spelled = "HTTPS://%s:%d/" % (member.ip, member.peer_port)

    refused = run_module(MODULE, module_args(cluster, peer_url=spelled, expected_member_count=4))
    assert refused["failed"] is True and refused["reason"] == "refused"
    assert "member_count failed (3 members, 4 expected)" in refused["msg"]
    assert member_names(cluster) == sorted(cluster.members)

    forced = run_module(MODULE, module_args(cluster, peer_url=spelled, expected_member_count=4, force=True))
    assert not forced["failed"], forced.get("msg")
    assert forced["changed"] is True and forced["forced"] is True and forced["member"]["name"] == target
    assert all(c["enforced"] is False for c in forced["checks"])
    assert any("force=true" in w and "member_count" in w for w in forced.get("warnings", [])), forced.get("warnings")
    assert member_names(cluster) == sorted(set(cluster.members) - {target})


def test_unstarted_learner_blocks_other_removals_and_needs_allow_learner(etcd_cluster):
    cluster = etcd_cluster(3)
    ip = cluster.members["cp-0"].ip.rsplit(".", 1)[0] + ".14"
    learner = cluster.add_member("joining", ip, client_port=cluster.members["cp-0"].client_port,
                                 peer_port=cluster.members["cp-0"].peer_port, learner=True, start=False)
    assert learner.get("isLearner") is True

    blocked = run_module(MODULE, module_args(cluster, member_name="cp-1"))
    assert blocked["failed"] is True and blocked["reason"] == "refused"
    assert check_names(blocked)["members_started"]["passed"] is False
    assert "<unstarted>" in blocked["msg"]

    peer_url = "https://%s:%d" % (ip, cluster.members["cp-0"].peer_port)
    refused = run_module(MODULE, module_args(cluster, peer_url=peer_url))
    assert refused["failed"] is True and check_names(refused)["not_learner"]["passed"] is False
    assert len(cluster.member_list()) == 4

    removed = run_module(MODULE, module_args(cluster, peer_url=peer_url, allow_learner=True))
    assert not removed["failed"], removed.get("msg")
    assert removed["changed"] is True and removed["member"]["is_learner"] is True
    assert removed["member"]["started"] is False
    assert member_names(cluster) == sorted(set(cluster.members) - {"joining"})


def test_tls_failures_are_named(etcd_cluster, tmp_path):
    cluster = etcd_cluster(3, distinct_ips=False)
    foreign = pki.CA(tmp_path / "foreign", "foreign-ca")
    foreign_cert, foreign_key = foreign.issue("client", "intruder", kind=pki.CLIENT)
    leader = cluster.leader_name()

    wrong_ca = run_module(MODULE, module_args(cluster, member_name=leader, ca_cert=str(foreign.cert_path)))
    assert wrong_ca["failed"] is True and wrong_ca["reason"] == "tls"
    assert "not signed by the CA in ca_cert (%s)" % foreign.cert_path in wrong_ca["msg"]

    wrong_client = run_module(MODULE, module_args(cluster, member_name=leader, client_cert=str(foreign_cert),
                                                  client_key=str(foreign_key)))
    assert wrong_client["failed"] is True and wrong_client["reason"] == "tls"
    assert "rejected the client certificate (%s)" % foreign_cert in wrong_client["msg"]
    assert member_names(cluster) == sorted(cluster.members)


def test_unreachable_endpoints_fail_fast(tmp_path):
    ca = pki.CA(tmp_path / "pki", "ca")
    cert, key = ca.issue("client", "client", kind=pki.CLIENT)
    endpoints = ["https://127.0.0.1:%d" % netutil.free_port() for port_index in range(2)]
    started = time.monotonic()
    result = run_module(MODULE, dict(endpoints=endpoints, ca_cert=str(ca.cert_path), client_cert=str(cert),
                                     client_key=str(key), node_ip="127.0.0.1", timeout=20, request_timeout=2))
    assert result["failed"] is True and result["reason"] == "unreachable"
    assert result["msg"].startswith("no etcd endpoint reachable (tried %s)" % ", ".join(endpoints))
    assert "Connection refused" in result["msg"]
    assert time.monotonic() - started < 20


def test_bad_input_fails_before_contacting_anything(tmp_path):
    both = run_module(MODULE, dict(endpoints=["https://127.0.0.1:1"], node_ip="10.0.0.1", member_name="cp-1"))
    assert both["failed"] is True and "mutually exclusive" in both["msg"]
    missing = run_module(MODULE, dict(endpoints=["https://127.0.0.1:1"], node_ip="10.0.0.1",
                                      ca_cert=str(tmp_path / "absent.crt")))
    assert missing["failed"] is True and missing["reason"] == "invalid"
    assert "ca_cert %s does not exist" % (tmp_path / "absent.crt") in missing["msg"]
    not_ip = run_module(MODULE, dict(endpoints=["https://127.0.0.1:1"], node_ip="cp-1.example"))
    assert not_ip["failed"] is True and "node_ip 'cp-1.example' is not an IP address" in not_ip["msg"]
    lone_name = run_module(MODULE, dict(endpoints=["https://127.0.0.1:1"], member_name="cp-1", node_name="cp-1"))
    assert lone_name["failed"] is True and lone_name["reason"] == "invalid"
    assert "node_name 'cp-1' is only used with node_ip" in lone_name["msg"]
