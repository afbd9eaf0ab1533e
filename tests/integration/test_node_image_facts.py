"""node_image_facts (with node_pair, csp_scaling_group and csp_node) through ansible-playbook against the
sandbox's real kube-apiserver and the AWS emulator (boto3 over real HTTP to moto in server mode): one worker
replacement walked step by step, the plan checked at every step."""

import time
import uuid

import pytest

from tests.ansible_run import run_module

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]


def _wait(predicate, timeout, what, interval=0.5):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))
        time.sleep(interval)


def _ok(result):
    assert not result["failed"], result.get("msg", result)
    return result


def test_one_replacement_step_by_step_on_aws(sandbox, cloud_admin):
    admin = cloud_admin("aws")
    tag = uuid.uuid4().hex[:8]
    old, new = admin.create_image("old-" + tag), admin.create_image("new-" + tag)
    group = admin.create_group("w-" + tag, "worker", 2, old)
    kube = sandbox.kube()
    try:
        originals = _wait(lambda: [i for i, _state in admin.group_instances(group)] if len(admin.group_instances(group)) == 2
                          else None, 60, "two instances")
        sandbox.wait_nodes_ready(originals, timeout=180)
        for name in originals:
            kube.merge_patch("/api/v1/nodes/" + name, {"metadata": {"labels": {"team": "blue"}}})
        prefix = "t%s.kubenodes.test" % tag
        common = dict(sandbox.auth_args(), **admin.provider_options())
        # The simulated kubelet labels each node with its image; that label must stay the heir's own.
        common.update(image=new, annotation_prefix=prefix, scaling_groups=[group],
                      exclude_labels=["sandbox.kubenodes.io/image"])

        def facts():
            return _ok(run_module("node_image_facts", common))

        def pair(**extra):
            return _ok(run_module("node_pair", dict(common, **extra)))

        first = facts()
        assert sorted(first["nodes"]["outdated"]) == sorted(originals)
        assert first["plan"]["set_group_image"] == [{"group": group, "image": new}]
        assert first["plan"]["create"] == []
        assert first["plan"]["create_blocked"][0]["reason"] == "the scaling group does not use the image yet"
        assert first["progress"] == {"total": 2, "done": 0, "in_flight": 0, "remaining": 2, "percent": 0.0}
        assert first["done"] is False and first["changed"] is False
        assert {a["name"] for a in first["plan"]["annotate"]} == set(originals)

        _ok(run_module("csp_scaling_group", dict(admin.provider_options(), group=[group], image=new)))
        annotated = pair()
        assert annotated["changed"] and {a["name"] for a in annotated["annotated"]} == set(originals)
        assert pair()["changed"] is False

        second = facts()
        assert second["plan"]["create"] == [{"group": group, "count": 1, "role": "worker"}]
        assert second["plan"]["annotate"] == [] and second["plan"]["set_group_image"] == []

        created = _ok(run_module("csp_node", dict(admin.provider_options(), group=group, count=1, wait=True,
                                                  wait_timeout=120, wait_sleep=1)))
        (heir,) = created["node_names"]
        # Until its Node registers, the instance is joining and holds the budget.
        sandbox.wait_nodes_ready([heir], timeout=180)

        third = facts()
        assert third["nodes"]["new"] == [heir]
        (planned,) = third["plan"]["pairs"]
        assert planned["heir"] == heir and planned["donor"] in originals and planned["group"] == group
        assert third["plan"]["create"] == []        # the new node fills the surge budget of one
        donor = planned["donor"]

        paired = pair()
        assert [(p["heir"], p["donor"]) for p in paired["pairs"]] == [(heir, donor)]
        assert paired["label_copies"] == [{"heir": heir, "donor": donor, "labels": {"team": "blue"}, "taints": []}]
        assert kube.request("GET", "/api/v1/nodes/" + heir)["metadata"]["labels"]["team"] == "blue"

        fourth = facts()
        assert fourth["nodes"]["donor"] == [donor] and fourth["nodes"]["heir"] == [heir]
        (drain,) = fourth["plan"]["drain"]
        assert drain.pop("heir_ready_since").endswith("Z")  # when the heir turned Ready
        assert drain.pop("node_ip") and drain.pop("provider_id").endswith(donor)  # for the steps after the drain
        assert drain == {"name": donor, "reason": "donor", "heir": heir, "heir_ready": True, "control_plane": False,
                         "group": group}
        (row,) = fourth["donors"]
        # The heir's journey (issue 12: the report's timeline): its Node's registration and Ready turn, and the
        # cloud's creation time of its instance where the module has it (null otherwise).
        assert row.pop("heir_joined").endswith("Z") and row.pop("heir_ready_since").endswith("Z")
        created = row.pop("heir_created")
        assert created is None or created.endswith("Z")
        assert row == {"name": donor, "heir": heir, "heir_ready": True, "group": row["group"],
                       "role": "worker", "phase": "paired", "phase_since": row["phase_since"]}
        assert fourth["replacement_order"][0]["name"] == donor and fourth["replacement_order"][0]["in_flight"]
        assert fourth["progress"]["in_flight"] == 1

        # Steps after the drain need it done (the node cordoned) and recorded (issue 13: a recorded phase alone
        # is no proof). The cordon is cross-checked too: the pair is mutual and the heir Ready.
        _ok(run_module("node_drain", dict(sandbox.auth_args(), name=donor, state="cordoned", annotation_prefix=prefix)))
        pair(phases=[{"name": donor, "phase": "drained"}])
        fifth = facts()
        assert fifth["plan"]["drain"] == []
        (doomed,) = fifth["plan"]["delete_nodes"]
        assert doomed["name"] == donor and doomed["control_plane"] is False

        # The donor is cordoned and empty, so the cluster check lets its instance go.
        _ok(run_module("csp_node", dict(admin.provider_options(), state="absent", provider_id=[doomed["provider_id"]],
                                        **sandbox.auth_args())))
        kube.request("DELETE", "/api/v1/nodes/" + donor, ok=(200, 202, 404))

        promoted = pair()
        assert promoted["repairs"] == [{"name": heir, "action": "promote", "donor": donor}]
        last = facts()
        assert last["progress"]["done"] == 1 and last["progress"]["remaining"] == 1
        assert heir in last["nodes"]["up_to_date"]
        assert last["plan"]["create"] == [{"group": group, "count": 1, "role": "worker"}]
        assert last["done"] is False
    finally:
        admin.autoscaling.update_auto_scaling_group(AutoScalingGroupName=group, MinSize=0, DesiredCapacity=0)
        for instance_id, _state in admin.group_instances(group):
            kube.request("DELETE", "/api/v1/nodes/" + instance_id, ok=(200, 202, 404))


def test_facts_fails_clearly_and_reads_nothing_more_on_bad_input(sandbox, cloud_admin):
    admin = cloud_admin("aws")
    base = dict(sandbox.auth_args(), **admin.provider_options())
    empty = run_module("node_image_facts", dict(base, image=" "))
    assert empty["failed"] and "image" in empty["msg"], empty
    malformed = run_module("node_image_facts", dict(base, image="not-an-ami"))
    assert malformed["failed"] and "not-an-ami" in malformed["msg"], malformed
    bad_surge = run_module("node_image_facts", dict(base, image="ami-12345678", max_surge="lots"))
    assert bad_surge["failed"] and "max_surge" in bad_surge["msg"], bad_surge
    unknown = run_module("node_image_facts", dict(base, image=admin.create_image("img-" + uuid.uuid4().hex[:6]), scaling_groups=["nope-group"]))
    assert unknown["failed"] and "nope-group" in unknown["msg"], unknown
