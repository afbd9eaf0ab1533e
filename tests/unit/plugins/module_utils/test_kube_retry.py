"""kube.raw_request's retries against a restarting or overloaded API server: real HTTP on loopback (a small
server that answers as it is told, or a closed port), the real kubernetes client and urllib3; only the
clock and the sleep are the test's, so the bound is checked without waiting for it.
(test_kube_apiserver_restart.py in tests/integration restarts a real kube-apiserver under a module call.)"""

import http.server
import json
import re
import socket
import threading

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import kube

pytestmark = pytest.mark.timeout(60)


class Script(http.server.BaseHTTPRequestHandler):
    """Answers each request with the next step of server.script: (status, body, headers), or "drop" to
    close the connection without an answer; the last step repeats. Records (method, path) in server.seen."""

    protocol_version = "HTTP/1.1"

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        server = self.server
        with server.lock:
            server.seen.append((self.command, self.path))
            step = server.script[min(len(server.seen) - 1, len(server.script) - 1)]
        if step == "drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        status, body, headers = step
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Script)
    httpd.lock = threading.Lock()
    httpd.seen = []
    httpd.script = [(200, {}, None)]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def client_for(url):
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = url
    return client.ApiClient(configuration)


class FakeTime:
    """The test's clock: sleep() moves it on; every delay asked for is kept."""

    def __init__(self):
        self.now = 1000.0
        self.delays = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.delays.append(seconds)
        self.now += seconds


def call(api, method, path, body=None, fake=None):
    fake = fake or FakeTime()
    return kube.raw_request(api, method, path, body=body, timeout=(2, 5), clock=fake.clock, sleep=fake.sleep)


def status(code, message="", retry_after=None):
    body = {"kind": "Status", "code": code, "message": message}
    if retry_after is not None:
        body["details"] = {"retryAfterSeconds": retry_after}
    return (code, body, None)


def test_503_then_200_is_retried_with_growing_delays(server):
    server.script = [status(503, "not ready"), status(503, "not ready"), (200, {"kind": "NodeList", "items": []}, None)]
    fake = FakeTime()
    assert call(client_for("http://127.0.0.1:%d" % server.server_port), "GET", "/api/v1/nodes", fake=fake)["kind"] == "NodeList"
    assert len(server.seen) == 3
    assert len(fake.delays) == 2 and 0.4 <= fake.delays[0] <= 0.6 and 0.8 <= fake.delays[1] <= 1.2


def test_a_post_is_retried_on_503_and_429_and_retry_after_is_honoured(server):
    server.script = [status(429, "Too many requests, please try again later.", retry_after=3), status(503),
                     (201, {"kind": "Lease"}, None)]
    fake = FakeTime()
    body = {"metadata": {"generateName": "x-"}}   # even an unnamed POST: the server said it did not do it
    assert call(client_for("http://127.0.0.1:%d" % server.server_port), "POST", "/apis/x", body, fake)["kind"] == "Lease"
    assert len(server.seen) == 3 and fake.delays[0] == 3.0


def test_a_429_to_an_eviction_is_the_drain_loops_to_wait_on(server):
    server.script = [status(429, "Cannot evict pod as it would violate the pod's disruption budget.", retry_after=10)]
    api = client_for("http://127.0.0.1:%d" % server.server_port)
    with pytest.raises(kube.ApiCallError) as caught:
        call(api, "POST", "/api/v1/namespaces/a/pods/p/eviction", {"metadata": {"name": "p", "namespace": "a"}})
    assert caught.value.status == 429 and caught.value.retry_after == 10
    assert len(server.seen) == 1 and "attempts" not in caught.value.message


@pytest.mark.parametrize("code", [400, 403, 404, 409, 422, 500])
def test_other_answers_are_final(server, code):
    server.script = [status(code, "no")]
    with pytest.raises(kube.ApiCallError) as caught:
        call(client_for("http://127.0.0.1:%d" % server.server_port), "PATCH", "/api/v1/nodes/n", {"metadata": {}})
    assert caught.value.status == code and len(server.seen) == 1


