import copy
import xml.etree.ElementTree as ET

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import report


def observation(**phases):
    return {"nodes": {"w-0": {"group": "g1", "heir": "w-9", "role": "worker", "phases": phases,
                              "evicted": ["ns/a", "ns/b"], "waits": {"pdb": 2}}}}


def test_merge_keeps_the_earliest_phase_time_and_is_idempotent():
    journal = report.new_journal("img-b", "2026-11-30T10:00:00Z")
    report.merge(journal, observation(paired="2026-11-30T10:01:00Z"))
    once = copy.deepcopy(journal)
    report.merge(journal, observation(paired="2026-11-30T10:01:00Z"))
    assert journal == once
    report.merge(journal, observation(paired="2026-11-30T10:05:00Z", draining="2026-11-30T10:06:00Z"))
    assert journal["nodes"]["w-0"]["phases"] == {"paired": "2026-11-30T10:01:00Z", "draining": "2026-11-30T10:06:00Z"}


def test_merge_unions_evicted_pods_and_keeps_highest_counters():
    journal = report.new_journal("img-b", None)
    report.merge(journal, observation())
    report.merge(journal, {"nodes": {"w-0": {"evicted": ["ns/c", "ns/a"], "waits": {"pdb": 1}, "retries": {"evict": 4}}}})
    entry = journal["nodes"]["w-0"]
    assert entry["evicted"] == ["ns/a", "ns/b", "ns/c"]
    assert entry["waits"] == {"pdb": 2}
    assert entry["retries"] == {"evict": 4}
    assert entry["group"] == "g1"


def test_merge_ignores_unparseable_times():
    journal = report.merge(report.new_journal("i", None), observation(paired="not a time"))
    assert journal["nodes"]["w-0"]["phases"] == {}


def test_summary_durations_per_phase_and_wall_time():
    journal = report.new_journal("img-b", "2026-11-30T10:00:00Z")
    report.merge(journal, observation(paired="2026-11-30T10:00:30Z", draining="2026-11-30T10:01:30Z",
                                      deleted="2026-11-30T10:04:00Z"))
    journal["finished"] = "2026-11-30T10:05:00Z"
    summary = report.summarize(journal)
    row = summary["nodes"][0]
    assert row["phase_seconds"] == {"paired": 60, "draining": 150, "deleted": 0}
    assert row["total_seconds"] == 210
    assert row["done"] is True
    assert summary["wall_seconds"] == 300
    assert summary["nodes_replaced"] == 1 and summary["pods_evicted"] == 2


def test_a_surplus_node_removed_is_not_a_node_replaced_and_a_worker_removed_first_is():
    """A heir whose donor the cloud recreated in place on the image (a GCE autoheal) is removed as surplus: its row
    has no heir and no delete-first record. It is named, but not counted as replaced; a worker removed delete-first
    (no heir either: its refill comes after it) is."""
    journal = report.new_journal("img-b", "2026-11-30T10:00:00Z")
    report.merge(journal, observation(paired="2026-11-30T10:00:30Z", deleted="2026-11-30T10:04:00Z"))
    report.merge(journal, {"nodes": {
        "w-5": {"group": "g1", "role": "worker", "phases": {"draining": "2026-11-30T10:02:00Z", "deleted": "2026-11-30T10:03:00Z"}},
        "w-1": {"group": "g1", "role": "worker", "phases": {"draining": "2026-11-30T10:01:00Z", "deleted": "2026-11-30T10:02:00Z"}},
        "w-2": {"group": "g1", "role": "worker", "phases": {"draining": "2026-11-30T10:01:00Z"}}},
        "removed_first": {"w-1": {"group": "g1", "since": "2026-11-30T10:00:40Z", "labels": {}, "taints": []}}})
    journal["finished"] = "2026-11-30T10:05:00Z"
    summary = report.summarize(journal)
    kinds = {r["node"]: (r["kind"], r["done"]) for r in summary["nodes"]}
    assert kinds == {"w-0": ("donor", True), "w-1": ("removed first", True), "w-5": ("surplus", True), "w-2": ("surplus", False)}
    assert summary["nodes_replaced"] == 2 and summary["nodes_total"] == 2 and summary["surplus_removed"] == 1
    markdown = report.render_markdown(summary)
    assert "nodes replaced: 2 of 2" in markdown and "surplus nodes removed: 1" in markdown
    assert "| w-5 | - (surplus) |" in markdown and "| w-1 | - (removed first) |" in markdown
    assert "surplus" not in report.render_markdown(report.summarize(report.merge(report.new_journal("img-b", None), observation())))


