# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Google Compute Engine managed instance groups (zonal and regional) behind the CloudProvider interface.

Formats (what the rest of the collection sees):
- providerID: ``gce://<project>/<zone>/<instance>``, exactly what the GCE kubelet writes; the Node name is
  the instance name.
- group ID: ``projects/<project>/zones/<zone>/instanceGroupManagers/<name>`` or
  ``projects/<project>/regions/<region>/instanceGroupManagers/<name>``.
- image: ``projects/<project>/global/images/<name>``. Also accepted on input: the full
  ``https://www.googleapis.com/compute/v1/...`` URL and ``projects/<project>/global/images/family/<family>``,
  which validate_image resolves to the family's current image, so every new node gets the same image
  even if the family moves on during the upgrade.

Calls go through google-cloud-compute over REST. Long-running operations use the ``*_unary`` methods
plus the zone, region or global operations client built with the same endpoint (``.result()`` would poll
compute.googleapis.com whatever endpoint is configured), each with a deadline. Throttling, 5xx answers
and dropped connections are retried with jittered backoff; other 4xx answers are not.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib.util
import json
import os
import re
import secrets
import string
import threading
import time
import uuid

from ansible.module_utils.basic import env_fallback

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import cloud_settings, quota
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import (
    CREATING, DELETING, FAILED, REFUSED_FOR, ROLE_CONTROL_PLANE, ROLE_WORKER, RUNNING, STATE_PROBLEM, STOPPED, UNKNOWN,
    Group, Instance,
)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers.base import (
    PENDING, CloudProvider, Ended, InvalidReferenceError, NotFoundError, ProviderError, QuotaError,
    reference_shape_problem, with_retries, zone_imbalance,
)

# google-cloud-compute takes seconds to import; it is loaded only when a GCP provider is built, so modules
# working on other clouds do not pay for it.
compute_v1 = gexc = AnonymousCredentials = google = None
GCE_IMPORT_ERROR = None


def _load_sdk():
    """Import google-cloud-compute and google-auth on first use; ProviderError naming the package if absent."""
    global compute_v1, gexc, AnonymousCredentials, google, GCE_IMPORT_ERROR  # pylint: disable=global-statement
    if compute_v1 is not None:
        return
    if not HAS_GCE_SDK:
        raise ProviderError("the GCP provider needs the Python package %s (import failed: %s)"
                            % (SDK_PACKAGE, GCE_IMPORT_ERROR or "not installed"))
    try:
        import google.auth
        import google.auth.compute_engine
        import google.auth.exceptions
        import google.oauth2.credentials
        import google.oauth2.service_account
        from google.api_core import exceptions as api_exceptions
        from google.auth.credentials import AnonymousCredentials as anonymous
        from google.cloud import compute_v1 as sdk
    except ImportError as exc:
        GCE_IMPORT_ERROR = exc
        raise ProviderError("the GCP provider needs the Python package %s (import failed: %s)" % (SDK_PACKAGE, exc))
    gexc, AnonymousCredentials, compute_v1 = api_exceptions, anonymous, sdk


def _sdk_installed():
    try:
        return importlib.util.find_spec("google.cloud.compute_v1") is not None
    except (ImportError, ValueError):
        return False


HAS_GCE_SDK = _sdk_installed()

try:
    import requests
    HAS_REQUESTS = True
except ImportError:
    HAS_REQUESTS = False

SDK_PACKAGE = "google-cloud-compute"
API_PREFIX = "https://www.googleapis.com/compute/v1/"
WAIT_CALL_TIMEOUT = 130.0
# The most reads of one listing in flight at once (templates, a quota's managers and machine types): at a real cloud's
# 100-300 ms a call, reading each group's in turn made the listing grow by that per group. Each read still takes its
# token of the call rate.
READS_AT_ONCE = 4
# instanceGroupManagers.deleteInstances: "You can specify a maximum of 1000 instances with this method per request."
DELETES_PER_REQUEST = 1000
# Operation names to one zoneOperations/regionOperations list: its filter names them, so this keeps the URL short
# (about 3 KB with GCE's names of up to 60 characters).
OPERATIONS_PER_LIST = 50
DEFAULT_SCOPES = ["https://www.googleapis.com/auth/compute"]
AUTH_KINDS = ["accesstoken", "anonymous", "application", "machineaccount", "serviceaccount"]

ARG_SPEC = dict(
    auth_kind=dict(type="str", choices=AUTH_KINDS, fallback=(env_fallback, ["GCP_AUTH_KIND"])),
    project=dict(type="str", fallback=(env_fallback, ["GCP_PROJECT"])),
    service_account_file=dict(type="path", fallback=(env_fallback, ["GCP_SERVICE_ACCOUNT_FILE"])),
    service_account_contents=dict(type="jsonarg", no_log=True, fallback=(env_fallback, ["GCP_SERVICE_ACCOUNT_CONTENTS"])),
    service_account_email=dict(type="str", fallback=(env_fallback, ["GCP_SERVICE_ACCOUNT_EMAIL"])),
    access_token=dict(type="str", no_log=True, fallback=(env_fallback, ["GCP_ACCESS_TOKEN"])),
    scopes=dict(type="list", elements="str", fallback=(env_fallback, ["GCP_SCOPES"])),
    endpoint=dict(type="str", fallback=(env_fallback, ["GCP_COMPUTE_ENDPOINT"])),
    ca_bundle=dict(type="path", fallback=(env_fallback, ["GCP_CA_BUNDLE"])),
    operation_timeout=dict(type="int", default=600),
    env_type=dict(type="str", fallback=(env_fallback, ["GCP_ENV_TYPE"])),
)

USER_AGENT = "kubenodes.image_upgrade"


def user_agent(options):
    """The User-Agent of the API calls. env_type (GCP_ENV_TYPE; AWX's GCE credential sets tower) is
    added to it, as google.cloud does, so the project's audit logs tell where a call came from."""
    env_type = (options.get("env_type") or "").strip()
    return "%s env/%s" % (USER_AGENT, env_type) if env_type else USER_AGENT


# ---- formats (pure) ------------------------------------------------------------------------------------
_URL_PREFIX_RE = re.compile(r"^https?://[^/]+/compute/(?:v1|beta|alpha)/")
_SEG = r"[^/\s]+"
_PROVIDER_ID_RE = re.compile(r"^gce://(%s)/(%s)/(%s)$" % (_SEG, _SEG, _SEG))
_GROUP_RE = re.compile(r"^projects/(%s)/(zones|regions)/(%s)/instanceGroupManagers/(%s)$" % (_SEG, _SEG, _SEG))
_IMAGE_RE = re.compile(r"^projects/(%s)/global/images/(?:(family)/)?(%s)$" % (_SEG, _SEG))
_TEMPLATE_RE = re.compile(r"^projects/(%s)/(global|regions/%s)/instanceTemplates/(%s)$" % (_SEG, _SEG, _SEG))
_INSTANCE_URL_RE = re.compile(r"^projects/(%s)/zones/(%s)/instances/(%s)$" % (_SEG, _SEG, _SEG))
_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_AUTOSCALER_URL_RE = re.compile(r"^projects/(%s)/(zones|regions)/(%s)/autoscalers/(%s)$" % (_SEG, _SEG, _SEG))
# A zone is its region and a suffix: a letter (us-central1-a), or more for special zones (the AI zones: us-central1-ai1a).
_ZONE_RE = re.compile(r"^[a-z]+-[a-z]+[0-9]+-[a-z][a-z0-9]*$")
_REGION_RE = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
_PROJECT_RE = re.compile(r"^([a-z][-a-z0-9.:]{4,61}[a-z0-9]|[0-9]+)$")

PROVIDER_ID_FORMAT = "gce://<project>/<zone>/<instance-name>"
GROUP_ID_FORMAT = ("projects/<project>/zones/<zone>/instanceGroupManagers/<name> or "
                   "projects/<project>/regions/<region>/instanceGroupManagers/<name>")
IMAGE_FORMAT = "projects/<project>/global/images/<name> or projects/<project>/global/images/family/<family>"
_IMAGE_SHAPES = (["projects", "<project>", "global", "images", "<name>"],
                 ["projects", "<project>", "global", "images", "family", "<family>"])
_GROUP_SHAPES = (["projects", "<project>", "zones", "<zone>", "instanceGroupManagers", "<name>"],
                 ["projects", "<project>", "regions", "<region>", "instanceGroupManagers", "<name>"])

# Operation error codes that mean "no room for more instances now": the planner lowers the surge.
QUOTA_CODES = frozenset(["QUOTA_EXCEEDED", "ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
                         "REGION_RESOURCE_POOL_EXHAUSTED", "RESOURCE_POOL_EXHAUSTED", "INSUFFICIENT_CAPACITY",
                         "IP_SPACE_EXHAUSTED", "INSTANCE_COUNT_LIMIT_EXCEEDED"])
QUOTA_REASONS = frozenset(["quotaExceeded", "QUOTA_EXCEEDED", "resourcePoolExhausted"])
RATE_LIMIT_REASONS = frozenset(["rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED"])
RETRYABLE_STATUS = frozenset([408, 429, 500, 502, 503, 504])
ROLE_LABELS = ("kubenodes-role", "node-role", "role", "constellation-role")


