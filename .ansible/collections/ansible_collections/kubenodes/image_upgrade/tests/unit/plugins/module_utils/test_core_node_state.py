"""Unit tests of node_state's pure parts: which changes a patch entry still makes, the diff it shows,
and its expectations. (Writes against a real apiserver are in tests/integration/test_node_pair.py.)"""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import node_state

pytestmark = pytest.mark.timeout(30)


def node(annotations=None, labels=None, taints=None):
    return {"metadata": {"name": "n", "resourceVersion": "7", "annotations": annotations or {}, "labels": labels or {}},
            "spec": {"taints": taints} if taints is not None else {}}


def test_only_real_changes_remain():
    current = node({"a": "1", "b": "2"}, {"team": "x"})
    entry = {"annotations": {"a": "1", "b": None, "c": None, "d": "4"}, "labels": {"team": "x", "tier": "gold"}}
    annotations, labels, taints = node_state.pending_changes(current, entry)
    assert annotations == {"b": None, "d": "4"}
    assert labels == {"tier": "gold"} and taints is None


def test_taints_are_merged_by_key_and_effect():
    current = node(taints=[{"key": "k", "value": "old", "effect": "NoSchedule"}, {"key": "z", "effect": "NoExecute"}])
    entry = {"annotations": {}, "taints": [{"key": "k", "value": "new", "effect": "NoSchedule"},
                                           {"key": "m", "effect": "NoSchedule"}]}
    taints = node_state.pending_changes(current, entry)[2]
    assert taints == [{"key": "k", "value": "new", "effect": "NoSchedule"}, {"key": "z", "effect": "NoExecute"},
                      {"key": "m", "effect": "NoSchedule"}]
    assert node_state.pending_changes(node(taints=taints), entry)[2] is None


def test_diff_shows_before_and_after():
    current = node({"p/donor": "old"}, {"team": "a"})
    before, after = node_state.node_diff(current, {"annotations": {"p/donor": None, "p/phase": "replaced"},
                                                   "labels": {"team": "b"}})
    assert before == {"annotations": {"p/donor": "old"}, "labels": {"team": "a"}}
    assert after == {"annotations": {"p/phase": "replaced"}, "labels": {"team": "b"}}
    assert node_state.node_diff(current, {"annotations": {"p/donor": "old"}}) == ({}, {})


def test_expectations():
    current = node({"p/heir": "x"})
    assert node_state.expectations_hold(current, {"expect": {"p/heir": "x", "p/donor": None}})
    assert not node_state.expectations_hold(current, {"expect": {"p/heir": None}})


def test_bad_options_fail_before_any_io():
    with pytest.raises(node_state.PlannerFailure, match="max_surge"):
        node_state.plan_from_cluster({"image": "img", "max_surge": "many"})
    with pytest.raises(node_state.PlannerFailure, match="image"):
        node_state.plan_from_cluster({"image": ""})


def test_kubeconfig_dict_secrets_are_found():
    kubeconfig = {"users": [{"name": "u", "user": {"token": "s3cr3t", "client-key-data": "a2V5",
                                                   "exec": {"env": [{"name": "X", "value": "plain"}]}}}],
                  "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}]}
    assert node_state.kubeconfig_secrets(kubeconfig) == {"s3cr3t", "a2V5"}
    assert node_state.kubeconfig_secrets("/path/to/kubeconfig") == set()
