# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Azure virtual machine scale sets (Uniform and Flexible orchestration) behind the CloudProvider interface.

Formats (literal segments are matched case-insensitively, because Azure resource IDs are):
  providerID  Uniform:  azure:///subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/
                        virtualMachineScaleSets/<vmss>/virtualMachines/<instance-id>
              Flexible: azure:///subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/
                        virtualMachines/<vm-name>   (the providerID does not name the scale set)
  group ID    /subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/virtualMachineScaleSets/<vmss>
  image       a Compute Gallery image version ID, a managed image ID, /CommunityGalleries/<g>/Images/<i>/Versions/<v>,
              /SharedGalleries/<g>/Images/<i>/Versions/<v>, or a Marketplace image publisher:offer:sku:version
              (the reference's constellation-marketplace-image://Azure?offer=..&publisher=..&sku=..&version=.. too).

Group IDs and images are returned in one canonical spelling (fixed segment casing, names lower-cased) so that
the planner can compare them as plain strings; Azure treats names case-insensitively. Instance.provider_id is
what cloud-provider-azure writes into Node.spec.providerID ("azure://" + the VM ID, resource group lower-cased).

Uniform and Flexible scale sets differ in how their VMs are reached: a Uniform set's VMs through the scale set VM
API (virtual_machine_scale_set_vms, numeric instance IDs), a Flexible set's VMs as plain virtual machines
(virtual_machines.list filtered on 'virtualMachineScaleSet/id', the VM name as instance ID), since the scale set VM
API refuses Flexible sets. Both scale out by sku.capacity, take their image from the scale set's model
(virtualMachineProfile) and delete VMs with the scale set's delete-instances call, which shrinks the capacity.

The parsing and mapping functions at the top are pure; AzureProvider below does the I/O with azure-mgmt-compute.
"""

from __future__ import annotations

import base64
import configparser
import datetime
import hashlib
import os
import re
import threading
import time
import urllib.parse
import warnings

from ansible.module_utils.basic import env_fallback

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import cloud_settings, quota
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import (
    CREATING, DELETING, FAILED, REFUSED_FOR, RUNNING, STATE_PROBLEM, STOPPED, UNKNOWN, ROLE_CONTROL_PLANE, ROLE_WORKER,
    Group, Instance,
)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers.base import (
    PENDING, CloudProvider, Ended, InvalidReferenceError, NotFoundError, ProviderError, QuotaError, ReadingMemo,
    reference_shape_problem, with_retries,
)

try:
    from azure.core import MatchConditions
    from azure.core.credentials import AccessToken
    from azure.core.exceptions import (
        ClientAuthenticationError, HttpResponseError, ResourceModifiedError, ServiceRequestError, ServiceResponseError,
    )
    from azure.mgmt.compute import ComputeManagementClient
    from azure.core.rest import HttpRequest
    HAS_AZURE_SDK = True
    AZURE_IMPORT_ERROR = None
except ImportError as _exc:  # the module reports it through missing_required_lib
    HAS_AZURE_SDK = False
    AZURE_IMPORT_ERROR = _exc

PROVIDER_ID_FORMAT = ("azure:///subscriptions/<subscription>/resourceGroups/<resource-group>/providers/"
                      "Microsoft.Compute/virtualMachineScaleSets/<scale-set>/virtualMachines/<instance-id>")
FLEX_PROVIDER_ID_FORMAT = ("azure:///subscriptions/<subscription>/resourceGroups/<resource-group>/providers/"
                           "Microsoft.Compute/virtualMachines/<vm-name>")
UNIFORM = "Uniform"
FLEXIBLE = "Flexible"
GROUP_ID_FORMAT = ("/subscriptions/<subscription>/resourceGroups/<resource-group>/providers/"
                   "Microsoft.Compute/virtualMachineScaleSets/<scale-set>")
IMAGE_FORMATS = (
    "/subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/galleries/<gallery>/images/<image>/versions/<version>",
    "/subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/images/<image>",
    "/CommunityGalleries/<public-gallery>/Images/<image>/Versions/<version>",
    "/SharedGalleries/<gallery-unique-name>/Images/<image>/Versions/<version>",
    "<publisher>:<offer>:<sku>:<version>",
)

# The tag a scale set carries to say which nodes it holds (control-plane or worker).
ROLE_TAG = "kubenodes-role"

_NAME = r"[^/\s]+"
_SUBSCRIPTION_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
_GROUP_RE = re.compile(r"^/subscriptions/(?P<sub>%s)/resourcegroups/(?P<rg>%s)/providers/microsoft\.compute/"
                       r"virtualmachinescalesets/(?P<vmss>%s)$" % (_NAME, _NAME, _NAME), re.IGNORECASE)
_PROVIDER_ID_RE = re.compile(r"^azure:///subscriptions/(?P<sub>%s)/resourcegroups/(?P<rg>%s)/providers/"
                             r"microsoft\.compute/virtualmachinescalesets/(?P<vmss>%s)/virtualmachines/(?P<id>\d+)$"
                             % (_NAME, _NAME, _NAME), re.IGNORECASE)
_FLEX_PROVIDER_ID_RE = re.compile(r"^azure:///subscriptions/(?P<sub>%s)/resourcegroups/(?P<rg>%s)/providers/"
                                  r"microsoft\.compute/virtualmachines/(?P<vm>%s)$" % (_NAME, _NAME, _NAME), re.IGNORECASE)
_GALLERY_VERSION_RE = re.compile(r"^/subscriptions/(?P<sub>%s)/resourcegroups/(?P<rg>%s)/providers/microsoft\.compute/"
                                 r"galleries/(?P<gallery>%s)/images/(?P<image>%s)/versions/(?P<version>%s)$"
                                 % (_NAME, _NAME, _NAME, _NAME, _NAME), re.IGNORECASE)
_MANAGED_IMAGE_RE = re.compile(r"^/subscriptions/(?P<sub>%s)/resourcegroups/(?P<rg>%s)/providers/microsoft\.compute/"
                               r"images/(?P<image>%s)$" % (_NAME, _NAME, _NAME), re.IGNORECASE)
_COMMUNITY_RE = re.compile(r"^/communitygalleries/(?P<gallery>%s)/images/(?P<image>%s)/versions/(?P<version>%s)$"
                           % (_NAME, _NAME, _NAME), re.IGNORECASE)
_SHARED_RE = re.compile(r"^/sharedgalleries/(?P<gallery>%s)/images/(?P<image>%s)/versions/(?P<version>%s)$"
                        % (_NAME, _NAME, _NAME), re.IGNORECASE)
_URN_PART = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_MARKETPLACE_RE = re.compile(r"^(?P<publisher>%s):(?P<offer>%s):(?P<sku>%s):(?P<version>%s)$"
                             % (_URN_PART, _URN_PART, _URN_PART, _URN_PART))
_REFERENCE_MARKETPLACE_SCHEME = "constellation-marketplace-image://"

GALLERY_VERSION = "gallery-version"
MANAGED_IMAGE = "managed-image"
COMMUNITY_GALLERY = "community-gallery"
SHARED_GALLERY = "shared-gallery"
MARKETPLACE = "marketplace"

# ARM error codes that mean "no room for another VM": the planner lowers the surge instead of failing.
QUOTA_ERROR_CODES = {
    "quotaexceeded", "operationnotallowed", "skunotavailable", "allocationfailed", "zonalallocationfailed",
    "overconstrainedallocationrequest", "overconstrainedzonalallocationrequest", "allocationfailedvmsizenotavailable",
}
RETRYABLE_STATUS = {408, 429, 500, 502, 503, 504}

CLOUD_ENVIRONMENTS = {
    # name: (ARM endpoint, authority host)
    "azurecloud": ("https://management.azure.com", "login.microsoftonline.com"),
    "azurechinacloud": ("https://management.chinacloudapi.cn", "login.chinacloudapi.cn"),
    "azureusgovernment": ("https://management.usgovcloudapi.net", "login.microsoftonline.us"),
}


# --------------------------------------------------------------------------------------------------
# Pure parsing and mapping
# --------------------------------------------------------------------------------------------------

def _format_group_id(sub, rg, vmss):
    return ("/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/virtualMachineScaleSets/%s"
            % (sub.lower(), rg.lower(), vmss.lower()))


def _shapes(*formats):
    return [fmt.split("/") for fmt in formats]


def parse_group_id(group_id):
    """(subscription, resource group, scale set name) of a scale set ID; InvalidReferenceError naming the part
    that is wrong otherwise."""
    text = group_id.strip().rstrip("/") if isinstance(group_id, str) else ""
    match = _GROUP_RE.match(text)
    if not match:
        raise InvalidReferenceError("%r is not an Azure scale set ID: %s; expected %s" % (
            group_id, reference_shape_problem(text, _shapes(GROUP_ID_FORMAT), ignore_case=True) if text
            else "it is empty", GROUP_ID_FORMAT))
    return match.group("sub"), match.group("rg"), match.group("vmss")


def canonical_group_id(group_id):
    return _format_group_id(*parse_group_id(group_id))


def parse_provider_id(provider_id):
    """(subscription, resource group, scale set, instance id) of a scale-set VM providerID. For a VM of a Flexible
    scale set the providerID names no scale set: (subscription, resource group, None, VM name)."""
    text = provider_id.strip() if isinstance(provider_id, str) else ""
    match = _PROVIDER_ID_RE.match(text)
    if match:
        return match.group("sub"), match.group("rg"), match.group("vmss"), match.group("id")
    match = _FLEX_PROVIDER_ID_RE.match(text)
    if match:
        return match.group("sub"), match.group("rg"), None, match.group("vm")
    raise InvalidReferenceError("%r is not the providerID of an Azure scale set VM: %s; expected %s (Uniform "
                                "orchestration) or %s (Flexible orchestration)"
                                % (provider_id, reference_shape_problem(
                                    text, _shapes(PROVIDER_ID_FORMAT, FLEX_PROVIDER_ID_FORMAT), ignore_case=True)
                                   if text else "it is empty", PROVIDER_ID_FORMAT, FLEX_PROVIDER_ID_FORMAT))


def _inactive_instance_id(message, instance_ids):
    """The one of `instance_ids` that Azure's 400 "The provided instanceId <id> is not an active Virtual Machine Scale
    Set VM instanceId." names, or None when the message names none of them."""
    match = re.search(r"instanceId\s+'?([^\s']+?)'?\s+is not an active", message)
    if match is None:
        return None
    return next((i for i in instance_ids if i.lower() == match.group(1).lower()), None)


def provider_id_from_vm_id(vm_id):
    """The providerID a kubelet writes for a VM whose ARM ID is `vm_id` (resource group lower-cased, as
    cloud-provider-azure does)."""
    sub, rg, vmss, instance_id = parse_provider_id("azure://" + vm_id)
    if vmss is None:
        return ("azure:///subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/virtualMachines/%s"
                % (sub, rg.lower(), instance_id))
    return ("azure:///subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/virtualMachineScaleSets/%s"
            "/virtualMachines/%s" % (sub, rg.lower(), vmss, instance_id))


def normalize_provider_id(provider_id):
    """Azure IDs are case-insensitive: one spelling for every casing of the same VM."""
    sub, rg, vmss, instance_id = parse_provider_id(provider_id)
    if vmss is None:
        return ("azure:///subscriptions/%s/resourcegroups/%s/providers/microsoft.compute/virtualmachines/%s"
                % (sub, rg, instance_id)).lower()
    return ("azure:///subscriptions/%s/resourcegroups/%s/providers/microsoft.compute/virtualmachinescalesets/%s"
            "/virtualmachines/%s" % (sub.lower(), rg.lower(), vmss.lower(), instance_id)).lower()


def orchestration_mode(vmss):
    """UNIFORM or FLEXIBLE for a scale set (wire dict); Uniform when the field is absent, as older API versions
    answered."""
    mode = str((vmss.get("properties") or {}).get("orchestrationMode") or UNIFORM)
    return FLEXIBLE if mode.lower() == "flexible" else UNIFORM


def vm_scale_set_id(vm):
    """The canonical ID of the scale set a plain virtual machine (wire dict) belongs to, or None when it is in
    none (or its ID is not a scale set's)."""
    ident = ((vm.get("properties") or {}).get("virtualMachineScaleSet") or {}).get("id")
    try:
        return canonical_group_id(ident) if ident else None
    except InvalidReferenceError:
        return None


def flexible_vm_filter(sub, rg, vmss):
    """The $filter of virtual_machines.list that selects the VMs of a Flexible scale set."""
    return ("'virtualMachineScaleSet/id' eq '/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/"
            "virtualMachineScaleSets/%s'" % (sub, rg, vmss))


_LATEST = "its version is 'latest': name an exact version, so that every node gets the same image"


def _image_problem(text):
    """Which part of a string that is no Azure image reference is wrong, and why."""
    if not text:
        return "it is empty"
    if "/" in text and not text.startswith("/"):
        return ("it starts with %r: a resource ID starts with /subscriptions/, /CommunityGalleries/ or "
                "/SharedGalleries/" % text.split("/")[0])
    if "/" in text:
        return reference_shape_problem(text.rstrip("/"), _shapes(*IMAGE_FORMATS[:4]), ignore_case=True)
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 4:
            return ("a marketplace URN has 4 parts separated by ':' (publisher:offer:sku:version), this one has %d"
                    % len(parts))
        for what, part in zip(("publisher", "offer", "sku", "version"), parts):
            if not re.match(r"^%s$" % _URN_PART, part):
                return ("its %s %r is not a marketplace name (a letter or digit, then letters, digits, '.', '_' "
                        "and '-')" % (what, part))
    return ("it is neither a resource ID (starting with /subscriptions/, /CommunityGalleries/ or "
            "/SharedGalleries/) nor a marketplace URN publisher:offer:sku:version")


def _bad_image(image, why=None):
    text = image.strip() if isinstance(image, str) else ""
    return InvalidReferenceError("%r is not an Azure image reference: %s; expected one of: %s"
                                 % (image, why or _image_problem(text), "; ".join(IMAGE_FORMATS)))


def parse_image(image):
    """(kind, fields) of an image reference string. Names are lower-cased (Azure compares them that way)."""
    if not isinstance(image, str) or not image.strip():
        raise _bad_image(image)
    text = image.strip()
    if text.lower().startswith(_REFERENCE_MARKETPLACE_SCHEME):
        return MARKETPLACE, _parse_reference_marketplace(text)
    for kind, regex in ((GALLERY_VERSION, _GALLERY_VERSION_RE), (MANAGED_IMAGE, _MANAGED_IMAGE_RE),
                        (COMMUNITY_GALLERY, _COMMUNITY_RE), (SHARED_GALLERY, _SHARED_RE)):
        match = regex.match(text.rstrip("/"))
        if match:
            fields = {k: v.lower() for k, v in match.groupdict().items()}
            if "version" in fields and fields["version"] == "latest":
                raise _bad_image(image, _LATEST)
            return kind, fields
    match = _MARKETPLACE_RE.match(text)
    if match:
        fields = {k: v.lower() for k, v in match.groupdict().items()}
        if fields["version"] == "latest":
            raise _bad_image(image, _LATEST)
        return MARKETPLACE, fields
    raise _bad_image(image)


def _parse_reference_marketplace(text):
    parsed = urllib.parse.urlsplit(text)
    if parsed.netloc.lower() != "azure":
        raise _bad_image(text, "its host is %r, not azure: a marketplace image of another cloud" % parsed.netloc)
    query = dict(urllib.parse.parse_qsl(parsed.query))
    fields = {key: query.get(key, "").lower() for key in ("publisher", "offer", "sku", "version")}
    missing = [key for key, value in fields.items() if not value]
    if missing:
        raise _bad_image(text, "it has no %s: publisher, offer, sku and an exact version are all needed"
                         % ", ".join(missing))
    if fields["version"] == "latest":
        raise _bad_image(text, _LATEST)
    return fields


def format_image(kind, fields):
    """The canonical string of a parsed image reference."""
    if kind == GALLERY_VERSION:
        return ("/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/galleries/{gallery}"
                "/images/{image}/versions/{version}").format(**fields)
    if kind == MANAGED_IMAGE:
        return "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/images/{image}".format(**fields)
    if kind == COMMUNITY_GALLERY:
        return "/CommunityGalleries/{gallery}/Images/{image}/Versions/{version}".format(**fields)
    if kind == SHARED_GALLERY:
        return "/SharedGalleries/{gallery}/Images/{image}/Versions/{version}".format(**fields)
    return "{publisher}:{offer}:{sku}:{version}".format(**fields)


def canonical_image(image):
    return format_image(*parse_image(image))


def image_reference_body(image):
    """The storageProfile.imageReference (wire form) that makes new VMs use `image`."""
    kind, fields = parse_image(image)
    if kind in (GALLERY_VERSION, MANAGED_IMAGE):
        return {"id": format_image(kind, fields)}
    if kind == COMMUNITY_GALLERY:
        return {"communityGalleryImageId": format_image(kind, fields)}
    if kind == SHARED_GALLERY:
        return {"sharedGalleryImageId": format_image(kind, fields)}
    return {"publisher": fields["publisher"], "offer": fields["offer"], "sku": fields["sku"],
            "version": fields["version"]}


def image_from_reference(reference):
    """The canonical image string of a wire imageReference dict; "" when it names no image we understand."""
    reference = reference or {}
    candidates = [reference.get("id"), reference.get("communityGalleryImageId"), reference.get("sharedGalleryImageId")]
    for candidate in candidates:
        if candidate:
            try:
                return canonical_image(candidate)
            except InvalidReferenceError:
                return candidate
    parts = [reference.get(k) for k in ("publisher", "offer", "sku")]
    if all(parts):
        version = reference.get("version") or ""
        if version.lower() == "latest" and reference.get("exactVersion"):
            version = reference["exactVersion"]
        return ":".join(p.lower() for p in parts + [version])
    return ""


def _status_codes(vm):
    view = (vm.get("properties") or {}).get("instanceView") or vm.get("instanceView") or {}
    return [str(s.get("code") or "").lower() for s in view.get("statuses") or [] if s]


_PROVISIONING_STATES = {"creating": CREATING, "deleting": DELETING, "failed": FAILED}
# The power states Azure documents (learn.microsoft.com/azure/virtual-machines/states-billing); PowerState/unknown is
# no state to act on (vm_state_problem names it).
_POWER_STATES = {
    "powerstate/creating": CREATING, "powerstate/running": RUNNING, "powerstate/starting": CREATING,
    "powerstate/stopping": STOPPED, "powerstate/stopped": STOPPED,
    "powerstate/deallocating": STOPPED, "powerstate/deallocated": STOPPED,
}


def vm_state(vm):
    """The instance state of a scale-set VM (wire dict, listed with $expand=instanceView)."""
    provisioning = str((vm.get("properties") or {}).get("provisioningState") or "").lower()
    if provisioning in _PROVISIONING_STATES:
        return _PROVISIONING_STATES[provisioning]
    codes = _status_codes(vm)
    for code in codes:
        if code in ("provisioningstate/creating",):
            return CREATING
        if code in ("provisioningstate/deleting",):
            return DELETING
        if code.startswith("provisioningstate/failed"):
            return FAILED
    for code in codes:
        if code in _POWER_STATES:
            return _POWER_STATES[code]
    if provisioning == "succeeded" and not codes:
        # Listed without an instance view: a succeeded VM runs unless someone stopped it.
        return RUNNING
    return UNKNOWN


def vm_state_problem(vm):
    """What no step may act on in a VM that vm_state() cannot read (unknown), in words, else None."""
    if vm_state(vm) != UNKNOWN:
        return None
    provisioning = (vm.get("properties") or {}).get("provisioningState") or "(none)"
    power = [c for c in _status_codes(vm) if c.startswith("powerstate/")]
    return ("Azure reports provisioningState %s and power state %s, which this collection cannot read as creating, "
            "running, stopped, failed or deleting; nothing is done to it until Azure reports another state"
            % (provisioning, power[0].split("/", 1)[1] if power else "(none)"))


def _parse_time(value):
    if not value:
        return None
    try:
        text = str(value).replace("Z", "+00:00")
        # Python 3.10 rejects more than 6 fractional digits, which ARM sometimes sends.
        text = re.sub(r"(\.\d{6})\d+", r"\1", text)
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def failure_details(vm):
    """For a VM whose provisioning failed: {error_code, error_message, capacity_refusal}; {} otherwise.
    Azure puts the reason into the instance view, e.g. ProvisioningState/failed/AllocationFailed."""
    view = (vm.get("properties") or {}).get("instanceView") or {}
    for status in view.get("statuses") or []:
        code = str((status or {}).get("code") or "")
        if code.lower().startswith("provisioningstate/failed"):
            reason = code.split("/", 2)[2] if code.count("/") >= 2 else ""
            return {"error_code": reason, "error_message": status.get("message") or status.get("displayStatus") or "",
                    "capacity_refusal": reason.lower() in QUOTA_ERROR_CODES}
    return {}


def instance_from_vm(vm, group_id):
    """An Instance from a scale-set VM (wire dict)."""
    props = vm.get("properties") or {}
    computer_name = ((props.get("osProfile") or {}).get("computerName") or "").lower()
    image = image_from_reference((props.get("storageProfile") or {}).get("imageReference"))
    state = vm_state(vm)
    # A Flexible scale set's VM has no instanceId: its name is its instance ID (and it has no latestModelApplied).
    extra = {"instance_id": str(vm.get("instanceId") or vm.get("name") or ""),
             "latest_model_applied": props.get("latestModelApplied")}
    if state == FAILED:
        extra.update(failure_details(vm))
        if extra.get("capacity_refusal"):
            # Accepted, then refused: the planner holds the surge as for a create refused at once.
            extra[REFUSED_FOR] = ("%s: %s" % (extra["error_code"], extra["error_message"])).rstrip(": ")
    if vm_state_problem(vm):
        extra[STATE_PROBLEM] = vm_state_problem(vm)
    return Instance(
        provider_id=provider_id_from_vm_id(vm["id"]),
        node_name=computer_name,
        group_id=group_id,
        image=image,
        state=state,
        created_at=_parse_time(props.get("timeCreated")),
        name=vm.get("name") or "",
        extra=extra,
    )


def role_from_tags(tags):
    value = str((tags or {}).get(ROLE_TAG, "")).lower()
    if value in ("control-plane", "controlplane", "control_plane"):
        return ROLE_CONTROL_PLANE
    if value == "worker":
        return ROLE_WORKER
    return None


def run_settings(vmss):
    """The scale set's settings with which Azure acts on it by itself (cloud_settings.py): upgradePolicy.mode (unset
    reads as Manual, ARM's default), automaticRepairsPolicy.enabled (unset: off) and, on a Uniform set, overprovision
    (unset: on, ARM's default there; Flexible sets have none)."""
    properties = vmss.get("properties") or {}
    settings = {cloud_settings.AZURE_UPGRADE_POLICY: (properties.get("upgradePolicy") or {}).get("mode") or "Manual",
                cloud_settings.AZURE_REPAIRS: "true" if (properties.get("automaticRepairsPolicy") or {}).get("enabled")
                else "false"}
    if orchestration_mode(vmss) == UNIFORM:
        settings[cloud_settings.AZURE_OVERPROVISION] = "false" if properties.get("overprovision") is False else "true"
    return settings


def group_from_vmss(vmss):
    """A Group from a scale set (wire dict)."""
    profile = (vmss.get("properties") or {}).get("virtualMachineProfile") or {}
    return Group(
        id=canonical_group_id(vmss["id"]),
        name=vmss.get("name", "").lower(),
        image=image_from_reference((profile.get("storageProfile") or {}).get("imageReference")),
        role=role_from_tags(vmss.get("tags")),
        target_size=(vmss.get("sku") or {}).get("capacity"),
        kind="Azure VM scale set (%s orchestration)" % orchestration_mode(vmss),
        settings=run_settings(vmss),
    )


# Autoscale settings are Azure Monitor's (Microsoft.Insights), for which no SDK is installed: they are read and
# changed over REST through the compute client's pipeline (same credential, endpoint, retries and TLS settings).
AUTOSCALE_API_VERSION = "2022-10-01"


def autoscale_of(autoscale_settings, group_id):
    """The autoscale setting (wire dict) whose targetResourceUri is the scale set `group_id`, or None."""
    for setting in autoscale_settings:
        target = ((setting.get("properties") or {}).get("targetResourceUri") or "").strip().lower()
        if target and target == group_id.lower():
            return setting
    return None


def with_autoscale(group, autoscale_settings):
    """`group` with the autoscale setting that targets it among its settings: "true"/"false" as its enabled says,
    cloud_settings.UNREADABLE when the listing was refused (`autoscale_settings` None)."""
    if autoscale_settings is None:
        group.settings[cloud_settings.AZURE_AUTOSCALE] = cloud_settings.UNREADABLE
        return group
    setting = autoscale_of(autoscale_settings, group.id)
    if setting is not None:
        enabled = (setting.get("properties") or {}).get("enabled", True)
        group.settings[cloud_settings.AZURE_AUTOSCALE] = "true" if enabled is not False else "false"
    return group


def sku_facts(skus, size):
    """(vCPUs, family) of VM size `size` from a resource SKU listing (wire dicts), (None, None) if absent."""
    for sku in skus:
        if sku.get("resourceType") != "virtualMachines" or str(sku.get("name", "")).lower() != size.lower():
            continue
        caps = {c.get("name"): c.get("value") for c in sku.get("capabilities") or []}
        try:
            vcpus = int(caps.get("vCPUs"))
        except (TypeError, ValueError):
            vcpus = None
        return vcpus, sku.get("family")
    return None, None


def _wire_skus(skus):
    """SKU dicts as as_dict() gives them (snake_case) back in the wire's names that sku_facts reads."""
    return [dict(sku, resourceType=sku.get("resource_type", sku.get("resourceType"))) for sku in skus]


def location_limits(location, usages, groups, sizes_unknown_because="the VM size is not in the resource SKU list"):
    """The limits of one location for the scale sets in it. `usages`: {name: (limit, current value)} from the
    compute usage list (cores, virtualMachines, <family>); `groups`: [(group ID, vCPUs or None, family or
    None)]. A VM counts once against virtualMachines and with its vCPUs against the regional cores and its
    family's cores."""
    scope = "location %s" % location
    limits = []
    if "virtualMachines" in usages:
        limits.append(quota.known_limit("virtualMachines", scope, usages["virtualMachines"][0],
                                        usages["virtualMachines"][1], {gid: 1 for gid, dummy, dummy2 in groups}))
    with_cpus = {gid: vcpus for gid, vcpus, dummy in groups if vcpus}
    if "cores" in usages and with_cpus:
        limits.append(quota.known_limit("cores", scope, usages["cores"][0], usages["cores"][1], with_cpus,
                                        unit=quota.UNIT_VCPUS))
    families = {}
    for gid, vcpus, family in groups:
        if vcpus and family and family in usages:
            families.setdefault(family, {})[gid] = vcpus
    for family, per_group in sorted(families.items()):
        limits.append(quota.known_limit(family, scope, usages[family][0], usages[family][1], per_group,
                                        unit=quota.UNIT_VCPUS))
    unknown = [gid for gid, vcpus, dummy in groups if not vcpus]
    if unknown:
        limits.append(quota.unknown_limit("cores", scope, unknown, sizes_unknown_because))
    return limits


def pick_new_vm(vms_before, vms_after, capacity_before, capacity_after):
    """The VM that our scale-out from capacity_before to capacity_after created, or None.

    Instance IDs of a uniform scale set grow with each scale-out. When another create raced ours (its capacity
    change landed between our read and our conditional write, and we re-read), several unknown VMs show up: our
    slot among them, in instance-id order, is how many increments of the capacity came before ours. A Flexible
    scale set's VMs are known by name ({scale-set}_{random}), which says nothing of their order: they are ordered
    by creation time, then name."""
    known = {_vm_key(vm) for vm in vms_before}
    fresh = sorted((vm for vm in vms_after if _vm_key(vm) not in known), key=_instance_order)
    if not fresh:
        return None
    slot = max(0, capacity_after - capacity_before - 1)
    # A VM listed before but not counted in capacity_before (in flux) shifts nothing we can know; stay in range.
    return fresh[min(slot, len(fresh) - 1)]


def _vm_key(vm):
    """What identifies a VM within its scale set: the instance ID (Uniform) or the VM name (Flexible)."""
    instance_id = vm.get("instanceId")
    return str(instance_id) if instance_id not in (None, "") else str(vm.get("name") or "").lower()


def _instance_order(vm):
    try:
        return (0, int(vm.get("instanceId")), "")
    except (TypeError, ValueError):
        created = _parse_time((vm.get("properties") or {}).get("timeCreated"))
        return (1, created if created is not None else float("inf"), _vm_key(vm))


def error_details(exc):
    """(status, ARM error code, message) of an azure-core exception."""
    status = getattr(exc, "status_code", None)
    code = ""
    error = getattr(exc, "error", None)
    if error is not None and getattr(error, "code", None):
        code = error.code
    message = getattr(error, "message", None) or getattr(exc, "message", None) or str(exc)
    return status, code or "", message


def _answered_url(exc):
    """The URL of the request an error answer refused ("" when the exception carries no answer: a login that failed
    before any API call)."""
    request = getattr(getattr(exc, "response", None), "request", None)
    url = getattr(request, "url", None)
    return url if isinstance(url, str) else ""


def _url_host(url):
    match = re.match(r"^[a-z]+://([^/?#]+)", url)
    return match.group(1) if match else url


def classify_error(exc, what, credential=None):
    """A ProviderError (or subclass) for an azure-core exception, with the retry decision made here.
    credential: what credential_summary() says of the credential in use, for a refused login."""
    refused_url = _answered_url(exc)
    if HAS_AZURE_SDK and isinstance(exc, ClientAuthenticationError) and refused_url and "/oauth2/" not in refused_url:
        # The SDK raises the same error for a 401 from ARM: the login gave a token, and the API refused it.
        status, code, message = error_details(exc)
        answer = "HTTP %s%s: %s" % (status or 401, " %s" % code if code else "", message)
        return ProviderError("%s: Azure Resource Manager at %s refused the token that the login gave %s (%s): the login "
                             "itself succeeded. Check that azure.cloud_environment or azure.endpoint names this ARM "
                             "endpoint (the token is for its audience), and that the credential's tenant is the "
                             "subscription's" % (what, _url_host(refused_url), credential or "the credential", answer),
                             status=401, code="TOKEN_REFUSED")
    if HAS_AZURE_SDK and isinstance(exc, ClientAuthenticationError):
        # Never retried: retrying a wrong password can lock the account.
        return ProviderError("%s: the Azure login refused %s: %s; correct that credential (in AWX: the Microsoft "
                             "Azure Resource Manager credential of the job template)"
                             % (what, credential or "the credential", str(exc).split("\nContent:", 1)[0].strip()),
                             status=401, code="AUTH_FAILED")
    if HAS_AZURE_SDK and isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        # An untrusted certificate will not become trusted by retrying; a refused or reset connection may recover.
        tls = "CERTIFICATE_VERIFY_FAILED" in str(exc) or "SSLError" in str(exc)
        return ProviderError("%s: cannot reach Azure Resource Manager%s: %s"
                             % (what, " (TLS: check azure.ca_bundle)" if tls else "", exc), retryable=not tls)
    status, code, message = error_details(exc)
    text = "%s: %s%s%s" % (what, "HTTP %s " % status if status else "", "%s: " % code if code else "", message)
    lowered = code.lower()
    if lowered in QUOTA_ERROR_CODES and (lowered != "operationnotallowed" or "quota" in message.lower()):
        return QuotaError(text, status=status, code=code)
    if status == 404:
        return NotFoundError(text, status=status, code=code)
    if status in RETRYABLE_STATUS or lowered in ("retryableerror", "toomanyrequests"):
        return ProviderError(text, status=status, code=code, retryable=True,
                             throttled=status == 429 or lowered == "toomanyrequests")
    return ProviderError(text, status=status, code=code)


def request_kind(method, url):
    """How the call rate counts an ARM request: its method and the last resource type in its path (GET
    virtualMachineScaleSets; the status of a long-running operation: GET operations), else the path's last segment."""
    path = urllib.parse.urlsplit(url).path.rstrip("/").split("/")
    segments = [p for p in path if p] or ["request"]
    kind = next((s for s in reversed(segments) if s in _RESOURCE_TYPES), segments[-1])
    return "%s %s" % (method.upper(), kind)


# The resource types this provider reaches, as request_kind names them.
_RESOURCE_TYPES = ("virtualMachineScaleSets", "virtualMachines", "operations", "locations", "images", "galleries",
                   "usages", "skus", "resourceGroups", "subscriptions")


def retry_after_seconds(exc):
    """The Retry-After of an error answer in seconds (0 when absent or not a number)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    try:
        return max(0.0, float(headers.get("Retry-After") or 0))
    except (TypeError, ValueError):
        return 0.0


# --------------------------------------------------------------------------------------------------
# Options and credentials
# --------------------------------------------------------------------------------------------------

ARG_SPEC = dict(
    auth_source=dict(type="str", default="auto", choices=["auto", "cli", "credential_file", "env", "msi"],
                     fallback=(env_fallback, ["ANSIBLE_AZURE_AUTH_SOURCE"])),
    profile=dict(type="str", fallback=(env_fallback, ["AZURE_PROFILE"])),
    subscription_id=dict(type="str", fallback=(env_fallback, ["AZURE_SUBSCRIPTION_ID"])),
    client_id=dict(type="str", fallback=(env_fallback, ["AZURE_CLIENT_ID"])),
    secret=dict(type="str", no_log=True, fallback=(env_fallback, ["AZURE_SECRET", "AZURE_CLIENT_SECRET"])),
    tenant=dict(type="str", fallback=(env_fallback, ["AZURE_TENANT", "AZURE_TENANT_ID"])),
    cloud_environment=dict(type="str", default="AzureCloud", fallback=(env_fallback, ["AZURE_CLOUD_ENVIRONMENT"])),
    adfs_authority_url=dict(type="str", fallback=(env_fallback, ["AZURE_ADFS_AUTHORITY_URL"])),
    access_token=dict(type="str", no_log=True, fallback=(env_fallback, ["AZURE_ACCESS_TOKEN"])),
    ad_user=dict(type="str", fallback=(env_fallback, ["AZURE_AD_USER"])),
    password=dict(type="str", no_log=True, fallback=(env_fallback, ["AZURE_PASSWORD"])),
    x509_certificate_path=dict(type="path", fallback=(env_fallback, ["AZURE_X509_CERTIFICATE_PATH"])),
    thumbprint=dict(type="str", no_log=False, fallback=(env_fallback, ["AZURE_THUMBPRINT"])),
    cert_validation_mode=dict(type="str", choices=["validate", "ignore"],
                              fallback=(env_fallback, ["AZURE_CERT_VALIDATION_MODE", "AZURE_CERT_VALIDATION"])),
    api_profile=dict(type="str", default="latest"),
    disable_instance_discovery=dict(type="bool", default=False),
    endpoint=dict(type="str"),
    ca_bundle=dict(type="path"),
    resource_group=dict(type="str", fallback=(env_fallback, ["AZURE_RESOURCE_GROUP"])),
    location=dict(type="str", fallback=(env_fallback, ["AZURE_LOCATION"])),
    timeout=dict(type="int", default=600),
    polling_interval=dict(type="float", default=2.0),
    retries=dict(type="int", default=5),
)


def read_credential_file(path, profile):
    """The [profile] section of an azure.azcollection style credentials file, as a dict ({} when absent)."""
    parser = configparser.ConfigParser()
    if not parser.read(path):
        return {}
    if not parser.has_section(profile):
        return {}
    return dict(parser.items(profile))


# The public client ID azure.azcollection (and the Azure CLI) uses for a user's password login when no
# client_id is given.
AZURE_CLI_CLIENT_ID = "04b07795-8ddb-461a-bbee-02f9e1bf7b46"
_CREDENTIAL_KEYS = ("subscription_id", "client_id", "secret", "tenant", "ad_user", "password",
                    "x509_certificate_path", "thumbprint")


def certificate_thumbprint(pem_text):
    """The SHA-1 thumbprint (upper-case hex, as the Azure portal shows it) of the first certificate in a
    PEM text, or None when it holds none."""
    match = re.search(r"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", pem_text, re.S)
    if not match:
        return None
    der = base64.b64decode("".join(match.group(1).split()))
    return hashlib.sha1(der).hexdigest().upper()  # nosec - the thumbprint Azure names certificates by


def _check_certificate(settings):
    path = settings["x509_certificate_path"]
    try:
        with open(path) as handle:
            text = handle.read()
    except OSError as exc:
        raise ProviderError("azure.x509_certificate_path %s cannot be read: %s" % (path, exc))
    found = certificate_thumbprint(text)
    if found is None or "PRIVATE KEY-----" not in text:
        raise ProviderError("azure.x509_certificate_path %s must be a PEM file with the service principal's "
                            "certificate and its private key" % path)
    wanted = (settings.get("thumbprint") or "").replace(":", "").replace(" ", "").upper()
    if wanted and wanted != found:
        raise ProviderError("azure.thumbprint %s does not match the certificate in %s (its thumbprint is %s); "
                            "give the thumbprint of that certificate, or leave azure.thumbprint out"
                            % (settings["thumbprint"], path, found))


def resolve_auth(options, environ=None, credential_file=None):
    """Decide how to authenticate, without touching the network. Returns (kind, settings) where kind is one of
    token, client_secret, certificate, user_password, msi, cli, default; settings hold subscription_id and
    what the credential needs.
    Mirrors azure.azcollection's order for auth_source=auto: profile, explicit service principal (secret or
    certificate) or user, environment (already merged into options by env_fallback; AWX's Azure credential
    sets AZURE_CLIENT_ID/AZURE_SECRET/AZURE_TENANT or AZURE_AD_USER/AZURE_PASSWORD), [default] of the
    credentials file, then the SDK's chain."""
    environ = os.environ if environ is None else environ
    credential_file = credential_file or os.path.join(os.path.expanduser("~"), ".azure", "credentials")
    source = options.get("auth_source") or "auto"
    settings = {k: options.get(k) for k in _CREDENTIAL_KEYS}

    def from_profile(name):
        section = read_credential_file(credential_file, name)
        if not section:
            raise ProviderError("azure: profile %r not found in %s" % (name, credential_file))
        for key in _CREDENTIAL_KEYS:
            settings[key] = settings.get(key) or section.get(key)

    def given():
        """The kind of credential the settings hold, or None."""
        if settings["client_id"] and settings["secret"]:
            return "client_secret"
        if settings["client_id"] and settings["x509_certificate_path"]:
            return "certificate"
        if settings["ad_user"] and settings["password"]:
            return "user_password"
        return None

    def partly_given():
        """The kind the settings start to name, so that the error names what is missing of it."""
        return given() or ("user_password" if settings["ad_user"] and not settings["client_id"] else "client_secret")

    if options.get("access_token"):
        kind = "token"
    elif source == "msi":
        kind = "msi"
    elif source == "cli":
        kind = "cli"
    elif source == "credential_file":
        from_profile(options.get("profile") or "default")
        kind = partly_given()
    elif source == "env":
        kind = partly_given()
    else:
        if options.get("profile"):
            from_profile(options["profile"])
            kind = partly_given()
        elif given():
            kind = given()
        elif read_credential_file(credential_file, "default"):
            from_profile("default")
            kind = partly_given()
        else:
            kind = "default"
    needs = {"client_secret": ("client_id", "secret", "tenant"),
             "certificate": ("client_id", "x509_certificate_path", "tenant"),
             "user_password": ("ad_user", "password")}.get(kind, ())
    missing = [k for k in needs if not settings.get(k)]
    if missing:
        raise ProviderError("azure: auth_source=%s needs %s (options, AZURE_* variables or the credentials "
                            "file)" % (source, ", ".join(missing)))
    if kind == "certificate":
        _check_certificate(settings)
    if not settings.get("subscription_id"):
        raise ProviderError("azure: no subscription; set azure.subscription_id or AZURE_SUBSCRIPTION_ID")
    if not _SUBSCRIPTION_RE.match(str(settings["subscription_id"]).strip()):
        # Every request would otherwise fail with a 404 or 403 naming a URL, far from the option.
        raise ProviderError("azure: the subscription %r (azure.subscription_id, AZURE_SUBSCRIPTION_ID or the "
                            "credentials file) is not a subscription ID: Azure's are GUIDs such as "
                            "8a5d1b2c-0000-4000-8000-00000000a2e1; `az account show --query id` gives yours"
                            % str(settings["subscription_id"])[:80])
    settings["subscription_id"] = str(settings["subscription_id"]).strip()
    return kind, settings


