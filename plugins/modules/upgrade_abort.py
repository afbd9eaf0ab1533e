#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: upgrade_abort
short_description: Stop an upgrade and undo what it made, one step per call
version_added: 1.0.0
description:
  - Aborts the upgrade that the journal ConfigMap (M(kubenodes.image_upgrade.upgrade_journal)) records. The journal is
    the truth about what it made, so this works after a run was killed at any moment. Repeat it with C(until) on
    RV(done), as C(playbooks/abort_upgrade.yml) does; each call reads the Nodes, the clouds and the journal afresh.
  - A live run that holds the run lock (M(kubenodes.image_upgrade.upgrade_lock)) is asked to stop - an annotation on
    its Lease that it reads before a pass, every 5 seconds at most, so within seconds - and ends as stopped,
    releasing the lock; the call returns RV(waiting). A lock that is free, expired, or held by a run on this host none of whose processes is
    alive is taken, as upgrade_lock takes it.
  - Then, step by step - each group pointed back at the image the journal recorded before the upgrade pointed it at
    its target; each donor not yet deleted given back (uncordoned when this collection's drain cordoned it, its
    pairing annotations, the taint C(<annotation_prefix>/to-be-replaced) and the load-balancer exclusion label this
    collection set taken off); each instance the upgrade created that never became a Node deleted; each node the
    upgrade created whose donor still exists drained (through the Eviction API, as M(kubenodes.image_upgrade.node_drain)),
    then its instance deleted, then its Node once the cloud lists its instance no more.
  - What stays - a node the upgrade created whose donor is already deleted (or past its point of no return, its etcd
    member removed or its instance deleting or gone - that donor's deletion is finished) or whose replacement is done,
    so capacity never drops below the start, its pairing taken off as the run's promotion does; a node the upgrade
    did not create; a control-plane node it created when O(etcd) is not given (its etcd member must go first -
    named in a warning). With O(etcd), such a node is drained, its etcd member removed with the checks of
    M(kubenodes.image_upgrade.etcd_member_remove) (health, alarms, learners, quorum; a refusal for now is retried by
    the next call), then its instance and its Node go.
  - When nothing is left, the run's own end follows - the cloud settings and the cluster-autoscaler the upgrade
    changed are put back, every C(to-be-replaced) taint comes off, the attempt is recorded in the journal as
    V(aborted) (and the journal's C(abort) entry as done), the report is written to O(report_dir) and the lock
    is released.
author:
  - kubenodes.image_upgrade maintainers (!UNKNOWN)
options:
  annotation_prefix:
    description:
      - Prefix of the annotation keys (the same as the upgrade's).
    type: str
    default: image-upgrade.kubenodes.io
  journal:
    description:
      - The journal ConfigMap the upgrade wrote (M(kubenodes.image_upgrade.upgrade_journal)) - the abort reads what the
        upgrade made from it and records itself in it (C(abort)).
    type: dict
    default: {}
    suboptions:
      name:
        description: The ConfigMap's name (the role's journal is the default).
        type: str
        default: kubenodes-image-upgrade-journal
      namespace:
        description: The ConfigMap's namespace.
        type: str
        default: kube-system
  lock:
    description:
      - The upgrade's run lock (M(kubenodes.image_upgrade.upgrade_lock)) - a live holder is asked to stop through it,
        a dead one's is taken over, and the abort holds it until its end.
    type: dict
    default: {}
    suboptions:
      name:
        description: The Lease's name.
        type: str
        default: kubenodes-image-upgrade
      namespace:
        description: The Lease's namespace.
        type: str
        default: kube-system
      holder:
        description: The abort's identity as holder; by default the playbook's, as upgrade_lock chooses it.
        type: str
      lease_duration:
        description: Seconds the Lease lasts after each call.
        type: int
        default: 600
  autoscaler:
    description:
      - The cluster-autoscaler Deployment the upgrade paused, restored at the end (M(kubenodes.image_upgrade.autoscaler_pause));
        none when unset.
    type: dict
    suboptions:
      name:
        description: Name of the Deployment.
        type: str
        default: cluster-autoscaler
      namespace:
        description: Namespace of the Deployment.
        type: str
        default: kube-system
  drain:
    description:
      - How the upgrade's nodes are drained before they go, as the like-named option of
        M(kubenodes.image_upgrade.upgrade_step) (one eviction round per call).
    type: dict
    default: {}
  etcd:
    description:
      - How to reach etcd, to remove the member of a control-plane node the upgrade created before the node goes.
        Without it such a node stays and is named in a warning. Its TLS files are checked before anything changes.
    type: dict
    suboptions:
      endpoints:
        description: etcd client URLs; by default every control-plane node's InternalIP on port 2379 but the node's own.
        type: list
        elements: str
        default: []
      ca_cert:
        description: CA certificate of etcd's client URLs.
        type: path
        required: true
      client_cert:
        description: Client certificate for etcd.
        type: path
        required: true
      client_key:
        description: Key of O(etcd.client_cert).
        type: path
        required: true
      request_timeout:
        description: Seconds one etcd request may take.
        type: float
        default: 5
      timeout:
        description: Seconds one member removal may take in all (its checks and its leader transfer).
        type: float
        default: 60
  report_dir:
    description:
      - Directory of the report written at the end (as M(kubenodes.image_upgrade.upgrade_journal) O(kubenodes.image_upgrade.upgrade_journal#module:report_dir)).
    type: path
    required: true
extends_documentation_fragment:
  - kubenodes.image_upgrade.kube_auth
  - kubenodes.image_upgrade.cloud_provider
  - kubenodes.image_upgrade.gcp
  - kubenodes.image_upgrade.azure
  - kubenodes.image_upgrade.aws
attributes:
  check_mode:
    support: full
    description: Returns in RV(plan) what the abort would do now (and whether it would ask a live run to stop); changes nothing.
  diff_mode:
    support: none
    description: Returns no diff; RV(plan) and RV(did) say what changes.
"""

EXAMPLES = r"""
- name: Abort the upgrade, waiting up to 30 minutes for a live run to stop and the upgrade's nodes to go
  kubenodes.image_upgrade.upgrade_abort:
    provider: aws
    aws:
      region: eu-west-1
    report_dir: ./image-upgrade-report
  register: abort
  until: abort.done
  retries: 180
  delay: 10
"""

RETURN = r"""
done:
  description: Whether the abort is over (always V(true) in check mode).
  returned: always
  type: bool
waiting:
  description: Whether a live run holds the lock; it was asked to stop and the call changed nothing else.
  returned: always
  type: bool
plan:
  description: What the abort does now, one line per node, instance and group, each with its reason.
  returned: always
  type: list
  elements: str
did:
  description: What this call did (C(step) with C(name) or C(group)).
  returned: always
  type: list
  elements: dict
left:
  description: How many things are left to undo after this call (donors, nodes, kept heirs to unpair, instances,
    groups); in check mode, before any.
  returned: unless RV(waiting)
  type: int
report:
  description: The report written at the end (C(summary), C(files)).
  returned: when done
  type: dict
"""

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import abort
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import CLOUD_REQUIRED, KubenodesModule


def main():
    module = KubenodesModule(argument_spec=abort.ARGUMENT_SPEC, kube_auth=True, cloud=CLOUD_REQUIRED,
                             supports_check_mode=True, validate=abort.VALIDATE)
    module.exit_json(**abort.apply(module))


if __name__ == "__main__":
    main()
