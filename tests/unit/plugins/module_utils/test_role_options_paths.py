"""The role's option check on the files and directories a run needs (issue 28 item 1): found at the start, not after
nodes were replaced. Real files in tmp_path; the messages are validate.py's."""

import os

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.report_files import report_dir_problems
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import validate


def test_a_report_dir_that_exists_or_can_be_created_is_fine(tmp_path):
    assert report_dir_problems(str(tmp_path)) == []
    assert report_dir_problems(str(tmp_path / "a" / "b")) == []


def test_a_report_dir_in_the_way_of_a_file_is_refused_naming_the_variable_and_the_file(tmp_path):
    blocker = tmp_path / "report"
    blocker.write_text("not a directory")
    for value in (str(blocker), str(blocker / "below")):
        [problem] = report_dir_problems(value)
        assert problem == (
            "rolling_upgrade_report_dir is %r, but the report could not be written there at the end: %s is not a "
            "directory; set it to a directory on the controller this user may write (it is created when missing)"
            % (value, blocker))


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any directory")
def test_a_report_dir_this_user_may_not_write_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    [problem] = report_dir_problems(str(locked / "report"))
    assert "this user may not write %s, where it would be created" % locked in problem


def test_the_unwritable_report_dir_message_names_the_place():
    assert "this user may not write /r; set it" in validate.report_dir_problem("/r", "/r", True)
    assert "this user may not write /, where it would be created" in validate.report_dir_problem("/r/x", "/", True, True)


def test_a_missing_gate_tasks_file_names_the_variable_the_path_and_where_it_was_looked_for():
    problem = validate.gate_tasks_file_problem("checks/smoke.yml", "in /roles/r/tasks, /roles/r, /play")
    assert problem.startswith("rolling_upgrade_gate_tasks names the tasks file 'checks/smoke.yml', which does not exist "
                              "(looked for it in /roles/r/tasks, /roles/r, /play): give the path of your tasks file")
    assert "or leave it empty for none" in problem


def test_a_gate_tasks_file_that_is_no_tasks_file_names_the_variable_the_file_and_why():
    problem = validate.gate_tasks_content_problem("smoke.yml", "/play/smoke.yml", "it holds a mapping, not a list of tasks")
    assert problem == ("rolling_upgrade_gate_tasks names 'smoke.yml' (/play/smoke.yml), which is not a tasks file: it "
                       "holds a mapping, not a list of tasks; make it a YAML list of tasks, as for include_tasks")