def strip_url(ref):
    """`projects/...` from a full compute API URL (any host, v1/beta/alpha) or a relative reference."""
    return _URL_PREFIX_RE.sub("", (ref or "").strip())


def _zone_and_name(managed_instance):
    """(zone, name) of a managed instance whose instance URL is known, else None."""
    where = _INSTANCE_URL_RE.match(strip_url(managed_instance.instance))
    return (where.group(2), managed_instance.name or where.group(3)) if where else None


def project_problem(project):
    """Why `project` is not a GCP project ID (or number), or None. GCP's rule: 6 to 30 characters, lower-case
    letters, digits and hyphens, starting with a letter, not ending with a hyphen; a domain-scoped ID
    (example.com:my-project) is longer, and the project number is all digits."""
    if _PROJECT_RE.match(project):
        return None
    rule = ("a GCP project ID is 6 to 30 lower-case letters, digits and hyphens, starting with a letter and not "
            "ending with a hyphen (or the all-digit project number)")
    return "the project ID %r %s; %s" % (project, _what_breaks(project, "-a-z0-9.:", 6), rule)


def name_problem(what, name):
    """Why `name` is not a GCE resource name (RFC 1035: 1 to 63 lower-case letters, digits and hyphens,
    starting with a letter, not ending with a hyphen), or None."""
    if _NAME_RE.match(name):
        return None
    return ("the %s %r %s; a GCE name is 1 to 63 lower-case letters, digits and hyphens, starting with a letter "
            "and not ending with a hyphen" % (what, name, _what_breaks(name, "-a-z0-9", 1)))


def _what_breaks(text, allowed, shortest):
    """The first rule of a GCE identifier that `text` breaks, in words: its first character, its length (from
    `shortest` to 63), a character outside `allowed` (a regex character class body), or its last character."""
    if not text[:1].islower():
        return "starts with %r" % text[:1]
    if len(text) < shortest:
        return "is %d character%s long" % (len(text), "" if len(text) == 1 else "s")
    if len(text) > 63:
        return "is %d characters long" % len(text)
    if not re.match(r"^[%s]*$" % allowed, text):
        return "holds %r" % "".join(sorted(set(re.sub(r"[%s]" % allowed, "", text))))
    return "ends with %r" % text[-1:]


def _scope_problem(kind, scope):
    if kind == "zones" and not _ZONE_RE.match(scope):
        return "the zone %r is not a GCE zone (such as us-central1-a)" % scope
    if kind == "regions" and not _REGION_RE.match(scope):
        return "the region %r is not a GCE region (such as us-central1)" % scope
    return None


def parse_provider_id(provider_id):
    """(project, zone, instance) of a GCE providerID, or InvalidReferenceError naming the part that is wrong."""
    match = _PROVIDER_ID_RE.match((provider_id or "").strip())
    if not match:
        raise InvalidReferenceError("invalid GCE providerID %r: expected %s" % (provider_id, PROVIDER_ID_FORMAT))
    project, zone, name = match.groups()
    problem = project_problem(project) or _scope_problem("zones", zone) or name_problem("instance name", name)
    if problem:
        raise InvalidReferenceError("invalid GCE providerID %r: %s; expected %s"
                                    % (provider_id, problem, PROVIDER_ID_FORMAT))
    return match.groups()


def provider_id_of(project, zone, name):
    return "gce://%s/%s/%s" % (project, zone, name)


class GroupRef:
    """A parsed managed instance group ID: project, scope kind ("zones" or "regions"), scope, name."""

    __slots__ = ("project", "kind", "scope", "name")

    def __init__(self, project, kind, scope, name):
        self.project, self.kind, self.scope, self.name = project, kind, scope, name

    @property
    def regional(self):
        return self.kind == "regions"

    @property
    def id(self):
        return "projects/%s/%s/%s/instanceGroupManagers/%s" % (self.project, self.kind, self.scope, self.name)

    def __eq__(self, other):
        return isinstance(other, GroupRef) and self.id == other.id

    def __hash__(self):
        return hash(self.id)

    def __repr__(self):
        return "GroupRef(%r)" % self.id


def parse_group_id(group_id):
    """GroupRef of a MIG ID (relative or full URL), or InvalidReferenceError naming the formats."""
    relative = strip_url(group_id)
    match = _GROUP_RE.match(relative)
    if not match:
        raise InvalidReferenceError("invalid GCE instance group manager ID %r: %s; expected %s" % (
            group_id, reference_shape_problem(relative, _GROUP_SHAPES), GROUP_ID_FORMAT))
    project, kind, scope, name = match.groups()
    problem = project_problem(project) or _scope_problem(kind, scope) or name_problem("instance group name", name)
    if problem:
        raise InvalidReferenceError("invalid GCE instance group manager ID %r: %s; expected %s" % (
            group_id, problem, GROUP_ID_FORMAT))
    return GroupRef(project, kind, scope, name)


def parse_image(image):
    """(project, name, is_family) of an image reference, or InvalidReferenceError naming the part that is wrong
    and why."""
    relative = strip_url(image if isinstance(image, str) else "")
    match = _IMAGE_RE.match(relative)
    if not match:
        raise InvalidReferenceError("invalid GCE image reference %r: %s; expected %s (or the full "
                                    "https://www.googleapis.com/compute/v1/ URL of one)" % (
                                        image, reference_shape_problem(relative, _IMAGE_SHAPES) if relative else "it is empty",
                                        IMAGE_FORMAT))
    project, family, name = match.groups()
    problem = project_problem(project) or name_problem("image family" if family else "image name", name)
    if problem:
        raise InvalidReferenceError("invalid GCE image reference %r: %s; expected %s" % (image, problem, IMAGE_FORMAT))
    return project, name, bool(family)


# The hosts of the Compute Engine API: an image URL on another host (but gcp.endpoint's) names no image of this cloud.
COMPUTE_HOSTS = ("www.googleapis.com", "compute.googleapis.com")


def image_host_problem(image, endpoint=None):
    """Why the host of a full image URL is not the Compute Engine API's (nor `endpoint`'s, gcp.endpoint), or None.
    strip_url drops any host; an image given on another host would be read from GCE without a word."""
    match = re.match(r"^https?://([^/]+)/compute/", (image or "").strip()) if isinstance(image, str) else None
    if not match:
        return None
    host = match.group(1).lower()
    allowed = set(COMPUTE_HOSTS)
    endpoint_host = re.match(r"^https?://([^/]+)", (endpoint or "").strip())
    if endpoint_host:
        allowed.add(endpoint_host.group(1).lower())
    if host in allowed:
        return None
    return ("the image URL %r is on host %s, which is not the Compute Engine API (%s%s): the image would be read from "
            "GCE as %s instead; give projects/<project>/global/images/<name> (or .../images/family/<family>), or set "
            "gcp.endpoint to that host's API" % (image, host, " or ".join(COMPUTE_HOSTS),
                                                 " nor gcp.endpoint %s" % endpoint if endpoint else "",
                                                 strip_url(image)))


def canonical_image(project, name):
    return "projects/%s/global/images/%s" % (project, name)


def normalize_image(ref):
    """The comparable form of an image URL as the API returns it ("" when empty)."""
    return strip_url(ref)


def parse_template(ref):
    """(project, name) of a global instance template URL; regional templates are refused with a reason."""
    match = _TEMPLATE_RE.match(strip_url(ref))
    if not match:
        raise InvalidReferenceError("unexpected instance template reference %r: expected "
                                    "projects/<project>/global/instanceTemplates/<name>" % (ref,))
    project, where, name = match.groups()
    if where != "global":
        raise ProviderError("instance template %r is regional; only global instance templates are supported" % ref)
    return project, name


def next_template_name(name):
    """The name of the clone that carries a new image: `x` -> `x-1`, `x-` -> `x-1`, `x-N` -> `x-(N+1)`,
    kept within GCE's 63 characters."""
    match = re.match(r"^(.*?)-?(\d+)?$", name)
    stem, number = match.group(1), match.group(2)
    if number is not None and not name[:-len(number)].endswith("-"):
        stem, number = name, None   # a name like "pool7" has no numeric suffix of its own
    new_number = int(number) + 1 if number is not None else 1
    suffix = "-%d" % new_number
    stem = stem[:63 - len(suffix)].rstrip("-") or "t"
    return stem + suffix


def random_instance_name(base, rand=None):
    """`<base>-<4 chars of a-z0-9>`, like a MIG names its instances; base is cut so the name fits 63."""
    alphabet = string.ascii_lowercase + string.digits
    choice = rand.choice if rand else secrets.choice
    return "%s-%s" % (base[:58].rstrip("-"), "".join(choice(alphabet) for dummy in range(4)))


