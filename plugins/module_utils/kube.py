# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Kubernetes access for every module of the collection: the authentication options (the same names,
aliases and K8S_AUTH_* environment variables as kubernetes.core), the API client built from them,
and the one way calls go out: request()/raw_request() send and return plain JSON dicts (what the pure
core takes), with a (connect, read) timeout, and raise one error type, ApiCallError (a subclass of the
client's ApiException, so typed-client errors and raw errors are caught alike; an API server that stayed
unreachable through the retries is an ApiCallError with status 0). get_node, patch_node and list_nodes are the node calls
every module and module_utils use.

raw_request() is also the collection's one retry layer for Kubernetes calls: a call that meets a
restarting or overloaded API server (connection refused or reset, 429, 503) is repeated with backoff for
up to RETRY_SECONDS, where that is safe (see _retry_decision). Nothing above it retries a call by itself.

This file imports without the kubernetes package; modules get the dependency check from module_utils/base.
"""

from __future__ import annotations

import copy
import json
import os
import random
import threading
import time
import traceback
from urllib.parse import quote

try:
    from kubernetes.client.rest import ApiException
    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None
except ImportError:  # pragma: no cover - reported through require_kubernetes()
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()

    class ApiException(Exception):  # type: ignore[no-redef]
        status = None


AUTH_ARG_SPEC = dict(
    kubeconfig=dict(type="raw"),
    context=dict(type="str"),
    host=dict(type="str"),
    api_key=dict(type="str", no_log=True),
    username=dict(type="str"),
    password=dict(type="str", no_log=True),
    client_cert=dict(type="path", aliases=["cert_file"]),
    client_key=dict(type="path", aliases=["key_file"], no_log=False),
    ca_cert=dict(type="path", aliases=["ssl_ca_cert"]),
    validate_certs=dict(type="bool", aliases=["verify_ssl"]),
    proxy=dict(type="str"),
    no_proxy=dict(type="str"),
    proxy_headers=dict(
        type="dict",
        options=dict(
            proxy_basic_auth=dict(type="str", no_log=True),
            basic_auth=dict(type="str", no_log=True),
            user_agent=dict(type="str"),
        ),
    ),
    impersonate_user=dict(type="str"),
    impersonate_groups=dict(type="list", elements="str"),
    persist_config=dict(type="bool"),
)

# Ansible option name -> the kubernetes client's name, also tried as K8S_AUTH_<CLIENT NAME>.
AUTH_ARG_MAP = dict(
    kubeconfig="kubeconfig",
    context="context",
    host="host",
    api_key="api_key",
    username="username",
    password="password",
    client_cert="cert_file",
    client_key="key_file",
    ca_cert="ssl_ca_cert",
    validate_certs="verify_ssl",
    proxy="proxy",
    no_proxy="no_proxy",
    impersonate_user="impersonate_user",
    impersonate_groups="impersonate_groups",
    persist_config="persist_config",
)

_BOOL_OPTIONS = ("validate_certs", "persist_config")
_LIST_OPTIONS = ("impersonate_groups",)


# (connect, read) seconds for one API call; nothing may hang.
REQUEST_TIMEOUT = (10, 30)

# Retries of one call (raw_request): a kube-apiserver restart keeps it away for as long as the old process
# takes to stop (a kubelet gives a static pod 30 s after SIGTERM; the sandbox's took 15 s and a SIGKILL)
# plus its start to /readyz: 21 to 31 s measured in the sandbox, under load. So a call is repeated with a
# growing delay (RETRY_FIRST_DELAY doubling up to RETRY_MAX_DELAY, with jitter) while the next attempt would
# still start within RETRY_SECONDS of the first one; a server's Retry-After is honoured within that bound.
RETRY_SECONDS = 60.0
# The environment variable that sets another bound (seconds, 0 = no retry), read at each call.
RETRY_SECONDS_ENV = "KUBENODES_API_RETRY_SECONDS"
MAX_RETRY_SECONDS = 3600
RETRY_FIRST_DELAY = 0.5
RETRY_MAX_DELAY = 5.0
# Answers that say the server did not carry the request out (overloaded, or not ready yet).
RETRY_STATUSES = (429, 503)
# Answers of a proxy or load balancer in front of the API servers: the request may have been carried out.
AMBIGUOUS_STATUSES = (502, 504)
IDEMPOTENT_METHODS = ("GET", "HEAD", "PUT", "PATCH", "DELETE")
UNREACHABLE_REASON = "cannot reach the Kubernetes API server"
TLS_REASON = "the API server's TLS certificate could not be verified"


def _decode(raw):
    try:
        return json.loads(raw) if raw else {}
    except (ValueError, TypeError):
        return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


class ApiCallError(ApiException):
    """A non-2xx answer of the API server, with what it said: the one error type of Kubernetes calls.

    `body` is the decoded Status object ({} when the answer was not JSON), `message` the server's
    message, `causes` the messages of details.causes, `retry_after` details.retryAfterSeconds."""

    def __init__(self, method, path, status, reason, body, headers=None):  # pylint: disable=super-init-not-called
        # The client's ApiException.__init__ wants an HTTP response object; set its attributes here instead.
        Exception.__init__(self, method, path, status, reason)  # pylint: disable=non-parent-init-called
        self.method = method
        self.path = path
        self.status = status
        self.reason = reason
        self.headers = headers
        decoded = _decode(body) if isinstance(body, (str, bytes)) else body
        self.body = decoded if isinstance(decoded, dict) else {}
        text = decoded if isinstance(decoded, str) else ""
        self.message = self.body.get("message") or text or reason or ""
        details = self.body.get("details") or {}
        self.causes = [c.get("message") or c.get("reason") or "" for c in details.get("causes") or []]
        self.retry_after = details.get("retryAfterSeconds")

    def __str__(self):
        return "%s %s: %s %s: %s" % (self.method, self.path, self.status, self.reason, self.message)


def unreachable_error(method, path, exc, host=None, attempts=1, seconds=0.0):
    """The ApiCallError (status 0) for a call that got no answer: the cause, where, and how long it was tried."""
    tried = "; %d attempts over %.1fs" % (attempts, seconds) if attempts > 1 else ""
    error = ApiCallError(method, path, 0, UNREACHABLE_REASON,
                         {"message": "%s (%s %s%s%s)" % (_root_cause(exc), method, host or "", path, tried)})
    error.__cause__ = exc
    return error


def _root_cause(exc):
    """'NewConnectionError: ... Connection refused' rather than urllib3's MaxRetryError wrapper."""
    reason = getattr(exc, "reason", None)
    if isinstance(reason, BaseException):
        exc = reason
    return "%s: %s" % (type(exc).__name__, exc)


