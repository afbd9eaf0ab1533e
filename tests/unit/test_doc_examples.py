"""Every example a user copies is one the collection accepts: each YAML block of docs/*.md, README.md,
roles/rolling_upgrade/README.md and examples/*/README.md, each playbook of examples/ and each module's EXAMPLES
parses as YAML; every task of a module of this
collection passes that module's own argument spec (ansible's ArgumentSpecValidator); every variable given
to the rolling_upgrade role passes the role's meta/argument_specs.yml; and every image reference, scale
group ID and providerID in the examples (YAML, shell blocks and the modules' documentation) passes the
collection's own parsers."""

import ast
import copy
import importlib
import pathlib
import re

import pytest
import yaml
from ansible.module_utils import basic
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import aws, azure, gce

REPO = pathlib.Path(__file__).resolve().parents[2]
PREFIX = "kubenodes.image_upgrade."
MODULES = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
ROLE = "rolling_upgrade"
MARKDOWN = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md", REPO / "roles" / ROLE / "README.md"] + sorted(
    (REPO / "examples").glob("*/README.md"))
# The example projects' files: the playbooks and AWX's files a user copies as they are.
EXAMPLE_FILES = sorted(p for p in (REPO / "examples").rglob("*") if p.suffix in (".yml", ".yaml", ".json"))
INCLUDES = ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks", "include_tasks", "import_tasks")
# A tasks file an example playbook includes is checked where it is included (the play's module_defaults apply).
INCLUDED = {path.parent / name for path in EXAMPLE_FILES if path.suffix != ".json"
            for name in re.findall(r"^\s*-?\s*(?:%s):\s*(\S+)\s*$" % "|".join(map(re.escape, INCLUDES)), path.read_text(), re.M)}
FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```", re.M | re.S)
# References as they appear in prose, shell lines and YAML: (what, pattern, parser).
REFERENCES = (
    ("GCP image", re.compile(r"(?<![\w<])projects/[^/\s'\"`]+/global/images/[^\s'\"`,)]+"), gce.parse_image),
    ("GCP instance group", re.compile(r"(?<![\w<])projects/[^/\s'\"`]+/(?:zones|regions)/[^\s'\"`,)@#]+"),
     gce.parse_group_id),
    ("GCE providerID", re.compile(r"gce://[^\s'\"`,)]+"), gce.parse_provider_id),
    ("AMI ID", re.compile(r"\bami-[0-9A-Za-z]+\b"), aws.validate_image_reference),
    ("Azure image", re.compile(r"/subscriptions/[^\s'\"`,)]+/Microsoft\.Compute/(?:galleries|images)/[^\s'\"`,)]+",
                               re.I), azure.parse_image),
)
PLACEHOLDER = re.compile(r"[<>{}]|\.\.\.")


class _Captured(Exception):
    pass