def instance_state(current_action, instance_status, has_errors=False):
    """One of the base states from a managed instance's currentAction and instanceStatus (plain strings)."""
    # The SDK's enums name an unset field UNDEFINED_...: the same as no value.
    action = (current_action or "").upper().replace("UNDEFINED_CURRENT_ACTION", "")
    status = (instance_status or "").upper().replace("UNDEFINED_INSTANCE_STATUS", "")
    if action in ("DELETING", "ABANDONING"):
        return DELETING
    if action == "CREATING_WITHOUT_RETRIES" and has_errors:
        return FAILED   # the MIG does not retry these
    if action in ("CREATING", "CREATING_WITHOUT_RETRIES", "RECREATING"):
        return CREATING
    # Going down or down (PENDING_STOP and DEPROVISIONING: being stopped or its resources freed): it exists, but will
    # not serve as a node until it runs again.
    if action in ("STOPPING", "SUSPENDING") or status in ("STOPPING", "STOPPED", "SUSPENDING", "SUSPENDED",
                                                          "TERMINATED", "PENDING_STOP", "DEPROVISIONING"):
        return STOPPED
    if status == "REPAIRING":
        # In repair after a host error, back soon as it was: unknown, so no step relies on it (a heir in repair is not
        # promoted, nor given up) until it runs again.
        return UNKNOWN
    if status == "RUNNING":
        return RUNNING
    # Not running yet: being provisioned, or PENDING (waiting for its resources).
    if status in ("PROVISIONING", "STAGING", "PENDING", "") and action in (
            "", "NONE", "VERIFYING", "STARTING", "RESUMING", "REFRESHING", "RESTARTING"):
        return CREATING
    return UNKNOWN


def state_problem(current_action, instance_status):
    """What no step may act on in a managed instance's currentAction and instanceStatus, in words, else None: the
    pairs instance_state() cannot decide (unknown), such as a VM in repair."""
    if instance_state(current_action, instance_status) != UNKNOWN:
        return None
    action = (current_action or "").upper().replace("UNDEFINED_CURRENT_ACTION", "") or "(none)"
    status = (instance_status or "").upper().replace("UNDEFINED_INSTANCE_STATUS", "") or "(none)"
    if status == "REPAIRING":
        return ("GCE reports instanceStatus REPAIRING (currentAction %s): the VM is being repaired after a host error; "
                "nothing is done to it until it runs again" % action)
    return ("GCE reports currentAction %s with instanceStatus %s, which this collection cannot read as creating, "
            "running, stopped or deleting; nothing is done to it until GCE reports another state" % (action, status))


def late_refusal(errors, state):
    """The quota or capacity errors of a managed instance's last attempt while it is still being created (the MIG
    accepted createInstances and retries the instance for ever), in the API's words; None otherwise."""
    if state not in (CREATING, FAILED):
        return None
    refused = ["%s: %s" % (code, message) for code, message in errors if code in QUOTA_CODES]
    return "; ".join(refused) or None


def role_of(labels, name):
    """Group role from the instance template's labels (kubenodes-role, node-role, role, constellation-role),
    else from the group name; None when neither says."""
    for key in ROLE_LABELS:
        value = (labels or {}).get(key, "").lower().replace("_", "-")
        if value in ("control-plane", "controlplane", "master"):
            return ROLE_CONTROL_PLANE
        if value in ("worker", "node", "workers"):
            return ROLE_WORKER
    lowered = name.lower()
    if "control-plane" in lowered or "controlplane" in lowered:
        return ROLE_CONTROL_PLANE
    if "worker" in lowered:
        return ROLE_WORKER
    return None


def parse_rfc3339(text):
    """Epoch seconds of a GCE timestamp such as 2026-11-30T03:40:01.123-08:00; None if unparsable."""
    if not text:
        return None
    from datetime import datetime
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def error_from_api_exception(exc, doing):
    """A ProviderError subclass for a google.api_core exception (or a requests connection failure)."""
    code = getattr(exc, "code", None)
    reasons = set()
    for item in getattr(exc, "errors", None) or []:
        if isinstance(item, dict) and item.get("reason"):
            reasons.add(item["reason"])
    reason = getattr(exc, "reason", None)
    if reason:
        reasons.add(reason)
    message = "%s: %s" % (doing, getattr(exc, "message", None) or exc)
    if code is None:
        # Dropped connections and timeouts before an HTTP answer: transient.
        return ProviderError(message, retryable=True)
    if code == 404:
        return NotFoundError(message, status=404, code="notFound")
    if reasons & RATE_LIMIT_REASONS:
        return ProviderError(message, status=code, code=sorted(reasons & RATE_LIMIT_REASONS)[0], throttled=True)
    if reasons & QUOTA_REASONS:
        return QuotaError(message, status=code, code="QUOTA_EXCEEDED")
    return ProviderError(message, status=code, code=",".join(sorted(reasons)) or None,
                         retryable=code in RETRYABLE_STATUS, throttled=code == 429)


def error_from_operation(errors, http_status, http_message, doing):
    """None when an operation succeeded, else the ProviderError its error list means.
    `errors` is a list of (code, message)."""
    if not errors and not http_status:
        return None
    codes = [code for code, dummy in errors]
    text = "; ".join("%s: %s" % (code, msg) for code, msg in errors) or "HTTP %s %s" % (http_status, http_message)
    message = "%s failed: %s" % (doing, text)
    if set(codes) & QUOTA_CODES:
        return QuotaError(message, status=http_status, code=sorted(set(codes) & QUOTA_CODES)[0])
    if "RESOURCE_NOT_FOUND" in codes or http_status == 404:
        return NotFoundError(message, status=http_status, code=codes[0] if codes else None)
    return ProviderError(message, status=http_status, code=codes[0] if codes else None)


def _fresh_names(base, count):
    """`count` different random instance names."""
    names = []
    while len(names) < count:
        name = random_instance_name(base)
        if name not in names:
            names.append(name)
    return names


def operations_filter(names):
    """The list filter that names exactly these operations: compute's `eq` takes an RE2 regular expression that must
    match the whole field (zoneOperations.list `filter`), so one alternation serves them all."""
    return 'name eq "(%s)"' % "|".join(re.sub(r"([^-a-z0-9])", r"\\\1", name) for name in names)


def call_kind(func):
    """How the call rate counts a call of the SDK method `func`: its client's class and its name."""
    owner = getattr(func, "__self__", None)
    name = getattr(func, "__name__", "call")
    return "%s.%s" % (type(owner).__name__, name) if owner is not None else name


def region_of_zone(zone):
    """us-central1 of us-central1-a."""
    return zone.rsplit("-", 1)[0]


def family_cpu_metric(machine_type):
    """The family-specific regional CPU quota metric of a machine type (N2_CPUS for n2-standard-4), or None for
    the families that count against CPUS only (e2, n1, f1, g1 and N1 custom types)."""
    family = machine_type.split("-", 1)[0].upper()
    if family in ("E2", "N1", "F1", "G1", "CUSTOM", ""):
        return None
    return "%s_CPUS" % family


def region_limits(project, region, quotas, groups):
    """The limits of one region for the groups in it. `quotas`: {metric: (limit, usage)} as regions.get
    reports them; `groups`: [(group ID, machine type, guest CPUs or None)]. Every instance counts against
    INSTANCES, and its CPUs against its family's metric when the region reports one, else against CPUS (the
    family quotas such as N2_CPUS are separate from CPUS)."""
    scope = "region %s (project %s)" % (region, project)
    limits = []
    if "INSTANCES" in quotas:
        limits.append(quota.known_limit("INSTANCES", scope, quotas["INSTANCES"][0], quotas["INSTANCES"][1],
                                        {gid: 1 for gid, dummy, dummy2 in groups}))
    by_metric, unknown_cpus = {}, []
    for gid, machine_type, cpus in groups:
        if not cpus:
            unknown_cpus.append(gid)
            continue
        metric = family_cpu_metric(machine_type)
        by_metric.setdefault(metric if metric in quotas else "CPUS", {})[gid] = cpus
    for metric, per_group in sorted(by_metric.items()):
        if metric in quotas:
            limits.append(quota.known_limit(metric, scope, quotas[metric][0], quotas[metric][1], per_group,
                                            unit=quota.UNIT_VCPUS))
    if unknown_cpus:
        limits.append(quota.unknown_limit("CPUS", scope, unknown_cpus, "the machine type's CPU count is unknown"))
    return limits


def check_auth_options(options):
    """Reject inconsistent credential options up front, as google.cloud does (but enforced)."""
    kind = options.get("auth_kind") or "application"
    if options.get("access_token") and kind != "accesstoken":
        raise ProviderError("gcp.access_token is only used with auth_kind=accesstoken (auth_kind is %s)" % kind)
    if kind == "accesstoken" and not options.get("access_token"):
        raise ProviderError("auth_kind=accesstoken needs gcp.access_token (or GCP_ACCESS_TOKEN)")
    if kind == "serviceaccount":
        if not options.get("service_account_file") and not options.get("service_account_contents"):
            raise ProviderError("auth_kind=serviceaccount needs gcp.service_account_file or "
                                "gcp.service_account_contents (or GCP_SERVICE_ACCOUNT_FILE / _CONTENTS)")
        if options.get("service_account_file") and options.get("service_account_contents"):
            raise ProviderError("give gcp.service_account_file or gcp.service_account_contents, not both")
    elif options.get("service_account_file") or options.get("service_account_contents"):
        raise ProviderError("gcp.service_account_file/_contents are only used with auth_kind=serviceaccount "
                            "(auth_kind is %s)" % kind)
    if options.get("service_account_email") and kind != "machineaccount":
        raise ProviderError("gcp.service_account_email is only used with auth_kind=machineaccount")
    timeout = options.get("operation_timeout")
    if timeout is not None and timeout <= 0:
        raise ProviderError("gcp.operation_timeout must be a positive number of seconds, not %r" % timeout)
    return kind