class KubeAuthError(Exception):
    """The authentication options cannot make a client (bad kubeconfig, missing file, ...)."""


def auth_argument_spec(extra=None):
    """A copy of AUTH_ARG_SPEC, updated with the module's own options."""
    spec = copy.deepcopy(AUTH_ARG_SPEC)
    if extra:
        spec.update(extra)
    return spec


def require_kubernetes(module):
    if not HAS_KUBERNETES:
        from ansible.module_utils.basic import missing_required_lib
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR)


def _env_value(name):
    for key in ("K8S_AUTH_" + name.upper(), "K8S_AUTH_" + AUTH_ARG_MAP[name].upper()):
        if key in os.environ:
            value = os.environ[key]
            if name in _BOOL_OPTIONS:
                return value.lower() not in ("0", "false", "no", "")
            if name in _LIST_OPTIONS:
                return [v.strip() for v in value.split(",") if v.strip()]
            return value
    return None


def resolve_auth(params):
    """The effective auth settings: module parameters first, then K8S_AUTH_* environment variables."""
    auth = {}
    for name in AUTH_ARG_MAP:
        value = params.get(name)
        if value is None:
            value = _env_value(name)
        if value is not None:
            auth[name] = value
    headers = params.get("proxy_headers") or {}
    env_headers = {k: os.environ.get("K8S_AUTH_PROXY_HEADERS_" + k.upper()) for k in ("proxy_basic_auth", "basic_auth", "user_agent")}
    merged = {k: headers.get(k) or env_headers.get(k) for k in env_headers}
    if any(merged.values()):
        auth["proxy_headers"] = merged
    # As kubernetes.core does: https://host:6443/ would otherwise make every path start with // (404).
    if isinstance(auth.get("host"), str):
        auth["host"] = auth["host"].rstrip("/")
    return auth


