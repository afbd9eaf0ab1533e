"""Only a Lease the API server says is missing counts as absent; any other 404 is an error."""

import json

from ansible_collections.kubenodes.image_upgrade.plugins.modules.upgrade_lock import is_missing_lease

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
