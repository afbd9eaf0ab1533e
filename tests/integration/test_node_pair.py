"""node_pair through ansible-playbook against the sandbox's real kube-apiserver, without a cloud: nodes that
already carry their cached annotations. Each test uses its own annotation prefix, so nodes of other tests in
the shared sandbox are invalid for it and never written."""

import json
import uuid

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import node_state
from tests.ansible_run import run_module

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
OLD, NEW = "img-old", "img-NEW"


def _prefix():
    return "t%s.kubenodes.test" % uuid.uuid4().hex[:8]


def _annotate(sandbox, name, annotations=None, labels=None):
    body = {"metadata": {}}
    if annotations:
        body["metadata"]["annotations"] = annotations
    if labels:
        body["metadata"]["labels"] = labels
    sandbox.kube().merge_patch("/api/v1/nodes/" + name, body)


def _node(sandbox, name):
    return sandbox.kube().request("GET", "/api/v1/nodes/" + name)


def _ann(sandbox, name):
    return _node(sandbox, name)["metadata"].get("annotations") or {}


def pair(sandbox, prefix, check=False, diff=False, **args):
    return run_module("node_pair", dict(sandbox.auth_args(), image=NEW.lower(), annotation_prefix=prefix, **args),
                      check=check, diff=diff)


def test_pairs_are_completed_promoted_labelled_and_phased(sandbox, new_nodes):
    prefix = _prefix()
    p = prefix + "/"
    group = "grp-" + prefix[:9]
    d1, d2, h1, h2 = new_nodes(4, group=group)
    for name, image in ((d1, OLD), (d2, OLD), (h1, NEW), (h2, NEW)):
        _annotate(sandbox, name, {p + "scaling-group-id": group, p + "node-image": image})
    # h1 was written as d1's heir and the run died before d1 got its half; h2's donor is gone (replaced).
    _annotate(sandbox, h1, {p + "donor": d1, p + "phase": "heir", p + "phase-since": "2026-01-01T00:00:00Z",
                            p + "started-at": "2026-01-01T00:00:00Z"})
    _annotate(sandbox, h2, {p + "donor": "long-gone", p + "phase": "heir", p + "started-at": "2026-01-01T00:00:00Z"})
    _annotate(sandbox, d1, labels={"team": "blue", "example.com/pinned": "yes"}, annotations={})
    rv_before = {n: _node(sandbox, n)["metadata"]["resourceVersion"] for n in (d1, d2, h1, h2)}

    # Check mode with diff predicts the change and writes nothing.
    checked = pair(sandbox, prefix, check=True, diff=True, exclude_labels=["example.com/pinned"])
    assert not checked["failed"], checked
    assert checked["changed"] is True
    assert sorted(checked["changed_nodes"]) == sorted([d1, h1, h2])
    assert checked["diff"]["after"][d1]["annotations"][p + "heir"] == h1
    assert checked["diff"]["after"][h1]["labels"] == {"team": "blue"}
    assert checked["diff"]["before"][h2]["annotations"][p + "donor"] == "long-gone"
    assert {n: _node(sandbox, n)["metadata"]["resourceVersion"] for n in (d1, d2, h1, h2)} == rv_before

    applied = pair(sandbox, prefix, diff=True, exclude_labels=["example.com/pinned"])
    assert not applied["failed"], applied
    assert applied["changed"] is True
    assert {(r["name"], r["action"]) for r in applied["repairs"]} == {(d1, "complete"), (h2, "promote")}
    assert applied["label_copies"] == [{"heir": h1, "donor": d1, "labels": {"team": "blue"}, "taints": []}]
    assert _ann(sandbox, d1)[p + "heir"] == h1 and _ann(sandbox, d1)[p + "phase"] == "paired"
    heir = _node(sandbox, h1)["metadata"]
    assert heir["labels"]["team"] == "blue" and "example.com/pinned" not in heir["labels"]
    assert heir["labels"]["kubernetes.io/hostname"] == h1          # reserved labels are never copied
    promoted = _ann(sandbox, h2)
    assert p + "donor" not in promoted and promoted[p + "phase"] == "replaced"
    assert promoted[p + "started-at"] == "2026-01-01T00:00:00Z"
    assert _ann(sandbox, d2).get(p + "heir") is None

    again = pair(sandbox, prefix, exclude_labels=["example.com/pinned"])
    assert not again["failed"] and again["changed"] is False and again["changed_nodes"] == [], again
    assert sorted(again["nodes"]["donor"]) == [d1] and sorted(again["nodes"]["outdated"]) == [d2]

    # Phases: recorded once, then unchanged. A drained donor is cordoned (node_drain did it; the cordon is
    # cross-checked: the pair is mutual and the heir Ready); a recorded drain without one is a named problem.
    cordoned = run_module("node_drain", dict(sandbox.auth_args(), name=d1, state="cordoned", annotation_prefix=prefix))
    assert not cordoned["failed"], cordoned
    drained = pair(sandbox, prefix, phases=[{"name": d1, "phase": "drained"}])
    assert drained["changed"] and drained["phases"] == [{"name": d1, "phase": "drained"}], drained
    assert _ann(sandbox, d1)[p + "phase"] == "drained"
    assert pair(sandbox, prefix, phases=[{"name": d1, "phase": "drained"}])["changed"] is False

    # One bad entry fails the task and nothing of the batch is written.
    rv = _node(sandbox, d1)["metadata"]["resourceVersion"]
    bad = pair(sandbox, prefix, phases=[{"name": d1, "phase": "etcd-removed"}, {"name": d2, "phase": "drained"}])
    assert bad["failed"] and d2 in bad["msg"] and "neither a donor" in bad["msg"], bad
    assert _node(sandbox, d1)["metadata"]["resourceVersion"] == rv