def _load_kubeconfig(auth, configuration):
    from kubernetes import config

    kubeconfig = auth.get("kubeconfig")
    context = auth.get("context")
    try:
        if isinstance(kubeconfig, dict):
            config.load_kube_config_from_dict(config_dict=kubeconfig, context=context, client_configuration=configuration)
        else:
            files = None
            if kubeconfig:
                files = os.pathsep.join(os.path.expanduser(p) for p in str(kubeconfig).split(os.pathsep))
                for path in files.split(os.pathsep):
                    if not os.path.exists(path):
                        raise KubeAuthError("kubeconfig file %s does not exist" % path)
            # persist_config as in kubernetes.core: write refreshed tokens (OIDC, exec) back to the file only
            # when asked.
            config.load_kube_config(config_file=files, context=context, client_configuration=configuration,
                                    persist_config=bool(auth.get("persist_config")))
    except KubeAuthError:
        raise
    except Exception as exc:  # the client raises ConfigException, ValueError, yaml errors...
        # Never quote a kubeconfig given as a dictionary: it holds the credentials.
        where = "given as a dictionary" if isinstance(kubeconfig, dict) else (kubeconfig or "~/.kube/config")
        raise KubeAuthError("cannot load kubeconfig %s (context %s): %s: %s"
                            % (where, context or "current", type(exc).__name__, exc))


def build_api_client(params):
    """A kubernetes.client.ApiClient from the module's auth options (see resolve_auth)."""
    from kubernetes import client, config

    auth = resolve_auth(params)
    retry_seconds()   # a bad KUBENODES_API_RETRY_SECONDS is named before any call
    configuration = client.Configuration()
    explicit = bool(auth.get("host")) and (
        bool(auth.get("api_key"))
        or (auth.get("username") and auth.get("password"))
        or (auth.get("client_cert") and auth.get("client_key"))
    )
    if not explicit:
        if auth.get("kubeconfig") or auth.get("context"):
            _load_kubeconfig(auth, configuration)
        else:
            try:
                config.load_incluster_config(client_configuration=configuration)
            except config.ConfigException:
                _load_kubeconfig(auth, configuration)
    # Explicit options win over whatever the kubeconfig said.
    _apply_explicit(auth, configuration)
    headers = auth.get("proxy_headers")
    if headers:
        from urllib3.util import make_headers

        configuration.proxy_headers = make_headers(
            proxy_basic_auth=headers.get("proxy_basic_auth"),
            basic_auth=headers.get("basic_auth"),
            user_agent=headers.get("user_agent"),
        )
    for path_option in ("client_cert", "client_key", "ca_cert"):
        path = auth.get(path_option)
        if path and not os.path.exists(path):
            raise KubeAuthError("%s file %s does not exist" % (path_option, path))
    if not configuration.host:
        raise KubeAuthError("no Kubernetes API server: give host, kubeconfig or context (or K8S_AUTH_*)")
    api_client = client.ApiClient(configuration)
    if auth.get("impersonate_user"):
        api_client.set_default_header("Impersonate-User", auth["impersonate_user"])
    groups = auth.get("impersonate_groups") or []
    if len(groups) == 1:
        api_client.set_default_header("Impersonate-Group", groups[0])
    elif groups:
        _send_impersonate_groups(api_client, groups)
    return api_client


# Auth options set as they are on the client configuration, when given: (option, configuration attribute).
_EXPLICIT = (("host", "host"), ("username", "username"), ("password", "password"), ("client_cert", "cert_file"),
             ("client_key", "key_file"), ("ca_cert", "ssl_ca_cert"))


