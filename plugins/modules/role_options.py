#!/usr/bin/python
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: role_options
short_description: Check the rolling_upgrade role's variables before anything is read or changed
version_added: 1.0.0
description:
  - An action plugin that runs on the controller. The M(kubenodes.image_upgrade.rolling_upgrade) role calls it first,
    in check mode as in a real run, so both refuse the same values before a lock is taken or an autoscaler scaled.
  - Every C(rolling_upgrade_*) variable is held to its rule (for example C(rolling_upgrade_max_surge) a whole
    number from 1 to 5000 or a percentage from 1% to 100%, timeouts at least 1 second, the annotation prefix a DNS
    subdomain, names valid Kubernetes names). The task fails naming each variable that breaks its rule, the rule,
    the value given and what to do.
  - Warns about C(rolling_upgrade_*) variables the role does not have, and, with O(short_names), about extra
    variables (C(-e)) the playbook does not have, each with the closest known name when there is one.
  - The rules are the ones the modules apply to their own options (plugins/module_utils/validate.py).
author:
  - kubenodes.image_upgrade maintainers (!UNKNOWN)
options:
  options_file:
    description:
      - The role's C(meta/argument_specs.yml), whose options are the known role variables.
    type: path
    required: true
  short_names:
    description:
      - The short variable names a playbook maps to role variables (such as C(image)); extra variables that are
        none of them, no role variable and not C(ansible_*), C(awx_*), C(tower_*) or C(_*) get a warning.
      - Empty checks no extra variable.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    description: Reads variables only; the same in check mode.
  diff_mode:
    support: none
    description: No diff.
  action:
    support: full
    description: Runs on the controller.
"""

EXAMPLES = r"""
- name: Check the role's variables
  kubenodes.image_upgrade.role_options:
    options_file: "{{ role_path }}/meta/argument_specs.yml"
    short_names: [image, provider, max_surge]
"""

RETURN = r"""
problems:
  description: One message per variable that breaks its rule (the task fails when there is any).
  returned: always
  type: list
  elements: str
  sample: ["rolling_upgrade_max_surge must be a whole number from 1 to 5000 or a percentage of the group from 1% to 100% (such as 25%), got 0"]
unknown:
  description: The warnings about unknown variables.
  returned: always
  type: list
  elements: str
  sample: ["unknown variable rolling_upgrade_max_surj is ignored; did you mean rolling_upgrade_max_surge?"]
"""
