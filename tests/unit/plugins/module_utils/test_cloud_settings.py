"""The cloud settings a run neutralises and restores (cloud_settings.py): which to change and to what, the refusal,
the journal's record (first values kept, carried into a new journal while unrestored), the report's rows; and the
executor's step against the in-memory world: journaled first, changed before anything else of the pass, refused
before anything changes."""

import copy

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import cloud_settings as cs
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core, executor, report
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import Group

from core_world import NEW, OLD, World, group


def _group(gid, settings, size=3, role=None):
    return Group(id=gid, name=gid, image=OLD, role=role, target_size=size, settings=dict(settings))


def _judge(groups, recorded=None, unavailable=0):
    return cs.judge(groups, recorded or {}, lambda g: unavailable)


def test_each_setting_that_acts_on_its_own_goes_to_its_neutral_value():
    judged = _judge([_group("gce", {cs.GCE_REDISTRIBUTION: "PROACTIVE"}),
                     _group("aws", {cs.AWS_AZ_REBALANCE: "active", cs.AWS_MIN_SIZE: 0}),
                     _group("azure", {cs.AZURE_UPGRADE_POLICY: "Automatic"})])
    assert judged == dict(refusals=[], again=[], unread=[], changes=[
        dict(group="gce", name=cs.GCE_REDISTRIBUTION, original="PROACTIVE", neutral="NONE"),
        dict(group="aws", name=cs.AWS_AZ_REBALANCE, original="active", neutral="suspended"),
        dict(group="azure", name=cs.AZURE_UPGRADE_POLICY, original="Automatic", neutral="Manual")])


def test_the_clouds_own_autoscalers_are_switched_off_in_both_directions():
    judged = _judge([_group("gce", {cs.GCE_AUTOSCALER: "ONLY_SCALE_OUT"}), _group("gce-on", {cs.GCE_AUTOSCALER: "ON"}),
                     _group("gce-off", {cs.GCE_AUTOSCALER: "OFF"}),
                     _group("aws", {cs.AWS_ALARM_NOTIFICATION: "active", cs.AWS_SCHEDULED_ACTIONS: "suspended"})])
    assert judged == dict(refusals=[], again=[], unread=[], changes=[
        dict(group="gce", name=cs.GCE_AUTOSCALER, original="ONLY_SCALE_OUT", neutral="OFF"),
        dict(group="gce-on", name=cs.GCE_AUTOSCALER, original="ON", neutral="OFF"),
        dict(group="aws", name=cs.AWS_ALARM_NOTIFICATION, original="active", neutral="suspended")])
    for change in judged["changes"]:
        assert cs.WHY[change["name"]] in cs.describe(change)


def test_an_enabled_azure_autoscale_setting_is_disabled_and_one_that_cannot_be_read_is_refused():
    judged = _judge([_group("on", {cs.AZURE_AUTOSCALE: "true"}), _group("off", {cs.AZURE_AUTOSCALE: "false"}),
                     _group("unread", {cs.AZURE_AUTOSCALE: cs.UNREADABLE})])
    assert judged["changes"] == [dict(group="on", name=cs.AZURE_AUTOSCALE, original="true", neutral="false")]
    [refusal] = judged["refusals"]
    # The permission it needs and the variable that lets a run go on without it.
    for words in ("scaling group unread", "Microsoft.Insights/autoscalesettings/read",
                  "rolling_upgrade_allow_unreadable_autoscale to true"):
        assert words in refusal, refusal
    assert judged["unread"] == []