def _apply_explicit(auth, configuration):
    for option, attribute in _EXPLICIT:
        if auth.get(option):
            setattr(configuration, attribute, auth[option])
    if auth.get("api_key"):
        configuration.api_key = {"authorization": "Bearer " + auth["api_key"]}
    if "validate_certs" in auth:
        configuration.verify_ssl = bool(auth["validate_certs"])
    if auth.get("proxy"):
        configuration.proxy = auth["proxy"]
    if auth.get("no_proxy"):
        configuration.no_proxy = auth["no_proxy"]


def _send_impersonate_groups(api_client, groups):
    """Send one Impersonate-Group header line per group, as the API server reads them (it does not split a
    comma-joined value). The client keeps its headers in a plain dict, one value per name, so the lines
    are added where each request goes to urllib3, whose HTTPHeaderDict sends every value of a name."""
    try:
        from urllib3 import HTTPHeaderDict
    except ImportError:  # urllib3 < 2
        from urllib3._collections import HTTPHeaderDict

    api_client.kubenodes_impersonate_groups = list(groups)   # for renew_rest_client
    rest_client = api_client.rest_client
    send = rest_client.request

    def request(method, url, *args, **kwargs):
        headers = HTTPHeaderDict(kwargs.pop("headers", None) or {})
        headers.discard("Impersonate-Group")
        for group in groups:
            headers.add("Impersonate-Group", group)
        return send(method, url, *args, headers=headers, **kwargs)

    rest_client.request = request


def renew_rest_client(api_client):
    """Give the client a new RESTClientObject for its configuration as it is now (a larger connection pool),
    keeping what build_api_client put on the old one: the Impersonate-Group line of every group."""
    from kubernetes.client import rest

    api_client.rest_client = rest.RESTClientObject(api_client.configuration)
    groups = getattr(api_client, "kubenodes_impersonate_groups", None)
    if groups:
        _send_impersonate_groups(api_client, groups)


def is_status(exc, *statuses):
    """True when `exc` is an API error with one of the HTTP statuses (e.g. 409 conflict, 404 gone)."""
    return isinstance(exc, ApiException) and exc.status in statuses


def api_error_message(exc):
    """A one-line description of an ApiException: status, reason and the server's message."""
    status = getattr(exc, "status", None)
    body = getattr(exc, "body", None)
    message = None
    if isinstance(exc, ApiCallError):
        text = "%s %s" % (status, exc.reason) if status else str(exc.reason)
        return "%s: %s" % (text, exc.message) if exc.message and exc.message != exc.reason else text
    if body:
        try:
            data = json.loads(body)
            message = data.get("message")
        except (ValueError, TypeError, AttributeError):
            message = body if isinstance(body, str) else None
    reason = getattr(exc, "reason", None) or str(exc)
    text = "%s %s" % (status, reason) if status else str(reason)
    return "%s: %s" % (text, message) if message else text


# While a call waits for an API server that does not answer, a process that shows progress (the upgrade_step action)
# is told: first after this many seconds, then every WAIT_REPEAT_SECONDS. A module's own task says it in its result.
WAIT_NOTICE_SECONDS = 5
WAIT_REPEAT_SECONDS = 10
_WAITING_HOOK = "kubenodes_waiting"


def on_waiting(api_client, listener):
    """Have `listener(line)` told, for the calls of `api_client`, while a call waits for the API server."""
    setattr(api_client, _WAITING_HOOK, listener)


def waiting_line(host, cause, elapsed, bound):
    """What a run shows while a call waits for the API server (named, with the cause, for how long)."""
    if isinstance(cause, ApiCallError) and cause.status:
        why = "it answers %s %s" % (cause.status, cause.reason)
    else:
        why = _root_cause(cause)
    return ("waiting for the Kubernetes API server %s for %ds (%s): restarting, overloaded or unreachable; retrying for "
            "up to %ds (KUBENODES_API_RETRY_SECONDS)" % (host or "(host not known)", elapsed, why, bound))


