# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The one module base of the collection (as kubernetes.core's AnsibleK8SModule and amazon.aws'
AnsibleAWSModule): every module in plugins/modules/ is a KubenodesModule.

It holds, once for all modules:
- the shared argument specs (Kubernetes auth, cloud provider, etcd connection), merged with the module's
  own options, with no_log on every secret;
- the registration of every secret value with the module's no_log values, including the secrets inside a
  kubeconfig given as a dictionary (tokens, passwords, client-key-data...), a GCP service-account key given
  as a dictionary or a JSON string (in every spelling: raw, JSON-escaped, repr-escaped), Azure secrets, AWS
  keys and session tokens, and the content of key files (etcd and kube client keys) - before the options
  are validated, so even a validation failure cannot echo them;
- redaction of those values in every message and exception text before it leaves the module: fail_json,
  exit_json, warn, deprecate, error_as_warning. (ansible-core 2.19 masks no_log values in the result
  dict, but not in warnings, deprecations or an exception object's text; this class does.)
- the dependency check with a clear message (require());
- one way to build the Kubernetes client (kube_client());
- one way to turn a Kubernetes API, cloud or etcd error into fail_json that says what to do
  (fail_from_exception(), run()).

A module's own argument validation plugs in with validate=callable(params) -> list of problems (or a
string, or None); any problem fails the module before anything is contacted.

Imports without the kubernetes package, the cloud SDKs and requests.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import kube, plain_http
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base as provider_base

# The cloud files (their SDKs take seconds to import) and etcd.py (requests) are imported only by the
# modules that ask for them, so a Kubernetes-only module starts as fast as before.
_ETCD = "ansible_collections.kubenodes.image_upgrade.plugins.module_utils.etcd"


def _etcd():
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import etcd

    return etcd


MASK = "********"

# Keys whose values are secret wherever they appear in structured input (a kubeconfig, a GCP key...).
SECRET_KEYS = frozenset((
    "token", "password", "client-key-data", "client-certificate-data", "id-token", "refresh-token",
    "access-token", "secret", "private_key", "private_key_id", "api_key", "apikey", "client_secret",
    "secret_key", "session_token", "access_key_secret",
))
# Files read only to learn which values to mask (key files, kubeconfig files); larger ones are not read.
_MAX_SECRET_FILE = 1024 * 1024

KUBE = "kube"
CLOUD_REQUIRED = "required"
CLOUD_OPTIONAL = "optional"


# ---------------------------------------------------------------------------------------------------
# Argument specs


def merged_argument_spec(own=None, kube_auth=False, cloud=None, etcd_connection=False):
    """The full argument spec of a module: the shared option sets it asks for, then its own options.

    kube_auth:        the Kubernetes auth options (kube.AUTH_ARG_SPEC, kubernetes.core's names).
    cloud:            None, CLOUD_REQUIRED or CLOUD_OPTIONAL: `provider` plus the gcp/azure/aws dicts.
    etcd_connection:  the etcd connection options (etcd.CONNECTION_ARG_SPEC).
    """
    spec = {}
    if kube_auth:
        spec.update(copy.deepcopy(kube.AUTH_ARG_SPEC))
    if cloud is not None:
        from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import factory

        spec.update(factory.provider_argument_spec(required=cloud == CLOUD_REQUIRED))
    if etcd_connection:
        spec.update(copy.deepcopy(_etcd().CONNECTION_ARG_SPEC))
    spec.update(copy.deepcopy(own or {}))
    return spec


# ---------------------------------------------------------------------------------------------------
# Secrets and redaction (pure)


def spellings(value):
    """The ways a secret string can appear in output: as is, JSON-escaped (a private key's newlines as
    \\n inside a JSON document) and repr-escaped (inside a Python dict printed in an exception), and each
    line of a multi-line secret (PEM bodies quoted line by line)."""
    if not isinstance(value, str) or not value.strip():
        return set()
    found = {value, value.strip()}
    found.add(json.dumps(value)[1:-1])
    found.add(repr(value)[1:-1])
    found.add(value.encode("unicode_escape").decode("ascii", "replace"))
    if "\n" in value:
        for line in value.splitlines():
            line = line.strip()
            # PEM armour lines ("-----BEGIN PRIVATE KEY-----") are not secret; short lines would mangle output.
            if len(line) >= 16 and not line.startswith("-----"):
                found.add(line)
    return {s for s in found if s.strip()}