def test_surplus_heir_is_marked_obsolete_and_other_nodes_are_untouched(sandbox, new_nodes):
    prefix = _prefix()
    p = prefix + "/"
    group = "grp-" + prefix[:9]
    spare, current = new_nodes(2, group=group)
    _annotate(sandbox, spare, {p + "scaling-group-id": group, p + "node-image": NEW, p + "donor": current,
                               p + "phase": "heir"})
    _annotate(sandbox, current, {p + "scaling-group-id": group, p + "node-image": NEW})
    result = pair(sandbox, prefix)
    assert not result["failed"], result
    assert result["obsolete"] == [spare] and result["changed_nodes"] == [spare]
    ann = _ann(sandbox, spare)
    assert ann[p + "obsolete"] == "true" and p + "donor" not in ann
    # Issue 28: the pair it undid (its donor is no outdated node) is named, in a warning and in the problems.
    undone = [u for u in result["problems"] if u["code"] == "pair_undone"]
    assert [u["node"] for u in undone] == [spare] and "no longer replaces donor %s" % current in undone[0]["message"], undone
    assert any(undone[0]["message"] in w for w in result.get("warnings") or []), result
    # Nodes without our annotations (other tests' nodes) are invalid for this prefix and never written.
    assert all(n not in result["changed_nodes"] for n in [i["name"] for i in result["nodes"]["invalid"]])


@pytest.mark.parametrize("args,message", [
    (dict(image=""), "image"),
    (dict(image="has space"), "image"),
    (dict(image="x", annotation_prefix="Not A Prefix"), "annotation_prefix"),
    (dict(image="x", provider="openstack"), "provider"),
])
def test_bad_input_fails_clearly(sandbox, args, message):
    result = run_module("node_pair", dict(sandbox.auth_args(), **args))
    assert result["failed"] and message in result["msg"], result


def test_unreadable_credentials_and_forbidden_node_list(sandbox, tmp_path):
    missing = run_module("node_pair", dict(kubeconfig=str(tmp_path / "nope"), image="x"))
    assert missing["failed"] and "does not exist" in missing["msg"], missing
    garbage = tmp_path / "kubeconfig"
    garbage.write_text("this: [is not a kubeconfig")
    broken = run_module("node_pair", dict(kubeconfig=str(garbage), image="x"))
    assert broken["failed"] and "kubeconfig" in broken["msg"].lower(), broken
    no_region = run_module("node_pair", dict(sandbox.auth_args(), image="x", provider="aws", aws={"access_key": "a"}))
    assert no_region["failed"] and "cannot use the aws provider" in no_region["msg"], no_region
    # A token without any RBAC: the apiserver answers 403 and nothing is written.
    forbidden = run_module("node_pair", dict(host=sandbox.apiserver, ca_cert=sandbox.ca, api_key="not-a-valid-token",
                                             image="x"))
    assert forbidden["failed"] and "cannot list nodes" in forbidden["msg"] and "401" in forbidden["msg"], forbidden