def raw_request(api_client, method, path, query=None, body=None, content_type="application/json", timeout=60,
                clock=time.monotonic, sleep=time.sleep):
    """One API call with plain-dict JSON in and out (no model objects: fast, and what the pure core
    takes). Raises ApiCallError for a non-2xx answer, and for no answer through the retries (status 0,
    UNREACHABLE_REASON); a transport error that is not retried is raised as the client gave it.
    The response is read in full so the connection goes back to the pool. `timeout` (seconds, or (connect,
    read)) bounds connecting and reading, so a hung server cannot hang a module. A call the API server
    could not take (restarting, overloaded) is repeated for up to RETRY_SECONDS (_retry_decision). Works
    with the kubernetes client before and after its 2025 generator change."""
    bound = retry_seconds()
    started = clock()
    attempt = 0
    told = None
    listener = getattr(api_client, _WAITING_HOOK, None)
    while True:
        attempt += 1
        try:
            return _send(api_client, method, path, query, body, content_type, timeout)
        except ApiCallError as exc:
            error, cause = exc, exc
        except Exception as exc:  # pylint: disable=broad-except
            if not _is_connection_level(exc):
                raise
            error, cause = None, exc
        delay = _retry_decision(method, path, body, cause, attempt)
        elapsed = clock() - started
        if delay is not None and elapsed + delay <= bound:
            if listener is not None and elapsed >= WAIT_NOTICE_SECONDS and (told is None or elapsed - told >= WAIT_REPEAT_SECONDS):
                told = elapsed
                listener(waiting_line(getattr(getattr(api_client, "configuration", None), "host", None), cause, elapsed, bound))
            sleep(delay)
            continue
        if error is None:
            if attempt == 1:
                tls = tls_verify_error(method, path, cause, api_client)
                if tls is not None:
                    raise tls
                raise cause   # not retried (an untrusted certificate, an unknown host...): as the client gave it
            raise unreachable_error(method, path, cause, getattr(getattr(api_client, "configuration", None), "host", None),
                                    attempt, elapsed)
        if attempt > 1:
            error.message = "%s (%d attempts over %.1fs)" % (error.message, attempt, elapsed)
        raise error


def tls_verify_error(method, path, exc, api_client=None):
    """The ApiCallError (status 0, TLS_REASON) for a transport error that is a failed verification of the API
    server's certificate, saying which option to set; None for any other error."""
    inner = _inner(exc)
    text = "%s %s" % (inner, exc)
    if "CERTIFICATE_VERIFY_FAILED" not in text and "certificate verify failed" not in text:
        return None
    configuration = getattr(api_client, "configuration", None)
    host = getattr(configuration, "host", None) or "(host not known)"
    detail = str(getattr(inner, "verify_message", "") or inner)
    if "mismatch" in text or "doesn't match" in text:
        advice = ("the certificate does not name the host %s: set host (K8S_AUTH_HOST) or the kubeconfig cluster's "
                  "server to a name or address the certificate was issued for" % host)
    else:
        ca_cert = getattr(configuration, "ssl_ca_cert", None)
        advice = ("it is not signed by a CA this host trusts (ca_cert is %s): set ca_cert (K8S_AUTH_SSL_CA_CERT) to the "
                  "CA certificate file that signed the API server's certificate, or the cluster's "
                  "certificate-authority (or certificate-authority-data) in the kubeconfig; validate_certs: false "
                  "(K8S_AUTH_VERIFY_SSL=no) turns the check off, for tests only"
                  % (ca_cert if ca_cert else "not set, so only the system's CAs are trusted"))
    error = ApiCallError(method, path, 0, TLS_REASON, {"message": "%s (%s %s%s); %s" % (detail, method, host, path, advice)})
    error.__cause__ = exc
    return error


def retry_seconds():
    """The retry bound: RETRY_SECONDS, or the KUBENODES_API_RETRY_SECONDS environment variable."""
    value = os.environ.get(RETRY_SECONDS_ENV)
    if value is None or not value.strip():
        return RETRY_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= MAX_RETRY_SECONDS:
        raise KubeAuthError("the environment variable %s must be a number of seconds from 0 to %d (0: no retry), "
                            "got %r; unset it for the default of %d" % (RETRY_SECONDS_ENV, MAX_RETRY_SECONDS, value,
                                                                        RETRY_SECONDS))
    return seconds