def test_unreadable_autoscale_settings_are_named_not_refused_when_the_user_allows_it():
    groups = [_group("on", {cs.AZURE_AUTOSCALE: "true"}), _group("unread", {cs.AZURE_AUTOSCALE: cs.UNREADABLE}),
              _group("rolling", {cs.AZURE_UPGRADE_POLICY: "Rolling"})]
    judged = cs.judge(groups, {}, lambda g: 0, allow_unreadable=True)
    assert judged["changes"] == [dict(group="on", name=cs.AZURE_AUTOSCALE, original="true", neutral="false")]
    # Only the unreadable setting is let through: a Rolling policy is still refused.
    [refusal] = judged["refusals"]
    assert "scaling group rolling" in refusal, refusal
    [unread] = judged["unread"]
    assert (unread["group"], unread["name"]) == ("unread", cs.AZURE_AUTOSCALE)
    for words in ("scaling group unread", "Microsoft.Insights/autoscalesettings/read",
                  "rolling_upgrade_allow_unreadable_autoscale", "deleting VMs without a drain"):
        assert words in unread["text"], unread["text"]
    # Journaled once with when it was first seen; the report lists it, the Markdown in a table of its own.
    journal = {}
    cs.merge(journal, cs.unread_record(judged["unread"], "2026-01-01T00:00:00Z"))
    cs.merge(journal, cs.unread_record(judged["unread"], "2026-01-01T00:05:00Z"))
    assert cs.unread_rows(journal) == [dict(group="unread", setting=cs.AZURE_AUTOSCALE, seen="2026-01-01T00:00:00Z")]
    assert cs.rows(journal) == [] and cs.to_restore(journal.get("cloud_settings")) == []
    summary = report.summarize(dict(journal, nodes={}))
    assert summary["cloud_settings_unread"] == cs.unread_rows(journal)
    markdown = report.render_markdown(summary)
    assert "| unread | %s | 2026-01-01T00:00:00Z |" % cs.AZURE_AUTOSCALE in markdown, markdown


def test_azure_overprovisioning_and_automatic_repairs_go_off_for_the_run():
    judged = _judge([_group("on", {cs.AZURE_OVERPROVISION: "true", cs.AZURE_REPAIRS: "true"}),
                     _group("off", {cs.AZURE_OVERPROVISION: "false", cs.AZURE_REPAIRS: "false"})])
    assert judged == dict(refusals=[], again=[], unread=[], changes=[
        dict(group="on", name=cs.AZURE_REPAIRS, original="true", neutral="false"),
        dict(group="on", name=cs.AZURE_OVERPROVISION, original="true", neutral="false")])


def test_settings_already_neutral_are_left_alone():
    judged = _judge([_group("gce", {cs.GCE_REDISTRIBUTION: "NONE"}), _group("azure", {cs.AZURE_UPGRADE_POLICY: "Manual"}),
                     _group("aws", {cs.AWS_AZ_REBALANCE: "suspended", cs.AWS_MIN_SIZE: 3})])
    assert judged == dict(changes=[], again=[], refusals=[], unread=[])


@pytest.mark.parametrize("min_size, size, unavailable, neutral", [
    (3, 3, 0, None),      # surge only: the desired capacity never goes below the start
    (3, 3, 1, 2),         # delete-first one at a time: one below the start
    (1, 3, 1, None),      # room enough already
    (4, 4, 9, 0),         # never below zero
])
def test_min_size_is_lowered_only_as_far_as_delete_first_needs(min_size, size, unavailable, neutral):
    judged = _judge([_group("aws", {cs.AWS_MIN_SIZE: min_size}, size=size)], unavailable=unavailable)
    assert [c["neutral"] for c in judged["changes"]] == ([neutral] if neutral is not None else [])


def test_a_rolling_upgrade_policy_is_refused_naming_the_setting_its_value_and_what_to_do():
    judged = _judge([_group("vmss-1", {cs.AZURE_UPGRADE_POLICY: "Rolling"})])
    [refusal] = judged["refusals"]
    assert judged["changes"] == []
    for words in ("vmss-1", "upgradePolicy.mode is Rolling", "upgradePolicy.mode=Manual", "rolling_upgrade_scaling_groups"):
        assert words in refusal, refusal


