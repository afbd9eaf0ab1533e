"""The image each group had before a run pointed it at the new one (issue 23 item 4): journaled per group before the
cloud write, the first record kept, and no group pointed at the image when that record cannot be written."""

import copy

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core, executor, report

from core_world import NEW, OLD, World, group


def _world():
    w = World([group("G1"), group("G2")])
    w.add_node("old-1", "G1", OLD)
    w.add_node("old-2", "G2", OLD)
    return w


def test_each_groups_image_is_journaled_before_the_cloud_write():
    w = _world()
    order = []
    w.after.append(lambda kind, item: order.append(kind))
    ex = w.executor(core.Options(image=NEW.lower()))
    journaled = []
    ex.record_group_images = lambda record: (journaled.append(copy.deepcopy(record)), order.append("journal"))
    ex.run_pass()
    assert order[:2] == ["journal", "image"], order
    [record] = journaled
    assert {g: e["before"] for g, e in record["group_images"].items()} == {"G1": OLD, "G2": OLD}
    assert all(e["at"].endswith("Z") for e in record["group_images"].values())
    ex.run_pass()
    assert len(journaled) == 1, "a group already on the image is not recorded again"


def test_the_journal_keeps_each_groups_first_image():
    journal = report.new_journal(NEW, None)
    report.merge(journal, {"group_images": {"G1": {"before": OLD, "at": "t1"}}})
    # A resumed run that read the group on the new image already records nothing new over it.
    report.merge(journal, {"group_images": {"G1": {"before": NEW, "at": "t2"}, "G2": {"before": OLD, "at": "t2"}}})
    assert journal["group_images"] == {"G1": {"before": OLD, "at": "t1"}, "G2": {"before": OLD, "at": "t2"}}


def _unwritable(record):
    raise executor.StepFailure("journal unwritable: %s" % sorted(record))


def test_no_group_is_pointed_at_the_image_when_the_record_cannot_be_written():
    w = _world()
    ex = w.executor(core.Options(image=NEW.lower()))
    ex.record_group_images = _unwritable
    with pytest.raises(executor.StepFailure, match="unwritable: \\['group_images'\\]"):
        ex.run_pass()
    assert {g.image for g in w.groups.values()} == {OLD}