def _is_connection_level(exc):
    """An error of the transport, with no HTTP answer: urllib3's, a socket error, or the client's
    ApiException(status=0) for a TLS failure."""
    if isinstance(exc, ApiException):
        return not getattr(exc, "status", None)
    return (type(exc).__module__ or "").startswith("urllib3") or isinstance(exc, OSError)


def _inner(exc):
    reason = getattr(exc, "reason", None)
    return reason if isinstance(reason, BaseException) else exc


def _never_sent(exc):
    """True when the request cannot have reached the server: the connection was refused or not made."""
    names = {cls.__name__ for cls in type(_inner(exc)).__mro__}
    return bool(names & {"NewConnectionError", "ConnectTimeoutError", "ConnectionRefusedError"})


def _fatal_transport_error(exc):
    """Errors that no retry fixes: an unknown host name, an untrusted or mismatched certificate, plain
    HTTP spoken to an HTTPS port."""
    inner = _inner(exc)
    if type(inner).__name__ == "NameResolutionError":
        return True
    text = "%s %s" % (inner, getattr(exc, "reason", "") or "")
    return any(marker in text for marker in ("CERTIFICATE_VERIFY_FAILED", "certificate verify failed",
                                             "hostname mismatch", "doesn't match", "WRONG_VERSION_NUMBER"))


def _repeatable(method, body):
    """Whether a request that may already have been carried out can be sent again without harm.

    GET and HEAD read; PUT and a merge PATCH set the same values again (with a resourceVersion the repeat
    answers 409 and the caller re-reads, as for any conflict); a repeated DELETE answers 404, which the
    callers take as gone. A POST is repeated only when its body names its object (metadata.name, no
    generateName): the collection's POSTs create named objects (the run Lease, the journal ConfigMap),
    whose repeat answers 409 AlreadyExists, after which the caller re-reads (upgrade_lock then finds its
    own holder), or evict one named pod, whose repeat cannot evict a second pod (that pod is already
    terminating: 201 again, or 404 once it is gone). Any other POST is not repeated once it may have
    been sent."""
    if method.upper() in IDEMPOTENT_METHODS:
        return True
    metadata = body.get("metadata") if isinstance(body, dict) else None
    return bool(isinstance(metadata, dict) and metadata.get("name") and not metadata.get("generateName"))


def _retry_decision(method, path, body, exc, attempt):
    """Seconds to wait before sending the call again, or None when it must not be repeated.

    - no connection (refused, connect timeout): the request was never sent, so any method is repeated;
    - 429 or 503: the server says it did not carry the request out (throttled, or not ready while it
      starts), so any method is repeated, after its Retry-After when it gives one; except a 429 to an
      Eviction, which is a PodDisruptionBudget's answer that the drain loop waits on with its own timeout;
    - a reset or dropped connection, a read timeout, 502 or 504: the request may have been carried out,
      so only a request that is harmless to repeat is repeated (_repeatable);
    - anything else (4xx, 500, an untrusted certificate, an unknown host) is final."""
    if isinstance(exc, ApiCallError) and exc.status:
        if exc.status in RETRY_STATUSES:
            if exc.status == 429 and path.rstrip("/").endswith("/eviction"):
                return None
            return max(_backoff(attempt), _retry_after(exc))
        if exc.status in AMBIGUOUS_STATUSES and _repeatable(method, body):
            return _backoff(attempt)
        return None
    if _fatal_transport_error(exc):
        return None
    if _never_sent(exc) or _repeatable(method, body):
        return _backoff(attempt)
    return None


def _backoff(attempt):
    """RETRY_FIRST_DELAY doubling per attempt up to RETRY_MAX_DELAY, with +-20 % jitter so that several
    workers do not come back in step."""
    delay = min(RETRY_MAX_DELAY, RETRY_FIRST_DELAY * (2 ** (attempt - 1)))
    return delay * random.uniform(0.8, 1.2)


