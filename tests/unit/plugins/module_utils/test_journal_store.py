"""The journal ConfigMap as plain dicts: what is sent when it is created and replaced."""

import json

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import journal as store


def test_the_journal_is_created_and_replaced_on_its_own_path(monkeypatch):
    calls = []
    monkeypatch.setattr(store.kube, "request",
                        lambda client, method, path, body=None: calls.append((method, path, body)) or {})
    journal = {"image": "i", "nodes": {}}
    data, _binary = store.journal_payload(journal)
    store.write_journal(None, "j", "ns", None, journal)
    # A journal stored gzipped before and small now: the stale binaryData key goes, as with the typed client.
    read = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "j", "resourceVersion": "9"},
            "binaryData": {store.GZIP_KEY: "eA=="}}
    store.write_journal(None, "j", "ns", read, journal)
    assert calls == [
        ("POST", "/api/v1/namespaces/ns/configmaps",
         {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "j", "namespace": "ns"}, "data": data}),
        ("PUT", "/api/v1/namespaces/ns/configmaps/j",
         {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "j", "resourceVersion": "9"}, "data": data}),
    ]


def test_a_journal_holding_the_wrong_type_names_the_key():
    """Issue 28 item 7: an int where a list is expected failed deep in a reader with "'int' object is not iterable"."""
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import journal, report

    good = report.merge(report.new_journal("img", "2026-12-01T10:00:00Z"), {
        "passes": 3, "nodes": {"w-1": {"group": "g", "heir": "w-9", "role": "worker", "phases": {"drained": "2026-12-01T10:01:00Z"},
                                       "evicted": ["ns/p"], "waits": {"pdb": 2}, "retries": {"drain": ["a1"]}}},
        "attempts": {"a1": {"started": "2026-12-01T10:00:00Z", "passes": 3, "outcome": "failed", "ended": "x"}},
        "gates": {"g1": {"after": "batch", "seconds": {"soak": 3.5}, "outcome": "passed"}},
        "instances_created": {"gce://p/z/i": {"group": "g", "created": "2026-12-01T10:00:00Z"}}, "start_counts": {"g": 2}})
    assert journal.journal_problem(good) is None
    assert journal.journal_problem(report.compact(good)) is None
    for key, value, problem in [
            (("nodes", "w-1", "evicted"), 5, "its nodes.w-1.evicted is 5, not a list"),
            (("nodes", "w-1", "phases"), [], "its nodes.w-1.phases is [], not an object"),
            (("nodes", "w-1"), 7, "its nodes.w-1 is 7, not an object"),
            (("nodes",), [1], "its nodes is [1], not an object"),
            (("passes",), "many", 'its passes is "many", not a number'),
            (("attempts", "a1", "passes"), True, "its attempts.a1.passes is true, not a number"),
            (("gates", "g1", "seconds"), 3, "its gates.g1.seconds is 3, not an object"),
            (("start_counts",), 2, "its start_counts is 2, not an object"),
            (("finished",), 12, "its finished is 12, not a string")]:
        bad = json.loads(json.dumps(good))
        where = bad
        for part in key[:-1]:
            where = where[part]
        where[key[-1]] = value
        assert journal.journal_problem(bad) == problem, key


def test_a_malformed_journal_is_refused_naming_the_configmap_the_key_and_what_to_do(monkeypatch):
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import journal

    text = json.dumps({"image": "img", "nodes": {"w-1": {"evicted": 5}}})
    monkeypatch.setattr(journal.kube, "request", lambda *args, **kwargs: {"data": {journal.DATA_KEY: text}})
    with pytest.raises(journal.MalformedJournal) as raised:
        journal.read_journal(None, "kubenodes-image-upgrade-journal", "kube-system")
    message = str(raised.value)
    assert "journal ConfigMap kube-system/kubenodes-image-upgrade-journal is malformed (its nodes.w-1.evicted is 5, " \
           "not a list)" in message, message
    assert "correct that key, or delete it" in message and "kubectl -n kube-system delete configmap" in message, message