def test_unfinished_node_runs_to_now():
    journal = report.merge(report.new_journal("i", "2026-11-30T10:00:00Z"), observation(draining="2026-11-30T10:00:00Z"))
    now = report.parse_time("2026-11-30T10:10:00Z")
    row = report.summarize(journal, now=now)["nodes"][0]
    assert row["phase_seconds"] == {"draining": 600} and row["done"] is False


def test_markdown_and_svg_render_every_node():
    journal = report.new_journal("img-b", "2026-11-30T10:00:00Z")
    report.merge(journal, observation(paired="2026-11-30T10:00:30Z", deleted="2026-11-30T10:04:00Z"))
    report.merge(journal, {"nodes": {"cp-0": {"role": "control-plane", "phases": {"paired": "2026-11-30T10:00:00Z",
                                                                                  "etcd-removed": "2026-11-30T10:02:00Z"}}}})
    summary = report.summarize(journal, now=report.parse_time("2026-11-30T10:05:00Z"))
    text = report.render_markdown(summary)
    assert "| w-0 | w-9 | g1 | worker |" in text and "| cp-0 |" in text
    svg = report.render_svg(journal, now=report.parse_time("2026-11-30T10:05:00Z"))
    root = ET.fromstring(svg)  # well-formed XML
    rects = [e for e in root.iter() if e.tag.endswith("rect") and e.find("{http://www.w3.org/2000/svg}title") is not None]
    assert len(rects) == 4  # two phases per node


def test_svg_of_an_empty_journal_says_so():
    assert "no replacement recorded" in report.render_svg(report.new_journal("i", None))


def test_retries_given_as_attempt_ids_add_up_across_runs_and_never_double_count():
    journal = report.new_journal("img-b", "2026-11-30T10:00:00Z")
    for attempt in ("run1#3", "run1#4", "run1#4", "run2#3"):  # run1's pass 4 recorded twice; run2 resumed
        report.merge(journal, {"nodes": {"w-0": {"retries": {"drain": [attempt]}}}})
    assert journal["nodes"]["w-0"]["retries"] == {"drain": ["run1#3", "run1#4", "run2#3"]}
    row = report.summarize(journal, now=report.parse_time("2026-11-30T10:05:00Z"))["nodes"][0]
    assert row["retries"] == {"drain": 3}
    assert "drain 3" in report.render_markdown(report.summarize(journal, now=report.parse_time("2026-11-30T10:05:00Z")))


def test_instances_removed_without_joining_are_listed_with_their_reason():
    journal = report.new_journal("img-b", "2026-11-30T10:00:00Z")
    seen = {"instances_removed": {"gce://p/z/w-x": {"group": "g1", "reason": "no Node joined within 30s"}}}
    report.merge(journal, seen)
    once = copy.deepcopy(journal)
    report.merge(journal, seen)
    assert journal == once
    summary = report.summarize(journal, now=report.parse_time("2026-11-30T10:05:00Z"))
    assert summary["instances_removed"] == [{"provider_id": "gce://p/z/w-x", "group": "g1", "reason": "no Node joined within 30s"}]
    text = report.render_markdown(summary)
    assert "instances removed without joining: 1" in text
    assert "| gce://p/z/w-x | g1 | no Node joined within 30s |" in text