def _retry_after(exc):
    """The server's Retry-After (header, else the Status details) in seconds; 0 when it gave none."""
    value = None
    for key, header in (exc.headers or {}).items():
        if str(key).lower() == "retry-after":
            value = header
    if value is None:
        value = exc.retry_after
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        return 0.0


# ---------------------------------------------------------------------------------------------------
# The calls counted (the run report's Kubernetes calls by kind): every attempt that goes out through _send or watch.

_CALL_COUNT = "kubenodes_call_count"


def call_kind(method, path, query=None):
    """What one Kubernetes request is, for counting (pure): list, watch, get, create, evict, patch, update, delete."""
    method = str(method).upper()
    if method == "GET":
        if str((query or {}).get("watch", "")).lower() in ("true", "1"):
            return "watch"
        return "list" if _is_collection(path) else "get"
    if method == "POST":
        return "evict" if path.rstrip("/").endswith("/eviction") else "create"
    return {"PATCH": "patch", "PUT": "update", "DELETE": "delete"}.get(method, method.lower())


def _is_collection(path):
    """Whether an API path names a collection (/api/v1/nodes, /apis/apps/v1/namespaces/x/deployments), not one object."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:] if parts[:1] == ["apis"] else None
    if rest is None:
        return False
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]   # namespaced: namespaces/<ns>/<resource>[/<name>...]
    return len(rest) == 1


class CallCount:
    """The Kubernetes requests one API client sent, by kind (call_kind); each attempt of a retried call counts, as the
    API server sees it. Shared by the threads of a pass (drains at once), hence the lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.by_kind = {}

    def add(self, kind):
        with self.lock:
            self.by_kind[kind] = self.by_kind.get(kind, 0) + 1

    def stats(self):
        """{calls, by_kind} so far."""
        with self.lock:
            return {"calls": sum(self.by_kind.values()), "by_kind": dict(sorted(self.by_kind.items()))}


def count_calls(api_client):
    """Count the requests of `api_client` from now on; returns its CallCount (the same one each time)."""
    counter = getattr(api_client, _CALL_COUNT, None)
    if not isinstance(counter, CallCount):
        counter = CallCount()
        setattr(api_client, _CALL_COUNT, counter)
    return counter


def _count(api_client, method, path, query):
    counter = getattr(api_client, _CALL_COUNT, None)
    if isinstance(counter, CallCount):
        counter.add(call_kind(method, path, query))


def _send(api_client, method, path, query, body, content_type, timeout):
    """One attempt of raw_request."""
    _count(api_client, method, path, query)
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
    query_params = list((query or {}).items()) or None
    if hasattr(api_client, "param_serialize"):
        request_args = api_client.param_serialize(method=method, resource_path=path, query_params=query_params,
                                                  header_params=headers, body=body, auth_settings=["BearerToken"])
        response = api_client.call_api(*request_args, _request_timeout=timeout)
        data = response.read()
        if not 200 <= response.status <= 299:
            raise ApiCallError(method, path, response.status, response.reason, data,
                               headers=dict(response.getheaders() or {}) if hasattr(response, "getheaders") else None)
    else:  # kubernetes < 33: call_api(path, method, ...) raises on non-2xx itself
        try:
            response = api_client.call_api(path, method, query_params=query_params, header_params=headers, body=body,
                                           auth_settings=["BearerToken"], _preload_content=False,
                                           _return_http_data_only=True, _request_timeout=timeout)
        except ApiCallError:
            raise
        except ApiException as exc:
            if not exc.status:   # the client's own TLS error: no answer, handled by the caller's retry
                raise
            raise ApiCallError(method, path, exc.status, exc.reason, exc.body, headers=getattr(exc, "headers", None))
        data = response.data
    return json.loads(data) if data else None


