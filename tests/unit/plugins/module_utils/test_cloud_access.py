"""CloudAccess.create (the executor's cloud port): what each provider answer to a create becomes for the run."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.cloud_access import CloudAccess
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.executor import StepFailure
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base


class _Provider:
    """Answers each create_instance with the next of `answers` (an exception is raised)."""

    waiting_listener = None

    def __init__(self, *answers):
        self.answers = list(answers)

    def create_instance(self, group_id):
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_a_create_that_timed_out_ends_the_creation_without_failing_the_run_and_says_so():
    told = []
    provider = _Provider("i-1", base.ProviderError("desired capacity raised to 3, but no new instance appeared within "
                                                   "300s", code="CreateTimeout", retryable=True))
    provider.waiting_listener = told.append
    assert CloudAccess(provider).create("g", 3) == (["i-1"], "")
    assert told == ["desired capacity raised to 3, but no new instance appeared within 300s; the next pass looks for "
                    "it again"]


def test_a_quota_refusal_ends_the_creation_with_its_reason_and_any_other_error_fails_the_step():
    assert CloudAccess(_Provider(base.QuotaError("no capacity"))).create("g", 2) == ([], "no capacity")
    with pytest.raises(StepFailure, match="creating an instance in g failed after 0 created: denied"):
        CloudAccess(_Provider(base.ProviderError("denied", code="AccessDenied"))).create("g", 1)
