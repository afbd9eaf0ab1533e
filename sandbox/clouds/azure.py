"""A local Azure Resource Manager emulator (Microsoft.Compute scale sets) over HTTPS, for azure-mgmt-compute.

What it serves (names are case-insensitive, as in ARM; every request needs ?api-version=<date> and a bearer
token, any token; the api-version is echoed into links, never pinned):

  GET|PUT|PATCH  /subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets/{vmss}
  GET            .../virtualMachineScaleSets                         (list, nextLink paging)
  POST           .../virtualMachineScaleSets/{vmss}/delete           (delete instances; 202 + Azure-AsyncOperation/Location)
  GET            .../virtualMachineScaleSets/{vmss}/virtualMachines  ($expand=instanceView, nextLink paging)
  GET            .../virtualMachines/{id}   and   .../virtualMachines/{id}/instanceView
  GET            /subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines
                 ($filter='virtualMachineScaleSet/id' eq '<scale set ID>', $expand=instanceView only with that filter)
  GET            .../Microsoft.Compute/virtualMachines/{vm}          (a Flexible scale set's VM, as a plain VM)
  GET            managed images, Compute Gallery image versions, shared/community gallery image versions and
                 Marketplace images (publishers/../artifacttypes/vmimage/offers/../skus/../versions/..)
  GET            /subscriptions/{s}/providers/Microsoft.Compute/locations/{loc}/operations/{id}[?monitor=true]
  GET            /subscriptions/{s}/providers/Microsoft.Compute/locations/{loc}/usages  (compute usage and limits)
  GET            /subscriptions/{s}/providers/Microsoft.Compute/skus[?$filter=location eq '<loc>']  (VM sizes)
  GET            /subscriptions/{s}/providers/Microsoft.Insights/autoscalesettings  (autoscale settings, nextLink paging)
  PATCH          /subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Insights/autoscalesettings/{name}
                 (properties.enabled only)

Orchestration: a scale set is Uniform unless it is created with properties.orchestrationMode "Flexible" (Admin
create_group(..., orchestration="Flexible")). A Flexible set's VMs are plain virtual machines named
{scale-set}_{8 hex}, with properties.virtualMachineScaleSet.id and no instanceId or latestModelApplied; their
providerID is azure:///subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines/{vm}. The
scale set VM routes (.../virtualMachineScaleSets/{vmss}/virtualMachines...) refuse a Flexible set, as ARM does
(the wording of that refusal is the emulator's); delete instances takes VM names as its instanceIds.

PUT and PATCH answer with the resource and Azure-AsyncOperation + Retry-After; the operation succeeds when the
VMs it created run. Errors use ARM's body {"error": {"code", "message"}}. A scale-out makes VMs that boot
after `boot_delay` and then call hooks.created(); deleted VMs call hooks.deleted().

Fault injection (Admin.set_faults): error_rate with codes (429/500/503), fail_next (the next N resource
requests fail), latency, never_boot (scale sets whose new VMs stay "creating"), allocation_failure (their new
VMs end "failed" with ProvisioningState/failed/AllocationFailed, and the operation fails), late_refusals (the next
N new VMs of any scale set end so), quota (most VMs in
total; a scale-out beyond it gets 409 OperationNotAllowed "... exceeding approved ... quota", and the usage list
reports it as the cores, family cores and virtualMachines limits; generous limits when unset), deny (handler names,
e.g. list_usages, answered 403 AuthorizationFailed as for an identity without the permission).

Upgrade policies act as on Azure (knob upgrade_policies, on by default; upgrade_delay seconds): once a scale set's
model image changed, one with upgradePolicy.mode Automatic reimages every VM not on the latest model at once (its
Node goes, no drain, and joins again on the new image), one with Rolling reimages them one at a time; Manual does
nothing. Admin create_group(..., upgrade_policy="Automatic") makes such a set (Manual by default, ARM's default).

Autoscale settings act as on Azure (knob autoscale, on by default; autoscale_delay seconds): an enabled autoscale
setting (Admin.create_autoscale(group_id, recommended)) whose scale set has held another number of VMs than its
recommended count (its default capacity: the emulator has no metrics) for autoscale_delay sets the capacity to it,
deleting the newest VMs first, without a drain; Admin.state() lists `autoscaled` per set. A disabled one does
nothing.

Overprovisioning acts as on Azure (knob overprovisioning, on by default; overprovision_delay seconds): a scale-out
of a Uniform set whose properties.overprovision is true (or unset, ARM's default) creates one VM more than asked,
and deletes that extra (the batch's last, a Node by then) overprovision_delay seconds after the batch's VMs run;
Admin.state() lists `overprovisioned` per set. Admin create_group makes sets with overprovision false unless
asked (overprovision=None leaves the field unset, True sets it).

Automatic repairs act as on Azure (knob automatic_repairs, on by default; repair_delay seconds, Azure's grace period
being at least 10 minutes): a VM Admin.fail_health marked unhealthy in a set whose automaticRepairsPolicy.enabled
is true is replaced (deleted without a drain, a new VM created on the latest model) repair_delay seconds later;
Admin.state() lists `repaired` per set.

Entra ID's token endpoint, on the same HTTPS port (point the credential's authority at the endpoint, with instance
discovery disabled: azure.adfs_authority_url and azure.disable_instance_discovery of the modules):

  GET   /{tenant}/v2.0/.well-known/openid-configuration   (and /adfs/.well-known/openid-configuration)
  POST  /{tenant}/oauth2/v2.0/token   (/adfs/oauth2/token)   grant_type client_credentials (client_id and
        client_secret of a service principal added by the admin, in its tenant) or password (username and
        password of a user added by the admin); a wrong secret or password is refused as Entra refuses it
        (invalid_client AADSTS7000215, invalid_grant AADSTS50126)

With set_faults(require_auth=True) ARM accepts only the bearer tokens that endpoint issued. A user's password
login goes through the "adfs" tenant: MSAL asks Entra's user realm discovery on port 443 of the authority host,
which an emulator on a free port cannot answer, and skips it for ADFS.

Admin API (not ARM) under /_emulator/: images, groups, faults, requests (the request log), state, principals and
users (the identities the token endpoint knows), token_grants (every login: who, how, which scope, or refused).
"""

import argparse
import base64
import collections
import os
import datetime
import json
import random
import re
import signal
import ssl
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sandbox import instance_hooks, pki

SUBSCRIPTION = "8a5d1b2c-0000-4000-8000-00000000a2e1"
RESOURCE_GROUP = "kubenodes-sandbox"
LOCATION = "westeurope"
VM_SIZE = "Standard_D2s_v5"
ROLE_TAG = "kubenodes-role"
GALLERY = "sandbox_gallery"
_API_VERSION_RE = re.compile(r"^\d{4}-\d{2}-\d{2}(-preview)?$")

_SEG = r"([^/]+)"
_RG = r"/subscriptions/%s/resourcegroups/%s/providers/microsoft\.compute" % (_SEG, _SEG)
_LOC = r"/subscriptions/%s/providers/microsoft\.compute/locations/%s" % (_SEG, _SEG)
_VMSS = _RG + r"/virtualmachinescalesets/" + _SEG

# (template, regex, {method: (handler name, allowed query keys, allowed body paths or None for no body)})
_VMSS_BODY = {
    "location", "tags", "sku", "sku.name", "sku.tier", "sku.capacity", "zones", "identity", "plan", "etag",
    "properties", "properties.virtualMachineProfile", "properties.upgradePolicy", "properties.upgradePolicy.mode",
    "properties.overprovision", "properties.singlePlacementGroup", "properties.orchestrationMode",
    "properties.platformFaultDomainCount", "properties.scaleInPolicy", "properties.automaticRepairsPolicy",
    "properties.virtualMachineProfile.osProfile", "properties.virtualMachineProfile.storageProfile",
    "properties.virtualMachineProfile.networkProfile", "properties.virtualMachineProfile.extensionProfile",
    "properties.virtualMachineProfile.diagnosticsProfile", "properties.virtualMachineProfile.securityProfile",
    "properties.virtualMachineProfile.storageProfile.imageReference",
    "properties.virtualMachineProfile.storageProfile.osDisk",
    "properties.virtualMachineProfile.storageProfile.dataDisks",
    "properties.virtualMachineProfile.storageProfile.imageReference.id",
    "properties.virtualMachineProfile.storageProfile.imageReference.publisher",
    "properties.virtualMachineProfile.storageProfile.imageReference.offer",
    "properties.virtualMachineProfile.storageProfile.imageReference.sku",
    "properties.virtualMachineProfile.storageProfile.imageReference.version",
    "properties.virtualMachineProfile.storageProfile.imageReference.sharedGalleryImageId",
    "properties.virtualMachineProfile.storageProfile.imageReference.communityGalleryImageId",
}
# Subtrees whose inner keys are free-form here (the emulator stores them as given).
_FREE_SUBTREES = ("tags.", "identity.", "plan.", "properties.virtualMachineProfile.osProfile.",
                  "properties.virtualMachineProfile.storageProfile.osDisk.",
                  "properties.virtualMachineProfile.networkProfile.", "properties.virtualMachineProfile.extensionProfile.",
                  "properties.virtualMachineProfile.diagnosticsProfile.",
                  "properties.virtualMachineProfile.securityProfile.", "properties.scaleInPolicy.",
                  "properties.automaticRepairsPolicy.")

VM_SIZE_VCPUS = 2                     # Standard_D2s_v5, the size of every scale set the emulator makes
VM_SIZE_FAMILY = "standardDSv5Family"
GENEROUS_CORES, GENEROUS_VMS = 2000, 25000
SKUS = [  # a few sizes of the resource SKU list, as ARM lists them
    {"resourceType": "virtualMachines", "name": VM_SIZE, "tier": "Standard", "size": "D2s_v5",
     "family": VM_SIZE_FAMILY, "capabilities": [{"name": "vCPUs", "value": "2"}, {"name": "MemoryGB", "value": "8"}]},
    {"resourceType": "virtualMachines", "name": "Standard_D4s_v5", "tier": "Standard", "size": "D4s_v5",
     "family": VM_SIZE_FAMILY, "capabilities": [{"name": "vCPUs", "value": "4"}, {"name": "MemoryGB", "value": "16"}]},
    {"resourceType": "virtualMachines", "name": "Standard_E2s_v5", "tier": "Standard", "size": "E2s_v5",
     "family": "standardESv5Family", "capabilities": [{"name": "vCPUs", "value": "2"},
                                                      {"name": "MemoryGB", "value": "16"}]},
    {"resourceType": "disks", "name": "Premium_LRS", "tier": "Premium", "capabilities": []},
]

# The RBAC action a handler needs, for the deny knob's AuthorizationFailed message.
_PERMISSIONS = {"list_usages": "Microsoft.Compute/locations/usages/read", "list_skus": "Microsoft.Compute/skus/read",
                "list_autoscale": "Microsoft.Insights/autoscalesettings/read",
                "patch_autoscale": "Microsoft.Insights/autoscalesettings/write",
                "get_vmss": "Microsoft.Compute/virtualMachineScaleSets/read"}

