"""The collection as users get it: `ansible-galaxy collection build`, install the tarball into an empty
collections path, and from the installed copy every module renders with ansible-doc, the shipped unit
tests import, and the shipped playbook runs in check mode with no cluster and no cloud: the role's
option check passes a good image and refuses a bad one by its own rules, before anything is read. The
tarball leaves out what needs the unshipped sandbox/ and bench/, and nothing it ships imports them."""

import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent


def run(cmd, env=None):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, "%s failed:\n%s\n%s" % (" ".join(map(str, cmd)), proc.stdout[-3000:], proc.stderr[-3000:])
    return proc.stdout


# Left out of the tarball: they run only against the sandbox or the benchmarks, or only from the source tree.
KEPT_OUT = ("sandbox/", "bench/", ".ci/", "scripts/", ".venv/", ".venv-2.20/", ".venv-2.21/", "tests/integration/",
            "tests/fixtures/", "tests/callback_plugins/", "tests/ansible_run.py", "tests/unit/sandbox/",
            "tests/unit/bench/", "tests/unit/release/", "extensions/molecule/")
# Kept: what certification and a user running the unit tests from the tarball need.
KEPT_IN = ("tests/sanity/ignore-2.19.txt", "tests/sanity/ignore-2.20.txt", "tests/sanity/ignore-2.21.txt",
           "tests/config.yml", "tests/conftest.py", "tests/rbac_audit.py", "tests/unit/test_doc_examples.py", "playbooks/upgrade_nodes.yml")
UNSHIPPED = re.compile(r"(?:^|\s)-m\s+(?:sandbox|bench)\b")


def unshipped_imports(root):
    """(file, module) for every import in a shipped Python file of a module the tarball does not hold: the
    sandbox, the benchmarks, or a tests.* module that is not in it; and any `python -m sandbox|bench` in a file
    that runs (the docs may tell developers about the sandbox of the source tree)."""
    found = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.suffix not in (".py", ".yml", ".yaml", ".sh", ".cfg", ".ini"):
            continue
        text = path.read_text(errors="replace")
        if UNSHIPPED.search(text):
            found.append((str(path.relative_to(root)), UNSHIPPED.search(text).group(0).strip()))
        if path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(text)):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            for name in names:
                top = name.split(".")[0]
                local = root.joinpath(*name.split("."))
                if top in ("sandbox", "bench") or top == "tests" and not (
                        local.with_suffix(".py").is_file() or local.is_dir()):
                    found.append((str(path.relative_to(root)), name))
    return found


def test_the_scan_finds_an_unshipped_import(tmp_path):
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "test_a.py").write_text("import os\nfrom sandbox import seed\n")
    (tmp_path / "tests" / "unit" / "test_b.py").write_text("from tests.integration import helpers\n")
    (tmp_path / "tests" / "c.yml").write_text("- command: python -m bench run\n")
    assert sorted(unshipped_imports(tmp_path)) == [
        ("tests/c.yml", "-m bench"), ("tests/unit/test_a.py", "sandbox"),
        ("tests/unit/test_b.py", "tests.integration")]


