"""The collection as users get it: `ansible-galaxy collection build`, install the tarball, and every
module in plugins/modules renders with ansible-doc from the installed copy."""

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent


def run(cmd, env=None):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, "%s failed:\n%s\n%s" % (" ".join(map(str, cmd)), proc.stdout[-3000:], proc.stderr[-3000:])
    return proc.stdout


@pytest.mark.timeout(600)
def test_build_install_and_document_every_module(tmp_path):
    run([BIN / "ansible-galaxy", "collection", "build", "--force", "--output-path", tmp_path, REPO])
    tarballs = list(tmp_path.glob("kubenodes-image_upgrade-*.tar.gz"))
    assert len(tarballs) == 1
    listing = run(["tar", "tzf", tarballs[0]])
    for kept_out in ("sandbox/", "bench/", ".ci/", "scripts/", ".venv/", ".venv-2.20/"):
        assert not any(line.startswith(kept_out) for line in listing.splitlines()), kept_out
    target = tmp_path / "installed"
    run([BIN / "ansible-galaxy", "collection", "install", "--force", "-p", target, tarballs[0]])
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(target), ANSIBLE_NOCOLOR="1")
    modules = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py"))
    assert modules
    listed = run([BIN / "ansible-doc", "-l", "kubenodes.image_upgrade"], env=env)
    installed_root = target / "ansible_collections" / "kubenodes" / "image_upgrade"
    for name in modules:
        assert "kubenodes.image_upgrade.%s " % name in listed, name
        doc = run([BIN / "ansible-doc", "kubenodes.image_upgrade." + name], env=env)
        assert str(installed_root) in doc and "EXAMPLES" in doc, name


@pytest.mark.timeout(300)
def test_ansible_lint_cache_is_neither_tracked_nor_shipped(tmp_path):
    """A plain `ansible-lint` leaves .ansible/ (its collection cache) in the tree: git ignores it and the
    build leaves it out (it nearly doubled the tarball)."""
    probe = REPO / ".ansible" / "collections" / "probe.txt"
    ignored = subprocess.run(["git", "-C", REPO, "check-ignore", "-q", "--no-index", probe], check=False)
    assert ignored.returncode == 0, ".ansible/ is not in .gitignore"
    tree = tmp_path / "tree"
    files = subprocess.run(["git", "-C", REPO, "ls-files", "-z"], capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, files):
        source = REPO / os.fsdecode(name)
        if source.is_file():
            (tree / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
            (tree / os.fsdecode(name)).write_bytes(source.read_bytes())
    cache = tree / ".ansible" / "collections" / "ansible_collections" / "some" / "thing"
    cache.mkdir(parents=True)
    (cache / "plugin.py").write_text("# a cached collection\n")
    run([BIN / "ansible-galaxy", "collection", "build", "--force", "--output-path", tmp_path, tree])
    [tarball] = tmp_path.glob("kubenodes-image_upgrade-*.tar.gz")
    listing = run(["tar", "tzf", tarball]).splitlines()
    assert not [line for line in listing if line == ".ansible" or line.startswith(".ansible/")], "the build ships .ansible/"
