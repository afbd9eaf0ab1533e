"""providers/call_rate.py: the token bucket every cloud request takes a token from, its counts for the report, and
with_retries' back-off after throttling answers, which slows the run down and fails it only at the run's deadline
(issue 22 item 4)."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base, call_rate


class Clock:
    """A clock that only moves when something sleeps on it."""

    def __init__(self, now=1000.0):
        self.now, self.slept = now, []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def bucket(per_minute, **kwargs):
    clock = Clock()
    return call_rate.CallRate(per_minute, clock=clock, sleep=clock.sleep, **kwargs), clock


def test_a_burst_of_ten_seconds_goes_at_once_then_calls_go_at_the_rate():
    rate, clock = bucket(60)   # one a second, ten at once
    for _call in range(10):
        rate.take("list")
    assert clock.slept == [] and clock.now == 1000.0
    for _call in range(5):
        rate.take("list")
    assert clock.slept == pytest.approx([1.0] * 5)
    assert rate.stats()["waited_seconds"] == pytest.approx(5.0, abs=0.1)


def test_a_minute_never_holds_more_than_the_rate_even_after_a_burst():
    rate, clock = bucket(120)   # 2 a second, 20 at once
    sent = []
    for _call in range(500):
        rate.take("get")
        sent.append(clock.now)
    stats = rate.stats()
    # Any 60 s: at most the rate (E14 read 388 requests in a minute for a rate of 375: a minute's refill and a burst).
    assert stats["peak_per_minute"] == 120
    assert max(sum(1 for t in sent if start <= t < start + 60) for start in sent) == 120
    assert stats["calls"] == 500 and stats["by_kind"] == {"get": 500}
    # The whole run took as long as the rate says, not longer (the cap moves calls inside it, a burst waits its turn).
    assert clock.now - 1000.0 == pytest.approx((500 - 20) / 2.0, abs=0.01)


def test_calls_are_counted_by_kind_with_the_peak_per_minute_and_the_limit():
    rate, clock = bucket(600, source="rolling_upgrade_cloud_calls_per_minute")
    for _call in range(3):
        rate.take("InstanceGroupManagersClient.list_managed_instances")
        clock.now += 30
    rate.take("InstanceGroupManagersClient.create_instances")
    assert rate.stats() == {
        "calls": 4, "peak_per_minute": 2, "limit_per_minute": 600.0,
        "by_kind": {"InstanceGroupManagersClient.create_instances": 1,
                    "InstanceGroupManagersClient.list_managed_instances": 3},
        "limit_source": "rolling_upgrade_cloud_calls_per_minute", "throttled": 0, "waited_seconds": 0.0}


def test_a_rate_of_zero_is_refused():
    with pytest.raises(ValueError, match="above 0"):
        call_rate.CallRate(0)


def test_each_cloud_has_a_default_well_below_its_documented_limit():
    # docs/api-limits.md: GCE 1,500 per minute per group; ARM reads 1,500 per minute (25/s); EC2 Describe* 1,200.
    documented = {"gcp": 1500, "azure": 1500, "aws": 1200}
    for cloud, limit in documented.items():
        assert call_rate.default_rate(cloud) <= limit / 4
    # ARM's writes and deletes refill at 10/s: below that even if every request were one.
    assert call_rate.default_rate("azure") < 600
    assert call_rate.default_rate("other") == call_rate.FALLBACK_PER_MINUTE


class Throttled:
    """A call that the cloud refuses for its rate `times` times, then answers."""

    def __init__(self, times, error=None):
        self.left, self.calls = times, 0
        self.error = error or base.ProviderError("GCP list: 403 rateLimitExceeded", status=403,
                                                 code="rateLimitExceeded", throttled=True)

    def __call__(self):
        self.calls += 1
        if self.left:
            self.left -= 1
            raise self.error
        return "done"


def test_throttling_answers_are_no_attempts_they_slow_the_rate_down_until_the_call_goes_through():
    rate, clock = bucket(300, deadline=1000.0 + 3600)
    told = []
    call = Throttled(9)
    assert base.with_retries(call, attempts=2, sleep=clock.sleep, on_wait=lambda *a: told.append(a), rate=rate,
                             kind="list") == "done"
    # Nine throttling answers with attempts=2: none counted as an attempt.
    assert call.calls == 10 and rate.stats()["throttled"] == 9 and rate.stats()["calls"] == 10
    # Each told with attempts None and its number in a row; the waits double from the base delay (0.5 s) up to 60 s,
    # jittered down to half.
    assert [(a[1], a[2]) for a in told] == [(n, None) for n in range(1, 10)]
    delays = [a[3] for a in told]
    assert all(min(60.0, 0.5 * 2 ** (n - 1)) / 2 <= d <= min(60.0, 0.5 * 2 ** (n - 1)) for n, d in zip(range(1, 10), delays))
    assert rate.slowed_to() < 300


def test_the_rate_halves_down_to_an_eighth_and_quiet_half_minutes_double_it_back():
    rate, clock = bucket(300, deadline=1000.0 + 3600)
    for _answer in range(5):
        rate.throttled(1, clock.now)
        clock.now += 10
    assert rate.slowed_to() == pytest.approx(300 / 8.0)
    clock.now += 21   # 31 s after the last answer
    rate.take("list")
    assert rate.slowed_to() == pytest.approx(300 / 4.0)
    clock.now += 300
    rate.take("list")
    assert rate.slowed_to() == pytest.approx(300.0)


def test_answers_to_one_burst_halve_the_rate_once():
    rate, clock = bucket(300, deadline=1000.0 + 3600)
    for n in range(1, 6):
        assert rate.throttled(n, clock.now, base_delay=0.01) is not None
    assert rate.slowed_to() == pytest.approx(150.0) and rate.stats()["throttled"] == 5
    clock.now += 10
    rate.throttled(1, clock.now)
    assert rate.slowed_to() == pytest.approx(75.0)


def test_throttling_fails_the_call_only_when_the_run_deadline_would_pass():
    rate, clock = bucket(300, deadline=1000.0 + 100)
    call = Throttled(1000)
    with pytest.raises(base.ProviderError, match="rateLimitExceeded"):
        base.with_retries(call, attempts=5, sleep=clock.sleep, rate=rate, kind="list")
    assert clock.now <= 1000.0 + 100 and call.calls > 5


def test_without_a_deadline_a_module_keeps_trying_for_the_patience():
    rate, clock = bucket(300)
    with pytest.raises(base.ProviderError):
        base.with_retries(Throttled(10 ** 6), sleep=clock.sleep, rate=rate, kind="list")
    assert call_rate.THROTTLE_PATIENCE - call_rate.MAX_THROTTLE_DELAY <= clock.now - 1000.0 <= call_rate.THROTTLE_PATIENCE


def test_without_a_rate_throttling_is_an_ordinary_retryable_error():
    call = Throttled(10)
    with pytest.raises(base.ProviderError):
        base.with_retries(call, attempts=3, sleep=lambda s: None)
    assert call.calls == 3


def test_the_waiting_line_says_the_run_slows_down():
    told = []
    provider = type("P", (), {"name": "azure", "waiting_listener": staticmethod(told.append),
                              "call_rate": call_rate.CallRate(150)})()
    base.CloudProvider.waiting(provider, "HTTP 429 TooManyRequests", 2, None, 4.0)
    assert told == ["waiting for the azure cloud API (HTTP 429 TooManyRequests): throttled 2 time(s) in a row, trying "
                    "again in 4s at 150 calls per minute"]


@pytest.mark.parametrize("cloud, make", [
    ("aws", lambda m: m.classify_client_error("DescribeAutoScalingGroups", "Throttling", "Rate exceeded", 400)),
    ("aws", lambda m: m.classify_client_error("RunInstances", "RequestLimitExceeded", "Request limit exceeded.", 503)),
])
def test_the_clouds_throttling_answers_are_marked_throttled(cloud, make):
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import aws
    error = make(aws)
    assert error.throttled and error.retryable


def test_an_aws_resource_limit_is_retried_but_not_taken_for_throttling():
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import aws
    error = aws.classify_client_error("CreateAutoScalingGroup", "LimitExceededException", "too many groups", 400)
    assert error.retryable and not error.throttled


def test_azure_requests_are_counted_by_method_and_resource_type():
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import azure
    base_url = "https://management.azure.com/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/"
    assert azure.request_kind("get", base_url + "virtualMachineScaleSets/v/virtualMachines?api-version=1") == \
        "GET virtualMachines"
    assert azure.request_kind("post", base_url + "virtualMachineScaleSets/v/delete") == "POST virtualMachineScaleSets"
    assert azure.request_kind("get", "https://management.azure.com/subscriptions/s/providers/Microsoft.Compute/"
                              "locations/westus/operations/abc") == "GET operations"
