"""The rolling_upgrade role's pass loop survives thousands of passes. Ansible nests each include_tasks inside
the one that included it; one chain of a few hundred recursive includes exceeds Python's recursion limit
("maximum recursion depth exceeded", measured below 400 trivial passes with ansible-core 2.19). The role
therefore runs chains of at most _rolling_upgrade_passes_per_chain passes (tasks/passes.yml), each pass
ending with tasks/pass.yml's "Next pass" include.

This runs the role's real tasks/passes.yml and the real "Next pass" task of tasks/pass.yml around a pass
body that only counts, for more passes than one chain survives. No cluster is needed."""

import shutil

import pytest
import yaml

from ansible_run import REPO, run_playbook

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TASKS = REPO / "roles" / "rolling_upgrade" / "tasks"
PASSES = 600


def _real_task(path, prefix):
    [task] = [t for t in yaml.safe_load(path.read_text()) if t["name"].startswith(prefix)]
    return task


@pytest.mark.timeout(900)
def test_a_run_of_600_passes_does_not_exhaust_the_recursion_limit(tmp_path):
    shutil.copy(TASKS / "passes.yml", tmp_path / "passes.yml")
    body = [
        _real_task(TASKS / "pass.yml", "Count the pass"),
        {"name": "Stand-in for the pass: done after the last one",
         "ansible.builtin.set_fact": {"_rolling_upgrade_facts": {"done": "{{ _rolling_upgrade_pass | int >= %d }}" % PASSES}}},
        _real_task(TASKS / "pass.yml", "Next pass"),
    ]
    (tmp_path / "pass.yml").write_text(yaml.safe_dump(body, sort_keys=False))
    play = [{
        "name": "Passes", "hosts": "localhost", "gather_facts": False, "connection": "local",
        "tasks": [
            {"name": "Start", "ansible.builtin.set_fact": {"_rolling_upgrade_pass": 0}},
            {"name": "Passes until done", "ansible.builtin.include_tasks": str(tmp_path / "passes.yml")},
            {"name": "Count", "ansible.builtin.assert": {"that": "_rolling_upgrade_pass | int == %d" % PASSES}},
        ],
    }]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    rc, output = run_playbook(tmp_path / "play.yml", timeout=840)
    failed = [t["task"]["name"] for p in output["plays"] for t in p["tasks"] for r in t["hosts"].values() if r.get("failed")]
    assert rc == 0 and not failed, (rc, failed, output.get("stats"))
    counted = [t for p in output["plays"] for t in p["tasks"] if t["task"]["name"] == "Count"]
    assert counted and not counted[0]["hosts"]["localhost"].get("failed")
