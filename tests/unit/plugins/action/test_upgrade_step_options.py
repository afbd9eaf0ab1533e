"""upgrade_step's options: the action's spec has the defaults the module's documentation gives (validate-modules
does not compare them: the module file holds documentation only), and its drain options are node_drain's."""

import importlib

import pytest
import yaml
from ansible.module_utils._internal import _traceback

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import node_draining
from ansible_collections.kubenodes.image_upgrade.plugins.modules import upgrade_step as documentation

DOCUMENTED = yaml.safe_load(documentation.DOCUMENTATION)["options"]


@pytest.fixture(scope="module")
def spec():
    """The action's argument spec. The action is imported here, not at collection: importing controller code
    switches ansible-core's traceback capture for the whole process (see test_action_base); restored after."""
    saved = _traceback._is_traceback_enabled
    action = importlib.import_module("ansible_collections.kubenodes.image_upgrade.plugins.action.upgrade_step")
    yield action.argument_spec()
    _traceback._is_traceback_enabled = saved


def test_the_drain_options_are_node_drains(spec):
    for name, option in spec["drain"]["options"].items():
        assert option == node_draining.ARGUMENT_SPEC[name], name


def test_each_documented_default_is_the_actions(spec):
    # (the auth and cloud options are documented by doc fragments, not in DOCUMENTATION itself)
    for name, documented in DOCUMENTED.items():
        assert documented.get("default") == spec[name].get("default"), name


def test_each_documented_suboption_default_is_the_actions(spec):
    for name in ("drain", "etcd", "lock"):
        documented = DOCUMENTED[name]["suboptions"]
        assert set(documented) == set(spec[name]["options"]), name
        for option, rules in spec[name]["options"].items():
            assert documented[option].get("default") == rules.get("default"), (name, option)
