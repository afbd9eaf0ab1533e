"""examples/awx-project/awx as an AWX admin pastes it: the survey asks only for the playbook's short variables,
in AWX's survey spec format; the custom credential types have inputs AWX accepts and injectors that use only
those inputs and inject only the role's variables."""

import json
import pathlib
import re

import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
AWX = REPO / "examples" / "awx-project" / "awx"
PLAYBOOK = yaml.safe_load((REPO / "playbooks" / "upgrade_nodes.yml").read_text())[0]
SHORT_NAMES = set(PLAYBOOK["vars"]["_rolling_upgrade_playbook_variables"])
ROLE_VARIABLES = set(yaml.safe_load((REPO / "roles" / "rolling_upgrade" / "meta" / "argument_specs.yml").read_text())
                     ["argument_specs"]["main"]["options"])
SURVEY_TYPES = {"text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect"}
QUESTION_KEYS = {"question_name", "question_description", "required", "type", "variable", "min", "max", "default",
                 "choices", "new_question"}


def test_the_survey_asks_for_the_playbook_short_variables_in_awx_format():
    survey = json.loads((AWX / "survey_spec.json").read_text())
    assert survey["name"] and survey["description"]
    variables = [q["variable"] for q in survey["spec"]]
    assert variables == ["image", "provider", "max_surge"]
    assert set(variables) <= SHORT_NAMES
    for question in survey["spec"]:
        assert set(question) == QUESTION_KEYS, question
        assert question["type"] in SURVEY_TYPES and question["question_name"]
        if question["type"] == "multiplechoice":
            assert question["default"] in question["choices"]
    provider = next(q for q in survey["spec"] if q["variable"] == "provider")
    assert provider["choices"] == ["gcp", "azure", "aws"]


def test_the_credential_types_inject_only_declared_inputs_into_role_variables():
    for path in sorted(AWX.glob("credential_type_*.yml")):
        cred_type = yaml.safe_load(path.read_text())
        assert cred_type["kind"] == "cloud" and cred_type["name"], path
        fields = {f["id"]: f for f in cred_type["inputs"]["fields"]}
        assert set(cred_type["inputs"].get("required", [])) <= set(fields), path
        injectors = cred_type["injectors"]
        assert set(injectors) <= {"file", "env", "extra_vars"}, path
        # AWX's file labels: "template" (one file, tower.filename) or "template.<name>" (tower.filename.<name>).
        files = {label.split(".", 1)[1] for label in injectors.get("file", {}) if "." in label}
        assert set(injectors.get("file", {})) <= {"template"} | {"template." + name for name in files}, path
        for template in list(injectors.get("file", {}).values()) + list(injectors.get("env", {}).values()) + list(
                injectors.get("extra_vars", {}).values()):
            for name in re.findall(r"{{\s*([\w.]+)\s*}}", template):
                if name == "tower.filename":
                    assert "template" in injectors["file"], (path, name)
                elif name.startswith("tower.filename."):
                    assert name.split(".", 2)[2] in files, (path, name)
                else:
                    assert name in fields, (path, name)
        assert set(injectors.get("extra_vars", {})) <= ROLE_VARIABLES, path
        # A secret input only ever reaches the job as a file, never as a variable's value.
        for field_id, field in fields.items():
            if field.get("secret"):
                for value in list(injectors.get("env", {}).values()) + list(injectors.get("extra_vars", {}).values()):
                    assert field_id not in value, (path, field_id)
