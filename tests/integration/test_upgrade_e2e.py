"""End to end: playbooks/upgrade_nodes.yml (the rolling_upgrade role) upgrades a whole sandbox cluster
through each cloud emulator. Each test starts its own sandbox (real kube-apiserver, real control-plane
etcd, an emulated cloud); the role authenticates as a ServiceAccount bound only to the role's rbac.yml.

The failure paths of issue #8 are in test_upgrade_e2e_*.py (one file each, so pytest-xdist's
--dist loadfile spreads them over the workers). See upgrade_helpers.py for what the invariant watcher
observes and why it can rely on it.
"""

import datetime
import json
import pathlib
import re

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import report

from tests import rbac_audit
import upgrade_helpers as uh

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 600
# What each cloud says when it refuses the first heir after accepting its create (the emulators' late_refusals knob):
# GCE a per-instance quota the preflight does not read, Azure a failed allocation, AWS a launch without capacity.
LATE_REFUSAL_WORDS = {"gcp": "Quota 'IN_USE_ADDRESSES' exceeded", "azure": "AllocationFailed",
                      "aws": "do not have sufficient t3.micro capacity"}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("cloud", ["gcp", "azure", "aws"])
def test_full_upgrade(upgrade_cluster, cloud, tmp_path):
    """1 control plane and 2 workers in 2 worker groups: 3 replacements, one of them a control-plane node
    (its etcd member goes from 1 to 2 when the heir joins, then back to 1 when the donor's is removed).

    The cloud acts as real clouds do (issue 26): deletions stay listed for a while (the emulators' defaults), and the
    first heir's create is accepted and then refused for quota or capacity. The run removes that instance at once
    (it would otherwise wait join_timeout, 30 min, for it), holds the surge naming the quota or capacity, and ends.

    A health check fails mid-run (health_event): on AWS and Azure the run switched the cloud's replacement of an
    unhealthy instance off, so nothing happens; on GCE autohealing is left on by decision and recreates the VM in place
    on the new image, which the run leaves alone (a heir it made for that VM is then surplus: removed, and the report
    does not count it as a node replaced)."""
    overrides, extra_args = {}, ()
    if cloud == "azure":
        # etcd reached "through a control-plane host": the step hands the removal to the delegated
        # etcd_member_remove task and resumes (the host is this one, with the play's local connection). With --diff:
        # the call that hands the removal over ends the slice that drained the control-plane donor, so its diff is shown.
        overrides["rolling_upgrade_etcd_delegate_to"] = "etcd-host"
        extra_args = ("--diff",)
    # Worker groups whose cloud acts on them by itself (cloud_settings.py): regional MIGs (GCE's proactive
    # redistribution is their default) with autohealing, scale sets with an Automatic upgrade policy and automatic
    # repairs (and overprovisioned, as the sandbox seeds Uniform worker sets: ARM's default); every ASG spans three
    # zones.
    overrides["worker_group_options"] = {"gcp": {"region": "us-central1", "autohealing": True},
                                         "azure": {"upgrade_policy": "Automatic", "automatic_repairs": True},
                                         "aws": None}[cloud]
    # The cloud call limit (issue 22), whose source the report names: the sandbox scenario's 3000 a minute on GCE, the
    # cloud's default on Azure (375), 500 given here on AWS.
    overrides.update({"azure": {"rolling_upgrade_cloud_calls_per_minute": None},
                      "aws": {"rolling_upgrade_cloud_calls_per_minute": 500}}.get(cloud, {}))
    handle, values, start = upgrade_cluster(cloud, **overrides)
    # A worker group under the cloud's own autoscaler, which keeps it at its start size: unless the run switches it off,
    # it scales the surge in again within a second, deleting the newest VM (the heir) undrained.
    (label,) = [g for g in start["groups"] if g.endswith("workers-0")]
    autoscaled = start["group_ids"][label]
    if cloud == "gcp":
        handle.cloud(cloud).create_autoscaler(autoscaled, recommended=len(start["groups"][label]))
    elif cloud == "azure":
        handle.cloud(cloud).create_autoscale(autoscaled, recommended=len(start["groups"][label]))
    else:
        # A scheduled action that scales the group in by one mid-run (AWS terminates an instance undrained), unless the
        # run suspended ScheduledActions; 25 s from now is after the run's begin and before its end (about 50 s).
        handle.cloud(cloud).add_scheduled_action(autoscaled, len(start["groups"][label]) - 1, delay=25, name="mid-run")
        # A termination lifecycle hook on the other worker group (a user's drain or log hook): its donor's instance waits
        # in Terminating:Wait, then Terminating:Proceed, listed all along; the run ends only once it is gone.
        (other,) = [g for g in start["groups"] if g.endswith("workers-1")]
        handle.cloud(cloud).add_termination_hook(start["group_ids"][other])
    settings = uh.group_settings(values)
    handle.cloud(cloud).set_faults(late_refusals=1)
    sick, healed = health_event(handle, cloud, start)
    before = handle.cloud(cloud).state() if cloud == "azure" else None
    rc, output, watcher = uh.run_watched(handle, values, tmp_path / "upgrade.log", timeout=RUN_TIMEOUT, extra_args=extra_args,
                                         during=[sick], cloud_took=healed)
    assert rc == 0, output[-6000:]
    assert sick.acted.is_set(), "the health check never failed mid-run: %s" % sick.errors
    check_health_event(handle, cloud, start, sick, before, watcher)
    [held] = [line for line in output.splitlines() if "WARNING: the cloud refused new instances for quota or capacity" in line]
    assert LATE_REFUSAL_WORDS[cloud] in held and "at most 1 replacement(s)" in held, held
    # The cloud settings that act on a group by themselves were neutralised for the run and are back as they were.
    # (the settings of each worker group, how many groups): AWS suspends the scaling processes of every group; the
    # autoscaled group's autoscaler is off for the run too.
    neutralised = {"gcp": (["updatePolicy.instanceRedistributionType"], 2),
                   "aws": (["AZRebalance", "AlarmNotification", "ReplaceUnhealthy", "ScheduledActions"], 3),
                   "azure": (["automaticRepairsPolicy.enabled", "overprovision", "upgradePolicy.mode"], 2)}
    rows = uh.assert_settings_restored(values, settings)
    if cloud == "aws":
        [mid_run] = [r for r in handle.cloud(cloud).scalings() if r["group"] == autoscaled and "mid-run" in r["cause"]]
        assert mid_run["skipped"] == "ScheduledActions suspended", mid_run
    autoscaler_setting = {"gcp": "autoscalingPolicy.mode", "azure": "autoscaleSettings.enabled"}.get(cloud)
    assert sorted(r["setting"] for r in rows) == sorted(neutralised[cloud][0] * neutralised[cloud][1] + (
        [autoscaler_setting] if autoscaler_setting else [])), rows
    if autoscaler_setting:
        [row] = [r for r in rows if r["setting"] == autoscaler_setting]
        assert row["group"] == autoscaled and (row["original"], row["neutral"]) == (
            {"gcp": ("ON", "OFF"), "azure": ("true", "false")}[cloud]), row
        assert settings[autoscaled][autoscaler_setting] == row["original"]
    for row in rows:
        assert "set %s of %s from %s to %s for the run" % (row["setting"], row["group"], row["original"], row["neutral"]) in output
        assert "restored %s of %s to %s" % (row["setting"], row["group"], row["original"]) in output
    passes = [int(found[0]) for found in uh.PROGRESS.findall(output)]
    assert passes and passes == list(range(1, len(passes) + 1)), "one progress line per pass: %s" % passes
    # A node GCE autohealed onto the new image mid-run is no longer one to replace: the run counts the other two.
    assert "%d/%d nodes on the image" % ((3 - len(healed),) * 2) in output
    watcher.check(start, max_surge=1)
    # Nothing the run deleted went undrained: each start node's instance went after the watcher saw it cordoned (the
    # one GCE autohealed went by the cloud's hand, and came back).
    start_nodes = {i["provider_id"]: i["node_name"] for i in handle.nodesim.instances() if i["provider_id"] in start["instances"]}
    cordoned = {name: moment for moment, _kind, name in watcher.seen(("cordon",))}
    for moment, _kind, gone in watcher.seen(("instance-deletion",)):
        if gone in start_nodes and start_nodes[gone] not in healed:
            assert cordoned.get(start_nodes[gone], moment + 1) <= moment, (start_nodes[gone], watcher.events)
    uh.assert_upgraded(handle, values, start, healed=healed)
    # The executor's guard refused nothing on this consistent cluster; the report's timeline starts at each heir's
    # creation (no gap while it is made), and its breakdown accounts for the whole wall time.
    assert "refused: " not in output, output[-6000:]
    summary = json.loads((pathlib.Path(values["rolling_upgrade_report_dir"]) / "image-upgrade-report.json").read_text())
    # GCE and Azure made an instance and refused it: it was removed, and the report says why. AWS launched none.
    removed = [i["reason"] for i in summary["instances_removed"] if LATE_REFUSAL_WORDS[cloud] in i["reason"]]
    assert len(removed) == (0 if cloud == "aws" else 1), summary["instances_removed"]
    journey = {"creating", "joined", "heir-ready", "paired", "draining", "deleted"}
    for row in summary["nodes"]:
        if row["kind"] == "surplus":  # a heir GCE's autoheal made needless: drained and deleted, never a donor
            assert cloud == "gcp" and healed and {"draining", "deleted"} <= set(row["phases"]) and row["done"], row
            continue
        assert row["kind"] == "donor" and journey <= set(row["phases"]), row
        assert min(row["phases"].values()) == row["phases"]["creating"], row
    spent = summary["time_breakdown"]
    assert spent["wall_seconds"] == summary["wall_seconds"] == sum(
        spent[key] for key in ("drains_and_pdbs_seconds", "joins_seconds", "cloud_seconds", "overhead_seconds")), spent
    # Waiting on the cloud is the heir's creating phase.
    assert spent["cloud_seconds"] > 0, spent
    assert summary["api_seconds"] is not None, summary["api_seconds"]
    # Issue 22: the cloud requests the passes made, by kind, and the busiest minute against the limit (the cloud's
    # default, or rolling_upgrade_cloud_calls_per_minute); no throttling answer from an emulator that gives none.
    calls = summary["cloud_calls"]
    limit = {"gcp": (3000, "rolling_upgrade_cloud_calls_per_minute"), "azure": (375, "default"),
             "aws": (500, "rolling_upgrade_cloud_calls_per_minute")}
    assert (calls["limit_per_minute"], calls["limit_source"]) == limit[cloud], calls
    # (a run whose passes fit in a minute has its every call in its peak minute)
    assert calls["calls"] == sum(calls["by_kind"].values()) >= calls["peak_per_minute"] > 0, calls
    # No minute holds more than the rate (the bucket's 10 s burst is paid back within the minute).
    assert calls["peak_fraction_of_limit"] == round(calls["peak_per_minute"] / calls["limit_per_minute"], 3), calls
    assert calls["peak_per_minute"] <= calls["limit_per_minute"], calls
    assert len(calls["by_kind"]) >= 3 and calls["throttled"] == 0, calls
    markdown = (pathlib.Path(values["rolling_upgrade_report_dir"]) / "image-upgrade-report.md").read_text()
    assert "- cloud API requests: %d; peak %d per minute" % (calls["calls"], calls["peak_per_minute"]) in markdown
    # Issue 22: the Kubernetes requests of the passes by kind (the Node cache's list and watches, the pairs' and phases'
    # patches, the drains' evictions, the Nodes' deletions), per replaced node, and the report's line.
    kubes = summary["kube_calls"]
    assert kubes["calls"] == sum(kubes["by_kind"].values()) > 0, kubes
    assert {"list", "watch", "get", "patch", "evict", "delete"} <= set(kubes["by_kind"]), kubes
    assert kubes["per_replaced_node"] == round(kubes["calls"] / float(summary["nodes_replaced"]), 1), kubes
    assert "- Kubernetes API requests: %d (%s per replaced node)" % (kubes["calls"], kubes["per_replaced_node"]) in markdown
    assert not uh.lease_holder(handle), "the run lock was not released"
    # Issue 23: every node to replace carried the PreferNoSchedule taint (the journal says when it was set), and no node
    # is left with it.
    stored = handle.kube().request("GET", "/api/v1/namespaces/kube-system/configmaps/kubenodes-image-upgrade-journal")
    taints = json.loads(stored["data"]["journal.json"]).get("replacing_taints") or {}
    assert set(start["node_names"]) <= {name for name, seen in taints.items() if seen.get("set")}, taints
    assert not uh.replacing_tainted(handle)
    # Each replacement's steps as Events on its Nodes (rolling_upgrade_events), once each.
    ours = [e for e in handle.kube().request("GET", "/api/v1/namespaces/default/events")["items"]
            if (e.get("source") or {}).get("component") == "kubenodes-image-upgrade"]
    reasons = {}
    for item in ours:
        reasons.setdefault(item["involvedObject"]["name"], []).append(item["reason"])
    for donor in (n for names in start["groups"].values() for n in names if n not in healed):
        assert {"UpgradePaired", "UpgradeCordoned", "UpgradeDrainStarted", "UpgradeDrained",
                "UpgradeNodeDeleted"} <= set(reasons.get(donor, ())), (donor, reasons)
        # A step is one Event (warnings may be several: a drain blocked by different PodDisruptionBudgets).
        steps = [r for r in reasons[donor] if r not in ("UpgradeDrainBlocked", "UpgradeProblem")]
        assert sorted(set(steps)) == sorted(steps), reasons[donor]
    assert sum(r.count("UpgradeHeirReady") for r in reasons.values()) == 3 - len(healed), reasons
    # The node GCE autohealed was neither drained nor deleted by the run: the cloud recreated it, the run left it.
    assert not any(set(reasons.get(n, ())) & {"UpgradeCordoned", "UpgradeDrainStarted", "UpgradeNodeDeleted"}
                   for n in healed), reasons
    # The control-plane donor's etcd member went in the pass that deleted it: that phase has its Event too.
    [control_plane] = [n for g, names in start["groups"].items() if "control-plane" in g for n in names]
    assert "UpgradeEtcdMemberRemoved" in reasons[control_plane], reasons[control_plane]
    assert not any("UpgradeEtcdMemberRemoved" in reasons.get(n, ()) for n in start["node_names"] if n != control_plane), reasons
    if "rolling_upgrade_etcd_delegate_to" in overrides:
        # The preflight's etcd read too, before the first pass: the first call asked for it (RV etcd_read).
        assert re.search(r"Read the control-plane etcd on the etcd host \(pass 0\)\] \*+\n(?:FAILED - RETRYING.*\n)*"
                         r"ok: \[localhost -> etcd-host\]", output), output[-6000:]
        # (with --diff, each removal's diff comes before its changed line, within the task's output)
        assert re.search(r"Remove the etcd members of drained control-plane donors \(pass \d+\)\] \*+\n(?:(?!TASK \[).*\n)*?"
                         r"changed: \[localhost -> etcd-host\]", output), output[-6000:]
        # upgrade_step's --diff (the default callback shows it as JSON): the control-plane donor drained in that slice.
        assert re.search(r'^\+\s+"%s": "[^"\n]*drained \(\d+ pod\(s\) evicted\)",?$' % re.escape(control_plane), output,
                         re.M), output[-6000:]
    # Least privilege, measured: what the ServiceAccount asked for (audit log) against rbac.yml, both ways.
    rbac_audit.check_upgrade(handle)


