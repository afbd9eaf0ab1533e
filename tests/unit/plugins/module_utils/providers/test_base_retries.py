"""providers/base.with_retries and CloudProvider.waiting: the one retry level of cloud calls, and the line the
upgrade shows on its progress line while a call waits for the cloud (issue 28)."""

import functools
from types import SimpleNamespace

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base


class Answers:
    """A call that fails with each error in turn, then answers "done"."""

    def __init__(self, *errors):
        self.errors, self.calls = list(errors), 0

    def __call__(self):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def provider(listener=None):
    """What CloudProvider.waiting reads of its provider: the cloud's name and the listener."""
    return SimpleNamespace(name="gcp", waiting_listener=listener)


def waiting(owner):
    return functools.partial(base.CloudProvider.waiting, owner)


def test_a_retryable_error_is_told_before_each_wait_and_the_call_is_tried_again():
    slept, told = [], []
    call = Answers(base.ProviderError("listing instances: 503 Service Unavailable", retryable=True),
                   base.ProviderError("listing instances: connection refused", retryable=True))
    assert base.with_retries(call, attempts=5, sleep=slept.append, on_wait=waiting(provider(told.append))) == "done"
    assert call.calls == 3 and len(slept) == 2 and len(told) == 2
    assert told[0].startswith("waiting for the gcp cloud API (listing instances: 503 Service Unavailable): trying "
                              "again in ") and told[0].endswith("(attempt 2 of 5)"), told
    assert "connection refused" in told[1] and told[1].endswith("(attempt 3 of 5)")
    # The delay told is the delay slept.
    assert all(("trying again in %.0fs" % delay) in line for delay, line in zip(slept, told))


def test_an_error_that_will_not_change_and_the_last_attempt_are_not_waited_on():
    told = []
    with pytest.raises(base.ProviderError, match="forbidden"):
        base.with_retries(Answers(base.ProviderError("forbidden")), sleep=lambda s: None,
                          on_wait=lambda *args: told.append(args))
    assert told == []
    call = Answers(*[base.ProviderError("503", retryable=True)] * 3)
    with pytest.raises(base.ProviderError):
        base.with_retries(call, attempts=3, sleep=lambda s: None, on_wait=lambda *args: told.append(args))
    assert call.calls == 3 and [attempt for _e, attempt, _n, _d in told] == [1, 2]


def test_without_a_listener_nothing_is_told():
    assert base.with_retries(Answers(base.ProviderError("503", retryable=True)), sleep=lambda s: None,
                             on_wait=waiting(provider())) == "done"
