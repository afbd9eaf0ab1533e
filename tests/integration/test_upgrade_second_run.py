"""Issue 25 ("with max_unavailable, a run can end with a group short"), on the sandbox: a second upgrade of a cluster
this collection upgraded before. Every worker of the first upgrade's heirs still carries the trail of its own
replacement (phase replaced, phase-history heir then replaced). The second upgrade, with max_unavailable 50% on a
group of 2, removes one of them delete-first and must replace every outdated node, ending with the group whole on
the new image. (Before the fix the delete-first mark was written on top of the old trail - heir, replaced, obsolete:
out of order - and the node was left alone on the old image; before issue 25 the run even said "2/2 nodes on the
image ... done".) Image A to B, then B to C with max_unavailable 50%, on GCP: nodes, instances per group and etcd
members are compared before and after, and the report's counts are checked (assert_upgraded).

GCP alone (CI time, ci23): the trail and the delete-first mark written over it are node annotations, the core's; the
cloud part of delete-first (a deletion that lowers the group's size, then a create) is each provider's own, and
test_upgrade_unavailable.py runs it on GCP and on AWS."""

import json
import pathlib
import time

import pytest

import upgrade_helpers as uh

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 420
JOURNAL = "/api/v1/namespaces/kube-system/configmaps/kubenodes-image-upgrade-journal"


def trails(handle, names):
    """{node: (phase, phase-history)} of `names`."""
    found = {}
    for node in uh.nodes(handle):
        if node["metadata"]["name"] in names:
            ann = node["metadata"].get("annotations") or {}
            found[node["metadata"]["name"]] = (ann.get(uh.PREFIX + "/phase"), ann.get(uh.PREFIX + "/phase-history"))
    return found


@pytest.mark.timeout(900)
@pytest.mark.parametrize("cloud", ["gcp"])   # why GCP alone: the module docstring
def test_a_second_upgrade_with_max_unavailable_50_percent_replaces_the_heirs_of_the_first(upgrade_cluster, cloud, tmp_path):
    began = time.monotonic()
    handle, values, start = upgrade_cluster(cloud, control_planes=1, workers=2, groups=1)
    upgraded = uh.limit_to_groups(values, start, ["workers-0"])
    [label] = upgraded
    members = uh.etcd_member_names(handle)

    # Image A to B, as any first upgrade.
    rc, output = uh.run_upgrade(values, tmp_path / "first.log", timeout=RUN_TIMEOUT)
    assert rc == 0, output[-6000:]
    uh.assert_upgraded(handle, values, start, groups=upgraded)
    print("first upgrade done at %.0f s" % (time.monotonic() - began))

    # What the first upgrade leaves on its heirs: the trail of their replacement (what made the second one fail).
    middle = uh.snapshot(handle)
    heirs = middle["groups"][label]
    assert len(heirs) == 2, middle["groups"]
    left = trails(handle, heirs)
    assert all(phase == "replaced" and history.startswith("heir@") and ",replaced@" in history
               for phase, history in left.values()), left
    per_group = uh.instances_per_group(handle)

    # Image B to C with max_unavailable 50% (one worker of the 2 may go before its heir exists).
    image_c = handle.cloud(cloud).create_image("image-c")
    # A run that leaves a node alone would go on until its timeout: 300 s is many times what this one needs.
    second = dict(values, rolling_upgrade_image=image_c, rolling_upgrade_max_unavailable="50%", rolling_upgrade_timeout=300,
                  rolling_upgrade_report_dir=str(pathlib.Path(handle.state_dir) / "report-c"))
    rc, output, watcher = uh.run_watched(handle, second, tmp_path / "second.log", timeout=RUN_TIMEOUT, etcd=True)
    print("second upgrade done at %.0f s" % (time.monotonic() - began))
    assert rc == 0, output[-6000:]
    assert "out of order" not in output, output[-6000:]
    watcher.check(middle, max_surge=1, max_unavailable=1)
    # One worker really went delete-first (before its refill existed), as the journal records.
    removed_first = json.loads(handle.kube().request("GET", JOURNAL)["data"]["journal.json"]).get("removed_first") or {}
    assert len(set(removed_first) & set(heirs)) == 1, removed_first
    # Every heir of the first upgrade replaced, the group whole on image C, the report counting both (assert_upgraded);
    # the same number of instances per group and the same etcd members as before the second upgrade.
    uh.assert_upgraded(handle, second, middle, groups=upgraded)
    assert uh.instances_per_group(handle) == per_group
    assert uh.etcd_member_names(handle) == members