ROUTES = [
    ("/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/Microsoft.Compute/"
     "virtualMachineScaleSets/{vmScaleSetName}", re.compile("^" + _VMSS + "$", re.I),
     {"GET": ("get_vmss", {"api-version", "$expand"}, None),
      "PUT": ("put_vmss", {"api-version"}, _VMSS_BODY),
      "PATCH": ("patch_vmss", {"api-version"}, _VMSS_BODY)}),
    ("/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/Microsoft.Compute/"
     "virtualMachineScaleSets", re.compile("^" + _RG + r"/virtualmachinescalesets$", re.I),
     {"GET": ("list_vmss", {"api-version", "$skiptoken"}, None)}),
    ("/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/Microsoft.Compute/"
     "virtualMachineScaleSets/{vmScaleSetName}/delete", re.compile("^" + _VMSS + "/delete$", re.I),
     {"POST": ("delete_instances", {"api-version", "forceDeletion"}, {"instanceIds"})}),
    ("/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/Microsoft.Compute/"
     "virtualMachineScaleSets/{vmScaleSetName}/virtualMachines",
     re.compile("^" + _VMSS + "/virtualmachines$", re.I),
     {"GET": ("list_vms", {"api-version", "$expand", "$filter", "$select", "$skiptoken"}, None)}),
    ("/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/Microsoft.Compute/"
     "virtualMachineScaleSets/{vmScaleSetName}/virtualMachines/{instanceId}",
     re.compile("^" + _VMSS + "/virtualmachines/" + _SEG + "$", re.I),
     {"GET": ("get_vm", {"api-version", "$expand"}, None)}),
    ("/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/Microsoft.Compute/"
     "virtualMachineScaleSets/{vmScaleSetName}/virtualMachines/{instanceId}/instanceView",
     re.compile("^" + _VMSS + "/virtualmachines/" + _SEG + "/instanceview$", re.I),
     {"GET": ("get_instance_view", {"api-version"}, None)}),
    ("/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/Microsoft.Compute/"
     "virtualMachines", re.compile("^" + _RG + "/virtualmachines$", re.I),
     {"GET": ("list_plain_vms", {"api-version", "$filter", "$expand", "$skiptoken"}, None)}),
    ("/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/Microsoft.Compute/"
     "virtualMachines/{vmName}", re.compile("^" + _RG + "/virtualmachines/" + _SEG + "$", re.I),
     {"GET": ("get_plain_vm", {"api-version", "$expand"}, None)}),
    ("/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/Microsoft.Compute/"
     "images/{imageName}", re.compile("^" + _RG + "/images/" + _SEG + "$", re.I),
     {"GET": ("get_managed_image", {"api-version", "$expand"}, None)}),
    ("/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/Microsoft.Compute/"
     "galleries/{galleryName}/images/{galleryImageName}/versions/{galleryImageVersionName}",
     re.compile("^" + _RG + "/galleries/%s/images/%s/versions/%s$" % (_SEG, _SEG, _SEG), re.I),
     {"GET": ("get_gallery_version", {"api-version", "$expand"}, None)}),
    ("/subscriptions/{subscriptionId}/providers/Microsoft.Compute/locations/{location}/sharedGalleries/"
     "{galleryUniqueName}/images/{galleryImageName}/versions/{galleryImageVersionName}",
     re.compile("^" + _LOC + "/sharedgalleries/%s/images/%s/versions/%s$" % (_SEG, _SEG, _SEG), re.I),
     {"GET": ("get_shared_version", {"api-version"}, None)}),
    ("/subscriptions/{subscriptionId}/providers/Microsoft.Compute/locations/{location}/communityGalleries/"
     "{publicGalleryName}/images/{galleryImageName}/versions/{galleryImageVersionName}",
     re.compile("^" + _LOC + "/communitygalleries/%s/images/%s/versions/%s$" % (_SEG, _SEG, _SEG), re.I),
     {"GET": ("get_community_version", {"api-version"}, None)}),
    ("/subscriptions/{subscriptionId}/providers/Microsoft.Compute/locations/{location}/publishers/"
     "{publisherName}/artifacttypes/vmimage/offers/{offer}/skus/{skus}/versions/{version}",
     re.compile("^" + _LOC + "/publishers/%s/artifacttypes/vmimage/offers/%s/skus/%s/versions/%s$"
                % (_SEG, _SEG, _SEG, _SEG), re.I),
     {"GET": ("get_marketplace_image", {"api-version"}, None)}),
    ("/subscriptions/{subscriptionId}/providers/Microsoft.Compute/locations/{location}/usages",
     re.compile("^" + _LOC + "/usages$", re.I),
     {"GET": ("list_usages", {"api-version"}, None)}),
    ("/subscriptions/{subscriptionId}/providers/Microsoft.Compute/skus",
     re.compile(r"^/subscriptions/%s/providers/microsoft\.compute/skus$" % _SEG, re.I),
     {"GET": ("list_skus", {"api-version", "$filter", "includeExtendedLocations"}, None)}),
    ("/subscriptions/{subscriptionId}/providers/Microsoft.Insights/autoscalesettings",
     re.compile(r"^/subscriptions/%s/providers/microsoft\.insights/autoscalesettings$" % _SEG, re.I),
     {"GET": ("list_autoscale", {"api-version", "$skiptoken"}, None)}),
    ("/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/Microsoft.Insights/"
     "autoscalesettings/{autoscaleSettingName}",
     re.compile(r"^/subscriptions/%s/resourcegroups/%s/providers/microsoft\.insights/autoscalesettings/%s$"
                % (_SEG, _SEG, _SEG), re.I),
     {"PATCH": ("patch_autoscale", {"api-version"}, {"properties", "properties.enabled"})}),
    ("/subscriptions/{subscriptionId}/providers/Microsoft.Compute/locations/{location}/operations/{operationId}",
     re.compile("^" + _LOC + "/operations/" + _SEG + "$", re.I),
     {"GET": ("get_operation", {"api-version", "monitor"}, None)}),
]