def test_write_retries_on_conflict_with_a_stale_resource_version(sandbox, new_nodes):
    (name,) = new_nodes(1, group="grp-conflict")
    api_client = sandbox.api_client()
    stale = _node(sandbox, name)
    _annotate(sandbox, name, {"example.com/bump": "1"})       # the node moves on; `stale` is now out of date
    status, after = node_state.write_node(api_client, stale, {"annotations": {"example.com/x": "y"}, "expect": {}},
                                          sleep=lambda _: None)
    assert status == "changed" and after["metadata"]["annotations"]["example.com/x"] == "y"
    assert after["metadata"]["annotations"]["example.com/bump"] == "1"
    # An expectation that no longer holds after the re-read skips the write.
    stale = _node(sandbox, name)
    _annotate(sandbox, name, {"example.com/owner": "someone-else"})
    entry = {"annotations": {"example.com/owner": "me"}, "expect": {"example.com/owner": None}}
    status, _after = node_state.write_node(api_client, stale, entry, sleep=lambda _seconds: None)
    assert status == "skipped"
    assert _ann(sandbox, name)["example.com/owner"] == "someone-else"


def test_continues_a_half_done_upgrade_of_the_reference_operator(sandbox, new_nodes):
    """The Constellation node operator's annotations: a pair it made stays a pair and the phases this
    collection adds are recorded next to them. Its obsolete mark is no proof this collection may remove
    the node (reworked, issue 13): that node is left alone, named, and no phase is recorded on it."""
    p = "constellation.edgeless.systems/"
    group = "grp-ref-" + uuid.uuid4().hex[:6]
    donor, heir, extra, waiting = new_nodes(4, group=group)
    for name, image in ((donor, OLD), (heir, NEW), (extra, NEW), (waiting, OLD)):
        _annotate(sandbox, name, {p + "scaling-group-id": group, p + "node-image": image})
    _annotate(sandbox, donor, {p + "heir": heir})
    _annotate(sandbox, heir, {p + "donor": donor})
    _annotate(sandbox, extra, {p + "obsolete": "true"})
    try:
        result = pair(sandbox, "constellation.edgeless.systems", scaling_groups=[group],
                      phases=[{"name": donor, "phase": "drained"}])
        assert not result["failed"], result
        assert result["repairs"] == [] and result["pairs"] == [] and result["obsolete"] == []
        assert result["changed_nodes"] == [donor]
        assert result["nodes"]["donor"] == [donor] and result["nodes"]["heir"] == [heir]
        assert result["nodes"]["outdated"] == [waiting] and result["nodes"]["obsolete"] == []
        # (Nodes of other tests in the shared sandbox are invalid too: out of scope.)
        [alone] = [i for i in result["nodes"]["invalid"] if i["name"] == extra]
        assert "obsolete=true was not set by this collection" in alone["reason"] and not alone["out_of_scope"]
        assert _ann(sandbox, donor)[p + "phase"] == "drained" and _ann(sandbox, donor)[p + "heir"] == heir
        before = _ann(sandbox, extra)
        refused = pair(sandbox, "constellation.edgeless.systems", scaling_groups=[group],
                       phases=[{"name": extra, "phase": "draining"}])
        assert refused["failed"] and "node %s is left alone" % extra in refused["msg"], refused
        assert _ann(sandbox, extra) == before
    finally:
        # Other tests must not find reference-operator state in the shared sandbox.
        for name in (donor, heir, extra, waiting):
            sandbox.kube().merge_patch("/api/v1/nodes/" + name, {"metadata": {"annotations": {
                p + k: None for k in ("scaling-group-id", "node-image", "heir", "donor", "obsolete", "phase",
                                      "phase-since", "phase-history")}}})


