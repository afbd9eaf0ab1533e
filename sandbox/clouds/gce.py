"""A Google Compute Engine REST emulator that google-cloud-compute talks to over plain HTTP on 127.0.0.1.

It serves the subset of compute/v1 the collection uses: images (get, getFromFamily, list), global
instance templates (get, list, insert, delete), zonal instances (get, list) and disks (get), zonal and
regional instance group managers (get, list, aggregatedList, listManagedInstances, createInstances,
deleteInstances, setInstanceTemplate, resize) and zone, region and global operations (get, wait; zone and region
operations list too, filtered on the name).
Resources answer with the same field names and selfLinks (https://www.googleapis.com/compute/v1/...) as
the real API. Unknown paths, methods, query parameters and body fields are refused with Google's JSON
error format, so the emulator cannot silently accept something the real API would reject.

Instances of a group go CREATING (no instance resource yet: it reads "not found") -> PROVISIONING ->
STAGING -> RUNNING, then the instance hooks tell the node simulator; deleted ones go DELETING and then
disappear. Faults (Admin.set_faults): a rate or a count of requests answered with 429/500/503, latency,
instances that never boot, slow deletions (delete_delay: how long a deleted instance stays listed as
DELETING), an instance quota that createInstances/resize refuse with QUOTA_EXCEEDED and that regions.get
reports as the region's INSTANCES quota (limit the knob, usage the live instances; a generous limit when the
knob is unset), late refusals (late_refusals: the next N instances createInstances accepts stay CREATING with
lastAttempt QUOTA_EXCEEDED on IN_USE_ADDRESSES, retried for ever, as GCE refuses an instance after the request was
accepted), autoscalers (Admin.create_autoscaler: attached to a group, named in its status.autoscaler, read and
patched through autoscalers/regionAutoscalers get and patch; one in mode ON resizes its group to its recommended
size once the group has been another size for autoscaling_delay seconds, deleting the newest VMs first, without a
drain; ONLY_SCALE_OUT only grows it; OFF leaves it; knob autoscaling=False: none acts), autohealing (a group created
with autohealing=True has autoHealingPolicies; a VM Admin.fail_health marked is recreated in place autohealing_delay
seconds later - same name and zone, currentAction RECREATING, its Node gone until the VM runs again from the
group's current template; knob autohealing=False: never), and paths the caller may not read (deny: 403 forbidden, as for an identity without the
permission).

Run as `python -m sandbox.clouds.gce --state-dir DIR [--nodesim-url URL]` (see sandbox/clouds/__init__.py)
or in-process with GceEmulator(...).start().
"""

import argparse
import base64
import fnmatch
import hashlib
import collections
import itertools
import json
import os
import random
import re
import signal
import ssl
import string
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sandbox import instance_hooks

API = "https://www.googleapis.com/compute/v1/"
DEFAULT_PROJECT = "kubenodes-sandbox"
DEFAULT_REGION = "us-central1"
# A per-instance quota the preflight does not read (external IPs): what a late refusal names.
LATE_REFUSAL_MESSAGE = "Quota 'IN_USE_ADDRESSES' exceeded.  Limit: 8.0 in region %s."
NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
ZONE_RE = re.compile(r"^[a-z]+-[a-z]+[0-9]+-[a-z]$")
REGION_RE = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
# Query parameters every compute/v1 method accepts (system parameters the client libraries may send).
SYSTEM_QUERY = {"$alt", "alt", "prettyPrint", "fields", "key", "quotaUser", "userIp"}
LIST_QUERY = {"filter", "maxResults", "orderBy", "pageToken", "returnPartialSuccess"}
# Top-level fields of the request bodies the emulator accepts (from the compute/v1 discovery document).
TEMPLATE_FIELDS = {"name", "description", "properties", "sourceInstance", "sourceInstanceParams", "kind", "id",
                   "creationTimestamp", "selfLink", "region"}
PROPERTIES_FIELDS = {"advancedMachineFeatures", "canIpForward", "confidentialInstanceConfig", "description", "disks",
                     "guestAccelerators", "keyRevocationActionType", "labels", "machineType", "metadata",
                     "minCpuPlatform", "networkInterfaces", "networkPerformanceConfig", "privateIpv6GoogleAccess",
                     "reservationAffinity", "resourceManagerTags", "resourcePolicies", "scheduling",
                     "serviceAccounts", "shieldedInstanceConfig", "tags", "workloadIdentityConfig"}
_STATUS_OF_CODE = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED",
                   409: "ALREADY_EXISTS", 412: "FAILED_PRECONDITION", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
                   503: "UNAVAILABLE"}
_REASON_OF_CODE = {400: "invalid", 403: "forbidden", 404: "notFound", 405: "httpMethodNotAllowed",
                   409: "alreadyExists", 412: "conditionNotMet", 429: "rateLimitExceeded", 500: "backendError",
                   503: "backendError"}


class ApiError(Exception):
    def __init__(self, code, message, reason=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASON_OF_CODE.get(code, "error")

    def body(self):
        return {"error": {"code": self.code, "message": self.message,
                          "errors": [{"message": self.message, "domain": "global", "reason": self.reason}],
                          "status": _STATUS_OF_CODE.get(self.code, "UNKNOWN")}}


def _rfc3339(epoch):
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds")


def _numeric_id(*parts):
    return str(int(hashlib.sha256("/".join(parts).encode()).hexdigest()[:15], 16))


def _basename(url):
    return url.rstrip("/").rsplit("/", 1)[-1]


def _relative(url):
    """projects/... from a full compute URL or an already relative one."""
    match = re.match(r"^https?://[^/]+/compute/v1/(.*)$", url)
    return match.group(1) if match else url


class Faults:
    def __init__(self):
        self.reset()

    def reset(self):
        self.error_rate = 0.0
        self.codes = (429, 500, 503)
        self.fail_next = 0          # the next N API requests fail, whatever the rate
        self.latency = 0.0
        self.never_boot = ()        # fnmatch patterns on instance name, group name or group ID
        self.quota = None           # the most instances the project may hold
        self.boot_delay = 0.3       # seconds from creation to RUNNING
        self.op_delay = 0.05        # seconds an operation stays RUNNING
        self.paths = ()             # when set, faults hit only paths containing one of these strings
        self.fail_after = False     # answer the error after applying the request (a lost answer)
        self.insert_delay = 0.1     # seconds a new instance reads "not found" (no instance resource yet)
        # Seconds a deleted instance stays listed (currentAction DELETING, STOPPING). GCE takes tens of seconds; 2 s
        # keeps CI fast yet lists it for at least the pass after the deletion, so the lingering path runs every time.
        self.delete_delay = 2.0
        self.list_lag = 0.0         # seconds a new managed instance is missing from listManagedInstances
        self.page_size = 0          # when set, list pages hold at most this many items
        self.require_auth = False   # API calls need a bearer token issued at /token or added by the admin
        self.deny = ()              # path substrings answered 403 forbidden (the identity lacks the permission)
        # How a quota refusal shows: "operation" fails createInstances/resize with QUOTA_EXCEEDED; "instance"
        # accepts it and leaves the instances CREATING with lastAttempt errors, as a MIG that keeps retrying.
        self.quota_mode = "operation"
        # The next N instances createInstances accepts are refused late, each on its own: CREATING for ever with
        # lastAttempt QUOTA_EXCEEDED on a quota the region's quota list does not show (LATE_REFUSAL_MESSAGE), as a
        # MIG that retries an instance GCE refuses after the request was accepted.
        self.late_refusals = 0
        # GCE's proactive instance redistribution (the default of a regional group): when a group's zones have been
        # more than one VM apart this long, it deletes a VM in the fullest zone (no drain) and creates one in the
        # emptiest. Off: such groups stay as they are, as with updatePolicy.instanceRedistributionType NONE.
        self.redistribution = True
        self.redistribution_delay = 1.0
        # Autoscalers that exist act (they exist only where a test attaches one): a group off its autoscaler's
        # recommended size this long is resized to it. GCE's autoscaler decides every few tens of seconds.
        self.autoscaling = True
        self.autoscaling_delay = 1.0
        # Autohealing of groups with autoHealingPolicies: a VM failing its health check this long is recreated.
        self.autohealing = True
        self.autohealing_delay = 1.0
        self.seed = None            # when set, the error_rate draws repeat from run to run
        self._count = itertools.count()
        self._rng = random.Random()

    def update(self, **knobs):
        for key, value in knobs.items():
            if not hasattr(self, key) or key.startswith("_"):
                raise ApiError(400, "unknown fault knob %r" % key)
            if key in ("codes", "never_boot", "paths", "deny"):
                value = tuple(value or ())
            if key == "seed" and value is not None:
                self._rng.seed(value)
            setattr(self, key, value)

    def as_dict(self):
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(self).items() if not k.startswith("_")}

    def pick_error(self, path):
        if self.paths and not any(p in path for p in self.paths):
            return None
        if self.fail_next > 0:
            self.fail_next -= 1
        elif not (self.error_rate and self._rng.random() < self.error_rate):
            return None
        codes = self.codes or (503,)
        code = int(codes[next(self._count) % len(codes)])
        return ApiError(code, {429: "Rate Limit Exceeded", 500: "Internal error. Please try again.",
                               503: "The service is currently unavailable."}.get(code, "Injected fault %d" % code))


