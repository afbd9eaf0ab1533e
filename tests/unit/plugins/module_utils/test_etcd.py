"""Pure logic of module_utils/etcd.py: URL normalisation and matching, quorum arithmetic, safety checks."""

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import etcd

pytestmark = pytest.mark.timeout(60)


def member(member_id, name, peer, client=None, learner=False):
    raw = {"ID": str(member_id), "peerURLs": [peer]}
    if name:
        raw["name"] = name
    if client:
        raw["clientURLs"] = [client]
    if learner:
        raw["isLearner"] = True
    return etcd.parse_member(raw)


def probe(m, healthy=True, reachable=True, leader="1", term=2, index=100, applied=100, reason=""):
    return {
        "id": m["id"], "id_hex": m["id_hex"], "name": m["name"], "endpoint": m["client_urls"][0] if reachable else None,
        "reachable": reachable, "healthy": healthy and reachable, "reason": reason,
        "error": None if reachable else "cannot connect to %s: Connection refused" % m["client_urls"][0],
        "leader_id": leader if reachable else None, "is_leader": reachable and leader == m["id"],
        "raft_term": term if reachable else None, "raft_index": index if reachable else None,
        "raft_applied_index": applied if reachable else None, "is_learner": m["is_learner"], "errors": [],
        "version": "3.6.16",
    }


def cluster(count):
    return [member(i, "cp-%d" % i, "https://10.0.0.%d:2380" % i, "https://10.0.0.%d:2379" % i)
            for i in range(1, count + 1)]


def by_name(checks):
    return {c["name"]: c for c in checks}


# ----- URLs --------------------------------------------------------------------------------------

@pytest.mark.parametrize("ip,expected", [
    ("10.0.0.5", "https://10.0.0.5:2380"),
    ("fd00::5", "https://[fd00::5]:2380"),
    ("[fd00::5]", "https://[fd00::5]:2380"),
    ("2001:DB8:0:0:0:0:0:1", "https://[2001:db8::1]:2380"),
    (" 10.0.0.5 ", "https://10.0.0.5:2380"),
])
def test_peer_url_for_ip(ip, expected):
    assert etcd.peer_url_for_ip(ip) == expected


def test_peer_url_for_ip_port_and_rejects_names():
    assert etcd.peer_url_for_ip("10.0.0.5", 12380) == "https://10.0.0.5:12380"
    with pytest.raises(ValueError):
        etcd.peer_url_for_ip("cp-1.example")
    with pytest.raises(ValueError):
        etcd.peer_url_for_ip("10.0.0.256")


@pytest.mark.parametrize("url,expected", [
    ("https://10.0.0.5:2380", ("https", "10.0.0.5", 2380)),
    ("HTTPS://10.0.0.5:2380/", ("https", "10.0.0.5", 2380)),
    ("https://[2001:DB8::0:1]:2380", ("https", "2001:db8::1", 2380)),
    ("https://[2001:db8:0:0:0:0:0:1]:2380", ("https", "2001:db8::1", 2380)),
    ("https://CP-1.Example.:2380", ("https", "cp-1.example", 2380)),
    ("https://10.0.0.5", ("https", "10.0.0.5", 443)),
    ("http://10.0.0.5", ("http", "10.0.0.5", 80)),
])
def test_normalize_url(url, expected):
    assert etcd.normalize_url(url) == expected


def test_normalize_url_default_port_for_missing_port():
    assert etcd.normalize_url("https://10.0.0.5", default_port=2380) == ("https", "10.0.0.5", 2380)
    assert etcd.normalize_url("https://10.0.0.5:1", default_port=2380) == ("https", "10.0.0.5", 1)


@pytest.mark.parametrize("url", [
    "10.0.0.5:2380", "ftp://10.0.0.5:2380", "https://10.0.0.5:2380/v3", "https://10.0.0.5:2380?x=1",
    "https://user:pw@10.0.0.5:2380", "https://:2380", "https://10.0.0.5:99999", "",
])
def test_normalize_url_rejects(url):
    with pytest.raises(ValueError):
        etcd.normalize_url(url)


@given(st.ip_addresses(), st.integers(min_value=1, max_value=65535))
def test_peer_url_round_trips_through_normalisation(address, port):
    url = etcd.peer_url_for_ip(str(address), port)
    scheme, host, parsed_port = etcd.normalize_url(url)
    assert (scheme, ipaddress.ip_address(host), parsed_port) == ("https", address, port)
    if address.version == 6:
        assert "[" in url