def test_a_journaled_setting_is_not_journaled_again_and_is_set_again_when_someone_put_it_back():
    recorded = cs.changed_record([dict(group="g", name=cs.AWS_AZ_REBALANCE, original="active", neutral="suspended")],
                                 "2026-01-01T00:00:00Z")["cloud_settings"]
    # As the run left it: nothing to do; the original stays what the first run found, not the neutral value.
    assert _judge([_group("g", {cs.AWS_AZ_REBALANCE: "suspended"})], recorded) == dict(changes=[], again=[], refusals=[], unread=[])
    judged = _judge([_group("g", {cs.AWS_AZ_REBALANCE: "active"})], recorded)
    assert judged["changes"] == [] and judged["again"] == [
        dict(group="g", name=cs.AWS_AZ_REBALANCE, original="active", neutral="suspended")]
    # Restored by an earlier run's end: a new change, journaled anew.
    restored = copy.deepcopy(recorded)
    restored["g|AZRebalance"]["restored"] = "2026-01-02T00:00:00Z"
    assert [c["original"] for c in _judge([_group("g", {cs.AWS_AZ_REBALANCE: "active"})], restored)["changes"]] == ["active"]


def test_the_journal_keeps_the_first_values_and_starts_an_entry_afresh_after_a_restore():
    journal = report.new_journal(NEW, None)
    change = dict(group="g", name=cs.GCE_REDISTRIBUTION, original="PROACTIVE", neutral="NONE")
    report.merge(journal, cs.changed_record([change], "t1"))
    report.merge(journal, cs.changed_record([dict(change, original="NONE")], "t2"))   # a resumed run read NONE
    assert journal["cloud_settings"]["g|" + cs.GCE_REDISTRIBUTION] == dict(
        group="g", name=cs.GCE_REDISTRIBUTION, original="PROACTIVE", neutral="NONE", changed="t1")
    entry = cs.to_restore(journal["cloud_settings"])[0]
    report.merge(journal, cs.held_record(entry, "zones out of balance"))
    assert cs.to_restore(journal["cloud_settings"])[0]["held"] == "zones out of balance"
    report.merge(journal, cs.restored_record(entry, "t3"))
    assert cs.to_restore(journal["cloud_settings"]) == []
    assert "held" not in journal["cloud_settings"]["g|" + cs.GCE_REDISTRIBUTION]
    report.merge(journal, cs.changed_record([change], "t4"))   # a later upgrade changes it again
    assert journal["cloud_settings"]["g|" + cs.GCE_REDISTRIBUTION]["changed"] == "t4"
    assert cs.to_restore(journal["cloud_settings"])[0]["changed"] == "t4"


def test_a_new_journal_carries_what_no_run_restored_and_the_report_lists_every_setting():
    journal = report.new_journal(NEW, None)
    report.merge(journal, cs.changed_record([
        dict(group="a", name=cs.AWS_AZ_REBALANCE, original="active", neutral="suspended"),
        dict(group="b", name=cs.AWS_AZ_REBALANCE, original="active", neutral="suspended")], "t1"))
    report.merge(journal, cs.restored_record(dict(group="a", name=cs.AWS_AZ_REBALANCE), "t2"))
    assert sorted(cs.carried(journal)["cloud_settings"]) == ["b|AZRebalance"]
    assert cs.carried(report.new_journal(NEW, None)) == {}
    summary = report.summarize(journal)
    assert summary["cloud_settings"] == [
        dict(group="a", setting="AZRebalance", original="active", neutral="suspended", changed="t1", restored="t2", held=""),
        dict(group="b", setting="AZRebalance", original="active", neutral="suspended", changed="t1", restored=None, held="")]
    text = report.render_markdown(summary)
    assert "| a | AZRebalance | active | suspended | t1 | t2 |" in text and "| b | AZRebalance | active | suspended | t1 | not yet |" in text


def _world(settings, role=None):
    w = World([group("G1", role=role)])
    w.groups["G1"].settings = dict(settings)
    w.groups["G1"].target_size = 1
    w.add_node("old-1", "G1", OLD, control_plane=role == "control-plane")
    return w