def _finished_and_in_flight():
    journal = report.new_journal("img-b", "2026-11-30T10:00:00Z")
    report.merge(journal, {"nodes": {
        "done-0": {"phases": {"paired": "2026-11-30T10:00:10Z", "deleted": "2026-11-30T10:02:00Z"},
                   "evicted": ["ns/a", "ns/b", "ns/c"], "retries": {"drain": ["r#1", "r#2"]}},
        "busy-0": {"phases": {"draining": "2026-11-30T10:03:00Z"}, "evicted": ["ns/d"], "retries": {"drain": ["r#3"]}}}})
    return journal


def test_compact_keeps_the_report_of_finished_replacements_and_leaves_the_others_whole():
    journal = _finished_and_in_flight()
    now = report.parse_time("2026-11-30T10:05:00Z")
    before = report.summarize(journal, now=now)
    report.compact(journal)
    assert journal["nodes"]["done-0"]["evicted"] == [] and journal["nodes"]["done-0"]["evicted_count"] == 3
    assert journal["nodes"]["done-0"]["retries"] == {"drain": 2}
    assert journal["nodes"]["busy-0"]["evicted"] == ["ns/d"] and "evicted_count" not in journal["nodes"]["busy-0"]
    after = report.summarize(journal, now=now)
    assert [(r["node"], r["pods_evicted"], r["retries"]) for r in after["nodes"]] == [
        (r["node"], r["pods_evicted"], r["retries"]) for r in before["nodes"]]
    assert after["pods_evicted"] == before["pods_evicted"] == 4


def test_a_compacted_journal_stays_idempotent_and_in_flight_nodes_still_accumulate():
    journal = report.compact(_finished_and_in_flight())
    once = copy.deepcopy(journal)
    report.merge(journal, {"nodes": {"done-0": {"evicted": ["ns/a", "ns/b", "ns/c"], "retries": {"drain": ["r#1", "r#2"]}}}})
    assert journal == once
    report.merge(journal, {"nodes": {"busy-0": {"evicted": ["ns/e"], "retries": {"drain": ["r#4"]}}}})
    assert journal["nodes"]["busy-0"]["evicted"] == ["ns/d", "ns/e"]
    assert journal["nodes"]["busy-0"]["retries"] == {"drain": ["r#3", "r#4"]}


def killed_series():
    """Three attempts of one upgrade: killed after 4 passes, failed after 2, done after 3; the first
    attempt's passes recorded twice (a retried journal write) must not count twice."""
    journal = report.new_journal("img-b", "2026-11-30T10:00:00Z")
    for record in (
            {"started": "2026-11-30T10:00:00Z", "attempts": {"2026-11-30T10:00:00Z": {"started": "2026-11-30T10:00:00Z", "passes": 0}}},
            {"attempts": {"2026-11-30T10:00:00Z": {"passes": 4}}},
            {"attempts": {"2026-11-30T10:00:00Z": {"passes": 4}}},
            {"attempts": {"2026-11-30T10:02:00Z": {"started": "2026-11-30T10:02:00Z", "passes": 2}}},
            {"passes": 2, "attempts": {"2026-11-30T10:02:00Z": {"passes": 2, "outcome": "failed", "ended": "2026-11-30T10:03:00Z"}}},
            {"attempts": {"2026-11-30T10:04:00Z": {"started": "2026-11-30T10:04:00Z", "passes": 3}}},
            {"finished": "2026-11-30T10:06:00Z", "passes": 3,
             "attempts": {"2026-11-30T10:04:00Z": {"passes": 3, "outcome": "done", "ended": "2026-11-30T10:06:00Z"}}}):
        report.merge(journal, record)
    report.merge(journal, observation(paired="2026-11-30T10:01:00Z", deleted="2026-11-30T10:05:00Z"))
    return journal