class ArmError(Exception):
    def __init__(self, status, code, message, headers=None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


def _now_iso(ts=None):
    ts = time.time() if ts is None else ts
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _base36(number, width=6):
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text = ""
    while number:
        number, rest = divmod(number, 36)
        text = digits[rest] + text
    return (text or "0").rjust(width, "0")


def body_paths(body, prefix=""):
    """The dotted key paths of a JSON object (dict keys only; list items are not descended into)."""
    paths = []
    if isinstance(body, dict):
        for key, value in body.items():
            path = prefix + key
            paths.append(path)
            paths.extend(body_paths(value, path + "."))
    return paths


def image_string(reference):
    """The image a reference names, in the collection's canonical spelling (names lower-cased)."""
    reference = reference or {}
    for key in ("id", "communityGalleryImageId", "sharedGalleryImageId"):
        value = reference.get(key)
        if value:
            return _canonical_id(value)
    return ":".join(str(reference.get(k, "")).lower() for k in ("publisher", "offer", "sku", "version"))


def _canonical_id(value):
    parts = value.strip("/").split("/")
    fixed = {"subscriptions": "subscriptions", "resourcegroups": "resourceGroups", "providers": "providers",
             "galleries": "galleries", "images": "images", "versions": "versions",
             "communitygalleries": "CommunityGalleries", "sharedgalleries": "SharedGalleries"}
    out = []
    for i, part in enumerate(parts):
        low = part.lower()
        if i % 2 == 0 and low in fixed:
            out.append(fixed[low])
        elif low == "microsoft.compute":
            out.append("Microsoft.Compute")
        else:
            out.append(low)
    text = "/" + "/".join(out)
    if text.startswith("/CommunityGalleries") or text.startswith("/SharedGalleries"):
        text = text.replace("/images/", "/Images/").replace("/versions/", "/Versions/")
    return text


class Faults:
    def __init__(self):
        self.error_rate = 0.0
        self.codes = (429, 500, 503)
        self.latency = 0.0
        self.never_boot = set()
        self.allocation_failure = set()
        self.late_refusals = 0   # the next N new VMs of any scale set fail their allocation after the create
        self.quota = None
        self.deny = set()    # handler names answered 403 AuthorizationFailed
        self.require_auth = False   # ARM accepts only tokens the emulator's token endpoint issued
        self.fail_next = 0
        self.upgrade_policies = True   # Automatic and Rolling upgrade policies reimage VMs on a model change
        self.upgrade_delay = 1.0       # seconds from the model change to the reimage (Rolling: between VMs)
        self.autoscale = True          # enabled autoscale settings set their scale set's capacity
        self.autoscale_delay = 1.0     # seconds a scale set is off its recommended count before that
        self.overprovisioning = True   # a scale-out of an overprovisioned Uniform set makes one extra VM
        self.overprovision_delay = 1.0  # seconds from the batch running to the extra's deletion
        self.automatic_repairs = True  # a set with automaticRepairsPolicy enabled replaces unhealthy VMs
        self.repair_delay = 1.0        # seconds from unhealthy to the replacement (Azure: a grace period, >= 10 min)
        self.rng = random.Random(7)


class AzureEmulator:
    """The emulator, in-process: start() serves on 127.0.0.1:<free port>, stop() ends it."""

    # Seconds a deleted VM stays listed (provisioning state Deleting). Azure takes tens of seconds; 2 s, as the GCE and
    # AWS emulators, keeps CI fast yet lists it for at least the pass after the deletion.
    DEFAULT_DELETE_DELAY = 2.0

    def __init__(self, state_dir, hooks=None, boot_delay=0.3, delete_delay=DEFAULT_DELETE_DELAY, page_size=100,
                 retry_after=0):
        self.state_dir = state_dir
        self.hooks = hooks or instance_hooks.NoHooks()
        self.boot_delay = boot_delay
        self.delete_delay = delete_delay
        self.page_size = page_size
        self.retry_after = retry_after
        self.throttle_retry_after = 0   # Retry-After of injected 429 answers
        self.lock = threading.RLock()
        self.scale_sets = {}
        self.autoscale_settings = {}   # (sub, rg, name) lower-cased -> autoscale setting (wire dict, "_" keys private)
        self.managed_images = set()
        self.gallery_versions = set()
        self.shared_versions = set()
        self.community_versions = set()
        self.marketplace = set()
        self.operations = {}
        self.principals = {}   # client ID (lower case): {"tenant", "secret"}
        self.users = {}        # user name (lower case): {"tenant", "password"}
        self.tokens = {}       # access token issued: its grant
        self.token_grants = []
        self.requests = collections.deque(maxlen=50000)   # bounded: a long sandbox run must not grow forever
        self.faults = Faults()
        self.server = None
        self.endpoint = None
        self.ca_cert = None
        self._threads = []
        self._stop = threading.Event()

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self):
        ca = pki.CA("%s/pki" % self.state_dir, name="azure-ca")
        cert, key = ca.issue("azure-arm", "127.0.0.1", kind=pki.SERVER, hosts=["127.0.0.1", "localhost"])
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        handler = type("Handler", (_Handler,), {"emulator": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.endpoint = "https://127.0.0.1:%d" % self.server.server_address[1]
        self.ca_cert = str(ca.cert_path)
        for target in (self.server.serve_forever, self._tick_loop):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self):
        self._stop.set()
        if self.server:
            self.server.shutdown()
            self.server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)

    def info(self):
        return {"cloud": "azure", "endpoint": self.endpoint, "ca_cert": self.ca_cert, "pid": None}

    # -- time passes -------------------------------------------------------------------------------

    def _tick_loop(self):
        while not self._stop.wait(0.05):
            self.tick()

    def tick(self):
        """Boot VMs whose time came, remove deleted ones, finish operations; then call the hooks."""
        created, deleted = [], []
        now = time.time()
        with self.lock:
            for vmss in self.scale_sets.values():
                for iid, vm in list(vmss["vms"].items()):
                    if vm["state"] == "creating" and vm["boot_at"] is not None and vm["boot_at"] <= now:
                        if vm.get("allocation_fails"):
                            vm["state"] = "failed"  # never runs, so no node joins
                            continue
                        vm["state"] = "running"
                        created.append((self._provider_id(vmss, iid), vm["computer_name"].lower(),
                                        self._group_id(vmss), image_string(vm["image"]), vmss["role"], None))
                    elif vm["state"] == "deleting" and vm["delete_at"] <= now:
                        del vmss["vms"][iid]
                        deleted.append(self._provider_id(vmss, iid))
                deleted.extend(self._upgrade_by_policy(vmss, now))
            self._autoscale(now)
            for vmss in self.scale_sets.values():
                self._drop_extras(vmss, now)
                self._repair(vmss, now)
            for op in self.operations.values():
                if op["status"] == "InProgress" and self._operation_done(op, now):
                    op["status"] = "Failed" if self._operation_failed(op) else "Succeeded"
                    op["endTime"] = _now_iso(now)
            for vmss in self.scale_sets.values():
                busy = any(op["status"] == "InProgress" and op["vmss"] == vmss["key"] for op in self.operations.values())
                vmss["provisioningState"] = "Updating" if busy else "Succeeded"
        for args in created:
            self._hook("created", *args)
        for provider_id in deleted:
            self._hook("deleted", provider_id)

    def _upgrade_by_policy(self, vmss, now):
        """An Automatic (all at once) or Rolling (one VM per upgrade_delay) upgrade policy after the model's image
        changed: a running VM on an older model is reimaged to the latest, its Node gone until it boots again.
        Returns the providerIDs whose Nodes go."""
        mode = (vmss.get("upgradePolicy") or {}).get("mode")
        changed = vmss.get("model_changed_at")
        if not self.faults.upgrade_policies or mode not in ("Automatic", "Rolling") or changed is None \
                or now - changed < self.faults.upgrade_delay:
            return []
        stale = [iid for iid in self._ordered(vmss) if vmss["vms"][iid]["state"] == "running"
                 and vmss["vms"][iid]["model"] != vmss["model_version"]]
        if mode == "Rolling":
            stale = stale[:1]
            vmss["model_changed_at"] = now   # the next batch after another upgrade_delay
        gone = []
        for iid in stale:
            vm = vmss["vms"][iid]
            vm.update(state="creating", boot_at=now + self.boot_delay, model=vmss["model_version"],
                      image=dict(vmss["profile"]["storageProfile"]["imageReference"]))
            vmss.setdefault("reimaged", []).append(dict(vm=iid, at=now))
            gone.append(self._provider_id(vmss, iid))
        return gone

    def _autoscale(self, now):
        """Each enabled autoscale setting (faults.autoscale) sets its scale set's capacity to its recommended count
        once the set has held another count for autoscale_delay seconds (the newest VMs go first, undrained)."""
        for setting in self.autoscale_settings.values():
            vmss = self.scale_sets.get(setting["_vmss"])
            if vmss is None or not self.faults.autoscale or not setting["properties"]["enabled"]:
                setting.pop("_off_since", None)
                continue
            wanted = int(setting["properties"]["profiles"][0]["capacity"]["default"])
            live = [iid for iid in self._ordered(vmss) if vmss["vms"][iid]["state"] != "deleting"]
            if len(live) == wanted:
                setting.pop("_off_since", None)
                continue
            if now - setting.setdefault("_off_since", now) < self.faults.autoscale_delay:
                continue
            del setting["_off_since"]
            touched = self._resize(vmss, wanted)
            vmss.setdefault("autoscaled", []).append(dict(capacity=wanted, deleted=touched if len(live) > wanted else [],
                                                          at=now))

    def _drop_extras(self, vmss, now):
        """Overprovisioning: an extra VM is deleted (undrained) once its batch has run for overprovision_delay."""
        for iid, vm in list(vmss["vms"].items()):
            batch = vm.get("extra_of")
            if batch is None or vm["state"] == "deleting":
                continue
            mates = [vmss["vms"][i] for i in batch if i in vmss["vms"]]
            if any(m["state"] == "creating" for m in mates) or vm["state"] == "creating":
                continue
            vm.setdefault("batch_ran", now)
            if now - vm["batch_ran"] >= self.faults.overprovision_delay:
                self._start_delete(vmss, iid)
                vmss.setdefault("overprovisioned", []).append(dict(vm=iid, at=now))

    def _repair(self, vmss, now):
        """Automatic repairs (Replace): an unhealthy VM deleted, undrained, and a new one made on the latest model."""
        if not self.faults.automatic_repairs or not (vmss.get("repairs") or {}).get("enabled"):
            return
        for iid, vm in list(vmss["vms"].items()):
            since = vm.get("unhealthy_since")
            if since is None or vm["state"] == "deleting" or now - since < self.faults.repair_delay:
                continue
            self._start_delete(vmss, iid)
            made = self._resize(vmss, vmss["capacity"], overprovision=False)
            vmss.setdefault("repaired", []).append(dict(vm=iid, replacement=made[0] if made else None, at=now))

    def _operation_done(self, op, now):
        if now < op["not_before"]:
            return False
        vmss = self.scale_sets.get(op["vmss"])
        if vmss is None:
            return True
        for iid in op["instances"]:
            vm = vmss["vms"].get(iid)
            if op["kind"] == "create" and vm is not None and vm["state"] == "creating":
                return False
            if op["kind"] == "delete" and vm is not None:
                return False
        return True

    def _operation_failed(self, op):
        vmss = self.scale_sets.get(op["vmss"])
        return op["kind"] == "create" and vmss is not None and any(
            vmss["vms"].get(iid, {}).get("state") == "failed" for iid in op["instances"])

    def _hook(self, name, *args):
        try:
            getattr(self.hooks, name)(*args)
        except Exception as exc:  # pylint: disable=broad-except  # the node simulator may be down; say so
            print("azure emulator: hook %s%r failed: %s" % (name, args[:1], exc), file=sys.stderr, flush=True)

    # -- identifiers -------------------------------------------------------------------------------

    @staticmethod
    def _key(sub, rg, name):
        return (sub.lower(), rg.lower(), name.lower())

    @staticmethod
    def _vmss_id(vmss):
        return ("/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/virtualMachineScaleSets/%s"
                % (vmss["sub"], vmss["rg"], vmss["name"]))

    def _group_id(self, vmss):
        return self._vmss_id(vmss).lower().replace("/resourcegroups/", "/resourceGroups/").replace(
            "/microsoft.compute/virtualmachinescalesets/", "/Microsoft.Compute/virtualMachineScaleSets/")

    def _provider_id(self, vmss, iid):
        # What cloud-provider-azure writes: "azure://" + VM ID with the resource group lower-cased.
        if vmss["flexible"]:
            return ("azure:///subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/virtualMachines/%s"
                    % (vmss["sub"], vmss["rg"].lower(), iid))
        return ("azure:///subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/virtualMachineScaleSets/%s"
                "/virtualMachines/%s" % (vmss["sub"], vmss["rg"].lower(), vmss["name"], iid))

    @staticmethod
    def _plain_vm_id(vmss, name):
        return "/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/virtualMachines/%s" % (
            vmss["sub"], vmss["rg"], name)

    @staticmethod
    def _ordered(vmss):
        """The instance IDs (Uniform) or VM names (Flexible) of a scale set, oldest first."""
        return sorted(vmss["vms"], key=lambda iid: vmss["vms"][iid]["seq"])

    # -- model changes (lock held) -----------------------------------------------------------------

    def _vm_count(self):
        return sum(1 for v in self.scale_sets.values() for vm in v["vms"].values() if vm["state"] != "deleting")

    def _check_quota(self, extra):
        if self.faults.quota is not None and extra > 0 and self._vm_count() + extra > self.faults.quota:
            used = self._vm_count()
            raise ArmError(409, "OperationNotAllowed",
                           "Operation could not be completed as it results in exceeding approved Total Regional "
                           "Cores quota. Additional details - Deployment Model: Resource Manager, Location: %s, "
                           "Current Limit: %d, Current Usage: %d, Additional Required: %d, (Minimum) New Limit "
                           "Required: %d." % (LOCATION, self.faults.quota * 2, used * 2, extra * 2,
                                              (used + extra) * 2))

    def _marked(self, marks, vmss):
        return bool(marks) and ("*" in marks or vmss["name"].lower() in marks or self._vmss_id(vmss).lower() in marks)

    def _late_refusal(self):
        """Whether the next new VM is one the late_refusals knob still owes a failed allocation."""
        if self.faults.late_refusals <= 0:
            return False
        self.faults.late_refusals -= 1
        return True

    def _never_boots(self, vmss):
        marks = self.faults.never_boot
        return bool(marks) and ("*" in marks or vmss["name"].lower() in marks or self._vmss_id(vmss).lower() in marks)

    def _resize(self, vmss, capacity, overprovision=True):
        """Create or delete VMs so that the non-deleting count matches capacity; return touched instance IDs. A
        scale-out of an overprovisioned set (faults.overprovisioning) makes one more, deleted again later
        (_drop_extras)."""
        live = [iid for iid in self._ordered(vmss) if vmss["vms"][iid]["state"] != "deleting" and
                vmss["vms"][iid].get("extra_of") is None]
        extra = int(bool(overprovision and capacity > len(live) and vmss.get("overprovision")
                         and self.faults.overprovisioning))
        touched = []
        now = time.time()
        prefix = vmss["profile"].get("osProfile", {}).get("computerNamePrefix", vmss["name"])
        if capacity > len(live):
            for _ in range(capacity - len(live) + extra):
                seq = vmss["next_id"]
                vmss["next_id"] += 1
                if vmss["flexible"]:
                    # Flexible: the VM is named {scale-set}_{8 hex}, its computer name is the prefix + 6 characters.
                    suffix = uuid.uuid4().hex
                    iid, computer_name = "%s_%s" % (vmss["name"], suffix[:8]), prefix + suffix[8:14]
                else:
                    iid, computer_name = str(seq), prefix + _base36(seq)
                never = self._never_boots(vmss)
                vmss["vms"][iid] = {
                    "seq": seq, "state": "creating", "created": now,
                    "boot_at": None if never else now + self.boot_delay,
                    "delete_at": None, "vm_id": str(uuid.uuid4()),
                    "computer_name": computer_name,
                    "image": dict(vmss["profile"]["storageProfile"]["imageReference"]),
                    "model": vmss["model_version"],
                    "allocation_fails": self._marked(self.faults.allocation_failure, vmss) or self._late_refusal(),
                }
                touched.append(iid)
            if extra:
                vmss["vms"][touched[-1]]["extra_of"] = touched[:-1]
                touched = touched[:-1]
        else:
            for iid in reversed(live[capacity:] if capacity < len(live) else []):
                self._start_delete(vmss, iid)
                touched.append(iid)
        vmss["capacity"] = capacity
        return touched

    def _start_delete(self, vmss, iid):
        vm = vmss["vms"][iid]
        vm["state"] = "deleting"
        vm["delete_at"] = time.time() + self.delete_delay

    def _new_operation(self, vmss, kind, instances, delay=0.0):
        op_id = str(uuid.uuid4())
        self.operations[op_id] = {"id": op_id, "vmss": vmss["key"], "kind": kind, "instances": list(instances),
                                  "status": "InProgress", "startTime": _now_iso(), "not_before": time.time() + delay}
        vmss["provisioningState"] = "Updating"
        return op_id

    def create_scale_set(self, sub, rg, name, body):
        key = self._key(sub, rg, name)
        mode = (body.get("properties") or {}).get("orchestrationMode") or "Uniform"
        if mode not in ("Uniform", "Flexible"):
            raise ArmError(400, "InvalidParameter", "The value '%s' of parameter 'orchestrationMode' is invalid; "
                           "allowed values are Uniform and Flexible." % mode)
        profile = json.loads(json.dumps((body.get("properties") or {}).get("virtualMachineProfile") or {}))
        profile.setdefault("osProfile", {}).setdefault("computerNamePrefix", name.lower())
        storage = profile.setdefault("storageProfile", {})
        if not storage.get("imageReference"):
            raise ArmError(400, "InvalidParameter", "Required parameter 'imageReference' is missing (null).")
        self._check_image(storage["imageReference"], body.get("location") or LOCATION)
        capacity = int((body.get("sku") or {}).get("capacity") or 0)
        self._check_quota(capacity)
        vmss = {"key": key, "sub": sub, "rg": rg, "name": name, "location": body.get("location") or LOCATION,
                "tags": dict(body.get("tags") or {}), "sku_name": (body.get("sku") or {}).get("name") or VM_SIZE,
                "capacity": 0, "profile": profile, "vms": {}, "next_id": 0, "etag": 1, "model_version": 1,
                "uniqueId": str(uuid.uuid4()), "timeCreated": _now_iso(), "provisioningState": "Creating",
                "upgradePolicy": ((body.get("properties") or {}).get("upgradePolicy") or {"mode": "Manual"}),
                "flexible": mode == "Flexible",
                # ARM's default for a Uniform set created without the field is on; a Flexible set has none.
                "overprovision": None if mode == "Flexible" else (body.get("properties") or {}).get("overprovision", True),
                "repairs": dict((body.get("properties") or {}).get("automaticRepairsPolicy") or {}),
                "faultDomains": int((body.get("properties") or {}).get("platformFaultDomainCount") or 1)}
        vmss["role"] = vmss["tags"].get(ROLE_TAG, "worker")
        self.scale_sets[key] = vmss
        touched = self._resize(vmss, capacity)
        return vmss, self._new_operation(vmss, "create", touched)

    def _check_image(self, reference, location):
        if reference.get("id"):
            ident = reference["id"].lower()
            if ident not in self.managed_images and ident not in self.gallery_versions:
                raise ArmError(404, "NotFound", "The Image '%s' cannot be found in '%s' region." % (reference["id"], location))
        elif reference.get("communityGalleryImageId"):
            if (location.lower(), reference["communityGalleryImageId"].lower()) not in self.community_versions:
                raise ArmError(404, "GalleryImageNotFound", "The gallery image %s is not available in %s region."
                               % (reference["communityGalleryImageId"], location))
        elif reference.get("sharedGalleryImageId"):
            if (location.lower(), reference["sharedGalleryImageId"].lower()) not in self.shared_versions:
                raise ArmError(404, "GalleryImageNotFound", "The gallery image %s is not available in %s region."
                               % (reference["sharedGalleryImageId"], location))
        else:
            urn = tuple(str(reference.get(k, "")).lower() for k in ("publisher", "offer", "sku", "version"))
            if not all(urn) or (location.lower(),) + urn not in self.marketplace:
                raise ArmError(404, "PlatformImageNotFound", "The platform image '%s' is not available."
                               % ":".join(urn))

    def _apply_update(self, vmss, body):
        """PATCH semantics: only what the body names changes. Returns the instance IDs a capacity change touched."""
        properties = body.get("properties") or {}
        profile = properties.get("virtualMachineProfile") or {}
        reference = (profile.get("storageProfile") or {}).get("imageReference")
        capacity = (body.get("sku") or {}).get("capacity")
        if reference:
            self._check_image(reference, vmss["location"])
        if capacity is not None:
            capacity = int(capacity)
            if capacity < 0:
                raise ArmError(400, "InvalidParameter", "The value of parameter sku.capacity is invalid.")
            live = sum(1 for vm in vmss["vms"].values() if vm["state"] != "deleting")
            self._check_quota(capacity - live)
        if reference:
            vmss["profile"]["storageProfile"]["imageReference"] = dict(reference)
            vmss["model_version"] += 1
            vmss["model_changed_at"] = time.time()
        if "tags" in body:
            vmss["tags"] = dict(body["tags"] or {})
        if properties.get("upgradePolicy"):
            vmss["upgradePolicy"] = properties["upgradePolicy"]
        if "overprovision" in properties and not vmss["flexible"]:
            vmss["overprovision"] = bool(properties["overprovision"])
        if properties.get("automaticRepairsPolicy"):
            vmss["repairs"].update(properties["automaticRepairsPolicy"])
        vmss["etag"] += 1
        return self._resize(vmss, capacity) if capacity is not None else []

    # -- JSON views --------------------------------------------------------------------------------

    def vmss_json(self, vmss):
        if vmss["flexible"]:
            # A Flexible set has no overprovisioning or single placement group; it spreads over fault domains.
            properties = {"orchestrationMode": "Flexible", "platformFaultDomainCount": vmss["faultDomains"]}
        else:
            properties = {"singlePlacementGroup": False, "orchestrationMode": "Uniform",
                          "overprovision": vmss["overprovision"]}
        if vmss["repairs"]:
            properties["automaticRepairsPolicy"] = dict(vmss["repairs"])
        properties.update({
            "upgradePolicy": vmss["upgradePolicy"], "provisioningState": vmss["provisioningState"],
            "uniqueId": vmss["uniqueId"], "timeCreated": vmss["timeCreated"],
            "virtualMachineProfile": json.loads(json.dumps(vmss["profile"])),
        })
        return {
            "id": self._vmss_id(vmss), "name": vmss["name"], "type": "Microsoft.Compute/virtualMachineScaleSets",
            "location": vmss["location"], "tags": vmss["tags"], "etag": '"%d"' % vmss["etag"],
            "sku": {"name": vmss["sku_name"], "tier": "Standard", "capacity": vmss["capacity"]},
            "properties": properties,
        }

    def vm_json(self, vmss, iid, expand=False):
        vm = vmss["vms"][iid]
        provisioning = {"creating": "Creating", "running": "Succeeded", "deleting": "Deleting",
                        "failed": "Failed"}[vm["state"]]
        reference = dict(vm["image"])
        if reference.get("publisher"):
            reference["exactVersion"] = reference.get("version")
        if vmss["flexible"]:
            return self._flexible_vm_json(vmss, iid, vm, provisioning, reference, expand)
        data = {
            "id": self._vmss_id(vmss) + "/virtualMachines/" + iid, "name": "%s_%s" % (vmss["name"], iid),
            "type": "Microsoft.Compute/virtualMachineScaleSets/virtualMachines", "location": vmss["location"],
            "instanceId": iid, "sku": {"name": vmss["sku_name"], "tier": "Standard"},
            "properties": {
                "latestModelApplied": vm["model"] == vmss["model_version"], "vmId": vm["vm_id"],
                "provisioningState": provisioning, "timeCreated": _now_iso(vm["created"]),
                "hardwareProfile": {"vmSize": vmss["sku_name"]},
                "osProfile": {"computerName": vm["computer_name"], "adminUsername": "azureuser"},
                "storageProfile": {"imageReference": reference,
                                   "osDisk": {"osType": "Linux", "createOption": "FromImage", "caching": "ReadWrite"}},
            },
        }
        if expand:
            data["properties"]["instanceView"] = self.instance_view(vm)
        return data

    def _flexible_vm_json(self, vmss, name, vm, provisioning, reference, expand):
        """A Flexible scale set's VM as the virtual machines API shows it: a plain VM that names its scale set."""
        data = {
            "id": self._plain_vm_id(vmss, name), "name": name, "type": "Microsoft.Compute/virtualMachines",
            "location": vmss["location"], "tags": {},
            "properties": {
                "vmId": vm["vm_id"], "provisioningState": provisioning, "timeCreated": _now_iso(vm["created"]),
                "virtualMachineScaleSet": {"id": self._vmss_id(vmss)},
                "platformFaultDomain": vm["seq"] % vmss["faultDomains"],
                "hardwareProfile": {"vmSize": vmss["sku_name"]},
                "osProfile": {"computerName": vm["computer_name"], "adminUsername": "azureuser"},
                "storageProfile": {"imageReference": reference,
                                   "osDisk": {"osType": "Linux", "createOption": "FromImage", "caching": "ReadWrite",
                                              "name": "%s_OsDisk_1_%s" % (name, vm["vm_id"].replace("-", ""))}},
            },
        }
        if expand:
            data["properties"]["instanceView"] = self.instance_view(vm)
        return data

    @staticmethod
    def instance_view(vm):
        if vm["state"] == "failed":
            return {"platformUpdateDomain": 0, "platformFaultDomain": 0, "computerName": vm["computer_name"],
                    "statuses": [{"code": "ProvisioningState/failed/AllocationFailed", "level": "Error",
                                  "displayStatus": "Provisioning failed", "time": _now_iso(vm["created"]),
                                  "message": "Allocation failed. We do not have sufficient capacity for the "
                                             "requested VM size in this region."}]}
        if vm["state"] == "creating":
            statuses = [("ProvisioningState/creating", "Creating"), ("PowerState/starting", "VM starting")]
        elif vm["state"] == "deleting":
            statuses = [("ProvisioningState/deleting", "Deleting"), ("PowerState/running", "VM running")]
        else:
            statuses = [("ProvisioningState/succeeded", "Provisioning succeeded"), ("PowerState/running", "VM running")]
        return {"platformUpdateDomain": 0, "platformFaultDomain": 0, "computerName": vm["computer_name"],
                "statuses": [{"code": code, "level": "Info", "displayStatus": text, "time": _now_iso(vm["created"])}
                             for code, text in statuses]}

    # -- admin -------------------------------------------------------------------------------------

    def admin_create_image(self, name, kind="gallery", location=LOCATION):
        name = name.lower()
        with self.lock:
            if kind == "gallery":
                ref = ("/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/galleries/%s/images/%s"
                       "/versions/1.0.0" % (SUBSCRIPTION, RESOURCE_GROUP, GALLERY, name))
                self.gallery_versions.add(ref.lower())
            elif kind == "managed":
                ref = "/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/images/%s" % (
                    SUBSCRIPTION, RESOURCE_GROUP, name)
                self.managed_images.add(ref.lower())
            elif kind == "community":
                ref = "/CommunityGalleries/sandbox-public/Images/%s/Versions/1.0.0" % name
                self.community_versions.add((location.lower(), ref.lower()))
            elif kind == "shared":
                ref = "/SharedGalleries/%s-sandbox-shared/Images/%s/Versions/1.0.0" % (SUBSCRIPTION, name)
                self.shared_versions.add((location.lower(), ref.lower()))
            elif kind == "marketplace":
                ref = "kubenodes:sandbox-node:%s:1.0.0" % name
                self.marketplace.add((location.lower(),) + tuple(ref.split(":")))
            else:
                raise ArmError(400, "InvalidParameter", "unknown image kind %r" % kind)
        return _canonical_id(ref) if ref.startswith("/") else ref

    def admin_create_group(self, name, role, size, image, orchestration="Uniform", upgrade_policy="Manual",
                           overprovision=False, automatic_repairs=False):
        reference = _reference_of(image)
        body = {"location": LOCATION, "tags": {ROLE_TAG: role}, "sku": {"name": VM_SIZE, "capacity": int(size)},
                "properties": {"orchestrationMode": orchestration, "upgradePolicy": {"mode": upgrade_policy},
                               "virtualMachineProfile": {
                                   "osProfile": {"computerNamePrefix": name.lower(), "adminUsername": "azureuser"},
                                   "storageProfile": {"imageReference": reference}}}}
        if orchestration == "Flexible":
            body["properties"]["platformFaultDomainCount"] = 1
        elif overprovision is not None:   # None: the field unset, which ARM reads as on
            body["properties"]["overprovision"] = bool(overprovision)
        if automatic_repairs:
            body["properties"]["automaticRepairsPolicy"] = {"enabled": True, "gracePeriod": "PT10M"}
        with self.lock:
            vmss, _ = self.create_scale_set(SUBSCRIPTION, RESOURCE_GROUP, name, body)
            return self._group_id(vmss)

    def admin_create_autoscale(self, group_id, recommended, enabled=True, name=None):
        """An autoscale setting on the scale set `group_id` whose default capacity (what it recommends, the emulator
        having no metrics) is `recommended`."""
        with self.lock:
            match = re.match(r"^/subscriptions/([^/]+)/resourceGroups/([^/]+)/providers/Microsoft.Compute/"
                             r"virtualMachineScaleSets/([^/]+)$", group_id, re.I)
            vmss = self.scale_sets.get(self._key(*match.groups())) if match else None
            if vmss is None:
                raise ArmError(404, "ResourceNotFound", "no scale set %s" % group_id)
            name = name or vmss["name"] + "-autoscale"
            key = (vmss["sub"].lower(), vmss["rg"].lower(), name.lower())
            self.autoscale_settings[key] = {
                "id": "/subscriptions/%s/resourceGroups/%s/providers/microsoft.insights/autoscalesettings/%s"
                      % (vmss["sub"], vmss["rg"], name),
                "name": name, "type": "Microsoft.Insights/autoscaleSettings", "location": vmss["location"], "tags": {},
                "properties": {"name": name, "enabled": bool(enabled), "targetResourceUri": self._vmss_id(vmss),
                               "targetResourceLocation": vmss["location"], "notifications": [],
                               "profiles": [{"name": "default", "rules": [], "capacity": {
                                   "minimum": "0", "maximum": "100", "default": str(int(recommended))}}]},
                "_vmss": vmss["key"]}
            return self.autoscale_settings[key]["id"]

    def admin_fail_health(self, group_id, instance):
        with self.lock:
            vmss = self._vmss_or_404(*az_group_parts(group_id))
            self._vm_or_404(vmss, instance)["unhealthy_since"] = time.time()

    def admin_set_faults(self, error_rate=0.0, codes=(429, 500, 503), latency=0.0, never_boot=(), quota=None,
                         fail_next=0, seed=None, allocation_failure=(), deny=(), require_auth=False, delete_delay=None,
                         late_refusals=0, boot_delay=None, upgrade_policies=True, upgrade_delay=1.0, autoscale=True,
                         autoscale_delay=1.0, overprovisioning=True, overprovision_delay=1.0, automatic_repairs=True,
                         repair_delay=1.0):
        with self.lock:
            self.faults.overprovisioning = bool(overprovisioning)
            self.faults.overprovision_delay = float(overprovision_delay)
            self.faults.automatic_repairs = bool(automatic_repairs)
            self.faults.repair_delay = float(repair_delay)
            self.faults.autoscale = bool(autoscale)
            self.faults.autoscale_delay = float(autoscale_delay)
            self.faults.late_refusals = int(late_refusals)
            if boot_delay is not None:
                self.boot_delay = float(boot_delay)
            self.faults.upgrade_policies = bool(upgrade_policies)
            self.faults.upgrade_delay = float(upgrade_delay)
            if delete_delay is not None:
                self.delete_delay = float(delete_delay)
            self.faults.deny = set(deny or ())
            self.faults.require_auth = bool(require_auth)
            self.faults.error_rate = float(error_rate)
            self.faults.codes = tuple(int(c) for c in codes)
            self.faults.latency = float(latency)
            self.faults.never_boot = {str(v).lower() for v in (never_boot or ())}
            self.faults.allocation_failure = {str(v).lower() for v in (allocation_failure or ())}
            self.faults.quota = None if quota is None else int(quota)
            self.faults.fail_next = int(fail_next)
            if seed is not None:
                self.faults.rng.seed(seed)

    def admin_state(self):
        with self.lock:
            return {"scale_sets": [dict(self.vmss_json(v), vms=[self.vm_json(v, i, True) for i in self._ordered(v)],
                                        reimaged=list(v.get("reimaged") or []),
                                        autoscaled=list(v.get("autoscaled") or []),
                                        overprovisioned=list(v.get("overprovisioned") or []),
                                        repaired=list(v.get("repaired") or []))
                                   for v in self.scale_sets.values()],
                    # The timings a benchmark reads back (bench/makespan.py's bound takes the boot).
                    "faults": {"boot_delay": self.boot_delay, "delete_delay": self.delete_delay,
                               "latency": self.faults.latency}}

    # -- ARM handlers (lock held; return (status, body, headers)) --------------------------------------

    def _vmss_or_404(self, sub, rg, name):
        vmss = self.scale_sets.get(self._key(sub, rg, name))
        if vmss is None:
            raise ArmError(404, "ResourceNotFound", "The Resource 'Microsoft.Compute/virtualMachineScaleSets/%s' under "
                           "resource group '%s' was not found. For more details please go to "
                           "https://aka.ms/ARMResourceNotFoundFix" % (name, rg))
        return vmss

    @staticmethod
    def _uniform_only(vmss, operation):
        if vmss["flexible"]:
            raise ArmError(400, "OperationNotAllowed", "The operation '%s' is not supported on Virtual Machine Scale "
                           "Set '%s' with orchestration mode 'Flexible'; use the Virtual Machines API on its VMs."
                           % (operation, vmss["name"]))

    def _vm_or_404(self, vmss, iid):
        if iid not in vmss["vms"]:
            raise ArmError(404, "ResourceNotFound", "The Resource 'Microsoft.Compute/virtualMachineScaleSets/%s/"
                           "virtualMachines/%s' under resource group '%s' was not found."
                           % (vmss["name"], iid, vmss["rg"]))
        return vmss["vms"][iid]

    def _lro_headers(self, req, vmss, op_id, location_header=False):
        base = "%s/subscriptions/%s/providers/Microsoft.Compute/locations/%s/operations/%s" % (
            self.endpoint, vmss["sub"], vmss["location"], op_id)
        version = urllib.parse.quote(req.api_version)
        headers = {"Azure-AsyncOperation": "%s?api-version=%s" % (base, version),
                   "Retry-After": str(self.retry_after)}
        if location_header:
            headers["Location"] = "%s?monitor=true&api-version=%s" % (base, version)
        return headers

    @staticmethod
    def _autoscale_json(setting):
        return {k: v for k, v in setting.items() if not k.startswith("_")}

    def _autoscale_or_404(self, sub, rg, name):
        setting = self.autoscale_settings.get((sub.lower(), rg.lower(), name.lower()))
        if setting is None:
            raise ArmError(404, "ResourceNotFound", "The Resource 'microsoft.insights/autoscalesettings/%s' under "
                           "resource group '%s' was not found." % (name, rg))
        return setting

    def list_autoscale(self, req, sub):
        items = [self._autoscale_json(v) for k, v in sorted(self.autoscale_settings.items()) if k[0] == sub.lower()]
        return 200, self._page(req, items), {}

    def patch_autoscale(self, req, sub, rg, name):
        setting = self._autoscale_or_404(sub, rg, name)
        enabled = ((req.body or {}).get("properties") or {}).get("enabled")
        if enabled is not None:
            if not isinstance(enabled, bool):
                raise ArmError(400, "InvalidRequestContent", "properties.enabled must be true or false")
            setting["properties"]["enabled"] = enabled
        return 200, self._autoscale_json(setting), {}

    def get_vmss(self, req, sub, rg, name):
        return 200, self.vmss_json(self._vmss_or_404(sub, rg, name)), {}

    def list_vmss(self, req, sub, rg):
        items = [self.vmss_json(v) for k, v in sorted(self.scale_sets.items())
                 if k[0] == sub.lower() and k[1] == rg.lower()]
        return 200, self._page(req, items), {}

    def _check_if_match(self, req, vmss):
        if_match = req.headers.get("If-Match")
        if if_match and if_match != "*" and if_match != '"%d"' % vmss["etag"]:
            raise ArmError(412, "PreconditionFailed", "The condition specified using HTTP conditional header(s) is "
                           "not met. Resource etag is '\"%d\"', If-Match was '%s'." % (vmss["etag"], if_match))

    def put_vmss(self, req, sub, rg, name):
        vmss = self.scale_sets.get(self._key(sub, rg, name))
        if vmss is None:
            vmss, op_id = self.create_scale_set(sub, rg, name, req.body)
            return 201, self.vmss_json(vmss), self._lro_headers(req, vmss, op_id)
        self._check_if_match(req, vmss)
        touched = self._apply_update(vmss, req.body)
        op_id = self._new_operation(vmss, "create", touched, delay=0.0 if touched else 0.05)
        return 200, self.vmss_json(vmss), self._lro_headers(req, vmss, op_id)

    def patch_vmss(self, req, sub, rg, name):
        vmss = self._vmss_or_404(sub, rg, name)
        self._check_if_match(req, vmss)
        touched = self._apply_update(vmss, req.body)
        op_id = self._new_operation(vmss, "create", touched, delay=0.0 if touched else 0.05)
        return 200, self.vmss_json(vmss), self._lro_headers(req, vmss, op_id)

    def delete_instances(self, req, sub, rg, name):
        vmss = self._vmss_or_404(sub, rg, name)
        ids = req.body.get("instanceIds")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ArmError(400, "InvalidRequestContent", "The request content was invalid: 'instanceIds' must be a "
                           "list of strings.")
        if vmss["flexible"]:   # a Flexible set's instance IDs are its VM names, compared case-insensitively
            names = {iid.lower(): iid for iid in vmss["vms"]}
            ids = [names.get(iid.lower(), iid) for iid in ids]
        for iid in ids:
            vm = vmss["vms"].get(iid)
            if vm is None or vm["state"] == "deleting":
                raise ArmError(400, "InvalidParameter", "The provided instanceId %s is not an active Virtual Machine "
                               "Scale Set VM instanceId." % iid)
        for iid in ids:
            self._start_delete(vmss, iid)
        vmss["capacity"] -= len(ids)
        vmss["etag"] += 1
        op_id = self._new_operation(vmss, "delete", ids)
        return 202, None, self._lro_headers(req, vmss, op_id, location_header=True)

    def list_vms(self, req, sub, rg, name):
        vmss = self._vmss_or_404(sub, rg, name)
        self._uniform_only(vmss, "listVirtualMachineScaleSetVMs")
        expand = req.query.get("$expand", "").lower() == "instanceview"
        items = [self.vm_json(vmss, iid, expand) for iid in self._ordered(vmss)]
        return 200, self._page(req, items), {}

    def get_vm(self, req, sub, rg, name, iid):
        vmss = self._vmss_or_404(sub, rg, name)
        self._uniform_only(vmss, "getVirtualMachineScaleSetVM")
        self._vm_or_404(vmss, iid)
        return 200, self.vm_json(vmss, iid, req.query.get("$expand", "").lower() == "instanceview"), {}

    def get_instance_view(self, req, sub, rg, name, iid):
        vmss = self._vmss_or_404(sub, rg, name)
        self._uniform_only(vmss, "getVirtualMachineScaleSetVMInstanceView")
        return 200, self.instance_view(self._vm_or_404(vmss, iid)), {}

    _VMSS_FILTER_RE = re.compile(r"^\s*'?virtualMachineScaleSet/id'?\s+eq\s+'([^']+)'\s*$", re.I)

    def _plain_vms(self, sub, rg):
        """(scale set, VM name) of every plain VM in a resource group: the VMs of its Flexible scale sets (Uniform
        sets' VMs are not virtual machines of the resource group)."""
        found = []
        for key, vmss in sorted(self.scale_sets.items()):
            if key[0] == sub.lower() and key[1] == rg.lower() and vmss["flexible"]:
                found.extend((vmss, name) for name in self._ordered(vmss))
        return found

    def list_plain_vms(self, req, sub, rg):
        text = req.query.get("$filter")
        expand = req.query.get("$expand")
        if expand is not None and expand.lower() != "instanceview":
            raise ArmError(400, "InvalidParameter", "The value '%s' of $expand is invalid; allowed: instanceView."
                           % expand)
        if expand is not None and text is None:
            raise ArmError(400, "InvalidParameter", "$expand=instanceView can only be used together with a $filter on "
                           "'virtualMachineScaleSet/id'.")
        vms = self._plain_vms(sub, rg)
        if text is not None:
            match = self._VMSS_FILTER_RE.match(text)
            if not match:
                raise ArmError(400, "InvalidParameter", "The $filter '%s' is not supported; the allowed filter is "
                               "'virtualMachineScaleSet/id' eq '<scale set ID>'." % text)
            wanted = match.group(1).lower()
            vms = [(vmss, name) for vmss, name in vms if self._vmss_id(vmss).lower() == wanted]
        items = [self.vm_json(vmss, name, expand is not None) for vmss, name in vms]
        return 200, self._page(req, items), {}

    def get_plain_vm(self, req, sub, rg, vm_name):
        for vmss, name in self._plain_vms(sub, rg):
            if name.lower() == vm_name.lower():
                return 200, self.vm_json(vmss, name, req.query.get("$expand", "").lower() == "instanceview"), {}
        raise ArmError(404, "ResourceNotFound", "The Resource 'Microsoft.Compute/virtualMachines/%s' under resource "
                       "group '%s' was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix"
                       % (vm_name, rg))

    def _page(self, req, items):
        start = int(req.query.get("$skiptoken") or 0)
        page = items[start:start + self.page_size]
        body = {"value": page}
        if start + self.page_size < len(items):
            query = {k: v for k, v in req.query.items() if k != "$skiptoken"}
            query["$skiptoken"] = str(start + self.page_size)
            body["nextLink"] = "%s%s?%s" % (self.endpoint, req.path, urllib.parse.urlencode(query))
        return body

    def get_managed_image(self, req, sub, rg, name):
        ident = "/subscriptions/%s/resourcegroups/%s/providers/microsoft.compute/images/%s" % (sub, rg, name)
        if ident.lower() not in self.managed_images:
            raise ArmError(404, "ResourceNotFound", "The Resource 'Microsoft.Compute/images/%s' under resource group "
                           "'%s' was not found." % (name, rg))
        return 200, {"id": _canonical_id(ident), "name": name.lower(), "type": "Microsoft.Compute/images",
                     "location": LOCATION, "properties": {"provisioningState": "Succeeded"}}, {}

    def get_gallery_version(self, req, sub, rg, gallery, image, version):
        ident = ("/subscriptions/%s/resourcegroups/%s/providers/microsoft.compute/galleries/%s/images/%s/versions/%s"
                 % (sub, rg, gallery, image, version)).lower()
        if ident not in self.gallery_versions:
            raise ArmError(404, "ResourceNotFound", "The Resource 'Microsoft.Compute/galleries/%s/images/%s/versions/%s'"
                           " under resource group '%s' was not found." % (gallery, image, version, rg))
        return 200, {"id": _canonical_id(ident), "name": version, "location": LOCATION,
                     "type": "Microsoft.Compute/galleries/images/versions",
                     "properties": {"provisioningState": "Succeeded", "publishingProfile": {"targetRegions": [
                         {"name": LOCATION, "regionalReplicaCount": 1}]}}}, {}

    def _location_image(self, store, location, ident, kind):
        if (location.lower(), ident.lower()) not in store:
            raise ArmError(404, "ResourceNotFound", "The %s image version '%s' was not found in location '%s'."
                           % (kind, ident, location))
        return 200, {"name": ident.rsplit("/", 1)[-1], "location": location,
                     "identifier": {"uniqueId": ident}, "properties": {}}, {}

    def get_shared_version(self, req, sub, location, gallery, image, version):
        return self._location_image(self.shared_versions, location,
                                    "/SharedGalleries/%s/Images/%s/Versions/%s" % (gallery, image, version), "shared gallery")

    def get_community_version(self, req, sub, location, gallery, image, version):
        return self._location_image(self.community_versions, location,
                                    "/CommunityGalleries/%s/Images/%s/Versions/%s" % (gallery, image, version),
                                    "community gallery")

    def get_marketplace_image(self, req, sub, location, publisher, offer, sku, version):
        key = tuple(p.lower() for p in (location, publisher, offer, sku, version))
        if key not in self.marketplace:
            raise ArmError(404, "ImageVersionNotFound" if key[:4] in {m[:4] for m in self.marketplace}
                           else "ArtifactNotFound", "Artifact: VMImage was not found.")
        return 200, {"name": version, "location": location, "id": req.path, "properties": {"osDiskImage": {
            "operatingSystem": "Linux"}}}, {}

    def list_usages(self, req, sub, location):
        used = self._vm_count()
        quota = self.faults.quota
        cores = GENEROUS_CORES if quota is None else quota * VM_SIZE_VCPUS
        vms = GENEROUS_VMS if quota is None else quota

        def usage(name, localized, current, limit):
            return {"unit": "Count", "currentValue": current, "limit": limit,
                    "name": {"value": name, "localizedValue": localized}}
        return 200, {"value": [
            usage("availabilitySets", "Availability Sets", 0, 2500),
            usage("cores", "Total Regional vCPUs", used * VM_SIZE_VCPUS, cores),
            usage("virtualMachines", "Virtual Machines", used, vms),
            usage("virtualMachineScaleSets", "Virtual Machine Scale Sets", len(self.scale_sets), 2500),
            usage(VM_SIZE_FAMILY, "Standard DSv5 Family vCPUs", used * VM_SIZE_VCPUS, cores),
            usage("standardESv5Family", "Standard ESv5 Family vCPUs", 0, GENEROUS_CORES),
        ]}, {}

    def list_skus(self, req, sub):
        match = re.match(r"^\s*location\s+eq\s+'([^']+)'\s*$", req.query.get("$filter", "location eq '%s'" % LOCATION))
        if not match:
            raise ArmError(400, "InvalidFilter", "Only the location filter is supported: location eq '<location>'.")
        location = match.group(1)
        known = location.lower() == LOCATION.lower()
        return 200, {"value": [dict(sku, locations=[location], restrictions=[]) for sku in SKUS] if known else []}, {}

    def get_operation(self, req, sub, location, op_id):
        op = self.operations.get(op_id)
        if op is None:
            raise ArmError(404, "ResourceNotFound", "The operation '%s' was not found." % op_id)
        if req.query.get("monitor", "").lower() == "true":
            if op["status"] == "InProgress":
                return 202, None, {"Location": self.endpoint + req.raw_path, "Retry-After": str(self.retry_after)}
            return 200, None, {}
        body = {"name": op_id, "status": op["status"], "startTime": op["startTime"]}
        if op["status"] == "Failed":
            body["error"] = {"code": "AllocationFailed", "message": "Allocation failed. We do not have sufficient "
                             "capacity for the requested VM size in this region."}
        if op.get("endTime"):
            body["endTime"] = op["endTime"]
        headers = {"Retry-After": str(self.retry_after)} if op["status"] == "InProgress" else {}
        return 200, body, headers


