"""The role's variables are documented where users look: every default is in meta/argument_specs.yml with
the same default, and in the README's table with that default; nothing is documented that does not exist."""

import pathlib
import re

import yaml

ROLE = pathlib.Path(__file__).resolve().parents[3] / "roles" / "rolling_upgrade"
ROW = re.compile(r"^\| `(rolling_upgrade_[a-z0-9_]+)` \| (.*?) \| (.*) \|$")


def _defaults():
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def _spec():
    return yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]


def _readme_rows():
    return {m.group(1): (m.group(2), m.group(3)) for m in map(ROW.match, (ROLE / "README.md").read_text().splitlines()) if m}


def _shown(value):
    """How the README shows a default: `value` as YAML would print it, Python's True/False for booleans."""
    if isinstance(value, bool):
        return "`%s`" % value
    if value is None:
        return "`null`"
    if value in ("", [], {}):
        return "`%s`" % ("" if value == "" else yaml.safe_dump(value, default_flow_style=True).strip())
    return "`%s`" % value


def test_every_variable_is_prefixed_and_in_the_argument_spec_with_its_default():
    defaults, spec = _defaults(), _spec()
    assert all(name.startswith("rolling_upgrade_") for name in defaults)
    assert sorted(spec) == sorted(defaults), "argument_specs and defaults/main.yml list different variables"
    for name, value in defaults.items():
        if spec[name].get("required"):
            continue
        assert spec[name].get("default") == value or (value in ("", [], {}, None) and spec[name].get("default") in (None, value)), (
            name, value, spec[name].get("default"))
        assert spec[name].get("description"), "%s has no description" % name


def test_every_variable_is_in_the_readme_table_with_its_default():
    defaults, spec, rows = _defaults(), _spec(), _readme_rows()
    assert sorted(rows) == sorted(defaults), "README table and defaults/main.yml list different variables: %s" % (
        sorted(set(rows) ^ set(defaults)))
    for name, value in defaults.items():
        shown, description = rows[name]
        assert description.strip(), "%s has no description in the README" % name
        if spec[name].get("required"):
            assert shown == "required", (name, shown)
        else:
            assert shown == _shown(value), "README shows %s for %s, defaults/main.yml has %r" % (shown, name, value)


def test_the_readme_is_markdown_without_ansible_doc_markup():
    # C(), V(), M(), O(), E() and I() render only in ansible-doc; on a Markdown page they show raw.
    markup = re.compile(r"\b[CVMOEI]\([^)]*\)")
    raw = [line for line in (ROLE / "README.md").read_text().splitlines() if markup.search(line)]
    assert not raw, "ansible-doc markup in roles/rolling_upgrade/README.md:\n" + "\n".join(raw)