def test_the_report_covers_every_attempt_and_sums_their_passes():
    summary = report.summarize(killed_series())
    assert [(a["started"], a["outcome"], a["passes"]) for a in summary["attempts"]] == [
        ("2026-11-30T10:00:00Z", "killed", 4), ("2026-11-30T10:02:00Z", "failed", 2), ("2026-11-30T10:04:00Z", "done", 3)]
    assert summary["passes"] == 9
    assert summary["attempt_outcomes"] == {"killed": 1, "failed": 1, "done": 1}
    assert summary["wall_seconds"] == 360  # from the first attempt's start to the end
    markdown = report.render_markdown(summary)
    assert "passes: 9" in markdown
    assert "attempts: 3 (1 killed, 1 failed, 1 done)" in markdown
    assert "| 1 | 2026-11-30T10:00:00Z | - | killed | 4 |" in markdown
    assert "| 3 | 2026-11-30T10:04:00Z | 2026-11-30T10:06:00Z | done | 3 |" in markdown
    svg = report.render_svg(killed_series())
    root = ET.fromstring(svg)
    titles = [el.text for el in root.iter("{http://www.w3.org/2000/svg}title")]
    assert any(t.startswith("attempt 1 started 2026-11-30T10:00:00Z, killed after 4 pass") for t in titles), titles
    assert any("attempts: 3 (1 killed, 1 failed, 1 done); passes: 9" == (el.text or "")
               for el in root.iter("{http://www.w3.org/2000/svg}text"))


def test_the_newest_attempt_without_an_end_is_unfinished_not_killed():
    journal = report.new_journal("img-b", "2026-11-30T10:00:00Z")
    report.merge(journal, {"attempts": {"a": {"started": "2026-11-30T10:00:00Z", "passes": 1}}})
    report.merge(journal, {"attempts": {"b": {"started": "2026-11-30T10:01:00Z", "passes": 2}}})
    assert [a["outcome"] for a in report.summarize(journal)["attempts"]] == ["killed", "unfinished"]
    # An outcome other than done or failed is not taken: only the run itself says how it ended.
    report.merge(journal, {"attempts": {"a": {"outcome": "bogus"}}})
    assert report.summarize(journal)["attempts"][0]["outcome"] == "killed"


def test_a_journal_without_attempts_keeps_its_passes_and_shape():
    journal = report.new_journal("img-b", "2026-11-30T10:00:00Z")
    report.merge(journal, {"passes": 5})
    assert "attempts" not in journal
    summary = report.summarize(journal)
    assert summary["passes"] == 5 and summary["attempts"] == []
    assert "attempts:" not in report.render_markdown(summary)


# -- where the time went -------------------------------------------------------------------------------
def _two_replacements():
    """Two pairs overlapping: w-0's heir is made and joins while nothing drains; w-1's heir is created while
    w-0 drains (that moment counts as draining)."""
    journal = report.new_journal("img-b", "2026-11-30T10:00:00Z")
    report.merge(journal, {"nodes": {
        "w-0": {"phases": {"creating": "2026-11-30T10:00:10Z", "joined": "2026-11-30T10:00:40Z",
                           "paired": "2026-11-30T10:00:41Z", "heir-ready": "2026-11-30T10:00:50Z",
                           "draining": "2026-11-30T10:01:00Z", "drained": "2026-11-30T10:02:00Z",
                           "deleted": "2026-11-30T10:02:05Z"}, "waits": {"pdb_seconds": 45}},
        "w-1": {"phases": {"creating": "2026-11-30T10:01:30Z", "joined": "2026-11-30T10:02:30Z",
                           "heir-ready": "2026-11-30T10:02:40Z", "paired": "2026-11-30T10:02:42Z",
                           "draining": "2026-11-30T10:02:50Z", "drained": "2026-11-30T10:03:00Z",
                           "deleted": "2026-11-30T10:03:02Z"}}}})
    journal["finished"] = "2026-11-30T10:03:20Z"
    return journal


def test_time_breakdown_counts_each_moment_once_and_sums_to_the_wall_time():
    spent = report.time_breakdown(_two_replacements())
    # drains 10:01:00-10:02:00 and 10:02:50-10:03:00; joins 10:00:40-10:00:50 and 10:02:30-10:02:40; the cloud
    # 10:00:10-10:00:40 and w-1's 10:01:30-10:02:30 less the minute w-0 was draining till 10:02:00.
    assert spent == {"drains_and_pdbs_seconds": 70, "joins_seconds": 20, "cloud_seconds": 60, "overhead_seconds": 50,
                     "wall_seconds": 200, "pdb_blocked_seconds": 45}


