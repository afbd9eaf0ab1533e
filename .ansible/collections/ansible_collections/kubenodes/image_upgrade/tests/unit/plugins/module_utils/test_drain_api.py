"""Unit tests of the I/O-free parts of drain_api: the bounded worker pool and the annotation timestamps.
(The API calls themselves are exercised against a real kube-apiserver in tests/integration.)"""

import threading
import time

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import drain_api

pytestmark = pytest.mark.timeout(60)


class InFlight:
    """Counts calls running at the same time."""

    def __init__(self):
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def __call__(self, item):
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        time.sleep(0.02)
        with self.lock:
            self.now -= 1
        return item * 2


@pytest.mark.parametrize("bound", [1, 3, 8])
def test_run_bounded_never_exceeds_the_bound_and_keeps_order(bound):
    counter = InFlight()
    results = drain_api.run_bounded(counter, range(40), bound)
    assert results == [i * 2 for i in range(40)]
    assert counter.peak <= bound
    if bound > 1:
        assert counter.peak > 1  # and it does run concurrently


def test_run_bounded_empty():
    assert drain_api.run_bounded(lambda x: x, [], 5) == []


def test_timestamps_round_trip():
    stamp = drain_api.format_timestamp(1796011200)
    assert stamp == "2026-11-30T04:00:00Z"
    assert drain_api.parse_timestamp(stamp) == 1796011200
    assert drain_api.parse_timestamp("yesterday") is None
    assert drain_api.parse_timestamp(None) is None


def test_api_call_error_reads_status_body():
    body = {"kind": "Status", "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "details": {"causes": [{"reason": "DisruptionBudget",
                                    "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}],
                        "retryAfterSeconds": 10}}
    error = drain_api.ApiCallError("POST", "/api/v1/namespaces/a/pods/p/eviction", 429, "Too Many Requests", body)
    assert error.message.startswith("Cannot evict pod")
    assert error.causes == ["The disruption budget web needs 2 healthy pods and has 2 currently"]
    assert error.retry_after == 10
    plain = drain_api.ApiCallError("GET", "/x", 502, "Bad Gateway", "upstream down")
    assert plain.message == "upstream down" and plain.causes == []
