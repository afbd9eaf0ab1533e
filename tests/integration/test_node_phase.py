"""node_phase through ansible-playbook against the sandbox: phases recorded idempotently, Node objects
deleted only for donors and obsolete nodes."""

import pytest

from tests.ansible_run import run_module

pytestmark = pytest.mark.timeout(300)
PREFIX = "image-upgrade.kubenodes.io"


def annotations(sandbox, name):
    node = sandbox.kube().request("GET", "/api/v1/nodes/" + name)
    return node["metadata"].get("annotations") or {}


def test_phase_is_recorded_once_with_its_time(sandbox, new_nodes):
    donor, heir = new_nodes(2)
    sandbox.kube().merge_patch("/api/v1/nodes/" + donor, {"metadata": {"annotations": {PREFIX + "/heir": heir}}})
    args = dict(sandbox.auth_args(), name=donor, phase="draining")

    predicted = run_module("node_phase", args, check=True, diff=True)
    assert predicted["changed"] and predicted["diff"]["after"][PREFIX + "/phase"] == "draining"
    assert PREFIX + "/phase" not in annotations(sandbox, donor)

    first = run_module("node_phase", args)
    assert first["changed"] and first["phase"] == "draining" and first["previous_phase"] == ""
    written = annotations(sandbox, donor)
    assert written[PREFIX + "/phase"] == "draining" and written[PREFIX + "/phase-since"]

    again = run_module("node_phase", args)
    assert not again["changed"]
    assert annotations(sandbox, donor)[PREFIX + "/phase-since"] == written[PREFIX + "/phase-since"]

    drained = run_module("node_phase", dict(args, phase="drained"))
    assert drained["changed"] and drained["previous_phase"] == "draining"


def test_a_node_that_is_not_leaving_is_neither_phased_nor_deleted(sandbox, new_nodes):
    (name,) = new_nodes(1)
    phased = run_module("node_phase", dict(sandbox.auth_args(), name=name, phase="drained"))
    assert phased["failed"] and "neither a donor" in phased["msg"]
    deleted = run_module("node_phase", dict(sandbox.auth_args(), name=name, state="absent"))
    assert deleted["failed"] and "refusing to delete" in deleted["msg"]
    assert sandbox.kube().request("GET", "/api/v1/nodes/" + name)["metadata"]["name"] == name


def test_donor_node_object_is_deleted_idempotently(sandbox, new_nodes):
    (name,) = new_nodes(1)
    sandbox.kube().merge_patch("/api/v1/nodes/" + name, {"metadata": {"annotations": {PREFIX + "/obsolete": "true"}}})
    args = dict(sandbox.auth_args(), name=name, state="absent")
    assert run_module("node_phase", args, check=True)["deleted"]
    assert sandbox.kube().request("GET", "/api/v1/nodes/" + name)["metadata"]["name"] == name
    gone = run_module("node_phase", args)
    assert gone["changed"] and gone["deleted"]
    sandbox.kube().request("GET", "/api/v1/nodes/" + name, ok=(404,))  # raises unless the Node is gone
    again = run_module("node_phase", args)
    assert not again["changed"] and not again["deleted"]


def test_missing_node_and_bad_prefix_are_clear_errors(sandbox):
    missing = run_module("node_phase", dict(sandbox.auth_args(), name="no-such-node", phase="drained"))
    assert missing["failed"] and "does not exist" in missing["msg"]
    bad = run_module("node_phase", dict(sandbox.auth_args(), name="x", phase="drained", annotation_prefix="Not A Prefix"))
    assert bad["failed"] and "DNS subdomain" in bad["msg"]