def secrets_in(data, keys=SECRET_KEYS):
    """Secret strings inside structured data: the values of SECRET_KEYS at any depth (a kubeconfig dict,
    a GCP service-account key). A JSON string is parsed first."""
    if isinstance(data, str):
        text = data.strip()
        if text.startswith("{"):
            try:
                data = json.loads(text)
            except ValueError:
                return set()
        else:
            return set()
    found = set()

    def walk(value):
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, str) and str(key).lower() in keys:
                    found.update(spellings(item))
                else:
                    walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    walk(data)
    return found


def _read_small(path):
    try:
        path = os.path.expanduser(str(path))
        if not os.path.isfile(path) or os.path.getsize(path) > _MAX_SECRET_FILE:
            return None
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except (OSError, ValueError, TypeError):
        return None


def key_file_secrets(path):
    """The content of a private-key file (every line of its PEM body), so an error that quotes it is masked."""
    text = _read_small(path) if path else None
    if not text or "PRIVATE KEY" not in text:
        return set()
    return spellings(text.strip())


def kubeconfig_file_secrets(kubeconfig):
    """Secrets inside kubeconfig files named by a path (several joined by os.pathsep): a loader error may
    quote a line of the file."""
    if not isinstance(kubeconfig, str) or not kubeconfig:
        return set()
    found = set()
    for path in kubeconfig.split(os.pathsep):
        text = _read_small(path)
        if not text:
            continue
        try:
            import yaml

            found.update(secrets_in(yaml.safe_load(text)))
        except Exception:  # pylint: disable=broad-except
            # Unparseable: its loader error is what the module reports; mask every long line of it.
            found.update(line.strip() for line in text.splitlines() if len(line.strip()) >= 24)
    return found


def public_key_values(contents, keys=SECRET_KEYS):
    """The values of a GCP service-account key (a dict or its JSON) that are no secret: type, project ID,
    e-mail, client ID, URLs. ansible-core takes every value inside a no_log dict for a secret, so a key
    given as a dict would mask its project in every result (the group IDs node_image_facts returns, which
    the next task then refuses as invalid)."""
    if isinstance(contents, str):
        try:
            contents = json.loads(contents)
        except ValueError:
            return set()
    if not isinstance(contents, dict):
        return set()
    return {value for key, value in contents.items() if isinstance(value, str) and str(key).lower() not in keys}


def _option_secrets(spec, params):
    """Values of every no_log option (at any depth of suboptions), in every spelling."""
    found = set()
    if not isinstance(params, dict):
        return found
    for name, option in (spec or {}).items():
        names = [name] + list(option.get("aliases") or [])
        values = [params.get(n) for n in names if params.get(n) is not None]
        for value in values:
            if option.get("no_log"):
                if isinstance(value, str):
                    found.update(spellings(value))
                    found.update(secrets_in(value))
                elif isinstance(value, dict):
                    # (ansible-core masks each of its values already; these are the spellings it misses)
                    found.update(secrets_in(value))
            if option.get("options") and isinstance(value, dict):
                found.update(_option_secrets(option["options"], value))
    return found


def _kube_option_secrets(params):
    """Secrets in a kubeconfig given as data or as files, and in key files (the Kubernetes client key, or etcd's
    under the same name), that the option spec cannot mark."""
    found = set()
    kubeconfig = params.get("kubeconfig")
    if isinstance(kubeconfig, (dict, list)):
        found.update(secrets_in(kubeconfig))
    elif isinstance(kubeconfig, str):
        found.update(secrets_in(kubeconfig))     # a kubeconfig pasted inline as JSON
        found.update(kubeconfig_file_secrets(kubeconfig))
    for name in ("client_key", "key_file"):
        if isinstance(params.get(name), str):
            found.update(key_file_secrets(params[name]))
    return found


