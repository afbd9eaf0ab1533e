"""The shipped least privilege (roles/rolling_upgrade/files/rbac.yml), applied as a user would
(`kubectl apply -f`), asked with `kubectl auth can-i --as` its ServiceAccount: allowed what the job needs,
denied everything near it (the other ConfigMaps, Leases and Deployments of kube-system, secrets, pod
creation, exec, the status of nodes, RBAC itself).

The end-to-end upgrades (test_upgrade_e2e.py test_full_upgrade) compare the requests the ServiceAccount
makes with the rules in both directions; the one grant a plain upgrade does not use (pods delete) is used
here, by node_drain with disable_eviction, and found in the audit log.
"""

import subprocess

import pytest

from tests import rbac_audit
from ansible_run import run_module
from drain_helpers import create_deployment, unique_group, wait_running_on, wait_until
from sandbox import binaries

pytestmark = pytest.mark.integration

ITEMS = rbac_audit.shipped()
NAMESPACE, ACCOUNT = rbac_audit.service_account(ITEMS)
AS = "system:serviceaccount:%s:%s" % (NAMESPACE, ACCOUNT)

# (verb, resource[/NAME] or resource, namespace or None for all/cluster-scoped, subresource)
ALLOWED = [
    ("get", "nodes", None, None), ("list", "nodes", None, None), ("watch", "nodes", None, None),
    ("patch", "nodes", None, None),
    ("delete", "nodes", None, None),
    ("list", "pods", None, None), ("list", "pods", "default", None), ("delete", "pods", "default", None),
    # the preflight's look at the pods of kube-system (rolling_upgrade_allow_unready_system_pods)
    ("list", "pods", "kube-system", None),
    ("create", "pods", "default", "eviction"), ("create", "pods", "kube-system", "eviction"),
    ("list", "poddisruptionbudgets.policy", None, None),
    ("list", "poddisruptionbudgets.policy", "default", None),
    ("get", "leases.coordination.k8s.io/kubenodes-image-upgrade", "kube-system", None),
    ("update", "leases.coordination.k8s.io/kubenodes-image-upgrade", "kube-system", None),
    ("create", "leases.coordination.k8s.io", "kube-system", None),
    ("get", "configmaps/kubenodes-image-upgrade-journal", "kube-system", None),
    ("update", "configmaps/kubenodes-image-upgrade-journal", "kube-system", None),
    ("create", "configmaps", "kube-system", None),
    ("get", "deployments.apps/cluster-autoscaler", "kube-system", None),
    ("patch", "deployments.apps/cluster-autoscaler", "kube-system", None),
    # Events about Nodes (rolling_upgrade_events), where the kubelet writes them
    ("create", "events", "default", None), ("get", "events", "default", None), ("patch", "events", "default", None),
]

DENIED = [
    # the other ConfigMaps of kube-system, and listing them
    *[(verb, "configmaps/" + name, "kube-system", None)
      for name in ("kubeadm-config", "coredns", "aws-auth", "extension-apiserver-authentication", "kube-proxy",
                   "kube-root-ca.crt")
      for verb in ("get", "update", "patch", "delete")],
    ("list", "configmaps", "kube-system", None), ("watch", "configmaps", "kube-system", None),
    ("delete", "configmaps/kubenodes-image-upgrade-journal", "kube-system", None),
    ("patch", "configmaps/kubenodes-image-upgrade-journal", "kube-system", None),
    ("get", "configmaps/kubenodes-image-upgrade-journal", "default", None),
    # the other Leases (leader election of the control plane), and listing them
    *[(verb, "leases.coordination.k8s.io/" + name, "kube-system", None)
      for name in ("kube-controller-manager", "kube-scheduler", "cluster-autoscaler")
      for verb in ("get", "update", "patch", "delete")],
    ("list", "leases.coordination.k8s.io", "kube-system", None),
    ("delete", "leases.coordination.k8s.io/kubenodes-image-upgrade", "kube-system", None),
    ("patch", "leases.coordination.k8s.io/kubenodes-image-upgrade", "kube-system", None),
    ("create", "leases.coordination.k8s.io", "default", None),
    # other Deployments, and the autoscaler's name elsewhere
    ("patch", "deployments.apps/coredns", "kube-system", None), ("update", "deployments.apps/coredns", "kube-system", None),
    ("get", "deployments.apps/coredns", "kube-system", None), ("list", "deployments.apps", "kube-system", None),
    ("patch", "deployments.apps", "default", None), ("patch", "deployments.apps/cluster-autoscaler", "default", None),
    ("update", "deployments.apps/cluster-autoscaler", "kube-system", None),
    ("patch", "deployments.apps", "kube-system", "scale"),
    ("patch", "daemonsets.apps", "kube-system", None), ("patch", "statefulsets.apps", "default", None),
    ("list", "daemonsets.apps", None, None), ("list", "replicasets.apps", None, None),
    ("list", "statefulsets.apps", None, None),
    # secrets, pods
    ("get", "secrets", "kube-system", None), ("list", "secrets", None, None), ("list", "secrets", "default", None),
    ("create", "pods", "default", None), ("create", "pods", "kube-system", None), ("get", "pods", "default", None),
    ("update", "pods", "default", None), ("patch", "pods", "default", None),
    ("create", "pods", "default", "exec"), ("get", "pods", "default", "exec"), ("create", "pods", "default", "attach"),
    ("create", "pods", "default", "portforward"), ("get", "pods", "default", "log"),
    # nodes beyond what the job does
    ("update", "nodes", None, None), ("create", "nodes", None, None),
    ("patch", "nodes", None, "status"), ("get", "nodes", None, "proxy"),
    # identities and RBAC
    ("create", "serviceaccounts", "kube-system", "token"), ("create", "clusterrolebindings.rbac.authorization.k8s.io", None, None),
    ("create", "rolebindings.rbac.authorization.k8s.io", "kube-system", None),
    ("escalate", "clusterroles.rbac.authorization.k8s.io", None, None),
    ("impersonate", "users", None, None),
    ("delete", "poddisruptionbudgets.policy", "default", None), ("create", "events", "kube-system", None),
    ("delete", "events", "default", None), ("list", "events", None, None), ("update", "events", "default", None),
]


