"""The collection's least privilege, measured: the rules of roles/rolling_upgrade/files/rbac.yml as the
ServiceAccount it ships gets them, the requests that ServiceAccount made (the sandbox kube-apiserver's
audit log, Metadata level: see sandbox/controlplane.py AUDIT_POLICY), and the two compared in both
directions:

- ungranted: a request no rule allows, or that the kube-apiserver refused (403);
- unused: a grant (one verb on one resource, one name when the rule lists resourceNames, in one namespace
  or cluster-wide) that no request used.

Evaluating a request against the rules follows Kubernetes' RBAC authorizer: a ClusterRole bound by a
ClusterRoleBinding applies in every namespace and to cluster-scoped resources, a Role only in its
namespace; a rule with resourceNames matches only requests that name an object in their URL (so never a
`create` of a resource, nor a list). Pure functions on plain data, so tests/unit tests them too.
"""

import collections
import json
import pathlib

import yaml

REPO = pathlib.Path(__file__).resolve().parents[1]
RBAC_FILE = REPO / "roles" / "rolling_upgrade" / "files" / "rbac.yml"

# One verb on one resource ("pods/eviction" for a subresource) of one API group, in a namespace (None:
# cluster-wide, from a ClusterRoleBinding) and for one object name (None: any name).
Grant = collections.namedtuple("Grant", "verb group resource namespace name")
# One request: the verb, group, resource (with /subresource), namespace (None: cluster-scoped), the name the
# RBAC authorizer saw ("" when the URL named none) and the HTTP status of the answer.
Request = collections.namedtuple("Request", "verb group resource namespace name code")

# Verbs whose URL names no object: RBAC sees no name, so resourceNames cannot narrow them.
_NAMELESS_VERBS = ("list", "watch", "deletecollection")


def shipped(path=RBAC_FILE):
    """The objects of rbac.yml (a List)."""
    document = yaml.safe_load(pathlib.Path(path).read_text())
    assert document["kind"] == "List", "%s is a List, so `kubectl apply -f` creates all of it" % path
    return document["items"]


def service_account(items):
    """(namespace, name) of the ServiceAccount rbac.yml ships."""
    [account] = [item for item in items if item["kind"] == "ServiceAccount"]
    return account["metadata"]["namespace"], account["metadata"]["name"]


def username(items):
    return "system:serviceaccount:%s:%s" % service_account(items)


def grants(items):
    """Every Grant the shipped ServiceAccount holds through the shipped bindings."""
    namespace, name = service_account(items)
    roles = {(item["kind"], item["metadata"].get("namespace"), item["metadata"]["name"]): item
             for item in items if item["kind"] in ("ClusterRole", "Role")}
    found = set()
    for binding in items:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if {"kind": "ServiceAccount", "name": name, "namespace": namespace} not in binding["subjects"]:
            continue
        ref = binding["roleRef"]
        where = binding["metadata"].get("namespace")  # None for a ClusterRoleBinding
        role = roles.get((ref["kind"], where if ref["kind"] == "Role" else None, ref["name"]))
        assert role is not None, "binding %s refers to %s %s, which rbac.yml does not ship" % (
            binding["metadata"]["name"], ref["kind"], ref["name"])
        for rule in role.get("rules") or []:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for object_name in rule.get("resourceNames") or [None]:
                            found.add(Grant(verb, group, resource, where, object_name))
    return found


def authorizer_name(verb, subresource, name):
    """The object name the RBAC authorizer sees: none for a list, or for a create of a resource (the URL of
    POST /namespaces/x/pods names no pod; POST .../pods/NAME/eviction does)."""
    if verb in _NAMELESS_VERBS or (verb == "create" and not subresource):
        return ""
    return name or ""


