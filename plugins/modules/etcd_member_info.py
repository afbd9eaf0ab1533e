#!/usr/bin/python
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: etcd_member_info
short_description: Report an etcd cluster's members, their health, alarms and leader, and whether it is healthy
version_added: 1.0.0
description:
  - Reads an etcd cluster (3.4 or newer) through etcd's v3 JSON gateway with mutual TLS and changes nothing.
  - Lists the members from the first of O(endpoints) that answers, then probes every member through the client
    URLs it advertises (status and C(/health), all members at once), and reads the active alarms.
  - RV(healthy) is V(true) when every member has started and is reachable and healthy, all members follow one
    voting leader in one term, no alarm is active, and the number of members equals O(expected_member_count)
    when that is given. Otherwise RV(problems) names each member at fault and why, in plain sentences.
  - An unhealthy cluster is a result, not a failure, so the caller decides what to do about it (for example
    C(ansible.builtin.assert) on RV(healthy)). The module fails only on invalid options and when no endpoint
    answers at all, and then says whether TLS or reachability is the cause (RV(reason)).
author:
  - kubenodes.image_upgrade maintainers (!UNKNOWN)
requirements:
  - requests
extends_documentation_fragment:
  - kubenodes.image_upgrade.etcd_connection
options:
  expected_member_count:
    description:
      - Number of members the cluster should have, usually the number of control-plane nodes. A different
        count makes the cluster unhealthy.
    type: int
  timeout:
    description:
      - Seconds to keep reading the cluster again while the only problem is one that settles by itself (the
        members do not agree on a leader yet, as during an election). Other problems are reported at once.
      - V(0) reads the cluster once.
    type: int
    default: 10
attributes:
  check_mode:
    support: full
    description: The module only reads; it runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is no difference to show.
"""

EXAMPLES = r"""
- name: Read the control-plane etcd from a control-plane host (kubeadm's endpoint and certificates)
  kubenodes.image_upgrade.etcd_member_info:
    expected_member_count: "{{ groups['control_plane'] | length }}"
  delegate_to: "{{ groups['control_plane'] | first }}"
  become: true
  register: etcd

- name: Stop when etcd is not healthy, naming every member at fault
  ansible.builtin.assert:
    that: etcd.healthy
    fail_msg: "etcd is not healthy: {{ etcd.problems | join('; ') }}"

- name: Read it from the controller, with copies of the etcd client certificates
  kubenodes.image_upgrade.etcd_member_info:
    endpoints:
      - https://10.0.0.11:2379
      - https://10.0.0.12:2379
    ca_cert: files/etcd/ca.crt
    client_cert: files/etcd/healthcheck-client.crt
    client_key: files/etcd/healthcheck-client.key
    timeout: 0
  register: etcd
"""

RETURN = r"""
endpoint:
  description: The endpoint that answered the member list.
  returned: success
  type: str
  sample: https://10.0.0.11:2379
members:
  description: Every member of the cluster.
  returned: success
  type: list
  elements: dict
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
health:
  description: The probe of each member, in the order of RV(members).
  returned: success
  type: list
  elements: dict
  contains:
    id:
      description: Member ID (decimal).
      type: str
    id_hex:
      description: Member ID in hexadecimal.
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
      description: The leader this member follows (decimal ID; V(0) when it knows none; V(null) when unreachable).
      type: str
    is_leader:
      description: Whether this member is the leader.
      type: bool
    raft_term:
      description: Raft term, when the member answered.
      type: int
    raft_index:
      description: Raft index, when the member answered.
      type: int
    raft_applied_index:
      description: Raft applied index, when the member answered.
      type: int
    is_learner:
      description: Whether the member is a learner.
      type: bool
    errors:
      description: Errors the member reports in its status.
      type: list
      elements: str
    version:
      description: The member's etcd version.
      type: str
alarms:
  description: The active alarms. An alarm list that could not be read shows as one C(UNKNOWN) alarm.
  returned: success
  type: list
  elements: dict
  contains:
    alarm:
      description: The alarm, for example V(NOSPACE) or V(CORRUPT).
      type: str
    member_id:
      description: Decimal ID of the member that raised it.
      type: str
    member_id_hex:
      description: The same ID in hexadecimal.
      type: str
    member_name:
      description: Name of that member, V(null) when it is not a member.
      type: str
  sample: [{"alarm": "NOSPACE", "member_id": "10501334649042878790", "member_id_hex": "91bc3c398fb3c146",
            "member_name": "cp-1"}]
leader:
  description: The leader all members agree on (C(id), C(id_hex), C(name)); V(null) when they do not agree.
  returned: success
  type: dict
  sample: {"id": "10501334649042878790", "id_hex": "91bc3c398fb3c146", "name": "cp-1"}
healthy:
  description: Whether the cluster is healthy (see the description); V(false) exactly when RV(problems) is not empty.
  returned: success
  type: bool
problems:
  description: What keeps the cluster from being healthy, one sentence each, naming the member and why.
  returned: success
  type: list
  elements: str
  sample: ["etcd member cp-2 (8e9e05c52164694d) is unreachable: cannot connect to https://10.0.0.13:2379:
            Connection refused"]
member_problems:
  description:
    - What is wrong with the cluster, member by member where a problem is about one - C(member) (its name and ID),
      C(node_ip) (the host of its peer URLs) and C(message); C(member) and C(node_ip) are V(null) for a problem of the
      whole cluster (an alarm, no agreed leader). Also a learner left over. Empty when every member is healthy.
    - M(kubenodes.image_upgrade.upgrade_step) takes it in O(kubenodes.image_upgrade.upgrade_step#module:etcd.health.problems).
  returned: success
  type: list
  elements: dict
  sample: [{"member": "cp-2 (8e9e05c52164694d)", "node_ip": "10.0.0.13", "message": "unreachable: connection refused"}]
reason:
  description: >-
    On failure, a stable code - V(invalid) (options), V(tls), V(unreachable) (no endpoint answered), or V(http)
    (an endpoint answered the member list with an error).
  returned: failure
  type: str
"""

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import etcd
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import KubenodesModule


def main():
    # The options, rules and work are etcd.py's: the upgrade_step action runs them too.
    module = KubenodesModule(argument_spec=etcd.INFO_ARGUMENT_SPEC, requires=("requests",),
                             validate=etcd.validate_info, supports_check_mode=True)
    try:
        result = etcd.inspect_from_params(module.params)
    except etcd.EtcdError as exc:
        module.fail_from_exception(exc)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
