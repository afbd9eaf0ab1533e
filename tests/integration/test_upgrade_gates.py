"""End to end, issue #16 item 2, on the sandbox (GCE emulator): health gates and soak between batches.

One upgrade of two workers, one at a time, with a gate after each batch: a soak and the user's tasks file
(check mode's listing of the gates is tested in test_upgrade_e2e_stops). The first run's first gate passes its
soak, then the user's check fails: the run stops naming it, before the second heir is created. The run after the fix runs that gate first, replaces the
second worker, soaks again after its heir turned Ready, and finishes; the report shows the time in each gate.
Each gate opens only after its checks passed at LOOKS looks in a row, LOOK_INTERVAL seconds apart, after the soak
(issue 25 item 7); the gate alone (cluster_health_gate) on the upgraded cluster, with a pod that flaps, opens only
LOOKS looks in a row after the pod's last turn to Ready."""

import datetime
import pathlib
import threading
import time

import pytest

import upgrade_helpers as uh
from ansible_run import run_module

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 600
SOAK = 12
LOOKS, LOOK_INTERVAL = 3, 2

USER_CHECKS = """\
- name: Smoke test | is the service switched off
  ansible.builtin.stat:
    path: "{marker}"
  register: smoke_marker

- name: Smoke test | the service answers
  ansible.builtin.assert:
    that: not smoke_marker.stat.exists
    fail_msg: "smoke test failed: {marker} exists"
"""


def gate_events(handle):
    """{node: [(reason, type, message)]} of the upgrade's gate Events on Nodes."""
    found = {}
    for item in handle.kube().request("GET", "/api/v1/namespaces/default/events")["items"]:
        if (item.get("source") or {}).get("component") == "kubenodes-image-upgrade" and item["reason"].startswith("UpgradeGate"):
            found.setdefault(item["involvedObject"]["name"], []).append((item["reason"], item["type"], item["message"]))
    return found


