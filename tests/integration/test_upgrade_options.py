"""The role on one GCP sandbox (one control plane, one worker group of two in scope), and for (c) and (d) on the same
cluster on AWS (a second module sandbox, started only for them):

(a) each bad option of issue 13 is refused, in check mode as in a real run, naming the one rule it breaks, before
    anything changes: no Lease, the autoscaler's replicas untouched, no group image changed, no annotation; a
    misspelt role variable and a misspelt playbook variable get a warning with the closest name; a health gate
    whose passing looks in a row cannot fit in its timeout is refused too;
(b) an image family published into mid-run does not change the target: the upgrade resolves the family once and
    records the exact image in its journal; a run killed after the new image was published is resumed onto the
    image it started with; a resumed run asking for another image stops naming rolling_upgrade_new_target;
(c) a pod of kube-system that is not Ready stops the run in its preflight, named, before anything changes - the
    first upgrade_step call (preflight.py), with a health gate too, with the same words - unless
    rolling_upgrade_allow_unready_system_pods; check mode says what a real run would do and plans (GCP and AWS);
(d) on AWS, a health gate opens only after passing looks in a row: it began while a watched pod flapped, and opens
    only rolling_upgrade_gate_looks looks after the pod's last turn to Ready (test_upgrade_gates has it on GCP).
"""

import datetime
import json
import re
import threading
import time

import pytest

import upgrade_helpers as uh
from tests.integration import conftest as fixtures

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 600
SURGE_RULE = "must be a whole number from 1 to 5000 or a percentage of the group from 1% to 100%"
BAD_OPTIONS = [
    (dict(rolling_upgrade_max_surge=0), "rolling_upgrade_max_surge " + SURGE_RULE),
    (dict(rolling_upgrade_max_surge_total=0), "rolling_upgrade_max_surge_total must be a whole number from 1 to 5000"),
    (dict(rolling_upgrade_join_timeout=0), "rolling_upgrade_join_timeout must be a whole number from 1 to 2592000"),
    (dict(rolling_upgrade_max_surge="101%"), "rolling_upgrade_max_surge " + SURGE_RULE),
    (dict(rolling_upgrade_max_surge=10 ** 20), "rolling_upgrade_max_surge " + SURGE_RULE),
    (dict(rolling_upgrade_drain_timeout=-1), "rolling_upgrade_drain_timeout must be a whole number from 1 to 2592000"),
    (dict(rolling_upgrade_annotation_prefix=""), "rolling_upgrade_annotation_prefix must be a DNS subdomain"),
    (dict(rolling_upgrade_gate_looks=0), "rolling_upgrade_gate_looks must be a whole number from 1 to 100"),
]


def _cluster(cloud):
    handle = fixtures._start("kubenodes-options-%s-" % cloud, [cloud])  # pylint: disable=protected-access
    try:
        values, start = uh.prepare(handle, cloud, control_planes=1, workers=2, groups=1)
        upgraded = uh.limit_to_groups(values, start, ["workers-0"])
        yield handle, values, start, upgraded
    finally:
        fixtures._stop(handle)  # pylint: disable=protected-access


@pytest.fixture(scope="module")
def cluster():
    yield from _cluster("gcp")


@pytest.fixture(scope="module")
def cluster_aws():
    """The same cluster on AWS, for the checks that run on a second cloud: started by the first test that needs it."""
    yield from _cluster("aws")


@pytest.fixture(params=["gcp", "aws"])
def either_cluster(request):
    return request.getfixturevalue({"gcp": "cluster", "aws": "cluster_aws"}[request.param])


