"""Issue 13, item 5, on the sandbox: the upgrade removes the surplus instances it provably created and nothing
else. One worker group on the GCP emulator holds its original node and a foreign node (created by someone else,
not recorded); then an instance is created and recorded in the run journal as this upgrade's own, as the role
records every instance it creates, and it joins with no donor for it (its pairing lost, as when a killed run
created it twice). node_image_facts (the planner as a module, for playbooks that compose the steps) plans its
removal alone, and a run of the role removes it, so the group is back at the count it had at the start, with the foreign node and
the original one as they were."""

import json
import time

import pytest

import upgrade_helpers as uh
from tests.ansible_run import run_module, run_playbook

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JOURNAL = "/api/v1/namespaces/kube-system/configmaps/kubenodes-image-upgrade-journal"


def _ok(result):
    assert not result["failed"], result.get("msg", result)
    return result


def _node_view(node):
    """What must not change on a node that is left alone (cached scaling-group and image annotations may be added)."""
    meta, spec = node["metadata"], node["spec"]
    kept = {k: v for k, v in (meta.get("annotations") or {}).items()
            if not k.endswith(("/scaling-group-id", "/node-image"))}
    return dict(labels=meta.get("labels"), annotations=kept, taints=spec.get("taints"),
                unschedulable=bool(spec.get("unschedulable")), provider_id=spec.get("providerID"))


def _world(handle, group_id):
    nodes = {n["metadata"]["name"]: _node_view(n) for n in uh.nodes(handle)}
    instances = sorted(i["provider_id"] for i in uh.live_instances(handle) if i["group_id"] == group_id)
    return nodes, instances


def _play(*tasks):
    """Run `tasks` (name, module, args) in one ansible-playbook; return each task's result."""
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False,
             "tasks": [{"name": name, "kubenodes.image_upgrade." + module: args, "register": name}
                       for name, module, args in tasks]}]
    rc, output = run_playbook(play)
    results = [t["hosts"]["localhost"] for t in output["plays"][0]["tasks"]]
    assert rc == 0 and len(results) == len(tasks), results
    return results


@pytest.mark.timeout(900)
def test_recorded_surplus_is_removed_and_a_foreign_instance_stays(upgrade_cluster, tmp_path):
    began = time.monotonic()
    handle, values, start = upgrade_cluster("gcp", control_planes=1, workers=1, groups=1)
    print("sandbox ready in %.0f s" % (time.monotonic() - began))
    uh.limit_to_groups(values, start, ["workers-0"])
    [group_id] = values["rolling_upgrade_scaling_groups"]
    values["rolling_upgrade_preflight"] = False      # covered by the other end-to-end tests; keeps this one lean
    cloud = dict(provider="gcp", gcp=values["rolling_upgrade_gcp"])
    kube_args = values["rolling_upgrade_kube"]
    create = dict(cloud, state="present", group=group_id, count=1, wait=True, wait_timeout=120, wait_sleep=1)
    # The cluster already runs the target, the group's own image A (nothing is outdated); a foreign node joins.
    info, foreign = _play(("info", "csp_scaling_group_info", dict(cloud, group=[group_id])),
                          ("foreign", "csp_node", create))
    image = info["groups"][0]["image"]
    values["rolling_upgrade_image"] = image
    handle.wait_nodes_ready(foreign["node_names"], timeout=120)
    start_nodes, start_instances = _world(handle, group_id)
    assert len(start_instances) == 2, start_instances          # the original worker and the foreign node

    # An instance created and recorded as the role does it (with its pass's facts, read before the creation).
    facts_args = dict(kube_args, **cloud, image=image, scaling_groups=[group_id], journal=dict(namespace="kube-system"))
    _facts, created, _journal = _play(
        ("facts", "node_image_facts", facts_args),
        ("created", "csp_node", create),
        ("journal", "upgrade_journal", dict(kube_args, image=image, target_image=image, created=dict(
            instances="{{ created.instances }}", scaling_groups="{{ facts.scaling_groups }}"))))
    [mine], [mine_id] = created["node_names"], created["provider_ids"]
    handle.wait_nodes_ready([mine], timeout=120)
    before_nodes, before_instances = _world(handle, group_id)
    assert len(before_instances) == 3 and mine in before_nodes
    # What the modules plan (node_image_facts and node_pair read the journal the same way): the recorded node is
    # surplus, the foreign one is not even considered.
    plan = _ok(run_module("node_image_facts", facts_args))["plan"]
    assert plan["obsolete"] == [mine], plan
    assert [(s["name"], s["action"], s["start_count"], s["nodes"]) for s in plan["surplus"]] == [(mine, "obsolete", 2, 3)]
    # The role's run, which reads the journal once when it starts, removes it.
    began = time.monotonic()
    rc, output = uh.run_upgrade(values, tmp_path / "upgrade.log")
    assert rc == 0, output[-6000:]
    after_nodes, after_instances = _world(handle, group_id)
    # Capacity is back at the start: the recorded instance and its Node are gone, nothing else changed.
    assert after_instances == start_instances, (after_instances, start_instances)
    assert mine not in after_nodes
    assert after_nodes == start_nodes
    print("removed %s in %.0f s" % (mine, time.monotonic() - began))
    # The journal keeps the record (a resumed run re-reads it) and the start count.
    journal = json.loads(handle.kube().request("GET", JOURNAL)["data"]["journal.json"])
    assert list(journal["instances_created"]) == [mine_id]
    assert journal["start_counts"][group_id] == 2
