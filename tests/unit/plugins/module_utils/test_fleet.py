"""The fleet's pure logic (plugins/module_utils/fleet.py): the batches `serial` makes, each cluster's outcome,
the fleet report in JSON, Markdown and SVG."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import fleet

SERIALS = [[1, "25%", "100%"], [1], ["50%"], [2, 3], ["1", "10%"], [1, 1, "30%"], ["100%"]]
COUNTS = [1, 2, 3, 7, 10]

# ansible-core's own batching (PlaybookExecutor._get_serialized_batches on a real inventory and Play), in a
# process of its own: importing the controller's executor changes how modules fail in the tests after it.
ANSIBLE_BATCHES = """
import json, sys, types
from ansible.executor.playbook_executor import PlaybookExecutor
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play import Play

out = []
for serial, count in json.loads(sys.argv[1]):
    loader = DataLoader()
    names = ["c%02d" % i for i in range(count)]
    inventory = InventoryManager(loader=loader, sources=",".join(names) + ",")
    play = Play.load({"hosts": "all", "serial": serial, "gather_facts": False, "tasks": []}, loader=loader)
    batches = PlaybookExecutor._get_serialized_batches(types.SimpleNamespace(_inventory=inventory), play)
    out.append([names, [[h.name for h in batch] for batch in batches]])
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def ansible_batches():
    cases = [[serial, count] for serial in SERIALS for count in COUNTS]
    proc = subprocess.run([sys.executable, "-c", ANSIBLE_BATCHES, json.dumps(cases)], capture_output=True, text=True,
                          check=True, timeout=120)
    return {json.dumps(case): result for case, result in zip(cases, json.loads(proc.stdout))}


@pytest.mark.parametrize("serial", SERIALS)
@pytest.mark.parametrize("count", COUNTS)
def test_batches_are_the_ones_ansible_makes(serial, count, ansible_batches):
    names, expected = ansible_batches[json.dumps([serial, count])]
    assert len(expected) >= 1 and sum(len(b) for b in expected) == count
    assert fleet.batches(serial, names) == expected


def test_the_default_batches_of_three_clusters_are_one_each_and_of_ten_a_canary_two_then_the_rest():
    assert fleet.batches(fleet.DEFAULT_BATCHES, ["a", "b", "c"]) == [["a"], ["b"], ["c"]]
    ten = list("abcdefghij")
    assert fleet.batches(fleet.DEFAULT_BATCHES, ten) == [["a"], ["b", "c"], list("defghij")]
    assert fleet.batch_of(fleet.batches(fleet.DEFAULT_BATCHES, ten))["d"] == 3


@pytest.mark.parametrize("bad", [[], [0], ["0%"], ["150%"], ["a"], [True], [1, -2], [None]])
def test_bad_batches_are_refused_naming_the_option_the_value_and_what_to_do(bad):
    problems = fleet.batch_problems(bad)
    assert problems and all(p.startswith("fleet_batches ") for p in problems), problems
    assert "such as [1, \"25%\", \"100%\"]" in problems[0]
    if bad:
        assert repr(bad[-1]) in " ".join(problems)
    with pytest.raises(ValueError):
        fleet.batches(bad, ["a"])


@pytest.mark.parametrize("value,ok", [(0, True), ("300", True), (-1, False), ("soon", False), (2592001, False)])
def test_soak_seconds_rule(value, ok):
    problems = fleet.soak_problems(value)
    assert (not problems) == ok
    if not ok:
        assert problems[0].startswith("fleet_soak_seconds is %r" % (value,)), problems


LAYOUT = [["canary"], ["eu"], ["us", "asia"]]


def done(start, end, **more):
    return dict({"outcome": "succeeded", "started": start, "ended": end}, **more)


def test_a_failed_cluster_names_why_and_the_later_batches_are_not_started():
    records = {
        "canary": done("2026-12-02T07:00:00Z", "2026-12-02T07:05:00Z", nodes_replaced=2, nodes_total=2),
        "eu": {"outcome": "failed", "started": "2026-12-02T07:05:10Z", "ended": "2026-12-02T07:06:00Z",
               "failed_task": "Fleet | upgrade this cluster", "cause": "health gate failed: pods not Ready"},
    }
    summary = fleet.summarize(LAYOUT, records, [1, 1, "100%"])
    rows = {r["cluster"]: r for r in summary["clusters"]}
    assert summary["outcome"] == "failed" and summary["stopped_after_batch"] == 2
    assert rows["canary"]["outcome"] == "succeeded" and rows["canary"]["seconds"] == 300
    assert rows["eu"]["outcome"] == "failed" and rows["eu"]["cause"] == "health gate failed: pods not Ready"
    for name in ("us", "asia"):
        assert rows[name]["outcome"] == "not started" and rows[name]["batch"] == 3
        assert rows[name]["cause"] == "not started: batch 2 failed (eu)"
    assert [b["outcome"] for b in summary["batches"]] == ["succeeded", "failed", "not started"]
    assert summary["failed"] == [{"cluster": "eu", "batch": 2, "cause": "health gate failed: pods not Ready",
                                  "failed_task": "Fleet | upgrade this cluster"}]
    assert summary["message"] == (
        "cluster eu (batch 2) failed: health gate failed: pods not Ready. The fleet stopped after batch 2: 1 cluster(s) "
        "finished before or beside it (canary); not started: us, asia")
    assert summary["started"] == "2026-12-02T07:00:00Z" and summary["wall_seconds"] == 360


