# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Named moments of the step engine at which a kill test holds it, so that a kill of the whole process tree
lands exactly there (tests/integration/test_upgrade_e2e_killed.py), or at which a failure test makes it fail
(tests/integration/test_upgrade_failures.py). The step engine drains, removes an etcd member and deletes within
about a second, too fast for a kill timed from outside to aim at each step.

Inert unless the environment names points (an ordinary run never sets it):
  KUBENODES_IMAGE_UPGRADE_HOLD_AT    comma-separated point names (POINTS)
  KUBENODES_IMAGE_UPGRADE_HOLD_FILE  a file the engine appends "<point> <pid>" to when it holds
At the first named point it reaches, the engine writes that line and sleeps (at most HOLD_SECONDS, then goes
on as if nothing happened): the test sees the line and kills the tree, or changes the world while the engine
stands still and releases it by taking the line out of the file. Each point holds once per process.

Every point comes right after a call that changed the cluster or the cloud and before the engine recorded
it, the moment a kill leaves the most for the next run to work out.

  KUBENODES_IMAGE_UPGRADE_FAIL_AT    comma-separated point names (POINTS and RUN_POINTS)
At the first named point it reaches, the run fails there (failure_due gives the message; once per process), as a
cloud or API call that fails would: what the run does then is the failure path under test."""

from __future__ import annotations

import os
import time

ENV_POINTS = "KUBENODES_IMAGE_UPGRADE_HOLD_AT"
ENV_FILE = "KUBENODES_IMAGE_UPGRADE_HOLD_FILE"
ENV_FAIL = "KUBENODES_IMAGE_UPGRADE_FAIL_AT"
HOLD_SECONDS = 600.0
RELEASE_LOOK_SECONDS = 0.2   # how often a hold looks whether the test took its line out of the file

POINTS = (
    "set-group-image",   # the groups point at the image; no heir created yet
    "create",            # the cloud accepted heirs; the journal does not record them yet
    "drain",             # a donor cordoned and its pods evicted; its phase not written yet
    "etcd-remove",       # a control-plane donor's member removed; its phase not written yet
    "delete-instance",   # the donors' instances deleted in the cloud; their Nodes still there
    "delete-node",       # a donor's Node deleted; the journal does not record the finish yet
)

# The run's own moments (module_utils/run.py), for failures only.
RUN_POINTS = (
    "begin",             # the autoscaler paused and the attempt recorded; no pass yet
    "gate",              # inside a health gate: its checks ran, it is not recorded as passed yet
    "finish",            # the upgrade done, the autoscaler restored, the journal closed; the report not written yet
    "abort",             # a failed run's own end: the attempt's journal record fails too
)

_held = set()
_failed = set()


def reached(point, environ=None, sleep=time.sleep, clock=time.monotonic):
    """Hold here when the environment names `point` (see the module's description); otherwise return at once."""
    environ = os.environ if environ is None else environ
    names = environ.get(ENV_POINTS)
    if not names or point in _held or point not in [n.strip() for n in names.split(",")]:
        return False
    _held.add(point)
    path = environ.get(ENV_FILE)
    if not path:
        sleep(HOLD_SECONDS)
        return True
    line = "%s %d" % (point, os.getpid())
    with open(path, "a", encoding="utf-8") as marker:
        marker.write(line + "\n")
    deadline = clock() + HOLD_SECONDS
    while clock() < deadline and _marked(path, line):
        sleep(RELEASE_LOOK_SECONDS)
    return True


def _marked(path, line):
    try:
        with open(path, encoding="utf-8") as marker:
            return line in marker.read().splitlines()
    except OSError:
        return False


def failure_due(point, environ=None):
    """The message of the failure the environment asks for at `point` (ENV_FAIL), once per process; else None."""
    environ = os.environ if environ is None else environ
    names = environ.get(ENV_FAIL)
    if not names or point in _failed or point not in [n.strip() for n in names.split(",")]:
        return None
    _failed.add(point)
    return "injected failure at %s (%s)" % (point, ENV_FAIL)
