"""etcd_member_info through ansible-playbook against real etcd 3.6 clusters (mutual TLS on loopback): what
it reports for a healthy cluster, a stopped member, an alarm, a member count that differs, TLS mistakes,
and that it changes nothing (check mode included).

Clusters come from the etcd_cluster fixture of test_etcd_member_remove.py (one small cluster per test,
members on distinct loopback IPs)."""

import time

import pytest

from sandbox import netutil, pki
from tests.ansible_run import run_module
from test_etcd_member_remove import member_names, module_args
from test_etcd_member_remove import etcd_cluster  # noqa: F401 pylint: disable=unused-import # a fixture, used by name

pytestmark = pytest.mark.timeout(180)

MODULE = "etcd_member_info"


def info_args(cluster, **extra):
    args = module_args(cluster, **extra)
    args.pop("timeout")  # the removal's whole-operation bound; here the default (10 s) applies
    args.update(extra)
    return args


def member_id(cluster, name):
    return cluster.status(name)["header"]["member_id"]


def by_name(rows):
    return {row["name"]: row for row in rows}


def test_healthy_three_member_cluster_in_check_mode_too(etcd_cluster):
    cluster = etcd_cluster(3)
    leader = cluster.leader_name()
    for check in (False, True):
        result = run_module(MODULE, info_args(cluster, expected_member_count=3), check=check)
        assert not result["failed"], result.get("msg")
        assert result["changed"] is False
        assert result["healthy"] is True and result["problems"] == []
        assert result["leader"]["name"] == leader
        assert result["leader"]["id_hex"] == format(int(member_id(cluster, leader)), "x")
        members = by_name(result["members"])
        assert sorted(members) == sorted(cluster.members)
        for name, row in members.items():
            assert row["peer_urls"] == [cluster.peer_url(name)] and row["client_urls"] == [cluster.client_url(name)]
            assert row["started"] is True and row["is_learner"] is False
            assert row["id_hex"] == format(int(row["id"]), "x")
        health = by_name(result["health"])
        assert all(h["reachable"] and h["healthy"] for h in health.values())
        assert [n for n, h in health.items() if h["is_leader"]] == [leader]
        assert {h["leader_id"] for h in health.values()} == {result["leader"]["id"]}
        assert len({h["raft_term"] for h in health.values()}) == 1 and all(h["raft_index"] > 0 for h in health.values())
        assert result["alarms"] == []
    assert member_names(cluster) == sorted(cluster.members)


def test_a_stopped_member_makes_it_unhealthy_and_is_named(etcd_cluster):
    cluster = etcd_cluster(3)
    stopped = next(n for n in cluster.members if n != cluster.leader_name())
    cluster.stop_member(stopped)
    # The stopped member first in the list: the module must go on to the next endpoint.
    endpoints = [cluster.client_url(stopped)] + cluster.client_endpoints(running_only=True)
    result = run_module(MODULE, info_args(cluster, endpoints=endpoints, expected_member_count=3))
    assert not result["failed"], result.get("msg")
    assert result["changed"] is False and result["healthy"] is False
    assert result["endpoint"] != cluster.client_url(stopped)
    health = by_name(result["health"])
    assert health[stopped]["reachable"] is False and health[stopped]["healthy"] is False
    assert "Connection refused" in health[stopped]["error"]
    assert len(result["problems"]) == 1, result["problems"]
    problem = result["problems"][0]
    assert problem.startswith("etcd member %s (%s) is unreachable: " % (stopped, health[stopped]["id_hex"]))
    assert cluster.client_url(stopped) in problem and "Connection refused" in problem
    # the two live members still agree on a leader: that is not a problem
    assert result["leader"] is not None and result["leader"]["name"] != stopped


def test_an_alarm_makes_it_unhealthy_and_names_the_member(etcd_cluster):
    cluster = etcd_cluster(3)
    raiser = "cp-1"
    raiser_id = member_id(cluster, raiser)
    endpoint = cluster.client_url(raiser)
    cluster.post(endpoint, "/v3/maintenance/alarm", {"action": "ACTIVATE", "memberID": raiser_id, "alarm": "NOSPACE"})
    try:
        result = run_module(MODULE, info_args(cluster, expected_member_count=3))
        assert not result["failed"], result.get("msg")
        assert result["healthy"] is False
        assert result["alarms"] == [{"alarm": "NOSPACE", "member_id": raiser_id,
                                     "member_id_hex": format(int(raiser_id), "x"), "member_name": raiser}]
        # etcd's /health reports an active alarm on every member, and the status names it
        assert all(not h["healthy"] and h["reason"].endswith("HTTP 503: ALARM NOSPACE") for h in result["health"])
        assert all(any("memberID:%s alarm:NOSPACE" % raiser_id in e for e in h["errors"]) for h in result["health"])
        label = "%s (%s)" % (raiser, format(int(raiser_id), "x"))
        assert "etcd alarm active: NOSPACE on %s" % label in result["problems"], result["problems"]
    finally:
        cluster.post(endpoint, "/v3/maintenance/alarm", {"action": "DEACTIVATE", "memberID": raiser_id,
                                                         "alarm": "NOSPACE"})
    cleared = run_module(MODULE, info_args(cluster, expected_member_count=3))
    assert cleared["healthy"] is True and cleared["alarms"] == [], cleared["problems"]


