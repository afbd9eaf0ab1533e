# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""A path on the controller, resolved where the user means it: filters run in the controller's process, whose
working directory is where ansible-playbook started (AWX and ansible-runner: the project directory)."""

from __future__ import annotations

import os


def controller_path(path):
    """~ expanded, a relative path made absolute against the controller's working directory."""
    return os.path.abspath(os.path.expanduser(str(path)))


class FilterModule:
    def filters(self):
        return {"controller_path": controller_path}
