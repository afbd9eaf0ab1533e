"""The health gate between batches: the pure checks (module_utils/gate.py), their record in the journal and the
report (report.merge, report.gate_rows, render_markdown), and the executor's hook (gate_due, creations held
until the batch in flight finished) against the in-memory world."""

import copy
import datetime

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core, gate, report
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import journal as journal_store

from core_world import NEW, OLD, World, group

NOW = datetime.datetime(2026, 12, 2, 3, 0, 0, tzinfo=datetime.timezone.utc).timestamp()


def stamp(seconds_ago):
    return datetime.datetime.fromtimestamp(NOW - seconds_ago, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name, ready="True", since=3600, deleting=False):
    metadata = {"name": name}
    if deleting:
        metadata["deletionTimestamp"] = stamp(1)
    return {"metadata": metadata, "status": {"conditions": [
        {"type": "Ready", "status": ready, "reason": "KubeletReady" if ready == "True" else "KubeletNotReady",
         "lastTransitionTime": stamp(since)}]}}


def pod(name, namespace="default", phase="Running", ready="True", owner=None, scheduled=None):
    metadata = {"name": name, "namespace": namespace}
    if owner:
        metadata["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    conditions = [{"type": "Ready", "status": ready}]
    if scheduled:
        conditions.append({"type": "PodScheduled", "status": "False", "reason": scheduled})
    return {"metadata": metadata, "status": {"phase": phase, "conditions": conditions}}


def by_name(checks):
    return {c["name"]: c for c in checks}


def test_a_healthy_soaked_cluster_passes_every_check():
    pods = [pod("dns-1", "kube-system", owner=("ReplicaSet", "dns")), pod("web-1", owner=("ReplicaSet", "web"))]
    checks = gate.evaluate([node("a"), node("b", since=120)], pods, gate.running_workloads(pods), 60, NOW)
    assert [c["name"] for c in checks] == list(gate.CHECKS)
    assert all(c["passed"] for c in checks), checks


def test_a_node_not_ready_fails_naming_it_and_a_deleting_one_does_not_count():
    checks = by_name(gate.evaluate([node("a"), node("b", ready="False"), node("gone", ready="False", deleting=True)],
                                   [], [], 0, NOW))
    assert not checks["nodes_ready"]["passed"]
    assert "b (Ready=False: KubeletNotReady)" in checks["nodes_ready"]["detail"]
    assert "gone" not in checks["nodes_ready"]["detail"]
    assert not gate.check_nodes_ready([])["passed"]


def test_system_pods_must_be_running_and_ready_but_finished_ones_are_left_out():
    pods = [pod("proxy", "kube-system", ready="False"), pod("setup", "kube-system", phase="Pending"),
            pod("job", "kube-system", phase="Succeeded", ready="False"), pod("app", "default", ready="False")]
    check = gate.check_system_pods_ready(pods, ["kube-system"])
    assert not check["passed"]
    assert "kube-system/proxy (Running, not Ready)" in check["detail"]
    assert "kube-system/setup (Pending)" in check["detail"]
    assert "job" not in check["detail"] and "app" not in check["detail"]


def test_a_workload_that_ran_before_the_batch_with_a_pending_pod_now_fails_by_its_controller():
    before = gate.running_workloads([pod("web-abc", owner=("ReplicaSet", "web-5d")), pod("db-0", owner=("StatefulSet", "db")),
                                     pod("bare"), pod("starting", phase="Pending", owner=("ReplicaSet", "new"))])
    assert before == ["default/Pod/bare", "default/ReplicaSet/web-5d", "default/StatefulSet/db"]
    # The evicted pod's replacement has a new name: it counts by its ReplicaSet.
    now = [pod("web-xyz", phase="Pending", owner=("ReplicaSet", "web-5d"), scheduled="Unschedulable"),
           pod("starting-2", phase="Pending", owner=("ReplicaSet", "new"))]
    check = gate.check_no_new_pending(now, before)
    assert not check["passed"]
    assert "default/web-xyz (of ReplicaSet/web-5d, Unschedulable)" in check["detail"]
    assert "starting-2" not in check["detail"]   # its workload did not run before the batch
    assert gate.check_no_new_pending(now, None)["passed"]   # no baseline: nothing to compare with


def test_soak_counts_from_the_last_ready_transition():
    nodes = [node("old", since=3600), node("heir", since=20), node("down", ready="False", since=1)]
    check = gate.check_soak(nodes, 60, NOW)
    assert not check["passed"] and check["wait"] == 40
    assert "node heir turned Ready at %s; 40s left" % stamp(20) in check["detail"]
    assert gate.check_soak(nodes, 20, NOW)["passed"]
    assert gate.check_soak(nodes, 0, NOW) == dict(name="soak", passed=True, wait=0,
                                                  detail="no soak (rolling_upgrade_soak_seconds is 0)")


def test_track_keeps_the_time_each_check_passed_for_good():
    seconds = {}
    gate.track(seconds, [dict(name="a", passed=True), dict(name="b", passed=False)], 0)
    gate.track(seconds, [dict(name="a", passed=False), dict(name="b", passed=True)], 5)
    gate.track(seconds, [dict(name="a", passed=True), dict(name="b", passed=True)], 9)
    assert seconds == {"a": 9, "b": 5}
    assert gate.final_seconds({"a": None, "b": 2}, 30) == {"a": 30, "b": 2}


def test_the_failure_message_names_each_failing_check_the_option_and_what_to_do():
    checks = gate.evaluate([node("b", ready="False")], [], [], 0, NOW)
    message = gate.failure_message(checks, 61.2, 60)
    assert message.startswith("health gate failed: after 61s (rolling_upgrade_gate_timeout is 60s) nodes_ready: ")
    assert "system_pods_ready" not in message
    assert "resumable" in message and "runs this gate first" in message


def test_describe_lists_the_gates():
    lines = gate.describe(30, ["kube-system"], "/srv/checks.yml", "batch", 600)
    assert lines == ["after each batch, within 600s: every node Ready",
                     "after each batch, within 600s: the pods of kube-system Ready",
                     "after each batch, within 600s: no pod that was Running before the batch Pending",
                     "after each batch, within 600s: soak of 30s since the last node turned Ready",
                     "after each batch, within 600s: your tasks file /srv/checks.yml"]
    assert len(gate.describe(0, ["kube-system"], "", "replacement", 600)) == 3


def test_the_journal_keeps_every_gate_and_the_report_shows_the_time_in_each():
    journal = report.new_journal("img", "2026-12-02T03:00:00Z")
    report.merge(journal, {"gate_baseline": ["default/ReplicaSet/web"]})
    report.merge(journal, {"gate_due": True, "gates": {"2026-12-02T03:10:00Z": {"after": "batch", "started": "2026-12-02T03:10:00Z"}}})
    assert journal["gate_due"] is True
    done = {"2026-12-02T03:10:00Z": {"outcome": "passed", "ended": "2026-12-02T03:10:40Z",
                                     "seconds": {"nodes_ready": 0, "soak": 38.5, "user_tasks": 1.5}}}
    report.merge(journal, {"gate_due": False, "gate_baseline": ["default/ReplicaSet/web-2"], "gates": done})
    report.merge(journal, {"gates": done})   # recorded twice: the same
    report.merge(journal, {"gate_due": True, "gates": {"2026-12-02T03:20:00Z": {
        "started": "2026-12-02T03:20:00Z", "after": "batch", "outcome": "failed", "ended": "2026-12-02T03:30:00Z",
        "seconds": {"soak": 0, "user_tasks": 2}, "failure": "health gate failed: your tasks file ..."}}})
    assert journal["gate_due"] is True and journal["gate_baseline"] == ["default/ReplicaSet/web-2"]
    rows = report.summarize(journal)["gates"]
    assert [(r["outcome"], r["total_seconds"]) for r in rows] == [("passed", 40), ("failed", 600)]
    assert rows[0]["seconds"] == {"nodes_ready": 0, "soak": 38.5, "user_tasks": 1.5}
    text = report.render_markdown(report.summarize(journal))
    assert "| 1 | 2026-12-02T03:10:00Z | batch | passed | 40s | 0s | - | - | 38s | 1s |" in text
    assert "Gate 2 failed: health gate failed: your tasks file ..." in text
    assert "Health gates" not in report.render_markdown(report.summarize(report.new_journal("img", None)))


# -- the executor's hook ---------------------------------------------------------------------------------

def opts(**kw):
    kw.setdefault("image", NEW.lower())
    return core.Options(**kw)


def run_until_gate(ex, w, looks=40):
    for _look in range(looks):
        result = ex.run_slice(seconds=30)
        if result["gate_due"] or result["done"]:
            return result
        w.tick()
    raise AssertionError("no gate and not done after %d slices" % looks)


def test_with_gates_after_batches_no_heir_is_created_until_the_batch_finished_and_the_gate_ran():
    w = World([group("G1")])
    for index in range(4):
        w.add_node("old-%d" % index, "G1", OLD)
    ex = w.executor(opts(max_surge=2), gate_after="batch")
    first = run_until_gate(ex, w)
    assert first["gate_due"] and not first["done"]
    # The batch: two heirs, both replacements finished, and none created after the first one finished.
    assert len(w.created) == 2 and sum(1 for n in w.nodes if n.startswith("old-")) == 2
    assert not first["facts"]["budget"]["in_flight"]
    # The role ran the gate: the next slice starts the next batch.
    second = run_until_gate(ex, w)
    assert second["gate_due"] and len(w.created) == 4
    last = run_until_gate(ex, w)
    assert last["done"] and not last["gate_due"] and not any(n.startswith("old-") for n in w.nodes)


def test_without_gates_the_next_heir_follows_the_first_finished_replacement():
    w = World([group("G1")])
    for index in range(4):
        w.add_node("old-%d" % index, "G1", OLD)
    ex = w.executor(opts(max_surge=2))
    created_at_first_finish = None
    for _look in range(200):   # pass by pass: a slice goes on past a finished replacement
        result = ex.run_pass()
        assert ex._gate_due(result, result["facts"]) is False   # pylint: disable=protected-access
        if result["finished"] and created_at_first_finish is None:
            created_at_first_finish = len(w.created)
        if result["facts"]["done"]:
            break
        if not result["moved"]:
            w.tick()
    assert result["facts"]["done"]
    assert created_at_first_finish == 2 and len(w.created) == 4
    assert ex.run_slice(seconds=30)["done"]


def test_with_gates_after_each_replacement_every_finish_hands_the_gate_back():
    w = World([group("G1")])
    for index in range(2):
        w.add_node("old-%d" % index, "G1", OLD)
    ex = w.executor(opts(max_surge=1), gate_after="replacement")
    gates = 0
    for _look in range(60):
        result = ex.run_slice(seconds=30)
        if result["gate_due"]:
            gates += 1
            assert result["finished"], "a gate is due only after a finished replacement"
        if result["done"]:
            break
        w.tick()
    assert result["done"] and gates == 2


def _holding_back(w, held):
    """The executor's sleep: time passes, but the heir of the last of two paired donors stays not Ready (so its
    drain waits and the batch is part-finished). `held` ([donor name]) records which donor that is."""
    def sleep(_seconds):
        w.tick()
        heirs = {n: w.nodes[n]["metadata"]["annotations"].get(core.DEFAULT_PREFIX + "/heir") for n in sorted(w.nodes)
                 if n.startswith("old-")}
        paired = [n for n, heir in heirs.items() if heir]
        if not held and len(paired) == 2:
            held.append(paired[-1])
        if held and heirs.get(held[0]) in w.nodes:
            w.nodes[heirs[held[0]]]["status"]["conditions"][0]["status"] = "False"
    return sleep


def test_a_gate_owed_when_a_run_is_killed_mid_batch_holds_the_resumed_runs_heirs_until_the_gate_ran():
    """A batch of two, one finished, the other in flight: the gate is owed and recorded at once; the run is killed
    (its executor and memory gone); the resumed run's executor, told by the journal, creates no heir until the
    batch finished and hands the gate back. Told nothing, it would create the next heir at once."""
    w = World([group("G1")])
    for index in range(3):
        w.add_node("old-%d" % index, "G1", OLD)
    ex = w.executor(opts(max_surge=2), gate_after="batch")
    recorded, held = [], []
    ex.record_gate_owed = lambda: recorded.append(len(w.created))
    ex.sleep = _holding_back(w, held)
    for _look in range(20):
        result = ex.run_slice(seconds=30)
        if result["finished"]:
            break
        ex.sleep(0)
    assert held and result["finished"] and not result["gate_due"] and held[0] in w.nodes, (result["finished"], held)
    assert ex.gate_owed and recorded == [2] and len(w.created) == 2
    forgetful = copy.deepcopy(w)

    resumed = w.executor(opts(max_surge=2), gate_after="batch", gate_owed=True)
    due = run_until_gate(resumed, w)
    assert due["gate_due"] and held[0] not in w.nodes and len(w.created) == 2, (held, w.created)
    # The gate ran (the role): the next batch begins.
    after = run_until_gate(resumed, w)
    assert len(w.created) == 3 and after["gate_due"]

    # Without the journal's word the resumed run creates the third heir while the batch is still in flight.
    blind = forgetful.executor(opts(max_surge=2), gate_after="batch")
    blind.run_pass()
    assert len(forgetful.created) == 3 and held[0] in forgetful.nodes


def test_a_replacement_finished_by_a_run_cut_off_before_its_journal_still_owes_the_gate():
    """A run deletes the donor's Node and fails (or is killed) before its pass ends (run_pass alone: no _gate_due
    after it): the gate was journaled as owed before the deletions, so the next run hands it back before the next
    heir. (Issue 28: it was owed only after the pass, and a failure at the Node's deletion skipped the gate.)"""
    w = World([group("G1")])
    for index in range(2):
        w.add_node("old-%d" % index, "G1", OLD)
    cut_off = w.executor(opts(max_surge=1), gate_after="batch")
    recorded = []
    cut_off.record_gate_owed = lambda: recorded.append(sorted(w.nodes))
    for _look in range(200):
        result = cut_off.run_pass()
        if result["finished"]:
            break
        if not result["moved"]:
            w.tick()
    assert result["finished"] and len(w.created) == 1
    assert len(recorded) == 1 and set(result["finished"]) <= set(recorded[0]), recorded   # before the deletion
    resumed = w.executor(opts(max_surge=1), gate_after="batch", gate_owed=True)
    due = resumed.run_slice(seconds=30)
    assert due["gate_due"] and len(w.created) == 1, (due["facts"].get("donors_gone"), w.created)


def test_a_gate_owed_is_ignored_without_gates_and_in_check_mode():
    w = World([group("G1")])
    w.add_node("old-0", "G1", OLD)
    assert w.executor(opts(), gate_owed=True).gate_owed is False
    first = w.executor(opts(), gate_owed=True).run_slice(seconds=30)
    assert len(w.created) == 1 and first["gate_due"] is False
    assert w.executor(opts(), gate_after="batch", gate_owed=True, check_mode=True).run_slice()["gate_due"] is False


def test_the_journal_keeps_a_gate_owed_until_the_gate_passed():
    journal = report.new_journal("img", "2026-12-02T03:00:00Z")
    assert not journal_store.gate_owed(journal) and not journal_store.gate_owed(None)
    report.merge(journal, {"gate_owed": True})
    report.merge(journal, {"passes": 4, "nodes": {}})
    assert journal_store.gate_owed(journal)
    report.merge(journal, {"gate_due": True})
    assert journal_store.gate_owed(journal)
    report.merge(journal, {"gate_due": False, "gate_owed": False})
    assert not journal_store.gate_owed(journal)
    assert not journal_store.gate_owed({"gate_owed": "yes"})


def test_check_mode_never_hands_a_gate_back():
    w = World([group("G1")])
    w.add_node("old-0", "G1", OLD)
    result = w.executor(opts(), gate_after="batch", check_mode=True).run_slice()
    assert result["gate_due"] is False and not w.created


def test_the_role_refuses_bad_gate_variables_naming_each():
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import validate

    cases = {"rolling_upgrade_gate_after": "always", "rolling_upgrade_soak_seconds": -5,
             "rolling_upgrade_gate_timeout": 0, "rolling_upgrade_gate_namespaces": ["kube-system", ""]}
    for name, value in cases.items():
        problems = validate.check({name: value}, validate.ROLE_RULES)
        assert len(problems) == 1 and problems[0].startswith(name + " must") and repr(value) in problems[0], problems
    assert not validate.check({"rolling_upgrade_gate_after": "batch", "rolling_upgrade_soak_seconds": 0,
                               "rolling_upgrade_gate_timeout": 600}, validate.ROLE_RULES)


# -- consecutive passing looks (issue 25 item 7) -----------------------------------------------------------------

class Clock:
    """A fake clock and sleep: each look is the next of `sequence` (True: every check passes, False: nodes_ready
    fails), and what the gate slept is recorded."""

    def __init__(self, sequence):
        self.now, self.sequence, self.slept, self.looked_at = 0.0, list(sequence), [], []

    def look(self):
        healthy = self.sequence.pop(0) if len(self.sequence) > 1 else self.sequence[0]
        self.looked_at.append(self.now)
        nodes = [node("a", ready="True" if healthy else "False", since=3600)]
        return gate.evaluate(nodes, [], [], 0, NOW), "pods read"

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def wait(sequence, looks=3, look_interval=10, timeout=600, check_mode=False):
    clock = Clock(sequence)
    return gate.wait(clock.look, clock.clock, clock.sleep, timeout, 5, looks, look_interval, check_mode), clock


def test_a_flapping_cluster_does_not_open_the_gate_until_it_passed_the_looks_in_a_row():
    # Healthy, healthy, sick, healthy, sick, then healthy for good: each failing look starts the count again.
    result, clock = wait([True, True, False, True, False, True, True, True, False])
    assert result["passed"] and result["streak"] == 3 and result["looked"] == 8
    # Passing looks are look_interval apart, failing ones the poll interval.
    assert clock.slept == [10, 10, 5, 10, 5, 10, 10]
    assert result["read"] == "pods read" and "message" not in result
    # The gate opened 20 s (two intervals) after the first look of the last healthy run, not at it.
    assert result["waited"] == clock.looked_at[-1] == clock.looked_at[5] + 20
    # nodes_ready passed for good at the sixth look.
    assert result["seconds"]["nodes_ready"] == clock.looked_at[5]


def test_with_one_look_the_first_passing_look_opens_the_gate_as_before():
    result, clock = wait([False, True, False], looks=1)
    assert result["passed"] and result["looked"] == 2 and clock.slept == [5]


def test_check_mode_looks_once_and_says_how_that_look_went():
    assert wait([True], check_mode=True)[0]["passed"] is True
    result, clock = wait([False], check_mode=True)
    assert result["passed"] is False and result["looked"] == 1 and clock.slept == [] and "message" not in result


def test_a_gate_that_flaps_until_its_timeout_fails_saying_so_and_naming_the_options():
    result, clock = wait([True, False], looks=2, timeout=60)
    assert not result["passed"] and clock.now >= 60
    message = result["message"]
    assert message.startswith("health gate failed: after 60s (rolling_upgrade_gate_timeout is 60s) nodes_ready: ")
    assert ("every check passed at times, but at most 1 look(s) in a row of the 2 rolling_upgrade_gate_looks asks: "
            "the cluster flaps") in message
    # A last look that passed, short of the looks in a row: said so, and no check named as failing.
    # Looks at 0, 5, ... 20 s fail, at 25 s passes; the next is at the timeout (30 s), not 10 s later.
    result, clock = wait([False] * 5 + [True], looks=3, look_interval=10, timeout=30)
    assert clock.looked_at[-2:] == [25, 30]
    assert result["streak"] == 2 and result["message"].startswith(
        "health gate failed: after 30s (rolling_upgrade_gate_timeout is 30s) every check passed at the last 2 look(s) "
        "in a row, short of the 3 in a row rolling_upgrade_gate_looks asks, 10s apart "
        "(rolling_upgrade_gate_look_interval). The run stops here")


def test_the_looks_are_listed_with_the_gates_and_must_fit_in_the_timeout():
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import validate

    assert gate.describe(0, ["kube-system"], "", "batch", 600, 2, 10)[-1] == (
        "after each batch, within 600s: every check passing at 2 looks in a row, 10s apart (a failing look starts the "
        "count again)")
    assert validate.gate_looks_fit({"rolling_upgrade_gate_looks": 2, "rolling_upgrade_gate_look_interval": 10,
                                    "rolling_upgrade_gate_timeout": 600}) is None
    assert validate.gate_looks_fit({"rolling_upgrade_gate_looks": "61", "rolling_upgrade_gate_look_interval": 10,
                                    "rolling_upgrade_gate_timeout": 600}) == (
        "rolling_upgrade_gate_looks is 61 and rolling_upgrade_gate_look_interval is 10, so a gate needs 600s of passing "
        "looks, but rolling_upgrade_gate_timeout is 600: it could never open; raise rolling_upgrade_gate_timeout, or "
        "lower rolling_upgrade_gate_looks or rolling_upgrade_gate_look_interval")
    # The role checks them together only with a gate.
    slow = {"rolling_upgrade_gate_looks": 3, "rolling_upgrade_gate_look_interval": 60, "rolling_upgrade_gate_timeout": 120}
    assert validate.role_gate_problems(dict(slow, rolling_upgrade_gate_after="none")) == []
    assert validate.role_gate_problems(slow) == []
    [problem] = validate.role_gate_problems(dict(slow, rolling_upgrade_gate_after="batch"))
    assert problem.startswith("rolling_upgrade_gate_looks is 3 and rolling_upgrade_gate_look_interval is 60, so a gate "
                              "needs 120s of passing looks, but rolling_upgrade_gate_timeout is 120")
    for name, value in (("rolling_upgrade_gate_looks", 0), ("rolling_upgrade_gate_look_interval", 0)):
        problems = validate.check({name: value}, validate.ROLE_RULES)
        assert len(problems) == 1 and problems[0].startswith(name + " must be a whole number from 1 to"), problems


def test_the_role_refuses_a_gate_with_delete_first_and_a_soak_or_tasks_file_without_a_gate():
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import validate

    [problem] = validate.role_gate_problems({"rolling_upgrade_gate_after": "batch", "rolling_upgrade_max_unavailable": 1})
    assert problem.startswith("rolling_upgrade_gate_after is batch, but rolling_upgrade_max_unavailable is 1: health "
                              "gates do not work with delete-first replacements yet"), problem
    assert problem.endswith("set rolling_upgrade_gate_after to none, or rolling_upgrade_max_unavailable to 0")
    for unavailable in (0, "0", "0%", " 0 "):
        assert validate.role_gate_problems({"rolling_upgrade_gate_after": "replacement",
                                            "rolling_upgrade_max_unavailable": unavailable}) == [], unavailable
    assert validate.role_gate_problems({"rolling_upgrade_gate_after": "batch",
                                        "rolling_upgrade_max_unavailable": "25%"})
    for given in ({"rolling_upgrade_soak_seconds": 30}, {"rolling_upgrade_soak_seconds": "30"},
                  {"rolling_upgrade_gate_tasks": "checks/smoke.yml"}):
        [problem] = validate.role_gate_problems(dict(given, rolling_upgrade_gate_after="none", rolling_upgrade_canary=False))
        assert "but rolling_upgrade_gate_after is none (and rolling_upgrade_canary is off), so nothing would run or " \
               "time them: set rolling_upgrade_gate_after to batch or replacement" in problem, problem
    # With the canary on (its default), the soak times each group's canary heir: no gate needed.
    for canary in (None, True, "true", "yes"):
        given = {"rolling_upgrade_gate_after": "none", "rolling_upgrade_soak_seconds": "30"}
        if canary is not None:
            given["rolling_upgrade_canary"] = canary
        assert validate.role_gate_problems(given) == [], canary
    [problem] = validate.role_gate_problems({"rolling_upgrade_gate_after": "none", "rolling_upgrade_soak_seconds": 30,
                                             "rolling_upgrade_canary": "false"})
    assert "rolling_upgrade_canary is off" in problem
    assert validate.check({"rolling_upgrade_canary": "maybe"}, validate.ROLE_RULES) == [
        "rolling_upgrade_canary must be true or false, got 'maybe'"]
    assert validate.check({"rolling_upgrade_canary": "no"}, validate.ROLE_RULES) == []
    # A tasks file runs only in a gate, canary or not.
    assert validate.role_gate_problems({"rolling_upgrade_gate_after": "none", "rolling_upgrade_gate_tasks": "x.yml"})
    assert validate.role_gate_problems({"rolling_upgrade_gate_after": "none", "rolling_upgrade_soak_seconds": 0,
                                        "rolling_upgrade_gate_tasks": ""}) == []
    assert validate.check({"rolling_upgrade_gate_tasks": ["a.yml"]}, validate.ROLE_RULES) == [
        "rolling_upgrade_gate_tasks must be the path of a tasks file, or empty for none, got ['a.yml']"]


def test_the_removed_engine_variable_is_a_warning_when_it_says_step_and_a_refusal_otherwise():
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import validate

    assert validate.removed_variables({}) == ([], [])
    assert validate.removed_variables({"rolling_upgrade_engine": "step"}) == ([], [
        "rolling_upgrade_engine is no longer a role variable (step is what every run does): remove it"])
    problems, warnings = validate.removed_variables({"rolling_upgrade_engine": "tasks"})
    assert warnings == [] and problems == [
        "rolling_upgrade_engine is 'tasks', but the task-chain engine was removed: every run uses the step engine "
        "(upgrade_step). Remove rolling_upgrade_engine; to compose the modules yourself, start from "
        "examples/site-playbook"]
