#!/usr/bin/python
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: upgrade_lock
short_description: Hold, renew or release the Lease that keeps two upgrade runs from acting at once
version_added: 1.0.0
description:
  - Takes a C(coordination.k8s.io/v1) Lease for the running upgrade, renews it on every pass, and releases
    it at the end, so that two runs (two AWX jobs, two operators) never replace nodes of one cluster at
    the same time.
  - A Lease held by another run is taken over only when it has expired (its holder stopped renewing it),
    or when it was held by a run on this same host none of whose processes is alive (a run killed with
    SIGKILL resumes at once). A run counts as alive while its ansible-playbook process, any worker it
    forked (recognised by the playbook's command line and environment, which forked workers keep), or any
    module carrying its holder identity in the environment variable C(KUBENODES_IMAGE_UPGRADE_RUN) is
    alive. The role exports that variable to every task after it takes the lock. A holder recorded as PID 1 names no
    run's process; its Lease's times decide.
  - A Lease another holder has with no readable acquire or renew time counts as held until it is provably stale,
    seen unchanged (the same holder and resourceVersion) for its C(leaseDurationSeconds) (else O(lease_duration)) by
    the process that waits for it (the role's upgrade_step, during C(rolling_upgrade_lock_wait)). One call of this
    module sees it once, so it never takes such a Lease over; delete the Lease when you know no run holds it.
  - Every write carries the resourceVersion it read, so two runs racing for a free Lease cannot both win.
author:
  - kubenodes.image_upgrade maintainers (!UNKNOWN)
options:
  name:
    description:
      - Name of the Lease.
    type: str
    default: kubenodes-image-upgrade
  namespace:
    description:
      - Namespace of the Lease.
    type: str
    default: kube-system
  state:
    description:
      - V(present) acquires the Lease, or renews it when this run already holds it.
      - V(absent) releases it when this run holds it; a Lease held by another run is left alone.
    type: str
    choices: [present, absent]
    default: present
  holder:
    description:
      - Identity of this run. By default C(<hostname>/<pid of ansible-playbook>/<its start time>/<fingerprint>)
        (the fingerprint is a hash of the playbook's command line and environment), which is unique per run and
        lets a later run on the same host see whether any process of the holder's run is still alive.
      - Give a fixed value (for example the AWX job ID) to make the identity explicit.
    type: str
  lease_duration:
    description:
      - Seconds the Lease stays valid after each renewal. Each pass of the upgrade renews it, so this must be
        longer than the longest pass.
    type: int
    default: 300
  fail_when_held:
    description:
      - When another live run holds the Lease, fail (V(true)) or return RV(acquired=false) (V(false)) so that
        a playbook can wait with C(until).
    type: bool
    default: true
extends_documentation_fragment:
  - kubenodes.image_upgrade.kube_auth
attributes:
  check_mode:
    support: full
    description: Reports what it would do (acquire, renew, take over, release) and changes nothing.
  diff_mode:
    support: full
    description:
      - Shows who holds the Lease and until when (RV(held_by), RV(expires_at)) before and after a take, renewal or
        release; no diff when nothing changes.
"""

EXAMPLES = r"""
- name: Take the upgrade lock, or wait up to ten minutes for another run to finish
  kubenodes.image_upgrade.upgrade_lock:
    kubeconfig: ~/.kube/config
    fail_when_held: false
  register: lock
  until: lock.acquired
  retries: 60
  delay: 10

- name: Release it at the end
  kubenodes.image_upgrade.upgrade_lock:
    kubeconfig: ~/.kube/config
    holder: "{{ lock.holder }}"
    state: absent
"""

RETURN = r"""
acquired:
  description: Whether this run holds the Lease after the call (always V(false) after O(state=absent)).
  returned: always
  type: bool
action:
  description: What was done, one of V(acquire), V(renew), V(take-over), V(wait), V(release), V(none).
  returned: always
  type: str
holder:
  description: This run's identity (pass it back with O(holder) to renew or release from another task).
  returned: always
  type: str
msg:
  description: Who holds the Lease and until when, when another run holds it.
  returned: when another live run holds the Lease
  type: str
held_by:
  description: Who holds the Lease after the call; empty when nobody does.
  returned: always
  type: str
expires_at:
  description: When the current holding expires unless renewed (UTC, ISO 8601); empty when not held.
  returned: always
  type: str
"""

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import lease
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import KubenodesModule


def main():
    # The options, rules and work are lease.py's: the upgrade_step action runs them too.
    module = KubenodesModule(argument_spec=lease.ARGUMENT_SPEC, kube_auth=True, supports_check_mode=True,
                             validate=lease.VALIDATE)
    module.run(lambda: lease.apply_state(module, module.kube_client()),
               "Lease %s/%s" % (module.params["namespace"], module.params["name"]))


if __name__ == "__main__":
    main()
