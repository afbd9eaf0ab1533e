"""upgrade_step's journal records of what it creates and removes: a lost record of instances just created is a
warning (they are only never removed as surplus), but the delete-first record, written before any worker is
marked, stops the pass: a worker removed without it would take its labels and its group's start count along."""

import importlib

import pytest
from ansible.module_utils._internal import _traceback

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import executor, kube

WHERE = {"name": "kubenodes-image-upgrade-journal", "namespace": "kube-system"}


@pytest.fixture
def upgrade_step(monkeypatch):
    """The action plugin's module, imported here (importing controller code switches ansible-core's traceback
    setting for the process; restored after), with the journal store refusing every write (HTTP 403)."""
    saved = _traceback._is_traceback_enabled
    module = importlib.import_module("ansible_collections.kubenodes.image_upgrade.plugins.action.upgrade_step")

    def refuse(*args, **kwargs):
        raise kube.ApiException(status=403, reason="Forbidden")

    monkeypatch.setattr(module.journal_store, "record_created", refuse)
    warnings = []
    monkeypatch.setattr(module.display, "warning", lambda msg, *a, **k: warnings.append(msg))
    yield module, warnings
    _traceback._is_traceback_enabled = saved


def test_an_unwritable_delete_first_record_stops_the_pass_before_any_mark(upgrade_step):
    module, warnings = upgrade_step
    record = {"instances_created": {}, "start_counts": {"G1": 3},
              "removed_first": {"w0": {"group": "G1", "since": "2026-12-02T10:00:00Z", "labels": {}, "taints": []}}}
    with pytest.raises(executor.StepFailure) as failure:
        module._record_created(None, WHERE, "img-b", record)
    assert failure.value.details == {"reason": "journal_unwritable"}
    message = str(failure.value)
    assert "kube-system/kubenodes-image-upgrade-journal" in message and "w0" in message and '"G1": 3' in message
    assert "No worker was marked" in message and "rolling_upgrade_max_unavailable needs the journal" in message
    assert warnings == []


def test_an_unwritable_record_of_instances_just_created_is_a_warning(upgrade_step):
    module, warnings = upgrade_step
    record = {"instances_created": {"gce://p/z/n1": {"group": "G1", "created": "2026-12-02T10:00:00Z"}},
              "start_counts": {"G1": 3}}
    module._record_created(None, WHERE, "img-b", record)
    assert len(warnings) == 1 and "gce://p/z/n1" in warnings[0] and "will not remove them as surplus" in warnings[0]