# ----- members and matching ------------------------------------------------------------------------

def test_parse_member_fills_omitted_fields():
    started = etcd.parse_member({"ID": "3788599116726334232", "name": "cp-1", "peerURLs": ["https://10.0.0.1:2380"],
                                 "clientURLs": ["https://10.0.0.1:2379"]})
    assert started == {"id": "3788599116726334232", "id_hex": "3493ced2e4d4f318", "name": "cp-1",
                       "peer_urls": ["https://10.0.0.1:2380"], "client_urls": ["https://10.0.0.1:2379"],
                       "is_learner": False, "started": True}
    unstarted = etcd.parse_member({"ID": "17", "peerURLs": ["https://10.0.0.9:2380"], "isLearner": True})
    assert unstarted["name"] == "" and unstarted["client_urls"] == []
    assert unstarted["is_learner"] and not unstarted["started"]


def test_match_is_exact_never_substring():
    members = [member(1, "a", "https://10.0.0.1:2380"), member(10, "b", "https://10.0.0.10:2380"),
               member(11, "c", "https://10.0.0.11:23800")]
    assert [m["name"] for m in etcd.match_members(members, peer_url="https://10.0.0.1:2380")] == ["a"]
    assert etcd.match_members(members, peer_url="https://10.0.0.11:2380") == []
    assert etcd.match_members(members, peer_url="https://10.0.0.1:23") == []


def test_match_normalises_host_port_and_case_but_not_scheme():
    members = [member(1, "a", "https://[fd00::1]:2380"), member(2, "b", "http://10.0.0.2:2380")]
    assert [m["name"] for m in etcd.match_members(members, peer_url="HTTPS://[FD00:0::1]:2380/")] == ["a"]
    assert [m["name"] for m in etcd.match_members(members, peer_url="https://[fd00::1]")] == ["a"]  # default 2380
    assert etcd.match_members(members, peer_url="https://10.0.0.2:2380") == []
    assert [m["name"] for m in etcd.match_members(members, peer_url="http://10.0.0.2:2380")] == ["b"]


def test_match_checks_every_peer_url_and_skips_garbage():
    odd = etcd.parse_member({"ID": "5", "name": "multi", "peerURLs": ["not a url", "https://10.0.0.5:2380"]})
    assert etcd.match_members([odd], peer_url="https://10.0.0.5:2380") == [odd]


def test_match_by_name_is_exact_and_can_be_ambiguous():
    members = [member(1, "cp-1", "https://10.0.0.1:2380"), member(2, "cp-1", "https://10.0.0.2:2380"),
               member(3, "cp-10", "https://10.0.0.3:2380")]
    assert len(etcd.match_members(members, name="cp-1")) == 2
    assert etcd.match_members(members, name="cp") == []
    with pytest.raises(ValueError):
        etcd.match_members(members)


# ----- quorum ------------------------------------------------------------------------------------

@pytest.mark.parametrize("voters,needed", [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4)])
def test_quorum_size(voters, needed):
    assert etcd.quorum_size(voters) == needed


@given(st.integers(min_value=1, max_value=1000))
def test_quorum_is_the_smallest_majority(voters):
    needed = etcd.quorum_size(voters)
    assert 2 * needed > voters >= 2 * (needed - 1)


# ----- checks ------------------------------------------------------------------------------------

def test_all_checks_pass_on_a_healthy_cluster():
    members = cluster(3)
    health = {m["id"]: probe(m) for m in members}
    checks = etcd.evaluate_checks(members, members[1], health, [])
    assert etcd.failed_checks(checks) == []
    assert [c["name"] for c in checks] == ["members_started", "members_healthy", "leader_agreement",
                                           "members_caught_up", "no_alarms", "not_learner",
                                           "quorum_after_removal", "member_count"]
    assert by_name(checks)["member_count"]["passed"] is None
    assert by_name(checks)["quorum_after_removal"]["message"] == "2 of 2 remaining voters healthy, 2 needed"