def requests(audit_log, user):
    """The Requests `user` made, from a kube-apiserver audit log (JSON lines), and the non-resource
    requests (URL paths) it made."""
    found, other = [], []
    path = pathlib.Path(audit_log)
    if not path.exists():
        return found, other
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        event = json.loads(line)
        if event.get("stage") != "ResponseComplete" or event.get("user", {}).get("username") != user:
            continue
        if event.get("impersonatedUser"):
            continue  # someone else acting as the account (kubectl auth can-i --as)
        ref = event.get("objectRef")
        code = (event.get("responseStatus") or {}).get("code")
        if not ref or not ref.get("resource"):
            other.append((event.get("verb"), event.get("requestURI"), code))
            continue
        resource = ref["resource"] + ("/" + ref["subresource"] if ref.get("subresource") else "")
        found.append(Request(event["verb"], ref.get("apiGroup") or "", resource, ref.get("namespace") or None,
                             authorizer_name(event["verb"], ref.get("subresource"), ref.get("name")), code))
    return found, other


def allows(grant, request):
    if grant.verb not in (request.verb, "*") or grant.group not in (request.group, "*"):
        return False
    if grant.resource not in (request.resource, "*"):
        return False
    if grant.namespace is not None and grant.namespace != request.namespace:
        return False
    return grant.name is None or grant.name == request.name


def compare(granted, made):
    """(ungranted requests, unused grants), each sorted."""
    ungranted = sorted({r for r in made if r.code == 403 or not any(allows(g, r) for g in granted)},
                       key=repr)
    unused = sorted({g for g in granted if not any(allows(g, r) for r in made if r.code != 403)}, key=repr)
    return ungranted, unused


def describe(entries):
    return "\n".join("  %s %s%s%s%s" % (
        e.verb, e.group + "/" if e.group else "", e.resource,
        " in %s" % e.namespace if e.namespace else " (cluster-wide)",
        " named %s" % e.name if e.name else "") + (" -> %s" % e.code if isinstance(e, Request) else "")
        for e in entries) or "  (none)"


# Grants the shipped rules hold for a path a normal upgrade does not take, and the test that makes the
# ServiceAccount use each (so each is still shown to be called, only not in the same run).
NOT_IN_A_PLAIN_UPGRADE = {
    Grant("watch", "", "nodes", None, None):
        "the step engine watches Nodes between passes (KubeAccess.wait_for_change), only when a pass "
        "moved nothing: tests/integration/test_executor_kube.py "
        "test_a_wait_ends_on_a_change_the_plan_reads_and_not_on_others",
    Grant("delete", "", "pods", None, None):
        "node_drain deletes pods with disable_eviction, and with on_timeout=force "
        "(rolling_upgrade_drain_on_timeout=force): tests/integration/test_rbac.py "
        "test_drain_without_eviction_deletes_pods_as_the_shipped_service_account",
    Grant("get", "", "events", "default", None):
        "upgrade_journal aggregates a repeated Event (a problem seen in several passes) into the one already "
        "there: tests/integration/test_run_control_modules.py "
        "test_journal_writes_each_step_as_one_event_on_its_node_and_aggregates_repeats",
    Grant("patch", "", "events", "default", None): "the same aggregation (the count and last time go up)",
}


def check_upgrade(handle, items=None):
    """After an end-to-end upgrade run as the shipped ServiceAccount: every request it made was granted,
    and every grant was used, except the NOT_IN_A_PLAIN_UPGRADE ones. Raises AssertionError naming
    what differs."""
    items = items or shipped()
    made, other = requests(handle.state["audit_log"], username(items))
    assert made, "the audit log %s holds no request of %s: did the run authenticate as it?" % (
        handle.state["audit_log"], username(items))
    ungranted, unused = compare(grants(items), made)
    refused = [entry for entry in other if entry[2] == 403]
    assert not ungranted and not refused, (
        "requests the shipped rbac.yml does not grant (or the server refused):\n%s\n%s"
        % (describe(ungranted), "\n".join("  %s %s -> %s" % entry for entry in refused)))
    unexpected = [g for g in unused if g not in NOT_IN_A_PLAIN_UPGRADE]
    assert not unexpected, ("grants in rbac.yml that the upgrade never used (drop them, or say in "
                            "NOT_IN_A_PLAIN_UPGRADE which path uses them):\n%s" % describe(unexpected))
    return made