def kubectl(sandbox, *args, check=True):
    return subprocess.run([str(binaries.path_of("kubectl")), "--kubeconfig", sandbox.kubeconfig, *args],
                          capture_output=True, text=True, timeout=60, check=check)


@pytest.fixture(scope="module")
def applied(sandbox):
    """rbac.yml applied to the shared sandbox as shipped (kubectl apply is idempotent: a second apply of
    the same file changes nothing), and a token of its ServiceAccount."""
    out = kubectl(sandbox, "apply", "-f", str(rbac_audit.RBAC_FILE))
    assert out.returncode == 0, out.stderr
    again = kubectl(sandbox, "apply", "-f", str(rbac_audit.RBAC_FILE))
    assert again.stdout.count("unchanged") == len(ITEMS), again.stdout
    token = kubectl(sandbox, "create", "token", ACCOUNT, "-n", NAMESPACE, "--duration", "1h").stdout.strip()
    return {"host": sandbox.apiserver, "api_key": token, "ca_cert": sandbox.ca}


def can_i(sandbox, verb, resource, namespace, subresource):
    args = ["auth", "can-i", verb, resource, "--as", AS]
    args += ["-n", namespace] if namespace else ["--all-namespaces"]
    if subresource:
        args += ["--subresource", subresource]
    out = kubectl(sandbox, *args, check=False)
    assert out.stdout.strip() in ("yes", "no"), (args, out.stdout, out.stderr)
    return out.stdout.strip() == "yes"


def where(namespace, subresource):
    return "%s%s" % (" --subresource " + subresource if subresource else "",
                     " -n " + namespace if namespace else " (all namespaces)")


def test_the_service_account_may_do_what_the_job_needs_and_nothing_near_it(sandbox, applied):
    wrong = ["can-i %s %s%s: no, the job needs it" % (verb, resource, where(namespace, sub))
             for verb, resource, namespace, sub in ALLOWED if not can_i(sandbox, verb, resource, namespace, sub)]
    wrong += ["can-i %s %s%s: yes, it must not" % (verb, resource, where(namespace, sub))
              for verb, resource, namespace, sub in DENIED if can_i(sandbox, verb, resource, namespace, sub)]
    assert not wrong, "\n".join(wrong)


def test_drain_without_eviction_deletes_pods_as_the_shipped_service_account(sandbox, applied, namespace, new_nodes):
    """The one grant a plain upgrade does not use (rbac_audit.NOT_IN_A_PLAIN_UPGRADE): pods delete, by
    node_drain with disable_eviction (as with rolling_upgrade_drain_on_timeout=force). It works as the
    ServiceAccount, and the audit log shows the deletes, each granted."""
    kube = sandbox.kube()
    group = unique_group()
    [donor] = new_nodes(1, group=group)
    create_deployment(kube, namespace, "plain", 2, group, grace=1)
    wait_running_on(kube, namespace, donor, 2)
    pods = sorted(p["metadata"]["name"] for p in kube.request("GET", "/api/v1/namespaces/%s/pods" % namespace)["items"])

    result = run_module("node_drain", dict(applied, name=donor, disable_eviction=True, wait=True, wait_timeout=60,
                                           wait_sleep=1), timeout=300)
    assert result["failed"] is False and result["reason"] == "drained", result

    def deletes():
        made, _other = rbac_audit.requests(sandbox.state["audit_log"], AS)
        return [r for r in made if r.verb == "delete" and r.resource == "pods" and r.namespace == namespace]

    found = wait_until("the audit log shows the pod deletes", deletes, timeout=10)
    assert {r.name for r in found} == set(pods) and all(r.code in (200, 202) for r in found), found
    made, _other = rbac_audit.requests(sandbox.state["audit_log"], AS)
    ungranted, _unused = rbac_audit.compare(rbac_audit.grants(ITEMS), made)
    assert not ungranted, rbac_audit.describe(ungranted)
