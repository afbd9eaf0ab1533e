# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Writing report files on the host a module runs on (the run report of upgrade_journal, the fleet report of
fleet_report): a file is replaced whole, and only when its content changes, so `changed` is true."""

from __future__ import annotations

import os


def write_if_changed(path, text, check_mode):
    """Write `text` to `path` (atomically) unless it holds that already; True when it changed or, in check mode,
    would change."""
    try:
        with open(path) as handle:
            if handle.read() == text:
                return False
    except OSError:
        pass
    if not check_mode:
        tmp = path + ".tmp"
        with open(tmp, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    return True
