"""End to end: examples/site-playbook, the pattern for site-specific playbooks (the collection's modules composed in
tasks repeated with `until`, one replacement at a time, its state in node annotations and the journal), upgrades
the sandbox cluster through the GCP emulator. It is killed with its whole process tree while the control-plane
donor is drained, and started again: the second run finishes the upgrade from what the cluster and the cloud show.
1 control plane and 1 worker (2 replacements, one of each kind: each module call is a process of its own, and
one replacement more would add half a minute on a 2-core machine); the playbook authenticates as the
ServiceAccount bound only to the role's rbac.yml."""

import time

import pytest

import upgrade_helpers as uh
from tests.ansible_run import run_playbook

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLAYBOOK = uh.REPO / "examples" / "site-playbook" / "upgrade.yml"
RUN_TIMEOUT = 300


def site_variables(values):
    """The example's variables for the cluster the sandbox scenario seeded (from its role variables)."""
    return {
        "image": values["rolling_upgrade_image"],
        "provider": values["rolling_upgrade_provider"],
        "gcp": values["rolling_upgrade_gcp"],
        "kube": values["rolling_upgrade_kube"],
        "etcd_ca_cert": values["rolling_upgrade_etcd_ca_cert"],
        "etcd_client_cert": values["rolling_upgrade_etcd_client_cert"],
        "etcd_client_key": values["rolling_upgrade_etcd_client_key"],
        "copy_labels_exclude": values["rolling_upgrade_copy_labels_exclude"],
        # The seeded workloads include bare pods on purpose.
        "drain_force": True,
        # Simulated nodes join and turn Ready in about a second.
        "heir_ready_seconds": 1,
        "poll_seconds": 1,
        "heir_timeout": 120,
        "drain_timeout": 120,
    }


def first_cordon(run, watcher):
    """The watcher's first cordon event while `run` lives (None when the run ended or RUN_TIMEOUT passed)."""
    deadline = time.monotonic() + RUN_TIMEOUT
    while run.proc.poll() is None and time.monotonic() < deadline:
        seen = watcher.wait_event({"cordon"}, 0.0, timeout=0.5)
        if seen:
            return seen
    return None


@pytest.mark.timeout(600)
def test_site_playbook_upgrades_the_cluster_and_resumes_after_a_kill(upgrade_cluster, tmp_path):
    handle, values, start = upgrade_cluster("gcp", control_planes=1, workers=1, groups=1)
    site = site_variables(values)
    [control_plane] = [n for g, names in start["groups"].items() if "control-plane" in g for n in names]
    watcher = uh.Watcher(handle, etcd=True)
    watcher.start()
    try:
        first = uh.PlaybookRun(site, tmp_path / "first.log", playbook=PLAYBOOK)
        try:
            cordoned = first_cordon(first, watcher)
            assert cordoned, "the first run cordoned no node: %s" % first.output()[-6000:]
            # Control plane first: its donor is the first to leave.
            assert cordoned[2] == control_plane, (cordoned, control_plane)
        finally:
            first.kill()
        assert first.proc.returncode != 0, "the first run ended before it was killed: %s" % first.output()[-6000:]
        left = {n["metadata"]["name"] for n in uh.nodes(handle)} & set(start["node_names"])
        assert left == set(start["node_names"]), "the kill came after a replacement finished: %s" % sorted(left)

        second = uh.PlaybookRun(site, tmp_path / "second.log", playbook=PLAYBOOK)
        rc = second.wait(RUN_TIMEOUT)
    finally:
        watcher.stop()
    output = second.output()
    assert rc == 0, output[-6000:]
    token = site["kube"]["api_key"]
    assert token not in first.output() and token not in output, "the bearer token leaked into the output"
    # One heir at a time, and the control plane never below its members, also across the kill.
    watcher.check(start, max_surge=1)
    uh.assert_upgraded(handle, values, start, report=False)
    assert not uh.lease_holder(handle), "the run lock was not released"
    # The second run took the killed run's lock over at once, and finished the control-plane donor the first
    # left cordoned rather than giving it a second heir (watcher.check: at most one instance over the start).
    assert "Delete the Node %s" % control_plane in output, output[-6000:]


# Bad input stops the playbook at its first tasks, before it reads or changes anything, naming the variable, the
# value given and what to give instead. No sandbox: nothing is reached.
@pytest.mark.parametrize("given,expected", [
    ({"provider": "gcpp"}, ['provider is "gcpp"', "one of gcp, azure or aws (-e provider=...)"]),
    ({"image": ""}, ['image is ""', "give the image every node must run"]),
    ({"poll_seconds": 0}, ['poll_seconds is "0"', "a whole number of seconds, at least 1"]),
    ({"heir_timeout": "ten"}, ['heir_timeout is "ten"', "a whole number of seconds, at least 1"]),
])
def test_bad_variables_stop_the_site_playbook_before_it_reads_anything(given, expected):
    variables = dict({"image": "projects/p/global/images/node-v2", "provider": "gcp"}, **given)
    rc, output = run_playbook(PLAYBOOK, extra_vars=variables, timeout=120)
    assert rc != 0
    failed = [result for play in output["plays"] for task in play["tasks"] for result in task["hosts"].values()
              if result.get("failed")]
    # A check made per variable (a loop) fails item by item, each with its own message.
    [message] = [item["msg"] for result in failed for item in result.get("results") or [result] if item.get("failed")]
    for part in expected + ["Nothing was changed"]:
        assert part in message, message
    ran = [task["task"]["name"] for play in output["plays"] for task in play["tasks"]]
    assert set(ran) <= {"Check that image and provider are given", "Check the variables that count seconds"}, ran