def _credentials(options):
    """(credentials, project or None) for the auth_kind, with google.cloud's meaning of each kind."""
    kind = check_auth_options(options)
    scopes = options.get("scopes") or DEFAULT_SCOPES
    if kind == "anonymous":
        return AnonymousCredentials(), None
    if kind == "accesstoken":
        return google.oauth2.credentials.Credentials(options["access_token"]), None
    if kind == "machineaccount":
        return google.auth.compute_engine.Credentials(
            service_account_email=options.get("service_account_email") or "default"), None
    if kind == "serviceaccount":
        try:
            if options.get("service_account_contents"):
                contents = options["service_account_contents"]
                info = json.loads(contents) if isinstance(contents, str) else dict(contents)
            else:
                with open(os.path.expanduser(options["service_account_file"])) as handle:
                    info = json.load(handle)
            creds = google.oauth2.service_account.Credentials.from_service_account_info(info, scopes=scopes)
        except (OSError, ValueError, KeyError) as exc:
            raise ProviderError("cannot load the GCP service account key (%s): %s"
                                % ("service_account_contents" if options.get("service_account_contents")
                                   else options.get("service_account_file"), exc))
        return creds, info.get("project_id")
    try:
        creds, project = google.auth.default(scopes=scopes)
    except google.auth.exceptions.DefaultCredentialsError as exc:
        raise ProviderError("auth_kind=application found no application default credentials: %s" % exc)
    return creds, project


