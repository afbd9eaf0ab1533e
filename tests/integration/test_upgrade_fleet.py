"""End to end, issue #16 item 3, on three sandboxes at once (GCE emulator): playbooks/upgrade_fleet.yml upgrades a
fleet of clusters in batches, canaries first.

Three clusters, each an inventory host with its own kube, cloud and etcd variables, in the default batches
[1, "25%", "100%"] (one cluster each): `canary` (1 control plane + 1 worker, its etcd removal delegated to an
inventory host named by its host variable), `second` (its worker group only; its health gate runs the user's
check, which fails on this cluster), `third`. Check mode first shows the batches and each cluster's plan and
changes nothing. The run upgrades the canary, stops at the second's failed gate, and never starts the third
batch: the third cluster is as it was (nodes, instances, journal, lock). The fleet report (JSON, Markdown, SVG)
names every cluster's outcome, batch and time, the failed cluster and why."""

import concurrent.futures
import json
import re
import sys

import pytest
import yaml

import upgrade_helpers as uh
from tests.ansible_run import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FLEET_PLAYBOOK = REPO / "playbooks" / "upgrade_fleet.yml"
RUN_TIMEOUT = 600
SOAK = 3
JOURNAL = "/api/v1/namespaces/kube-system/configmaps/kubenodes-image-upgrade-journal"

# The user's check: fails while the marker file exists (created after the check-mode run).
USER_CHECKS = """\
- name: Smoke test | is the service switched off
  ansible.builtin.stat:
    path: "{marker}"
  register: smoke_marker

- name: Smoke test | the service answers
  ansible.builtin.assert:
    that: not smoke_marker.stat.exists
    fail_msg: "smoke test failed on cluster second: {marker} exists"
"""


def journal(handle):
    found = handle.kube().request("GET", JOURNAL, ok=(200, 404))
    if not found or found.get("kind") != "ConfigMap":
        return None
    return json.loads(found["data"]["journal.json"])


def host_vars(values):
    """The role variables of one cluster as inventory host variables; the fleet gives each its report dir."""
    found = {k: v for k, v in values.items() if k != "rolling_upgrade_report_dir"}
    return found