def test_time_breakdown_of_an_unfinished_run_runs_to_now_and_needs_a_start():
    journal = report.merge(report.new_journal("i", "2026-11-30T10:00:00Z"),
                           {"nodes": {"w-0": {"phases": {"creating": "2026-11-30T10:00:20Z"}}}})
    spent = report.time_breakdown(journal, now=report.parse_time("2026-11-30T10:01:00Z"))
    assert spent["cloud_seconds"] == 40 and spent["overhead_seconds"] == 20 and spent["wall_seconds"] == 60
    assert report.time_breakdown(report.new_journal("i", None)) is None


def test_the_heirs_creation_and_join_are_phases_of_the_timeline_without_a_gap():
    journal = _two_replacements()
    summary = report.summarize(journal)
    row = summary["nodes"][0]
    assert list(row["phase_seconds"]) == ["creating", "joined", "paired", "heir-ready", "draining", "drained", "deleted"]
    assert row["total_seconds"] == 115     # from the heir's creation to the donor's deletion
    assert summary["time_breakdown"]["overhead_seconds"] == 50
    text = report.render_markdown(summary)
    assert "- where the time went" in text and "drains and PDBs (a donor draining) 1m10s (blocked by PDBs 45s" in text
    assert "this collection's own overhead 50s" in text
    rects = ET.fromstring(report.render_svg(journal)).findall("{http://www.w3.org/2000/svg}rect")
    assert any("w-0 creating: 30s" in (r.findtext("{http://www.w3.org/2000/svg}title") or "") for r in rects)


def test_api_seconds_keep_each_executors_largest_total_and_add_up_over_executors_and_attempts():
    journal = _two_replacements()
    for record in ({"a1": {"api_seconds": {"e1": {"cloud": 1.0, "kube": 0.5}}}},
                   {"a1": {"api_seconds": {"e1": {"cloud": 2.5, "kube": 0.7}}}},     # later pass, same executor
                   {"a1": {"api_seconds": {"e1": {"cloud": 2.0}}}},                  # an older record again
                   {"a1": {"api_seconds": {"e2": {"cloud": 1.0, "etcd": 0.2}}}},     # after a delegated removal
                   {"a2": {"api_seconds": {"e3": {"drain": 3.0}}}}):
        report.merge(journal, {"attempts": record})
    summary = report.summarize(journal)
    assert summary["api_seconds"] == {"cloud": 3.5, "drain": 3.0, "etcd": 0.2, "kube": 0.7}
    assert "- time in API calls (within the above): the cloud 3s, evictions 3s, etcd 0s, Kubernetes 0s" in \
        report.render_markdown(summary)
    assert report.summarize(_two_replacements())["api_seconds"] is None


def test_pods_the_drain_ladder_took_past_eviction_are_named_in_the_report_with_step_and_rule():
    """Issue 23 item 5: every forced step is named in the report."""
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import progress

    nodes = {}
    progress._add_drains(nodes, [{"node": "w-0", "drained": False, "drain_started": "2026-11-30T10:00:00Z",
                                  "evicted": [{"namespace": "shop", "pod": "web-1"}],
                                  "forced": [{"namespace": "shop", "pod": "cache-1", "step": "delete", "policy": "cache"},
                                             {"namespace": "jobs", "pod": "b-1", "step": "force", "policy": "batch"},
                                             {"namespace": "db", "pod": "db-0"}]}],
                         "2026-11-30T10:05:00Z", "run#1")   # pylint: disable=protected-access
    assert nodes["w-0"]["forced"] == ["shop/cache-1 (delete, cache)", "jobs/b-1 (force, batch)",
                                      "db/db-0 (deleted on timeout)"]
    journal = report.merge(report.new_journal("img", "2026-11-30T10:00:00Z"), {"nodes": nodes})
    report.merge(journal, {"nodes": {"w-0": {"forced": ["shop/cache-1 (delete, cache)"]}}})
    summary = report.summarize(journal, now=report.parse_time("2026-11-30T10:06:00Z"))
    [row] = summary["nodes"]
    assert row["forced"] == ["db/db-0 (deleted on timeout)", "jobs/b-1 (force, batch)", "shop/cache-1 (delete, cache)"]
    assert "deleted past eviction: db/db-0 (deleted on timeout), jobs/b-1 (force, batch)" in report.render_markdown(summary)