def _worker_donor(handle, start):
    """(group id, node name, providerID) of the start's node in the worker group not under the cloud's autoscaler."""
    (label,) = [g for g in start["groups"] if g.endswith("workers-1")]
    (name,) = start["groups"][label]
    (instance,) = [i for i in handle.nodesim.instances() if i["node_name"] == name and i["state"] != "deleted"]
    return start["group_ids"][label], name, instance["provider_id"]


def health_event(handle, cloud, start):
    """A health check that fails mid-run, on a worker donor (the control plane is replaced first, alone, so the donor
    is still there), once the run changed what it changes: (ActWhen thread, set of the nodes the cloud will have
    recreated in place, filled when it acts).
    AWS: the instance marked unhealthy once ReplaceUnhealthy is suspended. Azure: the VM fails its health once both
    automatic repairs and overprovisioning are off on every worker set (seen on the emulator). GCE: the VM fails its
    health once its group points at the new template; autohealing, left on, recreates it in place on the new image,
    and the run must leave it be. Where the heal comes after the run made that donor's heir, the heir is surplus: the
    run removes it, and the report names it as surplus, not as a node replaced (assert_upgraded)."""
    admin = handle.cloud(cloud)
    group_id, name, provider_id = _worker_donor(handle, start)
    healed = set()
    if cloud == "aws":
        def neutralised():
            [group] = admin.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group_id])["AutoScalingGroups"]
            return "ReplaceUnhealthy" in [p["ProcessName"] for p in group.get("SuspendedProcesses") or []]

        def act():
            return admin.mark_unhealthy(provider_id.rsplit("/", 1)[1])
    elif cloud == "azure":
        workers = [gid.rsplit("/", 1)[1].lower() for label, gid in start["group_ids"].items() if "workers" in label]

        def neutralised():
            sets = [s for s in admin.state()["scale_sets"] if s["name"].lower() in workers]
            return len(sets) == len(workers) and all(
                s["properties"].get("overprovision") is False and
                (s["properties"].get("automaticRepairsPolicy") or {}).get("enabled") is False for s in sets)

        def act():
            return admin.fail_health(group_id, provider_id.rsplit("/", 1)[1])
    else:
        template = admin.state()["groups"][group_id]["template"]

        def neutralised():
            return admin.state()["groups"][group_id]["template"] != template

        def act():
            healed.add(name)
            return admin.fail_health(group_id, name)
    sick = uh.ActWhen(neutralised, act, timeout=RUN_TIMEOUT)
    sick.donor = (group_id, name, provider_id)
    return sick, healed