def test_expected_member_count_mismatch_and_an_unstarted_member(etcd_cluster):
    cluster = etcd_cluster(3)
    fewer = run_module(MODULE, info_args(cluster, expected_member_count=4))
    assert not fewer["failed"], fewer.get("msg")
    assert fewer["healthy"] is False
    assert len(fewer["problems"]) == 1 and fewer["problems"][0].startswith("etcd has 3 members, 4 expected (")

    # A member added for a peer that never starts: quorum (3 of 4) survives, the cluster is not healthy.
    ip = cluster.members["cp-0"].ip.rsplit(".", 1)[0] + ".14"
    cluster.add_member("never", ip, client_port=cluster.members["cp-0"].client_port,
                       peer_port=cluster.members["cp-0"].peer_port, start=False)
    added = run_module(MODULE, info_args(cluster, expected_member_count=4))
    assert not added["failed"], added.get("msg")
    assert added["healthy"] is False
    unstarted = [m for m in added["members"] if not m["started"]]
    assert len(unstarted) == 1 and unstarted[0]["name"] == ""
    assert added["problems"] == ["etcd member <unstarted> (%s) (peer URLs https://%s:%d) was added but has never started"
                                 % (unstarted[0]["id_hex"], ip, cluster.members["cp-0"].peer_port)]
    assert len(cluster.member_list()) == 4  # reading removed nothing


def test_tls_and_unreachable_failures_are_named(etcd_cluster, tmp_path):
    cluster = etcd_cluster(3, distinct_ips=False)
    foreign = pki.CA(tmp_path / "foreign", "foreign-ca")
    foreign_cert, foreign_key = foreign.issue("client", "intruder", kind=pki.CLIENT)

    wrong_ca = run_module(MODULE, info_args(cluster, ca_cert=str(foreign.cert_path)))
    assert wrong_ca["failed"] is True and wrong_ca["reason"] == "tls"
    assert wrong_ca["msg"].startswith("TLS failure (tried ")
    assert "not signed by the CA in ca_cert (%s)" % foreign.cert_path in wrong_ca["msg"]

    wrong_client = run_module(MODULE, info_args(cluster, client_cert=str(foreign_cert), client_key=str(foreign_key)))
    assert wrong_client["failed"] is True and wrong_client["reason"] == "tls"
    assert "rejected the client certificate (%s)" % foreign_cert in wrong_client["msg"]

    endpoints = ["https://127.0.0.1:%d" % netutil.free_port() for dummy in range(2)]
    started = time.monotonic()
    unreachable = run_module(MODULE, info_args(cluster, endpoints=endpoints, request_timeout=2))
    assert unreachable["failed"] is True and unreachable["reason"] == "unreachable"
    assert unreachable["msg"].startswith("no etcd endpoint reachable (tried %s)" % ", ".join(endpoints))
    assert "Connection refused" in unreachable["msg"]
    assert time.monotonic() - started < 20


def test_bad_input_fails_before_contacting_anything(tmp_path):
    missing = run_module(MODULE, dict(endpoints=["https://127.0.0.1:1"], ca_cert=str(tmp_path / "absent.crt")))
    assert missing["failed"] is True and missing["reason"] == "invalid"
    assert "ca_cert %s does not exist" % (tmp_path / "absent.crt") in missing["msg"]
    count = run_module(MODULE, dict(endpoints=["http://127.0.0.1:1"], expected_member_count=0))
    assert count["failed"] is True and count["reason"] == "invalid"
    assert "expected_member_count must be a whole number from 1 to 100, got 0" in count["msg"]
    unknown = run_module(MODULE, dict(endpoints=["http://127.0.0.1:1"], node_ip="10.0.0.1"))
    assert unknown["failed"] is True and "node_ip" in unknown["msg"]
