"""The journal ConfigMap as plain dicts: what is sent when it is created and replaced."""

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
