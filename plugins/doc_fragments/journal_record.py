# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The journal whose record of created instances the planning modules read (and node_pair adds the donors found
gone to). The argument spec is
module_utils/journal.py REFERENCE_SPEC."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  journal:
    description:
      - The upgrade's journal ConfigMap (M(kubenodes.image_upgrade.upgrade_journal)), whose record of the instances
        this upgrade created (and of how many nodes each scaling group had before) is the only proof that a node
        is the collection's own. A recorded node that no donor needs is then paired with a donor that needs a
        heir, or marked obsolete (and removed) while its group holds more nodes than at the start.
      - Without it, no node is removed as surplus unless it carries this collection's heir phase.
      - M(kubenodes.image_upgrade.node_pair) also records there, before it promotes their heirs, the donors found
        gone while their heir still names them (deleted by a run killed before it journaled them), so the
        report names every replaced node.
    type: dict
    suboptions:
      name:
        description: Name of the journal ConfigMap.
        type: str
        default: kubenodes-image-upgrade-journal
      namespace:
        description: Its namespace.
        type: str
        default: kube-system
"""