def secret_values(spec, params):
    """Every value of `params` (raw or validated) that must never appear in output."""
    params = params if isinstance(params, dict) else {}
    found = _option_secrets(spec, params)
    # The Kubernetes options, at the top or in etcd_member_remove's cluster dictionary.
    for kube_params in (params, params.get("cluster") if isinstance(params.get("cluster"), dict) else {}):
        found.update(_kube_option_secrets(kube_params))
    gcp = params.get("gcp")
    if isinstance(gcp, dict):
        found.update(secrets_in(gcp.get("service_account_contents")))
        found.update(secrets_in(_read_small(gcp["service_account_file"]) if gcp.get("service_account_file") else None))
    return {s for s in found if isinstance(s, str) and s.strip()}


def environment_secrets(environ=None):
    """Secrets that arrive through environment variables only (the K8S_AUTH_* and cloud variables the
    modules read at run time)."""
    environ = os.environ if environ is None else environ
    found = set()
    for name in ("K8S_AUTH_API_KEY", "K8S_AUTH_PASSWORD", "K8S_AUTH_PROXY_HEADERS_PROXY_BASIC_AUTH",
                 "K8S_AUTH_PROXY_HEADERS_BASIC_AUTH", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_SECURITY_TOKEN", "AZURE_SECRET", "AZURE_CLIENT_SECRET", "AZURE_PASSWORD", "AZURE_ACCESS_TOKEN",
                 "GCP_ACCESS_TOKEN", "GCP_SERVICE_ACCOUNT_CONTENTS"):
        value = environ.get(name)
        if value:
            found.update(spellings(value))
            found.update(secrets_in(value))
    for name in ("K8S_AUTH_KUBECONFIG",):
        if environ.get(name):
            found.update(kubeconfig_file_secrets(environ[name]))
    for name in ("GCP_SERVICE_ACCOUNT_FILE", "GOOGLE_APPLICATION_CREDENTIALS"):
        if environ.get(name):
            found.update(secrets_in(_read_small(environ[name])))
    for name in ("K8S_AUTH_KEY_FILE", "K8S_AUTH_CLIENT_KEY"):
        if environ.get(name):
            found.update(key_file_secrets(environ[name]))
    return found