def _module_doc(name):
    tree = ast.parse((REPO / "plugins" / "modules" / (name + ".py")).read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
            found[node.targets[0].id] = ast.literal_eval(node.value)
    return found


def _doc_spec(options):
    keys = ("type", "elements", "required", "choices", "default", "aliases", "no_log")
    return {name: dict({k: v for k, v in option.items() if k in keys},
                       **({"options": _doc_spec(option["suboptions"])} if "suboptions" in option else {}))
            for name, option in options.items()}


_SPECS = {}


def module_spec(name):
    """The argument spec the module (or the action plugin that runs it) validates its task against."""
    if name in _SPECS:
        return _SPECS[name]
    action_path = REPO / "plugins" / "action" / (name + ".py")
    if action_path.exists():
        action = importlib.import_module("ansible_collections.kubenodes.image_upgrade.plugins.action." + name)
        if hasattr(action, "argument_spec"):
            _SPECS[name] = action.argument_spec()
        else:  # an action plugin that validates its few options from its documentation
            _SPECS[name] = _doc_spec(yaml.safe_load(_module_doc(name)["DOCUMENTATION"])["options"])
        return _SPECS[name]
    module = importlib.import_module("ansible_collections.kubenodes.image_upgrade.plugins.modules." + name)
    captured = {}

    def capture(self, argument_spec=None, **kwargs):
        captured.update(argument_spec=argument_spec, kwargs=kwargs)
        raise _Captured()

    original = basic.AnsibleModule.__init__
    basic.AnsibleModule.__init__ = capture
    try:
        module.main()
    except _Captured:
        pass
    finally:
        basic.AnsibleModule.__init__ = original
    assert captured.get("argument_spec"), "%s's main() made no AnsibleModule" % name
    _SPECS[name] = captured["argument_spec"]
    return _SPECS[name]


def role_spec():
    path = REPO / "roles" / ROLE / "meta" / "argument_specs.yml"
    return _doc_spec(yaml.safe_load(path.read_text())["argument_specs"]["main"]["options"])


def _stand_in(spec):
    """A value of the option's type for one the example leaves to Jinja."""
    if spec.get("choices"):
        return spec["choices"][0]
    return {"int": 1, "float": 1.0, "bool": True, "list": [], "dict": {}, "path": "/tmp/x"}.get(spec.get("type"), "x")


def _templated(value):
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def _stood_in(args, spec):
    """`args` with each value left to Jinja standing as one of its option's type, in suboptions too."""
    aliases = {alias: name for name, option in spec.items() for alias in option.get("aliases", [])}
    params = {}
    for key, value in args.items():
        option = spec.get(aliases.get(key, key), {})
        if _templated(value):
            value = _stand_in(option)
        elif option.get("options") and isinstance(value, dict):
            value = _stood_in(value, option["options"])
        elif option.get("options") and isinstance(value, list):
            value = [_stood_in(item, option["options"]) if isinstance(item, dict) else item for item in value]
        params[key] = value
    return params


def problems_of(args, spec):
    """ArgumentSpecValidator's errors for `args`, a value left to Jinja standing as one of its option's type."""
    if _templated(args):
        return []
    if not isinstance(args, dict):
        return ["the options are %r, not a mapping" % (args,)]
    # A copy: validating fills the spec's shared defaults (a dict option's {}) with its suboptions.
    result = ArgumentSpecValidator(copy.deepcopy(spec)).validate(_stood_in(args, spec))
    return [str(error) for error in result.errors]


def examples():
    """(where, text) of every YAML example."""
    for path in MARKDOWN:
        for number, match in enumerate(FENCE.finditer(path.read_text()), 1):
            if match.group(1) in ("yaml", "yml"):
                yield "%s block %d" % (path.relative_to(REPO), number), match.group(2)
    for path in EXAMPLE_FILES:
        if path.suffix != ".json" and path not in INCLUDED:
            yield str(path.relative_to(REPO)), path.read_text()
    for name in MODULES:
        yield "plugins/modules/%s.py EXAMPLES" % name, _module_doc(name)["EXAMPLES"]


def reference_texts():
    """(where, text) of everything that shows a reference: every fenced block and every module's docs."""
    for path in MARKDOWN:
        for number, match in enumerate(FENCE.finditer(path.read_text()), 1):
            yield "%s block %d" % (path.relative_to(REPO), number), match.group(2)
    for path in EXAMPLE_FILES:
        yield str(path.relative_to(REPO)), path.read_text()   # comments too: the command lines they show
    for name in MODULES:
        for part, text in sorted(_module_doc(name).items()):
            yield "plugins/modules/%s.py %s" % (name, part), text


# meta/runtime.yml's action groups, for the module_defaults an example sets on them.
ACTION_GROUPS = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["action_groups"]


def with_module_defaults(module_defaults, around):
    """{module: options} the module_defaults of a play or block give this collection's modules, on top of those
    `around` it. A value left to Jinja as a whole ("{{ kube }}") gives no option the check can see."""
    merged = {name: dict(options) for name, options in around.items()}
    for key, options in (module_defaults if isinstance(module_defaults, dict) else {}).items():
        if key.startswith("group/" + PREFIX):
            names = ACTION_GROUPS.get(key[len("group/" + PREFIX):], [])
        else:
            names = [key[len(PREFIX):]] if key.startswith(PREFIX) else []
        for name in names:
            merged.setdefault(name, {}).update(options if isinstance(options, dict) else {})
    return merged


def tasks_in(node, defaults=None, base=None):
    """Every (module name, options) and every set of role variables in a parsed example, wherever it nests; a
    module's options with the module_defaults of the plays and blocks around it (the task's own win). With `base`
    (the example's folder), the tasks files it includes are read there and checked in place."""
    defaults = defaults or {}
    if isinstance(node, list):
        for item in node:
            yield from tasks_in(item, defaults, base)
        return
    if not isinstance(node, dict):
        return
    defaults = with_module_defaults(node.get("module_defaults"), defaults)
    for key in INCLUDES:
        included = base / node[key] if base is not None and isinstance(node.get(key), str) else None
        if included is not None and included.is_file():
            yield from tasks_in(yaml.safe_load(included.read_text()), defaults, base)
    for key, value in node.items():
        if isinstance(key, str) and key.startswith(PREFIX) and key[len(PREFIX):] in MODULES:
            name = key[len(PREFIX):]
            yield name, dict(defaults.get(name, {}), **(value or {})) if isinstance(value, dict) or value is None else value
        if key in ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role") \
                and isinstance(value, dict) and value.get("name") == PREFIX + ROLE:
            yield ROLE, node.get("vars") or {}
    if node.get("role") == PREFIX + ROLE:
        given = dict(node.get("vars") or {})
        given.update((k, v) for k, v in node.items() if k.startswith(ROLE + "_"))
        yield ROLE, given
    if "hosts" in node and isinstance(node.get("vars"), dict) and any(
            (r == PREFIX + ROLE or isinstance(r, dict) and r.get("role") == PREFIX + ROLE) for r in node.get("roles", [])):
        yield ROLE, {k: v for k, v in node["vars"].items() if k.startswith(ROLE + "_")}
    for key, value in node.items():
        if isinstance(value, (dict, list)) and not (isinstance(key, str) and key.startswith(PREFIX)) \
                and key != "module_defaults":
            yield from tasks_in(value, defaults, base)


EXAMPLES = list(examples())


def test_there_are_examples_to_check():
    assert len(EXAMPLES) >= len(MODULES) + 5
    checked = [name for _where, text in EXAMPLES for name, _args in tasks_in(yaml.safe_load(text))]
    assert set(checked) >= set(MODULES), "modules whose EXAMPLES show no task: %s" % (set(MODULES) - set(checked))
    assert ROLE in checked


@pytest.mark.parametrize("where,text", EXAMPLES, ids=[where for where, _text in EXAMPLES])
def test_example_parses_and_its_tasks_pass_their_argument_spec(where, text):
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        pytest.fail("%s is not valid YAML: %s" % (where, exc))
    for name, args in tasks_in(parsed, base=(REPO / where).parent if where.startswith("examples/") else None):
        spec = role_spec() if name == ROLE else module_spec(name)
        problems = problems_of(args, spec)
        assert not problems, "%s: %s%s: %s" % (where, PREFIX, name, "; ".join(problems))


REFERENCE_TEXTS = list(reference_texts())


@pytest.mark.parametrize("where,text", REFERENCE_TEXTS, ids=[where for where, _text in REFERENCE_TEXTS])
def test_every_reference_shown_is_one_the_collection_accepts(where, text):
    wrong = []
    for what, pattern, parse in REFERENCES:
        for reference in pattern.findall(text):
            if PLACEHOLDER.search(reference):
                continue  # a format (projects/<project>/...), not an example
            try:
                parse(reference)
            except Exception as exc:  # pylint: disable=broad-except
                wrong.append("%s %s: %s" % (what, reference, exc))
    assert not wrong, "%s shows references the collection refuses:\n%s" % (where, "\n".join(wrong))


def test_the_checks_refuse_what_the_collection_refuses():
    """The checks above can fail: a refused image, an unknown option and a wrong type are found."""
    bad = "- kubenodes.image_upgrade.csp_scaling_group:\n    provider: gcp\n    image: projects/p/global/images/x\n"
    [(name, args)] = tasks_in(yaml.safe_load(bad))
    assert name == "csp_scaling_group" and not problems_of(args, module_spec(name))
    with pytest.raises(AssertionError, match="project ID 'p' is 1 character long"):
        test_every_reference_shown_is_one_the_collection_accepts("probe", bad)
    assert problems_of({"provider": "gcp", "image": "x", "max_surgeon": 1}, module_spec("csp_scaling_group"))
    assert problems_of({"state": "drained", "name": "n1", "timeout": "soon"}, module_spec("node_drain"))
    assert problems_of({"rolling_upgrade_max_surge": {"a": 1}}, role_spec())
    assert not problems_of({"rolling_upgrade_image": "{{ image }}", "rolling_upgrade_provider": "{{ p }}"}, role_spec())
    # A required option given by the play's module_defaults (to the action group, or to the module) is given; one
    # given to another group is not; and a templated suboption stands as its type.
    play = ("- hosts: localhost\n  module_defaults:\n    group/kubenodes.image_upgrade.GROUP:\n      provider: gcp\n"
            "  tasks:\n    - kubenodes.image_upgrade.csp_node_info:\n        group: g\n")
    for group, refused in (("cloud", False), ("etcd", True)):
        [(name, args)] = tasks_in(yaml.safe_load(play.replace("GROUP", group)))
        assert bool(problems_of(args, module_spec(name))) is refused, (group, args)
    assert not problems_of({"gcp": {"project": "{{ project }}"}, "provider": "gcp", "group": "g"}, module_spec("csp_node_info"))
