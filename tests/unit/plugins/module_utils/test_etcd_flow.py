"""The removal flow's decisions (selection, refusal, retries, deadlines) with a scripted stand-in for the
gateway client and a fake clock. The real client and real etcd are covered by the integration tests."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import etcd

pytestmark = pytest.mark.timeout(60)


def raw(member_id, name, learner=False):
    data = {"ID": str(member_id), "name": name, "peerURLs": ["https://10.0.0.%d:2380" % member_id],
            "clientURLs": ["https://10.0.0.%d:2379" % member_id]}
    if learner:
        data["isLearner"] = True
    return etcd.parse_member(data)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class ScriptedClient:
    """Answers like the gateway would for a cluster whose members all follow `leader`. `remove_errors`
    are raised by successive remove calls before one succeeds."""

    request_timeout = 5.0
    endpoints = ["https://10.0.0.1:2379"]

    def __init__(self, members, leader="1", down=(), remove_errors=()):
        self.members = list(members)
        self.leader = leader
        self.down = set(down)
        self.remove_errors = list(remove_errors)
        self.removed = []
        self.moves = []

    def member_list(self, endpoints=None):
        return self.endpoints[0], [m for m in self.members if m["id"] not in self.removed]

    def probe(self, member, timeout=None):
        reachable = member["id"] not in self.down
        return {"id": member["id"], "id_hex": member["id_hex"], "name": member["name"],
                "endpoint": member["client_urls"][0] if reachable else None, "reachable": reachable,
                "healthy": reachable, "reason": "", "error": None if reachable else "Connection refused",
                "leader_id": self.leader if reachable else None, "is_leader": reachable and member["id"] == self.leader,
                "raft_term": 2, "raft_index": 10, "raft_applied_index": 10, "is_learner": member["is_learner"],
                "errors": [], "version": "3.6.16"}

    def probe_all(self, members, timeout=None):
        return {m["id"]: self.probe(m) for m in members}

    def alarms(self, endpoint):
        return []

    def move_leader(self, endpoint, target_id):
        self.moves.append((endpoint, target_id))
        self.leader = target_id

    def remove(self, endpoint, member_id):
        if self.remove_errors:
            error = self.remove_errors.pop(0)
            if isinstance(error, tuple):  # (error, True): etcd applied the removal but the answer was lost
                error, applied = error
                if applied:
                    self.removed.append(member_id)
            raise error
        self.removed.append(member_id)


def flow(client, clock, **options):
    options.setdefault("timeout", 30)
    warnings = []
    removal = etcd.MemberRemoval(client, clock=clock, sleep=clock.sleep, warn=warnings.append, **options)
    return removal, warnings


def test_absent_member_changes_nothing():
    clock = FakeClock()
    client = ScriptedClient([raw(1, "a"), raw(2, "b"), raw(3, "c")])
    result = flow(client, clock)[0].run(peer_url="https://10.0.0.9:2380")
    assert result["changed"] is False and result["member"] is None and client.removed == []
    assert len(result["members_before"]) == 3 and result["checks"] == []
    # Said so (issue 28): a mistyped selector looks the same as a member gone, so the selector and the members are named.
    assert result["msg"].startswith("no etcd member matches peer_url https://10.0.0.9:2380, so nothing was removed")
    assert "etcd lists 3 member(s)" in result["msg"] and all("https://10.0.0.%d:2380" % n in result["msg"] for n in (1, 2, 3))
    assert not result["waiting"]


def test_a_member_found_is_removed_without_the_absent_message():
    clock = FakeClock()
    client = ScriptedClient([raw(1, "a"), raw(2, "b"), raw(3, "c")])
    result = flow(client, clock)[0].run(member_name="b")
    assert result["changed"] is True and client.removed == ["2"] and "msg" not in result


def test_ambiguous_name_is_an_error_naming_both():
    clock = FakeClock()
    client = ScriptedClient([raw(1, "a"), raw(2, "dup"), raw(3, "dup")])
    with pytest.raises(etcd.EtcdError) as caught:
        flow(client, clock)[0].run(member_name="dup")
    assert caught.value.kind == etcd.AMBIGUOUS
    assert "matches 2 members" in str(caught.value) and "https://10.0.0.3:2380" in str(caught.value)
    assert client.removed == []


def test_leader_is_moved_then_removed():
    clock = FakeClock()
    client = ScriptedClient([raw(1, "a"), raw(2, "b"), raw(3, "c")], leader="1")
    result = flow(client, clock)[0].run(member_name="a")
    assert client.moves == [("https://10.0.0.1:2379", "2")] and client.removed == ["1"]
    assert result["leader_transfer"]["to_name"] == "b" and result["changed"] is True


def test_check_mode_plans_but_neither_moves_nor_removes():
    clock = FakeClock()
    client = ScriptedClient([raw(1, "a"), raw(2, "b"), raw(3, "c")], leader="1")
    result = flow(client, clock)[0].run(member_name="a", check_mode=True)
    assert result["changed"] is True and result["leader_transfer"]["planned"] is True
    assert client.moves == [] and client.removed == []


def test_unhealthy_cluster_window_is_retried_until_it_passes():
    clock = FakeClock()
    busy = etcd.EtcdError("etcdserver: unhealthy cluster", kind=etcd.UNHEALTHY_CLUSTER)
    client = ScriptedClient([raw(1, "a"), raw(2, "b"), raw(3, "c")], remove_errors=[busy] * 8)
    result = flow(client, clock)[0].run(member_name="c")
    assert result["changed"] is True and client.removed == ["3"]
    # 8 refusals over the 2 remaining endpoints: 4 refused rounds, each followed by a 0.5 s pause
    assert clock.now == pytest.approx(4 * 0.5)


def test_unhealthy_cluster_past_the_deadline_fails():
    clock = FakeClock()
    busy = etcd.EtcdError("etcdserver: unhealthy cluster", kind=etcd.UNHEALTHY_CLUSTER)
    client = ScriptedClient([raw(1, "a"), raw(2, "b"), raw(3, "c")], remove_errors=[busy] * 1000)
    with pytest.raises(etcd.EtcdError) as caught:
        flow(client, clock, timeout=5)[0].run(member_name="c")
    assert caught.value.kind == etcd.UNHEALTHY_CLUSTER and "until the timeout" in str(caught.value)
    assert client.removed == [] and clock.now <= 5.5


def test_lost_answer_then_not_found_counts_as_removed():
    clock = FakeClock()
    lost = etcd.EtcdError("https://10.0.0.1:2379 did not answer", kind=etcd.UNREACHABLE)
    gone = etcd.EtcdError("etcdserver: member not found", kind=etcd.NOT_FOUND)
    client = ScriptedClient([raw(1, "a"), raw(2, "b"), raw(3, "c")], remove_errors=[(lost, True), gone])
    removal, warnings = flow(client, clock)
    result = removal.run(member_name="c")
    assert result["changed"] is True and warnings == [] and client.removed == ["3"]
    assert [m["name"] for m in result["members_after"]] == ["a", "b"]


def test_removed_by_someone_else_meanwhile_is_unchanged_with_a_warning():
    clock = FakeClock()
    gone = etcd.EtcdError("etcdserver: member not found", kind=etcd.NOT_FOUND)
    client = ScriptedClient([raw(1, "a"), raw(2, "b"), raw(3, "c")], remove_errors=[(gone, True)])
    removal, warnings = flow(client, clock)
    result = removal.run(member_name="c")
    assert result["changed"] is False and any("disappeared" in w for w in warnings)


def test_refusal_carries_the_evidence_and_force_overrides_with_a_warning():
    clock = FakeClock()
    members = [raw(1, "a"), raw(2, "b"), raw(3, "c")]
    client = ScriptedClient(members, down={"3"})
    with pytest.raises(etcd.RemovalRefused) as caught:
        flow(client, clock)[0].run(member_name="b")
    details = caught.value.details
    assert details["changed"] is False and details["member"]["name"] == "b"
    assert {c["name"] for c in details["checks"] if c["passed"] is False} == {"members_healthy", "quorum_after_removal"}
    assert client.removed == [] and clock.now == 0  # not a transient failure: no waiting

    removal, warnings = flow(client, clock, force=True)
    result = removal.run(member_name="b")
    assert result["changed"] is True and result["forced"] is True and client.removed == ["2"]
    assert len(warnings) >= 1 and "force=true" in warnings[0] and "members_healthy" in warnings[0]


def test_leader_disagreement_is_waited_out():
    clock = FakeClock()
    members = [raw(1, "a"), raw(2, "b"), raw(3, "c")]
    client = ScriptedClient(members, leader="2")
    real_probe_all = client.probe_all
    calls = []

    def probe_all(members_, timeout=None):
        calls.append(clock.now)
        health = real_probe_all(members_)
        if len(calls) < 3:  # an election in progress: one member still follows the old leader
            health["3"]["leader_id"] = "1"
        return health

    client.probe_all = probe_all
    result = flow(client, clock)[0].run(member_name="c")
    assert result["changed"] is True and len(calls) >= 3


def test_on_refusal_wait_names_the_unhealthy_member_and_the_quorum_then_removes_once_it_is_back():
    """The chaos experiment's case: 4 members (3 + the heir), one stopped; removing the donor is refused as a
    named waiting state, nothing removed, and goes ahead at the next call once the member is back."""
    clock = FakeClock()
    members = [raw(1, "donor"), raw(2, "stopped"), raw(3, "c"), raw(4, "heir")]
    client = ScriptedClient(members, leader="3", down={"2"})
    removal, warnings = flow(client, clock, on_refusal="wait")
    result = removal.run(member_name="donor")
    assert result["waiting"] is True and result["changed"] is False and client.removed == []
    assert result["waiting_on"] == ["stopped"]
    assert result["msg"] == (
        "etcd member stopped (%s) is not healthy (Connection refused): removing etcd member donor (%s) now would "
        "leave 2 of 3 remaining voters healthy (2 needed for quorum); waiting" % (members[1]["id_hex"], members[0]["id_hex"]))
    assert result["members_after"] == result["members_before"] and result["checks"]

    client.down.clear()   # SIGCONT
    again = flow(client, clock, on_refusal="wait")[0].run(member_name="donor")
    assert again["waiting"] is False and again["changed"] is True and client.removed == ["1"]


def test_on_refusal_wait_says_when_the_removal_would_lose_quorum():
    clock = FakeClock()
    members = [raw(1, "a"), raw(2, "b"), raw(3, "c")]
    client = ScriptedClient(members, leader="1", down={"3"})
    result = flow(client, clock, on_refusal="wait")[0].run(member_name="b")
    assert result["waiting"] is True and client.removed == []
    assert result["msg"].startswith("etcd member c (%s) is not healthy (Connection refused): " % members[2]["id_hex"])
    assert result["msg"].endswith("removing etcd member b (%s) would lose quorum (1 of 2 remaining voters healthy, "
                                  "2 needed); waiting" % members[1]["id_hex"])


def test_on_refusal_wait_still_fails_on_what_needs_an_operator():
    clock = FakeClock()
    members = [raw(1, "a"), raw(2, "b"), raw(3, "c")]
    client = ScriptedClient(members, down={"3"})
    client.alarms = lambda endpoint: [{"memberID": "1", "alarm": "NOSPACE"}]
    with pytest.raises(etcd.RemovalRefused) as caught:
        flow(client, clock, on_refusal="wait")[0].run(member_name="b")
    assert "no_alarms failed" in str(caught.value)
    with pytest.raises(etcd.RemovalRefused):   # a member count that does not match is not waited on
        flow(ScriptedClient(members), clock, on_refusal="wait", expected_member_count=4)[0].run(member_name="b")
    assert client.removed == []


def test_on_refusal_wait_turns_etcds_own_refusal_past_the_deadline_into_waiting():
    clock = FakeClock()
    busy = etcd.EtcdError("etcdserver: unhealthy cluster", kind=etcd.UNHEALTHY_CLUSTER)
    client = ScriptedClient([raw(1, "a"), raw(2, "b"), raw(3, "c")], remove_errors=[busy] * 1000)
    result = flow(client, clock, timeout=5, on_refusal="wait")[0].run(member_name="c")
    assert result["waiting"] is True and result["changed"] is False and client.removed == []
    assert "etcd refused to remove member c" in result["msg"] and result["msg"].endswith("; waiting")


def test_on_refusal_must_be_fail_or_wait():
    with pytest.raises(ValueError, match="on_refusal must be one of fail, wait, got 'later'"):
        etcd.MemberRemoval(ScriptedClient([]), on_refusal="later")


def test_waitable_refusal():
    def checks(*failed):
        return [{"name": n, "passed": False} for n in failed] + [{"name": "not_learner", "passed": True}]
    assert etcd.waitable_refusal(checks("members_healthy", "quorum_after_removal"))
    assert etcd.waitable_refusal(checks("members_started"))
    assert not etcd.waitable_refusal(checks("members_healthy", "no_alarms"))
    assert not etcd.waitable_refusal(checks("member_count"))
    assert not etcd.waitable_refusal(checks())


def raw_at(member_id, name, peer_port):
    return etcd.parse_member({"ID": str(member_id), "name": name,
                              "peerURLs": ["https://10.0.0.%d:%d" % (member_id, peer_port)],
                              "clientURLs": ["https://10.0.0.%d:2379" % member_id]})


def test_node_ip_removes_a_member_whose_peer_port_is_not_2380():
    clock = FakeClock()
    client = ScriptedClient([raw_at(1, "a", 2380), raw_at(2, "b", 12380), raw_at(3, "c", 2380)])
    result = flow(client, clock, expected_member_count=3)[0].run(node_ip="10.0.0.2", node_name="b")
    assert result["changed"] is True and result["member"]["name"] == "b" and client.removed == ["2"]


def test_no_match_while_the_count_says_the_member_is_in_is_refused_not_absent():
    clock = FakeClock()
    # The node's member is listed under an address the selector does not find (a hostname).
    hidden = etcd.parse_member({"ID": "2", "name": "m-2", "peerURLs": ["https://cp-2.internal:2380"],
                                "clientURLs": ["https://cp-2.internal:2379"]})
    client = ScriptedClient([raw(1, "a"), hidden, raw(3, "c")])
    for selector in (dict(node_ip="10.0.0.2", node_name="cp-2"), dict(peer_url="https://10.0.0.2:2380")):
        for options in (dict(), dict(force=True), dict(on_refusal="wait")):
            with pytest.raises(etcd.RemovalRefused) as caught:
                flow(client, clock, expected_member_count=3, **options)[0].run(check_mode=False, **selector)
            assert "etcd still lists 3 members" in str(caught.value) and "cp-2.internal" in str(caught.value)
            assert caught.value.details["checks"][0]["name"] == "member_count"
            assert caught.value.details["checks"][0]["passed"] is False
    assert client.removed == []


def test_no_match_with_fewer_members_than_expected_is_already_gone():
    clock = FakeClock()
    client = ScriptedClient([raw(1, "a"), raw(3, "c")])
    result = flow(client, clock, expected_member_count=3)[0].run(node_ip="10.0.0.2", node_name="b")
    assert result["changed"] is False and result["member"] is None and client.removed == []
    assert "no etcd member matches node_ip 10.0.0.2 or node_name 'b'" in result["msg"], result["msg"]
    assert "node_ip names no member" in result["msg"] and "etcd lists 2 member(s)" in result["msg"]


def test_a_member_whose_node_serves_is_refused_even_with_on_refusal_wait_and_checked_in_check_mode():
    """cluster_check (issue 28): the node_drained check runs with the others, in check mode too; it is not one that
    passes by itself, so on_refusal=wait refuses; force goes on with a warning naming it."""
    clock = FakeClock()
    members = [raw(1, "a"), raw(2, "b"), raw(3, "c")]
    seen = []

    def serving(member):
        seen.append(member["name"])
        return etcd._check("node_drained", False, "node b is not cordoned, so it was not drained")

    for options in (dict(), dict(on_refusal="wait")):
        client = ScriptedClient(members)
        with pytest.raises(etcd.RemovalRefused) as caught:
            flow(client, clock, node_check=serving, **options)[0].run(member_name="b", check_mode=True)
        assert "node_drained failed" in str(caught.value) and "node b is not cordoned" in str(caught.value)
        assert client.removed == []
    assert seen == ["b", "b"]
    client = ScriptedClient(members)
    removal, warnings = flow(client, clock, node_check=serving, force=True)
    assert removal.run(member_name="b")["changed"] is True and client.removed == ["2"]
    assert "node_drained" in warnings[0]
    drained = ScriptedClient(members)
    flow(drained, clock, node_check=lambda member: etcd._check("node_drained", True, "drained"))[0].run(member_name="b")
    assert drained.removed == ["2"]
