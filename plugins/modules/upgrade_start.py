#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

# The action plugin plugins/action/upgrade_start.py does the work in the controller process; this file
# holds its documentation.

from __future__ import annotations

DOCUMENTATION = r"""
module: upgrade_start
short_description: The reads before an image upgrade and its run lock, in the controller process
version_added: 1.0.0
description:
  - Runs, in the controller process and in one task, what the rolling_upgrade role needs before its first
    change, each exactly as its module does it (the module's options, rules, messages and result) - without a
    module process, and an import of the cloud's SDK, for each.
  - O(stage=prepare) resolves O(image) as M(kubenodes.image_upgrade.csp_scaling_group) in check mode with no
    group does (an image family names its newest image; a missing image fails), decides the upgrade's target
    image as M(kubenodes.image_upgrade.upgrade_journal) in check mode with that image as C(target_image) does
    (an unfinished upgrade keeps its own; another image is refused unless O(new_target)), and, with
    O(preflight), reads the nodes and the clouds as M(kubenodes.image_upgrade.node_image_facts) on the target
    image. It changes nothing, in check mode or not.
  - O(stage=etcd) reads the control-plane etcd members, their health and alarms as
    M(kubenodes.image_upgrade.etcd_member_info) does with the options in O(etcd), for a controller that reaches etcd
    itself; its result is that module's, at the top level. Through a control-plane host, use the module with
    C(delegate_to) instead.
  - O(stage=lock) takes or renews the run lock once, as M(kubenodes.image_upgrade.upgrade_lock) with
    C(fail_when_held=false) does; repeat it with C(until) on RV(acquired) to wait for another run.
  - An action plugin; it runs on the controller and ignores C(delegate_to).
author:
  - kubenodes.image_upgrade maintainers (!UNKNOWN)
options:
  stage:
    description:
      - V(prepare) for the reads, V(etcd) for the etcd read, V(lock) for the run lock.
    type: str
    choices: [prepare, etcd, lock]
    required: true
  image:
    description:
      - The image reference the upgrade asks for (V(prepare)), as M(kubenodes.image_upgrade.csp_scaling_group)'s
        O(kubenodes.image_upgrade.csp_scaling_group#module:image).
    type: str
  new_target:
    description:
      - As M(kubenodes.image_upgrade.upgrade_journal)'s O(kubenodes.image_upgrade.upgrade_journal#module:new_target).
    type: bool
    default: false
  journal:
    description:
      - The journal ConfigMap (C(name), C(namespace)), as M(kubenodes.image_upgrade.upgrade_journal)'s.
    type: dict
  preflight:
    description:
      - The options of M(kubenodes.image_upgrade.node_image_facts) (all but the auth and cloud options and
        C(image), which is the target image); no read of the nodes when omitted.
    type: dict
  etcd:
    description:
      - With V(etcd), the options of M(kubenodes.image_upgrade.etcd_member_info) (C(endpoints), C(ca_cert),
        C(client_cert), C(client_key), C(request_timeout), C(expected_member_count), C(timeout)), validated as the
        module validates them.
    type: dict
  lock:
    description:
      - The Lease (C(name), C(namespace), C(lease_duration), C(holder)), as M(kubenodes.image_upgrade.upgrade_lock)'s
        options; C(holder) defaults to the running playbook's identity.
    type: dict
extends_documentation_fragment:
  - kubenodes.image_upgrade.kube_auth
  - kubenodes.image_upgrade.cloud_provider
  - kubenodes.image_upgrade.gcp
  - kubenodes.image_upgrade.azure
  - kubenodes.image_upgrade.aws
attributes:
  check_mode:
    support: full
    description:
      - V(prepare) and V(etcd) read only, in check mode as in a run; V(lock) says whether it would take the Lease.
  diff_mode:
    support: full
    description:
      - With O(stage=lock), who holds the Lease and until when, before and after a take or renewal, as
        M(kubenodes.image_upgrade.upgrade_lock) shows it; no diff when nothing changes. V(prepare) and V(etcd)
        change nothing.
requirements:
  - kubernetes (the Python client)
  - the SDK of the chosen cloud
"""

EXAMPLES = r"""
- name: Resolve the image and read the nodes and the clouds
  kubenodes.image_upgrade.upgrade_start:
    stage: prepare
    provider: gcp
    gcp:
      project: my-project
    image: projects/my-project/global/images/family/node
    preflight:
      report_pdbs: true
  register: start

- name: Take the run lock
  kubenodes.image_upgrade.upgrade_start:
    stage: lock
  register: lock
  until: lock.acquired
  retries: 60
  delay: 10
"""

RETURN = r"""
resolved:
  description: M(kubenodes.image_upgrade.csp_scaling_group)'s result (V(prepare)); C(image) is the exact image.
  returned: with stage prepare, on success
  type: dict
target:
  description: M(kubenodes.image_upgrade.upgrade_journal)'s result (V(prepare)) - C(target_image), C(resumed),
    C(moved), C(journal).
  returned: with stage prepare, on success
  type: dict
preflight:
  description: M(kubenodes.image_upgrade.node_image_facts)'s result on the target image, null without O(preflight).
  returned: with stage prepare, on success
  type: dict
failed_step:
  description: Which read failed (V(resolve the image), V(the upgrade's target image), V(read the nodes and the clouds)).
  returned: when stage prepare failed
  type: str
healthy:
  description: With V(etcd), M(kubenodes.image_upgrade.etcd_member_info)'s C(healthy); its C(members), C(alarms),
    C(leader) and C(problems) are at the top level too.
  returned: with stage etcd, on success
  type: bool
acquired:
  description: With V(lock), M(kubenodes.image_upgrade.upgrade_lock)'s result - whether this run holds the Lease.
  returned: with stage lock
  type: bool
holder:
  description: The run's identity in the Lease (with V(lock)).
  returned: with stage lock
  type: str
"""
