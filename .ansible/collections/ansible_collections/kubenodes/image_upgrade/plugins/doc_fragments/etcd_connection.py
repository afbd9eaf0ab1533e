# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""How the etcd modules reach etcd: endpoints and mutual TLS. The argument spec is
module_utils/etcd.py CONNECTION_ARG_SPEC."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  endpoints:
    description:
      - Client URLs of etcd members to ask for the member list, tried in order.
      - The health of each member is then probed through the client URLs the members advertise, so those
        must be reachable from where the module runs.
    type: list
    elements: str
    default: ["https://127.0.0.1:2379"]
  ca_cert:
    description:
      - CA certificate file that signed the etcd server certificates. The server certificates are always
        verified against it.
    type: path
    default: /etc/kubernetes/pki/etcd/ca.crt
  client_cert:
    description:
      - Client certificate file signed by the etcd CA.
    type: path
    default: /etc/kubernetes/pki/etcd/healthcheck-client.crt
  client_key:
    description:
      - Private key file of O(client_cert).
    type: path
    default: /etc/kubernetes/pki/etcd/healthcheck-client.key
  request_timeout:
    description:
      - Seconds to wait for each HTTP request.
    type: float
    default: 5
notes:
  - Run the module where the members' client URLs are reachable, either on the controller or delegated to a
    control-plane host (the default endpoint and certificate paths are kubeadm's on such a host). Delegated,
    the host needs Python with the C(requests) library.
  - The default client certificate is kubeadm's etcd health-check client certificate; any certificate
    signed by the etcd CA with client authentication works.
"""