def test_another_member_down_in_three_refuses_and_names_it():
    members = cluster(3)
    health = {m["id"]: probe(m) for m in members}
    health["3"] = probe(members[2], reachable=False)
    checks = by_name(etcd.evaluate_checks(members, members[1], health, []))
    assert checks["members_healthy"]["passed"] is False
    assert "cp-3" in checks["members_healthy"]["message"] and "Connection refused" in checks["members_healthy"]["message"]
    assert checks["quorum_after_removal"]["passed"] is False
    message = etcd.refusal_message(members[1], list(checks.values()))
    assert "cp-2" in message and "cp-3" in message and "quorum_after_removal" in message


def test_removing_the_down_member_itself_is_allowed():
    members = cluster(3)
    health = {m["id"]: probe(m) for m in members}
    health["3"] = probe(members[2], reachable=False)
    assert etcd.failed_checks(etcd.evaluate_checks(members, members[2], health, [])) == []


def test_five_members_one_down_keeps_quorum_but_every_member_must_be_healthy():
    members = cluster(5)
    health = {m["id"]: probe(m) for m in members}
    health["5"] = probe(members[4], healthy=False, reason="NOSPACE")
    checks = by_name(etcd.evaluate_checks(members, members[1], health, []))
    assert checks["quorum_after_removal"]["passed"] is True
    assert checks["quorum_after_removal"]["message"] == "3 of 4 remaining voters healthy, 3 needed"
    assert checks["members_healthy"]["passed"] is False and "NOSPACE" in checks["members_healthy"]["message"]


def test_quorum_counts_only_voters():
    members = cluster(3) + [member(9, "joining", "https://10.0.0.9:2380", "https://10.0.0.9:2379", learner=True)]
    health = {m["id"]: probe(m) for m in members}
    checks = by_name(etcd.evaluate_checks(members, members[0], health, []))
    assert checks["quorum_after_removal"]["message"] == "2 of 2 remaining voters healthy, 2 needed"


def test_learner_target_needs_allow_learner():
    members = cluster(3) + [member(9, "joining", "https://10.0.0.9:2380", "https://10.0.0.9:2379", learner=True)]
    health = {m["id"]: probe(m) for m in members}
    refused = by_name(etcd.evaluate_checks(members, members[3], health, []))["not_learner"]
    assert refused["passed"] is False and "learner" in refused["message"]
    allowed = by_name(etcd.evaluate_checks(members, members[3], health, [], allow_learner=True))["not_learner"]
    assert allowed["passed"] is True
    # a learner leaves the voters untouched
    assert by_name(etcd.evaluate_checks(members, members[3], health, [], allow_learner=True))[
        "quorum_after_removal"]["message"] == "3 of 3 remaining voters healthy, 2 needed"


def test_unstarted_other_member_refuses_but_unstarted_target_is_fine():
    members = cluster(3) + [etcd.parse_member({"ID": "9", "peerURLs": ["https://10.0.0.9:2380"]})]
    health = {m["id"]: probe(m) for m in members[:3]}
    checks = by_name(etcd.evaluate_checks(members, members[0], health, []))
    assert checks["members_started"]["passed"] is False and "<unstarted>" in checks["members_started"]["message"]
    # 4 voters, one never started: removing a started one leaves 3 voters, 2 healthy -> still a quorum,
    # but the unstarted member is exactly the danger the first check is for
    on_target = by_name(etcd.evaluate_checks(members, members[3], health, []))
    assert on_target["members_started"]["passed"] is True and on_target["members_healthy"]["passed"] is True
    assert on_target["quorum_after_removal"]["passed"] is True


def test_alarms_refuse():
    members = cluster(3)
    health = {m["id"]: probe(m) for m in members}
    checks = by_name(etcd.evaluate_checks(members, members[0], health, [{"memberID": "2", "alarm": "NOSPACE"}]))
    assert checks["no_alarms"]["passed"] is False and checks["no_alarms"]["message"] == "active alarms: NOSPACE on cp-2 (2)"


def test_leader_disagreement_and_no_leader():
    members = cluster(3)
    health = {m["id"]: probe(m) for m in members}
    health["3"] = probe(members[2], leader="2", term=3)
    checks = etcd.evaluate_checks(members, members[0], health, [])
    assert by_name(checks)["leader_agreement"]["passed"] is False
    assert etcd.only_transient_failures(checks)
    no_leader = {m["id"]: probe(m, leader="0") for m in members}
    assert by_name(etcd.evaluate_checks(members, members[0], no_leader, []))["leader_agreement"]["passed"] is False
    foreign = {m["id"]: probe(m, leader="77") for m in members}
    assert by_name(etcd.evaluate_checks(members, members[0], foreign, []))["leader_agreement"]["passed"] is False


