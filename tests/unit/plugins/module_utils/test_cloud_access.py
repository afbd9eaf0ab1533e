"""CloudAccess.create (the executor's cloud port): what each provider answer to a create becomes for the run."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.cloud_access import CloudAccess
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.executor import StepFailure
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import CREATING, Instance
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base


class _Provider:
    """Answers each create_instance with the next of `answers` (an exception is raised)."""

    waiting_listener = None

    def __init__(self, *answers):
        self.answers = list(answers)

    @staticmethod
    def normalize_provider_id(provider_id):
        return provider_id.lower()

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


class _BatchProvider(_Provider):
    """Also creates several at once: each create_instances answers with the next of `batches`."""

    def __init__(self, batches, *answers):
        super().__init__(*answers)
        self.batches, self.asked = list(batches), []

    def create_instances(self, group_id, count):
        self.asked.append(count)
        answer = self.batches.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer[:count]


def test_a_wave_is_one_batch_and_a_batch_refused_for_quota_is_asked_for_one_by_one():
    provider = _BatchProvider([["i-1", "i-2", "i-3"]])
    assert CloudAccess(provider).create("g", 3) == (["i-1", "i-2", "i-3"], "") and provider.asked == [3]
    # The wave's instances are this run's own, as one create's are: the cloud creating them lists their group no sooner.
    wave = [Instance(provider_id="gce://p/z/w-%d" % n, node_name="w-%d" % n, group_id="g", image="img", state=CREATING,
                     created_at=1.0, name="w-%d" % n) for n in range(2)]
    access = CloudAccess(_BatchProvider([wave]))
    assert access.create("g", 2) == (wave, "") and access.own == {"gce://p/z/w-0", "gce://p/z/w-1"}
    # One instance is one create_instance (no batch).
    provider = _BatchProvider([], "i-1")
    assert CloudAccess(provider).create("g", 1) == (["i-1"], "") and provider.asked == []
    # Refused for quota as a whole: made none, so one request each makes as many as the quota holds.
    provider = _BatchProvider([base.QuotaError("no room for 3")], "i-1", "i-2", base.QuotaError("no room"))
    assert CloudAccess(provider).create("g", 3) == (["i-1", "i-2"], "no room") and provider.asked == [3]
    with pytest.raises(StepFailure, match="creating 2 instance.s. in g failed: denied"):
        CloudAccess(_BatchProvider([base.ProviderError("denied", code="AccessDenied")])).create("g", 2)


class _DeletingProvider(_Provider):
    """Deletions that wait for each other (a barrier of `parties`), so groups sent one after another would fail;
    `fail` names a group whose deletion the cloud refuses."""

    deletes_without_waiting = True

    def __init__(self, parties, fail=None, parallel=True):
        import threading

        super().__init__()
        self.deletes_in_parallel = parallel
        self.barrier, self.fail, self.sent = threading.Barrier(parties, timeout=5), fail, []

    def delete_instances(self, group_id, provider_ids, wait=True):
        assert wait is False
        self.barrier.wait()
        self.sent.append(group_id)
        if group_id == self.fail:
            raise base.ProviderError("denied")
        return list(provider_ids)


def _listed(access, *members):
    access.listed = {pid.lower(): Instance(provider_id=pid, node_name=pid, group_id=group, image="i", state="RUNNING",
                                           created_at=1.0, name=pid) for group, pid in members}


def test_a_waves_deletions_go_to_every_group_at_once_and_a_refused_one_fails_after_the_others_were_sent():
    access = CloudAccess(_DeletingProvider(2))
    _listed(access, ("G", "g1"), ("G", "g2"), ("H", "h1"))
    assert sorted(access.delete(["g1", "g2", "h1"])) == ["g1", "g2", "h1"]
    refusing = CloudAccess(_DeletingProvider(2, fail="G"))
    _listed(refusing, ("G", "g1"), ("H", "h1"))
    with pytest.raises(StepFailure, match="deleting g1 failed: denied"):
        refusing.delete(["g1", "h1"])
    assert sorted(refusing.provider.sent) == ["G", "H"]
    # A provider that does not say so gets them one after another (a barrier of one never waits).
    serial = CloudAccess(_DeletingProvider(1, fail="G", parallel=False))
    _listed(serial, ("G", "g1"), ("H", "h1"))
    with pytest.raises(StepFailure):
        serial.delete(["g1", "h1"])
    assert serial.provider.sent == ["G"]
