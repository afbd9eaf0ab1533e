# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The executor's etcd (module_utils/executor.py, its `etcd` and `etcd_health` ports) in production: the control
plane's etcd read for what is wrong with it, and a drained control-plane donor's member removed, in-process
through module_utils/etcd.py, as the etcd modules do, where etcd is reached from the controller; where it is
reached only through another host, the health the role read there (DelegatedEtcdHealth)."""

from __future__ import annotations

import time

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core, etcd
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.executor import StepFailure


class EtcdHealth:
    """Reads the control plane's etcd (the member list and a probe of each member, as etcd_member_info does) and
    says what is wrong with it, member by member (etcd.member_problems); an etcd that cannot be read is a problem
    too: no control-plane heir is created while etcd cannot be seen."""

    def __init__(self, ca_cert, client_cert, client_key, request_timeout=5.0):
        self.tls = (ca_cert, client_cert, client_key)
        self.request_timeout = request_timeout

    def __call__(self, endpoints):
        if not endpoints:
            return [dict(member=None, node_ip=None, message="no etcd endpoint is known (no control-plane node has an "
                                                            "InternalIP, and rolling_upgrade_etcd_endpoints is empty)")]
        try:
            client = etcd.EtcdClient(list(endpoints), *self.tls, request_timeout=self.request_timeout)
            list_endpoint, members = client.member_list()
            health, alarms = etcd.survey(client, members, list_endpoint)
        # A read only: whatever stops it (an unreachable etcd, a certificate file that cannot be read) is a named
        # problem that holds control-plane creations, never a crash of the pass.
        except Exception as exc:  # pylint: disable=broad-except
            return [dict(member=None, node_ip=None, message="etcd cannot be read: %s" % exc)]
        return etcd.member_problems(members, health, alarms)


class DelegatedEtcdHealth:
    """The executor's etcd_health port where etcd is reached only through another host (rolling_upgrade_etcd_delegate_to):
    the member problems the role read there with etcd_member_info (its member_problems) and when. A read older than
    FRESH_SECONDS is none: the planner then holds the control-plane heir and the slice says a read is due."""

    FRESH_SECONDS = 30.0

    def __init__(self, clock=time.time):
        self.clock = clock
        self.problems, self.read_at = None, None

    def give(self, problems, read_at):
        self.problems, self.read_at = list(problems), float(read_at)

    def __call__(self, endpoints):
        del endpoints   # read by the role, on the host that reaches them
        if self.problems is None or self.clock() - self.read_at > self.FRESH_SECONDS:
            return core.HEALTH_UNREAD
        return list(self.problems)


class EtcdRemover:
    """Removes a control-plane node's etcd member in-process (etcd.MemberRemoval, as etcd_member_remove)."""

    def __init__(self, ca_cert, client_cert, client_key, request_timeout=5.0, timeout=60.0, warn=None):
        self.tls = (ca_cert, client_cert, client_key)
        self.request_timeout = request_timeout
        self.timeout = timeout
        self.warn = warn or (lambda text: None)

    def __call__(self, item, endpoints, expected_member_count):
        if not item.get("node_ip"):
            raise StepFailure("node %s has no InternalIP: its etcd member cannot be found" % item["name"], step="etcd_remove")
        client = etcd.EtcdClient(list(endpoints), *self.tls, request_timeout=self.request_timeout)
        removal = etcd.MemberRemoval(client, timeout=self.timeout, expected_member_count=expected_member_count or None,
                                     warn=self.warn, on_refusal="wait")
        try:
            return removal.run(node_ip=item["node_ip"], node_name=item["name"])
        except etcd.RemovalRefused as exc:
            raise StepFailure("removing the etcd member of %s refused: %s" % (item["name"], exc), step="etcd_remove",
                              **exc.details)
        except etcd.EtcdError as exc:
            raise StepFailure("removing the etcd member of %s failed: %s" % (item["name"], exc), step="etcd_remove")