def redact(text, secrets):
    """`text` with every secret replaced by ********, longest first (so a secret containing another is
    masked whole)."""
    if not isinstance(text, str) or not secrets:
        return text
    for secret in sorted(secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def redact_data(value, secrets):
    """redact() applied to every string inside dicts, lists and tuples (keys included)."""
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {redact_data(k, secrets): redact_data(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_data(v, secrets) for v in value)
    return value


# ---------------------------------------------------------------------------------------------------
# What an error means and what to do about it (pure)

_KUBE_ADVICE = {
    400: "the API server rejected the request as malformed; check the options named in the message",
    401: "the API server refused the credentials: renew the token, or check kubeconfig, context, api_key "
         "or the client certificate (or the K8S_AUTH_* variables)",
    403: "the identity lacks a permission: apply roles/rolling_upgrade/files/rbac.yml and bind it to the "
         "identity the job uses",
    404: "the object does not exist (any more): check its name and namespace",
    409: "the object changed while it was being written: run again",
    422: "the API server refused the values: check the options named in the message",
    429: "the API server is throttling: run again later",
}


def kube_advice(status):
    if status in _KUBE_ADVICE:
        return _KUBE_ADVICE[status]
    if isinstance(status, int) and status >= 500:
        return "the API server failed: check its health and run again"
    return "check that the API server is reachable from this host (host, kubeconfig, proxy) and run again"


def cloud_advice(exc):
    status = getattr(exc, "status", None)
    if isinstance(exc, provider_base.NotFoundError):
        return "check the group, instance or image named in the message"
    if isinstance(exc, provider_base.InvalidReferenceError):
        return "fix the reference to the format the message names"
    if isinstance(exc, provider_base.QuotaError):
        return "raise the quota or lower max_surge"
    if status in (401, 403) or str(getattr(exc, "code", "") or "").upper() in ("AUTH_FAILED", "ACCESSDENIED"):
        return "check the cloud credentials and the identity's permissions"
    if getattr(exc, "retryable", False):
        return "a transient cloud error (throttling, 5xx or a dropped connection): run again"
    return "check the cloud options named in the message"


def describe_error(exc, doing):
    """(msg, extra result keys) for an exception raised while `doing` something: Kubernetes auth or API,
    cloud, etcd or a connection error. The message says what failed, the cause and what to do."""
    prefix = "%s: " % doing if doing else ""
    if isinstance(exc, kube.KubeAuthError):
        return ("%sKubernetes authentication: %s (check kubeconfig, context, host and the other Kubernetes "
                "auth options, or the K8S_AUTH_* variables)" % (prefix, exc)), dict(reason="auth_error")
    if isinstance(exc, kube.ApiException) and getattr(exc, "reason", None) == kube.TLS_REASON:
        # The message names the options to set already.
        return "%s%s" % (prefix, kube.api_error_message(exc)), dict(reason="tls_error", status=0)
    if isinstance(exc, kube.ApiException):
        status = getattr(exc, "status", None)
        return ("%s%s; %s" % (prefix, kube.api_error_message(exc), kube_advice(status)),
                dict(reason="api_error", status=status))
    if isinstance(exc, provider_base.ProviderError):
        return ("%s%s; %s" % (prefix, exc, cloud_advice(exc)),
                dict(reason="cloud_error", error_code=exc.code, retryable=exc.retryable))
    etcd = sys.modules.get(_ETCD)   # an EtcdError exists only when etcd.py was imported
    if etcd is not None and isinstance(exc, etcd.EtcdError):
        extra = dict(reason=exc.kind)
        if isinstance(exc, etcd.RemovalRefused):
            extra.update(exc.details or {})
        return "%s%s" % (prefix, exc), extra
    if isinstance(exc, (TypeError, KeyError, AttributeError, IndexError)):
        # No connection error: data this code did not expect (an object edited by hand, an API or SDK that answered
        # in another shape), or a bug. Reaching the endpoint again would change nothing.
        return ("%s%s: %s (data read from the cluster or the cloud is not what this collection expects, or this is a "
                "bug: run again with -vvv to see where, and report it with that output)" % (prefix, type(exc).__name__, exc)
                ), dict(reason="unexpected_error")
    return ("%s%s: %s (check that the endpoint is reachable from this host and its TLS settings, then run again)"
            % (prefix, type(exc).__name__, exc)), dict(reason="connection_error")


# ---------------------------------------------------------------------------------------------------
# The module class


class KubenodesModule(AnsibleModule):
    """AnsibleModule with the collection's shared options, secret handling and error handling.

    KubenodesModule(argument_spec=<own options>, kube_auth=True|False, cloud=None|"required"|"optional",
                    etcd_connection=True|False, requires=("requests",), validate=callable, **AnsibleModule kwargs)
    """

    def __init__(self, argument_spec=None, kube_auth=False, cloud=None, etcd_connection=False, requires=(),
                 validate=None, **kwargs):
        self._kube_auth = kube_auth
        self._kube_client = None
        self._secrets = set()
        spec = merged_argument_spec(argument_spec, kube_auth=kube_auth, cloud=cloud, etcd_connection=etcd_connection)
        super().__init__(argument_spec=spec, **kwargs)
        # Validated parameters: env fallbacks and defaults are filled in now.
        self.add_secrets(secret_values(self.argument_spec, self.params))
        gcp = self.params.get("gcp")
        if isinstance(gcp, dict):
            for value in public_key_values(gcp.get("service_account_contents")) - self._secrets:
                self.no_log_values.discard(value)
        needed = list(requires)
        if kube_auth and "kubernetes" not in needed:
            needed.insert(0, "kubernetes")
        self.require(*needed)
        if validate is not None:
            self.validate_with(validate)
        # A plain http:// endpoint outside loopback: say so, naming the option (plain_http.py).
        plain_http.warn(self)
        # A cloud login its SDK deprecates (Azure's user and password): say so, naming what to use instead.
        if cloud is not None:
            cloud_login_warn(self)

    # -- secrets -------------------------------------------------------------------------------------

    def _set_internal_properties(self):
        # Called by AnsibleModule.__init__ after the raw parameters are loaded and before they are
        # validated: a validation failure must not echo a secret either.
        super()._set_internal_properties()
        try:
            self.add_secrets(secret_values(self.argument_spec, self.params))
            self.add_secrets(environment_secrets())
        except Exception:  # pylint: disable=broad-except
            pass  # never let secret collection break argument parsing; the validated pass runs again

    def add_secrets(self, values):
        """Mask these values (and their spellings) in every output of the module."""
        for value in values or ():
            for spelling in spellings(value) if isinstance(value, str) else ():
                self._secrets.add(spelling)
                self.no_log_values.add(spelling)

    def redact(self, text):
        return redact(text, self._secrets | set(self.no_log_values))

    # -- output --------------------------------------------------------------------------------------

    def fail_json(self, msg, **kwargs):  # pylint: disable=arguments-differ
        msg = self.redact(str(msg))
        if "exception" in kwargs:
            exception = kwargs.pop("exception")
            if isinstance(exception, BaseException):
                exception = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__))
            if exception is not None:
                kwargs["exception"] = self.redact(str(exception))
        elif sys.exc_info()[1] is not None:
            kwargs["exception"] = self.redact(traceback.format_exc())
        kwargs = redact_data(kwargs, self._secrets | set(self.no_log_values))
        super().fail_json(msg=msg, **kwargs)

    def exit_json(self, **kwargs):
        super().exit_json(**redact_data(kwargs, self._secrets | set(self.no_log_values)))

    def warn(self, warning, *args, **kwargs):  # pylint: disable=arguments-differ
        super().warn(self.redact(str(warning)), *args, **kwargs)

    def deprecate(self, msg, version=None, date=None, collection_name=None, **kwargs):  # pylint: disable=arguments-differ
        if kwargs.get("deprecator") is None:
            kwargs.pop("deprecator", None)
            collection_name = collection_name or "kubenodes.image_upgrade"
        super().deprecate(self.redact(str(msg)), version=version, date=date, collection_name=collection_name, **kwargs)

    def error_as_warning(self, msg, exception, *args, **kwargs):  # pylint: disable=arguments-differ,unused-argument
        self.warn("%s: %s: %s" % (msg, type(exception).__name__, exception) if msg else
                  "%s: %s" % (type(exception).__name__, exception))

    # -- dependencies and validation -----------------------------------------------------------------

    def require(self, *libraries):
        """Fail with what to install when a Python package the module needs is missing."""
        for library in libraries:
            ok, error = True, None
            if library == "kubernetes":
                ok, error = kube.HAS_KUBERNETES, kube.KUBERNETES_IMPORT_ERROR
            elif library == "requests":
                ok, error = _etcd().HAS_REQUESTS, _etcd().REQUESTS_IMPORT_ERROR
            if not ok:
                self.fail_json(msg="%s (pip install %s, on the host that runs the module: the controller or the "
                                   "execution environment)" % (missing_required_lib(library), library),
                               exception=error, reason="missing_library")

    def validate_with(self, validate):
        """Run a module's own option checks: validate(params) returns problems (a list, a string or None)."""
        problems = validate(self.params)
        if isinstance(problems, str):
            problems = [problems]
        problems = [p for p in problems or () if p]
        if problems:
            self.fail_json(msg="invalid options: " + "; ".join(problems), reason="invalid")

    # -- clients and errors --------------------------------------------------------------------------

    def kube_client(self):
        """The Kubernetes API client built from the auth options (one per module run). Fails the module
        with what to fix when the options cannot make a client."""
        if self._kube_client is None:
            try:
                self._kube_client = kube.build_api_client(self.params)
            except kube.KubeAuthError as exc:
                self.fail_from_exception(exc, "connecting to Kubernetes")
        return self._kube_client

    def fail_from_exception(self, exc, doing=None, **result):
        """fail_json for an error of Kubernetes (auth or API), a cloud, etcd or the network, with the
        message describe_error() builds and the traceback for -vvv; `result` is returned with it."""
        msg, extra = describe_error(exc, doing)
        for key, value in extra.items():
            result.setdefault(key, value)
        self.fail_json(msg=msg, exception=exc, **result)

    def run(self, action, doing, *args):
        """exit_json(**action(*args)), or fail_from_exception() naming `doing` when it raises."""
        try:
            result = action(*args)
        except Exception as exc:  # pylint: disable=broad-except
            self.fail_from_exception(exc, doing)
        self.exit_json(**result)


