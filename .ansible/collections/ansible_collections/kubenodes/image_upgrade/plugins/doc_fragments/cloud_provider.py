# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The option that picks the cloud. Each cloud's own options are in the gcp, azure and aws fragments."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  provider:
    description:
      - The cloud whose scaling groups hold the nodes.
      - V(gcp) for Google Compute Engine managed instance groups (zonal or regional), V(azure) for
        Azure virtual machine scale sets, V(aws) for AWS auto scaling groups with launch templates.
      - The cloud's own options go in the dictionary of the same name (O(gcp), O(azure) or O(aws)).
    type: str
    required: true
    choices: [aws, azure, gcp]
"""
