"""End to end: the rolling_upgrade role's preflight reads the cloud quota through each emulator (whose quota
knob caps instances and is reported through the API the provider reads) and

(a) with room for one new instance where max_surge 2 wants two, warns naming the limit, lowers the surge,
    and finishes with never more than one replacement in flight;
(b) with room for none, fails in the preflight naming the limit, and changes nothing.

Each test upgrades one worker group of two workers (the control-plane group is left out) to keep CI short.
"""

import importlib.util

import pytest

import upgrade_helpers as uh
from sandbox import cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 600
# The limit each emulator reports for its quota knob, as the preflight names it.
LIMIT_NAMES = {"gcp": "INSTANCES", "azure": "virtualMachines", "aws": "Running On-Demand Standard instances"}


def _need(cloud):
    if importlib.util.find_spec(cli.CLOUD_MODULES[cloud]) is None:
        pytest.skip("the %s emulator is not in this checkout" % cloud)


@pytest.fixture
def cluster(fresh_sandbox):
    """cluster(cloud) -> (handle, role variables, start snapshot, labels of the upgraded group): one control
    plane and one worker group of two, only the worker group in scope, max_surge 2."""
    def make(cloud):
        _need(cloud)
        handle = fresh_sandbox(clouds=[cloud])
        values, start = uh.prepare(handle, cloud, control_planes=1, workers=2, groups=1,
                                   rolling_upgrade_max_surge=2)
        upgraded = uh.limit_to_groups(values, start, ["workers-0"])
        return handle, values, start, upgraded
    return make


def _group_images(values, cloud, start):
    """The image each scaling group gives new instances, read through the collection's provider."""
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import factory

    spec = factory.PROVIDERS[cloud].ARG_SPEC
    options = {key: value.get("default") for key, value in spec.items()}
    options.update(values["rolling_upgrade_%s" % cloud])
    provider = factory.build_provider({"provider": cloud, cloud: options})
    return {gid: provider.group_image(gid) for gid in start["group_ids"].values()}


def _world(handle, values, cloud, start):
    """What a run could change: nodes (annotations, labels, cordon), instances, group images, the Lease."""
    kube = handle.kube()
    lease = kube.request("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kubenodes-image-upgrade",
                         ok=(200, 404))
    return {
        "nodes": {n["metadata"]["name"]: (n["metadata"].get("annotations"), n["metadata"]["labels"],
                                          bool(n["spec"].get("unschedulable"))) for n in uh.nodes(handle)},
        "instances": sorted((i["provider_id"], i["state"]) for i in handle.nodesim.instances()),
        "group_images": _group_images(values, cloud, start),
        "lease": (lease.get("spec") or {}).get("holderIdentity") if lease.get("kind") == "Lease" else None,
    }


@pytest.mark.timeout(900)
@pytest.mark.parametrize("cloud", ["gcp", "aws"])
def test_quota_for_one_new_instance_lowers_the_surge_with_a_warning(cluster, cloud, tmp_path):
    handle, values, start, upgraded = cluster(cloud)
    live = len(uh.live_instances(handle))
    handle.cloud(cloud).set_faults(quota=live + 1)
    rc, output, watcher = uh.run_watched(handle, values, tmp_path / "upgrade.log", timeout=RUN_TIMEOUT)
    assert rc == 0, output[-6000:]
    warning = next((line for line in output.splitlines() if "WARNING: the cloud quota allows 1 replacement" in line),
                   None)
    assert warning is not None, output[-6000:]
    assert LIMIT_NAMES[cloud] in output and "the 2 the surge" in output, output[-6000:]
    # The limit is named with its numbers: for the vCPU quota in vCPUs (2 per t3.micro), else in instances.
    per_instance = 2 if cloud == "aws" else 1
    assert "limit %d, usage %d" % ((live + 1) * per_instance, live * per_instance) in output, output[-6000:]
    assert "the cloud refused new instances" not in output, "the quota was hit instead of respected"
    watcher.check(start, max_surge=1)
    uh.assert_upgraded(handle, values, start, groups=upgraded)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("cloud", ["gcp", "azure", "aws"])
def test_quota_for_no_new_instance_fails_the_preflight_and_changes_nothing(cluster, cloud, tmp_path):
    handle, values, start, _upgraded = cluster(cloud)
    live = len(uh.live_instances(handle))
    handle.cloud(cloud).set_faults(quota=live)
    before = _world(handle, values, cloud, start)
    rc, output = uh.run_upgrade(values, tmp_path / "refused.log", timeout=RUN_TIMEOUT)
    assert rc != 0, output[-6000:]
    assert "the cloud quota leaves no room for a new instance" in output, output[-6000:]
    assert LIMIT_NAMES[cloud] in output, output[-6000:]
    assert "Nothing was changed" in output
    assert _world(handle, values, cloud, start) == before
    assert not uh.node_annotations_with_prefix(handle)