def check_api_profile(options):
    profile = options.get("api_profile") or "latest"
    if profile != "latest":
        raise ProviderError("azure.api_profile %r is not supported: the provider calls one Compute API version; "
                            "use latest (the default)" % profile)


def transport_verify(options):
    """What azure-core's connection_verify gets, for Resource Manager and the login alike: the CA bundle,
    False with cert_validation_mode=ignore, or None for the system's trust store."""
    if options.get("cert_validation_mode") == "ignore":
        return False
    return options.get("ca_bundle") or None


def resolve_cloud(options):
    """(ARM endpoint, authority host, credential scope) from cloud_environment and endpoint."""
    name = (options.get("cloud_environment") or "AzureCloud").strip()
    endpoint = options.get("endpoint")
    if name.lower() in CLOUD_ENVIRONMENTS:
        default_endpoint, authority = CLOUD_ENVIRONMENTS[name.lower()]
    elif endpoint:
        default_endpoint, authority = endpoint, None
    else:
        raise ProviderError("azure: unknown cloud_environment %r; use one of AzureCloud, AzureChinaCloud, "
                            "AzureUSGovernment, or set azure.endpoint to the ARM URL of your cloud" % name)
    endpoint = (endpoint or default_endpoint).rstrip("/")
    if not endpoint.lower().startswith("https://"):
        raise ProviderError("azure: endpoint %r must be an https:// URL (ARM refuses bearer tokens over http)"
                            % endpoint)
    if options.get("adfs_authority_url"):
        authority = options["adfs_authority_url"]
    scope = (default_endpoint if name.lower() in CLOUD_ENVIRONMENTS else endpoint).rstrip("/") + "/.default"
    return endpoint, authority, scope