def check_health_event(handle, cloud, start, sick, before, watcher):
    """What came of health_event, read from the emulator: AWS skipped the replacement (ReplaceUnhealthy suspended) and
    the process is back; Azure repaired nothing and made no extra VM during the run, both settings back on; GCE
    recreated the VM once, in place, and the run never cordoned it."""
    admin = handle.cloud(cloud)
    group_id, name, provider_id = sick.donor
    if cloud == "aws":
        marked = [r for r in admin.health_replacements() if r["group"] == group_id]
        assert marked and all(r["skipped"] == "ReplaceUnhealthy suspended" and r["terminated"] is None for r in marked), marked
        [group] = admin.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group_id])["AutoScalingGroups"]
        assert "ReplaceUnhealthy" not in [p["ProcessName"] for p in group.get("SuspendedProcesses") or []], group
    elif cloud == "azure":
        workers = {gid.rsplit("/", 1)[1].lower() for label, gid in start["group_ids"].items() if "workers" in label}
        then = {s["name"].lower(): s for s in before["scale_sets"] if s["name"].lower() in workers}
        now = {s["name"].lower(): s for s in admin.state()["scale_sets"] if s["name"].lower() in workers}
        assert sorted(then) == sorted(now) == sorted(workers), (sorted(then), sorted(now))
        for vmss, seen in now.items():
            # The seeding's scale-out made one extra VM (overprovisioning, ARM's default); the run made none.
            assert len(then[vmss]["overprovisioned"]) == 1 and seen["overprovisioned"] == then[vmss]["overprovisioned"], (
                vmss, then[vmss]["overprovisioned"], seen["overprovisioned"])
            assert seen["repaired"] == [], (vmss, seen["repaired"])
            assert seen["properties"].get("overprovision") is True, (vmss, seen["properties"])
            assert seen["properties"]["automaticRepairsPolicy"]["enabled"] is True, (vmss, seen["properties"])
    else:
        heals = admin.state()["autoheals"]
        assert [h["instance"] for h in heals] == [name] and heals[0]["group"] == group_id, heals
        assert not uh.touched(watcher, name, kinds=("cordon", "node-deletion")), watcher.seen(("cordon", "node-deletion"))
        (instance,) = [i for i in handle.nodesim.instances() if i["node_name"] == name]
        assert instance["provider_id"] == provider_id and instance["state"] == "ready", instance