@pytest.mark.timeout(900)
def test_bad_options_are_refused_naming_the_rule_before_anything_changes(cluster, tmp_path):
    handle, values, _start, _upgraded = cluster
    before = uh.world(handle, values)
    assert before["lease"] is None
    for number, (bad, rule) in enumerate(BAD_OPTIONS):
        for check in (True, False):
            log = tmp_path / ("bad-%d-%s.log" % (number, "check" if check else "run"))
            rc, output = uh.run_upgrade(dict(values, **bad), log, timeout=RUN_TIMEOUT, check=check)
            assert rc != 0, output[-4000:]
            message = uh.fatal_message(output)
            assert message.startswith(rule), (bad, check, message)
            assert message.count(" must be ") == 1, "more than the one rule broken is named: %s" % message
            assert repr(list(bad.values())[0]) in message or str(list(bad.values())[0]) in message, message
            assert "Nothing was changed" in message
            assert "Upgrade steps until every node runs the image" not in output, "it went on: %s" % bad
            assert uh.world(handle, values) == before, "%s (check mode %s) changed something" % (bad, check)
    # A gate whose passing looks in a row cannot fit in its timeout could never open: refused, naming all three.
    slow_gate = dict(values, rolling_upgrade_gate_after="batch",
                     rolling_upgrade_gate_looks=7, rolling_upgrade_gate_look_interval=100,
                     rolling_upgrade_gate_timeout=600)
    rc, output = uh.run_upgrade(slow_gate, tmp_path / "slow-gate.log", timeout=RUN_TIMEOUT, check=True)
    assert rc != 0, output[-4000:]
    assert uh.fatal_message(output).startswith(
        "rolling_upgrade_gate_looks is 7 and rolling_upgrade_gate_look_interval is 100, so a gate needs 600s of passing "
        "looks, but rolling_upgrade_gate_timeout is 600: it could never open; raise rolling_upgrade_gate_timeout, or "
        "lower rolling_upgrade_gate_looks or rolling_upgrade_gate_look_interval. Nothing was changed")
    assert uh.world(handle, values) == before
    # A gate tasks file that does not exist: refused at the start, naming the variable, the path and where it was
    # looked for (issue 28: found only at the first gate, after the control plane was replaced).
    missing = tmp_path / "checks" / "smoke.yml"
    rc, output = uh.run_upgrade(dict(values, rolling_upgrade_gate_after="batch", rolling_upgrade_gate_tasks=str(missing)),
                                tmp_path / "missing-gate-tasks.log", timeout=RUN_TIMEOUT)
    assert rc != 0, output[-4000:]
    assert uh.fatal_message(output).startswith(
        "rolling_upgrade_gate_tasks names the tasks file '%s', which does not exist (looked for it at %s)" % (missing, missing))
    assert "Nothing was changed" in uh.fatal_message(output)
    assert "Upgrade steps until every node runs the image" not in output
    assert uh.world(handle, values) == before
    # One that is no tasks file (YAML that does not parse, a mapping): refused at the start too, in check mode.
    missing.parent.mkdir()
    for content, why in (("- name: [unclosed\n", "which is not a tasks file: "),
                         ("name: a task without its list\n", "it holds a mapping, not a list of tasks")):
        missing.write_text(content)
        rc, output = uh.run_upgrade(dict(values, rolling_upgrade_gate_after="batch", rolling_upgrade_gate_tasks=str(missing)),
                                    tmp_path / "bad-gate-tasks.log", timeout=RUN_TIMEOUT, check=True)
        assert rc != 0, output[-4000:]
        message = uh.fatal_message(output)
        assert message.startswith("rolling_upgrade_gate_tasks names '%s' (%s), which is not a tasks file: " % (missing, missing))
        assert why in message and "Nothing was changed" in message, message
    assert uh.world(handle, values) == before
    # Misspelt variables: a warning with the closest name, also for a role variable's short name (max_unavailable);
    # check mode then plans and changes nothing.
    rc, output = uh.run_upgrade(dict(values, rolling_upgrade_max_surj=2, max_surj=2, max_unavailable=1),
                                tmp_path / "misspelt.log", timeout=RUN_TIMEOUT, check=True)
    assert rc == 0, output[-4000:]
    flat = " ".join(output.split())
    assert "unknown variable rolling_upgrade_max_surj is ignored; did you mean rolling_upgrade_max_surge?" in flat
    assert "extra variable max_surj is not a variable of this playbook" in flat and "did you mean max_surge?" in flat
    assert "extra variable max_unavailable is not a variable of this playbook" in flat
    assert "did you mean rolling_upgrade_max_unavailable?" in flat
    assert uh.world(handle, values) == before


def _settled_world(handle, values, timeout=60):
    """uh.world once it stays the same for 3 s (what a killed run's last module call did has landed)."""
    deadline = time.monotonic() + timeout
    seen = uh.world(handle, values)
    while True:
        time.sleep(3)
        now = uh.world(handle, values)
        if now == seen or time.monotonic() > deadline:
            return now
        seen = now


def _instances_on(handle, image):
    return [i for i in uh.live_instances(handle) if i["image"].lower() == image.lower()]


