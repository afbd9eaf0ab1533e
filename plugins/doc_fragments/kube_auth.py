# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Kubernetes authentication options, named as in kubernetes.core so existing inventories and AWX
credentials work unchanged."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig file, several paths joined by C(:), or the kubeconfig itself as a dictionary.
      - When neither O(kubeconfig), O(context) nor O(host) with credentials is given, the in-cluster
        configuration is tried, then C(~/.kube/config).
      - Falls back to the E(K8S_AUTH_KUBECONFIG) environment variable.
    type: raw
  context:
    description:
      - The kubeconfig context to use. Falls back to E(K8S_AUTH_CONTEXT).
    type: str
  host:
    description:
      - URL of the Kubernetes API server. Falls back to E(K8S_AUTH_HOST).
    type: str
  api_key:
    description:
      - Bearer token for the API server. Falls back to E(K8S_AUTH_API_KEY).
    type: str
  username:
    description:
      - User name for HTTP basic authentication. Falls back to E(K8S_AUTH_USERNAME).
    type: str
  password:
    description:
      - Password for HTTP basic authentication. Falls back to E(K8S_AUTH_PASSWORD).
    type: str
  client_cert:
    description:
      - Path to a client certificate for the API server. Falls back to E(K8S_AUTH_CERT_FILE).
    type: path
    aliases: [cert_file]
  client_key:
    description:
      - Path to the key of O(client_cert). Falls back to E(K8S_AUTH_KEY_FILE).
    type: path
    aliases: [key_file]
  ca_cert:
    description:
      - Path to a CA bundle that verifies the API server's certificate. Falls back to E(K8S_AUTH_SSL_CA_CERT).
    type: path
    aliases: [ssl_ca_cert]
  validate_certs:
    description:
      - Whether to verify the API server's TLS certificate. Verification is on unless this is V(false).
      - Falls back to E(K8S_AUTH_VERIFY_SSL); V(0), V(false) and V(no) mean false.
    type: bool
    aliases: [verify_ssl]
  proxy:
    description:
      - HTTP proxy URL for the API server connection. Falls back to E(K8S_AUTH_PROXY).
    type: str
  no_proxy:
    description:
      - Comma-separated hosts to reach without the proxy. Falls back to E(K8S_AUTH_NO_PROXY).
    type: str
  proxy_headers:
    description:
      - Headers for the proxy. Each falls back to E(K8S_AUTH_PROXY_HEADERS_<NAME>).
    type: dict
    suboptions:
      proxy_basic_auth:
        description:
          - C(user:password) for the proxy.
        type: str
      basic_auth:
        description:
          - C(user:password) sent as basic authentication.
        type: str
      user_agent:
        description:
          - The User-Agent header.
        type: str
  impersonate_user:
    description:
      - User to impersonate. Falls back to E(K8S_AUTH_IMPERSONATE_USER).
    type: str
  impersonate_groups:
    description:
      - Groups to impersonate, each sent as its own C(Impersonate-Group) header. Needs O(impersonate_user).
      - Falls back to E(K8S_AUTH_IMPERSONATE_GROUPS), comma-separated.
    type: list
    elements: str
  persist_config:
    description:
      - Whether the kubeconfig file is rewritten with refreshed tokens (for auth providers that refresh them,
        such as OIDC), as in kubernetes.core. Off unless this is V(true).
      - Only applies to a kubeconfig file, not to O(kubeconfig) given as a dictionary.
      - Falls back to E(K8S_AUTH_PERSIST_CONFIG); V(0), V(false) and V(no) mean false.
    type: bool
requirements:
  - kubernetes (the Python client) >= 32.0.0
notes:
  - The Kubernetes options can be set once for all modules of this collection with
    C(module_defaults) and the C(group/kubenodes.image_upgrade.kubernetes) action group.
  - A call that finds the API server restarting or overloaded (connection refused or not made, C(429), C(503))
    is repeated with a growing delay for up to 60 seconds (an API server restart); a call that may already have been carried out
    (connection reset, read timeout, C(502), C(504)) is repeated only when that is harmless (reads, updates,
    deletions, creations of named objects, evictions). E(KUBENODES_API_RETRY_SECONDS) sets another bound
    (C(0) turns retries off).
"""

    # The same options in one dictionary, for a module whose own options take their names (etcd_member_remove,
    # where ca_cert, client_cert and client_key are etcd's). Each means what the option of the same name above means.
    CLUSTER = r"""
options:
  cluster:
    description:
      - The Kubernetes options, as in M(kubenodes.image_upgrade.node_delete), for the cluster whose Node the
        module looks at. When left out, the in-cluster configuration is tried, then C(~/.kube/config), and the
        E(K8S_AUTH_*) variables apply.
    type: dict
    suboptions:
      kubeconfig:
        description: A kubeconfig file (several joined by C(:)) or a kubeconfig as a dictionary (E(K8S_AUTH_KUBECONFIG)).
        type: raw
      context:
        description: The kubeconfig context (E(K8S_AUTH_CONTEXT)).
        type: str
      host:
        description: The API server URL (E(K8S_AUTH_HOST)).
        type: str
      api_key:
        description: A bearer token (E(K8S_AUTH_API_KEY)).
        type: str
      username:
        description: A user for basic authentication (E(K8S_AUTH_USERNAME)).
        type: str
      password:
        description: The password of O(cluster.username) (E(K8S_AUTH_PASSWORD)).
        type: str
      client_cert:
        description: A client certificate file (E(K8S_AUTH_CERT_FILE)).
        type: path
        aliases: [cert_file]
      client_key:
        description: The key file of O(cluster.client_cert) (E(K8S_AUTH_KEY_FILE)).
        type: path
        aliases: [key_file]
      ca_cert:
        description: The CA that signed the API server's certificate (E(K8S_AUTH_SSL_CA_CERT)).
        type: path
        aliases: [ssl_ca_cert]
      validate_certs:
        description: Whether the API server's certificate is verified (E(K8S_AUTH_VERIFY_SSL)); on unless V(false).
        type: bool
        aliases: [verify_ssl]
      proxy:
        description: An HTTP proxy URL (E(K8S_AUTH_PROXY)).
        type: str
      no_proxy:
        description: Hosts reached without the proxy, comma-separated (E(K8S_AUTH_NO_PROXY)).
        type: str
      proxy_headers:
        description: Headers for the proxy.
        type: dict
        suboptions:
          proxy_basic_auth:
            description: C(user:password) for the proxy.
            type: str
          basic_auth:
            description: C(user:password) for basic authentication.
            type: str
          user_agent:
            description: The User-Agent header.
            type: str
      impersonate_user:
        description: The user to act as (E(K8S_AUTH_IMPERSONATE_USER)).
        type: str
      impersonate_groups:
        description: The groups to act as (E(K8S_AUTH_IMPERSONATE_GROUPS)).
        type: list
        elements: str
      persist_config:
        description: Whether a kubeconfig file is rewritten with refreshed tokens (E(K8S_AUTH_PERSIST_CONFIG)).
        type: bool
"""