IN_FLIGHT = re.compile(r"pass (\d+): [^\n\"]*?in flight: ([^;\"]*)")


@pytest.mark.timeout(900)
def test_surge_three_moves_three_replacements_per_group_in_the_same_passes_after_a_canary(upgrade_cluster, tmp_path):
    """max_surge 3 with 2 worker groups of 4 and the canary on (issue 23 item 3): each group first replaces one node
    alone, and only once that replacement is done and its heir has been Ready for the soak do the group's other three
    go, all in flight together (3 new instances at once in each group, never 4); the control plane goes one at a time."""
    soak = 4
    handle, values, start = upgrade_cluster("aws", workers=8, groups=2, rolling_upgrade_max_surge=3,
                                            rolling_upgrade_canary=True, rolling_upgrade_soak_seconds=soak)
    worker_groups = sorted(g for g in start["groups"] if "control-plane" not in g)
    assert [len(start["groups"][g]) for g in worker_groups] == [4, 4], start["groups"]
    rc, output, watcher = uh.run_watched(handle, values, tmp_path / "upgrade.log", timeout=RUN_TIMEOUT)
    assert rc == 0, output[-6000:]
    watcher.check(start, max_surge=3)
    assert watcher.surge_at_once(start, worker_groups) == 3, (
        "the worker groups never had 3 replacements each at the same time: %s" % watcher.instance_counts[-20:])
    assert "canary:" in output, "no pass said it held a group for its canary"
    [control_plane] = start["groups"][next(g for g in start["groups"] if "control-plane" in g)]
    workers = [n for g in worker_groups for n in start["groups"][g]]
    summary = json.loads((pathlib.Path(values["rolling_upgrade_report_dir"]) / "image-upgrade-report.json").read_text())
    rows = {row["node"]: row["phases"] for row in summary["nodes"]}
    assert set(workers) <= set(rows), sorted(rows)
    for group in worker_groups:
        ordered = sorted(start["groups"][group], key=lambda w: report.parse_time(rows[w]["creating"]))
        canary, rest = ordered[0], ordered[1:]
        # The canary's replacement was done, and its heir Ready for the soak (timestamps in whole seconds), before the
        # group's next heir was created.
        held_until = max(report.parse_time(rows[canary]["deleted"]),
                         report.parse_time(rows[canary]["heir-ready"]) + datetime.timedelta(seconds=soak - 1))
        assert all(report.parse_time(rows[w]["creating"]) >= held_until for w in rest), {w: rows[w] for w in ordered}
        # Then the other three heirs were all made before any of their replacements finished: no pair waits for
        # another (a pair whose heir joins first may drain and finish while the others still join).
        last_created = max(report.parse_time(rows[w]["creating"]) for w in rest)
        first_deleted = min(report.parse_time(rows[w]["deleted"]) for w in rest)
        assert last_created < first_deleted, {w: rows[w] for w in rest}
    # The control plane was replaced alone, before any worker.
    first_worker_pass = min(int(number) for number, flight in IN_FLIGHT.findall(output) if any(w in flight for w in workers))
    assert all(int(number) < first_worker_pass for number, flight in IN_FLIGHT.findall(output) if control_plane in flight)
    uh.assert_upgraded(handle, values, start)
