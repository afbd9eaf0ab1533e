"""The job artifacts the role publishes with set_stats: built from a real report summary (report.summarize
over a journal) and a node_image_facts-shaped plan; bounded, and made of names, counts and times only."""

import json

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import artifacts, report


def journal(nodes=2, error=None):
    j = report.new_journal("img-b", "2026-12-01T10:00:00Z")
    attempt = {"started": "2026-12-01T10:00:00Z", "passes": 3, "outcome": "done", "ended": "2026-12-01T10:10:00Z"}
    record = {"nodes": {}, "attempts": {"2026-12-01T10:00:00Z": attempt}}
    for index in range(nodes):
        record["nodes"]["w-%03d" % index] = {
            "group": "g1", "heir": "n-%03d" % index, "role": "worker",
            "phases": {"paired": "2026-12-01T10:01:00Z", "drained": "2026-12-01T10:03:00Z",
                       "done": "2026-12-01T10:04:00Z"},
            "evicted": ["ns/pod-%d" % i for i in range(5)], "retries": {"drain": ["a1", "a2"]}}
    if error:
        record["nodes"]["w-000"]["error"] = error
        record["nodes"]["w-000"]["phases"] = {"paired": "2026-12-01T10:01:00Z", "draining": "2026-12-01T10:02:00Z"}
    report.merge(j, record)
    j["finished"] = "2026-12-01T10:10:00Z"
    return j


def test_report_artifact_has_the_totals_and_one_row_per_node():
    summary = report.summarize(journal(nodes=2))
    art = artifacts.report_artifact(summary, image="family/x", target_image="img-b", provider="gcp")
    assert art["kind"] == "run" and art["outcome"] == "done" and art["cause"] == ""
    assert (art["image"], art["target_image"], art["provider"]) == ("family/x", "img-b", "gcp")
    assert art["summary"]["nodes_total"] == 2 and art["summary"]["nodes_replaced"] == 2
    assert art["summary"]["pods_evicted"] == 10 and art["summary"]["attempts"] == 1
    assert art["summary"]["wall_seconds"] == 600 and art["summary"]["passes"] == 3
    assert art["nodes"][0] == {"node": "w-000", "heir": "n-000", "group": "g1", "role": "worker", "kind": "donor", "phase": "done",
                               "done": True, "seconds": 180, "pods_evicted": 5, "retries": 2, "error": ""}
    assert art["nodes_omitted"] == 0
    # The pod names stay in the report files: the artifact counts them.
    assert "pod-0" not in json.dumps(art)


def test_failed_run_carries_its_cause_and_the_node_error_bounded():
    summary = report.summarize(journal(nodes=1, error="drain blocked by PDB shop/web " + "x" * 2000))
    art = artifacts.report_artifact(summary, outcome="failed", cause="stopped: " + "y" * 5000)
    assert art["outcome"] == "failed" and art["cause"].startswith("stopped: ")
    assert len(art["cause"]) == artifacts.MAX_TEXT and art["cause"].endswith("...")
    row = art["nodes"][0]
    assert row["phase"] == "draining" and row["done"] is False
    assert row["error"].startswith("drain blocked by PDB shop/web") and len(row["error"]) == artifacts.MAX_TEXT
    # The image falls back to the journal's.
    assert art["image"] == "img-b"


def test_a_failure_before_any_report_still_gives_an_artifact():
    art = artifacts.report_artifact({}, outcome="failed", cause="lock lost")
    assert art["summary"]["nodes_total"] == 0 and art["nodes"] == [] and art["cause"] == "lock lost"


def test_many_nodes_are_cut_to_the_bound_and_counted():
    summary = report.summarize(journal(nodes=250))
    art = artifacts.report_artifact(summary)
    assert len(art["nodes"]) == artifacts.MAX_NODES and art["nodes_omitted"] == 150
    assert art["summary"]["nodes_total"] == 250
    # Bounded: a few hundred bytes a row at most, whatever the cluster's size.
    assert len(json.dumps(art)) < 40000


def test_last_phase_breaks_a_tie_in_the_order_of_phases():
    row = {"phases": {"deleted": "2026-12-01T10:04:00Z", "done": "2026-12-01T10:04:00Z",
                      "paired": "2026-12-01T10:01:00Z"}}
    assert artifacts._last_phase(row) == "done"  # pylint: disable=protected-access
    assert artifacts._last_phase({}) == "pending"  # pylint: disable=protected-access


def facts(count=3, stop=None):
    order = [{"name": "cp-0", "group": "cp", "role": "control-plane", "in_flight": False}]
    order += [{"name": "w-%d" % i, "group": "g1", "role": "worker", "in_flight": i == 0} for i in range(count - 1)]
    return {"target_image": "projects/p/global/images/b-1", "progress": {"total": 5, "done": 2, "in_flight": 1},
            "replacement_order": order, "stop": stop,
            "blocking_pdbs": [{"namespace": "shop", "name": "web", "min_available": 2}],
            "unready_system_pods": [{"namespace": "kube-system", "name": "dns-1", "node": None, "phase": "Pending",
                                     "why": "Unschedulable",
                                     "description": "kube-system/dns-1 on no node (Pending: Unschedulable)"}]}


def test_plan_artifact_lists_the_order_and_what_blocks():
    art = artifacts.plan_artifact(facts(), image="projects/p/global/images/family/b", provider="gcp")
    assert art["kind"] == "plan" and art["outcome"] == "planned"
    assert art["target_image"] == "projects/p/global/images/b-1"
    assert art["summary"] == {"nodes_total": 5, "nodes_on_image": 2, "nodes_to_replace": 3, "in_flight": 1,
                              "blocking_pdbs": ["shop/web"],
                              "unready_system_pods": ["kube-system/dns-1 on no node (Pending: Unschedulable)"],
                              "stop": None}
    assert [n["node"] for n in art["nodes"]] == ["cp-0", "w-0", "w-1"]
    assert art["nodes"][1] == {"node": "w-0", "group": "g1", "role": "worker", "in_flight": True}


def test_plan_that_cannot_go_on_says_stopped_and_why():
    art = artifacts.plan_artifact(facts(stop="nodes left alone hold group g1 whole"))
    assert art["outcome"] == "stopped" and art["summary"]["stop"] == "nodes left alone hold group g1 whole"


def test_plan_of_a_big_cluster_is_bounded():
    art = artifacts.plan_artifact(facts(count=1000))
    assert len(art["nodes"]) == artifacts.MAX_NODES and art["nodes_omitted"] == 900
    assert art["summary"]["nodes_to_replace"] == 1000
