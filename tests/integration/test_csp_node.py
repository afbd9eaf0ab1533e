"""csp_node through Ansible against every cloud emulator in this checkout: create (with wait), delete by
providerID and by node name (idempotent), info, check mode, quota refusals, never-booting instances
and bad input."""

import pytest

from tests.ansible_run import run_module
from tests.integration.csp_clouds import cloud_fixture, provider_of

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

cloud = cloud_fixture()


def _ids(cloud, group):
    return sorted(i.provider_id for i in provider_of(cloud).list_instances(group))


def test_info_reports_the_group(cloud):
    group = cloud.group(size=2)
    result = run_module("csp_node_info", dict(cloud.options, group=group))
    assert not result["failed"], result.get("msg")
    assert result["changed"] is False
    assert [g["id"] for g in result["groups"]] == [group]
    assert result["groups"][0]["image"] == cloud.image("base")
    assert sorted(result["provider_ids"]) == _ids(cloud, group) and len(result["instances"]) == 2
    assert {i["group_id"] for i in result["instances"]} == {group}
    assert all(i["state"] in ("creating", "running") for i in result["instances"])


def test_create_in_check_mode_changes_nothing(cloud):
    group = cloud.group(size=1)
    before = _ids(cloud, group)
    result = run_module("csp_node", dict(cloud.options, state="present", group=group, count=2), check=True, diff=True)
    assert not result["failed"], result.get("msg")
    assert result["changed"] is True and result["instances"] == []
    assert _ids(cloud, group) == before
    # --diff: the group's instances, and one placeholder per instance it would create (the cloud names it then).
    assert result["diff"] == {"before": {"group": group, "instances": before},
                              "after": {"group": group, "instances": before + ["(new instance 1 of 2)",
                                                                               "(new instance 2 of 2)"]}}, result


def test_create_waits_until_running_then_delete_is_idempotent(cloud):
    group = cloud.group(size=1)
    before = _ids(cloud, group)
    created = run_module("csp_node", dict(cloud.options, state="present", group=group, count=2, wait=True,
                                          wait_timeout=120, wait_sleep=1), diff=True)
    assert not created["failed"], created.get("msg")
    assert created["diff"] == {"before": {"group": group, "instances": before},
                               "after": {"group": group, "instances": before + created["provider_ids"]}}, created
    assert created["changed"] is True and len(created["provider_ids"]) == 2
    assert [i["state"] for i in created["instances"]] == ["running", "running"]
    assert created["quota_exceeded"] is False
    after = _ids(cloud, group)
    assert sorted(set(after) - set(before)) == sorted(created["provider_ids"])
    by_id = {i.provider_id: i for i in provider_of(cloud).list_instances(group)}
    for provider_id, node_name in zip(created["provider_ids"], created["node_names"]):
        assert by_id[provider_id].node_name == node_name

    # by providerID, in check mode first
    victim = created["provider_ids"][0]
    checked = run_module("csp_node", dict(cloud.options, state="absent", cluster_check=False, provider_id=[victim], group=group), check=True,
                         diff=True)
    assert not checked["failed"], checked.get("msg")
    assert checked["changed"] is True and checked["deleted"] == [victim]
    assert checked["diff"] == {"before": {"instances": [victim]}, "after": {"instances": []}}, checked
    assert victim in _ids(cloud, group)
    gone = run_module("csp_node", dict(cloud.options, state="absent", cluster_check=False, provider_id=[victim], wait=True,
                                       wait_timeout=120, wait_sleep=1))
    assert not gone["failed"], gone.get("msg")
    assert gone["changed"] is True and gone["deleted"] == [victim]
    assert victim not in _ids(cloud, group)
    again = run_module("csp_node", dict(cloud.options, state="absent", cluster_check=False, provider_id=[victim]), diff=True)
    assert not again["failed"], again.get("msg")
    assert again["changed"] is False and again["already_absent"] == [victim] and "diff" not in again

    # by node name
    name = created["node_names"][1]
    by_name = run_module("csp_node", dict(cloud.options, state="absent", cluster_check=False, group=group, node_name=[name]))
    assert not by_name["failed"], by_name.get("msg")
    assert by_name["changed"] is True and by_name["deleted"] == [created["provider_ids"][1]]
    # Asked again while the cloud still lists it as deleting: found, not deleted twice (the cloud may take a while).
    while_deleting = run_module("csp_node", dict(cloud.options, state="absent", cluster_check=False, group=group, node_name=[name],
                                                 wait=True, wait_timeout=120, wait_sleep=1))
    assert not while_deleting["failed"], while_deleting.get("msg")
    assert while_deleting["changed"] is False and while_deleting["deleted"] == []
    assert name not in [i.node_name for i in provider_of(cloud).list_instances(group)]
    again = run_module("csp_node", dict(cloud.options, state="absent", cluster_check=False, group=group, node_name=[name]))
    assert again["changed"] is False and again["already_absent"] == [name]


def test_quota_refusal_is_reported_not_failed(cloud):
    group = cloud.group(size=1)
    before = _ids(cloud, group)
    cloud.admin.set_faults(quota=0)
    try:
        result = run_module("csp_node", dict(cloud.options, state="present", group=group, count=1))
    finally:
        cloud.admin.set_faults()
    assert not result["failed"], result.get("msg")
    assert result["changed"] is False and result["quota_exceeded"] is True
    assert result["quota_message"] and result["provider_ids"] == []
    assert any("quota" in w.lower() or "limit" in w.lower() for w in result.get("warnings", []))
    assert _ids(cloud, group) == before


def test_wait_fails_when_an_instance_never_boots(cloud):
    group = cloud.group(size=1)
    cloud.admin.set_faults(never_boot=cloud.never_boot_marks(group))
    try:
        result = run_module("csp_node", dict(cloud.options, state="present", group=group, count=1, wait=True,
                                             wait_timeout=6, wait_sleep=1))
    finally:
        cloud.admin.set_faults()
    assert result["failed"] is True
    assert result["reason"] == "timeout" and "not running yet" in result["msg"]


def test_bad_input_fails_clearly_and_changes_nothing(cloud):
    group = cloud.group(size=1)
    before = _ids(cloud, group)
    missing_group = run_module("csp_node", dict(cloud.options, state="present", count=1))
    assert missing_group["failed"] and "group" in missing_group["msg"]
    bad_count = run_module("csp_node", dict(cloud.options, state="present", group=group, count=0))
    assert bad_count["failed"] and "count" in bad_count["msg"]
    no_target = run_module("csp_node", dict(cloud.options, state="absent", cluster_check=False, group=group))
    assert no_target["failed"] and "provider_id or node_name" in no_target["msg"]
    name_without_group = run_module("csp_node", dict(cloud.options, state="absent", cluster_check=False, node_name=["x"]))
    assert name_without_group["failed"] and "needs group" in name_without_group["msg"]
    # one good providerID and one malformed one: nothing is deleted
    mixed = run_module("csp_node", dict(cloud.options, state="absent", cluster_check=False, group=group,
                                        provider_id=[before[0], "not-a-provider-id"]))
    assert mixed["failed"] and "not-a-provider-id" in mixed["msg"]
    # Issue 28: the cluster check cannot read the cluster, so nothing is deleted and the option is named.
    blind = run_module("csp_node", dict(cloud.options, state="absent", group=group, provider_id=[before[0]],
                                        kubeconfig="/nonexistent/kubeconfig"))
    assert blind["failed"] and not blind.get("changed") and "cluster_check" in blind["msg"], blind
    assert "/nonexistent/kubeconfig" in blind["msg"], blind["msg"]
    assert _ids(cloud, group) == before
