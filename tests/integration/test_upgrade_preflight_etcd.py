"""End to end: the rolling_upgrade role's preflight refuses to start while the control-plane etcd is
unhealthy, names the member at fault, and changes nothing (issue #8); once etcd is healthy again the
preflight passes. A member that turns unhealthy after the preflight, between two control-plane replacements,
holds the next control-plane heir (no new etcd member while another is unhealthy, issue 25) until it recovers.

One sandbox with 3 control planes (one real etcd member each, mutual TLS) and 1 worker. One member is
frozen with SIGSTOP: it keeps its TCP port but answers nothing, as a hung etcd would, while the other two
keep quorum and the apiserver (which stores its data in the sandbox's separate storage etcd) stays up.
SIGCONT restores it without a membership change. The runs after the failing one are in check mode:
enough to show the preflight passes, and they change nothing either.

On GCP only (CI time, ci23): what these tests are about is the planner's (plan_surge holds a control-plane heir while
a member is unhealthy, plan_pairs swaps the donor) and etcd's; no provider has a path of its own for etcd or for a
control-plane node beyond reading its role, and a control-plane replacement runs on every cloud in
test_upgrade_e2e.py::test_full_upgrade (on Azure with etcd reached through another host), on AWS also with etcd
counted throughout in test_upgrade_capacity.py::test_foreign_control_plane_node_keeps_three_etcd_members.
"""

import contextlib
import os
import signal
import time

import pytest
import requests

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import hold_points
from ansible_run import run_playbook
import upgrade_helpers as uh

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLOUD = "gcp"
RUN_TIMEOUT = 300
STEP_TASK = "Upgrade steps until every node runs the image"


def etcd_status(etcd, client_url):
    response = requests.post(client_url + "/v3/maintenance/status", json={}, verify=etcd["ca"],
                             cert=(etcd["cert"], etcd["key"]), timeout=5)
    response.raise_for_status()
    return response.json()


def etcd_healthy(etcd, client_url):
    try:
        response = requests.get(client_url + "/health", verify=etcd["ca"], cert=(etcd["cert"], etcd["key"]), timeout=2)
        return response.status_code == 200 and response.json().get("health") == "true"
    except requests.RequestException:
        return False


def a_follower(etcd):
    """(name, member) of a member that is not the leader: freezing it needs no election."""
    statuses = {name: etcd_status(etcd, m["client_url"]) for name, m in etcd["members"].items()}
    return next((name, etcd["members"][name]) for name, s in sorted(statuses.items())
                if s["leader"] != s["header"]["member_id"])