class GceState:
    """Everything the emulator holds, behind one lock. Times are time.time() epochs."""

    def __init__(self, hooks=None):
        self.lock = threading.RLock()
        self.hooks = hooks or instance_hooks.NoHooks()
        self.faults = Faults()
        self.images = {}        # (project, name) -> image
        self.image_order = {}   # (project, name) -> creation sequence number
        self.templates = {}     # (project, name) -> template
        self.instances = {}     # (project, zone, name) -> instance
        self.disks = {}         # (project, zone, name) -> disk
        self.igms = {}          # (project, "zones"|"regions", scope, name) -> igm (with private "_" keys)
        self.operations = {}    # (project, "zones"|"regions"|"global", scope, name) -> operation
        self.request_log = []
        # User-Agent and x-goog-api-client (where google-cloud-compute puts its client_info) -> requests;
        # kept out of the request log, whose shapes tests compare.
        self.user_agents = collections.Counter()
        self.request_ids = {}   # requestId -> operation key, so a retried mutation is not applied twice
        self.redistributions = []   # what proactive redistribution deleted: {group, deleted, zone, at}
        self.autoscalers = {}       # (project, "zones"|"regions", scope, name) -> autoscaler (private "_" keys)
        self.autoscalings = []      # what the autoscalers did: {group, autoscaler, size, deleted, at}
        self.autoheals = []         # what autohealing recreated: {group, instance, at}
        self.service_accounts = {}   # client_email -> public key PEM (the key JSON holds the private key)
        self.tokens = set()          # bearer tokens the API accepts when faults.require_auth is on
        self.token_grants = []       # the verified claims of every JWT assertion exchanged at /token
        self._op_counter = itertools.count(1)

    # ---- helpers -------------------------------------------------------------------------------------
    @staticmethod
    def project_number(project):
        return _numeric_id("project", project)[:12]

    def _operation(self, project, scope_kind, scope, op_type, target_link, error=None):
        name = "operation-%d-%s" % (int(time.time() * 1000), next(self._op_counter))
        now = time.time()
        op = {"kind": "compute#operation", "id": _numeric_id(project, name), "name": name,
              "operationType": op_type, "targetLink": target_link, "status": "RUNNING", "progress": 0,
              "insertTime": _rfc3339(now), "startTime": _rfc3339(now), "user": "sandbox@kubenodes.invalid",
              "_done_at": now + self.faults.op_delay, "_error": error}
        if scope_kind == "global":
            op["selfLink"] = API + "projects/%s/global/operations/%s" % (project, name)
        else:
            op[scope_kind[:-1]] = API + "projects/%s/%s/%s" % (project, scope_kind, scope)
            op["selfLink"] = API + "projects/%s/%s/%s/operations/%s" % (project, scope_kind, scope, name)
        self.operations[(project, scope_kind, scope, name)] = op
        return self._op_view(op)

    def _op_view(self, op):
        view = {k: v for k, v in op.items() if not k.startswith("_")}
        if time.time() >= op["_done_at"]:
            view.update(status="DONE", progress=100, endTime=_rfc3339(op["_done_at"]))
            if op["_error"]:
                code, status, message = op["_error"]
                view.update(httpErrorStatusCode=status, httpErrorMessage=_STATUS_OF_CODE.get(status, "ERROR"),
                            error={"errors": [{"code": code, "message": message}]})
        return view

    def image_url(self, project, name):
        return API + "projects/%s/global/images/%s" % (project, name)

    def template_url(self, project, name):
        return API + "projects/%s/global/instanceTemplates/%s" % (project, name)

    def igm_url(self, key):
        project, kind, scope, name = key
        return API + "projects/%s/%s/%s/instanceGroupManagers/%s" % (project, kind, scope, name)

    def resolve_image(self, ref):
        """The image dict for a sourceImage value (URL, relative, or family form); ApiError if absent."""
        rel = _relative(ref)
        match = re.match(r"^projects/([^/]+)/global/images/(family/)?([^/]+)$", rel)
        if not match:
            raise ApiError(400, "Invalid value for field 'sourceImage': '%s'. The URL is malformed." % ref)
        project, family, name = match.groups()
        if family:
            image = self._latest_in_family(project, name)
        else:
            image = self.images.get((project, name))
        if image is None:
            raise ApiError(404, "The resource '%s' was not found" % rel)
        return image

    def _latest_in_family(self, project, family):
        # The newest non-deprecated image of the family; creation order breaks ties within a millisecond.
        candidates = [(self.image_order[key], i) for key, i in self.images.items()
                      if key[0] == project and i.get("family") == family and "deprecated" not in i]
        return max(candidates, key=lambda c: c[0])[1] if candidates else None

    def template_image(self, template):
        for disk in template["properties"].get("disks", []):
            if disk.get("boot"):
                return disk.get("initializeParams", {}).get("sourceImage", "")
        return ""

    # ---- admin ---------------------------------------------------------------------------------------
    def admin_create_image(self, name, project=DEFAULT_PROJECT, family=None, status="READY", deprecated=None):
        with self.lock:
            if not NAME_RE.match(name):
                raise ApiError(400, "Invalid value for field 'resource.name': '%s'." % name)
            image = {"kind": "compute#image", "id": _numeric_id(project, "image", name), "name": name,
                     "creationTimestamp": _rfc3339(time.time()), "selfLink": self.image_url(project, name),
                     "status": status, "sourceType": "RAW", "diskSizeGb": "10", "architecture": "X86_64",
                     "labels": {}}
            if family:
                image["family"] = family
            if deprecated:
                image["deprecated"] = {"state": deprecated}
            self.images[(project, name)] = image
            self.image_order[(project, name)] = next(self._op_counter)
            return "projects/%s/global/images/%s" % (project, name)

    def admin_create_group(self, name, role, size, image, project=DEFAULT_PROJECT, zone=None, region=None,
                           update_policy="OPPORTUNISTIC", versions=1, redistribution="PROACTIVE", autohealing=False):
        with self.lock:
            if zone and region:
                raise ApiError(400, "give zone or region, not both")
            if not zone and not region:
                zone = DEFAULT_REGION + "-a"
            self.resolve_image(image)
            template_name = "%s-tmpl" % name
            template = {"name": template_name, "properties": {
                "machineType": "e2-standard-2", "labels": {"kubenodes-role": role},
                "disks": [{"boot": True, "autoDelete": True, "type": "PERSISTENT", "mode": "READ_WRITE",
                           "initializeParams": {"sourceImage": image, "diskSizeGb": "20"}}],
                "networkInterfaces": [{"network": API + "projects/%s/global/networks/default" % project}],
                "metadata": {"items": [{"key": "kube-role", "value": role}]}}}
            self._insert_template(project, template)
            kind, scope = ("zones", zone) if zone else ("regions", region)
            key = (project, kind, scope, name)
            if key in self.igms:
                raise ApiError(409, "The resource '%s' already exists" % _relative(self.igm_url(key)))
            now = time.time()
            igm = {"kind": "compute#instanceGroupManager", "id": _numeric_id(*key), "name": name,
                   "creationTimestamp": _rfc3339(now), "selfLink": self.igm_url(key), "baseInstanceName": name,
                   "instanceTemplate": self.template_url(project, template_name),
                   "versions": [{"instanceTemplate": self.template_url(project, template_name)}],
                   "instanceGroup": API + "projects/%s/%s/%s/instanceGroups/%s" % (project, kind, scope, name),
                   "targetSize": 0, "fingerprint": "AAAAAAAAAAA=",
                   "updatePolicy": {"type": update_policy, "minimalAction": "REPLACE",
                                    "maxSurge": {"fixed": 1}, "maxUnavailable": {"fixed": 1}},
                   "_managed": {}, "_role": role}
            if zone:
                igm["zone"] = API + "projects/%s/zones/%s" % (project, zone)
            else:
                igm["region"] = API + "projects/%s/regions/%s" % (project, region)
                igm["distributionPolicy"] = {"zones": [{"zone": API + "projects/%s/zones/%s-%s" % (project, region, z)}
                                                       for z in "abc"], "targetShape": "EVEN"}
                # Regional groups only; PROACTIVE is GCE's default.
                igm["updatePolicy"]["instanceRedistributionType"] = redistribution
            if autohealing:
                igm["autoHealingPolicies"] = [{"healthCheck": API + "projects/%s/global/healthChecks/%s-hc" % (project, name),
                                               "initialDelaySec": 300}]
            if versions > 1:   # a canary update in progress: several versions, no top-level template
                igm["versions"] = [dict(igm["versions"][0], name="v%d" % i) for i in range(versions)]
            self.igms[key] = igm
            if size:
                self._check_quota(project, size)
                self._add_instances(key, [self._random_name(key) for _ in range(size)])
            return "projects/%s/%s/%s/instanceGroupManagers/%s" % key

    def admin_create_autoscaler(self, group_id, recommended, mode="ON", name=None):
        """An autoscaler attached to the group, which it names in its status.autoscaler; `recommended` stands in for
        what the autoscaler computes from the load (the emulator has no metrics)."""
        with self.lock:
            match = re.match(r"^projects/([^/]+)/(zones|regions)/([^/]+)/instanceGroupManagers/([^/]+)$", group_id)
            if not match or match.groups() not in self.igms:
                raise ApiError(404, "no group %s" % group_id)
            project, kind, scope, group = match.groups()
            key = (project, kind, scope, name or group + "-autoscaler")
            url = API + "projects/%s/%s/%s/autoscalers/%s" % key
            self.autoscalers[key] = {
                "kind": "compute#autoscaler", "id": _numeric_id(*key), "name": key[3], "selfLink": url,
                "creationTimestamp": _rfc3339(time.time()), "target": self.igm_url(match.groups()),
                ("region" if kind == "regions" else "zone"): API + "projects/%s/%s/%s" % (project, kind, scope),
                "autoscalingPolicy": {"mode": mode, "minNumReplicas": 0, "maxNumReplicas": 1000,
                                      "coolDownPeriodSec": 60, "cpuUtilization": {"utilizationTarget": 0.6}},
                "status": "ACTIVE", "recommendedSize": int(recommended), "_group": match.groups()}
            self.igms[match.groups()]["_autoscaler"] = url
            return url

    def _autoscale(self, now):
        """Each autoscaler (faults.autoscaling) resizes its group to its recommended size once the group has been
        another size for autoscaling_delay seconds: ON both ways, ONLY_SCALE_OUT only up, OFF never. A scale-in
        deletes the newest VMs, without a drain."""
        for autoscaler in self.autoscalers.values():
            igm = self.igms.get(autoscaler["_group"])
            mode = autoscaler["autoscalingPolicy"].get("mode", "ON")
            if igm is None:
                continue
            live = [n for n, m in igm["_managed"].items() if m["currentAction"] != "DELETING"]
            wanted = autoscaler["recommendedSize"]
            acts = self.faults.autoscaling and (mode == "ON" and len(live) != wanted or
                                                mode == "ONLY_SCALE_OUT" and len(live) < wanted)
            if not acts:
                autoscaler.pop("_off_since", None)
                continue
            if now - autoscaler.setdefault("_off_since", now) < float(self.faults.autoscaling_delay):
                continue
            del autoscaler["_off_since"]
            deleted = sorted(live, key=lambda n: (-igm["_managed"][n]["_created"], n))[:max(0, len(live) - wanted)]
            for name in deleted:
                self._delete_managed(autoscaler["_group"], name)
            if len(live) < wanted:
                self._add_instances(autoscaler["_group"], [self._random_name(autoscaler["_group"])
                                                           for _ in range(wanted - len(live))])
            igm["targetSize"] = wanted
            self.autoscalings.append(dict(group="projects/%s/%s/%s/instanceGroupManagers/%s" % autoscaler["_group"],
                                          autoscaler=autoscaler["name"], size=wanted, deleted=deleted, at=now))

    def _insert_template(self, project, template):
        name = template.get("name", "")
        if not NAME_RE.match(name):
            raise ApiError(400, "Invalid value for field 'resource.name': '%s'. Must be a match of regex "
                                "'(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'" % name)
        if (project, name) in self.templates:
            raise ApiError(409, "The resource 'projects/%s/global/instanceTemplates/%s' already exists"
                           % (project, name), "alreadyExists")
        props = template.get("properties")
        if not isinstance(props, dict):
            raise ApiError(400, "Required field 'resource.properties' not specified")
        unknown = set(props) - PROPERTIES_FIELDS
        if unknown:
            raise ApiError(400, "Invalid JSON payload received. Unknown name \"%s\" at 'instance_template."
                                "properties': Cannot find field." % sorted(unknown)[0])
        boot = [d for d in props.get("disks", []) if d.get("boot")]
        if len(boot) != 1 or not boot[0].get("initializeParams", {}).get("sourceImage"):
            raise ApiError(400, "Invalid value for field 'resource.properties.disks': exactly one boot disk "
                                "with initializeParams.sourceImage is required.")
        self.resolve_image(boot[0]["initializeParams"]["sourceImage"])
        stored = {k: v for k, v in template.items() if k in TEMPLATE_FIELDS}
        stored.update(kind="compute#instanceTemplate", id=_numeric_id(project, "template", name),
                      creationTimestamp=_rfc3339(time.time()), selfLink=self.template_url(project, name))
        self.templates[(project, name)] = json.loads(json.dumps(stored))
        return stored

    def admin_snapshot(self):
        with self.lock:
            self.advance()
            return {"instances": sorted("%s/%s/%s" % k for k in self.instances),
                    "groups": {"projects/%s/%s/%s/instanceGroupManagers/%s" % key: {
                        "target_size": igm["targetSize"], "template": _basename(igm["instanceTemplate"]),
                        "managed": {n: {k: v for k, v in m.items() if not k.startswith("_")}
                                    for n, m in igm["_managed"].items()}}
                        for key, igm in self.igms.items()},
                    "templates": sorted(n for _, n in self.templates),
                    "images": sorted(n for _, n in self.images),
                    "redistributions": list(self.redistributions),
                    "autoscalings": list(self.autoscalings),
                    "autoheals": list(self.autoheals),
                    "faults": self.faults.as_dict()}

    # ---- instance lifecycle --------------------------------------------------------------------------
    def _random_name(self, key):
        igm = self.igms[key]
        for _ in range(100):
            name = "%s-%s" % (igm["baseInstanceName"],
                              "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(4)))
            if name not in igm["_managed"]:
                return name
        raise ApiError(500, "could not pick a free instance name")

    def _instance_count(self, project):
        return sum(len([m for m in igm["_managed"].values() if m["currentAction"] != "DELETING"])
                   for key, igm in self.igms.items() if key[0] == project)

    def _quota_allows_one(self, project):
        quota = self.faults.quota
        running = sum(1 for k, igm in self.igms.items() if k[0] == project for m in igm["_managed"].values()
                      if m["currentAction"] != "DELETING" and not m.get("_blocked"))
        return quota is None or running < quota

    def _check_quota(self, project, more):
        quota = self.faults.quota
        if quota is not None and self._instance_count(project) + more > quota:
            raise ApiError(403, "Quota 'INSTANCES' exceeded. Limit: %s.0 in region %s." % (quota, DEFAULT_REGION),
                           "quotaExceeded")

    def _pick_zone(self, key):
        project, kind, scope, _ = key
        if kind == "zones":
            return scope
        igm = self.igms[key]
        zones = [_basename(z["zone"]) for z in igm["distributionPolicy"]["zones"]]
        load = {z: 0 for z in zones}
        for m in igm["_managed"].values():
            load[m["_zone"]] = load.get(m["_zone"], 0) + 1
        return min(zones, key=lambda z: (load[z], z))

    def _never_boots(self, key, name):
        group_id = "projects/%s/%s/%s/instanceGroupManagers/%s" % key
        return any(fnmatch.fnmatchcase(target, pattern) for pattern in self.faults.never_boot
                   for target in (name, key[3], group_id))

    def _add_instances(self, key, names, blocked_by=None, late=False):
        """New managed instances; with blocked_by, each stays CREATING with that QUOTA_EXCEEDED error until the
        instance quota frees (late: for ever, and a regional MIG chose its zone before the attempt failed, so the
        instance has its URL and can be deleted)."""
        igm = self.igms[key]
        now = time.time()
        for name in names:
            if blocked_by:
                # A zonal MIG knows the instance URL already; a regional one has not picked the zone yet.
                zone = key[2] if key[1] == "zones" else (self._pick_zone(key) if late else "")
                igm["_managed"][name] = {
                    "name": name, "id": _numeric_id(key[0], "pending", name), "currentAction": "CREATING",
                    "instance": API + "projects/%s/zones/%s/instances/%s" % (key[0], zone, name) if zone else "",
                    "version": {"instanceTemplate": igm["instanceTemplate"]}, "_zone": zone,
                    "_created": now, "_never_boot": self._never_boots(key, name), "_blocked": True, "_late": late,
                    "_errors": [{"code": "QUOTA_EXCEEDED", "message": blocked_by}],
                    "_insert_at": float("inf"), "_running_at": float("inf")}
                igm["targetSize"] += 1
                continue
            zone = self._pick_zone(key)
            igm["_managed"][name] = {
                "name": name, "id": _numeric_id(key[0], zone, name), "currentAction": "CREATING",
                "instance": API + "projects/%s/zones/%s/instances/%s" % (key[0], zone, name),
                "version": {"instanceTemplate": igm["instanceTemplate"]},
                "_zone": zone, "_created": now, "_never_boot": self._never_boots(key, name),
                # The instance resource appears a moment after the request: until then it reads "not found".
                "_insert_at": now + min(self.faults.insert_delay, self.faults.boot_delay),
                "_running_at": now + self.faults.boot_delay}
            igm["targetSize"] += 1

    def _materialise(self, key, managed):
        """Create the instance and its boot disk resources for a managed instance."""
        project, _, _, group = key
        igm = self.igms[key]
        zone, name = managed["_zone"], managed["name"]
        template = self.templates.get((project, _basename(managed["version"]["instanceTemplate"])))
        image_ref = self.template_image(template) if template else ""
        try:
            image = self.resolve_image(image_ref)
            image_url, image_id = image["selfLink"], image["id"]
        except ApiError:
            image_url, image_id = image_ref, ""
        disk_url = API + "projects/%s/zones/%s/disks/%s" % (project, zone, name)
        self.disks[(project, zone, name)] = {
            "kind": "compute#disk", "id": _numeric_id(project, zone, "disk", name), "name": name,
            "zone": API + "projects/%s/zones/%s" % (project, zone), "selfLink": disk_url, "status": "READY",
            "sourceImage": image_url, "sourceImageId": image_id, "sizeGb": "20",
            "creationTimestamp": _rfc3339(managed["_created"]),
            "type": API + "projects/%s/zones/%s/diskTypes/pd-balanced" % (project, zone)}
        kind, scope = key[1], key[2]
        self.instances[(project, zone, name)] = {
            "kind": "compute#instance", "id": managed["id"], "name": name,
            "creationTimestamp": _rfc3339(managed["_created"]), "status": "PROVISIONING",
            "zone": API + "projects/%s/zones/%s" % (project, zone), "selfLink": managed["instance"],
            "machineType": API + "projects/%s/zones/%s/machineTypes/e2-standard-2" % (project, zone),
            "disks": [{"kind": "compute#attachedDisk", "type": "PERSISTENT", "mode": "READ_WRITE", "boot": True,
                       "autoDelete": True, "deviceName": "persistent-disk-0", "index": 0, "source": disk_url}],
            "metadata": {"kind": "compute#metadata", "items": [
                {"key": "created-by", "value": "projects/%s/%s/%s/instanceGroupManagers/%s"
                                                % (self.project_number(project), kind, scope, group)},
                {"key": "instance-template", "value": "projects/%s/global/instanceTemplates/%s"
                                                       % (self.project_number(project),
                                                          _basename(managed["version"]["instanceTemplate"]))}]},
            "labels": {}, "networkInterfaces": [{"networkIP": "10.0.0.%d" % random.randint(2, 250)}]}
        managed["_image"] = _relative(image_url)

    def _delete_managed(self, key, name):
        igm = self.igms[key]
        managed = igm["_managed"][name]
        if managed["currentAction"] == "DELETING":
            return
        managed["currentAction"] = "DELETING"
        managed["_gone_at"] = time.time() + float(self.faults.delete_delay)
        instance = self.instances.get((key[0], managed["_zone"], name))
        if instance:
            instance["status"] = "STOPPING"
        igm["targetSize"] = max(0, igm["targetSize"] - 1)

    def advance(self):
        """Move instances along their lifecycle; call the hooks outside the lock."""
        events = []
        with self.lock:
            now = time.time()
            for key, igm in self.igms.items():
                for name, managed in list(igm["_managed"].items()):
                    ikey = (key[0], managed["_zone"], name)
                    if managed["currentAction"] == "DELETING":
                        if now >= managed["_gone_at"]:
                            del igm["_managed"][name]
                            existed = self.instances.pop(ikey, None) is not None
                            self.disks.pop(ikey, None)
                            if existed and managed.get("_announced"):
                                events.append(("deleted", ("gce://%s/%s/%s" % ikey,)))
                        continue
                    if managed.get("_blocked"):
                        if managed.get("_late") or not self._quota_allows_one(key[0]):
                            continue
                        # Quota freed: the MIG's next attempt succeeds.
                        zone = self._pick_zone(key)
                        managed.update(_blocked=False, _errors=[], _zone=zone, _created=now,
                                       instance=API + "projects/%s/zones/%s/instances/%s" % (key[0], zone, name),
                                       _insert_at=now + min(self.faults.insert_delay, self.faults.boot_delay),
                                       _running_at=now + self.faults.boot_delay)
                        ikey = (key[0], zone, name)
                    if ikey not in self.instances and now >= managed["_insert_at"]:
                        self._materialise(key, managed)
                    instance = self.instances.get(ikey)
                    if instance is None:
                        continue
                    if managed["_never_boot"]:
                        instance["status"] = "STAGING"
                        continue
                    if now >= managed["_running_at"] and instance["status"] != "RUNNING":
                        instance["status"] = "RUNNING"
                        managed["currentAction"] = "NONE"
                        if not managed.get("_announced"):
                            managed["_announced"] = True
                            group_id = "projects/%s/%s/%s/instanceGroupManagers/%s" % key
                            events.append(("created", ("gce://%s/%s/%s" % ikey, name, group_id,
                                                       managed.get("_image", ""), igm["_role"], managed["_zone"])))
                    elif instance["status"] == "PROVISIONING" and now >= (managed["_insert_at"] + managed["_running_at"]) / 2:
                        instance["status"] = "STAGING"
                self._redistribute(key, igm, now)
                self._autoheal(key, igm, now, events)
            self._autoscale(now)
        for kind, args in events:
            try:
                getattr(self.hooks, kind)(*args)
            except Exception as exc:  # the simulator being down must not break the cloud
                print("gce emulator: hook %s%r failed: %s" % (kind, args, exc), file=sys.stderr)

    def _autoheal(self, key, igm, now, events):
        """Autohealing (faults.autohealing, groups with autoHealingPolicies): a VM marked unhealthy for
        autohealing_delay seconds is recreated in place - its instance deleted (its Node goes, no drain) and created
        again with the same name and zone from the group's current template."""
        if not self.faults.autohealing or not igm.get("autoHealingPolicies"):
            return
        for name, managed in igm["_managed"].items():
            since = managed.get("_unhealthy_since")
            if since is None or managed["currentAction"] == "DELETING" or now - since < float(self.faults.autohealing_delay):
                continue
            ikey = (key[0], managed["_zone"], name)
            if self.instances.pop(ikey, None) is not None and managed.get("_announced"):
                events.append(("deleted", ("gce://%s/%s/%s" % ikey,)))
            self.disks.pop(ikey, None)
            # "Deleted and recreated" (GCE's recreate): a new VM, so a new ID under the same name and zone.
            managed.update(currentAction="RECREATING", version={"instanceTemplate": igm["instanceTemplate"]},
                           id=_numeric_id(key[0], managed["_zone"], name, repr(now)),
                           _unhealthy_since=None, _announced=False, _created=now,
                           _insert_at=now + min(self.faults.insert_delay, self.faults.boot_delay),
                           _running_at=now + self.faults.boot_delay)
            self.autoheals.append(dict(group="projects/%s/%s/%s/instanceGroupManagers/%s" % key, instance=name, at=now))

    def admin_fail_health(self, group_id, instance):
        """The VM `instance` (a name) of the group fails its health check from now on, until autohealing recreates it."""
        with self.lock:
            match = re.match(r"^projects/([^/]+)/(zones|regions)/([^/]+)/instanceGroupManagers/([^/]+)$", group_id)
            igm = self.igms.get(match.groups()) if match else None
            if igm is None or instance not in igm["_managed"]:
                raise ApiError(404, "no instance %s in group %s" % (instance, group_id))
            igm["_managed"][instance]["_unhealthy_since"] = time.time()

    def _redistribute(self, key, igm, now):
        """Proactive instance redistribution of a regional group (faults.redistribution): zones more than one VM
        apart for redistribution_delay seconds make the group delete its oldest VM in the fullest zone, without
        a drain, and create one in the emptiest (its target size stays)."""
        policy = (igm.get("updatePolicy") or {}).get("instanceRedistributionType")
        if key[1] != "regions" or not self.faults.redistribution or policy != "PROACTIVE":
            igm.pop("_unbalanced_since", None)
            return
        zones = {_basename(z["zone"]): [] for z in igm["distributionPolicy"]["zones"]}
        for name, managed in igm["_managed"].items():
            if managed["currentAction"] != "DELETING" and managed["_zone"] in zones:
                zones[managed["_zone"]].append(name)
        fullest = max(sorted(zones), key=lambda z: len(zones[z]))
        if len(zones[fullest]) - min(len(v) for v in zones.values()) <= 1:
            igm.pop("_unbalanced_since", None)
            return
        since = igm.setdefault("_unbalanced_since", now)
        if now - since < float(self.faults.redistribution_delay):
            return
        del igm["_unbalanced_since"]
        victim = min(zones[fullest], key=lambda n: (igm["_managed"][n]["_created"], n))
        self._delete_managed(key, victim)
        self._add_instances(key, [self._random_name(key)])
        self.redistributions.append(dict(group="projects/%s/%s/%s/instanceGroupManagers/%s" % key, deleted=victim,
                                         zone=fullest, at=now))

    # ---- views ---------------------------------------------------------------------------------------
    def managed_view(self, managed):
        view = {k: v for k, v in managed.items() if not k.startswith("_") and v != ""}
        project = _relative(managed["instance"]).split("/")[1] if managed["instance"] else None
        instance = self.instances.get((project, managed["_zone"], managed["name"]))
        if instance:
            view["instanceStatus"] = instance["status"]
        if managed.get("_errors"):
            view["lastAttempt"] = {"errors": {"errors": managed["_errors"]}}
        return view

    def igm_view(self, key):
        igm = self.igms[key]
        view = {k: v for k, v in igm.items() if not k.startswith("_")}
        actions = {a: 0 for a in ("abandoning", "creating", "creatingWithoutRetries", "deleting", "none",
                                  "recreating", "refreshing", "restarting", "resuming", "starting", "stopping",
                                  "suspending", "verifying")}
        for managed in igm["_managed"].values():
            action = {"CREATING": "creating", "DELETING": "deleting"}.get(managed["currentAction"], "none")
            actions[action] += 1
        view["currentActions"] = actions
        stable = actions["creating"] == 0 and actions["deleting"] == 0
        current = igm["instanceTemplate"]
        reached = all(m["version"]["instanceTemplate"] == current for m in igm["_managed"].values())
        view["status"] = {"isStable": stable, "versionTarget": {"isReached": reached},
                          "allInstancesConfig": {"effective": True}, "stateful": {"hasStatefulConfig": False}}
        if igm.get("_autoscaler"):
            view["status"]["autoscaler"] = igm["_autoscaler"]
        return view


def _b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _verify_assertion(assertion, accounts):
    """The claims of a service account's RS256 JWT assertion, after checking its signature, issuer and
    expiry; ValueError says what is wrong."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding
    try:
        header_b64, payload_b64, signature_b64 = assertion.split(".")
        header = json.loads(_b64url_decode(header_b64))
        claims = json.loads(_b64url_decode(payload_b64))
    except ValueError:
        raise ValueError("the assertion is not a JWT")
    if header.get("alg") != "RS256":
        raise ValueError("unsupported JWT algorithm %r" % header.get("alg"))
    public_pem = accounts.get(claims.get("iss"))
    if public_pem is None:
        raise ValueError("unknown service account %r" % claims.get("iss"))
    try:
        serialization.load_pem_public_key(public_pem.encode()).verify(
            _b64url_decode(signature_b64), ("%s.%s" % (header_b64, payload_b64)).encode(), padding.PKCS1v15(),
            hashes.SHA256())
    except InvalidSignature:
        raise ValueError("Invalid JWT Signature.")
    if not claims.get("exp") or claims["exp"] < time.time():
        raise ValueError("the JWT has expired")
    return claims


def _new_service_account(state, email, project, base_url):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()).decode()
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    with state.lock:
        state.service_accounts[email] = public_pem
    return {"type": "service_account", "project_id": project, "private_key_id": uuid.uuid4().hex,
            "private_key": private_pem, "client_email": email, "client_id": _numeric_id("sa", email),
            "token_uri": base_url + "/token", "auth_uri": base_url + "/auth"}


class GceEmulator:
    """The HTTP server around a GceState. start() binds a free port on 127.0.0.1; stop() shuts it down."""

    def __init__(self, hooks=None, host="127.0.0.1", state_dir=None, tls_dir=None):
        self.state = GceState(hooks)
        self.host = host
        self.state_dir = state_dir
        self.tls_dir = tls_dir      # serve HTTPS with a sandbox CA kept here (for private-endpoint setups)
        self.ca_cert = None
        self._server = None
        self._threads = []
        self._stop = threading.Event()

    @property
    def endpoint(self):
        return "%s://%s:%d" % ("https" if self.tls_dir else "http", self.host, self._server.server_address[1])

    def start(self):
        handler = type("Handler", (_Handler,), {"state": self.state})
        self._server = ThreadingHTTPServer((self.host, 0), handler)
        self._server.daemon_threads = True
        if self.tls_dir:
            from sandbox import pki
            ca = pki.CA(self.tls_dir, name="gce-ca")
            cert, key = ca.issue("gce-server", "gce emulator", hosts=[self.host, "localhost"])
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(cert), str(key))
            # The handshake happens in the handler thread, so a stalled client cannot block accept().
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True,
                                                      do_handshake_on_connect=False)
            self.ca_cert = str(ca.cert_path)
        serve = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        tick = threading.Thread(target=self._tick, daemon=True)
        self._threads = [serve, tick]
        for thread in self._threads:
            thread.start()
        return self

    def _tick(self):
        while not self._stop.wait(0.05):
            self.state.advance()

    def stop(self):
        self._stop.set()
        if self._server:
            self._server.shutdown()
            self._server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)

    def info(self):
        return {"cloud": "gcp", "endpoint": self.endpoint, "ca_cert": self.ca_cert, "pid": os.getpid(),
                "project": DEFAULT_PROJECT}

    def admin(self):
        return Admin(self.info())

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


# ---- routing ---------------------------------------------------------------------------------------------
ROUTES = []


def route(method, template, query=(), body=None):
    """Register a handler for METHOD /compute/v1/<template>. `query`: the method-specific query parameters;
    `body`: the allowed top-level body fields (None: the method takes no body)."""
    pattern = "^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", template) + "$"

    def register(func):
        ROUTES.append((method, template, re.compile(pattern), set(query), body, func))
        return func
    return register


def _page(state, items, query, key, kind):
    try:
        # The API caps pages at 500; the page_size knob makes paging visible with few instances.
        size = min(int(query.get("maxResults", 500)), 500, state.faults.page_size or 500)
        start = int(query.get("pageToken") or 0)
    except ValueError:
        raise ApiError(400, "Invalid value for pageToken or maxResults")
    result = {"kind": kind, key: items[start:start + size]}
    if start + size < len(items):
        result["nextPageToken"] = str(start + size)
    return result


def _filter(items, expression):
    """The subset of the list filter syntax the collection uses: `name eq "<regex>"` (full match) and
    `name = "<literal>"`. Anything else is refused rather than ignored."""
    if not expression:
        return items
    match = re.match(r'^\s*\(?\s*name\s+(eq|ne|=|!=)\s+"?([^"]*)"?\s*\)?\s*$', expression)
    if not match:
        raise ApiError(400, "Invalid list filter expression '%s'." % expression)
    op, value = match.groups()
    if op in ("eq", "ne"):
        test = lambda n: re.fullmatch(value, n) is not None  # noqa: E731
    else:
        test = lambda n: n == value  # noqa: E731
    return [i for i in items if test(i["name"]) == (op in ("eq", "="))]


def _need_project(state, project):
    if not NAME_RE.match(project) and not project.isdigit():
        raise ApiError(400, "Invalid value for field 'project': '%s'." % project)


def _need_zone(zone):
    if not ZONE_RE.match(zone):
        raise ApiError(400, "Invalid value for field 'zone': '%s'. Unknown zone." % zone, "invalid")


def _need_region(region):
    if not REGION_RE.match(region):
        raise ApiError(400, "Invalid value for field 'region': '%s'. Unknown region." % region, "invalid")


def _scope_check(kind, scope):
    (_need_zone if kind == "zones" else _need_region)(scope)


def _igm_key(state, p, kind, scope, m):
    _scope_check(kind, scope)
    key = (p, kind, scope, m)
    if key not in state.igms:
        raise ApiError(404, "The resource 'projects/%s/%s/%s/instanceGroupManagers/%s' was not found" % key)
    return key


@route("GET", "projects/{p}/global/images/{name}")
def get_image(state, q, body, p, name):
    image = state.images.get((p, name))
    if image is None:
        raise ApiError(404, "The resource 'projects/%s/global/images/%s' was not found" % (p, name))
    return image


@route("GET", "projects/{p}/global/images/family/{family}")
def get_image_from_family(state, q, body, p, family):
    image = state._latest_in_family(p, family)
    if image is None:
        raise ApiError(404, "The resource 'projects/%s/global/images/family/%s' was not found" % (p, family))
    return image


@route("GET", "projects/{p}/global/images", LIST_QUERY)
def list_images(state, q, body, p):
    items = _filter([i for (pp, _), i in sorted(state.images.items()) if pp == p], q.get("filter"))
    return _page(state, items, q, "items", "compute#imageList")


@route("GET", "projects/{p}/global/instanceTemplates/{name}")
def get_template(state, q, body, p, name):
    template = state.templates.get((p, name))
    if template is None:
        raise ApiError(404, "The resource 'projects/%s/global/instanceTemplates/%s' was not found" % (p, name))
    return template


@route("GET", "projects/{p}/global/instanceTemplates", LIST_QUERY)
def list_templates(state, q, body, p):
    items = _filter([t for (pp, _), t in sorted(state.templates.items()) if pp == p], q.get("filter"))
    return _page(state, items, q, "items", "compute#instanceTemplateList")


@route("POST", "projects/{p}/global/instanceTemplates", {"requestId"}, TEMPLATE_FIELDS)
def insert_template(state, q, body, p):
    stored = state._insert_template(p, body)
    return state._operation(p, "global", None, "compute.instanceTemplates.insert", stored["selfLink"])


@route("DELETE", "projects/{p}/global/instanceTemplates/{name}", {"requestId"})
def delete_template(state, q, body, p, name):
    if (p, name) not in state.templates:
        raise ApiError(404, "The resource 'projects/%s/global/instanceTemplates/%s' was not found" % (p, name))
    url = state.template_url(p, name)
    if any(url == igm["instanceTemplate"] for igm in state.igms.values()):
        raise ApiError(400, "The instance_template resource '%s' is already being used by an instance group "
                            "manager" % _relative(url), "resourceInUseByAnotherResource")
    del state.templates[(p, name)]
    return state._operation(p, "global", None, "compute.instanceTemplates.delete", url)


@route("GET", "projects/{p}/zones/{zone}/instances/{name}")
def get_instance(state, q, body, p, zone, name):
    _need_zone(zone)
    instance = state.instances.get((p, zone, name))
    if instance is None:
        raise ApiError(404, "The resource 'projects/%s/zones/%s/instances/%s' was not found" % (p, zone, name))
    return instance


@route("GET", "projects/{p}/zones/{zone}/instances", LIST_QUERY)
def list_instances(state, q, body, p, zone):
    _need_zone(zone)
    items = _filter([i for (pp, z, _), i in sorted(state.instances.items()) if pp == p and z == zone],
                    q.get("filter"))
    return _page(state, items, q, "items", "compute#instanceList")


@route("GET", "projects/{p}/zones/{zone}/disks/{name}")
def get_disk(state, q, body, p, zone, name):
    _need_zone(zone)
    disk = state.disks.get((p, zone, name))
    if disk is None:
        raise ApiError(404, "The resource 'projects/%s/zones/%s/disks/%s' was not found" % (p, zone, name))
    return disk


def _get_operation(state, p, kind, scope, name):
    op = state.operations.get((p, kind, scope, name))
    if op is None:
        where = "global" if kind == "global" else "%s/%s" % (kind, scope)
        raise ApiError(404, "The resource 'projects/%s/%s/operations/%s' was not found" % (p, where, name))
    return op


def _wait_operation(state, p, kind, scope, name):
    # Like the real API: return when DONE or after a while (here at most 2 s), whichever comes first.
    op = _get_operation(state, p, kind, scope, name)
    state.lock.release()
    try:
        time.sleep(max(0.0, min(2.0, op["_done_at"] - time.time())))
    finally:
        state.lock.acquire()
    return state._op_view(op)


def _list_operations(state, q, p, kind, scope):
    # zoneOperations.list / regionOperations.list: the scope's operations, filtered as other lists are (the real API
    # documents `filter` for them: "name eq <RE2 regex>" must match the whole name).
    items = _filter([state._op_view(op) for (pp, k, sc, _), op in sorted(state.operations.items())
                     if (pp, k, sc) == (p, kind, scope)], q.get("filter"))
    return _page(state, items, q, "items", "compute#operationList")


@route("GET", "projects/{p}/zones/{zone}/operations", LIST_QUERY)
def list_zone_operations(state, q, body, p, zone):
    _need_zone(zone)
    return _list_operations(state, q, p, "zones", zone)


@route("GET", "projects/{p}/regions/{region}/operations", LIST_QUERY)
def list_region_operations(state, q, body, p, region):
    _need_region(region)
    return _list_operations(state, q, p, "regions", region)


@route("GET", "projects/{p}/zones/{zone}/operations/{name}")
def get_zone_operation(state, q, body, p, zone, name):
    _need_zone(zone)
    return state._op_view(_get_operation(state, p, "zones", zone, name))


@route("POST", "projects/{p}/zones/{zone}/operations/{name}/wait", (), set())
def wait_zone_operation(state, q, body, p, zone, name):
    _need_zone(zone)
    return _wait_operation(state, p, "zones", zone, name)


@route("GET", "projects/{p}/regions/{region}/operations/{name}")
def get_region_operation(state, q, body, p, region, name):
    _need_region(region)
    return state._op_view(_get_operation(state, p, "regions", region, name))


@route("POST", "projects/{p}/regions/{region}/operations/{name}/wait", (), set())
def wait_region_operation(state, q, body, p, region, name):
    _need_region(region)
    return _wait_operation(state, p, "regions", region, name)


@route("GET", "projects/{p}/global/operations/{name}")
def get_global_operation(state, q, body, p, name):
    return state._op_view(_get_operation(state, p, "global", None, name))


@route("POST", "projects/{p}/global/operations/{name}/wait", (), set())
def wait_global_operation(state, q, body, p, name):
    return _wait_operation(state, p, "global", None, name)


@route("GET", "projects/{p}/aggregated/instanceGroupManagers", LIST_QUERY | {"includeAllScopes", "serviceProjectNumber"})
def aggregated_igms(state, q, body, p):
    scoped = {}
    for key in sorted(state.igms):
        if key[0] != p:
            continue
        scope = "%s/%s" % (key[1], key[2])
        if _filter([state.igms[key]], q.get("filter")):
            scoped.setdefault(scope, {"instanceGroupManagers": []})["instanceGroupManagers"].append(state.igm_view(key))
    return {"kind": "compute#instanceGroupManagerAggregatedList", "id": "projects/%s/aggregated/instanceGroupManagers" % p,
            "items": scoped, "selfLink": API + "projects/%s/aggregated/instanceGroupManagers" % p}


# Generous regional quotas when the quota knob is unset; the knob caps INSTANCES only (its refusal names it).
REGION_QUOTA_LIMITS = {"INSTANCES": 6000.0, "CPUS": 2400.0, "N2_CPUS": 2400.0, "SSD_TOTAL_GB": 81920.0,
                       "IN_USE_ADDRESSES": 690.0}
MACHINE_TYPE_RE = re.compile(r"^[a-z][a-z0-9]*-(standard|highmem|highcpu|custom)-(\d+)(-\d+)?$")


@route("GET", "projects/{p}/regions/{region}")
def get_region(state, q, body, p, region):
    _need_region(region)
    count = state._instance_count(p)
    # Every instance the emulator makes is an e2-standard-2 (2 CPUs, counted under CPUS as E2 is).
    usage = {"INSTANCES": count, "CPUS": 2 * count}
    quotas = []
    for metric, limit in sorted(REGION_QUOTA_LIMITS.items()):
        if metric == "INSTANCES" and state.faults.quota is not None:
            limit = float(state.faults.quota)
        quotas.append({"metric": metric, "limit": limit, "usage": float(usage.get(metric, 0))})
    return {"kind": "compute#region", "id": _numeric_id(p, "region", region), "name": region, "status": "UP",
            "creationTimestamp": "1969-12-31T16:00:00.000-08:00", "description": region,
            "selfLink": API + "projects/%s/regions/%s" % (p, region),
            "zones": [API + "projects/%s/zones/%s-%s" % (p, region, z) for z in "abc"], "quotas": quotas}


@route("GET", "projects/{p}/zones/{zone}/machineTypes/{name}")
def get_machine_type(state, q, body, p, zone, name):
    _need_zone(zone)
    match = MACHINE_TYPE_RE.match(name)
    if not match:
        raise ApiError(404, "The resource 'projects/%s/zones/%s/machineTypes/%s' was not found" % (p, zone, name))
    cpus = int(match.group(2))
    return {"kind": "compute#machineType", "id": _numeric_id(p, "machineType", name), "name": name,
            "description": "%d vCPUs" % cpus, "guestCpus": cpus, "memoryMb": cpus * 4096, "isSharedCpu": False,
            "zone": zone, "selfLink": API + "projects/%s/zones/%s/machineTypes/%s" % (p, zone, name)}


def _igm_routes(kind, var):
    base = "projects/{p}/%s/{%s}/instanceGroupManagers" % (kind, var)

    @route("GET", base, LIST_QUERY)
    def list_igms(state, q, body, p, **scope):
        scope = scope[var]
        _scope_check(kind, scope)
        items = _filter([state.igm_view(k) for k in sorted(state.igms) if k[:3] == (p, kind, scope)], q.get("filter"))
        return _page(state, items, q, "items", "compute#%sInstanceGroupManagerList" % ("region" if kind == "regions" else ""))

    @route("GET", base + "/{m}")
    def get_igm(state, q, body, p, m, **scope):
        return state.igm_view(_igm_key(state, p, kind, scope[var], m))

    @route("PATCH", base + "/{m}", {"requestId"}, {"updatePolicy"})
    def patch_igm(state, q, body, p, m, **scope):
        """A merge patch; only updatePolicy.instanceRedistributionType is served (what the collection changes)."""
        key = _igm_key(state, p, kind, scope[var], m)
        wanted = body.get("updatePolicy") or {}
        unknown = set(wanted) - {"instanceRedistributionType"}
        if unknown or not isinstance(wanted, dict):
            raise ApiError(400, "Invalid value for field 'resource.updatePolicy': the emulator serves only "
                                "instanceRedistributionType, not %s." % sorted(unknown))
        value = wanted.get("instanceRedistributionType")
        if value is not None:
            if value not in ("PROACTIVE", "NONE"):
                raise ApiError(400, "Invalid value for field 'resource.updatePolicy.instanceRedistributionType': "
                                    "'%s'." % value)
            if kind == "zones" and value == "PROACTIVE":
                raise ApiError(400, "Invalid value for field 'resource.updatePolicy.instanceRedistributionType': "
                                    "'PROACTIVE'. Proactive redistribution is supported only by regional groups.")
            state.igms[key]["updatePolicy"]["instanceRedistributionType"] = value
        return state._operation(p, kind, scope[var], "compute.instanceGroupManagers.patch", state.igm_url(key))

    @route("POST", base + "/{m}/listManagedInstances", LIST_QUERY, set())
    def list_managed(state, q, body, p, m, **scope):
        key = _igm_key(state, p, kind, scope[var], m)
        # list_lag: the API's eventual consistency, a just-created instance is not listed yet.
        visible_since = time.time() - state.faults.list_lag
        items = _filter([state.managed_view(mi) for _, mi in sorted(state.igms[key]["_managed"].items())
                         if mi["_created"] <= visible_since], q.get("filter"))
        return _page(state, items, q, "managedInstances", "compute#instanceGroupManagersListManagedInstancesResponse")

    @route("POST", base + "/{m}/createInstances", {"requestId"}, {"instances"})
    def create_instances(state, q, body, p, m, **scope):
        key = _igm_key(state, p, kind, scope[var], m)
        configs = body.get("instances")
        if not isinstance(configs, list) or not configs:
            raise ApiError(400, "Invalid value for field 'request.instances': ''. At least one instance is required.")
        names = []
        for config in configs:
            unknown = set(config) - {"name", "preservedState", "status", "fingerprint"}
            if unknown:
                raise ApiError(400, "Invalid JSON payload received. Unknown name \"%s\" at 'instances[0]': Cannot "
                                    "find field." % sorted(unknown)[0])
            name = config.get("name", "")
            if not NAME_RE.match(name):
                raise ApiError(400, "Invalid value for field 'request.instances[0].name': '%s'." % name)
            names.append(name)
        target = state.igm_url(key)
        taken = [n for n in names if n in state.igms[key]["_managed"]
                 or any(k[0] == p and k[2] == n for k in state.instances)]
        if taken:
            return state._operation(p, kind, scope[var], "compute.instanceGroupManagers.createInstances", target,
                                    ("RESOURCE_ALREADY_EXISTS", 409, "The resource '%s' already exists" % taken[0]))
        try:
            state._check_quota(p, len(names))
        except ApiError as exc:
            if state.faults.quota_mode != "instance":
                return state._operation(p, kind, scope[var], "compute.instanceGroupManagers.createInstances",
                                        target, ("QUOTA_EXCEEDED", 403, exc.message))
            state._add_instances(key, names, blocked_by=exc.message)
            return state._operation(p, kind, scope[var], "compute.instanceGroupManagers.createInstances", target)
        refused = names[:max(0, int(state.faults.late_refusals))]
        if refused:
            state.faults.late_refusals -= len(refused)
            region = scope[var] if kind == "regions" else scope[var].rsplit("-", 1)[0]
            state._add_instances(key, refused, blocked_by=LATE_REFUSAL_MESSAGE % region, late=True)
        state._add_instances(key, names[len(refused):])
        return state._operation(p, kind, scope[var], "compute.instanceGroupManagers.createInstances", target)

    @route("POST", base + "/{m}/deleteInstances", {"requestId"}, {"instances", "skipInstancesOnValidationError"})
    def delete_instances(state, q, body, p, m, **scope):
        key = _igm_key(state, p, kind, scope[var], m)
        refs = body.get("instances")
        if not isinstance(refs, list) or not refs:
            raise ApiError(400, "Invalid value for field 'request.instances': ''. At least one instance is required.")
        skip = bool(body.get("skipInstancesOnValidationError", False))
        managed = state.igms[key]["_managed"]
        chosen = []
        for ref in refs:
            match = re.match(r"^(?:projects/[^/]+/)?zones/([^/]+)/instances/([^/]+)$", _relative(ref))
            name = match.group(2) if match else None
            if not match or name not in managed or managed[name]["_zone"] != match.group(1):
                if skip:
                    continue
                raise ApiError(400, "Invalid value for field 'request.instances[0]': '%s'. The specified instance "
                                    "is not a member of the group." % ref)
            chosen.append(name)
        for name in chosen:
            state._delete_managed(key, name)
        return state._operation(p, kind, scope[var], "compute.instanceGroupManagers.deleteInstances",
                                state.igm_url(key))

    @route("POST", base + "/{m}/setInstanceTemplate", {"requestId"}, {"instanceTemplate"})
    def set_template(state, q, body, p, m, **scope):
        key = _igm_key(state, p, kind, scope[var], m)
        ref = body.get("instanceTemplate") or ""
        match = re.match(r"^projects/([^/]+)/global/instanceTemplates/([^/]+)$", _relative(ref))
        if not match or match.groups() not in state.templates:
            raise ApiError(400 if not match else 404, "Invalid value for field 'resource.instanceTemplate': '%s'. "
                           "The referenced instance template does not exist." % ref)
        url = state.template_url(*match.groups())
        state.igms[key]["instanceTemplate"] = url
        state.igms[key]["versions"] = [{"instanceTemplate": url}]
        return state._operation(p, kind, scope[var], "compute.instanceGroupManagers.setInstanceTemplate",
                                state.igm_url(key))

    @route("POST", base + "/{m}/resize", {"size", "requestId"}, set())
    def resize(state, q, body, p, m, **scope):
        key = _igm_key(state, p, kind, scope[var], m)
        try:
            size = int(q["size"])
            if size < 0:
                raise ValueError
        except (KeyError, ValueError):
            raise ApiError(400, "Invalid value for field 'size': '%s'. Must be greater than or equal to 0."
                           % q.get("size", ""))
        igm = state.igms[key]
        live = [n for n, mi in igm["_managed"].items() if mi["currentAction"] != "DELETING"]
        target = state.igm_url(key)
        op_type = "compute.instanceGroupManagers.resize"
        if size > len(live):
            try:
                state._check_quota(p, size - len(live))
            except ApiError as exc:
                return state._operation(p, kind, scope[var], op_type, target, ("QUOTA_EXCEEDED", 403, exc.message))
            state._add_instances(key, [state._random_name(key) for _ in range(size - len(live))])
        else:
            newest = sorted(live, key=lambda n: -igm["_managed"][n]["_created"])
            for name in newest[:len(live) - size]:
                state._delete_managed(key, name)
        igm["targetSize"] = size
        return state._operation(p, kind, scope[var], op_type, target)


_igm_routes("zones", "zone")
_igm_routes("regions", "region")


def _autoscaler_routes(kind, var):
    base = "projects/{p}/%s/{%s}/autoscalers" % (kind, var)

    def find(state, p, scope, name):
        _scope_check(kind, scope)
        key = (p, kind, scope, name)
        if key not in state.autoscalers:
            raise ApiError(404, "The resource 'projects/%s/%s/%s/autoscalers/%s' was not found" % key)
        return key

    @route("GET", base + "/{a}")
    def get_autoscaler(state, q, body, p, a, **scope):
        autoscaler = state.autoscalers[find(state, p, scope[var], a)]
        return {k: v for k, v in autoscaler.items() if not k.startswith("_")}

    @route("PATCH", base, {"autoscaler", "requestId"}, {"autoscalingPolicy", "name"})
    def patch_autoscaler(state, q, body, p, **scope):
        """A merge patch of the autoscaler named in the query; only autoscalingPolicy.mode is served."""
        key = find(state, p, scope[var], q.get("autoscaler") or body.get("name") or "")
        wanted = body.get("autoscalingPolicy") or {}
        if not isinstance(wanted, dict) or set(wanted) - {"mode"}:
            raise ApiError(400, "Invalid value for field 'resource.autoscalingPolicy': the emulator serves only mode.")
        if "mode" in wanted:
            if wanted["mode"] not in ("ON", "OFF", "ONLY_SCALE_OUT"):
                raise ApiError(400, "Invalid value for field 'resource.autoscalingPolicy.mode': '%s'." % wanted["mode"])
            state.autoscalers[key]["autoscalingPolicy"]["mode"] = wanted["mode"]
        return state._operation(p, kind, scope[var], "compute.autoscalers.patch", state.autoscalers[key]["selfLink"])


_autoscaler_routes("zones", "zone")
_autoscaler_routes("regions", "region")


# ---- HTTP --------------------------------------------------------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    state = None  # set on the subclass built per server
    protocol_version = "HTTP/1.1"
    server_version = "GCE-emulator"

    def log_message(self, fmt, *args):  # keep stderr for real problems
        pass

    def _send(self, code, payload):
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise ApiError(400, "Invalid JSON payload received. Unexpected token.", "parseError")

    def _handle(self, method):
        parsed = urllib.parse.urlsplit(self.path)
        try:
            if (method, parsed.path) == ("POST", "/token"):
                return self._token()
            body = self._body()
            if parsed.path.startswith("/_admin/"):
                return self._send(200, self._admin(method, parsed.path[len("/_admin/"):], body))
            self._api(method, parsed, body)
        except ApiError as exc:
            self._send(exc.code, exc.body())
        except Exception as exc:  # a bug in the emulator: say so in the API's format
            self._send(500, ApiError(500, "emulator error: %r" % exc).body())

    def _api(self, method, parsed, body):
        state = self.state
        query = dict(urllib.parse.parse_qsl(parsed.query, keep_blank_values=True))
        prefix = "/compute/v1/"
        rel = parsed.path[len(prefix):] if parsed.path.startswith(prefix) else None
        matched = [(r, r[2].match(rel)) for r in ROUTES if rel is not None and r[2].match(rel)]
        entry = {"method": method, "path": parsed.path, "template": None, "at": time.time(),
                 "query": sorted(query), "body": sorted(body) if isinstance(body, dict) else None}
        with state.lock:
            state.request_log.append(entry)
            state.user_agents["%s | %s" % (self.headers.get("User-Agent", ""), self.headers.get("x-goog-api-client", ""))] += 1
            if state.faults.require_auth:
                self._authenticate(state)
        if not matched:
            raise ApiError(404, "The requested URL %s was not found on this server." % parsed.path, "notFound")
        for (r_method, template, _, allowed_query, allowed_body, func), match in matched:
            if r_method == method:
                break
        else:
            raise ApiError(405, "Method %s is not allowed on %s." % (method, parsed.path))
        entry["template"] = template
        unknown = set(query) - allowed_query - SYSTEM_QUERY
        if unknown:
            raise ApiError(400, "Invalid JSON payload received. Unknown name \"%s\": Cannot bind query parameter."
                           % sorted(unknown)[0])
        if body is not None and allowed_body is None:
            raise ApiError(400, "Invalid JSON payload received. This method takes no request body.")
        if isinstance(body, dict) and allowed_body is not None:
            extra = set(body) - allowed_body
            if extra:
                raise ApiError(400, "Invalid JSON payload received. Unknown name \"%s\": Cannot find field."
                               % sorted(extra)[0])
        faults = state.faults
        if faults.latency:
            time.sleep(faults.latency)
        with state.lock:
            error = faults.pick_error(parsed.path)
            if error:
                entry["fault"] = error.code
        if error and not faults.fail_after:
            raise error
        denied = [d for d in faults.deny if d in parsed.path]
        if denied:
            raise ApiError(403, "Required permission for '%s' is missing (denied by the emulator's deny knob)."
                           % rel, "forbidden")
        state.advance()
        with state.lock:
            params = match.groupdict()
            _need_project(state, params["p"])
            request_id = query.get("requestId")
            if request_id and request_id in state.request_ids:
                # The real API answers a repeated requestId with the first request's operation.
                return self._send(200, state._op_view(state.operations[state.request_ids[request_id]]))
            result = func(state, query, body or {}, **params)
            if request_id and isinstance(result, dict) and result.get("kind") == "compute#operation":
                state.request_ids[request_id] = next(k for k, op in state.operations.items()
                                                     if op["name"] == result["name"])
        if error:
            raise error   # fail_after: the change was made, but the caller sees an error (a lost answer)
        self._send(200, result)

    def _authenticate(self, state):
        """Accept a token from /token or the admin, or a self-signed JWT of a known service account (what
        google-cloud-compute sends for service account keys), like the real API; else 401."""
        header = self.headers.get("Authorization", "")
        token = header[len("Bearer "):] if header.startswith("Bearer ") else ""
        if token and token in state.tokens:
            return
        if token.count(".") == 2:
            try:
                claims = _verify_assertion(token, state.service_accounts)
            except ValueError:
                pass
            else:
                state.token_grants.append(dict(claims, kind="self-signed"))
                return
        raise ApiError(401, "Request had invalid authentication credentials. Expected OAuth 2 access token, login "
                            "cookie or other valid authentication credential.", "authError")

    def _token(self):
        """The OAuth2 token endpoint a service account key's token_uri points at: checks the signed JWT
        assertion against the key the admin issued, then hands out a bearer token."""
        length = int(self.headers.get("Content-Length") or 0)
        form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" or not form.get("assertion"):
            return self._send(400, {"error": "unsupported_grant_type", "error_description": "Invalid grant_type"})
        try:
            claims = _verify_assertion(form["assertion"], self.state.service_accounts)
        except ValueError as exc:
            return self._send(400, {"error": "invalid_grant", "error_description": str(exc)})
        token = "sandbox-%s" % uuid.uuid4().hex
        with self.state.lock:
            self.state.tokens.add(token)
            self.state.token_grants.append(dict(claims, kind="exchanged"))
        return self._send(200, {"access_token": token, "expires_in": 3599, "token_type": "Bearer"})

    def _admin(self, method, what, body):
        state = self.state
        body = body or {}
        if (method, what) == ("POST", "images"):
            return {"image": state.admin_create_image(**body)}
        if (method, what) == ("POST", "groups"):
            return {"group_id": state.admin_create_group(**body)}
        if (method, what) == ("POST", "unhealthy"):
            state.admin_fail_health(**body)
            return {}
        if (method, what) == ("POST", "autoscalers"):
            return {"autoscaler": state.admin_create_autoscaler(**body)}
        if (method, what) == ("POST", "faults"):
            with state.lock:
                if body.pop("reset", False):
                    state.faults.reset()
                state.faults.update(**body)
                return state.faults.as_dict()
        if (method, what) == ("GET", "state"):
            return state.admin_snapshot()
        if (method, what) == ("POST", "service_accounts"):
            return _new_service_account(state, body["email"], body["project"], self._base_url())
        if (method, what) == ("POST", "tokens"):
            with state.lock:
                state.tokens.add(body["token"])
            return {}
        if (method, what) == ("GET", "token_grants"):
            with state.lock:
                return {"grants": list(state.token_grants)}
        if (method, what) == ("GET", "requests"):
            with state.lock:
                return {"requests": list(state.request_log)}
        if (method, what) == ("DELETE", "requests"):
            with state.lock:
                state.request_log.clear()
                return {}
        raise ApiError(404, "unknown admin call %s %s" % (method, what))

    def _base_url(self):
        scheme = "https" if isinstance(self.connection, ssl.SSLSocket) else "http"
        return "%s://%s:%d" % (scheme, self.server.server_address[0], self.server.server_address[1])

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_DELETE(self):
        self._handle("DELETE")

    def do_PUT(self):
        self._handle("PUT")

    def do_PATCH(self):
        self._handle("PATCH")


class Admin:
    """Drives an emulator (in-process or another process) through its /_admin/ endpoints."""

    def __init__(self, info, timeout=30):
        self.info = info
        self.endpoint = info["endpoint"].rstrip("/")
        self.project = info.get("project", DEFAULT_PROJECT)
        self.timeout = timeout
        handlers = [urllib.request.ProxyHandler({})]
        if info.get("ca_cert"):
            handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=info["ca_cert"])))
        self._opener = urllib.request.build_opener(*handlers)

    def _call(self, method, what, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.endpoint + "/_admin/" + what, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raise RuntimeError("gce emulator admin %s %s: %s" % (method, what, exc.read().decode(errors="replace")))

    def create_image(self, name, family=None, status="READY", deprecated=None):
        return self._call("POST", "images", dict(name=name, project=self.project, family=family, status=status,
                                                 deprecated=deprecated))["image"]

    def create_group(self, name, role, size, image, zone=None, region=None, **more):
        """A group (zonal unless `region` is given); `more`: update_policy ("OPPORTUNISTIC" or "PROACTIVE"),
        versions (>1 for a group in the middle of a canary update), redistribution, autohealing (True: the group has
        autoHealingPolicies, and fail_health's VMs are recreated)."""
        return self._call("POST", "groups", dict(name=name, role=role, size=size, image=image, project=self.project,
                                                 zone=zone, region=region, **more))["group_id"]

    def fail_health(self, group_id, instance):
        """The VM `instance` (its name) fails its health check: a group with autohealing recreates it."""
        return self._call("POST", "unhealthy", dict(group_id=group_id, instance=instance))

    def create_autoscaler(self, group_id, recommended, mode="ON", name=None):
        """An autoscaler on the group that resizes it to `recommended` while its mode lets it (faults autoscaling,
        autoscaling_delay); returns its URL."""
        return self._call("POST", "autoscalers", dict(group_id=group_id, recommended=recommended, mode=mode,
                                                      name=name))["autoscaler"]

    def set_faults(self, error_rate=0.0, codes=(429, 500, 503), latency=0.0, never_boot=(), quota=None, **more):
        """Replace every fault knob (unnamed ones go back to their defaults). Extra knobs: fail_next,
        boot_delay, op_delay, delete_delay, paths, seed (repeatable error_rate draws), quota_mode, late_refusals,
        redistribution, redistribution_delay, autoscaling, autoscaling_delay, autohealing, autohealing_delay."""
        return self._call("POST", "faults", dict(reset=True, error_rate=error_rate, codes=list(codes), latency=latency,
                                                 never_boot=list(never_boot), quota=quota, **more))

    def create_service_account(self, email):
        """A service account key (the JSON a user downloads) whose token_uri is this emulator."""
        return self._call("POST", "service_accounts", dict(email=email, project=self.project))

    def add_access_token(self, token):
        """Accept `token` as a bearer token (what auth_kind=accesstoken sends)."""
        return self._call("POST", "tokens", dict(token=token))

    def token_grants(self):
        return self._call("GET", "token_grants")["grants"]

    def state(self):
        return self._call("GET", "state")

    def requests(self):
        return self._call("GET", "requests")["requests"]

    def clear_requests(self):
        return self._call("DELETE", "requests")

    def provider_options(self):
        options = {"project": self.project, "endpoint": self.endpoint, "auth_kind": "anonymous"}
        if self.info.get("ca_cert"):
            options["ca_bundle"] = self.info["ca_cert"]
        return {"provider": "gcp", "gcp": options}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--nodesim-url")
    parser.add_argument("--tls", action="store_true", help="serve HTTPS with a CA written to the state dir")
    args = parser.parse_args(argv)
    os.makedirs(args.state_dir, exist_ok=True)
    emulator = GceEmulator(hooks=instance_hooks.from_url(args.nodesim_url), state_dir=args.state_dir,
                           tls_dir=os.path.join(args.state_dir, "tls") if args.tls else None).start()
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    info = emulator.info()
    with open(os.path.join(args.state_dir, "gce-emulator.json"), "w") as fh:
        json.dump(info, fh)
    print(json.dumps(info), flush=True)
    while not stopped.wait(1.0):
        pass
    emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
