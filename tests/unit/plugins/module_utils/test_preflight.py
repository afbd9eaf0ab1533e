"""Unit tests of the preflight verdict (module_utils/preflight.py): the checks on the preflight's read, in their
order and with their messages."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import preflight

pytestmark = pytest.mark.timeout(60)

LIMIT = {"description": "CPUS in europe-west1: limit 3, usage 3"}


def read(**kw):
    base = {"replacement_order": [{"name": "w1", "role": "worker"}], "nodes": {"invalid": []}, "not_ready": [],
            "progress": {"in_flight": 0}, "donors": [], "joining": [], "control_plane_endpoints": [],
            "blocking_pdbs": [], "unready_system_pods": [], "quota": None}
    base.update(kw)
    return base


def quota(status, wanted=2, allowed=1, unknown=()):
    return {"status": status, "surge_wanted": wanted, "surge_allowed": allowed, "limiting": [LIMIT],
            "unknown": list(unknown)}


def test_a_clean_read_may_start_and_says_nothing():
    verdict = preflight.verdict(read())
    assert verdict.refusal is None and verdict.said == [] and verdict.said_after == []
    assert verdict.surge_cap is None and verdict.etcd is None


def test_no_quota_room_refuses_and_names_the_option_that_would_help():
    verdict = preflight.verdict(read(quota=quota("none")), max_unavailable=0)
    assert verdict.refusal == (
        "the cloud quota leaves no room for a new instance, and the upgrade needs 2 in flight: CPUS in europe-west1: "
        "limit 3, usage 3. rolling_upgrade_max_unavailable is 0: set it to 1 or more "
        "to replace workers delete-first (drain and delete a node, then create its heir), with that many fewer Ready "
        "nodes at a time. Nothing was changed; raise the quota or free instances, then run again")


def test_no_quota_room_with_a_control_plane_left_refuses_even_delete_first():
    order = [{"name": "cp1", "role": "control-plane"}, {"name": "w1", "role": "worker"}]
    verdict = preflight.verdict(read(quota=quota("none"), replacement_order=order), max_unavailable="1")
    assert verdict.refusal.startswith("the cloud quota leaves no room for a new instance")
    assert ("Control-plane nodes always surge (one new instance at a time), so rolling_upgrade_max_unavailable (1) "
            "cannot help until they are replaced. Nothing was changed") in verdict.refusal


def test_no_quota_room_with_delete_first_and_workers_only_goes_on_without_surge():
    verdict = preflight.verdict(read(quota=quota("none")), max_unavailable="25%")
    assert verdict.refusal is None and verdict.surge_cap == 0
    assert verdict.said == [
        "WARNING: the cloud quota leaves no room for a new instance (CPUS in europe-west1: limit 3, usage 3); "
        "rolling_upgrade_max_unavailable is 25%, so workers are replaced delete-first: each is drained and deleted "
        "before its heir is created, with at most that many fewer Ready nodes per scaling group than at the start"]


def test_a_lower_quota_lowers_the_surge_and_says_so_and_unread_quota_is_said_too():
    verdict = preflight.verdict(read(quota=quota("lower", wanted=4, allowed=2,
                                                 unknown=[{"description": "INSTANCES in us-east-1: AccessDenied"}])))
    assert verdict.refusal is None and verdict.surge_cap == 2
    assert verdict.said == [
        "WARNING: the cloud quota allows 2 replacement(s) in flight, not the 4 the surge wants: CPUS in europe-west1: "
        "limit 3, usage 3; the surge is lowered to 2",
        "WARNING: cloud quota could not be read, so the run relies on the cloud refusing instances: INSTANCES in "
        "us-east-1: AccessDenied"]


def test_nodes_outside_every_known_group_refuse_but_out_of_scope_ones_do_not():
    invalid = [{"name": "a", "reason": "no scaling group", "out_of_scope": False},
               {"name": "b", "reason": "left out by rolling_upgrade_scaling_groups", "out_of_scope": True},
               {"name": "c", "reason": "unknown provider ID", "out_of_scope": False}]
    verdict = preflight.verdict(read(nodes={"invalid": invalid}))
    assert verdict.refusal == "2 node(s) cannot be upgraded: a: no scaling group; c: unknown provider ID"
    assert preflight.verdict(read(nodes={"invalid": invalid[1:2]})).refusal is None


def test_not_ready_nodes_refuse_only_when_nothing_is_in_flight():
    assert preflight.verdict(read(not_ready=["w1", "w2"])).refusal == "nodes not Ready before the upgrade: w1, w2"
    assert preflight.verdict(read(not_ready=["w1"], progress={"in_flight": 1})).refusal is None


def test_the_first_failed_check_refuses_and_what_was_said_before_stays():
    verdict = preflight.verdict(read(quota=quota("lower"), not_ready=["w1"]))
    assert verdict.refusal == "nodes not Ready before the upgrade: w1"
    assert len(verdict.said) == 1 and verdict.said[0].startswith("WARNING: the cloud quota allows 1")


def test_etcd_is_read_only_when_a_control_plane_node_is_to_be_replaced_and_the_check_is_on():
    cp = {"replacement_order": [{"name": "cp1", "role": "control-plane"}],
          "control_plane_endpoints": ["10.0.0.1", "10.0.0.2", "10.0.0.3"]}
    assert preflight.verdict(read()).etcd is None
    assert preflight.verdict(read(**cp), etcd_preflight=False).etcd is None
    verdict = preflight.verdict(read(**cp))
    assert verdict.etcd == {"endpoints": ["10.0.0.1", "10.0.0.2", "10.0.0.3"], "expected_member_count": 3, "retries": 0}
    # Given endpoints win over the control-plane Nodes' addresses.
    assert preflight.verdict(read(**cp), etcd_endpoints=["https://e:2379"]).etcd["endpoints"] == ["https://e:2379"]


def test_etcd_count_leaves_out_removed_members_and_is_unsure_while_a_member_may_be_half_removed_or_joining():
    cp = {"replacement_order": [{"name": "cp1", "role": "control-plane"}],
          "control_plane_endpoints": ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]}
    removed = [{"name": "cp0", "role": "control-plane", "phase": "etcd-removed"},
               {"name": "w0", "role": "worker", "phase": "etcd-removed"}]
    verdict = preflight.verdict(read(donors=removed, progress={"in_flight": 1}, **cp))
    assert verdict.etcd["expected_member_count"] == 3 and verdict.etcd["retries"] == 24
    drained = [{"name": "cp0", "role": "control-plane", "phase": "drained"}]
    assert preflight.verdict(read(donors=drained, **cp)).etcd == {
        "endpoints": cp["control_plane_endpoints"], "expected_member_count": None, "retries": 24}
    joining = preflight.verdict(read(joining=["new-cp"], **cp)).etcd
    assert joining["expected_member_count"] is None and joining["retries"] == 24


def system_pod(name, node="w1", phase="Pending", why="container main ImagePullBackOff"):
    return {"namespace": "kube-system", "name": name, "node": node, "phase": phase, "why": why,
            "description": "kube-system/%s on %s (%s: %s)" % (name, node or "no node", phase, why)}


SYSTEM_PODS = [system_pod("coredns-1", phase="Running", why="container coredns CrashLoopBackOff"),
               system_pod("metrics-1", node=None, why="Unschedulable")]


def test_unready_system_pods_refuse_naming_each_pod_the_rule_the_option_and_what_to_do():
    verdict = preflight.verdict(read(unready_system_pods=SYSTEM_PODS))
    assert verdict.refusal == (
        "2 kube-system pod(s) not Ready: kube-system/coredns-1 on w1 (Running: container coredns CrashLoopBackOff); "
        "kube-system/metrics-1 on no node (Pending: Unschedulable). The upgrade does not start while a kube-system pod "
        "is not Ready (rolling_upgrade_allow_unready_system_pods is false): DNS, the network plugin, kube-proxy or the "
        "control plane may be short already, and every drain takes more away. Nothing was changed; make these pods "
        "Ready (or delete the ones no longer needed) and run again, or set rolling_upgrade_allow_unready_system_pods: "
        "true to upgrade anyway")
    assert verdict.said == [] and verdict.etcd is None


def test_the_option_lets_the_upgrade_go_on_with_a_warning_naming_the_pods():
    verdict = preflight.verdict(read(unready_system_pods=SYSTEM_PODS), allow_unready_system_pods=True)
    assert verdict.refusal is None
    assert verdict.said == [
        "WARNING: 2 kube-system pod(s) not Ready: kube-system/coredns-1 on w1 (Running: container coredns "
        "CrashLoopBackOff); kube-system/metrics-1 on no node (Pending: Unschedulable); "
        "rolling_upgrade_allow_unready_system_pods is true, so the upgrade goes on"]


def test_more_than_ten_unready_system_pods_are_named_up_to_ten_then_counted():
    pods = [system_pod("p%02d" % index) for index in range(13)]
    refusal = preflight.verdict(read(unready_system_pods=pods)).refusal
    assert refusal.startswith("13 kube-system pod(s) not Ready: kube-system/p00 on w1 ")
    assert "kube-system/p09 on w1 (Pending: container main ImagePullBackOff) and 3 more. The upgrade" in refusal
    assert "p10" not in refusal


def test_unready_system_pods_are_judged_after_the_nodes_and_only_when_nothing_is_in_flight():
    assert preflight.verdict(read(unready_system_pods=SYSTEM_PODS, not_ready=["w1"])).refusal == (
        "nodes not Ready before the upgrade: w1")
    assert preflight.verdict(read(unready_system_pods=SYSTEM_PODS, progress={"in_flight": 1})).refusal is None
    # A read without the pods (report_system_pods off) judges none.
    no_pods = read()
    del no_pods["unready_system_pods"]
    assert preflight.verdict(no_pods).refusal is None


def test_blocking_pdbs_are_said_after_the_etcd_read():
    pdbs = [{"namespace": "apps", "name": "web"}, {"namespace": "db", "name": "pg"}]
    verdict = preflight.verdict(read(blocking_pdbs=pdbs))
    assert verdict.refusal is None and verdict.said == []
    assert verdict.said_after == ["2 PodDisruptionBudget(s) allow no disruption now and will block the drain of nodes "
                                  "running their pods until they do: apps/web, db/pg"]


def test_etcd_refusal_names_every_problem():
    assert preflight.etcd_refusal({"healthy": True, "problems": []}) is None
    assert preflight.etcd_refusal({"healthy": False, "problems": ["member a is unreachable", "no leader"]}) == (
        "control-plane etcd is not healthy: member a is unreachable; no leader")


def test_check_mode_says_where_a_real_run_would_stop_for_system_pods_and_goes_on():
    unready = read(unready_system_pods=SYSTEM_PODS)
    verdict = preflight.verdict(unready, check_mode=True)
    assert verdict.refusal is None
    assert verdict.said == ["Check mode: a real run would stop here: %s" % preflight.system_pods_refusal(SYSTEM_PODS)]
    # The option still says it in a warning, in check mode as in a real run.
    allowed = preflight.verdict(unready, allow_unready_system_pods=True, check_mode=True)
    assert allowed.refusal is None and allowed.said[0].startswith("WARNING: ")


def test_max_unavailable_as_large_as_a_worker_group_is_warned_about_at_the_start():
    """Issue 28 item 7: max_unavailable larger than a group was accepted without a word."""
    groups = [{"id": "workers-a", "role": "worker", "nodes_serving": 2, "outdated": 2},
              {"id": "workers-b", "role": "worker", "nodes_serving": 5, "outdated": 1},
              {"id": "workers-done", "role": "worker", "nodes_serving": 1, "outdated": 0},
              {"id": "cp", "role": "control-plane", "nodes_serving": 1, "outdated": 1}]
    verdict = preflight.verdict(read(scaling_groups=groups), max_unavailable=3)
    assert verdict.refusal is None
    assert verdict.said == [
        "WARNING: rolling_upgrade_max_unavailable is 3, and scaling group workers-a has 2 worker node(s): every one of "
        "them may be drained and deleted before their heirs are Ready (only PodDisruptionBudgets hold a drain back), so "
        "the group may have no node serving for a while; set it below 2 to keep nodes serving"]
    assert [line.split(",")[1] for line in preflight.verdict(read(scaling_groups=groups), max_unavailable="100%").said] \
        == [" and scaling group workers-a has 2 worker node(s): every one of them may be drained and deleted before "
            "their heirs are Ready (only PodDisruptionBudgets hold a drain back)",
            " and scaling group workers-b has 5 worker node(s): every one of them may be drained and deleted before "
            "their heirs are Ready (only PodDisruptionBudgets hold a drain back)"]
    for smaller in (0, 1, "50%"):
        assert preflight.verdict(read(scaling_groups=groups), max_unavailable=smaller).said == [], smaller


def test_a_control_plane_to_replace_is_known_to_the_verdict():
    assert preflight.verdict(read()).control_plane_left is False
    assert preflight.verdict(read(replacement_order=[{"name": "cp1", "role": "control-plane"}]),
                             etcd_preflight=False).control_plane_left is True


def test_missing_etcd_files_refuse_naming_the_role_variables_and_what_to_do(tmp_path):
    """Issue 28 item 1: the etcd client files, needed by the first control-plane member removal, are checked at the
    start (a missing CA file killed the worker with no message, or was found after the control-plane heir was made)."""
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import etcd

    present = tmp_path / "client.crt"
    present.write_text("x")
    files = dict(ca_cert=str(tmp_path / "ca.crt"), client_cert=str(present), client_key="")
    problems = etcd.certificate_file_problems(files, preflight.ETCD_FILE_VARIABLES)
    assert problems == ["rolling_upgrade_etcd_ca_cert %s does not exist or is not a file" % files["ca_cert"],
                        "rolling_upgrade_etcd_client_key is not set"]
    assert etcd.certificate_file_problems(files)[0].startswith("ca_cert %s does not exist" % files["ca_cert"])
    refusal = preflight.etcd_files_refusal(problems[:1])
    assert refusal.startswith("a control-plane node is to be replaced, and this controller removes its etcd member with "
                              "the etcd client certificate files, but rolling_upgrade_etcd_ca_cert %s does not exist"
                              % files["ca_cert"])
    assert "Nothing was changed" in refusal and "rolling_upgrade_etcd_delegate_to" in refusal


def test_nodes_in_no_listed_group_name_where_the_groups_were_looked_for():
    """Issue 28 item 7: a wrong Azure subscription said "6 node(s) ... in none of the listed scaling groups" and never
    named the subscription."""
    invalid = [{"name": n, "reason": "its instance is in none of the listed scaling groups", "out_of_scope": False}
               for n in ("a", "b")]
    searched = "Azure subscription 0000-1111 (azure.subscription_id or AZURE_SUBSCRIPTION_ID)"
    refusal = preflight.verdict(read(nodes={"invalid": invalid}, searched=searched)).refusal
    assert refusal == ("2 node(s) cannot be upgraded: a: its instance is in none of the listed scaling groups; b: its "
                       "instance is in none of the listed scaling groups. The scaling groups were looked for in Azure "
                       "subscription 0000-1111 (azure.subscription_id or AZURE_SUBSCRIPTION_ID): when these nodes run in "
                       "another, set it to theirs; when their groups are there, check that the collection may read them")
    # Other reasons, or no word of where: as before.
    other = [{"name": "c", "reason": "unknown provider ID", "out_of_scope": False}]
    assert preflight.verdict(read(nodes={"invalid": other}, searched=searched)).refusal.endswith("c: unknown provider ID")
    assert preflight.verdict(read(nodes={"invalid": invalid})).refusal.endswith("listed scaling groups")