def credential_summary(kind, settings, authority):
    """The credential in words for a refused login: its kind, the options and variables it came from and
    their non-secret values, the login authority. Never a secret."""
    where = " at %s" % authority if authority else ""
    if kind == "client_secret":
        return ("the service principal azure.client_id %r (AZURE_CLIENT_ID) of azure.tenant %r (AZURE_TENANT) with "
                "the secret of azure.secret (AZURE_SECRET)%s" % (settings.get("client_id"), settings.get("tenant"), where))
    if kind == "certificate":
        return ("the service principal azure.client_id %r (AZURE_CLIENT_ID) of azure.tenant %r (AZURE_TENANT) with "
                "the certificate azure.x509_certificate_path %r%s"
                % (settings.get("client_id"), settings.get("tenant"), settings.get("x509_certificate_path"), where))
    if kind == "user_password":
        return ("the user azure.ad_user %r (AZURE_AD_USER) with the password of azure.password (AZURE_PASSWORD)%s"
                % (settings.get("ad_user"), where))
    return "the %s credential (azure.auth_source)%s" % (kind, where)


def user_login_warning(kind, settings):
    """The deprecation warning for a user's password login (kind user_password), else None. azure-identity
    deprecates UsernamePasswordCredential (1.21, still in 1.27): the password grant cannot do multifactor
    authentication, which Microsoft Entra ID enforces for sign-ins to Azure Resource Manager, and azure-identity
    has no other credential that logs a user in without a prompt. Its advice for automation is a workload
    identity: a service principal (secret or certificate) or a managed identity. Names the options and the user,
    never the password."""
    if kind != "user_password":
        return None
    return ("azure.ad_user %r (AZURE_AD_USER) with azure.password (AZURE_PASSWORD) logs in with azure-identity's "
            "UsernamePasswordCredential, which azure-identity deprecates: it cannot do multifactor authentication, "
            "which Microsoft Entra ID enforces for Azure Resource Manager (https://aka.ms/azsdk/identity/mfa), so "
            "this login fails once the tenant enforces it. Use a service principal instead: azure.client_id, "
            "azure.secret (or azure.x509_certificate_path) and azure.tenant (AZURE_CLIENT_ID, AZURE_SECRET, "
            "AZURE_TENANT; in AWX, the Microsoft Azure Resource Manager credential's Client ID, Client Secret and "
            "Tenant ID instead of its Username and Password), or a managed identity (azure.auth_source msi)"
            % (settings.get("ad_user"),))