def test_lagging_voter_refuses():
    members = cluster(3)
    health = {m["id"]: probe(m, index=5000, applied=5000) for m in members}
    health["3"] = probe(members[2], index=5000, applied=3000)
    checks = by_name(etcd.evaluate_checks(members, members[1], health, []))
    assert checks["members_caught_up"]["passed"] is False and "2000" in checks["members_caught_up"]["message"]


def test_member_count_and_only_voter():
    members = cluster(3)
    health = {m["id"]: probe(m) for m in members}
    assert by_name(etcd.evaluate_checks(members, members[0], health, [], expected_member_count=3))[
        "member_count"]["passed"] is True
    mismatch = by_name(etcd.evaluate_checks(members, members[0], health, [], expected_member_count=4))
    assert mismatch["member_count"]["passed"] is False and mismatch["member_count"]["message"] == "3 members, 4 expected"
    assert not etcd.only_transient_failures(list(mismatch.values()))
    single = cluster(1)
    only = by_name(etcd.evaluate_checks(single, single[0], {"1": probe(single[0])}, []))
    assert only["quorum_after_removal"]["passed"] is False


def test_pick_transfer_target_prefers_most_caught_up_healthy_voter():
    members = cluster(4) + [member(9, "joining", "https://10.0.0.9:2380", "https://10.0.0.9:2379", learner=True)]
    health = {m["id"]: probe(m, applied=100) for m in members}
    health["2"] = probe(members[1], applied=90)
    health["3"] = probe(members[2], applied=120, healthy=False)
    health["4"] = probe(members[3], applied=110)
    health["9"] = probe(members[4], applied=500)
    assert etcd.pick_transfer_target(members, members[0], health)["name"] == "cp-4"
    down = {m["id"]: probe(m, reachable=False) for m in members}
    assert etcd.pick_transfer_target(members, members[0], down) is None


@pytest.mark.parametrize("text,expected", [
    ("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer certificate",
     "not signed by the CA in ca_cert (/ca.crt)"),
    ("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: IP address mismatch", "does not name this host"),
    ("SSLError(SSLEOFError(8, 'EOF occurred in violation of protocol (_ssl.c:2427)'))",
     "rejected the client certificate (/client.crt)"),
    ("[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED]", "rejected the client certificate"),
    ("[X509: KEY_VALUES_MISMATCH] key values mismatch", "client_key does not belong to client_cert"),
    ("[X509: NO_CERTIFICATE_OR_CRL_FOUND] no certificate or crl found", "not valid PEM"),
])
def test_classify_tls_error(text, expected):
    assert expected in etcd.classify_tls_error(text, "/ca.crt", "/client.crt")


# --- select_node_member: the member of a node, found by its IP at any port, or by its name --------------

def test_node_member_is_found_by_ip_at_any_peer_port_never_by_substring():
    members = [member(1, "a", "https://10.0.0.1:12380"), member(10, "b", "https://10.0.0.10:2380"),
               member(11, "c", "https://10.0.0.11:2380")]
    assert etcd.select_node_member(members, "10.0.0.1")["name"] == "a"
    assert etcd.select_node_member(members, "10.0.0.2") is None


def test_node_member_is_found_by_a_client_url_or_ipv6_in_any_spelling():
    peer_by_name = member(1, "a", "https://cp-a.internal:2380", client="https://[fd00::1]:2379")
    assert etcd.select_node_member([peer_by_name], "FD00:0::1") == peer_by_name
    assert etcd.select_node_member([peer_by_name], "[fd00::1]") == peer_by_name


def test_node_member_by_ip_and_name_must_agree():
    members = [member(1, "cp-1", "https://10.0.0.1:2380"), member(2, "cp-2", "https://10.0.0.2:2380")]
    assert etcd.select_node_member(members, "10.0.0.1", "cp-1")["name"] == "cp-1"
    assert etcd.select_node_member(members, "10.0.0.1", "other")["name"] == "cp-1"  # a member not named after its node
    with pytest.raises(etcd.EtcdError) as caught:
        etcd.select_node_member(members, "10.0.0.1", "cp-2")
    assert caught.value.kind == etcd.AMBIGUOUS
    assert "cp-1" in str(caught.value) and "cp-2" in str(caught.value) and "peer_url or member_name" in str(caught.value)