@pytest.mark.timeout(900)
def test_fleet_canary_then_a_failed_gate_stops_the_later_batch_and_the_report_says_why(fresh_sandbox, tmp_path):
    def cluster(_name):
        handle = fresh_sandbox(clouds=["gcp"])
        values, start = uh.prepare(handle, "gcp", control_planes=1, workers=1, groups=1)
        values["rolling_upgrade_kube"] = uh.least_privilege_auth(handle)
        return handle, values, start

    # The three start side by side: most of a sandbox's start is waiting for its components.
    cluster_names = ("canary", "second", "third")
    with concurrent.futures.ThreadPoolExecutor(len(cluster_names)) as pool:
        clusters = dict(zip(cluster_names, pool.map(cluster, cluster_names)))

    marker = tmp_path / "service-off"
    checks = tmp_path / "checks.yml"
    checks.write_text(USER_CHECKS.format(marker=marker))
    fleet_dir = tmp_path / "fleet-report"
    inventory = {"all": {"children": {"clusters": {"hosts": {}}},
                         # Only the canary's control-plane host "reaches etcd": the role delegates the removal there.
                         "hosts": {"etcd-canary": {"ansible_connection": "local",
                                                   "ansible_python_interpreter": sys.executable}}}}
    hosts = inventory["all"]["children"]["clusters"]["hosts"]
    hosts["canary"] = dict(host_vars(clusters["canary"][1]), rolling_upgrade_etcd_delegate_to="etcd-canary")
    second = host_vars(clusters["second"][1])
    upgraded_second = uh.limit_to_groups(second, clusters["second"][2], ["workers-0"])
    second.update(rolling_upgrade_gate_after="batch", rolling_upgrade_gate_tasks=str(checks), rolling_upgrade_gate_timeout=60)
    hosts["second"] = second
    hosts["third"] = host_vars(clusters["third"][1])
    inventory_path = tmp_path / "fleet.yml"
    inventory_path.write_text(yaml.safe_dump(inventory))
    fleet_vars = {"fleet_soak_seconds": SOAK, "fleet_report_dir": str(fleet_dir)}
    tokens = [values["rolling_upgrade_kube"]["api_key"] for _h, values, _s in clusters.values()]

    def run(log, check=False):
        playbook = uh.PlaybookRun(fleet_vars, tmp_path / log, check=check, playbook=FLEET_PLAYBOOK, inventory=inventory_path)
        try:
            rc = playbook.wait(RUN_TIMEOUT)
        finally:
            playbook.close()
        text = playbook.output()
        for token in tokens:
            assert token not in text, "a cluster's bearer token leaked into the output of %s" % log
        return rc, text

    # Check mode: the batches and each cluster's plan, in batch order; nothing changes anywhere.
    before = {name: uh.world(handle, values) for name, (handle, values, _s) in clusters.items()}
    rc, text = run("check.log", check=True)
    assert rc == 0, text[-6000:]
    assert "Batch 1 of 3 now: canary" in text and "Batch 3 of 3 now: third" in text, text[-6000:]
    assert "1: canary; 2: second; 3: third." in text, text[-6000:]
    # Each cluster's upgrade_step prints its plan (RV check_plan) and any warning, then the task's host line.
    plans = re.findall(r"plan \(check mode, nothing changed\):\n(?:(?!ok: \[).*\n)*?ok: \[(\w+)\]", text)
    assert plans == ["canary", "second", "third"], plans
    for name, (handle, values, _s) in clusters.items():
        assert uh.world(handle, values) == before[name], "check mode changed cluster %s" % name
        assert journal(handle) is None, name
    assert not (fleet_dir / "fleet-upgrade-report.json").exists(), "check mode wrote the fleet report"

    marker.write_text("off\n")
    third_handle, third_values, third_start = clusters["third"]
    third_before = uh.world(third_handle, third_values)
    canary_handle, canary_values, canary_start = clusters["canary"]
    watcher = uh.Watcher(canary_handle, etcd=True)
    watcher.start()
    try:
        rc, text = run("run.log")
    finally:
        watcher.stop()
    assert rc != 0, text[-6000:]

    # The canary finished, its etcd member removed through the delegate named by its host variable.
    watcher.check(canary_start, max_surge=1)
    uh.assert_upgraded(canary_handle, dict(canary_values, rolling_upgrade_report_dir=str(fleet_dir / "canary")), canary_start)
    assert re.search(r"Remove the etcd members of drained control-plane donors \(pass \d+\)\] \*+\nchanged: \[canary -> etcd-canary\]",
                     text), text[-6000:]
    assert journal(canary_handle)["finished"]

    # The second stopped at its gate: what failed, named in the run's last word.
    fatal = uh.fatal_message(text.replace("fatal: [second]", "fatal: [localhost]"))
    assert fatal.startswith("Cluster second (batch 2) failed at task"), fatal
    assert "smoke test failed on cluster second" in fatal and "The later batches do not start (third)" in fatal, fatal
    second_journal = journal(clusters["second"][0])
    assert second_journal["gate_due"] is True and not second_journal.get("finished"), second_journal
    assert [g["outcome"] for g in second_journal["gates"].values()] == ["failed"], second_journal["gates"]
    assert not uh.lease_holder(clusters["second"][0]), "the failed cluster's run lock was not released"
    # Its worker group's one batch was done when the gate failed; its control plane, outside the upgrade, untouched.
    second_handle, _values, second_start = clusters["second"]
    names = {n["metadata"]["name"] for n in uh.nodes(second_handle)}
    [worker_group] = upgraded_second
    assert not set(second_start["groups"][worker_group]) & names and len(names) == len(second_start["node_names"]), names
    assert set(second_start["node_names"]) - set(second_start["groups"][worker_group]) <= names

    # The third batch never started: its cluster is exactly as it was, no journal, no lock.
    assert uh.world(third_handle, third_values) == third_before
    assert journal(third_handle) is None and uh.lease_holder(third_handle) is None
    assert "third" not in re.findall(r"ok: \[(\w+)\]", text), "a task ran on the third cluster"

    # The fleet report: every cluster's outcome, batch and time; the failed one and why; the one not started.
    summary = json.loads((fleet_dir / "fleet-upgrade-report.json").read_text())
    rows = {row["cluster"]: row for row in summary["clusters"]}
    assert summary["outcome"] == "failed" and summary["stopped_after_batch"] == 2, summary
    assert [(rows[n]["batch"], rows[n]["outcome"]) for n in ("canary", "second", "third")] == [
        (1, "succeeded"), (2, "failed"), (3, "not started")], rows
    assert rows["canary"]["nodes_replaced"] == 2 and rows["canary"]["seconds"] > 0, rows["canary"]
    assert "smoke test failed on cluster second" in rows["second"]["cause"], rows["second"]
    assert rows["third"]["cause"] == "not started: batch 2 failed (second)" and rows["third"]["started"] is None
    assert [f["cluster"] for f in summary["failed"]] == ["second"]
    markdown = (fleet_dir / "fleet-upgrade-report.md").read_text()
    assert "| second | 2 | failed |" in markdown and "smoke test failed on cluster second" in markdown, markdown
    assert "| third | 3 | not started |" in markdown and "| canary | 1 | succeeded |" in markdown, markdown
    svg = (fleet_dir / "fleet-upgrade-report.svg").read_text()
    assert svg.startswith("<svg") and "second (batch 2)" in svg and "not started: batch 2 failed" in svg
    # Each cluster that ran has its own report beside the fleet's.
    for name in ("canary", "second"):
        assert (fleet_dir / name / "image-upgrade-report.json").is_file(), name
    assert not (fleet_dir / "third").exists()


