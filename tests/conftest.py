"""Shared pytest set-up: make `ansible_collections.kubenodes.image_upgrade` and the `tests` package
importable. In a checkout that is through the link `make setup` creates under .build/collections (made
here when missing), with the repository root on sys.path (the integration suite imports the sandbox from
there); in an installed copy (…/ansible_collections/kubenodes/image_upgrade, as ansible-galaxy installs
the tarball) it is the collections path the copy is in, and nothing is written."""

import os
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
if REPO.parent.parent.name == "ansible_collections":
    COLLECTIONS = REPO.parent.parent.parent
else:
    COLLECTIONS = REPO / ".build" / "collections"
    _link = COLLECTIONS / "ansible_collections" / "kubenodes" / "image_upgrade"
    if not _link.exists():
        _link.parent.mkdir(parents=True, exist_ok=True)
        _link.symlink_to(REPO)
for path in (str(COLLECTIONS), str(REPO)):
    if path not in sys.path:
        sys.path.insert(0, path)
os.environ.setdefault("ANSIBLE_COLLECTIONS_PATH", str(COLLECTIONS))
