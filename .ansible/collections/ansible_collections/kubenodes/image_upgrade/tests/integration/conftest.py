"""Fixtures for integration tests: a real local sandbox (kube-apiserver, controller-manager, scheduler on
a real etcd; simulated nodes; a real control-plane etcd; the cloud emulators that exist).

Fixture API
-----------
``sandbox`` (session scope): one sandbox shared by every test of the session (per xdist worker),
started in a unique temporary directory and stopped at the end, even on failure. It is a
``sandbox.cli.Sandbox`` with:

    sandbox.kubeconfig            admin kubeconfig path (client certificate)
    sandbox.apiserver             "https://127.0.0.1:PORT";  sandbox.ca  CA path;  sandbox.admin_token
    sandbox.auth_args()           module auth arguments for the admin: {"kubeconfig": path}
    sandbox.api_client()          a kubernetes.client.ApiClient (shared);  sandbox.core_v1()  CoreV1Api
    sandbox.kube()                a small raw-JSON client: .request(method, path, body, params=...),
                                  .merge_patch(path, body)   (fast for bulk work)
    sandbox.nodesim               node simulator control (sandbox.nodesim.NodeSimClient):
        .create_instance(provider_id, node_name, group_id=None, image=None, role="worker"|"control-plane",
                         zone=None)        the Node joins after the join delay and turns Ready
        .delete_instance(provider_id)      the Node goes NotReady (+ unreachable taints); etcd member stops
        .instances()                       [{provider_id, node_name, ip, state: booting|ready|never-joins|
                                            join-failed|deleted, ...}]
        .knobs(join_delay=, jitter=, never_join=[provider or group ids], max_termination_seconds=,
               pod_start_delay=)           returns every knob; .knobs() reads them
    sandbox.cp_etcd()             the control-plane etcd: {"endpoints": [...https://<node ip>:2379],
                                  "ca", "cert", "key" (client TLS paths), "members": {node: {client_url,
                                  peer_url, running, pid}}}
    sandbox.wait_nodes_ready(names, timeout=60)
    sandbox.cloud(name)           Admin of the running "gcp"/"azure"/"aws" emulator, or None
    sandbox.state                 the whole state dict (ports, PIDs, endpoints)

``cloud_admin`` (function): factory ``cloud_admin(name)`` returning ``sandbox.cloud(name)``, or skipping the
test when that emulator is not available in this checkout.

``namespace`` (function): a fresh namespace (its ``default`` service account exists) name; deleted
after the test, its pods force-deleted first.

``new_nodes`` (function): factory ``new_nodes(count, role="worker", group="g", image="image-a",
zone="zone-a", wait=True)`` creating instances through the simulator with unique names (made-up
``sim://`` providerIDs); returns the node names. They are deleted (instance and Node) after the test.

``fresh_sandbox`` (function): factory ``fresh_sandbox(clouds=[])`` starting a separate, isolated
sandbox for tests that need a whole cluster (end-to-end upgrades); each is stopped at teardown.

``upgrade_cluster`` (function): factory ``upgrade_cluster(cloud, least_privilege=True, control_planes=1,
workers=2, groups=2, **role variable overrides)`` for the end-to-end upgrade tests: a fresh sandbox
seeded on image A with image B created; returns (handle, role variables, start snapshot). With
``least_privilege`` the role authenticates as a ServiceAccount bound only to the role's rbac.yml.

Set KUBENODES_KEEP_SANDBOX=1 to keep the state directories (every component's log under logs/).

Nodes in the shared sandbox outlive a test unless it removes them (``new_nodes`` does): tests must not
assume they are alone in it; select their own nodes by name or label.
"""

import os
import pathlib
import shutil
import tempfile
import time
import uuid

import pytest

from sandbox import cli


def _start(prefix, clouds):
    state_dir = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
    try:
        # owner: if this pytest process dies without teardown (killed), the sandbox stops by itself
        handle = cli.Sandbox.start(state_dir, clouds=clouds, say=lambda *_: None, owner_pid=os.getpid())
    except BaseException:
        cli.down(state_dir, say=lambda *_: None)
        raise
    return handle


