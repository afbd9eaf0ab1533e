"""factory.preload_sdk: the cloud's SDK imported in the background; build_provider waits for that import."""

import threading

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import factory


def test_build_provider_waits_for_the_preload_and_a_provider_without_one_gets_none(monkeypatch):
    started, release = threading.Event(), threading.Event()
    order = []

    class Cloud:
        @staticmethod
        def load_sdk():
            started.set()
            release.wait(10)
            order.append("imported")

        @staticmethod
        def from_params(options):
            order.append("built")
            return options
    monkeypatch.setitem(factory.PROVIDERS, "gcp", Cloud)
    thread = factory.preload_sdk("gcp")
    assert started.wait(10)
    threading.Timer(0.2, release.set).start()
    assert factory.build_provider({"provider": "gcp", "gcp": {"project": "p"}}) == {"project": "p"}
    assert order == ["imported", "built"] and not thread.is_alive()
    monkeypatch.setitem(factory.PROVIDERS, "aws", object())
    assert factory.preload_sdk("aws") is None


def test_an_sdk_that_fails_to_import_is_left_for_build_provider_to_report(monkeypatch):
    class Cloud:
        @staticmethod
        def load_sdk():
            raise ImportError("no google-cloud-compute")
    escaped = []
    monkeypatch.setattr(threading, "excepthook", escaped.append)
    monkeypatch.setitem(factory.PROVIDERS, "gcp", Cloud)
    factory.preload_sdk("gcp").join(10)
    assert escaped == []