def az_group_parts(group_id):
    """(subscription, resource group, scale set) of a scale set ID."""
    match = re.match(r"^/subscriptions/([^/]+)/resourceGroups/([^/]+)/providers/Microsoft.Compute/"
                     r"virtualMachineScaleSets/([^/]+)$", group_id, re.I)
    if not match:
        raise ValueError("not a scale set ID: %s" % group_id)
    return match.groups()


def _reference_of(image):
    """The imageReference (wire form) for an image string the Admin API returned."""
    low = image.lower()
    if low.startswith("/communitygalleries/"):
        return {"communityGalleryImageId": image}
    if low.startswith("/sharedgalleries/"):
        return {"sharedGalleryImageId": image}
    if low.startswith("/"):
        return {"id": image}
    publisher, offer, sku, version = image.split(":")
    return {"publisher": publisher, "offer": offer, "sku": sku, "version": version}


# Entra ID's login routes on the emulator's port: (path regex, _Handler method).
_LOGIN_ROUTES = [
    (re.compile(r"^/([^/]+)(?:/v2\.0)?/\.well-known/openid-configuration$"), "_openid_configuration"),
    (re.compile(r"^/([^/]+)/oauth2(?:/v2\.0)?/token$"), "_token"),
]
# Tenant names that stand for "the user's own tenant" in a login URL.
_ANY_TENANT = {"organizations", "common", "adfs"}


