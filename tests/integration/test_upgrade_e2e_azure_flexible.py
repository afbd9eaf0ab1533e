"""End to end on Azure VM scale sets in Flexible orchestration (issue 16 item 5): playbooks/upgrade_nodes.yml
upgrades a sandbox cluster whose scale sets are Flexible (sandbox seeding with azure_orchestration="Flexible").
Its own file, so that pytest-xdist's --dist loadfile can run it beside test_upgrade_e2e.py."""

import pytest

import upgrade_helpers as uh

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 600


@pytest.mark.timeout(900)
def test_full_upgrade_azure_flexible(upgrade_cluster, tmp_path):
    """The same upgrade on Azure scale sets in Flexible orchestration (issue 16 item 5): their VMs are plain
    virtual machines (providerID .../Microsoft.Compute/virtualMachines/<vm-name>), listed through the virtual
    machines API, since Azure refuses the scale set VM API for Flexible sets (as the emulator does). With the step
    engine: 126 s against 329 s for the task engine on the shared machine, and both call the same provider; the
    modules' path for a Flexible providerID is in test_provider_azure_modules.py."""
    handle, values, start = upgrade_cluster("azure", azure_orchestration="Flexible", rolling_upgrade_engine="step")
    flexible = "/providers/Microsoft.Compute/virtualMachines/"
    assert start["instances"] and all(flexible in pid for pid in start["instances"]), start["instances"]
    admin = handle.cloud("azure")
    admin.clear_requests()
    rc, output, watcher = uh.run_watched(handle, values, tmp_path / "upgrade.log", timeout=RUN_TIMEOUT)
    assert rc == 0, output[-6000:]
    assert "3/3 nodes on the image" in output
    watcher.check(start, max_surge=1)
    uh.assert_upgraded(handle, values, start)
    assert all(flexible in i["provider_id"] for i in uh.live_instances(handle))
    log = admin.requests()
    refused = [r for r in log if r["status"] >= 400]
    assert not refused, refused
    assert not [r for r in log if "/virtualMachineScaleSets/{vmScaleSetName}/virtualMachines" in (r["template"] or "")]
    assert [r for r in log if (r["template"] or "").endswith("/Microsoft.Compute/virtualMachines")]
    assert not uh.lease_holder(handle), "the run lock was not released"