@pytest.mark.timeout(1200)
def test_an_image_published_into_the_family_mid_run_does_not_change_the_target(cluster, tmp_path):
    handle, values, start, upgraded = cluster
    admin = handle.cloud("gcp")
    first = admin.create_image("node-fam-1", family="node-fam")
    family = first.rsplit("/", 1)[0] + "/family/node-fam"
    by_family = dict(values, rolling_upgrade_image=family)

    # Run 1: the family resolves to node-fam-1. Once a heir runs it, node-fam-2 is published, and the run is killed.
    run = uh.PlaybookRun(by_family, tmp_path / "first.log")
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while not _instances_on(handle, first):
            assert run.proc.poll() is None, run.output()[-4000:]
            assert time.monotonic() < deadline, run.output()[-4000:]
            time.sleep(0.5)
        second = admin.create_image("node-fam-2", family="node-fam")
        time.sleep(5)
    finally:
        run.kill()
    assert "Target image %s (%s)" % (first, family) in " ".join(run.output().split())

    # Another image on the unfinished upgrade: refused, naming the option, before anything changes.
    before = _settled_world(handle, values)
    rc, output = uh.run_upgrade(dict(values, rolling_upgrade_image=second), tmp_path / "other.log", timeout=RUN_TIMEOUT)
    assert rc != 0
    message = uh.fatal_message(output)
    assert "rolling_upgrade_new_target" in message and first in message and second in message, message
    assert uh.world(handle, values) == before
    assert not _instances_on(handle, second)

    # Run 2 resumes with the family reference: every heir gets node-fam-1, none node-fam-2.
    rc, output, watcher = uh.run_watched(handle, by_family, tmp_path / "resumed.log", timeout=RUN_TIMEOUT)
    assert rc == 0, output[-6000:]
    flat = " ".join(output.split())
    assert "now names %s, but this upgrade keeps %s" % (second, first) in flat, output[-6000:]
    watcher.check(start, max_surge=1)
    uh.assert_upgraded(handle, dict(by_family, rolling_upgrade_image=first), start, groups=upgraded)
    assert not _instances_on(handle, second)
    assert set(uh.group_images(values).values()) >= {first}
    assert second not in uh.group_images(values).values()


STUCK_POD = "stuck-addon"
STUCK = "kube-system/%s on no node (Pending: not scheduled)" % STUCK_POD
REFUSAL_END = ("The upgrade does not start while a kube-system pod is not Ready (rolling_upgrade_allow_unready_system_pods "
               "is false): DNS, the network plugin, kube-proxy or the control plane may be short already, and every "
               "drain takes more away. Nothing was changed; make these pods Ready (or delete the ones no longer needed) "
               "and run again, or set rolling_upgrade_allow_unready_system_pods: true to upgrade anyway")


@pytest.mark.timeout(900)
def test_a_kube_system_pod_not_ready_stops_the_run_before_anything_changes_unless_allowed(either_cluster, tmp_path):
    handle, values, _start, _upgraded = either_cluster
    kube = handle.kube()
    before, members = uh.world(handle, values), uh.etcd_member_names(handle)
    # A pod no scheduler takes (its schedulerName names none), so Pending for good, as an add-on's that fits nowhere.
    stuck = uh.unscheduled_pod(handle, "kube-system", STUCK_POD)
    try:
        # The first upgrade_step call's start judges the read, with a gate or without. Both refuse, naming the pod,
        # the rule, the option and what to do.
        said = {}
        for label, extra in (("step", {}), ("gate", dict(rolling_upgrade_gate_after="batch"))):
            rc, output = uh.run_upgrade(dict(values, **extra), tmp_path / ("%s.log" % label), timeout=RUN_TIMEOUT)
            assert rc != 0, output[-4000:]
            said[label] = set(re.findall(r"\d+ kube-system pod\(s\) not Ready: .*?" + re.escape(REFUSAL_END),
                                         uh.fatal_message(output)))
            assert len(said[label]) == 1 and STUCK in list(said[label])[0], (label, output[-4000:])
            assert uh.world(handle, values) == before, "the %s preflight's refusal changed something" % label
        assert said["step"] == said["gate"]
        # Check mode says what a real run would do, and goes on to plan.
        rc, output = uh.run_upgrade(values, tmp_path / "check.log", timeout=RUN_TIMEOUT, check=True)
        assert rc == 0, output[-4000:]
        flat = " ".join(output.split())
        assert "Check mode: a real run would stop here: " in flat and STUCK in flat and REFUSAL_END in flat
        assert "plan (check mode, nothing changed):" in output and "the next pass: " in output
        # Allowed: said in a warning, and the run goes on (check mode here: it changes nothing).
        allowed = dict(values, rolling_upgrade_allow_unready_system_pods=True)
        rc, output = uh.run_upgrade(allowed, tmp_path / "allowed.log", timeout=RUN_TIMEOUT, check=True)
        assert rc == 0, output[-4000:]
        flat = " ".join(output.split())
        assert STUCK in flat and ("rolling_upgrade_allow_unready_system_pods is true, so the upgrade goes on" in flat)
        assert "Check mode: a real run would stop here" not in flat
        assert uh.world(handle, values) == before and uh.etcd_member_names(handle) == members
    finally:
        kube.request("DELETE", stuck, {"gracePeriodSeconds": 0}, ok=(200, 202, 404))


