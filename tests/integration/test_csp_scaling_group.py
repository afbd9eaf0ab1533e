"""csp_scaling_group through Ansible against every cloud emulator in this checkout: set a group's image
(check mode and diff first, then for real, then idempotent), info, and bad images or groups that change
nothing."""

import pytest

from tests.ansible_run import run_module
from tests.integration.csp_clouds import cloud_fixture, provider_of

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

cloud = cloud_fixture()


def test_set_image_check_diff_apply_idempotent(cloud):
    group = cloud.group(size=1)
    other = cloud.group(size=1)
    old, new = cloud.image("base"), cloud.image("next")
    args = dict(cloud.options, group=[group], image=new)

    checked = run_module("csp_scaling_group", args, check=True, diff=True)
    assert not checked["failed"], checked.get("msg")
    assert checked["changed"] is True and checked["changed_groups"] == [group]
    assert checked["diff"] == {"before": {group: old}, "after": {group: new}}
    assert provider_of(cloud).group_image(group) == old

    applied = run_module("csp_scaling_group", args, diff=True)
    assert not applied["failed"], applied.get("msg")
    assert applied["changed"] is True and applied["groups"][0]["image"] == new
    assert provider_of(cloud).group_image(group) == new
    assert provider_of(cloud).group_image(other) == old          # only the named group

    again = run_module("csp_scaling_group", args, diff=True)
    assert not again["failed"], again.get("msg")
    assert again["changed"] is False and again["changed_groups"] == []
    assert again["diff"]["before"] == again["diff"]["after"] == {group: new}

    # existing instances keep their image; new ones get the new one
    before = {i.provider_id for i in provider_of(cloud).list_instances(group)}
    created = run_module("csp_node", dict(cloud.options, state="present", group=group, count=1, wait=True,
                                          wait_timeout=120, wait_sleep=1))
    assert not created["failed"], created.get("msg")
    images = {i.provider_id: i.image for i in provider_of(cloud).list_instances(group)}
    assert {images[p] for p in before} == {old}
    assert images[created["provider_ids"][0]] == new


def test_info_reports_groups_and_images(cloud):
    group = cloud.group(size=1, role="control-plane")
    result = run_module("csp_scaling_group_info", dict(cloud.options, group=[group]))
    assert not result["failed"], result.get("msg")
    assert result["changed"] is False
    assert [(g["id"], g["image"]) for g in result["groups"]] == [(group, cloud.image("base"))]
    everything = run_module("csp_scaling_group_info", dict(cloud.options))
    assert group in [g["id"] for g in everything["groups"]]


def test_bad_image_or_group_changes_nothing(cloud):
    group = cloud.group(size=1)
    old = cloud.image("base")
    malformed = run_module("csp_scaling_group", dict(cloud.options, group=[group], image="no such image !"))
    assert malformed["failed"] and "no such image !" in malformed["msg"]
    missing = cloud.image("next")[:-3] + "000"      # well-formed, but no such image
    absent = run_module("csp_scaling_group", dict(cloud.options, group=[group], image=missing))
    assert absent["failed"] and absent["msg"]
    unknown_group = group[:-4] + ("0000" if not group.endswith("0000") else "1111")
    mixed = run_module("csp_scaling_group", dict(cloud.options, group=[group, unknown_group], image=cloud.image("next")))
    assert mixed["failed"]
    assert provider_of(cloud).group_image(group) == old
    no_image = run_module("csp_scaling_group", dict(cloud.options, group=[group]))
    assert no_image["failed"] and "image" in no_image["msg"]
