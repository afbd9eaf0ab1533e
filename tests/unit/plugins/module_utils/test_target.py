"""target.decide: the exact image of an upgrade is decided once and kept by every run of that upgrade; another
image while it is unfinished is an explicit decision (new_target)."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import report, target

pytestmark = pytest.mark.timeout(60)

FAMILY = "projects/p/global/images/family/node"
V1, V2 = "projects/p/global/images/node-v1", "projects/p/global/images/node-v2"


def journal(image=FAMILY, target_image=V1, finished=None):
    j = report.new_journal(image, "2026-12-01T10:00:00Z")
    j["target_image"], j["finished"] = target_image, finished
    return j


def test_no_journal_takes_the_image_resolved_now():
    assert target.decide(None, FAMILY, V1) == dict(target_image=V1, new_journal=True, resumed=False, moved=None)


def test_a_resumed_upgrade_keeps_its_image_when_the_family_moved():
    decision = target.decide(journal(), FAMILY, V2)
    assert decision == dict(target_image=V1, new_journal=False, resumed=True, moved=V2)
    assert target.decide(journal(), FAMILY, V1)["moved"] is None


def test_the_exact_image_of_the_upgrade_asked_by_another_reference_goes_on():
    assert target.decide(journal(), V1, V1) == dict(target_image=V1, new_journal=False, resumed=True, moved=None)


def test_the_recorded_image_asked_directly_without_resolving_goes_on():
    # the step engine writes the journal with the exact image and no target_image
    assert target.decide(journal(), V1, None) == dict(target_image=V1, new_journal=False, resumed=True, moved=None)


def test_another_image_while_unfinished_is_refused_naming_new_target():
    with pytest.raises(target.TargetConflict) as err:
        target.decide(journal(), V2, V2, where="journal ConfigMap kube-system/j")
    message = str(err.value)
    assert "unfinished upgrade (journal ConfigMap kube-system/j, started 2026-12-01T10:00:00Z)" in message
    assert "gives every heir the image %s, asked for as %s; this run asks for %s" % (V1, FAMILY, V2) in message
    assert "set new_target to true (rolling_upgrade_new_target in the rolling_upgrade role)" in message
    assert message.endswith("Nothing was changed")


def test_new_target_starts_a_new_upgrade():
    assert target.decide(journal(), V2, V2, new_target=True) == dict(
        target_image=V2, new_journal=True, resumed=False, moved=None)
    # the same family, moved on, by decision
    assert target.decide(journal(), FAMILY, V2, new_target=True)["target_image"] == V2
    # nothing to decide when the target is the same
    assert target.decide(journal(), FAMILY, V1, new_target=True)["new_journal"] is False


def test_a_finished_upgrade_holds_nothing_back():
    done = journal(finished="2026-12-01T11:00:00Z")
    assert target.decide(done, V2, V2) == dict(target_image=V2, new_journal=True, resumed=False, moved=None)
    assert target.decide(done, FAMILY, V1)["new_journal"] is False


def test_a_journal_without_a_recorded_image():
    old = journal(target_image=None)
    assert target.decide(old, FAMILY, V2) == dict(target_image=V2, new_journal=False, resumed=True, moved=None)
    with pytest.raises(target.TargetConflict):
        target.decide(old, V2, V2)
    assert target.decide(old, V2, V2, new_target=True)["new_journal"] is True


def test_references_compare_without_case():
    assert target.decide(journal(image=FAMILY.upper()), FAMILY, V2)["target_image"] == V1
