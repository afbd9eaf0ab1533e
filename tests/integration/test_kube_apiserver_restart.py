"""A real kube-apiserver restarted under module calls: kube.request (the one way every module and the
upgrade_step executor reach Kubernetes) waits for it and the call succeeds; with the retries turned off
(KUBENODES_API_RETRY_SECONDS=0) the same call, made at the same moment, fails on the refused connection,
which shows that the calls did meet the API server down (bench/chaos.py's `apiserver` experiment exited 2
on exactly that before the retries).

A sandbox of its own (fresh_sandbox, no cloud): restarting the shared sandbox's API server would disturb the
tests running beside this one."""

import socket
import threading
import time
import uuid
from urllib.parse import urlsplit

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import kube
from tests.ansible_run import run_module

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

# Long enough that an ansible-playbook started when the API server went away reaches its first call before
# the API server is back, even on a loaded machine; well inside kube.RETRY_SECONDS.
DOWN_SECONDS = 10


def refuses(url):
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=1):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


def test_module_calls_wait_for_a_restarting_apiserver(fresh_sandbox):
    handle = fresh_sandbox()
    restart = {}

    def do_restart():
        try:
            restart.update(handle.restart("kube-apiserver", down_seconds=DOWN_SECONDS))
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            restart["error"] = repr(exc)

    restarter = threading.Thread(target=do_restart)
    restarter.start()
    deadline = time.monotonic() + 60
    while not refuses(handle.apiserver):   # SIGTERM: the old process drains, then closes its port
        assert time.monotonic() < deadline and restarter.is_alive(), "the API server never went down: %s" % restart
        time.sleep(0.05)
    down_at = time.monotonic()

    lease = "restart-" + uuid.uuid4().hex[:8]
    results = {}

    def lock(key, name, env=None):
        results[key] = run_module("upgrade_lock", dict(handle.auth_args(), name=name, namespace="default",
                                                       holder="restart-test"), env=env)

    modules = [threading.Thread(target=lock, args=("retried", lease)),
               threading.Thread(target=lock, args=("control", lease + "-control", {kube.RETRY_SECONDS_ENV: "0"}))]
    for thread in modules:
        thread.start()
    # In this process as well, through the modules' own client and path: the call is made while the port refuses.
    api = kube.build_api_client(handle.auth_args())
    told = []
    kube.on_waiting(api, told.append)   # as the upgrade run shows it (issue 28: an outage was silent)
    assert refuses(handle.apiserver)
    began = time.monotonic()
    nodes = kube.request(api, "GET", "/api/v1/nodes")
    waited = time.monotonic() - began
    for thread in modules + [restarter]:
        thread.join(240)

    assert "error" not in restart and restart["new_pid"] != restart["old_pid"], restart
    assert nodes.get("kind") == "NodeList"
    assert waited > 1.0, "kube.request returned after %.1fs: it did not meet the API server down" % waited
    assert waited < kube.RETRY_SECONDS
    if waited >= kube.WAIT_NOTICE_SECONDS + kube.RETRY_MAX_DELAY:   # a refused attempt came after the notice time
        assert told, "waited %.1fs and said nothing" % waited
    for line in told:
        assert line.startswith("waiting for the Kubernetes API server %s for " % api.configuration.host), line
        assert "Connection refused" in line, line
    control = results["control"]
    assert control["failed"] and "Connection refused" in control["msg"], control
    retried = results["retried"]
    assert not retried["failed"], retried.get("msg")
    assert retried["acquired"] and retried["held_by"] == "restart-test"
    held = kube.request(api, "GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/" + lease)
    assert held["spec"]["holderIdentity"] == "restart-test"
    print("API server down %.1fs after it refused; in-process call waited %.1fs and said %r; restart %s"
          % (time.monotonic() - down_at, waited, told, restart))
