#!/usr/bin/python
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: etcd_member_remove
short_description: Remove a control-plane node's etcd member without ever losing quorum
version_added: 1.0.0
description:
  - Removes one member from an etcd cluster (3.4 or newer) through etcd's v3 JSON gateway with mutual TLS.
  - The member is selected by the node's IP address (with O(node_name) when given), by an explicit peer URL, or
    by the member name. With O(node_ip) the node's member is the one with a peer or client URL on that IP at any
    port (so a peer port other than 2380 is found), or the one named O(node_name); when that evidence does not
    point at exactly one member the module fails with C(reason=ambiguous), naming the members. A O(peer_url) is
    compared exactly after normalising the scheme, host and port. An IP address never selects a member by
    substring.
  - Before removing, every member is probed through its advertised client URLs and these checks run, each
    reported in RV(checks) - every other member has started and is reachable and healthy; all members
    agree on one leader and term; the remaining voters are caught up with the leader; there are no active
    alarms; the member is not an unpromoted learner (unless O(allow_learner)); a majority of the remaining
    voters is healthy after the removal; and the member count matches O(expected_member_count) when given.
  - When the member is the leader, leadership is first moved to the healthy voter with the highest applied
    index, and the removal waits until the new leader is in place.
  - etcd refuses membership changes for about five seconds after a member joined (C(unhealthy cluster));
    the module retries within O(timeout).
  - A member that is already gone gives C(changed=false), so the module is safe to re-run with the same options. A
    warning and RV(msg) say that no member matched, naming the members etcd lists.
    With O(expected_member_count), "gone" must also show in the count. When no member matches but etcd still
    lists O(expected_member_count) members or more, one of them may be this node's member under another
    address, and the module fails (C(reason=refused), a failed C(member_count) check) instead of answering
    that it is gone.
author:
  - kubenodes.image_upgrade maintainers (!UNKNOWN)
requirements:
  - requests
  - kubernetes (with O(cluster_check))
extends_documentation_fragment:
  - kubenodes.image_upgrade.etcd_connection
  - kubenodes.image_upgrade.kube_auth.cluster
