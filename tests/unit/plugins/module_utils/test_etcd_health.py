"""Pure logic behind etcd_member_info: the problems that make a cluster unhealthy, leader agreement, alarm
labels, and the inspection flow's re-reading during an election (a scripted client and a fake clock stand
in for the gateway; real etcd is covered by tests/integration/test_etcd_member_info.py)."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import etcd

from test_etcd import cluster, member, probe
from test_etcd_flow import FakeClock, ScriptedClient

pytestmark = pytest.mark.timeout(60)


def checks_of(problems):
    return [p["check"] for p in problems]


def healthy_probes(members, leader="1"):
    return {m["id"]: probe(m, leader=leader) for m in members}


def test_a_healthy_cluster_has_no_problems():
    members = cluster(3)
    assert etcd.cluster_problems(members, healthy_probes(members), [], expected_member_count=3) == []
    assert etcd.leader_agreement(members, healthy_probes(members)) == ("1", "all members follow leader cp-1 (1) in term 2")


def test_a_down_member_is_named_with_the_reason():
    members = cluster(3)
    health = healthy_probes(members)
    health["3"] = probe(members[2], reachable=False)
    problems = etcd.cluster_problems(members, health, [])
    message = "etcd member cp-3 (3) is unreachable: cannot connect to https://10.0.0.3:2379: Connection refused"
    assert problems == [{"check": "members_healthy", "message": message}]


def test_an_unhealthy_member_and_an_unstarted_member_are_named():
    members = cluster(3) + [member(10, "", "https://10.0.0.10:2380")]
    health = healthy_probes(members[:3])
    health["2"] = probe(members[1], healthy=False, reason="ALARM NOSPACE")
    health["10"] = etcd.EtcdClient([]).probe(members[3])  # no client URL: not contacted
    problems = etcd.cluster_problems(members, health, [], expected_member_count=3)
    assert [p["message"] for p in problems] == [
        "etcd member cp-2 (2) is unhealthy: ALARM NOSPACE",
        "etcd member <unstarted> (a) (peer URLs https://10.0.0.10:2380) was added but has never started",
        "etcd has 4 members, 3 expected (cp-1 (1), cp-2 (2), cp-3 (3), <unstarted> (a))",
    ]


def test_member_problems_tie_each_problem_to_the_member_and_its_node_ip():
    """What the step engine reads before each control-plane create (issue 25): per member, with the InternalIP of its
    node (the host of its peer URL), also a learner left over; cluster-wide problems name no member."""
    members = cluster(3) + [member(4, "cp-4", "https://10.0.0.4:2380", "https://10.0.0.4:2379", learner=True),
                            member(10, "", "https://10.0.0.10:2380")]
    health = healthy_probes(members[:4])
    health["2"] = probe(members[1], reachable=False)
    health["10"] = etcd.EtcdClient([]).probe(members[4])
    found = etcd.member_problems(members, health, [{"memberID": "1", "alarm": "NOSPACE"}])
    assert [(p["member"], p["node_ip"]) for p in found] == [
        ("cp-2 (2)", "10.0.0.2"), ("cp-4 (4)", "10.0.0.4"), ("<unstarted> (a)", "10.0.0.10"), (None, None)]
    assert found[0]["message"] == "unreachable: cannot connect to https://10.0.0.2:2379: Connection refused"
    assert found[1]["message"] == "is a learner that was never promoted"
    assert found[3]["message"] == "etcd alarm active: NOSPACE on cp-1 (1)"
    assert etcd.member_problems(cluster(3), healthy_probes(cluster(3)), []) == []


def test_alarms_name_the_member_that_raised_them():
    members = cluster(3)
    alarms = [{"memberID": "2", "alarm": "NOSPACE"}, {"memberID": "99", "alarm": "CORRUPT"},
              {"alarm": "UNKNOWN (alarm list failed: boom)", "memberID": "0"}]
    problems = etcd.cluster_problems(members, healthy_probes(members), alarms)
    assert [p["message"] for p in problems] == [
        "etcd alarm active: NOSPACE on cp-2 (2)",
        "etcd alarm active: CORRUPT on member 63",
        "etcd alarm active: UNKNOWN (alarm list failed: boom)",
    ]
    assert set(checks_of(problems)) == {"no_alarms"}


@pytest.mark.parametrize("change,fragment", [
    ({"3": dict(leader="2", term=3)}, "cp-3 (3) follows cp-2 (2) in term 3"),
    ({"1": dict(leader="0"), "2": dict(leader="0"), "3": dict(leader="0")}, "no member knows a leader"),
    ({"1": dict(leader="77"), "2": dict(leader="77"), "3": dict(leader="77")}, "follows 4d (not a member)"),
    ({"1": dict(term=3)}, "cp-1 (1) follows cp-1 (1) in term 3; cp-2 (2) follows cp-1 (1) in term 2"),
])
def test_leader_disagreement_is_one_transient_problem_naming_who_follows_whom(change, fragment):
    members = cluster(3)
    health = healthy_probes(members)
    for member_id, fields in change.items():
        health[member_id] = probe(members[int(member_id) - 1], **fields)
    problems = etcd.cluster_problems(members, health, [])
    assert checks_of(problems) == ["leader_agreement"] and fragment in problems[0]["message"]
    assert etcd.leader_agreement(members, health)[0] is None


def test_a_learner_cannot_be_the_agreed_leader():
    members = cluster(2) + [member(3, "cp-3", "https://10.0.0.3:2380", "https://10.0.0.3:2379", learner=True)]
    assert etcd.leader_agreement(members, healthy_probes(members, leader="3"))[0] is None
    assert etcd.cluster_problems(members, healthy_probes(members), []) == []  # a healthy learner is no problem


def test_no_member_answering_means_no_leader():
    members = cluster(3)
    health = {m["id"]: probe(m, reachable=False) for m in members}
    problems = etcd.cluster_problems(members, health, [])
    assert checks_of(problems) == ["members_healthy"] * 3 + ["leader_agreement"]
    assert problems[-1]["message"] == "no member reported its status"


# ----- the inspection flow ------------------------------------------------------------------------

class ElectingClient(ScriptedClient):
    """Members disagree on the leader for the first `unsettled` surveys."""

    def __init__(self, members, unsettled):
        super().__init__(members)
        self.unsettled = unsettled
        self.surveys = 0

    def probe_all(self, members, timeout=None):
        health = super().probe_all(members, timeout)
        self.surveys += 1
        if self.surveys <= self.unsettled:
            health[members[2]["id"]]["leader_id"] = "2"
        return health


def members3():
    return [etcd.parse_member({"ID": str(i), "name": "cp-%d" % i, "peerURLs": ["https://10.0.0.%d:2380" % i],
                               "clientURLs": ["https://10.0.0.%d:2379" % i]}) for i in (1, 2, 3)]


def test_inspection_reads_again_during_an_election_until_it_settles():
    clock = FakeClock()
    client = ElectingClient(members3(), unsettled=3)
    result = etcd.inspect_cluster(client, 3, timeout=10, clock=clock, sleep=clock.sleep)
    assert client.surveys == 4 and clock.now == pytest.approx(1.5)
    assert result["healthy"] is True and result["problems"] == []
    assert result["leader"] == {"id": "1", "id_hex": "1", "name": "cp-1"}
    assert [h["name"] for h in result["health"]] == ["cp-1", "cp-2", "cp-3"]


def test_inspection_gives_up_on_an_election_at_the_timeout_and_reports_it():
    clock = FakeClock()
    client = ElectingClient(members3(), unsettled=1000)
    result = etcd.inspect_cluster(client, timeout=5, clock=clock, sleep=clock.sleep)
    assert result["healthy"] is False and result["leader"] is None
    assert len(result["problems"]) == 1 and "disagree on the leader" in result["problems"][0]
    assert 4.5 <= clock.now <= 5


def test_inspection_reports_a_lasting_problem_at_once():
    clock = FakeClock()
    client = ScriptedClient(members3(), down=["3"])
    client.alarms = lambda endpoint: [{"memberID": "2", "alarm": "NOSPACE"}]
    result = etcd.inspect_cluster(client, 4, timeout=30, clock=clock, sleep=clock.sleep)
    assert clock.now == 0
    assert result["healthy"] is False and result["leader"]["name"] == "cp-1"
    assert result["problems"] == ["etcd member cp-3 (3) is unreachable: Connection refused",
                                  "etcd alarm active: NOSPACE on cp-2 (2)",
                                  "etcd has 3 members, 4 expected (cp-1 (1), cp-2 (2), cp-3 (3))"]
    assert result["alarms"] == [{"alarm": "NOSPACE", "member_id": "2", "member_id_hex": "2", "member_name": "cp-2"}]


def test_an_unreadable_alarm_list_counts_as_an_alarm():
    client = ScriptedClient(members3())

    def fail(endpoint):
        raise etcd.EtcdError("%s answered HTTP 500: boom" % endpoint)
    client.alarms = fail
    result = etcd.inspect_cluster(client)
    assert result["healthy"] is False
    assert result["problems"] == ["etcd alarm active: UNKNOWN (alarm list failed: https://10.0.0.1:2379 answered "
                                  "HTTP 500: boom)"]


# ----- options --------------------------------------------------------------------------------------

def test_the_connection_options_are_shared_with_etcd_member_remove():
    for name, spec in etcd.CONNECTION_ARG_SPEC.items():
        assert etcd.INFO_ARGUMENT_SPEC[name] == spec == etcd.REMOVE_ARGUMENT_SPEC[name]
    assert etcd.INFO_ARGUMENT_SPEC["client_key"]["no_log"] is False  # a path, not key material


@pytest.mark.parametrize("change,fragment", [
    ({"expected_member_count": 0}, "expected_member_count must be a whole number from 1 to 100, got 0"),
    ({"timeout": -1}, "timeout must be a whole number from 0 to 2592000 (seconds), got -1"),
    ({"endpoints": []}, "at least one client URL"),
    ({"ca_cert": "/nonexistent/ca.crt"}, "ca_cert /nonexistent/ca.crt does not exist"),
])
def test_info_options_are_validated(tmp_path, change, fragment):
    params = {name: spec.get("default") for name, spec in etcd.INFO_ARGUMENT_SPEC.items()}
    for option in ("ca_cert", "client_cert", "client_key"):
        (tmp_path / option).write_text("x")
        params[option] = str(tmp_path / option)
    assert etcd.validate_info(params) == []
    params.update(change)
    assert any(fragment in p for p in etcd.validate_info(params)), etcd.validate_info(params)