def test_503_for_longer_than_the_bound_gives_up_and_says_how_long(server):
    server.script = [status(503, "etcd not ready")]
    fake = FakeTime()
    with pytest.raises(kube.ApiCallError) as caught:
        call(client_for("http://127.0.0.1:%d" % server.server_port), "GET", "/api/v1/nodes", fake=fake)
    assert caught.value.status == 503
    assert sum(fake.delays) <= kube.RETRY_SECONDS
    assert sum(fake.delays) > kube.RETRY_SECONDS - 2 * kube.RETRY_MAX_DELAY
    assert max(fake.delays) <= kube.RETRY_MAX_DELAY * 1.2
    assert "etcd not ready (%d attempts over" % len(server.seen) in caught.value.message


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_connection_refused_is_retried_for_any_method_then_named(server):
    port = free_port()   # nothing listens there: every connection is refused
    fake = FakeTime()
    with pytest.raises(kube.ApiCallError) as caught:
        call(client_for("http://127.0.0.1:%d" % port), "POST", "/api/v1/namespaces/a/pods/p/eviction",
             {"metadata": {"generateName": "p-"}}, fake)
    error = caught.value
    assert error.status == 0 and error.reason == kube.UNREACHABLE_REASON
    assert "Connection refused" in error.message and "http://127.0.0.1:%d/api/v1/namespaces" % port in error.message
    assert "%d attempts over" % (len(fake.delays) + 1) in error.message
    assert kube.RETRY_SECONDS - 2 * kube.RETRY_MAX_DELAY < sum(fake.delays) <= kube.RETRY_SECONDS


def test_refused_then_served_succeeds(server):
    """The API server comes back while the call waits: the real restart case, on one port."""
    port = free_port()
    api = client_for("http://127.0.0.1:%d" % port)
    started = []

    class Clock(FakeTime):
        def sleep(self, seconds):
            super().sleep(seconds)
            if len(self.delays) == 2 and not started:   # after the 2nd refusal the server starts listening
                httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Script)
                httpd.lock, httpd.seen, httpd.script = threading.Lock(), [], [(200, {"kind": "Node"}, None)]
                threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
                started.append(httpd)

    fake = Clock()
    try:
        assert kube.raw_request(api, "GET", "/api/v1/nodes/n", clock=fake.clock, sleep=fake.sleep)["kind"] == "Node"
        assert len(fake.delays) == 2 and started[0].seen == [("GET", "/api/v1/nodes/n")]
    finally:
        for httpd in started:
            httpd.shutdown()
            httpd.server_close()


def test_a_dropped_connection_repeats_only_what_is_harmless_to_repeat(server):
    server.script = ["drop", (201, {"kind": "Lease"}, None)]
    api = client_for("http://127.0.0.1:%d" % server.server_port)
    # A named create: a repeat could only answer 409 AlreadyExists.
    assert call(api, "POST", "/apis/coordination.k8s.io/v1/namespaces/k/leases",
                {"metadata": {"name": "lock"}})["kind"] == "Lease"
    assert len(server.seen) == 2
    # An unnamed POST may have been carried out: not repeated.
    server.seen.clear()
    server.script = ["drop", (201, {}, None)]
    with pytest.raises(Exception) as caught:
        call(api, "POST", "/apis/x", {"metadata": {"generateName": "x-"}})
    assert len(server.seen) == 1
    assert not isinstance(caught.value, kube.ApiCallError) or caught.value.status == 0


@pytest.mark.parametrize("method, body, repeat", [
    ("GET", None, True), ("PUT", {"metadata": {"name": "n", "resourceVersion": "5"}}, True),
    ("PATCH", {"metadata": {"annotations": {"a": "b"}}}, True), ("DELETE", None, True),
    ("POST", {"metadata": {"name": "p", "namespace": "a"}}, True),
    ("POST", {"metadata": {"generateName": "p-"}}, False), ("POST", {"kind": "SelfSubjectAccessReview"}, False),
    ("POST", None, False),
])
def test_repeatable(method, body, repeat):
    assert kube._repeatable(method, body) is repeat


def test_backoff_grows_to_its_cap():
    assert [round(kube.RETRY_FIRST_DELAY * 2 ** (a - 1), 2) for a in (1, 2, 3)] == [0.5, 1.0, 2.0]
    for attempt in range(1, 12):
        delay = kube._backoff(attempt)
        assert 0.8 * min(kube.RETRY_MAX_DELAY, 0.5 * 2 ** (attempt - 1)) <= delay
        assert delay <= 1.2 * min(kube.RETRY_MAX_DELAY, 0.5 * 2 ** (attempt - 1))


def test_the_environment_sets_another_bound(server, monkeypatch):
    server.script = [status(503, "starting")]
    api = client_for("http://127.0.0.1:%d" % server.server_port)
    monkeypatch.setenv(kube.RETRY_SECONDS_ENV, "0")
    with pytest.raises(kube.ApiCallError):
        call(api, "GET", "/api/v1/nodes")
    assert len(server.seen) == 1
    monkeypatch.setenv(kube.RETRY_SECONDS_ENV, "4")
    fake = FakeTime()
    with pytest.raises(kube.ApiCallError):
        call(api, "GET", "/api/v1/nodes", fake=fake)
    assert 1 < len(server.seen) - 1 and sum(fake.delays) <= 4