options:
  node_ip:
    description:
      - IP address of the node whose member to remove; selects the member with a peer or client URL on this
        IP, at any port.
      - Exactly one of O(node_ip), O(peer_url) and O(member_name) is required.
    type: str
  node_name:
    description:
      - With O(node_ip), the name of the node (kubeadm names a member after its node). A member with this
        name also counts as the node's; when the name and the IP point at different members, or the named
        member has no URL on O(node_ip), the module fails with C(reason=ambiguous) and removes nothing.
    type: str
  peer_port:
    description:
      - Peer port assumed for a O(peer_url) without a port. O(node_ip) matches any port.
    type: int
    default: 2380
  peer_url:
    description:
      - Peer URL of the member to remove, for example C(https://10.0.0.5:2380) or C(https://[fd00::5]:2380).
    type: str
  member_name:
    description:
      - Name of the member to remove (kubeadm names members after the node). It must match exactly one
        member.
    type: str
  expected_member_count:
    description:
      - Number of members the cluster has while the member to remove is still in it, that is before the
        removal, the same number on every re-run. The rolling_upgrade role passes the number of control-plane
        nodes, which includes both the donor and its heir.
      - While the member is listed, any other count refuses the removal (check C(member_count)).
      - Once no member matches, fewer members than this confirm that it is gone (C(changed=false)); as many or
        more refuse (see above).
    type: int
  allow_learner:
    description:
      - Allow removing a learner (a member of a node that is still joining and was never promoted).
    type: bool
    default: false
  on_refusal:
    description:
      - What to do when the safety checks refuse the removal.
      - V(fail) fails the task, naming every failed check.
      - V(wait) turns a refusal that clears by itself once the cluster recovers (another member down, stopped
        or not caught up, an election, a member still starting, or quorum that the removal would lose) into a
        named waiting state. The task succeeds with C(changed=false), RV(waiting=true), the members it waits
        for in RV(waiting_on), and a warning and RV(msg) that name the unhealthy member and what the removal
        would do to quorum. Nothing is removed; run the module again to retry (the rolling_upgrade role does
        in its next pass, within its overall timeout).
      - With V(wait), the refusals that need an operator (an active alarm, a learner without O(allow_learner),
        a member count other than O(expected_member_count)) still fail.
    type: str
    choices: [fail, wait]
    default: fail
  force:
    description:
      - Remove the member even when safety checks fail, and without moving leadership first.
      - The checks still run and are reported, and a warning names every failed check.
      - This can make the cluster lose quorum. Use it only to clean up a cluster you have checked by hand.
    type: bool
    default: false
  timeout:
    description:
      - Seconds the whole operation may take, including waiting for an election, moving leadership and
        retrying while etcd refuses membership changes.
    type: int
    default: 60
  cluster_check:
    description:
      - Before anything is removed, the Node of the member (the one named O(node_name), else the one named as the
        member, else the one with an address on the host of its peer or client URLs) is read with the Kubernetes
        options in O(cluster). A Node that is not cordoned, or still runs pods other than DaemonSet, mirror and
        finished pods, serves, so taking its etcd away would break it - the check C(node_drained) fails, the task
        fails naming the node (unless O(force)), and nothing is removed. A member whose node is gone passes.
      - The task fails, removing nothing, when the cluster cannot be read. V(false) skips the check, for a member
        whose cluster is gone or cannot be reached.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: Runs every check and reports the member that would be removed, and removes nothing.
  diff_mode:
    support: full
    description: Shows the member list before and after.
"""

EXAMPLES = r"""
- name: Remove the etcd member of a replaced control-plane node, from a control-plane host
  kubenodes.image_upgrade.etcd_member_remove:
    node_ip: "{{ donor_internal_ip }}"
    expected_member_count: "{{ groups['control_plane'] | length }}"
  delegate_to: "{{ groups['control_plane'] | difference([donor_host]) | first }}"
  become: true

- name: Remove it directly from the controller, with copies of the etcd client certificates
  kubenodes.image_upgrade.etcd_member_remove:
    endpoints:
      - https://10.0.0.11:2379
      - https://10.0.0.12:2379
      - https://10.0.0.13:2379
    ca_cert: files/etcd/ca.crt
    client_cert: files/etcd/healthcheck-client.crt
    client_key: files/etcd/healthcheck-client.key
    node_ip: 10.0.0.12
    timeout: 120
  register: removal

- name: Remove a member by name on an IPv6 cluster, in check mode first
  kubenodes.image_upgrade.etcd_member_remove:
    endpoints: ["https://[fd00::11]:2379"]
    member_name: cp-2
  check_mode: true
"""

RETURN = r"""
member:
  description: The member selected for removal; V(null) when no member matched (already removed).
  returned: always
  type: dict
  contains:
    id:
      description: Member ID as a decimal string (as the JSON gateway writes it).
      type: str
    id_hex:
      description: Member ID in hexadecimal, as etcdctl prints it.
      type: str
    name:
      description: Member name; empty for a member that was added but never started.
      type: str
    peer_urls:
      description: Peer URLs of the member.
      type: list
      elements: str
    client_urls:
      description: Client URLs the member advertises.
      type: list
      elements: str
    is_learner:
      description: Whether the member is a learner (not yet promoted to voter).
      type: bool
    started:
      description: Whether the member has started (it has a name and client URLs).
      type: bool
members_before:
  description: All members before the removal, each with the keys of RV(member).
  returned: always
  type: list
  elements: dict
members_after:
  description: All members after the removal (in check mode, the predicted list).
  returned: always
  type: list
  elements: dict
health:
  description: The probe of each member before the removal; empty when no member matched.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: Member ID (decimal).
      type: str
    name:
      description: Member name.
      type: str
    endpoint:
      description: The client URL that answered, or V(null).
      type: str
    reachable:
      description: Whether the member answered its status request.
      type: bool
    healthy:
      description: Whether C(/health) reported healthy and the status carried no errors.
      type: bool
    reason:
      description: Why the member is unhealthy, if it is.
      type: str
    error:
      description: Why the member could not be reached, if it could not.
      type: str
    leader_id:
      description: The leader this member follows (decimal ID; V(0) when it knows none).
      type: str
    is_leader:
      description: Whether this member is the leader.
      type: bool
    raft_term:
      description: Raft term.
      type: int
    raft_index:
      description: Raft index.
      type: int
    raft_applied_index:
      description: Raft applied index.
      type: int
health_after:
  description: The probe of each remaining member after the removal; empty when nothing was removed.
  returned: always
  type: list
  elements: dict
checks:
  description: The safety checks and their outcome; empty when no member matched.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: >-
        One of V(members_started), V(members_healthy), V(leader_agreement), V(members_caught_up), V(no_alarms),
        V(not_learner), V(quorum_after_removal), V(member_count).
      type: str
    passed:
      description: V(true) or V(false); V(null) when the check had nothing to check.
      type: bool
    enforced:
      description: V(false) when O(force) was set.
      type: bool
    message:
      description: What was found.
      type: str
leader_transfer:
  description:
    - When the member was the leader, where leadership moved before the removal; V(null) otherwise.
    - In check mode, where it would move, with C(planned=true).
  returned: always
  type: dict
  sample: {"from_id": "2844841451141254365", "from_name": "cp-1", "to_id": "9674281616116187927", "to_name": "cp-2",
           "planned": false}
waiting:
  description:
    - V(true) when O(on_refusal=wait) and the removal was refused for a reason that clears by itself; nothing
      was removed and RV(msg) says why.
  returned: always
  type: bool
waiting_on:
  description: The names (or hexadecimal IDs) of the other members that were not healthy, when RV(waiting).
  returned: always
  type: list
  elements: str
msg:
  description:
    - Why the removal waits, when RV(waiting).
    - When no member matched (C(changed=false), RV(member) V(null)), that nothing was removed, naming the selector and
      every member etcd lists, since a mistyped selector looks the same as a member already gone; a warning says it too.
  returned: when waiting or no member matched
  type: str
  sample: >-
    etcd member cp-2 (8e9e05c52164694d) is not healthy (https://10.0.0.12:2379 did not answer within 5.0s):
    removing etcd member cp-1 (2bb5f3e1a4f7c2d1) now would leave 2 of 3 remaining voters healthy
    (2 needed for quorum); waiting
forced:
  description: Whether O(force) was set.
  returned: always
  type: bool
endpoint:
  description: The endpoint that answered the member list.
  returned: always
  type: str
reason:
  description: >-
    On failure, a stable code - V(unreachable), V(tls), V(refused), V(ambiguous), V(unhealthy_cluster),
    V(timeout), V(invalid), V(not_leader), V(http) or V(bad_response).
  returned: failure
  type: str
"""

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import etcd
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import KubenodesModule


def main():
    # The options, rules and work are etcd.py's, as etcd_member_info's.
    module = KubenodesModule(argument_spec=etcd.REMOVE_ARGUMENT_SPEC, requires=("requests",), validate=etcd.validate_remove,
                             mutually_exclusive=[etcd.REMOVE_SELECTORS], required_one_of=[etcd.REMOVE_SELECTORS],
                             supports_check_mode=True)
    module.exit_json(**etcd.remove_from_params(module))


if __name__ == "__main__":
    main()