def watch(api_client, path, resource_version, seconds, query=None, clock=time.monotonic, read_timeout=None):
    """The events of a watch on `path` from `resource_version`, as they arrive, for at most `seconds` (at least 1):
    a generator of event dicts (type, object). It ends when the time is up or the server closes the stream (after
    the whole seconds in `seconds`: it never runs past them, and may end up to a second before); an
    ERROR event (for example 410 Gone: the version is too old) is yielded like the others. No retries: a
    watch is only a quicker way to learn of a change, and the caller reads the objects again anyway. Raises
    ApiCallError for a non-2xx answer, and the transport's errors as the client gives them: a stream quiet for
    `read_timeout` (default `seconds`) ends in the client's read timeout; one longer than `seconds` lets the server
    end a quiet stream on time instead."""
    deadline = clock() + seconds
    params = dict(query or {}, watch="true", resourceVersion=resource_version, allowWatchBookmarks="true",
                  timeoutSeconds=max(1, int(seconds)))
    _count(api_client, "GET", path, params)
    headers = {"Accept": "application/json"}
    # The read timeout ends a quiet stream on time; the server's timeoutSeconds one that has events.
    timeout = (REQUEST_TIMEOUT[0], max(0.1, seconds if read_timeout is None else read_timeout))
    if hasattr(api_client, "param_serialize"):
        request_args = api_client.param_serialize(method="GET", resource_path=path, query_params=list(params.items()),
                                                  header_params=headers, auth_settings=["BearerToken"])
        raw = api_client.call_api(*request_args, _request_timeout=timeout).response
    else:  # kubernetes < 33
        raw = api_client.call_api(path, "GET", query_params=list(params.items()), header_params=headers,
                                  auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True,
                                  _request_timeout=timeout)
    try:
        if not 200 <= raw.status <= 299:
            raise ApiCallError("GET", path, raw.status, raw.reason, raw.data)
        pending = b""
        for chunk in raw.stream(65536, decode_content=True):
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                if line.strip():
                    yield json.loads(line)
            if clock() >= deadline:
                return
    finally:
        raw.close()   # a stream stopped early must not go back to the pool half read


def request(api_client, method, path, query=None, body=None, content_type="application/json", timeout=REQUEST_TIMEOUT):
    """raw_request() with the (connect, read) timeout of REQUEST_TIMEOUT; {} for an empty answer."""
    return raw_request(api_client, method, path, query=query, body=body, content_type=content_type,
                       timeout=timeout) or {}


def path_of(*parts):
    """An API path from a prefix and names, each name URL-quoted: path_of("/api/v1/nodes", name)."""
    return "/".join(quote(p, safe="") if i else p for i, p in enumerate(parts))


def get_node(api_client, name):
    """The Node as a plain dict, or None when it does not exist."""
    try:
        return request(api_client, "GET", path_of("/api/v1/nodes", name))
    except ApiCallError as exc:
        if exc.status == 404:
            return None
        raise


def patch_node(api_client, name, patch):
    """JSON merge patch of a Node (None values delete keys; metadata.resourceVersion makes it conditional)."""
    return request(api_client, "PATCH", path_of("/api/v1/nodes", name), body=patch,
                   content_type="application/merge-patch+json")


def raw_get(api_client, path, query=None):
    return raw_request(api_client, "GET", path, query)


def merge_patch(api_client, path, body):
    """A JSON merge patch (None deletes a key); put metadata.resourceVersion in `body` for optimistic locking."""
    return raw_request(api_client, "PATCH", path, body=body, content_type="application/merge-patch+json")


def list_all(api_client, path, query=None, page_size=500):
    """Every item of a LIST, following continue tokens; one request per page."""
    return list_versioned(api_client, path, query, page_size)[0]


def list_versioned(api_client, path, query=None, page_size=500):
    """(items, resourceVersion) of a LIST: the version of its first page, the snapshot every page is read at
    and where a watch of what changed since begins."""
    items, version = [], None
    params = dict(query or {}, limit=page_size)
    while True:
        page = raw_get(api_client, path, params)
        items.extend(page.get("items") or [])
        meta = page.get("metadata") or {}
        version = version or meta.get("resourceVersion")
        token = meta.get("continue")
        if not token:
            return items, version
        params["continue"] = token


def list_nodes(api_client, label_selector=None):
    query = {"labelSelector": label_selector} if label_selector else None
    return list_all(api_client, "/api/v1/nodes", query)
