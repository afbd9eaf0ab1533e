"""upgrade_step's journal records of what it creates and removes, against the real kube-apiserver with an identity
it refuses (HTTP 403): a lost record of instances just created is a warning (they are only never removed as
surplus), but the delete-first record, written before any worker is marked, stops the pass: a worker removed
without it would take its labels and its group's start count along."""

import importlib
import subprocess

import pytest
from ansible.module_utils._internal import _traceback

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import executor, kube
from sandbox import binaries

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

JOURNAL = "kubenodes-image-upgrade-journal"


@pytest.fixture
def refused(sandbox, namespace):
    """(a run's journal writer, module_utils/run.py's UpgradeRun with a client of the namespace's `default`
    ServiceAccount, which no Role binds, the warnings it displays). run.py is imported here, as the action that holds
    the run imports it: importing controller code switches ansible-core's traceback setting, restored after."""
    saved = _traceback._is_traceback_enabled
    run = importlib.import_module("ansible_collections.kubenodes.image_upgrade.plugins.module_utils.run")
    token = subprocess.run([str(binaries.path_of("kubectl")), "--kubeconfig", sandbox.kubeconfig, "create", "token",
                            "default", "-n", namespace], check=True, capture_output=True, text=True,
                           timeout=60).stdout.strip()
    params = {key: spec.get("default") for key, spec in kube.AUTH_ARG_SPEC.items()}
    params.update(host=sandbox.apiserver, api_key=token, ca_cert=sandbox.ca)
    warnings = []
    upgrade = run.UpgradeRun(dict(params, image="img-b", journal={"name": JOURNAL, "namespace": namespace}), False,
                             lambda msg: None, warnings.append)
    upgrade.api_client = kube.build_api_client(params)
    yield upgrade, warnings
    _traceback._is_traceback_enabled = saved


def test_an_unwritable_delete_first_record_stops_the_pass_before_any_mark(refused, sandbox, namespace):
    upgrade, warnings = refused
    record = {"instances_created": {}, "start_counts": {"G1": 3},
              "removed_first": {"w0": {"group": "G1", "since": "2026-12-02T10:00:00Z", "labels": {}, "taints": []}}}
    with pytest.raises(executor.StepFailure) as failure:
        upgrade._record_created(record)
    assert failure.value.details == {"reason": "journal_unwritable"}
    message = str(failure.value)
    assert "%s/%s" % (namespace, JOURNAL) in message and "w0" in message and '"G1": 3' in message
    assert "No worker was marked" in message and "rolling_upgrade_max_unavailable needs the journal" in message
    assert warnings == []
    assert not sandbox.core_v1().list_namespaced_config_map(namespace, field_selector="metadata.name=" + JOURNAL).items


def test_an_unwritable_record_of_instances_just_created_is_a_warning(refused, namespace):
    upgrade, warnings = refused
    record = {"instances_created": {"gce://p/z/n1": {"group": "G1", "created": "2026-12-02T10:00:00Z"}},
              "start_counts": {"G1": 3}}
    upgrade._record_created(record)
    assert len(warnings) == 1 and "gce://p/z/n1" in warnings[0] and "will not remove them as surplus" in warnings[0]


def test_an_unwritable_record_of_the_groups_images_stops_the_pass_before_the_cloud_write(refused, sandbox, namespace):
    """Without the groups' images before the run in the journal, an abort after a kill could not point them back:
    no group is pointed at the new image (issue 23 item 4)."""
    upgrade, warnings = refused
    with pytest.raises(executor.StepFailure) as failure:
        upgrade._record_group_images({"group_images": {"G1": {"before": "img-a", "at": "2026-12-02T10:00:00Z"}}})
    assert failure.value.details == {"reason": "journal_unwritable"}
    message = str(failure.value)
    assert "%s/%s" % (namespace, JOURNAL) in message and "G1: img-a" in message, message
    assert "No group was pointed at the new image" in message and "rbac.yml" in message, message
    assert warnings == []
    assert not sandbox.core_v1().list_namespaced_config_map(namespace, field_selector="metadata.name=" + JOURNAL).items