def _login_error(status, error, code, description):
    """Entra ID's error body: the MSAL client shows error_description."""
    return status, {"error": error, "error_description": "AADSTS%d: %s" % (code, description), "error_codes": [code],
                    "timestamp": _now_iso(), "trace_id": str(uuid.uuid4()), "correlation_id": str(uuid.uuid4())}


class _Request:
    def __init__(self, method, raw_path, headers, body):
        self.method = method
        self.raw_path = raw_path
        split = urllib.parse.urlsplit(raw_path)
        self.path = urllib.parse.unquote(split.path)
        self.query = dict(urllib.parse.parse_qsl(split.query, keep_blank_values=True))
        self.headers = headers
        self.body = body
        self.api_version = self.query.get("api-version", "")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    emulator = None  # set on the subclass made in start()

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        return  # quiet: the request log is the record

    def _send(self, status, body=None, headers=None):
        payload = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if body is not None:
            self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("x-ms-request-id", str(uuid.uuid4()))
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _error(self, err):
        self._send(err.status, {"error": {"code": err.code, "message": err.message}}, err.headers)

    def _read_raw(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    @staticmethod
    def _parse_body(raw):
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise ArmError(400, "InvalidRequestContent", "The request content was invalid and could not be deserialized.")

    def do_GET(self):
        self._dispatch("GET")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_POST(self):
        self._dispatch("POST")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def _dispatch(self, method):
        emulator = self.emulator
        raw = self._read_raw()
        path = urllib.parse.urlsplit(self.path).path
        for regex, login_handler in _LOGIN_ROUTES:
            match = regex.match(path)
            if match:
                status, payload = getattr(self, login_handler)(method, raw, *match.groups())
                self._send(status, payload, {"Cache-Control": "no-store"})
                return
        try:
            body = self._parse_body(raw)
        except ArmError as err:
            self._error(err)
            return
        req = _Request(method, self.path, self.headers, body)
        if req.path.startswith("/_emulator/"):
            self._admin(req)
            return
        entry = {"method": method, "template": None, "query": sorted(req.query),
                 "body": sorted(body_paths(body)) if isinstance(body, dict) else ([] if body is None else ["<list>"]),
                 "headers": sorted(h for h in ("If-Match", "If-None-Match") if req.headers.get(h)),
                 "status": None}
        try:
            status, payload, headers = self._arm(req, entry)
        except ArmError as err:
            entry["status"] = err.status
            with emulator.lock:
                emulator.requests.append(entry)
            self._error(err)
            return
        entry["status"] = status
        with emulator.lock:
            emulator.requests.append(entry)
        self._send(status, payload, headers)

    # -- Entra ID (lock taken here; return (status, body)) -------------------------------------------

    def _known_tenant(self, tenant):
        emulator = self.emulator
        return tenant.lower() in _ANY_TENANT or any(
            who["tenant"] == tenant.lower() for who in list(emulator.principals.values()) + list(emulator.users.values()))

    def _openid_configuration(self, method, raw, tenant):  # pylint: disable=unused-argument
        if method != "GET":
            return _login_error(405, "invalid_request", 900561, "The endpoint only accepts GET requests.")
        with self.emulator.lock:
            known = self._known_tenant(tenant)
        if not known:
            return _login_error(400, "invalid_tenant", 90002, "Tenant '%s' not found. Check to make sure you have "
                                "the correct tenant ID and are signing into the correct cloud." % tenant)
        base = "%s/%s" % (self.emulator.endpoint, tenant)
        adfs = tenant.lower() == "adfs"
        return 200, {"token_endpoint": base + ("/oauth2/token" if adfs else "/oauth2/v2.0/token"),
                     "authorization_endpoint": base + ("/oauth2/authorize" if adfs else "/oauth2/v2.0/authorize"),
                     "device_authorization_endpoint": base + "/oauth2/v2.0/devicecode",
                     "issuer": base + ("" if adfs else "/v2.0"),
                     "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"],
                     "response_types_supported": ["code", "id_token", "token"]}

    def _token(self, method, raw, tenant):
        if method != "POST":
            return _login_error(405, "invalid_request", 900561, "The endpoint only accepts POST requests.")
        form = dict(urllib.parse.parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True))
        status, answer = self._token_answer(form, tenant)
        if status != 200:
            # A refused login is on the record too: a test sees that a wrong secret was tried once, not retried.
            with self.emulator.lock:
                self.emulator.token_grants.append({
                    "refused": answer["error_codes"][0], "grant_type": form.get("grant_type", ""),
                    "client_id": form.get("client_id", ""), "username": form.get("username", ""),
                    "tenant": tenant, "at": time.time()})
        return status, answer

    def _token_answer(self, form, tenant):
        emulator = self.emulator
        grant_type = form.get("grant_type", "")
        scopes = form.get("scope", "").split()
        resource_scopes = [scope for scope in scopes if scope.endswith("/.default")]
        with emulator.lock:
            if not self._known_tenant(tenant):
                return _login_error(400, "invalid_tenant", 90002, "Tenant '%s' not found." % tenant)
            if grant_type == "client_credentials":
                client_id = form.get("client_id", "")
                principal = emulator.principals.get(client_id.lower())
                if principal is None or principal["tenant"] != tenant.lower():
                    return _login_error(400, "unauthorized_client", 700016, "Application with identifier '%s' was "
                                        "not found in the directory '%s'." % (client_id, tenant))
                if "client_secret" not in form:
                    return _login_error(401, "invalid_client", 7000218, "The request body must contain the "
                                        "following parameter: 'client_assertion' or 'client_secret'.")
                if form["client_secret"] != principal["secret"]:
                    return _login_error(401, "invalid_client", 7000215, "Invalid client secret provided. Ensure "
                                        "the secret being sent in the request is the client secret value, not the "
                                        "client secret ID, for a secret added to app '%s'." % client_id)
                who = {"client_id": client_id, "tenant": principal["tenant"]}
            elif grant_type == "password":
                user = emulator.users.get(form.get("username", "").lower())
                if user is None or form.get("password") != user["password"] or (
                        tenant.lower() not in _ANY_TENANT and tenant.lower() != user["tenant"]):
                    return _login_error(400, "invalid_grant", 50126, "Error validating credentials due to "
                                        "invalid username or password.")
                who = {"username": form["username"], "client_id": form.get("client_id", ""), "tenant": user["tenant"]}
            else:
                return _login_error(400, "unsupported_grant_type", 70003, "The app requested an unsupported grant "
                                    "type '%s'." % grant_type)
            if len(resource_scopes) != 1:
                return _login_error(400, "invalid_scope", 70011, "The provided value for the input parameter "
                                    "'scope' is not valid: one resource/.default scope is needed, got %r."
                                    % form.get("scope", ""))
            token = "emulated-entra-" + uuid.uuid4().hex
            grant = dict(who, grant_type=grant_type, scope=resource_scopes[0], at=time.time())
            emulator.tokens[token] = grant
            emulator.token_grants.append(grant)
        answer = {"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599, "access_token": token,
                  "scope": resource_scopes[0]}
        if "openid" in scopes and "username" in who:
            # A user's login: MSAL and azure-identity build the account from the ID token and client_info.
            answer.update(self._id_token(tenant, who, form.get("client_id", "")))
        return 200, answer

    def _id_token(self, tenant, who, client_id):
        """An ID token (unsigned: MSAL reads its claims without checking a signature) and client_info."""
        def b64(data):
            return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()
        object_id = str(uuid.uuid5(uuid.NAMESPACE_URL, who["username"].lower()))
        adfs = tenant.lower() == "adfs"
        now = int(time.time())
        claims = {"iss": "%s/%s%s" % (self.emulator.endpoint, tenant, "" if adfs else "/v2.0"), "aud": client_id,
                  "sub": object_id, "oid": object_id, "tid": who["tenant"], "iat": now, "nbf": now,
                  "exp": now + 3600, "preferred_username": who["username"], "upn": who["username"]}
        return {"id_token": "%s.%s." % (b64({"typ": "JWT", "alg": "none"}), b64(claims)),
                "client_info": b64({"uid": object_id, "utid": who["tenant"]})}

    # -- Resource Manager ------------------------------------------------------------------------------

    def _arm(self, req, entry):
        emulator = self.emulator
        auth = req.headers.get("Authorization") or ""
        if not auth.startswith("Bearer ") or not auth[7:].strip():
            raise ArmError(401, "AuthenticationFailed", "Authentication failed. The 'Authorization' header is missing.")
        if emulator.faults.require_auth and auth[7:].strip() not in emulator.tokens:
            raise ArmError(401, "InvalidAuthenticationToken", "The access token is invalid.")
        if not req.api_version:
            raise ArmError(400, "MissingApiVersionParameter", "The api-version query parameter (?api-version=) is "
                           "required for all requests.")
        if not _API_VERSION_RE.match(req.api_version):
            raise ArmError(400, "InvalidApiVersionParameter", "The api-version '%s' is invalid. The supported "
                           "versions are 'yyyy-mm-dd' dates." % req.api_version)
        for template, regex, methods in ROUTES:
            match = regex.match(req.path)
            if not match:
                continue
            entry["template"] = template
            if req.method not in methods:
                raise ArmError(405, "MethodNotAllowed", "The requested resource does not support http method '%s'."
                               % req.method)
            handler, query_keys, body_keys = methods[req.method]
            unknown_query = [k for k in req.query if k not in query_keys]
            if unknown_query:
                raise ArmError(400, "InvalidQueryParameterValue", "The query parameter(s) %s are not supported on "
                               "this resource." % ", ".join(sorted(unknown_query)))
            if body_keys is None and req.body is not None:
                raise ArmError(400, "InvalidRequestContent", "The request content must be empty.")
            if body_keys is not None:
                if not isinstance(req.body, dict):
                    raise ArmError(400, "InvalidRequestContent", "The request content was invalid: a JSON object "
                                   "is required.")
                unknown = [p for p in body_paths(req.body) if p not in body_keys and not p.startswith(_FREE_SUBTREES)]
                if unknown:
                    raise ArmError(400, "InvalidRequestContent", "The request content was invalid and could not be "
                                   "deserialized: 'Could not find member '%s' on object of type 'ResourceDefinition'."
                                   "'." % unknown[0])
            self._inject_faults(handler)
            if handler in emulator.faults.deny:
                action = _PERMISSIONS.get(handler, "Microsoft.Compute/%s" % handler)
                raise ArmError(403, "AuthorizationFailed", "The client 'sandbox' with object id "
                               "'00000000-0000-0000-0000-000000000000' does not have authorization to perform action "
                               "'%s' over scope '%s' or the scope is invalid." % (action, req.path))
            with emulator.lock:
                return getattr(emulator, handler)(req, *match.groups())
        if "/providers/microsoft.compute/" in req.path.lower():
            kind = req.path.lower().split("/providers/microsoft.compute/", 1)[1].split("/")[0]
            raise ArmError(404, "InvalidResourceType", "The resource type '%s' could not be found in the namespace "
                           "'Microsoft.Compute' for api version '%s'." % (kind, req.api_version))
        raise ArmError(404, "InvalidRequestUri", "The request URI '%s' is not valid." % req.path)

    def _inject_faults(self, handler):
        faults = self.emulator.faults
        if faults.latency:
            time.sleep(faults.latency)
        if handler == "get_operation":
            return  # polls of operations answer reliably: faults hit the resource calls
        with self.emulator.lock:
            fail = faults.fail_next > 0
            if fail:
                faults.fail_next -= 1
            elif faults.error_rate and faults.rng.random() < faults.error_rate:
                fail = True
            code = faults.rng.choice(faults.codes) if fail else None
        if code == 429:
            raise ArmError(429, "TooManyRequests", "The request is being throttled as the limit has been reached "
                           "for operation type - Read_30Min.",
                           headers={"Retry-After": str(self.emulator.throttle_retry_after)})
        if code is not None and code >= 500:
            raise ArmError(code, {500: "InternalServerError", 503: "ServiceUnavailable"}.get(code, "ServerError"),
                           "The server encountered an internal error (injected fault).")
        if code is not None:
            raise ArmError(code, "BadRequest", "Injected fault %d." % code)

    def _admin(self, req):
        emulator = self.emulator
        name = req.path[len("/_emulator/"):].strip("/")
        body = req.body or {}
        try:
            if name == "images" and req.method == "POST":
                self._send(200, {"image": emulator.admin_create_image(body["name"], body.get("kind", "gallery"))})
            elif name == "groups" and req.method == "POST":
                self._send(200, {"group_id": emulator.admin_create_group(
                    body["name"], body.get("role", "worker"), body.get("size", 0), body["image"],
                    orchestration=body.get("orchestration", "Uniform"), upgrade_policy=body.get("upgrade_policy", "Manual"),
                    overprovision=body.get("overprovision", False), automatic_repairs=body.get("automatic_repairs", False))})
            elif name == "unhealthy" and req.method == "POST":
                emulator.admin_fail_health(body["group_id"], str(body["instance"]))
                self._send(200, {})
            elif name == "autoscale" and req.method == "POST":
                self._send(200, {"id": emulator.admin_create_autoscale(**body)})
            elif name == "faults" and req.method == "POST":
                emulator.admin_set_faults(**body)
                self._send(200, {})
            elif name == "requests" and req.method == "GET":
                with emulator.lock:
                    self._send(200, {"requests": list(emulator.requests)})
            elif name == "requests" and req.method == "DELETE":
                with emulator.lock:
                    emulator.requests.clear()
                self._send(200, {})
            elif name == "state" and req.method == "GET":
                self._send(200, emulator.admin_state())
            elif name == "principals" and req.method == "POST":
                with emulator.lock:
                    emulator.principals[body["client_id"].lower()] = {"tenant": body["tenant"].lower(),
                                                                      "secret": body["secret"]}
                self._send(200, {})
            elif name == "users" and req.method == "POST":
                with emulator.lock:
                    emulator.users[body["username"].lower()] = {"tenant": body["tenant"].lower(),
                                                                "password": body["password"]}
                self._send(200, {})
            elif name == "token_grants" and req.method == "GET":
                with emulator.lock:
                    self._send(200, {"grants": list(emulator.token_grants)})
            else:
                self._send(404, {"error": {"code": "NotFound", "message": "no admin call %s %s" % (req.method, name)}})
        except ArmError as err:
            self._error(err)
        except (KeyError, TypeError, ValueError) as exc:
            self._send(400, {"error": {"code": "BadRequest", "message": "bad admin request: %r" % exc}})