# ---------------------------------------------------------------------------------------------------
# A module's own code, run in the controller process by an action plugin


class ModuleFailed(BaseException):
    """What fail_json would have returned (already redacted): `result` has failed=True and msg. A BaseException, as
    the SystemExit of a module's fail_json: a module's `except Exception` does not catch it."""

    def __init__(self, result):
        super().__init__(result.get("msg"))
        self.result = result


def cloud_login_warn(module):
    """module.warn() each warning about the cloud login the module's options choose (providers/factory.py)."""
    if not module.params.get("provider"):
        return
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import factory

    for message in factory.login_warnings(module.params):
        module.warn(message)


def given_options(args, spec):
    """The options of `spec` that are set in `args` (an action's validated arguments), for another module's spec:
    unset ones (None, at any depth of a dict) are left out, since a None would fail a choice there."""
    def given(value):
        if isinstance(value, dict):
            return {k: given(v) for k, v in value.items() if v is not None}
        return value
    return {k: given(args[k]) for k in spec if args.get(k) is not None}


class InProcessModule:
    """The part of KubenodesModule a module's run function uses (params, check_mode, fail_json, warn), for the
    action plugins that run several modules' code in one controller process (upgrade_step): no
    interpreter start and no SDK import per call. The options are validated against the module's own argument
    spec and rules, secrets are collected and redacted as in KubenodesModule, and fail_json raises ModuleFailed.

    InProcessModule(own_spec, params, kube_auth=False, cloud=None, validate=None, check_mode=False, diff=False)
    """

    def __init__(self, own_spec, params, kube_auth=False, cloud=None, validate=None, check_mode=False, diff=False):
        from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

        self.argument_spec = merged_argument_spec(own_spec, kube_auth=kube_auth, cloud=cloud)
        self.check_mode = bool(check_mode)
        self._diff = bool(diff)
        self.warnings = []
        self._secrets = set()
        self.add_secrets(secret_values(self.argument_spec, params))
        self.add_secrets(environment_secrets())
        checked = ArgumentSpecValidator(self.argument_spec).validate(dict(params))
        if checked.error_messages:
            self.fail_json(msg="; ".join(checked.error_messages), reason="invalid")
        self.params = checked.validated_parameters
        self.add_secrets(secret_values(self.argument_spec, self.params))
        if validate is not None:
            problems = validate(self.params)
            problems = [problems] if isinstance(problems, str) else [p for p in problems or () if p]
            if problems:
                self.fail_json(msg="invalid options: " + "; ".join(problems), reason="invalid")
        if cloud is not None:
            cloud_login_warn(self)

    def add_secrets(self, values):
        for value in values or ():
            if isinstance(value, str):
                self._secrets.update(spellings(value))

    def redact(self, text):
        return redact(text, self._secrets)

    def result(self, data):
        """The module's result as exit_json would return it: redacted, with its warnings."""
        data = redact_data(dict(data), self._secrets)
        if self.warnings:
            data["warnings"] = list(data.get("warnings") or []) + self.warnings
        return data

    def fail_json(self, msg, **kwargs):
        kwargs.pop("exception", None)
        raise ModuleFailed(self.result(dict(kwargs, failed=True, msg=str(msg))))

    def warn(self, warning, *args, **kwargs):  # pylint: disable=unused-argument
        self.warnings.append(self.redact(str(warning)))

    def fail_from_exception(self, exc, doing=None, **result):
        msg, extra = describe_error(exc, doing)
        for key, value in extra.items():
            result.setdefault(key, value)
        self.fail_json(msg=msg, **result)

    def run(self, action, doing, *args):
        """The module's result of action(*args), or ModuleFailed naming `doing` when it raises."""
        try:
            return self.result(action(*args))
        except ModuleFailed:
            raise
        except Exception as exc:  # pylint: disable=broad-except
            self.fail_from_exception(exc, doing)