@pytest.mark.parametrize("where,value,expected", [
    ("extra", [1, 0], "fleet_batches item 2 is 0, which is no whole number from 1"),
    ("extra", ["150%"], "fleet_batches item 1 is '150%'"),
    # A size ansible-core's serial cannot read at all: refused the same way, not an unexpected exception.
    ("extra", "soon", "fleet_batches item 1 is 'soon', which is no whole number from 1"),
    # serial never sees an inventory variable: the batches it would make are not the ones the play runs.
    ("inventory", [2], "the play's serial did not get fleet_batches. Give fleet_batches (and fleet_hosts) as extra variables"),
])
def test_bad_fleet_batches_are_refused_before_any_cluster_is_touched(tmp_path, where, value, expected):
    """No sandbox: the clusters' kubeconfigs do not exist, so any task that reached a cluster would fail on that."""
    inventory = {"clusters": {"hosts": {"one": {"kubeconfig": str(tmp_path / "none-1")},
                                        "two": {"kubeconfig": str(tmp_path / "none-2")}}}}
    fleet_vars = {"fleet_report_dir": str(tmp_path / "report")}
    if where == "inventory":
        inventory["clusters"]["vars"] = {"fleet_batches": value}
    else:
        fleet_vars["fleet_batches"] = value
    inventory_path = tmp_path / "fleet.yml"
    inventory_path.write_text(yaml.safe_dump(inventory))
    playbook = uh.PlaybookRun(fleet_vars, tmp_path / "run.log", playbook=FLEET_PLAYBOOK, inventory=inventory_path)
    try:
        rc = playbook.wait(300)
    finally:
        playbook.close()
    text = playbook.output()
    assert rc != 0
    fatal = [line for line in text.splitlines() if line.startswith("fatal: [one -> localhost]: FAILED! => ")]
    assert len(fatal) == 1 and expected in json.loads(fatal[0].split("=> ", 1)[1])["msg"], text[-3000:]
    assert "Fleet | the workloads running before" not in text and "kubeconfig" not in text.split("Fleet | the batches]")[1]
    assert not (tmp_path / "report").exists()


def test_a_clusters_credentials_never_appear_in_the_output_even_at_vvv(tmp_path):
    """No sandbox: a kubeconfig that does not exist, next to a token. The cluster's token and cloud secret pass
    through the fleet's own tasks (the variables of each cluster, the failure, the report) and never show."""
    token, secret = "tok-" + "f1ee7" * 8, "sec-" + "c10ud" * 8
    inventory = {"clusters": {"hosts": {"one": {
        "kube": {"kubeconfig": str(tmp_path / "no-kubeconfig"), "api_key": token},
        "provider": "azure", "azure": {"subscription_id": "00000000-0000-0000-0000-000000000000", "client_id": "c", "secret": secret, "tenant": "t"},
        "image": "img"}}}}
    inventory_path = tmp_path / "fleet.yml"
    inventory_path.write_text(yaml.safe_dump(inventory))
    report = tmp_path / "report"
    playbook = uh.PlaybookRun({"fleet_report_dir": str(report), "fleet_soak_seconds": 0}, tmp_path / "run.log",
                              playbook=FLEET_PLAYBOOK, inventory=inventory_path, extra_args=("-vvv",))
    try:
        rc = playbook.wait(300)
    finally:
        playbook.close()
    text = playbook.output()
    assert rc != 0 and "Cluster one (batch 1) failed at task" in text, text[-3000:]
    for path in [tmp_path / "run.log"] + sorted(report.iterdir()):
        content = path.read_text()
        assert token not in content and secret not in content, path
    assert "one" in json.loads((report / "fleet-upgrade-report.json").read_text())["failed"][0]["cluster"]
