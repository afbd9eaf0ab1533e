"""How kube.py resolves the Kubernetes auth options from module parameters and K8S_AUTH_* variables."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import kube


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in list(__import__("os").environ):
        if name.startswith("K8S_AUTH_"):
            monkeypatch.delenv(name)


def test_a_trailing_slash_on_the_host_is_dropped_from_the_option_and_the_environment(monkeypatch):
    # AWX's own tests use such a host; kubernetes.core strips it too. Left in, every path starts with //.
    assert kube.resolve_auth({"host": "https://10.0.0.1:6443/"})["host"] == "https://10.0.0.1:6443"
    assert kube.resolve_auth({"host": "https://10.0.0.1:6443//"})["host"] == "https://10.0.0.1:6443"
    monkeypatch.setenv("K8S_AUTH_HOST", "https://api.example.invalid:443/")
    assert kube.resolve_auth({})["host"] == "https://api.example.invalid:443"


def test_a_host_without_a_slash_is_unchanged():
    assert kube.resolve_auth({"host": "https://10.0.0.1:6443"})["host"] == "https://10.0.0.1:6443"
    assert "host" not in kube.resolve_auth({})


def test_persist_config_from_the_option_and_the_environment(monkeypatch):
    assert kube.resolve_auth({"persist_config": True})["persist_config"] is True
    assert "persist_config" not in kube.resolve_auth({})
    monkeypatch.setenv("K8S_AUTH_PERSIST_CONFIG", "no")
    assert kube.resolve_auth({})["persist_config"] is False
    monkeypatch.setenv("K8S_AUTH_PERSIST_CONFIG", "true")
    assert kube.resolve_auth({})["persist_config"] is True
    assert "persist_config" in kube.AUTH_ARG_SPEC and kube.AUTH_ARG_SPEC["persist_config"]["type"] == "bool"


def test_several_impersonate_groups_from_the_environment_are_a_list(monkeypatch):
    monkeypatch.setenv("K8S_AUTH_IMPERSONATE_GROUPS", "team-a, team-b,,")
    assert kube.resolve_auth({})["impersonate_groups"] == ["team-a", "team-b"]
