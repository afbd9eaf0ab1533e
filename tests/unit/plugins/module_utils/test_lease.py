"""Only a Lease the API server says is missing counts as absent; any other 404 is an error."""

import json

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