def test_while_no_cluster_failed_the_later_batches_are_pending_and_the_fleet_running():
    summary = fleet.summarize(LAYOUT, {"canary": done("2026-12-02T07:00:00Z", "2026-12-02T07:01:00Z")}, [1, 1, "100%"])
    assert summary["outcome"] == "running"
    assert [r["outcome"] for r in summary["clusters"]] == ["succeeded", "pending", "pending", "pending"]
    assert all(r["cause"] == "" for r in summary["clusters"])
    assert summary["message"] == "1 of 4 cluster(s) upgraded so far; the later batches follow"


def test_every_cluster_done_or_planned():
    records = {h: done("2026-12-02T07:00:00Z", "2026-12-02T07:01:00Z") for b in LAYOUT for h in b}
    assert fleet.summarize(LAYOUT, records, ["100%"])["outcome"] == "succeeded"
    planned = {h: dict(r, outcome="planned") for h, r in records.items()}
    summary = fleet.summarize(LAYOUT, planned, ["100%"])
    assert summary["outcome"] == "planned" and "nothing was changed" in summary["message"]


def test_a_failure_beside_successes_in_the_same_batch_stops_only_later_batches():
    records = {"canary": done("2026-12-02T07:00:00Z", "2026-12-02T07:01:00Z"),
               "eu": done("2026-12-02T07:02:00Z", "2026-12-02T07:03:00Z"),
               "us": {"outcome": "failed", "started": "2026-12-02T07:03:00Z", "cause": "x"},
               "asia": done("2026-12-02T07:03:00Z", "2026-12-02T07:09:00Z")}
    summary = fleet.summarize(LAYOUT, records, [1, 1, "100%"])
    assert [r["outcome"] for r in summary["clusters"]] == ["succeeded", "succeeded", "failed", "succeeded"]
    assert summary["stopped_after_batch"] == 3 and "no later batch" in summary["message"]
    assert next(r for r in summary["clusters"] if r["cluster"] == "us")["seconds"] is None


def test_a_long_cause_is_cut_and_an_unknown_outcome_counts_as_not_recorded():
    records = {"canary": {"outcome": "failed", "cause": "x" * 5000}, "eu": {"outcome": "weird"}}
    summary = fleet.summarize(LAYOUT, records, [1])
    rows = {r["cluster"]: r for r in summary["clusters"]}
    assert len(rows["canary"]["cause"]) == fleet.TEXT_LIMIT and rows["canary"]["cause"].endswith("...")
    assert rows["eu"]["outcome"] == "not started"


def test_markdown_json_and_svg_name_every_cluster_and_the_failure():
    records = {"canary": done("2026-12-02T07:00:00Z", "2026-12-02T07:05:00Z", nodes_replaced=2, nodes_total=3,
                              report="/r/canary/image-upgrade-report.md"),
               "eu": {"outcome": "failed", "started": "2026-12-02T07:05:10Z", "ended": "2026-12-02T07:06:00Z",
                      "failed_task": "Health gate | stop", "cause": "a | b <c> & d"}}
    summary = fleet.summarize(LAYOUT, records, [1, 1, "100%"])
    markdown = fleet.render_markdown(summary)
    assert "| canary | 1 | succeeded | 2026-12-02T07:00:00Z | 2026-12-02T07:05:00Z | 5m00s | 2 of 3 | report: /r/canary/image-upgrade-report.md |" in markdown
    assert "| eu | 2 | failed |" in markdown and 'at task "Health gate \\| stop": a \\| b <c> & d' in markdown
    assert "| us | 3 | not started | - | - | - | - | not started: batch 2 failed (eu) |" in markdown
    assert "`fleet_batches` = [1, 1, \"100%\"]" in markdown
    assert json.loads(fleet.render_json(summary)) == summary
    svg = fleet.render_svg(summary)
    root = ET.fromstring(svg)  # well-formed, the cause escaped
    texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "eu (batch 2)" in texts and "asia (batch 3)" in texts and "not started: batch 2 failed (eu)" in texts
    assert len(list(root.iter("{http://www.w3.org/2000/svg}rect"))) == 2 + len(fleet.COLOURS)


def test_the_svg_of_a_fleet_nothing_started_in():
    summary = fleet.summarize(LAYOUT, {}, [1])
    root = ET.fromstring(fleet.render_svg(summary))
    assert root.tag.endswith("svg")


def test_the_artifact_is_bounded_and_carries_each_cluster():
    hosts = ["c%04d" % i for i in range(800)]
    layout = fleet.batches(["100%"], hosts)
    summary = fleet.summarize(layout, {"c0000": {"outcome": "failed", "cause": "y" * 5000}}, ["100%"])
    artifact = fleet.artifact(summary)
    assert artifact["kind"] == "fleet" and artifact["outcome"] == "failed"
    assert len(artifact["clusters"]) == 500 and len(artifact["message"]) <= 1000
    assert artifact["clusters"][0]["cause"].startswith("yyy")