JOURNAL = "/api/v1/namespaces/kube-system/configmaps/kubenodes-image-upgrade-journal"
GATE_LOOKS, GATE_LOOK_INTERVAL = 3, 2
READY_FOR, NOT_READY_FOR, FLAP_AFTER_GATE = 1.0, 3.0, 8.0


def _stamp(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@pytest.mark.timeout(900)
def test_a_gate_opens_only_after_passing_looks_in_a_row_on_aws(cluster_aws, tmp_path):
    """Issue 25 item 7 on a second cloud (test_upgrade_gates has it on GCP), on the kube-system test's AWS sandbox:
    the group of 2 workers upgraded with a gate after each batch watching a namespace whose one pod flaps (Ready 1 s,
    not Ready 3 s) until FLAP_AFTER_GATE seconds after the first gate's checks began, then Ready for good.
    Passing looks 2 s apart can never be 3 in a row while it flaps, so the first gate, which began while it flapped,
    opens only 2 looks after the pod's last turn to Ready (on its first passing look it would open during a flap).
    Nodes, instances per group and etcd members before and after; the report's counts (assert_upgraded)."""
    handle, values, start, upgraded = cluster_aws
    kube = handle.kube()
    namespace = "flapping"
    pod = uh.unscheduled_pod(handle, namespace, "flapper", new_namespace=True)

    def set_ready(ready):
        uh.set_pod_ready(handle, pod, ready)

    def journal():
        found = kube.request("GET", JOURNAL, ok=(200, 404))
        return json.loads(found["data"]["journal.json"]) if (found.get("data") or {}).get("journal.json") else {}

    stop, last_ready = threading.Event(), []

    def flap():
        while not stop.is_set():
            set_ready(True)
            time.sleep(READY_FOR)
            set_ready(False)
            stop.wait(NOT_READY_FOR)
        # Not Ready for longer than a look interval before Ready for good, whenever the stop came: a look of the gate
        # then fails just before, and its passing looks in a row can only begin at last_ready.
        set_ready(False)
        time.sleep(GATE_LOOK_INTERVAL + 1)
        last_ready.append(time.time())
        set_ready(True)

    members = uh.etcd_member_names(handle)
    gated = dict(values, rolling_upgrade_gate_after="batch", rolling_upgrade_gate_namespaces=["kube-system", namespace],
                 rolling_upgrade_gate_looks=GATE_LOOKS, rolling_upgrade_gate_look_interval=GATE_LOOK_INTERVAL,
                 rolling_upgrade_gate_timeout=120)
    set_ready(False)
    flapper = threading.Thread(target=flap, daemon=True)
    flapper.start()
    watcher = uh.Watcher(handle, etcd=True)
    watcher.start()
    run = uh.PlaybookRun(gated, tmp_path / "gated.log")
    try:
        # The gate is recorded as due when its checks begin (upgrade_step runs them).
        assert run.wait_for(lambda _text: journal().get("gate_due") is True, RUN_TIMEOUT, "the first gate"), \
            run.output()[-4000:]
        time.sleep(FLAP_AFTER_GATE)
        stop.set()
        flapper.join(30)
        rc = run.wait(RUN_TIMEOUT)
    finally:
        stop.set()
        run.close()
        watcher.stop()
    output = run.output()
    assert rc == 0, output[-6000:]
    gates = [journal()["gates"][key] for key in sorted(journal()["gates"])]
    print("pod Ready for good at %s; gates %s" % (last_ready, [(g["started"], g["ended"]) for g in gates]))
    assert [g["outcome"] for g in gates] == ["passed", "passed"], gates
    # The first gate looked while the pod flapped, and opened only GATE_LOOKS looks in a row after its last turn to Ready.
    assert _stamp(gates[0]["started"]) < last_ready[0] - NOT_READY_FOR, (gates[0], last_ready)
    assert _stamp(gates[0]["ended"]) >= last_ready[0] + (GATE_LOOKS - 1) * GATE_LOOK_INTERVAL - 1, (gates[0], last_ready)
    watcher.check(start, max_surge=1)
    uh.assert_upgraded(handle, gated, start, groups=upgraded)
    assert uh.etcd_member_names(handle) == members