def seconds(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def ready_since(node):
    [ready] = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    return seconds(ready["lastTransitionTime"])


@pytest.mark.timeout(900)
def test_a_failing_user_gate_stops_the_run_after_a_soaked_batch_and_the_next_run_resumes_at_the_gate(
        upgrade_cluster, tmp_path):
    handle, values, start = upgrade_cluster("gcp", workers=2, groups=1)
    upgraded = uh.limit_to_groups(values, start, ["workers-0"])
    [group_label] = upgraded
    old_workers = set(start["groups"][group_label])
    assert len(old_workers) == 2
    marker = tmp_path / "service-off"
    marker.write_text("off\n")
    checks = tmp_path / "checks.yml"
    checks.write_text(USER_CHECKS.format(marker=marker))
    values.update(rolling_upgrade_gate_after="batch", rolling_upgrade_max_surge=1,
                  rolling_upgrade_soak_seconds=SOAK, rolling_upgrade_gate_timeout=120,
                  rolling_upgrade_gate_tasks=str(checks), rolling_upgrade_gate_looks=LOOKS,
                  rolling_upgrade_gate_look_interval=LOOK_INTERVAL)
    # The built-in checks passed at LOOKS looks in a row after the soak: not before this long after the heir's Ready.
    confirmed = SOAK + (LOOKS - 1) * LOOK_INTERVAL

    rc, text = uh.run_upgrade(values, tmp_path / "first.log", timeout=RUN_TIMEOUT)
    assert rc != 0, text[-3000:]
    assert 'your tasks file rolling_upgrade_gate_tasks (%s) failed at task "Smoke test | the service answers"' % checks in text
    assert "smoke test failed" in text and "the next run runs this gate first" in text
    # One replacement done, the other not begun: the gate held the next heir.
    nodes = {n["metadata"]["name"]: n for n in uh.nodes(handle)}
    in_group = [n for n in nodes.values() if n["metadata"]["labels"][uh.GROUP_LABEL] == group_label]
    assert len(old_workers & set(nodes)) == 1, sorted(nodes)
    assert len(in_group) == 2 and len(uh.live_instances(handle)) == len(start["instances"]), sorted(nodes)
    [heir] = [n for n in in_group if n["metadata"]["name"] not in old_workers]
    first = uh.journal(handle)
    assert first["gate_due"] is True
    [gate] = first["gates"].values()
    assert gate["outcome"] == "failed" and "smoke test failed" in gate["failure"]
    # The built-in checks passed, the soak last, then LOOKS looks in a row: not before `confirmed` seconds after the
    # heir turned Ready.
    assert seconds(gate["ended"]) >= ready_since(heir) + confirmed - 1, (gate, heir["status"]["conditions"])
    assert set(gate["seconds"]) >= {"nodes_ready", "system_pods_ready", "no_new_pending", "soak"}
    # The failed gate is a Warning Event on the heir of the batch it followed, naming the gate and what failed.
    [gate_id] = first["gates"]
    assert gate_events(handle) == {heir["metadata"]["name"]: [("UpgradeGateFailed", "Warning", (
        "health gate %s (after each batch; this one after the heirs %s) failed at %s: %s"
        % (gate_id, heir["metadata"]["name"], gate["ended"], gate["failure"]))[:1024])]}, gate_events(handle)

    marker.unlink()
    rc, text = uh.run_upgrade(values, tmp_path / "second.log", timeout=RUN_TIMEOUT)
    assert rc == 0, text[-3000:]
    uh.assert_upgraded(handle, values, start, groups=upgraded)
    final = uh.journal(handle)
    assert final["gate_due"] is False
    gates = [final["gates"][k] for k in sorted(final["gates"])]
    assert [g["outcome"] for g in gates] == ["failed", "passed", "passed"], gates
    # The resumed run ran the failed gate again before the second heir was created.
    [second_heir] = [n for n in uh.nodes(handle) if n["metadata"]["labels"][uh.GROUP_LABEL] == group_label
                     and n["metadata"]["name"] != heir["metadata"]["name"]]
    assert seconds(second_heir["metadata"]["creationTimestamp"]) >= seconds(gates[1]["ended"]) - 1
    # The last gate soaked after the last heir turned Ready, and looked LOOKS times in a row.
    assert seconds(gates[2]["ended"]) >= ready_since(second_heir) + confirmed - 1
    assert "user_tasks" in gates[2]["seconds"]
    # Each gate that passed is an Event on the heirs of its batch: the gate run again on the first heir's, the
    # last gate on the second heir's; the failed gate's Event stays.
    written = gate_events(handle)
    first_heir, last_heir = heir["metadata"]["name"], second_heir["metadata"]["name"]
    assert sorted(reason for reason, _kind, _text in written[first_heir]) == ["UpgradeGateFailed", "UpgradeGatePassed"]
    assert [reason for reason, _kind, _text in written[last_heir]] == ["UpgradeGatePassed"], written
    [(_reason, kind, text)] = written[last_heir]
    assert kind == "Normal" and "after the heirs %s) passed at %s" % (last_heir, gates[2]["ended"]) in text, text
    assert "soak %ss" % gates[2]["seconds"]["soak"] in text and "user_tasks" in text, text
    report = (pathlib.Path(values["rolling_upgrade_report_dir"]) / "image-upgrade-report.md").read_text()
    assert "Health gates" in report and "| 3 |" in report and "Gate 1 failed: health gate failed: your tasks file" in report
    gate_alone_with_a_flapping_pod(handle, values["rolling_upgrade_kube"])


FLAPS, READY_FOR, NOT_READY_FOR = 4, 1.0, 2.5


def gate_alone_with_a_flapping_pod(handle, auth):
    """cluster_health_gate (looks 3, 1 s apart) watching a namespace whose one pod is Ready for 1 s, then not Ready
    for 2.5 s, FLAPS times, then Ready for good. A streak of 3 passing looks needs 2 s of Ready, so the gate opens
    only after the last turn to Ready: on its first passing look, it would open during a flap."""
    namespace = "flapping"
    pod = uh.unscheduled_pod(handle, namespace, "flapper", new_namespace=True)

    def set_ready(ready):
        uh.set_pod_ready(handle, pod, ready)

    set_ready(False)
    last_ready = []

    def flap():
        for _flap in range(FLAPS):
            set_ready(True)
            time.sleep(READY_FOR)
            set_ready(False)
            time.sleep(NOT_READY_FOR)
        last_ready.append(time.time())
        set_ready(True)

    flapper = threading.Thread(target=flap, daemon=True)
    flapper.start()
    looks, interval = 3, 1
    result = run_module("cluster_health_gate", dict(auth, namespaces=[namespace], looks=looks, look_interval=interval,
                                                    poll_interval=0.2, timeout=120))
    opened = time.time()
    flapper.join(60)
    assert not result["failed"], result.get("msg")
    assert result["passed"] and result["streak"] == looks, result
    # It looked while the pod flapped (it began before the last turn to Ready, by its own count of seconds) ...
    assert opened - result["waited"] < last_ready[0] - NOT_READY_FOR, (opened, result["waited"], last_ready)
    # ... and opened only once the pod had been Ready at `looks` looks in a row since its last turn.
    assert opened >= last_ready[0] + (looks - 1) * interval, (opened, last_ready, result["looked"])
    assert "every check passing at 3 looks in a row, 1s apart" in result["gates"][-1]


def wait_until(what, predicate, timeout, run=None):
    deadline = time.monotonic() + timeout
    while True:
        found = predicate()
        if found:
            return found
        assert run is None or run.proc.poll() is None, "the run ended before %s:\n%s" % (what, run.output()[-4000:])
        assert time.monotonic() < deadline, "no %s within %ss" % (what, timeout)
        time.sleep(0.3)


@pytest.mark.timeout(900)
def test_a_run_killed_with_a_part_finished_batch_runs_the_owed_gate_before_the_next_heir(upgrade_cluster, tmp_path):
    """Three workers, batches of two. A PodDisruptionBudget holds the drain of the first worker while the second's
    replacement finishes: the gate after this batch is owed, and recorded so in the journal. The whole process tree
    is killed then, the budget removed, and the resumed run finishes that batch and runs its gate before it creates
    the third worker's heir (without the journal's record it would create it at once: the batch has room)."""
    handle, values, start = upgrade_cluster("gcp", workers=3, groups=1)
    upgraded = uh.limit_to_groups(values, start, ["workers-0"])
    [group_label] = upgraded
    old_workers = sorted(start["groups"][group_label])
    assert len(old_workers) == 3
    # The planner pairs a group's outdated nodes in name order: the first two are the first batch.
    guarded, finishing, later = old_workers
    kube = handle.kube()
    kube.merge_patch("/api/v1/nodes/" + guarded, {"metadata": {"labels": {"kubenodes-test/guard": "yes"}}})
    namespace, labels = "guarded", {"app": "guarded"}
    kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}}, ok=(201,))
    wait_until("default service account", lambda: kube.request(
        "GET", "/api/v1/namespaces/%s/serviceaccounts/default" % namespace, ok=(200, 404)).get("kind") == "ServiceAccount", 30)
    # The label goes to the guarded worker's heir with the others, so the pod has a place once it is evicted.
    kube.request("POST", "/apis/apps/v1/namespaces/%s/deployments" % namespace, {
        "metadata": {"name": "guarded"},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"nodeSelector": {"kubenodes-test/guard": "yes"}, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}}}, ok=(201,))
    pdb = "/apis/policy/v1/namespaces/%s/poddisruptionbudgets" % namespace
    kube.request("POST", pdb, {"metadata": {"name": "hold"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}},
                 ok=(201,))
    uh.wait_pod_running(kube, namespace, "app=guarded", guarded)
    values.update(rolling_upgrade_gate_after="batch", rolling_upgrade_max_surge=2,
                  rolling_upgrade_gate_timeout=120, rolling_upgrade_gate_looks=2, rolling_upgrade_gate_look_interval=1)

    def names():
        return {n["metadata"]["name"] for n in uh.nodes(handle)}

    run = uh.PlaybookRun(values, tmp_path / "killed.log")
    try:
        wait_until("deletion of %s" % finishing, lambda: finishing not in names(), RUN_TIMEOUT, run)
        assert guarded in names(), "the guarded worker's drain did not wait for its PodDisruptionBudget"
        # The gate is owed from the moment the replacement finished, in the journal (not only in the run's memory).
        wait_until("gate owed in the journal", lambda: uh.journal(handle).get("gate_owed") is True, 20, run)
    except BaseException:
        run.close()
        raise
    killed = run.kill()
    assert killed and "gates" not in uh.journal(handle), uh.journal(handle).get("gates")
    assert later in names()

    kube.request("DELETE", pdb + "/hold", ok=(200,))
    rc, text = uh.run_upgrade(values, tmp_path / "resumed.log", timeout=RUN_TIMEOUT)
    assert rc == 0, text[-3000:]
    uh.assert_upgraded(handle, values, start, groups=upgraded)
    final = uh.journal(handle)
    assert final["gate_owed"] is False and final["gate_due"] is False
    gates = [final["gates"][k] for k in sorted(final["gates"])]
    assert [g["outcome"] for g in gates] == ["passed", "passed"], gates
    # The third worker's heir was created (the cloud's time, as journaled) after the owed gate passed.
    created = final["nodes"][later]["phases"]["creating"]
    assert seconds(created) >= seconds(gates[0]["ended"]), (created, gates[0])
    assert max(seconds(final["nodes"][n]["phases"]["deleted"]) for n in (guarded, finishing)) <= seconds(gates[0]["started"])