def check_mode_run(env, image, cwd, bin_dir=BIN):
    """The shipped playbook in check mode, with the ansible-playbook of bin_dir: (return code, output)."""
    proc = subprocess.run(
        [bin_dir / "ansible-playbook", "-i", "localhost,", "kubenodes.image_upgrade.upgrade_nodes", "--check",
         "-e", "image=%s" % image, "-e", "provider=gcp", "-e", '{"gcp": {"project": "my-project"}}'],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.timeout(600)
def test_build_install_and_document_every_module(tmp_path):
    run([BIN / "ansible-galaxy", "collection", "build", "--force", "--output-path", tmp_path, REPO])
    tarballs = list(tmp_path.glob("kubenodes-image_upgrade-*.tar.gz"))
    assert len(tarballs) == 1
    listing = run(["tar", "tzf", tarballs[0]]).splitlines()
    for kept_out in KEPT_OUT:
        assert not any(line == kept_out.rstrip("/") or line.startswith(kept_out) for line in listing), kept_out
    for kept_in in KEPT_IN:
        assert kept_in in listing, "%s is not in the tarball" % kept_in
    target = tmp_path / "installed"
    target.mkdir()
    assert not list(target.iterdir())
    run([BIN / "ansible-galaxy", "collection", "install", "--force", "-p", target, tarballs[0]])
    home = tmp_path / "home"
    home.mkdir()
    # Nothing of this machine's: no other collection, no cloud credentials, no metadata server to ask.
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(target), ANSIBLE_NOCOLOR="1", HOME=str(home),
               NO_GCE_CHECK="True", CLOUDSDK_CONFIG=str(home / "gcloud"), ANSIBLE_LOCAL_TEMP=str(home / "tmp"))
    env.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
    modules = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py"))
    assert modules
    listed = run([BIN / "ansible-doc", "-l", "kubenodes.image_upgrade"], env=env)
    installed_root = target / "ansible_collections" / "kubenodes" / "image_upgrade"
    for name in modules:
        assert "kubenodes.image_upgrade.%s " % name in listed, name
        doc = run([BIN / "ansible-doc", "kubenodes.image_upgrade." + name], env=env)
        assert str(installed_root) in doc and "EXAMPLES" in doc, name

    assert unshipped_imports(installed_root) == []
    # The shipped unit tests import from the installed copy (nothing of the sandbox, bench or source tree),
    # and those that read the shipped docs, role and examples pass there.
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", "--collect-only", "tests/unit"],
        cwd=installed_root, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert collected.returncode == 0 and " error" not in collected.stdout, collected.stdout[-3000:]
    passed = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", "tests/unit/test_doc_examples.py",
         "tests/unit/roles", "tests/unit/examples"],
        cwd=installed_root, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert passed.returncode == 0 and " passed" in passed.stdout, passed.stdout[-3000:]

    # The playbook in check mode, no cluster and no cloud: a good image passes the role's option check and
    # the run stops at the first cloud read, naming the missing credentials; a bad one stops at the check.
    code, out = check_mode_run(env, "projects/my-project/global/images/node-v2", installed_root)
    assert code == 2, out[-3000:]
    assert "Check the role's variables" in out and "ok: [localhost]" in out, out[-3000:]
    assert "found no application default credentials" in out, out[-3000:]
    assert "[WARNING]" not in out, out[-3000:]
    code, out = check_mode_run(env, "projects/p1/global/images/node-v2", installed_root)
    assert code == 2, out[-3000:]
    assert "the project ID 'p1' is 2 characters long" in out and "Nothing was changed" in out, out[-3000:]
    assert "Target image" not in out, "the run went on after the option check:\n" + out[-3000:]


# Every ansible-core the collection supports (meta/runtime.yml) and the venv `make setup` gives it.
CORES = {"2.19": ".venv", "2.20": ".venv-2.20", "2.21": ".venv-2.21"}


def test_the_cores_tried_are_the_supported_ones():
    runtime = (REPO / "meta" / "runtime.yml").read_text()
    [requires] = re.findall(r'^requires_ansible: "(.*)"$', runtime, re.M)
    newest = max(CORES, key=lambda v: tuple(map(int, v.split("."))))
    assert requires == ">=%s.0,<2.%d" % (min(CORES), int(newest.split(".")[1]) + 1), requires


@pytest.fixture(scope="module")
def tarball(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    run([BIN / "ansible-galaxy", "collection", "build", "--force", "--output-path", out, REPO])
    [built] = out.glob("kubenodes-image_upgrade-*.tar.gz")
    return built


@pytest.mark.timeout(300)
@pytest.mark.parametrize("core", sorted(CORES))
def test_install_and_check_mode_without_a_warning_on_each_core(core, tarball, tmp_path):
    """The tarball installs with that core's ansible-galaxy, and its ansible-doc and a check-mode run of the
    shipped playbook say no [WARNING] (requires_ansible names the core)."""
    bin_dir = REPO / CORES[core] / "bin"
    assert (bin_dir / "ansible-galaxy").exists(), "%s has no ansible-core %s: run make setup" % (CORES[core], core)
    version = run([bin_dir / "python", "-c", "import ansible.release as r; print(r.__version__)"]).strip()
    assert version.startswith(core + "."), "%s has ansible-core %s, not %s: run make setup" % (CORES[core], version, core)
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(tmp_path), ANSIBLE_NOCOLOR="1", HOME=str(home),
               NO_GCE_CHECK="True", CLOUDSDK_CONFIG=str(home / "gcloud"), ANSIBLE_LOCAL_TEMP=str(home / "tmp"),
               ANSIBLE_COLLECTIONS_ON_ANSIBLE_VERSION_MISMATCH="error")
    env.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
    installed = run([bin_dir / "ansible-galaxy", "collection", "install", "--force", "-p", tmp_path, tarball], env=env)
    assert "[WARNING]" not in installed, installed
    doc = subprocess.run([bin_dir / "ansible-doc", "kubenodes.image_upgrade.node_drain"], env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert doc.returncode == 0 and "EXAMPLES" in doc.stdout, doc.stderr[-3000:]
    assert "[WARNING]" not in doc.stdout + doc.stderr, doc.stderr[-3000:]
    code, out = check_mode_run(env, "projects/my-project/global/images/node-v2",
                               tmp_path / "ansible_collections" / "kubenodes" / "image_upgrade", bin_dir)
    assert code == 2 and "Check the role's variables" in out and "ok: [localhost]" in out, out[-3000:]
    assert "found no application default credentials" in out, out[-3000:]
    assert "[WARNING]" not in out, out[-3000:]


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