def test_copy_taints_adds_the_donors_own_taints_once(sandbox, new_nodes):
    prefix = _prefix()
    p = prefix + "/"
    group = "grp-" + prefix[:9]
    donor, heir = new_nodes(2, group=group)
    _annotate(sandbox, donor, {p + "scaling-group-id": group, p + "node-image": OLD, p + "heir": heir,
                               p + "phase": "paired"})
    _annotate(sandbox, heir, {p + "scaling-group-id": group, p + "node-image": NEW, p + "donor": donor,
                              p + "phase": "heir"})
    sandbox.kube().merge_patch("/api/v1/nodes/" + donor, {"spec": {"taints": [
        {"key": "dedicated", "value": "db", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}]}})
    without = pair(sandbox, prefix)
    assert not without["failed"] and without["changed"] is False, without      # taints only when asked
    copied = pair(sandbox, prefix, copy_taints=True, diff=True)
    assert not copied["failed"] and copied["changed_nodes"] == [heir], copied
    assert copied["diff"]["after"][heir]["taints"] == [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]
    taints = _node(sandbox, heir)["spec"].get("taints")
    assert taints == [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]   # the reserved one stays behind
    assert pair(sandbox, prefix, copy_taints=True)["changed"] is False


def test_a_user_who_may_not_list_nodes_gets_a_clear_403_and_nothing_is_written(sandbox, namespace):
    from kubernetes import client

    core = sandbox.core_v1()
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="nobody")))
    token = core.create_namespaced_service_account_token(
        "nobody", namespace, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
            audiences=["https://kubernetes.default.svc.cluster.local"], expiration_seconds=600))).status.token
    result = run_module("node_pair", dict(host=sandbox.apiserver, ca_cert=sandbox.ca, api_key=token, image="img"))
    assert result["failed"] and result.get("changed") is False, result
    assert "cannot list nodes: 403" in result["msg"] and "forbidden" in result["msg"], result
    assert token not in str(result)        # api_key is no_log


def test_a_donor_found_gone_is_journaled_before_its_heir_is_promoted(sandbox, new_nodes):
    """A run killed after deleting a donor and before journaling it: node_pair records the donor as replaced
    in the upgrade's journal before the promotion forgets its name; with no journal, it creates none."""
    core = sandbox.core_v1()
    where = {"name": "journal-" + uuid.uuid4().hex[:8], "namespace": "default"}
    heirs = {}
    for prefix, name in zip((_prefix(), _prefix()), new_nodes(2, group="grp-gone")):
        p = prefix + "/"
        _annotate(sandbox, name, {p + "scaling-group-id": "grp-gone", p + "node-image": NEW, p + "donor": "gone-donor",
                                  p + "phase": "heir", p + "started-at": "2026-01-01T00:00:00Z"})
        heirs[prefix] = name
    (alone_prefix, alone), (prefix, heir) = list(heirs.items())

    # No journal: the heir is promoted, and a standalone call makes no journal.
    unjournaled = pair(sandbox, alone_prefix, journal=where)
    assert not unjournaled["failed"] and unjournaled["repairs"] == [
        {"name": alone, "action": "promote", "donor": "gone-donor"}], unjournaled
    assert where["name"] not in [c.metadata.name for c in core.list_namespaced_config_map("default").items]

    started = run_module("upgrade_journal", dict(sandbox.auth_args(), image=NEW.lower(), record={"passes": 1}, **where))
    assert not started["failed"], started
    promoted = pair(sandbox, prefix, journal=where)
    assert not promoted["failed"] and promoted["changed"], promoted
    assert _ann(sandbox, heir)[prefix + "/phase"] == "replaced"
    record = json.loads(core.read_namespaced_config_map(where["name"], "default").data["journal.json"])
    entry = record["nodes"]["gone-donor"]
    assert entry["heir"] == heir and entry["group"] == "grp-gone" and entry["role"] == "worker"
    assert entry["phases"]["paired"] == "2026-01-01T00:00:00Z" and "deleted" in entry["phases"]
    core.delete_namespaced_config_map(where["name"], "default")