def _stop(handle):
    handle.stop()
    # KUBENODES_KEEP_SANDBOX=1 keeps the state directory (logs of every component) for a post-mortem.
    if os.environ.get("KUBENODES_KEEP_SANDBOX") != "1":
        shutil.rmtree(handle.state_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def sandbox():
    handle = _start("kubenodes-sandbox-", "available")
    try:
        yield handle
    finally:
        _stop(handle)


@pytest.fixture
def cloud_admin(sandbox):
    def get(name):
        admin = sandbox.cloud(name)
        if admin is None:
            pytest.skip("the %s emulator is not available in this checkout" % name)
        return admin
    return get


@pytest.fixture
def namespace(sandbox):
    from kubernetes import client

    name = "t-" + uuid.uuid4().hex[:10]
    core = sandbox.core_v1()
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    deadline = time.monotonic() + 30
    while True:  # pods are refused until the serviceaccount controller made `default`
        try:
            core.read_namespaced_service_account("default", name)
            break
        except client.ApiException as exc:
            if exc.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    yield name
    # Pods on nodes without a simulated kubelet would keep the namespace Terminating: force them.
    kube = sandbox.kube()
    try:
        for pod in kube.request("GET", "/api/v1/namespaces/%s/pods" % name).get("items", []):
            kube.request("DELETE", "/api/v1/namespaces/%s/pods/%s" % (name, pod["metadata"]["name"]),
                         {"gracePeriodSeconds": 0}, ok=(200, 202, 404))
        kube.request("DELETE", "/api/v1/namespaces/" + name, ok=(200, 202, 404))
    except Exception:  # noqa: BLE001 - cleanup must not mask the test's own result
        pass


@pytest.fixture
def new_nodes(sandbox):
    created = []

    def make(count, role="worker", group="g", image="image-a", zone="zone-a", wait=True, timeout=60):
        names = []
        for dummy in range(count):
            name = "%s-%s" % ("cp" if role == "control-plane" else "w", uuid.uuid4().hex[:8])
            provider_id = "sim://%s/%s" % (group, name)
            sandbox.nodesim.create_instance(provider_id, name, group_id=group, image=image, role=role, zone=zone)
            created.append((provider_id, name))
            names.append(name)
        if wait:
            sandbox.wait_nodes_ready(names, timeout=timeout)
        return names

    yield make
    kube = sandbox.kube()
    for provider_id, name in created:
        try:
            # Like the upgrade tool, take a control-plane node's etcd member out of the cluster first:
            # stopped members would otherwise cost the shared control-plane etcd its quorum.
            sandbox.nodesim.delete_instance(provider_id, remove_etcd_member=True)
        except RuntimeError:
            pass
        kube.request("DELETE", "/api/v1/nodes/" + name, ok=(200, 202, 404))


@pytest.fixture
def fresh_sandbox():
    started = []

    def make(clouds=()):
        handle = _start("kubenodes-fresh-", list(clouds))
        started.append(handle)
        return handle

    yield make
    for handle in started:
        _stop(handle)


def pytest_configure(config):
    config.addinivalue_line("markers", "integration: needs the local sandbox (real control plane)")
    config.addinivalue_line("markers", "slow: takes more than a few seconds even on an idle machine")


@pytest.fixture
def upgrade_cluster(fresh_sandbox):
    """Factory ``upgrade_cluster(cloud, least_privilege=True, control_planes=1, workers=2, groups=2,
    **role variable overrides)`` for the end-to-end upgrade tests: a fresh sandbox with `cloud`, seeded on
    image A with image B created (upgrade_helpers.prepare). With `least_privilege` the role authenticates
    as a ServiceAccount bound only to roles/rolling_upgrade/files/rbac.yml. Returns (handle, role
    variables, snapshot of the start)."""
    import upgrade_helpers  # pylint: disable=import-outside-toplevel

    def make(cloud, least_privilege=True, **overrides):
        handle = fresh_sandbox(clouds=[cloud])
        values, start = upgrade_helpers.prepare(handle, cloud, **overrides)
        if least_privilege:
            values["rolling_upgrade_kube"] = upgrade_helpers.least_privilege_auth(handle)
        return handle, values, start
    return make
