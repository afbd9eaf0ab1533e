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
        this upgrade created and of the creations it was about to make (C(instances_created), C(create_intents)),
        and of how many nodes each scaling group had before, is the only proof that a node is the collection's own.
        With it, only such a node becomes a heir, or is marked obsolete (and removed) while its group holds more
        nodes than at the start; any other node on the target image is capacity, left alone and returned in
        C(foreign); an C(obsolete) mark the journal does not back is left alone as a problem.
      - Without it (a module used on its own), nothing proves who created a node, and the older rule applies (a
        fresh node on the target image, its image never cached, may become a heir), and no node is removed as
        surplus unless it carries this collection's heir phase.
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
