"""Shared pytest set-up: make `ansible_collections.kubenodes.image_upgrade` importable from this
checkout (through the link `make setup` creates), and the sandbox package from the repository root."""

import os
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
COLLECTIONS = REPO / ".build" / "collections"
_link = COLLECTIONS / "ansible_collections" / "kubenodes" / "image_upgrade"
if not _link.exists():
    _link.parent.mkdir(parents=True, exist_ok=True)
    _link.symlink_to(REPO)
for path in (str(COLLECTIONS), str(REPO)):
    if path not in sys.path:
        sys.path.insert(0, path)
os.environ.setdefault("ANSIBLE_COLLECTIONS_PATH", str(COLLECTIONS))
