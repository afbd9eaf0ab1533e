"""One version history: galaxy.yml's version, every `version_added` and the changelog agree, and the first
`antsibull-changelog release`, made in a temporary copy of the collection, lists every module, filter, role
and playbook as new in that release.

A maintainer's test of the source tree (it needs galaxy.yml and antsibull-changelog): galaxy.yml's
build_ignore leaves it out of the tarball."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
BIN = pathlib.Path(sys.executable).parent
GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text())
# What antsibull-changelog reads: the collection's metadata, its changelog and what it documents.
RELEASE_INPUTS = ("galaxy.yml", "changelogs", "plugins", "roles", "playbooks", "meta")
VERSION_ADDED = re.compile(r"""^\s*version_added:\s*["']?([^"'\s#]+)""", re.M)


def _documented_files():
    for folder in ("plugins", "roles"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix in (".py", ".yml", ".yaml") and "__pycache__" not in path.parts:
                yield path


def test_every_version_added_is_the_version_of_galaxy_yml():
    """The collection has never been released: everything in it is new in galaxy.yml's version."""
    found = {}
    for path in _documented_files():
        for value in VERSION_ADDED.findall(path.read_text()):
            found.setdefault(value, []).append(str(path.relative_to(REPO)))
    assert found, "no version_added found under plugins/ or roles/: the pattern no longer matches the docs"
    wrong = {value: paths for value, paths in found.items() if value != GALAXY["version"]}
    assert not wrong, "version_added other than galaxy.yml's version %s (set them to %s): %s" % (
        GALAXY["version"], GALAXY["version"], wrong)


def test_changelog_has_no_release_yet():
    changelog = yaml.safe_load((REPO / "changelogs" / "changelog.yaml").read_text())
    assert not changelog.get("releases"), "changelogs/changelog.yaml already has a release: update this test"


@pytest.fixture(scope="module")
def first_release(tmp_path_factory):
    """The release antsibull-changelog makes from this tree, in a copy placed where ansible-doc finds it."""
    if not (BIN / "antsibull-changelog").exists():
        pytest.fail("antsibull-changelog is not installed next to %s (requirements-dev.txt)" % sys.executable)
    root = tmp_path_factory.mktemp("release")
    copy = root / "ansible_collections" / GALAXY["namespace"] / GALAXY["name"]
    copy.mkdir(parents=True)
    for name in RELEASE_INPUTS:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.exists():
            shutil.copy2(source, copy / name)
    env = dict(os.environ, PATH="%s%s%s" % (BIN, os.pathsep, os.environ.get("PATH", "")),
               ANSIBLE_COLLECTIONS_PATH=str(root), ANSIBLE_NOCOLOR="1")
    for args in (["lint"], ["release", "--date", "2030-01-01"]):
        proc = subprocess.run([BIN / "antsibull-changelog"] + args, cwd=copy, env=env, capture_output=True,
                              text=True, timeout=300, check=False)
        # ansible-core 2.20's ansible-doc warns about a collection of its own (ansible._protomatter, no version):
        # not this collection's.
        warnings = [line for line in (proc.stdout + proc.stderr).splitlines()
                    if "WARNING" in line and "/ansible/_internal/ansible_collections/" not in line]
        assert proc.returncode == 0 and not warnings, (
            "antsibull-changelog %s:\n%s\n%s" % (" ".join(args), proc.stdout[-3000:], proc.stderr[-3000:]))
    changelog = yaml.safe_load((copy / "changelogs" / "changelog.yaml").read_text())
    return changelog, (copy / "CHANGELOG.rst").read_text()


def test_first_release_is_galaxy_version_with_its_summary(first_release):
    changelog, rst = first_release
    assert list(changelog["releases"]) == [GALAXY["version"]]
    release = changelog["releases"][GALAXY["version"]]
    assert release["changes"].get("release_summary"), "the first release has no release summary"
    assert "v%s" % GALAXY["version"] in rst


def test_first_release_lists_every_module_as_new(first_release):
    changelog, rst = first_release
    release = changelog["releases"][GALAXY["version"]]
    listed = sorted(entry["name"] for entry in release.get("modules", []))
    shipped = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
    assert shipped and listed == shipped, "New Modules lists %s, plugins/modules holds %s" % (listed, shipped)
    assert "New Modules" in rst


def test_first_release_lists_every_filter_as_new(first_release):
    changelog, rst = first_release
    release = changelog["releases"][GALAXY["version"]]
    listed = sorted(entry["name"] for entry in release.get("plugins", {}).get("filter", []))
    documented = sorted(p.stem for p in (REPO / "plugins" / "filter").glob("*.yml"))
    assert documented and listed == documented, "New Plugins / Filter lists %s, plugins/filter documents %s" % (
        listed, documented)
    assert set(release.get("plugins", {})) == {"filter"}, "plugins of another type appeared: %s" % release["plugins"]


def test_first_release_lists_every_role_and_playbook_with_its_own_description(first_release):
    changelog, rst = first_release
    release = changelog["releases"][GALAXY["version"]]
    objects = release.get("objects", {})
    roles = {entry["name"]: entry["description"] for entry in objects.get("role", [])}
    expected_roles = {
        path.parent.parent.name: yaml.safe_load(path.read_text())["argument_specs"]["main"]["short_description"]
        for path in (REPO / "roles").glob("*/meta/argument_specs.yml")}
    assert expected_roles and roles == expected_roles, (
        "New Roles lists %s; roles/*/meta/argument_specs.yml say %s (changelogs/fragments/1.0.0-new-objects.yml)"
        % (roles, expected_roles))
    playbooks = {entry["name"]: entry["description"] for entry in objects.get("playbook", [])}
    expected_playbooks = {path.stem: yaml.safe_load(path.read_text())[0]["name"]
                          for path in (REPO / "playbooks").glob("*.yml")}
    assert expected_playbooks and playbooks == expected_playbooks, (
        "New Playbooks lists %s; the playbooks' first plays are named %s (changelogs/fragments/1.0.0-new-objects.yml)"
        % (playbooks, expected_playbooks))
    assert "New Roles" in rst and "New Playbooks" in rst