class Admin:
    """Drives an emulator (in-process or a process) from the JSON line it printed, over its HTTPS admin API."""

    def __init__(self, info, timeout=30):
        self.info = info
        self.endpoint = info["endpoint"]
        self.ca_cert = info.get("ca_cert")
        self.timeout = timeout
        self._context = ssl.create_default_context(cafile=self.ca_cert)
        # Loopback only: no proxy from the environment may intercept.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                                   urllib.request.HTTPSHandler(context=self._context))

    def _call(self, method, name, body=None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.endpoint + "/_emulator/" + name, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with self._opener.open(request, timeout=self.timeout) as response:
            payload = response.read()
        return json.loads(payload) if payload else {}

    def create_image(self, name, kind="gallery"):
        """kind: gallery (a Compute Gallery image version), managed, community, shared or marketplace."""
        return self._call("POST", "images", {"name": name, "kind": kind})["image"]

    def create_group(self, name, role, size, image, orchestration="Uniform", upgrade_policy="Manual", overprovision=False,
                     automatic_repairs=False):
        """A scale set of `size` VMs on `image`; orchestration "Uniform" (default) or "Flexible"; upgrade_policy
        Manual (ARM's default), Automatic or Rolling; overprovision False (the sandbox's), True, or None (unset: on,
        ARM's default); automatic_repairs: automaticRepairsPolicy enabled."""
        return self._call("POST", "groups", {"name": name, "role": role, "size": size, "image": image,
                                             "orchestration": orchestration, "upgrade_policy": upgrade_policy,
                                             "overprovision": overprovision,
                                             "automatic_repairs": automatic_repairs})["group_id"]

    def fail_health(self, group_id, instance):
        """The VM `instance` (instance ID) of the scale set reads unhealthy: automatic repairs replace it."""
        return self._call("POST", "unhealthy", {"group_id": group_id, "instance": instance})

    def set_faults(self, error_rate=0.0, codes=(429, 500, 503), latency=0.0, never_boot=(), quota=None, fail_next=0,
                   seed=None, allocation_failure=(), deny=(), require_auth=False, delete_delay=None, late_refusals=0,
                   boot_delay=None, upgrade_policies=True, upgrade_delay=1.0, autoscale=True, autoscale_delay=1.0,
                   overprovisioning=True, overprovision_delay=1.0, automatic_repairs=True, repair_delay=1.0):
        """never_boot / allocation_failure: scale set IDs or names ("*" for all) whose new VMs stay creating /
        end failed with AllocationFailed. late_refusals: the next N new VMs (of any scale set) end failed with
        AllocationFailed after the scale-out was accepted. fail_next: the next N resource requests fail with one of
        `codes`. deny: handler names (list_usages, list_skus, ...) answered 403 AuthorizationFailed. require_auth: ARM
        accepts only tokens issued by the emulator's token endpoint. delete_delay: seconds a deleted VM stays listed (provisioning
        state Deleting), as on Azure, where a deletion takes tens of seconds; boot_delay: seconds from a scale-out to
        the VM running (and the operation done); None keeps the emulator's setting (both). upgrade_policies: Automatic
        and Rolling upgrade policies reimage VMs upgrade_delay seconds after the model's image changed (off: every set
        acts as Manual). autoscale: enabled autoscale settings set their scale set's capacity to its recommended count
        once it has held another for autoscale_delay seconds. overprovisioning: a scale-out of an overprovisioned
        Uniform set makes one extra VM, deleted overprovision_delay seconds after its batch runs. automatic_repairs:
        a set with automaticRepairsPolicy enabled replaces a VM fail_health marked, repair_delay seconds later."""
        self._call("POST", "faults", {"error_rate": error_rate, "codes": list(codes), "latency": latency,
                                      "never_boot": list(never_boot), "quota": quota, "fail_next": fail_next,
                                      "seed": seed, "allocation_failure": list(allocation_failure),
                                      "deny": list(deny), "require_auth": require_auth, "delete_delay": delete_delay,
                                      "late_refusals": late_refusals, "boot_delay": boot_delay,
                                      "upgrade_policies": upgrade_policies, "upgrade_delay": upgrade_delay,
                                      "autoscale": autoscale, "autoscale_delay": autoscale_delay,
                                      "overprovisioning": overprovisioning, "overprovision_delay": overprovision_delay,
                                      "automatic_repairs": automatic_repairs, "repair_delay": repair_delay})

    def create_autoscale(self, group_id, recommended, enabled=True, name=None):
        """An autoscale setting on the scale set `group_id` that keeps it at `recommended` VMs while enabled; its ID."""
        return self._call("POST", "autoscale", {"group_id": group_id, "recommended": recommended, "enabled": enabled,
                                                "name": name})["id"]

    def create_service_principal(self, tenant, client_id, secret):
        """A service principal the token endpoint knows (client_credentials grant in `tenant`)."""
        self._call("POST", "principals", {"tenant": tenant, "client_id": client_id, "secret": secret})

    def create_user(self, username, password, tenant):
        """A user the token endpoint knows (password grant)."""
        self._call("POST", "users", {"username": username, "password": password, "tenant": tenant})

    def token_grants(self):
        """Every login at the token endpoint: grant_type, client_id or username, tenant, and the scope of the
        token issued, or `refused` (the AADSTS code) for a login it refused."""
        return self._call("GET", "token_grants")["grants"]

    def requests(self):
        return self._call("GET", "requests")["requests"]

    def clear_requests(self):
        self._call("DELETE", "requests")

    def state(self):
        return self._call("GET", "state")

    def provider_options(self):
        """Module arguments that reach this emulator: a static bearer token (the emulator accepts any) over
        HTTPS with the emulator's CA, short LRO polls."""
        return {"provider": "azure", "azure": {
            "subscription_id": SUBSCRIPTION, "endpoint": self.endpoint, "ca_bundle": self.ca_cert,
            "access_token": "sandbox-token", "resource_group": RESOURCE_GROUP, "polling_interval": 0.1,
            "timeout": 60,
        }}

    def login_options(self):
        """The azure options that send a credential's login to this emulator's token endpoint instead of a
        static token: its URL as the authority (azure.azcollection's adfs_authority_url), no instance
        discovery (that asks login.microsoftonline.com)."""
        options = dict(self.provider_options()["azure"], adfs_authority_url=self.endpoint,
                       disable_instance_discovery=True)
        options.pop("access_token")
        return options


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--nodesim-url")
    parser.add_argument("--boot-delay", type=float, default=0.5)
    args = parser.parse_args(argv)
    emulator = AzureEmulator(args.state_dir, hooks=instance_hooks.from_url(args.nodesim_url),
                             boot_delay=args.boot_delay).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    info = emulator.info()
    info["pid"] = os.getpid()
    print(json.dumps(info), flush=True)
    while not stop.wait(1.0):
        pass
    emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