def test_node_member_named_after_the_node_elsewhere_is_ambiguous_not_absent():
    members = [member(1, "cp-1", "https://cp-1.internal:2380", client="https://cp-1.internal:2379")]
    with pytest.raises(etcd.EtcdError) as caught:
        etcd.select_node_member(members, "10.0.0.1", "cp-1")
    assert caught.value.kind == etcd.AMBIGUOUS and "none of its URLs is on node_ip 10.0.0.1" in str(caught.value)


def test_several_members_on_the_node_ip_are_ambiguous():
    members = [member(1, "a", "https://127.0.0.1:2380"), member(2, "b", "https://127.0.0.1:12380")]
    with pytest.raises(etcd.EtcdError) as caught:
        etcd.select_node_member(members, "127.0.0.1")
    assert caught.value.kind == etcd.AMBIGUOUS and "2 members have a URL on node_ip 127.0.0.1" in str(caught.value)


def test_node_member_ip_must_be_an_ip():
    with pytest.raises(ValueError):
        etcd.select_node_member([], "cp-1.example")


def test_absent_member_problem_counts_members_with_the_member_in():
    members = [member(1, "a", "https://10.0.0.1:2380"), member(2, "b", "https://10.0.0.2:2380")]
    assert etcd.absent_member_problem(members, "node_ip 10.0.0.3", None) is None
    assert etcd.absent_member_problem(members, "node_ip 10.0.0.3", 3) is None  # two left of three: it went
    problem = etcd.absent_member_problem(members, "node_ip 10.0.0.3", 2)
    assert "no etcd member matches node_ip 10.0.0.3" in problem and "expected_member_count is 2" in problem
    assert "https://10.0.0.2:2380" in problem and "etcdctl member list" in problem


# -- etcd_member_remove's cluster_check: the member's Node must be cordoned and drained (issue 28) ------------------

def _node(name, address, cordoned=False):
    spec = {"unschedulable": True} if cordoned else {}
    return {"metadata": {"name": name}, "spec": spec,
            "status": {"addresses": [{"type": "InternalIP", "address": address}]}}


def _member(name, ip):
    return {"name": name, "peer_urls": ["https://%s:2380" % ip], "client_urls": ["https://%s:2379" % ip] if name else []}


def test_member_nodes_by_node_name_then_member_name_then_address():
    nodes = [_node("cp-1", "10.0.0.1"), _node("cp-2", "10.0.0.2"), _node("other", "2001:db8::1")]
    assert [n["metadata"]["name"] for n in etcd.member_nodes(nodes, _member("cp-1", "10.0.0.2"), "cp-2")] == ["cp-2"]
    assert [n["metadata"]["name"] for n in etcd.member_nodes(nodes, _member("cp-1", "10.0.0.2"))] == ["cp-1"]
    assert [n["metadata"]["name"] for n in etcd.member_nodes(nodes, _member("", "10.0.0.2"))] == ["cp-2"]
    assert [n["metadata"]["name"] for n in etcd.member_nodes(nodes, _member("m", "[2001:DB8:0::1]"))] == ["other"]
    assert etcd.member_nodes(nodes, _member("gone", "10.0.0.9")) == []


def test_node_drained_check_refuses_a_serving_node_and_passes_a_drained_or_missing_one():
    pods = {"cp-1": [{"metadata": {"name": "web", "namespace": "apps"}, "spec": {}, "status": {"phase": "Running"}}],
            "cp-2": []}
    serving = etcd.node_drained_check([_node("cp-1", "10.0.0.1")], pods.get, _member("cp-1", "10.0.0.1"))
    assert serving["name"] == "node_drained" and serving["passed"] is False
    assert "cp-1 is not cordoned" in serving["message"] and "cluster_check=false" in serving["message"]
    busy = etcd.node_drained_check([_node("cp-1", "10.0.0.1", cordoned=True)], pods.get, _member("cp-1", "10.0.0.1"))
    assert busy["passed"] is False and "apps/web" in busy["message"]
    drained = etcd.node_drained_check([_node("cp-2", "10.0.0.2", cordoned=True)], pods.get, _member("cp-2", "10.0.0.2"))
    assert drained["passed"] is True
    assert etcd.node_drained_check([], pods.get, _member("cp-3", "10.0.0.3"))["passed"] is True