@contextlib.contextmanager
def frozen_member(member):
    """The etcd member's process stopped (SIGSTOP: it keeps its port and answers nothing) for the block, and let go
    (SIGCONT) when the block ends, whatever happens in it. A process of this test's own sandbox."""
    os.kill(member["pid"], signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(member["pid"], signal.SIGCONT)


def task_results(output, suffix):
    return [t["hosts"]["localhost"] for play in output["plays"] for t in play["tasks"]
            if t["task"]["name"].endswith(suffix) and t["hosts"]]


@pytest.mark.timeout(900)
def test_unhealthy_control_plane_etcd_stops_the_run_in_preflight_and_changes_nothing(upgrade_cluster, tmp_path):
    handle, values, start = upgrade_cluster(CLOUD, control_planes=3, workers=1, groups=1)
    etcd = handle.cp_etcd()
    assert len(etcd["members"]) == 3 and all(m["running"] for m in etcd["members"].values()), etcd["members"]
    frozen, member = a_follower(etcd)
    before = uh.world(handle, values)

    os.kill(member["pid"], signal.SIGSTOP)  # a process of this test's own sandbox
    try:
        rc, output = run_playbook(uh.PLAYBOOK, extra_vars=values, timeout=RUN_TIMEOUT)
        failures = uh.failed_messages(output)
        assert rc != 0 and failures, "the run went ahead with etcd member %s frozen" % frozen
        # The first upgrade_step call reads etcd itself and refuses; the role's rescue then stops with the same cause, saying that nothing was changed.
        assert len(failures) == 2 and STEP_TASK in failures[0], failures
        assert all("control-plane etcd is not healthy" in f for f in failures), failures
        assert "etcd member %s (" % frozen in failures[0] and member["client_url"] in failures[0], failures
        assert "is unreachable" in failures[0], failures
        assert "The run had not begun: nothing was changed" in failures[1], failures
        [step] = [r for r in task_results(output, "") if r.get("reason") == "preflight"]
        assert not step.get("changed") and step["start"]["started"] is None and step["start"]["lock"] is None, step
        health = step["etcd_health"]
        assert health["healthy"] is False
        assert sorted(m["name"] for m in health["members"]) == sorted(etcd["members"])
        assert [h["name"] for h in health["health"] if not h["reachable"]] == [frozen]
        assert uh.world(handle, values) == before, "the failed preflight changed something"
        assert not uh.node_annotations_with_prefix(handle)

        # A run that leaves the control plane out does not look at etcd: the worker group alone passes.
        limited = dict(values)
        uh.limit_to_groups(limited, start, [g for g in start["group_ids"].values() if "control-plane" not in g])
        rc, output = run_playbook(uh.PLAYBOOK, extra_vars=limited, check=True, timeout=RUN_TIMEOUT)
        assert rc == 0, uh.failed_messages(output)
        [plan] = [r for r in task_results(output, "") if "check_plan" in r]
        assert plan["start"]["etcd_health"] is None, plan["start"]   # etcd not read
    finally:
        os.kill(member["pid"], signal.SIGCONT)

    deadline = time.monotonic() + 60
    while not etcd_healthy(etcd, member["client_url"]):
        assert time.monotonic() < deadline, "etcd member %s did not recover after SIGCONT" % frozen
        time.sleep(0.5)
    rc, output = run_playbook(uh.PLAYBOOK, extra_vars=values, check=True, timeout=RUN_TIMEOUT)
    assert rc == 0, uh.failed_messages(output)
    [plan] = [r for r in task_results(output, "") if "check_plan" in r]
    health = plan["start"]["etcd_health"]
    assert health["healthy"] is True and health["problems"] == [], health.get("problems")
    assert len(health["members"]) == 3 and all(h["healthy"] for h in health["health"])
    assert uh.world(handle, values) == before
    assert not uh.node_annotations_with_prefix(handle)

    # Issue 28 item 1: an etcd CA file that does not exist killed the worker with no message (etcd preflight on), or
    # was found at the first member removal, after the control-plane heir was created (off): refused at the start.
    missing = str(tmp_path / "no-such-ca.crt")
    for etcd_preflight in (True, False):
        rc, output = run_playbook(uh.PLAYBOOK, extra_vars=dict(values, rolling_upgrade_etcd_ca_cert=missing,
                                                               rolling_upgrade_etcd_preflight=etcd_preflight),
                                  timeout=RUN_TIMEOUT)
        failures = uh.failed_messages(output)
        assert rc != 0 and len(failures) == 2 and STEP_TASK in failures[0], failures
        assert all("rolling_upgrade_etcd_ca_cert %s does not exist or is not a file" % missing in f for f in failures)
        assert "rolling_upgrade_etcd_delegate_to" in failures[0], failures
        assert "The run had not begun: nothing was changed" in failures[1], failures
        assert uh.world(handle, values) == before, "etcd preflight %s: a run with no CA file changed something" % etcd_preflight
        assert not uh.node_annotations_with_prefix(handle)
    # Without the start's preflight (rolling_upgrade_preflight false) the files are checked on the first pass's plan,
    # before its first change: the run began (the autoscaler paused, then restored; the lock taken, then released).
    rc, output = run_playbook(uh.PLAYBOOK, extra_vars=dict(values, rolling_upgrade_etcd_ca_cert=missing,
                                                           rolling_upgrade_preflight=False), timeout=RUN_TIMEOUT)
    failures = uh.failed_messages(output)
    assert rc != 0 and "rolling_upgrade_etcd_ca_cert %s does not exist or is not a file" % missing in failures[0], failures
    after = uh.world(handle, values)
    assert after.pop("autoscaler")[1] == before["autoscaler"][1]
    assert after == {k: v for k, v in before.items() if k != "autoscaler"}, "preflight off: a run with no CA file changed something"
    assert not uh.node_annotations_with_prefix(handle)


def wait_for_line(path, run, timeout):
    """The first line the run's hold wrote to `path`; fails with the output's tail if the run ends first."""
    deadline = time.monotonic() + timeout
    while True:
        ended = run.proc.poll() is not None
        lines = path.read_text().splitlines() if path.exists() else []
        if lines:
            return lines[0]
        assert not ended and time.monotonic() < deadline, "no hold within %ss (rc %s):\n%s" % (
            timeout, run.proc.returncode, run.output()[-4000:])
        time.sleep(0.1)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("cloud", [CLOUD])   # why GCP alone: the module docstring
def test_a_member_unhealthy_between_control_plane_replacements_holds_the_next_heir(upgrade_cluster, cloud, tmp_path):
    """3 control planes, the control-plane group alone. The run is held (hold_points) right after it deleted the
    first donor's Node; a follower member is frozen, and the run let go. For 20 s it creates no control-plane
    heir, and says why, naming the member; once the member answers again the run finishes with 3 members."""
    handle, values, start = upgrade_cluster(cloud, control_planes=3, workers=1, groups=1)
    [label] = uh.limit_to_groups(values, start, ["control-plane"])
    hold_file = tmp_path / "hold"
    watcher = uh.Watcher(handle, etcd=True)
    watcher.start()
    run = uh.PlaybookRun(values, tmp_path / "upgrade.log",
                         env={hold_points.ENV_POINTS: "delete-node", hold_points.ENV_FILE: str(hold_file)})
    try:
        assert wait_for_line(hold_file, run, RUN_TIMEOUT).startswith("delete-node ")
        members = uh.etcd_member_names(handle)
        assert len(members) == 3, members   # the first heir's in, the first donor's out (its process may linger)
        etcd = handle.cp_etcd()
        frozen, member = a_follower(dict(etcd, members={n: m for n, m in etcd["members"].items() if n in members}))
        with frozen_member(member):
            frozen_at = time.monotonic()
            hold_file.write_text("")   # let the run go on
            # At least 20 s, and until the run said why it holds (its first etcd reads wait on the frozen member, and
            # the first donor's instance may still be listed as deleting), for up to a minute.
            while True:
                said = [line for line in run.output().splitlines()
                        if "the control plane is not healthy, so no new etcd member is added" in line]
                if (said and time.monotonic() - frozen_at >= 20) or time.monotonic() - frozen_at >= 60:
                    break
                time.sleep(0.5)
            created = watcher.seen(("instance-created",), frozen_at)
            assert not created, "a control-plane heir was created while etcd member %s was frozen: %s" % (frozen, created)
            assert said and any("etcd member %s (" % frozen in line for line in said), run.output()[-4000:]
        rc = run.wait(RUN_TIMEOUT)
    finally:
        run.close()
        watcher.stop()
    output = run.output()
    assert rc == 0, output[-6000:]
    watcher.check(start, max_surge=1)
    uh.assert_upgraded(handle, values, start, groups=[label])
    names = sorted(n["metadata"]["name"] for n in handle.kube().request("GET", "/api/v1/nodes")["items"]
                   if "node-role.kubernetes.io/control-plane" in n["metadata"].get("labels", {}))
    assert len(names) == 3 and uh.etcd_member_names(handle) == names, (uh.etcd_member_names(handle), names)


def paired_control_plane(handle, donors):
    """(heir, donor) of the first control-plane heir once it names a donor among `donors`."""
    for node in uh.nodes(handle):
        donor = (node["metadata"].get("annotations") or {}).get(uh.PREFIX + "/donor")
        if donor in donors and "node-role.kubernetes.io/control-plane" in node["metadata"]["labels"]:
            return node["metadata"]["name"], donor
    return None


@pytest.mark.timeout(900)
@pytest.mark.parametrize("cloud", [CLOUD])   # why GCP alone: the module docstring
def test_a_control_plane_node_whose_member_turns_unhealthy_is_replaced_first(upgrade_cluster, cloud, tmp_path):
    """Issue 25 ("choose the donor when it is drained"), on the sandbox: 3 control planes, the control-plane group alone,
    heirs Ready 15 s before their donor drains. Once the first heir is paired with a donor, the etcd member of another
    control-plane node is frozen: etcd would refuse the donor's removal while it is unhealthy, so the heir goes to the
    frozen member's node instead (swap, named), which is drained and replaced first; the donor first paired waits for
    the next heir. Nodes, instances per group and etcd members compared; etcd never lost a member."""
    handle, values, start = upgrade_cluster(cloud, control_planes=3, workers=1, groups=1,
                                            rolling_upgrade_heir_ready_seconds=15)
    [label] = uh.limit_to_groups(values, start, ["control-plane"])
    old = set(start["groups"][label])
    per_group = uh.instances_per_group(handle)
    watcher = uh.Watcher(handle, etcd=True)
    watcher.start()
    run = uh.PlaybookRun(values, tmp_path / "upgrade.log")
    try:
        heir, first = uh.wait_until(lambda: paired_control_plane(handle, old), 240, "the first heir to be paired")
        assert not uh.touched(watcher, first), "%s was %s before the test went on" % (first, uh.touched(watcher, first))
        etcd = handle.cp_etcd()
        sick, member = a_follower(dict(etcd, members={n: m for n, m in etcd["members"].items() if n in old - {first}}))
        # Let go once drained: its member is removed whether it answers or not.
        with frozen_member(member):
            uh.wait_until(lambda: uh.touched(watcher, sick, ("cordon",)), 120, "%s to be cordoned" % sick)
        rc = run.wait(RUN_TIMEOUT)
    finally:
        run.close()
        watcher.stop()
    output = run.output()
    assert rc == 0, output[-6000:]
    flat = " ".join(output.split())
    # The choice is named when it is made.
    assert "heir %s replaces %s instead of %s: the etcd member of %s is unhealthy" % (heir, sick, first, sick) in flat, \
        output[-6000:]
    assert "so etcd would refuse to remove the member of %s: %s is replaced first" % (first, sick) in flat, output[-6000:]
    lines = [line for line in output.splitlines() if uh.PROGRESS.match(line)]
    # The progress lines show the frozen member's node waiting on that heir (its drain may end in one round).
    assert any("in flight: %s paired" % sick in line and "(heir %s " % heir in line for line in lines), "\n".join(lines)
    # The first destructive step seen on each old node: a poll slowed by an etcd endpoint can miss a quick
    # node's cordon and see only its member or its Node go.
    touches = {}
    for moment, _kind, name in watcher.seen(("cordon", "etcd-removal", "node-deletion")):
        if name in old:
            touches.setdefault(name, moment)
    assert min(touches, key=touches.get) == sick and touches[sick] < touches[first], (sick, first, touches)
    watcher.check(start, max_surge=1)
    uh.assert_upgraded(handle, values, start, groups=[label])
    assert uh.instances_per_group(handle) == per_group
    names = sorted(n["metadata"]["name"] for n in uh.nodes(handle)
                   if "node-role.kubernetes.io/control-plane" in n["metadata"].get("labels", {}))
    assert len(names) == 3 and uh.etcd_member_names(handle) == names, (uh.etcd_member_names(handle), names)
