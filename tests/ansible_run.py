"""Run the collection's modules the way users do: through ansible-playbook, as a task on localhost.
Integration tests use this so argument parsing, check mode, diff and no_log are exercised for real."""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

import yaml

REPO = pathlib.Path(__file__).resolve().parent.parent
COLLECTIONS = REPO / ".build" / "collections"


def ansible_env(extra=None):
    env = dict(os.environ)
    env.update(
        ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
        ANSIBLE_STDOUT_CALLBACK="kubenodes_json",  # tests/callback_plugins: core 2.19 has no JSON callback
        ANSIBLE_CALLBACK_PLUGINS=str(REPO / "tests" / "callback_plugins"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        ANSIBLE_LOCALHOST_WARNING="0",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
    )
    env.update(extra or {})
    return env


def run_playbook(playbook, extra_vars=None, check=False, diff=False, env=None, timeout=600, tags=None, inventory="localhost,"):
    """Run a playbook (a path or a list of plays) on `inventory`; return (returncode, parsed json callback output)."""
    with tempfile.TemporaryDirectory() as tmp:
        if not isinstance(playbook, (str, pathlib.Path)):
            path = pathlib.Path(tmp) / "play.yml"
            path.write_text(yaml.safe_dump(playbook, sort_keys=False))
            playbook = path
        cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory, str(playbook)]
        if extra_vars:
            vars_file = pathlib.Path(tmp) / "vars.json"
            vars_file.write_text(json.dumps(extra_vars))
            cmd += ["-e", "@" + str(vars_file)]
        if check:
            cmd.append("--check")
        if diff:
            cmd.append("--diff")
        if tags:
            cmd += ["--tags", tags]
        proc = subprocess.run(cmd, env=ansible_env(env), capture_output=True, text=True, timeout=timeout, check=False)
    # The callback prints one document at the end; lines an action displayed live (upgrade_step's progress, the
    # target image, the preflight's warnings) come before it.
    document = proc.stdout[proc.stdout.find('{"plays": '):] if '{"plays": ' in proc.stdout else proc.stdout
    try:
        output = json.loads(document)
    except ValueError:
        raise AssertionError("ansible-playbook did not print JSON (exit %d)\nstdout:\n%s\nstderr:\n%s"
                             % (proc.returncode, proc.stdout[-5000:], proc.stderr[-5000:]))
    return proc.returncode, output


def run_module(module, args, check=False, diff=False, env=None, timeout=600):
    """Run kubenodes.image_upgrade.<module> with `args` once; return its result dict (with `failed`)."""
    play = [{
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "tasks": [{"name": "under test", "kubenodes.image_upgrade." + module: args, "ignore_errors": True}],
    }]
    _rc, output = run_playbook(play, check=check, diff=diff, env=env, timeout=timeout)
    tasks = output["plays"][0]["tasks"]
    result = tasks[0]["hosts"]["localhost"]
    result.setdefault("failed", False)
    return result
