"""roles/rolling_upgrade/files/rbac.yml: what the shipped ServiceAccount is granted (pure reading of the
file), that the names in it are the role's defaults, and the RBAC evaluation the end-to-end audit
comparison uses (tests/rbac_audit.py)."""

import pathlib

import yaml

from tests import rbac_audit
from tests.rbac_audit import Grant, Request

REPO = pathlib.Path(__file__).resolve().parents[3]
DEFAULTS = yaml.safe_load((REPO / "roles" / "rolling_upgrade" / "defaults" / "main.yml").read_text())
ITEMS = rbac_audit.shipped()


def test_one_file_holds_the_account_its_roles_and_their_bindings():
    kinds = sorted(item["kind"] for item in ITEMS)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "Role", "Role", "Role", "RoleBinding", "RoleBinding",
                     "RoleBinding", "ServiceAccount"]
    assert rbac_audit.service_account(ITEMS) == ("kube-system", "kubenodes-image-upgrade")


def test_the_grants_are_exactly_what_the_modules_call():
    lock = (DEFAULTS["rolling_upgrade_lock_namespace"], DEFAULTS["rolling_upgrade_lock_name"])
    scaler = (DEFAULTS["rolling_upgrade_autoscaler_namespace"], DEFAULTS["rolling_upgrade_autoscaler_name"])
    journal = "kubenodes-image-upgrade-journal"
    assert rbac_audit.grants(ITEMS) == {
        Grant("get", "", "nodes", None, None), Grant("list", "", "nodes", None, None),
        Grant("watch", "", "nodes", None, None),
        Grant("patch", "", "nodes", None, None), Grant("delete", "", "nodes", None, None),
        Grant("list", "", "pods", None, None), Grant("delete", "", "pods", None, None),
        Grant("create", "", "pods/eviction", None, None),
        Grant("list", "policy", "poddisruptionbudgets", None, None),
        Grant("get", "coordination.k8s.io", "leases", lock[0], lock[1]),
        Grant("update", "coordination.k8s.io", "leases", lock[0], lock[1]),
        Grant("create", "coordination.k8s.io", "leases", lock[0], None),
        Grant("get", "", "configmaps", lock[0], journal), Grant("update", "", "configmaps", lock[0], journal),
        Grant("create", "", "configmaps", lock[0], None),
        Grant("get", "apps", "deployments", scaler[0], scaler[1]),
        Grant("patch", "apps", "deployments", scaler[0], scaler[1]),
        Grant("create", "", "events", "default", None), Grant("get", "", "events", "default", None),
        Grant("patch", "", "events", "default", None),
    }


def test_the_journal_name_is_the_modules_default():
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import journal

    # upgrade_journal's options are journal.py's
    assert journal.ARGUMENT_SPEC["name"]["default"] == "kubenodes-image-upgrade-journal"


def test_the_readme_shows_the_one_apply_and_says_create_cannot_be_narrowed():
    readme = (REPO / "README.md").read_text()
    assert "kubectl apply -f" in readme and "rbac.yml" in readme
    assert "create" in readme and "resourceNames" in readme


def grant(verb, resource, namespace=None, name=None, group=""):
    return Grant(verb, group, resource, namespace, name)


def request(verb, resource, namespace=None, name="", code=200, group=""):
    return Request(verb, group, resource, namespace, name, code)


def test_evaluation_follows_rbac():
    by_name = grant("get", "leases", "kube-system", "lock", "coordination.k8s.io")
    assert rbac_audit.allows(by_name, request("get", "leases", "kube-system", "lock", group="coordination.k8s.io"))
    assert not rbac_audit.allows(by_name, request("get", "leases", "kube-system", "kube-scheduler", group="coordination.k8s.io"))
    assert not rbac_audit.allows(by_name, request("get", "leases", "default", "lock", group="coordination.k8s.io"))
    assert not rbac_audit.allows(by_name, request("get", "leases", "kube-system", "lock"))  # other group
    cluster_wide = grant("list", "pods")
    assert rbac_audit.allows(cluster_wide, request("list", "pods"))
    assert rbac_audit.allows(cluster_wide, request("list", "pods", "workloads"))
    assert not rbac_audit.allows(cluster_wide, request("list", "pods/log", "workloads"))
    assert rbac_audit.allows(grant("*", "*", group="*"), request("delete", "secrets", "x", "y"))


def test_the_name_rbac_sees():
    # A create names its object in the body, not the URL: resourceNames cannot match it.
    assert rbac_audit.authorizer_name("create", None, "journal") == ""
    assert rbac_audit.authorizer_name("create", "eviction", "web-1") == "web-1"
    assert rbac_audit.authorizer_name("list", None, "") == ""
    assert rbac_audit.authorizer_name("update", None, "journal") == "journal"


def test_compare_both_directions():
    granted = {grant("get", "nodes"), grant("delete", "nodes"), grant("create", "pods/eviction")}
    made = [request("get", "nodes", name="a"), request("create", "pods/eviction", "w", "p", code=429),
            request("get", "secrets", "kube-system", "s", code=403), request("patch", "nodes", name="a", code=403)]
    ungranted, unused = rbac_audit.compare(granted, made)
    assert ungranted == sorted([made[2], made[3]], key=repr)
    assert unused == [grant("delete", "nodes")]


def test_requests_from_an_audit_log(tmp_path):
    import json

    user = "system:serviceaccount:kube-system:kubenodes-image-upgrade"
    events = [
        {"stage": "ResponseComplete", "verb": "create", "user": {"username": user},
         "objectRef": {"resource": "configmaps", "namespace": "kube-system", "name": "j", "apiVersion": "v1"},
         "responseStatus": {"code": 201}},
        {"stage": "ResponseComplete", "verb": "create", "user": {"username": user},
         "objectRef": {"resource": "pods", "subresource": "eviction", "namespace": "w", "name": "p"},
         "responseStatus": {"code": 201}},
        {"stage": "ResponseStarted", "verb": "watch", "user": {"username": user}, "objectRef": {"resource": "pods"}},
        {"stage": "ResponseComplete", "verb": "get", "user": {"username": "admin"}, "objectRef": {"resource": "secrets"}},
        {"stage": "ResponseComplete", "verb": "create", "user": {"username": user}, "impersonatedUser": {"username": "x"},
         "objectRef": {"resource": "selfsubjectaccessreviews", "apiGroup": "authorization.k8s.io"}},
        {"stage": "ResponseComplete", "verb": "get", "user": {"username": user}, "requestURI": "/version",
         "responseStatus": {"code": 200}},
    ]
    log = tmp_path / "audit.log"
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    made, other = rbac_audit.requests(log, user)
    assert made == [request("create", "configmaps", "kube-system", "", 201), request("create", "pods/eviction", "w", "p", 201)]
    assert other == [("get", "/version", 200)]