def login_warnings(options, environ=None, credential_file=None):
    """Warnings about the login the `azure` options choose (resolve_auth, no network): the user login's
    deprecation. Options that resolve_auth refuses give none here; building the provider names their fault."""
    try:
        kind, settings = resolve_auth(dict(options or {}), environ, credential_file)
    except ProviderError:
        return []
    message = user_login_warning(kind, settings)
    return [message] if message else []


class StaticTokenCredential:
    """A credential that hands out one bearer token as-is (a token from `az account get-access-token`, or
    any string for the local ARM emulator)."""

    def __init__(self, token, lifetime=3600):
        self._token = token
        self._lifetime = lifetime

    def get_token(self, *scopes, **kwargs):  # pylint: disable=unused-argument
        return AccessToken(self._token, int(time.time()) + self._lifetime)


def build_credential(kind, settings, options, authority):
    if kind == "token":
        return StaticTokenCredential(options["access_token"])
    from azure import identity  # pylint: disable=import-outside-toplevel

    extra = {"authority": authority} if authority else {}
    if options.get("disable_instance_discovery"):
        extra["disable_instance_discovery"] = True
    verify = transport_verify(options)
    if verify is not None:
        extra["connection_verify"] = verify
    if kind == "client_secret":
        return identity.ClientSecretCredential(settings["tenant"], settings["client_id"], settings["secret"], **extra)
    if kind == "certificate":
        return identity.CertificateCredential(settings["tenant"], settings["client_id"],
                                              certificate_path=settings["x509_certificate_path"], **extra)
    if kind == "user_password":
        # Deprecated by azure-identity and kept for AWX's credential with a user (user_login_warning says so in
        # the module's warnings, naming what to use instead); its own DeprecationWarning is that same news.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return identity.UsernamePasswordCredential(settings.get("client_id") or AZURE_CLI_CLIENT_ID,
                                                       settings["ad_user"], settings["password"],
                                                       tenant_id=settings.get("tenant") or "organizations",
                                                       **extra)
    if kind == "msi":
        return identity.ManagedIdentityCredential(client_id=options.get("client_id"))
    if kind == "cli":
        return identity.AzureCliCredential(tenant_id=options.get("tenant"))
    return identity.DefaultAzureCredential(**extra)


