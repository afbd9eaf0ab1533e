# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The client-side limit on a provider's cloud calls: a token bucket per provider that every API request takes a
token from before it goes out, the count of those requests (per kind and the peak in any 60 s), and the back-off
after a throttling answer. Pure apart from the clock and sleep it is given.

The default rate of each cloud is a quarter of the lowest documented default limit that its calls count against
(docs/api-limits.md gives the figures and their sources): the same project, subscription or account also serves
the cluster's own cloud controller, autoscalers, consoles and other tools, so one run should leave most of it to them.
"""

from __future__ import annotations

import collections
import random
import threading
import time

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import validate

# Calls per minute by default, per provider name (docs/api-limits.md).
DEFAULT_PER_MINUTE = {
    # GCE: 1,500 requests per minute per project for the read group and for the default (mutation) group.
    "gcp": 375,
    # Azure Resource Manager: subscription reads refill at 25 per second (1,500 per minute), writes and deletes at 10
    # (600). Reads are nine in ten of a run's requests; were every request a write, 375 would still be below 600.
    "azure": 375,
    # EC2: Describe* refills at 20 per second (1,200 per minute); Auto Scaling shares one undisclosed bucket.
    "aws": 300,
}
FALLBACK_PER_MINUTE = 150
# The most calls a minute that the option takes.
MAX_PER_MINUTE = validate.MAX_CLOUD_CALLS_PER_MINUTE
# The bucket holds this many seconds of calls: a pass's burst of reads goes out at once, and no 60 s (WINDOW) holds
# more calls than the rate.
BURST_SECONDS = 10.0
# A throttling answer halves the rate (once in THROTTLE_HOLD seconds: answers to a burst of calls are one signal), down
# to SLOWEST_FRACTION of the configured one; each RECOVER_SECONDS without one doubles it back.
SLOWEST_FRACTION = 1.0 / 8
THROTTLE_HOLD = 10.0
RECOVER_SECONDS = 30.0
# The back-off after throttling answers in a row doubles from the caller's base delay up to this (jittered down to half).
MAX_THROTTLE_DELAY = 60.0
# Without a deadline (a module called on its own), how long a call keeps trying through throttling answers.
THROTTLE_PATIENCE = 900.0
WINDOW = 60.0


class CallRate:
    """A token bucket of `per_minute` calls a minute, with BURST_SECONDS of them at once. take(kind) waits for a
    token and counts the call; throttled() slows the bucket and says how long to wait before the call is tried
    again, or None when the run's deadline (an epoch time, `deadline`) would pass first. Thread-safe."""

    def __init__(self, per_minute, clock=time.time, sleep=time.sleep, deadline=None, source="default"):
        self.per_minute = float(per_minute)
        if self.per_minute <= 0:
            raise ValueError("calls per minute must be above 0, got %r" % per_minute)
        self.capacity = max(1.0, self.per_minute * BURST_SECONDS / 60.0)
        self.clock, self.sleep = clock, sleep
        self.deadline = deadline
        self.source = source          # "default" or the option that set the rate, for the report
        self._lock = threading.Lock()
        self._tokens = self.capacity
        self._stamp = clock()
        self._factor = 1.0            # halved by throttling answers, doubled back by quiet RECOVER_SECONDS
        self._quiet_since = None      # the last throttling answer, or the last step back up since
        self._halved_at = None
        self._recent = collections.deque()   # times of the calls of the last WINDOW seconds
        self.calls = {}               # kind: calls made
        self.peak_per_minute = 0
        self.throttled_answers = 0
        self.waited_seconds = 0.0     # spent waiting for a token (the limit slowing the run)

    def _refill(self, now):
        if self._factor < 1.0 and now - self._quiet_since >= RECOVER_SECONDS:
            steps = int((now - self._quiet_since) // RECOVER_SECONDS)
            self._factor = min(1.0, self._factor * 2 ** steps)
            self._quiet_since += steps * RECOVER_SECONDS
        rate = self.per_minute * self._factor / 60.0
        self._tokens = min(self.capacity, self._tokens + max(0.0, now - self._stamp) * rate)
        self._stamp = now
        return rate

    def take(self, kind="call"):
        """Wait until the bucket holds a token, take it, and count one call of `kind`. A token owed is reserved
        (the count goes below zero), so callers in several threads wait their turns rather than all at once."""
        with self._lock:
            now = self.clock()
            rate = self._refill(now)
            self._tokens -= 1.0
            wait = 0.0 if self._tokens >= 0 else -self._tokens / rate
            sent = now + wait
            while self._recent and self._recent[0] <= sent - WINDOW:
                self._recent.popleft()
            # No 60 s holds more than a minute's rate: a burst is paid back before the next (the call waits until the
            # one `cap` calls before it is a minute old). Without it a minute held the rate and a burst (E14: 388
            # requests for a rate of 375, 25.9 % of GCE's limit).
            cap = max(1, int(self.per_minute * self._factor))
            if len(self._recent) >= cap:
                sent = max(sent, self._recent[-cap] + WINDOW)
                wait = sent - now
                while self._recent and self._recent[0] <= sent - WINDOW:
                    self._recent.popleft()
            self.calls[kind] = self.calls.get(kind, 0) + 1
            self._recent.append(sent)
            self.peak_per_minute = max(self.peak_per_minute, len(self._recent))
            self.waited_seconds += wait
        if wait > 0:
            self.sleep(wait)

    def throttled(self, in_a_row, since, base_delay=0.5):
        """A throttling answer, the `in_a_row`-th of this call (from 1), whose first came at `since`: the rate is
        halved (at least SLOWEST_FRACTION of it stays) and the delay before trying again is returned, base_delay
        doubled per answer in a row; None when the deadline (or, without one, THROTTLE_PATIENCE after `since`) would
        pass before it."""
        with self._lock:
            now = self.clock()
            self._refill(now)
            self.throttled_answers += 1
            if self._halved_at is None or now - self._halved_at >= THROTTLE_HOLD:
                self._factor = max(SLOWEST_FRACTION, self._factor / 2.0)
                self._halved_at = now
            self._quiet_since = now
            self._tokens = min(self._tokens, 0.0)
        longest = min(MAX_THROTTLE_DELAY, float(base_delay) * 2.0 ** (max(1, int(in_a_row)) - 1))
        delay = random.uniform(longest / 2, longest)
        limit = self.deadline if self.deadline is not None else since + THROTTLE_PATIENCE
        if now + delay > limit:
            return None
        return delay

    def slowed_to(self):
        """Calls per minute the bucket allows now (below per_minute after throttling answers)."""
        with self._lock:
            return self.per_minute * self._factor

    def stats(self):
        """What the report gives: calls by kind, their sum, the peak in any 60 s, the limit and the throttling."""
        with self._lock:
            return {"calls": sum(self.calls.values()), "by_kind": dict(sorted(self.calls.items())),
                    "peak_per_minute": self.peak_per_minute, "limit_per_minute": self.per_minute,
                    "limit_source": self.source, "throttled": self.throttled_answers,
                    "waited_seconds": round(self.waited_seconds, 1)}


def default_rate(provider_name):
    return DEFAULT_PER_MINUTE.get(provider_name, FALLBACK_PER_MINUTE)