@pytest.mark.parametrize("value", ["-1", "soon", "3601"])
def test_a_bad_bound_in_the_environment_is_named(monkeypatch, value):
    monkeypatch.setenv(kube.RETRY_SECONDS_ENV, value)
    with pytest.raises(kube.KubeAuthError) as caught:
        kube.build_api_client({"host": "https://127.0.0.1:1", "api_key": "t"})
    assert "KUBENODES_API_RETRY_SECONDS must be a number of seconds from 0 to 3600" in str(caught.value)
    assert repr(value) in str(caught.value)


def test_a_run_is_told_while_a_call_waits_for_the_api_server(server):
    """Issue 28 item 7: during an API server restart the progress said nothing for 20 s. The waiting is named (the
    host, the cause, how long) after WAIT_NOTICE_SECONDS, then every WAIT_REPEAT_SECONDS; a call that gets its
    answer sooner says nothing."""
    port = free_port()
    api = client_for("http://127.0.0.1:%d" % port)
    told = []
    kube.on_waiting(api, told.append)
    fake = FakeTime()
    with pytest.raises(kube.ApiCallError):
        call(api, "GET", "/api/v1/nodes", fake=fake)
    assert told, fake.delays
    assert told[0].startswith("waiting for the Kubernetes API server http://127.0.0.1:%d for " % port), told
    assert "Connection refused" in told[0] and "retrying for up to %ds" % kube.RETRY_SECONDS in told[0], told
    assert len(told) <= kube.RETRY_SECONDS // kube.WAIT_REPEAT_SECONDS + 1, told
    seconds = [int(re.search(r" for (\d+)s \(", line).group(1)) for line in told]
    assert seconds[0] >= kube.WAIT_NOTICE_SECONDS and all(b - a >= kube.WAIT_REPEAT_SECONDS for a, b in zip(seconds, seconds[1:]))

    server.script = [status(503, "restarting"), status(503, "restarting"), (200, {"kind": "NodeList"}, None)]
    quiet = client_for("http://127.0.0.1:%d" % server.server_address[1])
    kube.on_waiting(quiet, told.append)
    before = len(told)
    assert call(quiet, "GET", "/api/v1/nodes")["kind"] == "NodeList"
    assert len(told) == before


@pytest.mark.parametrize("method, path, query, kind", [
    ("GET", "/api/v1/nodes", {"limit": 500}, "list"),
    ("GET", "/api/v1/nodes", {"watch": "true", "resourceVersion": "5"}, "watch"),
    ("GET", "/api/v1/nodes/w-1", None, "get"),
    ("GET", "/api/v1/namespaces", None, "list"),
    ("GET", "/api/v1/namespaces/kube-system", None, "get"),
    ("GET", "/api/v1/namespaces/shop/pods", {"fieldSelector": "spec.nodeName=w-1"}, "list"),
    ("GET", "/api/v1/pods", None, "list"),
    ("GET", "/apis/policy/v1/namespaces/shop/poddisruptionbudgets", None, "list"),
    ("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/lock", None, "get"),
    ("POST", "/api/v1/namespaces/shop/pods/web-1/eviction", None, "evict"),
    ("POST", "/api/v1/namespaces/shop/events", None, "create"),
    ("PATCH", "/api/v1/nodes/w-1", None, "patch"),
    ("PUT", "/api/v1/namespaces/kube-system/configmaps/journal", None, "update"),
    ("DELETE", "/api/v1/nodes/w-1", None, "delete"),
])
def test_each_kubernetes_request_is_named_by_its_kind(method, path, query, kind):
    assert kube.call_kind(method, path, query) == kind


def test_a_counted_client_counts_every_attempt_by_kind_and_an_uncounted_one_nothing(server):
    server.script = [status(503), (200, {"kind": "NodeList", "items": []}, None)]
    api = client_for("http://127.0.0.1:%d" % server.server_port)
    call(api, "GET", "/api/v1/nodes")   # before counting: not counted
    counter = kube.count_calls(api)
    assert kube.count_calls(api) is counter   # one count per client
    server.seen.clear()
    server.script = [status(503), (200, {}, None)]
    call(api, "PATCH", "/api/v1/nodes/w-1", body={"spec": {"unschedulable": True}})
    call(api, "GET", "/api/v1/nodes/w-1")
    # The 503 and its retry are two requests the server saw: both count.
    assert len(server.seen) == 3
    assert counter.stats() == {"calls": 3, "by_kind": {"get": 1, "patch": 2}}