def from_params(options):
    """The AzureProvider configured from the module's `azure` option dict."""
    if not HAS_AZURE_SDK:
        raise ProviderError("azure: the Python packages azure-mgmt-compute, azure-core and azure-identity are "
                            "needed (pip install azure-mgmt-compute azure-identity): %s" % AZURE_IMPORT_ERROR)
    options = dict(options or {})
    check_api_profile(options)
    endpoint, authority, scope = resolve_cloud(options)
    kind, settings = resolve_auth(options)
    try:
        credential = build_credential(kind, settings, options, authority)
    except ImportError as exc:
        raise ProviderError("azure: auth_source %s needs the azure-identity package: %s" % (options.get("auth_source"), exc))
    provider = AzureProvider(credential, settings["subscription_id"], endpoint=endpoint, credential_scope=scope,
                             ca_bundle=transport_verify(options), resource_group=options.get("resource_group"),
                             location=options.get("location"),
                             timeout=options.get("timeout") or 600,
                             polling_interval=options.get("polling_interval"),
                             retries=options.get("retries") or 1)
    provider.credential_summary = credential_summary(kind, settings, authority)
    return provider


# --------------------------------------------------------------------------------------------------
# The provider
# --------------------------------------------------------------------------------------------------

class AzureProvider(ReadingMemo, CloudProvider):
    """Within reading(): each scale set is read once (its model: image, capacity), its VMs at every listing.
    Its own writes (scale out, delete, image) make it read the scale sets again."""

    name = "azure"

    def __init__(self, credential, subscription_id, endpoint="https://management.azure.com", credential_scope=None,
                 ca_bundle=None, resource_group=None, location=None, timeout=600, polling_interval=2.0, retries=5,
                 retry_base_delay=0.5, sdk_retries=0):
        self.credential = credential
        self.credential_summary = None   # the credential in words, for a refused login (from_params sets it)
        self.subscription_id = subscription_id
        self.endpoint = endpoint
        self.credential_scope = credential_scope or endpoint.rstrip("/") + "/.default"
        self.ca_bundle = ca_bundle
        self.resource_group = resource_group
        self.location = location
        self.timeout = timeout
        self.polling_interval = 2.0 if polling_interval is None else polling_interval
        self.retries = max(1, retries)
        self.retry_base_delay = retry_base_delay
        self.sdk_retries = sdk_retries
        self._clients = {}
        self._clients_lock = threading.Lock()
        self._locations = {}
        self._modes = {}        # canonical group ID: UNIFORM or FLEXIBLE (fixed when a scale set is created)
        self._vm_groups = {}    # normalized providerID of a Flexible VM: canonical group ID, from listings
        # Creates in one process go one at a time: each diffs the VM list around its own capacity change.
        self._create_lock = threading.Lock()
        # Scale-outs started without waiting whose VM no listing named yet: canonical group ID -> [(started, the VMs
        # before, capacity before, capacity after)] (create_instance(wait=False), follow_operations).
        self._launching = {}
        self._launching_lock = threading.Lock()

    def searched(self):
        return "Azure subscription %s (azure.subscription_id or AZURE_SUBSCRIPTION_ID)%s" % (
            self.subscription_id, ", resource group %s (azure.resource_group)" % self.resource_group
            if self.resource_group else "")

    # -- plumbing ---------------------------------------------------------------------------------

    def client(self, subscription_id=None):
        sub = (subscription_id or self.subscription_id).lower()
        with self._clients_lock:   # the groups are listed from several threads (node_state.list_instances)
            return self._clients.get(sub) or self._new_client(sub, subscription_id)

    def _new_client(self, sub, subscription_id):
        if sub not in self._clients:
            # Every ARM request takes its token of the call rate here, the long-running operations' polls too.
            kwargs = dict(base_url=self.endpoint, credential_scopes=[self.credential_scope],
                          polling_interval=self.polling_interval, retry_total=self.sdk_retries,
                          raw_request_hook=self._before_request)
            if self.ca_bundle or self.ca_bundle is False:
                # Applied per request by azure-core, so REQUESTS_CA_BUNDLE in the environment cannot override it.
                # False: cert_validation_mode=ignore.
                kwargs["connection_verify"] = self.ca_bundle
            self._clients[sub] = ComputeManagementClient(self.credential, subscription_id or self.subscription_id,
                                                         **kwargs)
        return self._clients[sub]

    def _before_request(self, request):
        """azure-core's hook before each request of the client's pipeline: a token of the call rate, counted as the
        method and the resource type it acts on (GET virtualMachineScaleSets)."""
        http = request.http_request
        self.call_rate.take(request_kind(http.method, http.url))

    def _call(self, what, func, *args, **kwargs):
        """One ARM call, errors mapped, throttling and 5xx retried with jittered backoff. A throttled answer's
        Retry-After is honoured (up to a minute) before the backoff's own delay."""
        attempts = [0]

        def once():
            attempts[0] += 1
            try:
                return func(*args, **kwargs)
            except (HttpResponseError, ServiceRequestError, ServiceResponseError) as exc:
                error = classify_error(exc, what, self.credential_summary)
                wait = retry_after_seconds(exc)
                if error.retryable and wait and (error.throttled or attempts[0] < self.retries):
                    time.sleep(min(wait, 60.0))
                raise error from exc
        # The tokens are taken per request (_before_request); the rate still paces the tries after a throttling answer.
        return with_retries(once, attempts=self.retries, base_delay=self.retry_base_delay, on_wait=self.waiting,
                            rate=self.call_rate)

    def _wait(self, what, poller):
        """Wait for a long-running operation within the timeout; errors mapped."""
        try:
            poller.result(timeout=self.timeout)
        except (HttpResponseError, ServiceRequestError, ServiceResponseError) as exc:
            raise classify_error(exc, what, self.credential_summary) from exc
        if not poller.done():
            raise ProviderError("%s: the operation did not finish within %ss (status %s)"
                                % (what, self.timeout, poller.status()))

    @staticmethod
    def _as_dict(model):
        return model.as_dict() if hasattr(model, "as_dict") else dict(model)

    def _get_vmss(self, sub, rg, vmss, fresh=False):
        """The scale set (wire dict); within reading() read once unless `fresh` (a write decides on it)."""
        if fresh:
            return self._read_vmss(sub, rg, vmss)
        return self._recall("vmss", _format_group_id(sub, rg, vmss), lambda: self._read_vmss(sub, rg, vmss))

    def _read_vmss(self, sub, rg, vmss):
        model = self._call("get scale set %s" % vmss, self.client(sub).virtual_machine_scale_sets.get, rg, vmss)
        data = self._as_dict(model)
        self._remember(data)
        return data

    def _remember(self, data):
        """Location and orchestration mode of a scale set just read (neither changes after its creation)."""
        group_id = canonical_group_id(data["id"])
        self._locations[group_id] = data.get("location")
        self._modes[group_id] = orchestration_mode(data)

    def _mode(self, sub, rg, vmss):
        group_id = _format_group_id(sub, rg, vmss)
        if group_id not in self._modes:
            self._get_vmss(sub, rg, vmss)
        return self._modes[group_id]

    def _list_vms(self, sub, rg, vmss):
        if self._mode(sub, rg, vmss) == FLEXIBLE:
            return self._list_flexible_vms(sub, rg, vmss)

        def fetch():
            pager = self.client(sub).virtual_machine_scale_set_vms.list(rg, vmss, expand="instanceView")
            return [self._as_dict(vm) for vm in pager]
        return self._call("list VMs of scale set %s" % vmss, fetch)

    def _list_flexible_vms(self, sub, rg, vmss):
        """The VMs of a Flexible scale set: the scale set VM API refuses Flexible sets, so they are listed as the
        resource group's virtual machines whose virtualMachineScaleSet is this set (filtered by ARM, and checked
        here again, so that a VM of another set never counts as this one's)."""
        group_id = _format_group_id(sub, rg, vmss)

        def fetch():
            pager = self.client(sub).virtual_machines.list(rg, filter=flexible_vm_filter(sub, rg, vmss),
                                                           expand="instanceView")
            return [self._as_dict(vm) for vm in pager]
        vms = [vm for vm in self._call("list VMs of Flexible scale set %s" % vmss, fetch)
               if (vm_scale_set_id(vm) or "").lower() == group_id.lower()]
        for vm in vms:
            self._vm_groups[normalize_provider_id(provider_id_from_vm_id(vm["id"]))] = group_id
        return vms

    # -- the interface -----------------------------------------------------------------------------

    def normalize_provider_id(self, provider_id):
        try:
            return normalize_provider_id(provider_id)
        except InvalidReferenceError:
            # Not a scale-set VM (another cloud, a standalone VM): compare it the generic way, never crash a plan.
            return CloudProvider.normalize_provider_id(self, provider_id or "")

    def group_id_of(self, provider_id):
        """A Uniform VM's providerID names its scale set. A Flexible VM's does not: its scale set is the one a
        listing found it in, else the virtualMachineScaleSet of the VM (one read); None when the VM is gone or in
        no scale set (the caller then lists the groups)."""
        sub, rg, vmss, vm_name = parse_provider_id(provider_id)
        if vmss is not None:
            return _format_group_id(sub, rg, vmss)
        known = self._vm_groups.get(normalize_provider_id(provider_id))
        if known:
            return known
        vm = self._get_flexible_vm(sub, rg, vm_name)
        return vm_scale_set_id(vm) if vm else None

    def instance_group(self, provider_id):
        """A Flexible VM's virtualMachineScaleSet reference; a Uniform VM's scale set (its providerID names it)
        once the VM is read there."""
        sub, rg, vmss, instance_id = parse_provider_id(provider_id)
        if vmss is None:
            vm = self._get_flexible_vm(sub, rg, instance_id)
            return None if vm is None else (vm_scale_set_id(vm) or "")
        try:
            self._call("get VM %s of %s" % (instance_id, vmss), self.client(sub).virtual_machine_scale_set_vms.get,
                       rg, vmss, instance_id)
        except NotFoundError:
            return None     # the VM, or its whole scale set, is gone
        return _format_group_id(sub, rg, vmss)

    def _get_flexible_vm(self, sub, rg, vm_name):
        """The plain virtual machine `vm_name` (wire dict), None when it does not exist."""
        try:
            vm = self._as_dict(self._call("get VM %s" % vm_name, self.client(sub).virtual_machines.get, rg, vm_name))
        except NotFoundError:
            return None
        group_id = vm_scale_set_id(vm)
        if group_id:
            self._vm_groups[normalize_provider_id(provider_id_from_vm_id(vm["id"]))] = group_id
        return vm

    def list_groups(self, group_ids=None):
        if group_ids is not None:
            groups = []
            for group_id in group_ids:
                groups.append(group_from_vmss(self._get_vmss(*parse_group_id(group_id))))
            return self._with_autoscale(groups)
        if not self.resource_group:
            raise ProviderError("azure: to discover scale sets set azure.resource_group (or AZURE_RESOURCE_GROUP), "
                                "or name the groups")

        def fetch():
            pager = self.client().virtual_machine_scale_sets.list(self.resource_group)
            return [self._as_dict(v) for v in pager]
        scale_sets = self._call("list scale sets of %s" % self.resource_group, fetch)
        for vmss in scale_sets:
            self._remember(vmss)
            self._keep("vmss", canonical_group_id(vmss["id"]), vmss)
        return self._with_autoscale([group_from_vmss(v) for v in scale_sets])

    def _with_autoscale(self, groups):
        """The groups with their autoscale settings (one listing per subscription, once within reading())."""
        for group in groups:
            sub = parse_group_id(group.id)[0]
            with_autoscale(group, self._recall("autoscale", sub.lower(), lambda: self._autoscale_settings(sub)))
        return groups

    def _autoscale_settings(self, sub):
        """The subscription's autoscale settings (wire dicts, every page), or None when the identity may not read
        them (403)."""
        what = "list the autoscale settings of subscription %s" % sub
        url = "/subscriptions/%s/providers/Microsoft.Insights/autoscalesettings" % sub
        settings = []
        while url:
            try:
                page = self._rest(what, "GET", url)
            except ProviderError as exc:
                if exc.status == 403:
                    return None
                raise
            settings.extend(page.get("value") or [])
            url = page.get("nextLink")
        return settings

    def _rest(self, what, method, url, body=None):
        """One ARM call that azure-mgmt-compute has no operation for, through its client's pipeline; the answer's
        JSON. `url` is a path (the api-version is added) or a nextLink."""
        client = self.client(re.search(r"/subscriptions/([^/?]+)", url, re.I).group(1))

        def send():
            params = {} if "api-version=" in url else {"api-version": AUTOSCALE_API_VERSION}
            response = client.send_request(HttpRequest(method, url, params=params, json=body))
            response.raise_for_status()
            return response.json() if response.text() else {}
        return self._call(what, send)

    def list_instances(self, group_id):
        sub, rg, vmss = parse_group_id(group_id)
        canonical = _format_group_id(sub, rg, vmss)
        vms = self._list_vms(sub, rg, vmss)
        instances = [instance_from_vm(vm, canonical) for vm in vms]
        # Scale-outs started without waiting whose VM is not listed yet: being created (their slot held).
        waiting = [start for start, vm in self._launched(canonical, vms) if vm is None]
        image = self.group_image(canonical) if waiting else ""
        instances.extend(Instance(provider_id="", node_name="", group_id=canonical, image=image, state=CREATING,
                                  created_at=start[0], name="", extra={PENDING: True, "listed": False})
                         for start in waiting)
        return instances

    def group_image(self, group_id):
        return group_from_vmss(self._get_vmss(*parse_group_id(group_id))).image

    #: create_instance(wait=False) raises the capacity and returns; follow_operations() names the new VM once a
    #: listing shows it. A deletion (delete-instances, polling=False) never waited: the VM lists Deleting from the
    #: answer on, and only a later listing shows it gone.
    creates_without_waiting = True

    def create_instance(self, group_id, wait=True):
        """Scale the set out by one and wait until its new VM is listed. With wait False, return once the scale-out
        was accepted, an instance without a providerID (extra PENDING), listed as being created until
        follow_operations() names it. A refusal (quota, SKU) comes with the scale-out's answer either way."""
        sub, rg, vmss = parse_group_id(group_id)
        canonical = _format_group_id(sub, rg, vmss)
        with self._create_lock:
            self._forget("vmss")
            data = self._get_vmss(sub, rg, vmss, fresh=True)
            capacity_before = (data.get("sku") or {}).get("capacity")
            if capacity_before is None:
                raise ProviderError("azure: scale set %s reports no sku.capacity; cannot scale it out" % vmss)
            profile = (data.get("properties") or {}).get("virtualMachineProfile")
            if orchestration_mode(data) == FLEXIBLE and not profile:
                raise ProviderError("azure: Flexible scale set %s has no virtualMachineProfile, so raising its "
                                    "sku.capacity creates no VM; give the scale set a VM profile (model) with the "
                                    "node image, or name another scaling group" % vmss)
            vms_before = self._list_vms(sub, rg, vmss)
            capacity_after = self._scale_out(sub, rg, vmss, data)
            if not wait:
                started = time.time()
                with self._launching_lock:
                    self._launching.setdefault(canonical, []).append(
                        (started, tuple(vms_before), capacity_before, capacity_after))
                return Instance(provider_id="", node_name="", group_id=canonical, image=group_from_vmss(data).image,
                                state=CREATING, created_at=started, name="", extra={PENDING: True, "listed": False})
            new_vm = self._await_new_vm(sub, rg, vmss, vms_before, capacity_before, capacity_after)
        instance = instance_from_vm(new_vm, canonical)
        if instance.state == UNKNOWN:
            instance.state = CREATING  # just made: whatever it reads, it is being created
        return instance

    def _launched(self, canonical, vms):
        """[(scale-out, VM or None)]: each scale-out of the group started without waiting, in order, with the VM of
        `vms` that it made (pick_new_vm over the VMs no earlier one took)."""
        with self._launching_lock:
            starts = list(self._launching.get(canonical, ()))
        taken, found = set(), []
        for start in starts:
            vm = pick_new_vm(list(start[1]), [v for v in vms if _vm_key(v) not in taken], start[2], start[3])
            if vm is not None:
                taken.add(_vm_key(vm))
            found.append((start, vm))
        return found

    def follow_operations(self):
        """The scale-outs started without waiting whose VM a listing now shows: [Ended] with the VM named (one VM
        listing per group with one under way). A late allocation failure shows on the VM itself (FAILED, with its
        reason), which the planner takes. One not listed within the timeout is no longer followed and no failure."""
        with self._launching_lock:
            groups = sorted(g for g, starts in self._launching.items() if starts)
        ended = []
        for canonical in groups:
            sub, rg, vmss = parse_group_id(canonical)
            for start, vm in self._launched(canonical, self._list_vms(sub, rg, vmss)):
                if vm is None and time.time() < start[0] + self.timeout:
                    continue
                with self._launching_lock:
                    self._launching[canonical].remove(start)
                if vm is None:
                    if self.waiting_listener is not None:
                        self.waiting_listener("azure: scale set %s was scaled out to %d but no new VM appeared within "
                                              "%ss; the next pass looks for it again" % (vmss, start[3], self.timeout))
                    continue
                instance = instance_from_vm(vm, canonical)
                if instance.state == UNKNOWN:
                    instance.state = CREATING  # just made: whatever it reads, it is being created
                ended.append(Ended(canonical, instance.name, None, "create", instance))
        return ended

    def _scale_out(self, sub, rg, vmss, data):
        """Raise the capacity by one with a conditional PATCH (If-Match on the ETag), so a concurrent change is
        never overwritten: on 412 re-read and try again. Returns the new capacity.

        The operation is not awaited (polling=False, so no poller thread outlives the call): it ends when the VM
        has booted, which is the caller's wait. A refusal (quota, SKU) comes with this first answer; a later
        allocation failure shows as a FAILED instance whose extra says why.

        Limit: a 5xx answer to a PATCH that Azure nevertheless applied is retried, meets a changed ETag (412),
        and is applied once more after the re-read; that makes one surplus VM, which joins as a new node that
        the planner pairs with a donor or marks obsolete. It cannot be told apart from a concurrent create here."""
        deadline = time.monotonic() + self.timeout
        ops = self.client(sub).virtual_machine_scale_sets
        while True:
            capacity = int(data["sku"]["capacity"])
            kwargs = {}
            if data.get("etag"):
                kwargs = dict(etag=data["etag"], match_condition=MatchConditions.IfNotModified)
            try:
                self._call("scale out %s to %d" % (vmss, capacity + 1), ops.begin_update, rg, vmss,
                           {"sku": {"capacity": capacity + 1}}, polling=False, **kwargs)
                return capacity + 1
            except ProviderError as exc:
                if not isinstance(exc.__cause__, ResourceModifiedError) or time.monotonic() > deadline:
                    raise
            data = self._get_vmss(sub, rg, vmss, fresh=True)

    def _await_new_vm(self, sub, rg, vmss, vms_before, capacity_before, capacity_after):
        """List until the new VM shows up (it may take a moment after the scale-out was accepted)."""
        deadline = time.monotonic() + self.timeout
        delay = 0.2
        while True:
            vm = pick_new_vm(vms_before, self._list_vms(sub, rg, vmss), capacity_before, capacity_after)
            if vm is not None:
                return vm
            if time.monotonic() > deadline:
                raise ProviderError("azure: scale set %s was scaled out to %d but no new VM appeared within %ss"
                                    % (vmss, capacity_after, self.timeout))
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    def wait_running(self, provider_ids, timeout=None):
        """Wait until every VM in `provider_ids` runs; return {provider_id: state}. One list per group per poll."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        wanted = {normalize_provider_id(p): p for p in provider_ids}
        by_group = {}
        for pid in provider_ids:
            group_id = self.group_id_of(pid)
            if group_id is not None:   # a Flexible VM not found yet: reads "creating" until the deadline
                by_group.setdefault(group_id, []).append(pid)
        delay = 0.2
        while True:
            states = {}
            for group_id in by_group:
                for inst in self.list_instances(group_id):
                    if not inst.provider_id:
                        continue   # a scale-out not waited for whose VM is not listed yet: none of these
                    key = normalize_provider_id(inst.provider_id)
                    if key in wanted:
                        states[wanted[key]] = inst.state
            for pid in provider_ids:
                states.setdefault(pid, CREATING)  # not listed yet: still being created, never "gone"
            if all(s == RUNNING for s in states.values()) or time.monotonic() > deadline:
                return states
            if any(s == FAILED for s in states.values()):
                return states
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    def delete_instance(self, provider_id):
        sub, rg, vmss, instance_id = parse_provider_id(provider_id)
        self._forget("vmss")    # its capacity shrinks
        if vmss is None:
            return self._delete_flexible_vm(provider_id, sub, rg, instance_id)
        try:
            vm = self._as_dict(self._call("get VM %s of %s" % (instance_id, vmss),
                                          self.client(sub).virtual_machine_scale_set_vms.get, rg, vmss, instance_id))
        except NotFoundError:
            return False
        if vm_state(vm) == DELETING:
            return False
        return self._delete_one_instance(sub, rg, vmss, instance_id)

    def _delete_flexible_vm(self, provider_id, sub, rg, vm_name):
        """Delete a Flexible scale set's VM through the scale set's delete-instances call (the VM name is its
        instance ID), which shrinks the capacity as for Uniform; a VM in no scale set is refused."""
        vm = self._get_flexible_vm(sub, rg, vm_name)
        if vm is None:
            return False
        group_id = vm_scale_set_id(vm)
        if group_id is None:
            raise ProviderError("azure: VM %s (providerID %s) is in no scale set; the collection deletes only VMs of "
                                "scale sets: leave it out of the upgrade, or delete it yourself" % (vm_name, provider_id))
        if vm_state(vm) == DELETING:
            return False
        _sub, vmss_rg, vmss = parse_group_id(group_id)
        return self._delete_one_instance(sub, vmss_rg, vmss, vm["name"])

    def delete_instances(self, group_id, provider_ids):
        """Delete VMs of one scale set that a listing of it just named, in one delete-instances call (its
        instanceIds take a list; a Flexible set's are the VM names), with no per-VM read. Azure refuses the whole
        call when one of them is no longer an active VM (400 InvalidParameter "The provided instanceId <id> is not an
        active Virtual Machine Scale Set VM instanceId."): a concurrent deletion won for that one, so the call goes
        again without it (one more request per such VM, never lost ones). The providerIDs whose deletion Azure
        accepted."""
        sub, rg, vmss = parse_group_id(group_id)
        by_id = {}
        for provider_id in provider_ids:
            vm_sub, dummy, vm_vmss, instance_id = parse_provider_id(provider_id)
            if vm_sub.lower() != sub.lower() or (vm_vmss is not None and vm_vmss.lower() != vmss.lower()):
                raise ProviderError("azure: VM %s is not in scale set %s; it is not deleted" % (provider_id, group_id))
            by_id[instance_id.lower()] = (instance_id, provider_id)
        self._forget("vmss")    # its capacity shrinks
        deleted = self._delete_instances(sub, rg, vmss, [instance_id for instance_id, dummy in by_id.values()])
        return [by_id[instance_id.lower()][1] for instance_id in deleted]

    def _delete_instances(self, sub, rg, vmss, instance_ids):
        """The scale set's delete-instances call for `instance_ids`: those whose deletion Azure accepted. One that
        Azure names as not active (a concurrent delete won the race) is left out and the call goes again."""
        instance_ids = list(instance_ids)
        while instance_ids:
            try:
                # Deleting the instances shrinks the capacity; the operation runs on in Azure (the VMs read
                # "deleting"). polling=False: no poller thread is left behind; the next listing shows how it goes.
                self._call("delete VM(s) %s of %s" % (", ".join(instance_ids), vmss),
                           self.client(sub).virtual_machine_scale_sets.begin_delete_instances,
                           rg, vmss, {"instanceIds": instance_ids}, polling=False)
                return instance_ids
            except NotFoundError:
                return []
            except ProviderError as exc:
                if exc.code != "InvalidParameter" or "not an active" not in str(exc):
                    raise
                gone = _inactive_instance_id(str(exc), instance_ids)
                if gone is None:
                    if len(instance_ids) == 1:
                        return []   # the one VM of the call
                    # Which one is not told: each goes by itself, so the others are not lost.
                    return [i for i in instance_ids if self._delete_instances(sub, rg, vmss, [i])]
                instance_ids = [i for i in instance_ids if i.lower() != gone.lower()]
        return []

    def _delete_one_instance(self, sub, rg, vmss, instance_id):
        """The scale set's delete-instances call for one VM; False when a concurrent delete won the race."""
        return bool(self._delete_instances(sub, rg, vmss, [instance_id]))

    def set_group_image(self, group_id, image):
        sub, rg, vmss = parse_group_id(group_id)
        self._forget("vmss")
        data = self._get_vmss(sub, rg, vmss, fresh=True)
        canonical = self.validate_image(image, location=data.get("location"))
        if group_from_vmss(data).image.lower() == canonical.lower():
            return False
        body = {"properties": {"virtualMachineProfile": {"storageProfile": {
            "imageReference": image_reference_body(canonical)}}}}
        poller = self._call("set the image of %s" % vmss, self.client(sub).virtual_machine_scale_sets.begin_update,
                            rg, vmss, body)
        self._wait("set the image of %s" % vmss, poller)
        return True

    def set_run_setting(self, group_id, name, value):
        if name == cloud_settings.AZURE_AUTOSCALE:
            return self._set_autoscale(group_id, value)
        sub, rg, vmss = parse_group_id(group_id)
        self._forget("vmss")
        settings = run_settings(self._get_vmss(sub, rg, vmss, fresh=True))
        if name not in settings:
            return super().set_run_setting(group_id, name, value)
        if settings[name] == value:
            return False
        body = {cloud_settings.AZURE_UPGRADE_POLICY: {"upgradePolicy": {"mode": value}},
                cloud_settings.AZURE_OVERPROVISION: {"overprovision": value == "true"},
                cloud_settings.AZURE_REPAIRS: {"automaticRepairsPolicy": {"enabled": value == "true"}}}[name]
        what = "set %s of %s to %s" % (name, vmss, value)
        poller = self._call(what, self.client(sub).virtual_machine_scale_sets.begin_update, rg, vmss,
                            {"properties": body})
        try:
            self._wait(what, poller)
        except ProviderError as exc:
            # A poll that failed on its way (a 5xx) leaves the outcome unknown: the scale set, read afresh, tells.
            self._forget("vmss")
            if not exc.retryable or run_settings(self._get_vmss(sub, rg, vmss, fresh=True)).get(name) != value:
                raise
        return True

    def _set_autoscale(self, group_id, value):
        """The `enabled` of the autoscale setting that targets the scale set, read afresh, patched to `value`."""
        sub = parse_group_id(group_id)[0]
        self._forget("autoscale")
        found = self._autoscale_settings(sub)
        setting = autoscale_of(found or [], canonical_group_id(group_id))
        if setting is None:
            return super().set_run_setting(group_id, cloud_settings.AZURE_AUTOSCALE, value)
        if with_autoscale(group_from_vmss(self._get_vmss(*parse_group_id(group_id))), found).settings.get(
                cloud_settings.AZURE_AUTOSCALE) == value:
            return False
        self._rest("set enabled of autoscale setting %s to %s" % (setting.get("name"), value), "PATCH", setting["id"],
                   {"properties": {"enabled": value == "true"}})
        return True

    def restore_problem(self, group_id, name, value):
        """Automatic or Rolling back while VMs are not on the latest model: Azure would upgrade them at once."""
        if name != cloud_settings.AZURE_UPGRADE_POLICY or value == "Manual":
            return None
        image = self.group_image(group_id).lower()
        stale = sorted(i.name for i in self.list_instances(group_id) if i.state != DELETING and (
            i.extra.get("latest_model_applied") is False
            or i.extra.get("latest_model_applied") is None and i.image and i.image.lower() != image))
        if not stale:
            return None
        return ("%d VM(s) are not on the scale set's latest model (%s), so Azure would upgrade them at once, without a "
                "drain; replace them first (run the upgrade again) and set it back yourself" % (len(stale), ", ".join(stale)))

    def instance_headroom(self, group_ids):
        """The compute usage of each scale set's location (one usage list and one SKU list per location, one read
        per scale set) against its VM size's vCPUs."""
        by_location, limits = {}, []
        for group_id in group_ids:
            sub, rg, vmss = parse_group_id(group_id)
            try:
                data = self._get_vmss(sub, rg, vmss)
            except ProviderError as exc:
                limits.append(quota.unknown_limit("compute usage", "scale set %s" % vmss,
                                                  [_format_group_id(sub, rg, vmss)], str(exc)))
                continue
            size = (data.get("sku") or {}).get("name") or ""
            by_location.setdefault((sub.lower(), str(data.get("location") or "").lower()), []).append(
                (_format_group_id(sub, rg, vmss), size))
        for (sub, location), members in sorted(by_location.items()):
            ops = self.client(sub)
            try:
                usages = {}
                for usage in self._call("list compute usage of %s" % location,
                                        lambda: [self._as_dict(u) for u in ops.usage.list(location)]):
                    usages[(usage.get("name") or {}).get("value")] = (
                        usage.get("limit"), usage.get("currentValue", usage.get("current_value")))
            except ProviderError as exc:
                limits.append(quota.unknown_limit("compute usage", "location %s" % location,
                                                  [gid for gid, dummy in members], str(exc)))
                continue
            why = "the VM size is not in the resource SKU list"
            try:
                skus = self._call("list VM sizes of %s" % location, lambda: [
                    self._as_dict(s) for s in ops.resource_skus.list(filter="location eq '%s'" % location)])
            except ProviderError as exc:
                skus, why = [], str(exc)   # without the sizes only the VM count is known; cores read unknown
            groups = [(gid,) + sku_facts(_wire_skus(skus), size) for gid, size in members]
            limits.extend(location_limits(location, usages, groups, why))
        return limits

    def _default_location(self):
        if self.location:
            return self.location
        known = [loc for loc in self._locations.values() if loc]
        if not known and self.resource_group:
            self.list_groups()
            known = [loc for loc in self._locations.values() if loc]
        return known[0] if known else None

    def validate_image(self, image, location=None):  # pylint: disable=arguments-differ
        """Check the format, then that the image exists. Location-scoped images (shared and community gallery,
        Marketplace) are checked in a location: the scale set's, else the location option, else that of a scale
        set read before or found in the resource group."""
        kind, fields = parse_image(image)
        canonical = format_image(kind, fields)
        if location is None and kind in (COMMUNITY_GALLERY, SHARED_GALLERY, MARKETPLACE):
            location = self._default_location()
        what = "image %s" % canonical
        if kind == GALLERY_VERSION:
            self._call(what, self.client(fields["sub"]).gallery_image_versions.get, fields["rg"], fields["gallery"],
                       fields["image"], fields["version"])
        elif kind == MANAGED_IMAGE:
            self._call(what, self.client(fields["sub"]).images.get, fields["rg"], fields["image"])
        elif location is None:
            raise ProviderError("azure: cannot check %s without a location; set azure.location (or "
                                "azure.resource_group, to take it from its scale sets)" % canonical)
        elif kind == COMMUNITY_GALLERY:
            self._call(what, self.client().community_gallery_image_versions.get, location, fields["gallery"],
                       fields["image"], fields["version"])
        elif kind == SHARED_GALLERY:
            self._call(what, self.client().shared_gallery_image_versions.get, location, fields["gallery"],
                       fields["image"], fields["version"])
        else:
            self._call(what, self.client().virtual_machine_images.get, location, fields["publisher"],
                       fields["offer"], fields["sku"], fields["version"])
        return canonical
