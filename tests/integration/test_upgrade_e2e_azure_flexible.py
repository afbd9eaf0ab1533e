"""End to end on Azure VM scale sets in Flexible orchestration (issue 16 item 5): playbooks/upgrade_nodes.yml
upgrades a sandbox cluster whose scale sets are Flexible (sandbox seeding with azure_orchestration="Flexible").
Its own file, so that pytest-xdist's --dist loadfile can run it beside test_upgrade_e2e.py."""

import pytest

from ansible_run import run_playbook
import upgrade_helpers as uh

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 600


@pytest.mark.timeout(900)
def test_full_upgrade_azure_flexible(upgrade_cluster, tmp_path):
    """The same upgrade on Azure scale sets in Flexible orchestration (issue 16 item 5): their VMs are plain
    virtual machines (providerID .../Microsoft.Compute/virtualMachines/<vm-name>), listed through the virtual
    machines API, since Azure refuses the scale set VM API for Flexible sets (as the emulator does). The
    modules' path for a Flexible providerID is in test_provider_azure_modules.py."""
    handle, values, start = upgrade_cluster("azure", azure_orchestration="Flexible")
    flexible = "/providers/Microsoft.Compute/virtualMachines/"
    assert start["instances"] and all(flexible in pid for pid in start["instances"]), start["instances"]
    # Check mode's plan on Flexible sets: every node in its order, the sets to point at the image; nothing changed.
    before = uh.world(handle, values)
    rc, output = run_playbook(uh.PLAYBOOK, extra_vars=values, check=True, timeout=RUN_TIMEOUT)
    assert rc == 0, uh.failed_messages(output)
    shown = uh.check_plan(output)
    order = shown["order"]
    assert order.startswith("3 node(s) to replace") and all(n in order for n in start["node_names"]), order
    groups = shown["groups"]
    assert groups.count("(Azure VM scale set (Flexible orchestration), ") == 3 and "Uniform" not in groups, groups
    plan = shown["next_pass"]
    assert plan["set_group_image"] and all("/virtualMachineScaleSets/" in g["group"] for g in plan["set_group_image"]), plan
    assert uh.world(handle, values) == before
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