def test_the_executor_journals_the_settings_then_changes_them_before_anything_else_of_the_pass():
    w = _world({cs.AWS_AZ_REBALANCE: "active"})
    order = []
    w.after.append(lambda kind, item: order.append(kind))
    ex = w.executor(core.Options(image=NEW.lower()))
    journaled = []
    ex.record_settings = lambda record: (journaled.append(copy.deepcopy(record)), order.append("journal"))
    result = ex.run_pass()
    assert order[:3] == ["journal", "setting", "image"], order
    [record] = journaled
    assert record["cloud_settings"]["G1|AZRebalance"]["original"] == "active"
    assert w.groups["G1"].settings == {cs.AWS_AZ_REBALANCE: "suspended"}
    assert [d for d in result["did"] if d["step"] == "set_cloud_setting"] == [dict(
        step="set_cloud_setting", group="G1", setting="AZRebalance", value="suspended", was="active")]
    assert ex.settings.cloud_settings["G1|AZRebalance"]["neutral"] == "suspended"
    again = ex.run_pass()
    assert len(journaled) == 1 and not [d for d in again["did"] if d["step"] == "set_cloud_setting"]


def test_the_executor_refuses_before_anything_changes_and_check_mode_changes_nothing():
    w = _world({cs.AZURE_UPGRADE_POLICY: "Rolling"})
    acted = []
    w.after.append(lambda kind, item: acted.append(kind))
    with pytest.raises(executor.StepFailure, match="Rolling.*Nothing in the cloud was changed") as failure:
        w.executor(core.Options(image=NEW.lower())).run_pass()
    assert failure.value.details["reason"] == "cloud_setting" and acted == []
    w = _world({cs.AWS_AZ_REBALANCE: "active"})
    checking = w.executor(core.Options(image=NEW.lower()), check_mode=True)
    checking.run_pass()
    assert w.groups["G1"].settings == {cs.AWS_AZ_REBALANCE: "active"}
    assert [c["neutral"] for c in checking.settings_judged(checking.read()[0])["changes"]] == ["suspended"]


def test_a_journal_that_cannot_be_written_leaves_the_settings_as_they_are():
    w = _world({cs.GCE_REDISTRIBUTION: "PROACTIVE"})
    ex = w.executor(core.Options(image=NEW.lower()))

    def unwritable(record):
        raise executor.StepFailure("journal unwritable")
    ex.record_settings = unwritable
    with pytest.raises(executor.StepFailure, match="unwritable"):
        ex.run_pass()
    assert w.groups["G1"].settings == {cs.GCE_REDISTRIBUTION: "PROACTIVE"}


def test_with_leave_nothing_is_changed_nor_refused_and_each_setting_is_named_once():
    w = _world({cs.AWS_AZ_REBALANCE: "active", cs.AZURE_UPGRADE_POLICY: "Rolling"})
    said = []
    ex = w.executor(core.Options(image=NEW.lower()))
    ex.say = said.append
    ex.settings.leave_cloud_settings = True
    ex.record_settings = lambda record: pytest.fail("nothing is journaled when nothing changes")
    ex.run_pass()
    ex.run_pass()
    assert w.groups["G1"].settings == {cs.AWS_AZ_REBALANCE: "active", cs.AZURE_UPGRADE_POLICY: "Rolling"}
    warned = [line for line in said if "rolling_upgrade_cloud_settings leave" in line]
    assert len(warned) == 2 and any("AZRebalance of G1 from active to suspended" in line for line in warned), warned


def test_with_unreadable_autoscale_allowed_the_executor_goes_on_names_it_once_and_journals_it():
    w = _world({cs.AZURE_AUTOSCALE: cs.UNREADABLE, cs.AZURE_UPGRADE_POLICY: "Automatic"})
    said, journaled = [], []
    ex = w.executor(core.Options(image=NEW.lower()))
    ex.say = said.append
    ex.settings.allow_unreadable = True
    ex.journal = journaled.append
    ex.record_settings = lambda record: None
    ex.run_pass()
    ex.run_pass()
    # The other setting is still neutralised; the unreadable one is left, named once and journaled once.
    assert w.groups["G1"].settings == {cs.AZURE_AUTOSCALE: cs.UNREADABLE, cs.AZURE_UPGRADE_POLICY: "Manual"}
    warned = [line for line in said if "could not be read" in line]
    assert len(warned) == 1 and warned[0].startswith("WARNING: scaling group G1:"), said
    unread = [r["cloud_settings_unread"] for r in journaled if "cloud_settings_unread" in r]
    assert len(unread) == 1 and list(unread[0]) == ["G1|%s" % cs.AZURE_AUTOSCALE], unread
