# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Warnings for plain http:// endpoints.

TLS verification is on by default for every endpoint the collection talks to (Kubernetes, etcd, GCE,
Azure, AWS). A plain http:// endpoint has no TLS at all: requests, answers and the credentials sent with
them (bearer tokens, signed cloud requests) travel unencrypted and the server is not authenticated. The
collection accepts one, because local emulators and test clusters use them, but says so, naming the option
and the URL. On a loopback address (127.0.0.0/8, ::1, localhost) nothing leaves the machine, so it stays
quiet there (the sandbox's emulators).

Pure functions on the module's parameters; modules call warn(module) once.
"""

from __future__ import annotations

import ipaddress
import os
from urllib.parse import urlsplit

# (provider, option) of the cloud endpoints; env_fallback has already put GCP_COMPUTE_ENDPOINT and
# AWS_ENDPOINT_URL into the parameters.
_CLOUD_OPTIONS = (
    ("gcp", "endpoint"),
    ("azure", "endpoint"),
    ("azure", "adfs_authority_url"),
    ("aws", "endpoint_url"),
)


def is_loopback(host):
    """True for localhost and loopback IP literals (IPv4 127.0.0.0/8, IPv6 ::1)."""
    host = (host or "").strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def plain_http_host(url):
    """The host of `url` when it is a plain http:// URL to a host that is not loopback, else None."""
    if not isinstance(url, str):
        return None
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
    except ValueError:
        return None
    if parts.scheme.lower() != "http" or not host:
        return None
    return None if is_loopback(host) else host


def endpoints(params, environ=None):
    """[(option, URL)] of every endpoint in the module's parameters: the Kubernetes `host` (or
    K8S_AUTH_HOST), the etcd `endpoints`, and the cloud endpoints of the chosen provider (gcp.endpoint,
    azure.endpoint, azure.adfs_authority_url, aws.endpoint_url; their environment fallbacks are already in
    the parameters)."""
    environ = os.environ if environ is None else environ
    found = []
    if "host" in params or "kubeconfig" in params:
        host = params.get("host") or environ.get("K8S_AUTH_HOST")
        if host:
            found.append(("host", host))
    etcd = params.get("endpoints")
    if isinstance(etcd, (list, tuple)):
        found.extend(("endpoints", url) for url in etcd)
    chosen = params.get("provider")
    for cloud, option in _CLOUD_OPTIONS:
        if chosen and cloud != chosen:
            continue
        value = (params.get(cloud) or {}).get(option) if isinstance(params.get(cloud), dict) else None
        if value:
            found.append(("%s.%s" % (cloud, option), value))
    return found


def warnings(params, environ=None):
    """One message per plain http:// endpoint outside loopback, naming the option and the URL."""
    messages = []
    for option, url in endpoints(params, environ):
        host = plain_http_host(url)
        if host:
            messages.append(
                "%s is a plain http:// URL (%s): requests to %s and the credentials sent with them are not "
                "encrypted and the server is not authenticated. Use https:// (plain http is only meant for a "
                "local emulator on a loopback address)" % (option, url.strip(), host))
    return messages


def warn(module, environ=None):
    """module.warn() each message of warnings(module.params)."""
    for message in warnings(module.params, environ):
        module.warn(message)