def test_the_report_gives_the_cloud_calls_of_every_executor_with_the_peak_against_the_limit():
    journal = report.new_journal("img", "2026-12-05T10:00:00Z")
    first = {"calls": 40, "by_kind": {"list": 30, "create": 10}, "peak_per_minute": 25, "limit_per_minute": 375.0,
             "limit_source": "default", "throttled": 1, "waited_seconds": 0.5}
    # The same executor's totals told again, lower (an older pass journaled late): the largest stays.
    report.merge(journal, {"attempts": {"a": {"cloud_calls": {"e1": first}}}})
    report.merge(journal, {"attempts": {"a": {"cloud_calls": {"e1": dict(first, calls=39, by_kind={"list": 29})}}}})
    report.merge(journal, {"attempts": {"b": {"cloud_calls": {"e2": {
        "calls": 10, "by_kind": {"list": 10}, "peak_per_minute": 75, "limit_per_minute": 150.0,
        "limit_source": "rolling_upgrade_cloud_calls_per_minute", "throttled": 0, "waited_seconds": 2.0}}}}})
    calls = report.summarize(journal)["cloud_calls"]
    assert calls == {"calls": 50, "by_kind": {"create": 10, "list": 40}, "peak_per_minute": 75, "throttled": 1,
                     "waited_seconds": 2.5, "limit_per_minute": 150.0,
                     "limit_source": "rolling_upgrade_cloud_calls_per_minute", "peak_fraction_of_limit": 0.5}
    line = [x for x in report.render_markdown(report.summarize(journal)).splitlines() if "cloud API requests" in x]
    assert line == ["- cloud API requests: 50; peak 75 per minute, 50% of the limit of 150 per minute "
                    "(rolling_upgrade_cloud_calls_per_minute); throttling answers: 1; waited for the limit: 2s; "
                    "by kind: list 40, create 10"]


def test_a_journal_without_cloud_calls_reports_none():
    assert report.summarize(report.new_journal("img", "2026-12-05T10:00:00Z"))["cloud_calls"] is None


def test_the_report_gives_the_kubernetes_calls_by_kind_and_per_replaced_node():
    journal = report.new_journal("img", "2026-12-05T10:00:00Z")
    report.merge(journal, {"attempts": {"a": {"kube_calls": {"e1": {"calls": 30, "by_kind": {"list": 2, "patch": 28}}}}}})
    # The same executor's totals told again, lower (an older pass journaled late): the largest stays.
    report.merge(journal, {"attempts": {"a": {"kube_calls": {"e1": {"calls": 20, "by_kind": {"list": 1, "patch": 19}}}}}})
    report.merge(journal, {"attempts": {"b": {"kube_calls": {"e2": {"calls": 10, "by_kind": {"watch": 4, "evict": 6}}}}}})
    assert report.kube_calls(journal, replaced=4) == {"calls": 40, "by_kind": {"evict": 6, "list": 2, "patch": 28, "watch": 4},
                                                      "per_replaced_node": 10.0}
    summary = report.summarize(journal)
    assert summary["kube_calls"]["per_replaced_node"] is None   # nothing replaced in this journal
    line = [x for x in report.render_markdown(summary).splitlines() if "Kubernetes API requests" in x]
    assert line == ["- Kubernetes API requests: 40; by kind: patch 28, evict 6, watch 4, list 2"]
    line = report._kube_calls_line(report.kube_calls(journal, replaced=4))  # pylint: disable=protected-access
    assert line == "- Kubernetes API requests: 40 (10.0 per replaced node); by kind: patch 28, evict 6, watch 4, list 2"


def test_a_journal_without_kube_calls_reports_none():
    assert report.summarize(report.new_journal("img", "2026-12-05T10:00:00Z"))["kube_calls"] is None