class GceProvider(CloudProvider):
    """Managed instance groups through google-cloud-compute. Every method costs a constant number of
    calls per group (a group's zones for regional groups), never one per instance."""

    name = "gcp"
    #: instances created through this object that the API does not list yet count as CREATING this long
    CREATE_GRACE = 600.0

    def __init__(self, options, credentials=None, retry_attempts=5, retry_base_delay=0.5, request_timeout=60.0,
                 sleep=time.sleep):
        _load_sdk()
        self.options = dict(options)
        creds, default_project = credentials, None
        if creds is None:
            creds, default_project = _credentials(self.options)
        else:
            check_auth_options(self.options)
        self.project = self.options.get("project") or default_project
        self.operation_timeout = float(self.options.get("operation_timeout") or 600)
        self.retry_attempts = retry_attempts
        self.retry_base_delay = retry_base_delay
        self.request_timeout = request_timeout
        self._sleep = sleep
        self._credentials = creds
        self._client_options = {"api_endpoint": self.options["endpoint"]} if self.options.get("endpoint") else None
        self._clients = {}
        self._lock = threading.Lock()   # the clients and open operations: groups are listed from several threads
        self._recent = {}   # group ID -> {name: Instance} created by this object
        self._operations = {}   # operation name -> (GroupRef, instance name, what it does, "create" or "delete")
        self._deleting = {}     # group ID -> {instance name}: deletions accepted whose operation is still open
        self._memo = None   # within reading(): {"igm": {group ID: IGM}, "template": {URL: template}, "image": ...}
        self._image_lock = threading.Lock()   # one check of the image for the groups pointed at it at once
        self._templates = {}   # (project, template name) -> template, kept while the groups read name it (_keep_named)
        self._created = {}     # (zone, instance name, instance ID) -> its creation time, see _creation_times
        self.skipped_groups = []   # (group, reason) that the last discovery by list_groups() passed over

    def searched(self):
        return "GCP project %s (gcp.project, or the credentials' project)" % self.project if self.project else ""

    # ---- plumbing ------------------------------------------------------------------------------------

    def _client(self, kind):
        with self._lock:
            return self._clients.get(kind) or self._new_client(kind)

    def _new_client(self, kind):
        client = self._clients.get(kind)
        if client is None:
            cls = getattr(compute_v1, kind)
            from google.api_core.gapic_v1.client_info import ClientInfo  # pylint: disable=import-outside-toplevel

            client = cls(credentials=self._credentials, client_options=self._client_options,
                         client_info=ClientInfo(user_agent=user_agent(self.options)))
            self._use_ca_bundle(client)
            self._clients[kind] = client
        return client

    def _use_ca_bundle(self, client):
        """Trust `ca_bundle` for this client only. requests lets REQUESTS_CA_BUNDLE/CURL_CA_BUNDLE override a
        session's verify, so the session stops reading the environment and keeps the proxies it would read."""
        bundle = self.options.get("ca_bundle")
        if not bundle:
            return
        session = getattr(getattr(client, "_transport", None), "_session", None)
        if session is None:
            raise ProviderError("cannot apply gcp.ca_bundle: this google-cloud-compute has no REST session")
        import urllib.parse
        import urllib.request
        session.verify = bundle
        session.trust_env = False
        host = urllib.parse.urlsplit(self.options.get("endpoint") or "https://compute.googleapis.com").hostname
        if not urllib.request.proxy_bypass(host or ""):
            session.proxies.update({k: v for k, v in urllib.request.getproxies().items() if k in ("http", "https")})

    def _call(self, doing, func, *args, **kwargs):
        """One API call with our retries (the SDK's own are switched off), within the call rate (counted by the
        client's class and method: InstanceGroupManagersClient.list_managed_instances), and a per-request timeout."""
        kind = kwargs.pop("_kind", None) or call_kind(func)
        kwargs.setdefault("retry", None)
        kwargs.setdefault("timeout", self.request_timeout)

        def attempt():
            try:
                return func(*args, **kwargs)
            except gexc.GoogleAPICallError as exc:
                raise error_from_api_exception(exc, doing)
            except requests.exceptions.SSLError as exc:
                # A certificate that does not verify will not verify on the next try either.
                raise ProviderError("%s: TLS verification of %s failed (gcp.ca_bundle names the CA to trust): %s"
                                    % (doing, self.options.get("endpoint") or "the Compute Engine API", exc),
                                    code="TLS_VERIFY_FAILED")
            except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
                raise ProviderError("%s: %s" % (doing, exc), retryable=True)
            except google.auth.exceptions.TransportError as exc:
                raise ProviderError("%s: cannot reach the token endpoint: %s" % (doing, exc), retryable=True)
            except (google.auth.exceptions.RefreshError, google.auth.exceptions.InvalidOperation) as exc:
                raise self._auth_error(doing, exc)
        return with_retries(attempt, attempts=self.retry_attempts, base_delay=self.retry_base_delay,
                            sleep=self._sleep, on_wait=self.waiting, rate=self.call_rate, kind=kind)

    def _auth_error(self, doing, exc):
        """What a failed credential refresh means for each auth_kind (google-auth refreshes after a 401)."""
        kind = self.options.get("auth_kind") or "application"
        if kind == "accesstoken":
            why = "the API refused gcp.access_token (invalid or expired), and an access token cannot be refreshed"
        elif kind == "anonymous":
            why = "the API wants credentials and auth_kind=anonymous sends none"
        else:
            why = "getting GCP credentials failed (auth_kind=%s): %s" % (kind, exc)
        return ProviderError("%s: %s" % (doing, why), status=401 if kind in ("accesstoken", "anonymous") else None,
                             code="AUTH_FAILED", retryable=bool(getattr(exc, "retryable", False)))

    def _list(self, doing, func, **kwargs):
        # Counted as one call: the pages after the first (500 items each) go out inside it, uncounted.
        return self._call(doing, lambda **kw: list(func(**kw)), _kind=call_kind(func), **kwargs)

    def _wait(self, op, doing, project, kind=None, scope=None):
        """Wait for a compute Operation through the operations API of its scope; raise what it failed with."""
        deadline = time.monotonic() + self.operation_timeout
        if kind == "zones":
            client, where = self._client("ZoneOperationsClient"), dict(zone=scope)
        elif kind == "regions":
            client, where = self._client("RegionOperationsClient"), dict(region=scope)
        else:
            client, where = self._client("GlobalOperationsClient"), {}
        done = compute_v1.Operation.Status.DONE
        while op.status != done:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProviderError("%s: operation %s still %s after %ds (gcp.operation_timeout)"
                                    % (doing, op.name, compute_v1.Operation.Status(op.status).name,
                                       self.operation_timeout), retryable=False)
            # operations.wait answers when the operation is done or after about two minutes.
            op = self._call("%s: waiting for operation %s" % (doing, op.name), client.wait, project=project,
                            operation=op.name, timeout=min(WAIT_CALL_TIMEOUT, remaining) + 5, **where)
        errors = [(e.code, e.message) for e in op.error.errors] if op.error else []
        failure = error_from_operation(errors, op.http_error_status_code, op.http_error_message, doing)
        if failure:
            raise failure
        return op

    def _project(self, project):
        return project or self.project

    def _igm_client(self, ref):
        return self._client("RegionInstanceGroupManagersClient" if ref.regional else "InstanceGroupManagersClient")

    def _scope(self, ref):
        return {"region": ref.scope} if ref.regional else {"zone": ref.scope}

    def _mig_request(self, ref, resource_kw, resource):
        """A mutating MIG request. Its requestId makes a retried POST (after a 5xx or a lost answer) a
        no-op on the server instead of a second change."""
        request = dict(project=ref.project, instance_group_manager=ref.name, request_id=str(uuid.uuid4()))
        request.update(self._scope(ref))
        request[resource_kw] = resource
        return request

    @contextlib.contextmanager
    def reading(self):
        """Within this block each instance group manager and each instance template is read at most once
        (one executor slice, one node_image_facts call). Templates are immutable in GCE; an instance group
        manager this object changes (create, delete, set_group_image) is read again, but what a create needs of it
        (_create_basis) only after set_group_image. The image that set_group_image points groups at is checked once
        for all of them (_checked_image). Nests."""
        outer = self._memo is None
        if outer:
            self._memo = {"igm": {}, "template": {}, "basis": {}, "image": {}}
        try:
            yield self
        finally:
            if outer:
                self._memo = None

    def _forget_igm(self, ref):
        if self._memo is not None:
            self._memo["igm"].pop(ref.id, None)

    def _get_igm(self, ref, fresh=False):
        memo = None if self._memo is None else self._memo["igm"]
        if memo is not None and not fresh and ref.id in memo:
            return memo[ref.id]
        igm = self._call("reading instance group manager %s" % ref.id, self._igm_client(ref).get,
                         project=ref.project, instance_group_manager=ref.name, **self._scope(ref))
        if memo is not None:
            memo[ref.id] = igm
        return igm

    def _list_managed(self, ref, name=None):
        """The group's managed instances (one paged call), or only the one called `name`. Filtering is done
        here: the API's filter support on listManagedInstances is not something to rely on."""
        request = dict(project=ref.project, instance_group_manager=ref.name, **self._scope(ref))
        managed = self._list("listing the instances of %s" % ref.id, self._igm_client(ref).list_managed_instances,
                             request=request)
        return [mi for mi in managed if mi.name == name] if name else managed

    def _get_template(self, url, fresh=False):
        """The instance template at `url`: read once per reading() slice, and kept across slices (the run's provider
        lives as long as its worker process, every slice of a round) while the groups read name it (_keep_named).
        `fresh` reads it now, for a decision that may change the group."""
        project, name = parse_template(url)
        memo = None if self._memo is None else self._memo["template"]
        key = (project, name)
        if not fresh:
            if memo is not None and key in memo:
                return memo[key]
            kept = self._templates.get(key)
            if kept is not None:
                return kept
        template = self._call("reading instance template %s" % name, self._client("InstanceTemplatesClient").get,
                              project=project, instance_template=name)
        self._templates[key] = template
        if memo is not None:
            memo[key] = template
        return template

    @staticmethod
    def _boot_disk(template):
        disks = list(template.properties.disks)
        boots = [d for d in disks if d.boot] or disks[:1]
        if not boots:
            raise ProviderError("instance template %s has no boot disk" % template.name)
        return boots[0]

    def _template_image(self, template):
        image = normalize_image(self._boot_disk(template).initialize_params.source_image)
        if not image:
            raise ProviderError("instance template %s has no boot disk source image" % template.name)
        return image

    @staticmethod
    def _igm_template_url(igm, ref):
        versions = list(igm.versions)
        if len(versions) > 1:
            raise ProviderError("instance group manager %s runs %d versions (a canary update); finish or cancel it "
                                "first" % (ref.id, len(versions)))
        url = igm.instance_template or (versions[0].instance_template if versions else "")
        if not url:
            raise ProviderError("instance group manager %s has no instance template" % ref.id)
        return url

    def _read_templates(self, igms, templates):
        """The templates these (GroupRef, IGM) name that are neither in `templates` nor kept, read at once into
        `templates` ({URL: template, or the ProviderError its read raised, for _group to raise in its turn})."""
        urls = []
        for ref, igm in igms:
            try:
                url = self._igm_template_url(igm, ref)
            except ProviderError:
                continue   # _group says why, in its turn
            key = parse_template(url)
            if url not in templates and url not in urls and key not in self._templates and not (
                    self._memo is not None and key in self._memo["template"]):
                urls.append(url)

        def read(url):
            try:
                return self._get_template(url)
            except ProviderError as exc:
                return exc
        templates.update(zip(urls, self._at_once(read, urls)))

    @staticmethod
    def _at_once(function, items):
        """function(item) for each item, at most READS_AT_ONCE at a time; the results in the items' order."""
        if len(items) <= 1:
            return [function(item) for item in items]
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(READS_AT_ONCE, len(items))) as pool:
            return list(pool.map(function, items))

    def _group(self, ref, igm, templates):
        url = self._igm_template_url(igm, ref)
        template = templates.get(url) or self._get_template(url)
        if isinstance(template, ProviderError):
            raise template
        templates[url] = template
        return Group(id=ref.id, name=ref.name, image=self._template_image(template),
                     role=role_of(dict(template.properties.labels), ref.name), target_size=igm.target_size,
                     kind="GCE managed instance group (%s)" % ("regional" if ref.regional else "zonal"),
                     settings=self._run_settings(ref, igm))

    def _run_settings(self, ref, igm):
        """Proactive redistribution, on regional groups only (unset reads as PROACTIVE, GCE's default there), and the
        mode of the autoscaler the group names in status.autoscaler (one more call, only for such a group)."""
        settings = {}
        if ref.regional:
            policy = igm.update_policy.instance_redistribution_type if igm.update_policy else ""
            settings[cloud_settings.GCE_REDISTRIBUTION] = policy or "PROACTIVE"
        autoscaler = self._autoscaler_of(igm)
        if autoscaler is not None:
            settings[cloud_settings.GCE_AUTOSCALER] = self._get_autoscaler(autoscaler).autoscaling_policy.mode or "ON"
        return settings

    @staticmethod
    def _autoscaler_of(igm):
        """(project, "zones"|"regions", scope, name) of the autoscaler attached to the group, or None."""
        url = igm.status.autoscaler if igm.status else ""
        where = _AUTOSCALER_URL_RE.match(strip_url(url)) if url else None
        return where.groups() if where else None

    def _autoscaler_client(self, where):
        return self._client("RegionAutoscalersClient" if where[1] == "regions" else "AutoscalersClient")

    def _get_autoscaler(self, where):
        project, kind, scope, name = where
        return self._call("reading autoscaler %s" % "/".join(where), self._autoscaler_client(where).get, project=project,
                          autoscaler=name, **{"region" if kind == "regions" else "zone": scope})

    # ---- the interface -------------------------------------------------------------------------------
    def list_groups(self, group_ids=None):
        templates = {}
        if group_ids is not None:
            refs = [parse_group_id(g) for g in group_ids]
            igms = list(zip(refs, self._at_once(self._get_igm, refs)))   # the first failure in refs' order raises
            self._read_templates(igms, templates)
            groups = [self._group(ref, igm, templates) for ref, igm in igms]
            self._keep_named(templates)
            return groups
        if not self.project:
            raise ProviderError("listing groups needs gcp.project (or GCP_PROJECT)")
        pages = self._list("listing instance group managers of project %s" % self.project,
                           self._client("InstanceGroupManagersClient").aggregated_list,
                           request=dict(project=self.project))
        # The whole project is listed, so groups that are none of ours may be odd (regional templates,
        # canary versions): such a group is skipped and noted in skipped_groups, not fatal to the listing.
        groups, self.skipped_groups = [], []
        listed = [igm for dummy, scoped in pages for igm in scoped.instance_group_managers]
        readable = []
        for igm in listed:
            try:
                readable.append((parse_group_id(igm.self_link), igm))
            except ProviderError:
                continue   # skipped below, in the listing's order
        self._read_templates(readable, templates)
        for igm in listed:
            try:
                ref = parse_group_id(igm.self_link)
                if self._memo is not None:
                    self._memo["igm"][ref.id] = igm
                groups.append(self._group(ref, igm, templates))
            except ProviderError as exc:
                if exc.retryable:
                    raise
                self.skipped_groups.append((strip_url(igm.self_link) or igm.name, str(exc)))
        if not groups and self.skipped_groups:
            raise ProviderError("no usable managed instance group in project %s: %s" % (
                self.project, "; ".join("%s: %s" % skipped for skipped in self.skipped_groups)))
        self._keep_named(templates)
        return sorted(groups, key=lambda g: g.id)

    def _keep_named(self, templates):
        """Keep across slices only the templates that the groups just read name ({URL: template}): GCE's templates are
        immutable, and "it is not possible to delete templates that are already in use by a managed instance group"
        (instanceTemplates.delete), so while every read of the groups finds one in use, its name still reads as kept.
        One that a read finds unused may be deleted and made again under its name: dropped, read again when named."""
        named = {parse_template(url) for url in templates}
        self._templates = {key: template for key, template in self._templates.items() if key in named}

    def list_instances(self, group_id):
        ref = parse_group_id(group_id)
        igm = self._get_igm(ref)
        managed = self._list_managed(ref)
        # One template read per distinct template, for the image each instance was created from.
        images = {}
        for url in {m.version.instance_template for m in managed if m.version.instance_template}:
            try:
                images[strip_url(url)] = self._template_image(self._get_template(url))
            except NotFoundError:
                images[strip_url(url)] = ""   # a deleted template: the image is no longer knowable
        created = self._creation_times(ref, igm, managed)
        recent = self._recent.get(ref.id, {})
        with self._lock:
            deleting = set(self._deleting.get(ref.id, ()))
        instances = []
        listed = set()
        for mi in managed:
            where = _INSTANCE_URL_RE.match(strip_url(mi.instance))
            zone = where.group(2) if where else (ref.scope if not ref.regional else "")
            name = mi.name or (where.group(3) if where else "")
            errors = [(e.code, e.message) for e in mi.last_attempt.errors.errors] if mi.last_attempt else []
            extra = {"current_action": mi.current_action, "instance_status": mi.instance_status, "zone": zone,
                     "template": strip_url(mi.version.instance_template)}
            state = instance_state(mi.current_action, mi.instance_status, bool(errors))
            if name in deleting:
                # Our deleteInstances was accepted and its operation is still open: the MIG may list the instance
                # as it was for a moment, but it is going (it holds its slot until no listing names it).
                state = DELETING
            if errors:
                extra["errors"] = ["%s: %s" % e for e in errors]
                extra["quota_exceeded"] = any(code in QUOTA_CODES for code, dummy in errors)
                if late_refusal(errors, state):
                    extra[REFUSED_FOR] = late_refusal(errors, state)
            if state_problem(mi.current_action, mi.instance_status):
                extra[STATE_PROBLEM] = state_problem(mi.current_action, mi.instance_status)
            listed.add(name)
            if name in recent:
                recent[name].extra["seen"] = True   # the API lists it: from now on its word is final
            instances.append(Instance(
                provider_id=provider_id_of(ref.project, zone, name) if zone else "",
                node_name=name, group_id=ref.id, image=images.get(strip_url(mi.version.instance_template), ""),
                state=state,
                # No instance resource yet ("not found"): the time this object asked for it, if it did.
                created_at=created.get(name) or (recent[name].created_at if name in recent else None),
                name=name, extra=extra))
        # The API may not list an instance for a moment after createInstances: it is being created, and
        # must never free budget. One the API listed once and lists no more is gone (deleted), not created again.
        for name, inst in list(recent.items()):
            if time.time() - (inst.created_at or 0) > self.CREATE_GRACE:
                recent.pop(name)
            elif name not in listed and not inst.extra.get("seen"):
                instances.append(Instance(**dict(inst.to_dict(), state=CREATING, extra=dict(inst.extra, listed=False))))
        return instances

    def _creation_times(self, ref, igm, managed):
        """Instance creation times, one instances.list per zone the group uses (not one get per instance), and
        only for a zone where the listing shows an instance whose time is not known yet. A time is kept by zone,
        name and the instance's ID: a VM never changes its creation time, and one the group recreates (autohealing,
        recreateInstances: "deleted and recreated") is a new VM with a new ID, so it is read again. An instance
        without an ID (not created yet) is never kept; the group's times are only those of its last listing."""
        with self._lock:
            known = dict(self._created.get(ref.id, {}))
        listed = {where + (str(mi.id or ""),) for mi in managed for where in [_zone_and_name(mi)] if where}
        times, kept, zones = {}, {}, set()
        for key in listed:
            if key[2] and key in known:
                times[key[1]] = kept[key] = known[key]
            else:
                zones.add(key[0])
        base = igm.base_instance_name
        for zone in sorted(zones):
            request = dict(project=ref.project, zone=zone)
            if base:
                # compute's list filter: `eq` takes an RE2 regex that must match the whole name; names
                # only hold [-a-z0-9], so the base needs no escaping.
                request["filter"] = 'name eq "%s-.*"' % base
            for inst in self._list("listing instances of %s in zone %s" % (ref.id, zone),
                                   self._client("InstancesClient").list, request=request):
                times[inst.name] = parse_rfc3339(inst.creation_timestamp)
                if times[inst.name] is not None and inst.id:
                    kept[(zone, inst.name, str(inst.id))] = times[inst.name]
        with self._lock:
            self._created[ref.id] = {key: at for key, at in kept.items() if key in listed}
        return times

    #: create_instance(wait=False) starts the create and returns; follow_operations() follows it.
    creates_without_waiting = True
    #: creates in different groups may be sent at once (what they share, the kept operations and instances, is locked
    #: or per group; the compute clients are safe across threads, as the listings' threads already use them).
    creates_in_parallel = True
    #: delete_instance(wait=False) starts the deletion and returns; follow_operations() follows it.
    deletes_without_waiting = True
    #: deleteInstances' operation is DONE once the group scheduled the deletions; the instances list DELETING after.
    deletion_ends_with_operation = False
    #: deletions in different groups may be sent at once (as creates: the kept operations are locked).
    deletes_in_parallel = True

    def create_instance(self, group_id, wait=True):
        """Add one instance to the group (create_instances with a count of 1)."""
        return self.create_instances(group_id, 1, wait=wait)[0]

    def create_instances(self, group_id, count, wait=True):
        """Add `count` instances to the group with one createInstances request naming them all. With wait False,
        return once GCE accepted it: the operation is followed by follow_operations(), and one that GCE refused
        for quota is sent again one instance a request there, so as many are made as the quota holds (as with one
        request each). A zonal group's instances are known by their providerIDs at once; a regional group picks
        the zones itself, so its instances come back without a providerID (extra PENDING) and follow_operations()
        names them once the operation is done."""
        ref = parse_group_id(group_id)
        base_name, image = self._create_basis(ref)
        for dummy in range(3):
            names = _fresh_names(base_name, count)
            try:
                started = self._start_create(ref, names, wait)
                break
            except ProviderError as exc:
                if exc.code == "RESOURCE_ALREADY_EXISTS":
                    continue   # one of our random names was taken; pick others
                raise
        else:
            raise ProviderError("creating %d instance(s) in %s: three sets of random names were all taken" % (count, ref.id))
        self._forget_igm(ref)   # its target size changed
        made = []
        for name in names:
            zone = ref.scope if not ref.regional else (self._zone_of_new_instance(ref, name) if started is None else "")
            instance = Instance(provider_id=provider_id_of(ref.project, zone, name) if zone else "",
                                node_name=name, group_id=ref.id, image=image, state=CREATING, created_at=time.time(),
                                name=name, extra={"zone": zone, PENDING: True} if started is not None and not zone
                                else {"zone": zone})
            self._recent.setdefault(ref.id, {})[name] = instance
            made.append(Instance(**instance.to_dict()))
        self._follow_create(started, ref, names)
        return made

    def _start_create(self, ref, names, wait):
        """One createInstances request for `names`: (its operation, what it does) to follow, or None when waited for."""
        client = self._igm_client(ref)
        resource_kw = ("region_instance_group_managers_create_instances_request_resource" if ref.regional
                       else "instance_group_managers_create_instances_request_resource")
        doing = "creating instance%s %s in %s" % ("s" if len(names) > 1 else "", ", ".join(names), ref.id)
        op = self._call(doing, client.create_instances_unary, request=self._mig_request(
            ref, resource_kw, {"instances": [{"name": name} for name in names]}))
        if wait:
            self._wait(op, doing, ref.project, ref.kind, ref.scope)
            return None
        return op, doing

    def _follow_create(self, started, ref, names):
        """follow_operations() follows a create's operation from now on (after its instances are remembered)."""
        if started is not None:
            with self._lock:
                self._operations[started[0].name] = (ref, tuple(names), started[1], "create")

    def _create_basis(self, ref):
        """(baseInstanceName, image of the group's template) that a create needs. Within reading() kept for the
        group until this object sets its image: a create or delete changes the manager's target size, which makes
        the next listing read the manager again, but not these, so the group's next heir reads nothing."""
        memo = None if self._memo is None else self._memo["basis"]
        if memo is not None and ref.id in memo:
            return memo[ref.id]
        igm = self._get_igm(ref)
        if not igm.base_instance_name:
            raise ProviderError("instance group manager %s has no baseInstanceName" % ref.id)
        basis = (igm.base_instance_name, self._template_image(self._get_template(self._igm_template_url(igm, ref))))
        if memo is not None:
            memo[ref.id] = basis
        return basis

    def follow_operations(self):
        """The operations of writes started without waiting that ended since the last call: [Ended] (one per
        instance), a failure a QuotaError for a quota or capacity refusal. One operations list per zone or region
        with operations still open (OPERATIONS_PER_LIST names to a request, filtered on their names), however many
        are open; an operation the list does not name is read by itself (an operations.get, which says it is gone).
        An instance whose create failed is forgotten (it no longer counts as being created); a regional group's new
        instance is named (its zone read back). A deletion's operation ends when the MIG took the instances on: they
        go later, and only a later listing shows them gone (they list DELETING until then)."""
        with self._lock:
            open_ops = dict(self._operations)
        ended = []
        for op_name, op in self._read_operations(open_ops).items():
            ref, names, doing, kind = open_ops[op_name]
            if op.status != compute_v1.Operation.Status.DONE:
                continue
            errors = [(e.code, e.message) for e in op.error.errors] if op.error else []
            failure = error_from_operation(errors, op.http_error_status_code, op.http_error_message, doing)
            with self._lock:
                self._operations.pop(op_name, None)
                if kind == "delete":
                    self._deleting.get(ref.id, set()).difference_update(names)
            if kind == "create" and len(names) > 1 and isinstance(failure, QuotaError):
                ended.extend(self._create_one_by_one(ref, names))
                continue
            for name in names:
                ended.append(Ended(ref.id, name, failure, kind, self._named(ref, name) if kind == "create" and not failure
                                   else None))
                if kind == "create" and failure is not None:
                    self._recent.get(ref.id, {}).pop(name, None)
        return ended

    def _create_one_by_one(self, ref, names):
        """A createInstances of several instances that GCE refused for quota made none: each is asked for again in a
        request of its own (the same names: none was made), so as many are made as the quota holds. [Ended] of those
        refused at once; the others end in a later follow_operations()."""
        ended = []
        for name in names:
            try:
                self._follow_create(self._start_create(ref, [name], wait=False), ref, [name])
            except ProviderError as exc:
                self._recent.get(ref.id, {}).pop(name, None)
                ended.append(Ended(ref.id, name, exc, "create", None))
        return ended

    def _read_operations(self, open_ops):
        """{operation name: Operation} of `open_ops` ({name: (GroupRef, ...)}), listed per zone or region."""
        by_scope = {}
        for op_name, (ref, dummy, doing, dummy) in sorted(open_ops.items()):
            by_scope.setdefault((ref.project, ref.regional, ref.scope), []).append((op_name, doing))
        found = {}
        for (project, regional, scope), ops in sorted(by_scope.items()):
            client, where = ((self._client("RegionOperationsClient"), dict(region=scope)) if regional
                             else (self._client("ZoneOperationsClient"), dict(zone=scope)))
            for at in range(0, len(ops), OPERATIONS_PER_LIST):
                chunk = [name for name, dummy in ops[at:at + OPERATIONS_PER_LIST]]
                request = dict(project=project, filter=operations_filter(chunk), **where)
                listed = self._list("reading %d operation(s) in %s" % (len(chunk), scope), client.list, request=request)
                found.update((op.name, op) for op in listed if op.name in chunk)
            for op_name, doing in ops:
                if op_name not in found:   # not listed: its own get says what became of it (404: a ProviderError)
                    found[op_name] = self._call("%s: reading operation %s" % (doing, op_name), client.get,
                                                project=project, operation=op_name, **where)
        return found

    def _named(self, ref, name):
        """A regional group's instance whose create is done, with its providerID (its zone read back); None for a
        zonal group's, which was named from the start, or where the zone cannot be read yet."""
        made = self._recent.get(ref.id, {}).get(name)
        if not ref.regional or made is None or made.provider_id:
            return None
        zone = self._zone_of_new_instance(ref, name, attempts=1)
        if not zone:
            return None
        made.provider_id = provider_id_of(ref.project, zone, name)
        made.extra = {k: v for k, v in dict(made.extra, zone=zone).items() if k != PENDING}
        return Instance(**made.to_dict())

    def _zone_of_new_instance(self, ref, name, attempts=5, delay=1.0):
        """A regional MIG picks the zone itself; read it back (bounded) to build the providerID."""
        for attempt in range(attempts):
            for mi in self._list_managed(ref, name=name):
                where = _INSTANCE_URL_RE.match(strip_url(mi.instance))
                if mi.name == name and where:
                    return where.group(2)
            if attempt < attempts - 1:
                self._sleep(delay)
        return ""

    def _created_by(self, project, zone, name):
        """The group that manages an instance, from its `created-by` metadata: a GroupRef, "" when it is in no
        managed instance group, None when it does not exist."""
        try:
            inst = self._call("reading instance %s" % provider_id_of(project, zone, name),
                              self._client("InstancesClient").get, project=project, zone=zone, instance=name)
        except NotFoundError:
            return None
        for item in inst.metadata.items:
            if item.key == "created-by" and item.value:
                created_by = parse_group_id(item.value)
                # created-by may name the project by number; the instance's project is the group's.
                return GroupRef(project, created_by.kind, created_by.scope, created_by.name)
        return ""

    def _group_of_instance(self, project, zone, name):
        """The group that manages an instance; None when it does not exist."""
        ref = self._created_by(project, zone, name)
        if ref == "":
            raise ProviderError("instance %s is not in a managed instance group (no created-by metadata)"
                                % provider_id_of(project, zone, name))
        return ref

    def instance_group(self, provider_id):
        ref = self._created_by(*parse_provider_id(provider_id))
        return ref.id if ref else ref

    def delete_instance(self, provider_id, group_id=None, wait=True):
        """Delete the instance and shrink its group; False when it is gone or already being deleted.
        `group_id` (optional) saves reading the instance and finds instances the API does not show yet. With wait
        False, return once GCE accepted deleteInstances: the instance lists DELETING from then on and
        follow_operations() follows the operation. Reads the group's members to tell (one listManagedInstances):
        delete_instances() is the batch for instances a listing just named."""
        project, zone, name = parse_provider_id(provider_id)
        if not group_id:
            # An instance this object just created may still read "not found": its group is known here.
            group_id = next((gid for gid, made in self._recent.items() if name in made
                             and made[name].provider_id == provider_id), None)
        ref = parse_group_id(group_id) if group_id else self._group_of_instance(project, zone, name)
        if ref is None:
            return False
        members = [mi for mi in self._list_managed(ref, name=name) if mi.name == name]
        if not members or members[0].current_action in ("DELETING", "ABANDONING"):
            self._recent.get(ref.id, {}).pop(name, None)
            return False
        self._delete_members(ref, [(zone, name)], "deleting instance %s from %s" % (provider_id, ref.id), wait)
        return True

    def delete_instances(self, group_id, provider_ids, wait=True):
        """Delete instances of one group that a listing of it just named, in one deleteInstances (at most
        DELETES_PER_REQUEST instances to a request), with no per-instance read: GCE skips an instance that is not a
        member or is being deleted already (skipInstancesOnValidationError), so a concurrent deletion that won is no
        error. All of them count as deleted: each is gone or going once the request is accepted."""
        ref = parse_group_id(group_id)
        members = []
        for provider_id in provider_ids:
            project, zone, name = parse_provider_id(provider_id)
            if project != ref.project:
                raise ProviderError("instance %s is not in the project of group %s" % (provider_id, ref.id))
            members.append((zone, name))
        for at in range(0, len(members), DELETES_PER_REQUEST):
            chunk = members[at:at + DELETES_PER_REQUEST]
            self._delete_members(ref, chunk, "deleting %d instance(s) (%s) from %s" % (
                len(chunk), ", ".join(name for dummy, name in chunk), ref.id), wait)
        return list(provider_ids)

    def _delete_members(self, ref, members, doing, wait):
        """One deleteInstances for `members` [(zone, name)] of the group; with wait False, their operation followed
        by follow_operations() and the instances listed DELETING until it ends."""
        names = tuple(name for dummy, name in members)
        resource_kw = ("region_instance_group_managers_delete_instances_request_resource" if ref.regional
                       else "instance_group_managers_delete_instances_request_resource")
        op = self._call(doing, self._igm_client(ref).delete_instances_unary, request=self._mig_request(
            ref, resource_kw, {"instances": ["zones/%s/instances/%s" % member for member in members],
                               "skip_instances_on_validation_error": True}))
        if wait:
            self._wait(op, doing, ref.project, ref.kind, ref.scope)
        else:
            with self._lock:
                self._operations[op.name] = (ref, names, doing, "delete")
                self._deleting.setdefault(ref.id, set()).update(names)
        self._forget_igm(ref)
        for name in names:
            self._recent.get(ref.id, {}).pop(name, None)

    def group_image(self, group_id):
        ref = parse_group_id(group_id)
        igm = self._get_igm(ref)
        return self._template_image(self._get_template(self._igm_template_url(igm, ref)))

    def _checked_image(self, image):
        """validate_image(image), once within reading() for the groups pointed at it at once (the executor sets every
        group's image from its own thread): the others wait for the first's answer, a failure included."""
        if self._memo is None:
            return self.validate_image(image)
        with self._image_lock:
            checked = self._memo["image"].get(image)
            if checked is None:
                try:
                    checked = (True, self.validate_image(image))
                except ProviderError as exc:
                    checked = (False, exc)
                self._memo["image"][image] = checked
        if not checked[0]:
            raise checked[1]
        return checked[1]

    def set_group_image(self, group_id, image):
        ref = parse_group_id(group_id)
        wanted = self._checked_image(image)
        igm = self._get_igm(ref, fresh=True)   # the group as it is now, before changing it
        template_url = self._igm_template_url(igm, ref)
        template = self._get_template(template_url, fresh=True)
        if self._template_image(template) == wanted:
            return False
        if igm.update_policy and igm.update_policy.type_ == "PROACTIVE":
            # GCE would then replace every instance itself, without draining: not this collection's way.
            raise ProviderError("instance group manager %s has a PROACTIVE update policy, so GCE would replace "
                                "all its instances itself without draining them; set updatePolicy.type to "
                                "OPPORTUNISTIC first" % ref.id, code="PROACTIVE_UPDATE_POLICY")
        tmpl_project, tmpl_name = parse_template(template_url)
        new_url = self._insert_template_clone(tmpl_project, template, wanted)
        doing = "setting instance template %s on %s" % (strip_url(new_url), ref.id)
        resource_kw = ("region_instance_group_managers_set_template_request_resource" if ref.regional
                       else "instance_group_managers_set_instance_template_request_resource")
        op = self._call(doing, self._igm_client(ref).set_instance_template_unary, request=self._mig_request(
            ref, resource_kw, {"instance_template": new_url}))
        self._wait(op, doing, ref.project, ref.kind, ref.scope)
        self._forget_igm(ref)
        if self._memo is not None:
            self._memo["basis"].pop(ref.id, None)   # new instances get the new template
        return True

    def set_run_setting(self, group_id, name, value):
        ref = parse_group_id(group_id)
        igm = self._get_igm(ref, fresh=True) if name in (cloud_settings.GCE_REDISTRIBUTION, cloud_settings.GCE_AUTOSCALER) else None
        settings = self._run_settings(ref, igm) if igm is not None else {}
        if name not in settings:
            return super().set_run_setting(group_id, name, value)
        if settings[name] == value:
            return False
        if name == cloud_settings.GCE_AUTOSCALER:
            return self._set_autoscaler_mode(self._autoscaler_of(igm), value)
        doing = "setting updatePolicy.instanceRedistributionType of %s to %s" % (ref.id, value)
        op = self._call(doing, self._igm_client(ref).patch_unary, request=self._mig_request(
            ref, "instance_group_manager_resource", {"update_policy": {"instance_redistribution_type": value}}))
        self._wait(op, doing, ref.project, ref.kind, ref.scope)
        self._forget_igm(ref)
        return True

    def _set_autoscaler_mode(self, where, mode):
        project, kind, scope, name = where
        doing = "setting autoscalingPolicy.mode of autoscaler %s to %s" % ("/".join(where), mode)
        op = self._call(doing, self._autoscaler_client(where).patch_unary, request={
            "project": project, "region" if kind == "regions" else "zone": scope, "autoscaler": name,
            "request_id": str(uuid.uuid4()), "autoscaler_resource": {"autoscaling_policy": {"mode": mode}}})
        self._wait(op, doing, project, kind, scope)
        return True

    def restore_problem(self, group_id, name, value):
        """PROACTIVE back on a group whose zones are more than one VM apart: GCE would delete a VM at once."""
        ref = parse_group_id(group_id)
        if name != cloud_settings.GCE_REDISTRIBUTION or value != "PROACTIVE" or not ref.regional:
            return None
        igm = self._get_igm(ref, fresh=True)
        zones = {strip_url(z.zone).rsplit("/", 1)[-1]: 0 for z in igm.distribution_policy.zones} if igm.distribution_policy else {}
        for mi in self._list_managed(ref):
            where = _INSTANCE_URL_RE.match(strip_url(mi.instance))
            if where and mi.current_action not in ("DELETING", "ABANDONING"):
                zones[where.group(2)] = zones.get(where.group(2), 0) + 1
        return zone_imbalance(zones)

    def _insert_template_clone(self, project, template, image):
        """Insert a copy of `template` whose boot disk uses `image`; return the new template's URL.
        A clone left by an interrupted run (same name, same image) is reused, not duplicated: the insert comes first
        and only a name already taken (409) is read, so the usual case costs no read of a name that is free."""
        name = template.name
        client = self._client("InstanceTemplatesClient")
        for dummy in range(20):
            name = next_template_name(name)
            url = API_PREFIX + "projects/%s/global/instanceTemplates/%s" % (project, name)
            clone = compute_v1.InstanceTemplate(name=name, description=template.description,
                                                properties=template.properties)
            self._boot_disk(clone).initialize_params.source_image = image
            doing = "creating instance template %s with image %s" % (name, image)
            try:
                op = self._call(doing, client.insert_unary, request=compute_v1.InsertInstanceTemplateRequest(
                    project=project, instance_template_resource=clone, request_id=str(uuid.uuid4())))
            except ProviderError as exc:
                if exc.status != 409:
                    raise
                try:
                    existing = self._get_template(url, fresh=True)
                except NotFoundError:
                    continue   # taken, then deleted meanwhile: the next name
                if self._template_image(existing) == image:
                    return url
                continue
            self._wait(op, doing, project)
            return url
        raise ProviderError("no free name for a clone of instance template %s after 20 tries" % template.name)

    def validate_image(self, image):
        project, name, is_family = parse_image(image)
        problem = image_host_problem(image, self.options.get("endpoint"))
        if problem:
            raise InvalidReferenceError(problem)
        client = self._client("ImagesClient")
        try:
            if is_family:
                found = self._call("resolving image family %s" % image, client.get_from_family,
                                   project=project, family=name)
            else:
                found = self._call("reading image %s" % image, client.get, project=project, image=name)
        except NotFoundError:
            raise NotFoundError("image %s does not exist in GCE (or is not visible to these credentials)"
                                % canonical_image(project, name) if not is_family else
                                "image family projects/%s/global/images/family/%s has no image in GCE (or is not "
                                "visible to these credentials)" % (project, name), status=404, code="notFound")
        if found.status and found.status != "READY":
            raise ProviderError("image %s is %s, not READY" % (canonical_image(project, found.name), found.status))
        state = found.deprecated.state if found.deprecated else ""
        if state in ("OBSOLETE", "DELETED"):
            raise ProviderError("image %s is %s; new instances cannot use it"
                                % (canonical_image(project, found.name), state))
        return canonical_image(project, found.name)

    def instance_headroom(self, group_ids):
        """The INSTANCES and CPU quotas of the groups' regions (one regions.get per region; per group its manager and
        template, a kept template not read again; one machineTypes.get per machine type and zone), against each
        group's machine type."""
        refs = [parse_group_id(g) for g in group_ids]
        regions = {}
        for ref in refs:
            region = ref.scope if ref.regional else region_of_zone(ref.scope)
            regions.setdefault((ref.project, region), []).append(ref)
        limits = []
        for (project, region), members in sorted(regions.items()):
            scope = "region %s (project %s)" % (region, project)
            try:
                found = self._call("reading the quotas of region %s" % region, self._client("RegionsClient").get,
                                   project=project, region=region)
            except ProviderError as exc:
                limits.append(quota.unknown_limit("region quotas", scope, [r.id for r in members], str(exc)))
                continue
            quotas = {q.metric: (q.limit, q.usage) for q in found.quotas}
            zones = [strip_url(z).rsplit("/", 1)[-1] for z in found.zones]
            groups = [(ref.id,) + typed for ref, typed in zip(members, self._machine_types_of(members, zones))]
            limits.extend(region_limits(project, region, quotas, groups))
        return limits

    def _machine_types_of(self, refs, region_zones):
        """[(machine type name, guest CPUs or None)] of the groups' instance templates, ("", None) for a group whose
        reads failed. The groups' reads go at once; groups of one machine type in one zone share its read."""
        def where(ref):
            """(machine type, (project, zone, machine type) to read or None), or None when a read failed."""
            try:
                igm = self._get_igm(ref)
                template = self._get_template(self._igm_template_url(igm, ref))
            except ProviderError:
                return None
            machine_type = strip_url(template.properties.machine_type).rsplit("/", 1)[-1]
            if ref.regional:
                zones = [strip_url(z.zone).rsplit("/", 1)[-1] for z in igm.distribution_policy.zones] or region_zones
            else:
                zones = [ref.scope]
            return machine_type, ((ref.project, zones[0], machine_type) if machine_type and zones else None)

        def cpus(key):
            project, zone, machine_type = key
            try:
                found = self._call("reading machine type %s" % machine_type, self._client("MachineTypesClient").get,
                                   project=project, zone=zone, machine_type=machine_type)
            except ProviderError:
                return False
            return found.guest_cpus or None

        wheres = self._at_once(where, refs)
        keys = sorted({w[1] for w in wheres if w is not None and w[1] is not None})
        read = dict(zip(keys, self._at_once(cpus, keys)))
        typed = []
        for found in wheres:
            if found is None or (found[1] is not None and read[found[1]] is False):
                typed.append(("", None))
            else:
                typed.append((found[0], read[found[1]] if found[1] is not None else None))
        return typed

    def normalize_provider_id(self, provider_id):
        return provider_id.strip().rstrip("/").lower()


def from_params(options):
    """A GceProvider from the `gcp` option dict; clear errors for a missing SDK or bad credentials."""
    _load_sdk()
    if not HAS_REQUESTS:
        raise ProviderError("the GCP provider needs the Python package requests")
    return GceProvider(options or {})
