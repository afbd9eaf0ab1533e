"""The GCE provider through Ansible: csp_scaling_group and csp_node run as tasks by ansible-playbook
against the GCE emulator, so the gcp option dict (env fallbacks, no_log, choices) is parsed the way
users' playbooks and AWX credentials reach it. Regional groups, image families and bad input included."""

import json
import time
import uuid

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import gce
from sandbox.clouds.gce import DEFAULT_PROJECT, GceEmulator
from tests.ansible_run import run_module

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def emulator():
    emu = GceEmulator().start()
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture
def admin(emulator):
    adm = emulator.admin()
    adm.set_faults()
    yield adm
    adm.set_faults()


def _unique(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:6])


def _provider(admin):
    return gce.GceProvider(admin.provider_options()["gcp"], retry_base_delay=0.02)


def test_scaling_group_image_check_mode_diff_then_set_then_idempotent(admin):
    old = admin.create_image(_unique("old"))
    family = _unique("fam")
    new = admin.create_image(_unique("new"), family=family)
    name = _unique("rcp")
    group = admin.create_group(name, "control-plane", 1, old, region="us-central1")
    args = dict(admin.provider_options(), group=[group],
                image="projects/%s/global/images/family/%s" % (DEFAULT_PROJECT, family))

    checked = run_module("csp_scaling_group", args, check=True, diff=True)
    assert not checked["failed"], checked.get("msg")
    assert checked["changed"] is True and checked["changed_groups"] == [group] and checked["image"] == new
    assert checked["diff"] == {"before": {group: old}, "after": {group: new}}
    assert admin.state()["groups"][group]["template"] == name + "-tmpl"        # nothing changed

    applied = run_module("csp_scaling_group", args)
    assert not applied["failed"], applied.get("msg")
    assert applied["changed"] is True and applied["groups"][0]["image"] == new
    assert applied["groups"][0]["role"] == "control-plane"
    assert admin.state()["groups"][group]["template"] == name + "-tmpl-1"
    assert _provider(admin).group_image(group) == new

    again = run_module("csp_scaling_group", args)
    assert not again["failed"], again.get("msg")
    assert again["changed"] is False and again["changed_groups"] == []
    assert admin.state()["groups"][group]["template"] == name + "-tmpl-1"


@pytest.mark.parametrize("image, expected", [
    ("projects/%s/global/images/no-such-image" % DEFAULT_PROJECT, "does not exist"),
    ("ubuntu-22.04", "expected projects/<project>/global/images/<name>"),
])
def test_scaling_group_bad_image_fails_clearly_and_changes_nothing(admin, image, expected):
    base_image = admin.create_image(_unique("base"))
    name = _unique("wk")
    group = admin.create_group(name, "worker", 0, base_image)
    result = run_module("csp_scaling_group", dict(admin.provider_options(), group=[group], image=image))
    assert result["failed"] and expected in result["msg"]
    state = admin.state()
    assert state["groups"][group]["template"] == name + "-tmpl"
    assert name + "-tmpl-1" not in state["templates"]


def test_csp_node_on_a_regional_group_create_wait_then_delete_by_node_name(admin):
    image = admin.create_image(_unique("img"))
    group = admin.create_group(_unique("reg"), "worker", 1, image, region="us-central1")
    created = run_module("csp_node", dict(admin.provider_options(), state="present", group=group, count=1,
                                          wait=True, wait_timeout=60, wait_sleep=1))
    assert not created["failed"], created.get("msg")
    [provider_id] = created["provider_ids"]
    [node_name] = created["node_names"]
    project, zone, name = gce.parse_provider_id(provider_id)
    assert project == DEFAULT_PROJECT and zone.startswith("us-central1-") and name == node_name
    assert created["instances"][0]["state"] == "running"

    deleted = run_module("csp_node", dict(admin.provider_options(), state="absent", cluster_check=False, group=group,
                                          node_name=[node_name]))
    assert not deleted["failed"], deleted.get("msg")
    assert deleted["changed"] is True
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and provider_id in {i.provider_id for i in _provider(admin).list_instances(group)}:
        time.sleep(0.2)
    assert provider_id not in {i.provider_id for i in _provider(admin).list_instances(group)}
    again = run_module("csp_node", dict(admin.provider_options(), state="absent", cluster_check=False, group=group,
                                        node_name=[node_name]))
    assert not again["failed"], again.get("msg")
    assert again["changed"] is False


