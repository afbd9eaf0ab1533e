"""Only a Lease the API server says is missing counts as absent; any other 404 is an error."""

import json

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import lease as leases
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.lease import is_missing_lease

MISSING = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
           "message": 'leases.coordination.k8s.io "kubenodes-image-upgrade" not found',
           "details": {"name": "kubenodes-image-upgrade", "group": "coordination.k8s.io", "kind": "leases"}}


def test_the_api_servers_not_found_for_the_lease_is_a_missing_lease():
    assert is_missing_lease(404, json.dumps(MISSING)) is True
    assert is_missing_lease(404, json.dumps(MISSING).encode()) is True


def test_a_404_that_is_not_about_a_lease_is_not_a_missing_lease():
    # What the API server answers for a path it does not serve (a host URL with a trailing slash or a
    # path prefix), a proxy's page, another kind's NotFound, an empty body.
    assert is_missing_lease(404, "404 page not found\n") is False
    assert is_missing_lease(404, "<html>Not Found</html>") is False
    assert is_missing_lease(404, json.dumps(dict(MISSING, details={"kind": "configmaps"}))) is False
    assert is_missing_lease(404, json.dumps(dict(MISSING, kind="Lease"))) is False
    assert is_missing_lease(404, None) is False
    assert is_missing_lease(404, "") is False
    assert is_missing_lease(404, "[]") is False


def test_other_statuses_are_never_a_missing_lease():
    assert is_missing_lease(403, json.dumps(MISSING)) is False


def test_the_lease_read_as_a_dict_gives_its_spec_with_microtimes():
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.lease import lease_spec_dict

    assert lease_spec_dict(None) is None
    lease = {"metadata": {"name": "l", "resourceVersion": "7"},
             "spec": {"holderIdentity": "h", "leaseDurationSeconds": 300, "acquireTime": "2026-12-01T10:00:00.000000Z",
                      "renewTime": "2026-12-01T10:05:00.5Z", "leaseTransitions": 2}}
    assert lease_spec_dict(lease) == {"holderIdentity": "h", "leaseDurationSeconds": 300,
                                      "acquireTime": "2026-12-01T10:00:00.000000Z",
                                      "renewTime": "2026-12-01T10:05:00.500000Z"}
    empty = {"holderIdentity": None, "leaseDurationSeconds": None, "acquireTime": None, "renewTime": None}
    assert lease_spec_dict({"spec": {}}) == empty


def test_a_written_lease_spec_leaves_unset_fields_out():
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.lease import new_lease_spec

    assert new_lease_spec(None, 300, None, None, None) == {"leaseDurationSeconds": 300}
    assert new_lease_spec("h", 60, "a", "r", 1) == {"holderIdentity": "h", "leaseDurationSeconds": 60,
                                                    "acquireTime": "a", "renewTime": "r", "leaseTransitions": 1}


def test_the_lease_is_created_and_replaced_on_its_own_path(monkeypatch):
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import lease

    calls = []
    monkeypatch.setattr(lease.kube, "request", lambda client, method, path, body=None: calls.append((method, path, body)) or {})
    lease.write_lease(None, "l", "ns", None, {"holderIdentity": "h"})
    read = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l", "resourceVersion": "7"},
            "spec": {"holderIdentity": "old", "leaseTransitions": 1}}
    lease.write_lease(None, "l", "ns", read, {"holderIdentity": "h"})
    assert calls == [
        ("POST", "/apis/coordination.k8s.io/v1/namespaces/ns/leases",
         {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l", "namespace": "ns"},
          "spec": {"holderIdentity": "h"}}),
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", dict(read, spec={"holderIdentity": "h"})),
    ]


def test_the_holding_in_the_diff_is_the_holder_and_the_expiry():
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.lease import holding

    spec = {"holderIdentity": "h", "leaseDurationSeconds": 300, "renewTime": "2026-12-01T10:05:00.000000Z"}
    assert holding(spec) == {"holder": "h", "expires_at": "2026-12-01T10:10:00.000000Z"}
    nobody = {"holder": "", "expires_at": ""}
    assert holding(None) == holding({"holderIdentity": None, "leaseDurationSeconds": 300}) == nobody
    assert holding({"holderIdentity": "h"}) == {"holder": "h", "expires_at": ""}


def _lease_with(annotations):
    return {"metadata": {"name": "l", "namespace": "ns", "resourceVersion": "7", "annotations": annotations},
            "spec": {"holderIdentity": "run-1"}}


def test_an_abort_is_asked_once_on_the_lease_and_read_back(monkeypatch):
    """abort_upgrade.yml asks the holder to stop through the Lease's annotation; a second ask keeps the first moment."""
    stored = [_lease_with({"other": "kept"})]
    puts = []
    monkeypatch.setattr(leases, "read_lease", lambda client, name, namespace: stored[-1])
    monkeypatch.setattr(leases.kube, "request", lambda client, method, path, body=None: (
        puts.append(body), stored.append(body))[0])
    assert leases.abort_requested(stored[-1]) is None
    assert leases.request_abort(None, "l", "ns", "2026-01-01T00:00:00Z") == "2026-01-01T00:00:00Z"
    assert leases.request_abort(None, "l", "ns", "2026-01-02T00:00:00Z") == "2026-01-01T00:00:00Z"
    [body] = puts
    assert body["metadata"]["annotations"] == {"other": "kept", leases.ABORT_ANNOTATION: "2026-01-01T00:00:00Z"}
    assert body["metadata"]["resourceVersion"] == "7" and body["spec"] == {"holderIdentity": "run-1"}
    assert leases.abort_requested(body) == "2026-01-01T00:00:00Z"


def test_a_new_holder_clears_the_abort_asked_of_the_one_before(monkeypatch):
    bodies = []
    monkeypatch.setattr(leases.kube, "request", lambda client, method, path, body=None: bodies.append(body) or {})
    held = _lease_with({leases.ABORT_ANNOTATION: "t", "other": "kept"})
    leases.write_lease(None, "l", "ns", held, {"holderIdentity": "run-2"}, {leases.ABORT_ANNOTATION: None})
    assert bodies[0]["metadata"]["annotations"] == {"other": "kept"}