def test_csp_node_absent_names_the_group_of_an_instance_the_discovery_does_not_find(admin):
    """The discovery lists gcp.project's groups only. An instance of another project's group is not absent: its
    created-by metadata names its group, the task fails naming both, and nothing is deleted."""
    elsewhere = type(admin)(dict(admin.info, project=_unique("other")))
    image = elsewhere.create_image(_unique("img"))
    home = elsewhere.create_group(_unique("home"), "worker", 1, image, zone="us-central1-a")
    near = admin.create_group(_unique("near"), "worker", 0, admin.create_image(_unique("img")), zone="us-central1-a")
    [instance] = _provider(elsewhere).list_instances(home)
    for scope, searched in ((dict(group=near), "scaling group %s" % near), ({}, "the scaling groups searched (")):
        result = run_module("csp_node", dict(admin.provider_options(), state="absent", cluster_check=False, provider_id=[instance.provider_id],
                                             **scope))
        assert result["failed"] and result["reason"] == "other_group", result
        assert "%s is not in %s" % (instance.provider_id, searched) in result["msg"], result["msg"]
        assert "but in %s" % home in result["msg"] and "nothing was deleted" in result["msg"], result["msg"]
        assert [e["group"] for e in result["other_group"]] == [home] and result["deleted"] == []
    assert [i.provider_id for i in _provider(elsewhere).list_instances(home)] == [instance.provider_id]
    assert elsewhere.state()["groups"][home]["target_size"] == 1


def test_csp_node_quota_refusal_is_reported(admin):
    image = admin.create_image(_unique("img"))
    group = admin.create_group(_unique("quota"), "worker", 0, image)
    admin.set_faults(quota=0)
    result = run_module("csp_node", dict(admin.provider_options(), state="present", group=group, count=1))
    assert result["quota_exceeded"] is True and "Quota 'INSTANCES' exceeded" in result["quota_message"]
    assert admin.state()["groups"][group]["target_size"] == 0


def test_env_credentials_work_and_secrets_never_show(admin):
    """AWX injects GCP_* variables; the gcp dict can stay empty. A token never appears in the result."""
    image = admin.create_image(_unique("img"))
    group = admin.create_group(_unique("env"), "worker", 0, image)
    secret = "ya29.SECRET-%s" % uuid.uuid4().hex
    env = {"GCP_AUTH_KIND": "accesstoken", "GCP_ACCESS_TOKEN": secret, "GCP_PROJECT": DEFAULT_PROJECT,
           "GCP_COMPUTE_ENDPOINT": admin.endpoint}
    result = run_module("csp_scaling_group_info", dict(provider="gcp", group=[group]), env=env)
    assert not result["failed"], result.get("msg")
    assert [g["id"] for g in result["groups"]] == [group] and result["groups"][0]["image"] == image
    assert secret not in json.dumps(result)
    # Given as an option, with an auth_kind it does not belong to: a clear error, still masked.
    bad = run_module("csp_scaling_group_info", dict(provider="gcp", group=[group],
                                                    gcp=dict(auth_kind="anonymous", access_token=secret,
                                                             project=DEFAULT_PROJECT, endpoint=admin.endpoint)))
    assert bad["failed"] and "only used with auth_kind=accesstoken" in bad["msg"]
    assert secret not in json.dumps(bad)


def test_bad_auth_kind_is_refused_by_the_argument_spec(admin):
    result = run_module("csp_scaling_group_info", dict(provider="gcp",
                                                       gcp=dict(auth_kind="password", endpoint=admin.endpoint)))
    assert result["failed"] and "auth_kind" in result["msg"] and "anonymous" in result["msg"]
