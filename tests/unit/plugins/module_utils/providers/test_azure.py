"""Pure logic of the Azure provider: formats, state mapping, the scale-out diff, error classes, auth choice."""

import subprocess
import sys
import textwrap

import pytest
import yaml

from ansible_collections.kubenodes.image_upgrade.plugins.doc_fragments.azure import ModuleDocFragment
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import azure as az
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers.base import (
    CREATING, DELETING, FAILED, RUNNING, STOPPED, UNKNOWN, InvalidReferenceError, NotFoundError, ProviderError,
    QuotaError,
)

pytestmark = pytest.mark.timeout(30)

SUB = "0b1f6471-1bf0-4dda-aec3-111122223333"
VMSS_ID = "/subscriptions/%s/resourceGroups/MC_rg/providers/Microsoft.Compute/virtualMachineScaleSets/aks-np-vmss" % SUB
FLEX_VM_ID = "/subscriptions/%s/resourceGroups/RG/providers/Microsoft.Compute/virtualMachines/flex_1a2b3c4d" % SUB
FLEX_VM_PID = "azure://" + FLEX_VM_ID.replace("/RG/", "/rg/")
FLEX_VMSS_ID = "/subscriptions/%s/resourceGroups/RG/providers/Microsoft.Compute/virtualMachineScaleSets/Flex" % SUB


# --------------------------------------------------------------------------- providerIDs and group IDs

GOOD_PROVIDER_IDS = [
    ("azure://" + VMSS_ID + "/virtualMachines/0", (SUB, "MC_rg", "aks-np-vmss", "0")),
    ("azure://" + VMSS_ID.lower() + "/virtualmachines/17", (SUB, "mc_rg", "aks-np-vmss", "17")),
    ("  azure://" + VMSS_ID + "/virtualMachines/3 ", (SUB, "MC_rg", "aks-np-vmss", "3")),
    # a VM of a Flexible scale set is a plain VM: its providerID names no scale set
    (FLEX_VM_PID, (SUB, "rg", None, "flex_1a2b3c4d")),
    (FLEX_VM_PID.lower(), (SUB, "rg", None, "flex_1a2b3c4d")),
]
BAD_PROVIDER_IDS = [
    "",
    None,
    VMSS_ID + "/virtualMachines/0",                                        # no scheme
    "azure://" + VMSS_ID,                                                  # no instance
    "azure://" + VMSS_ID + "/virtualMachines/abc",                         # instance IDs are numbers
    "azure://" + VMSS_ID + "/virtualMachines/0/extra",
    FLEX_VM_PID + "/extra",
    "azure:///subscriptions/%s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/" % SUB,    # no VM name
    "azure:///subscriptions/%s/resourceGroups/rg/providers/Microsoft.Network/virtualMachines/vm1" % SUB,
    "gce://project/zone/instance",
    "aws:///eu-west-1a/i-0123456789abcdef0",
    "azure:///subscriptions//resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/x/virtualMachines/0",
]


@pytest.mark.parametrize("provider_id,expected", GOOD_PROVIDER_IDS)
def test_parse_provider_id_good(provider_id, expected):
    assert az.parse_provider_id(provider_id) == expected


@pytest.mark.parametrize("provider_id", BAD_PROVIDER_IDS)
def test_parse_provider_id_bad_names_the_format(provider_id):
    with pytest.raises(InvalidReferenceError) as err:
        az.parse_provider_id(provider_id)
    assert "azure:///subscriptions/<subscription>/resourceGroups/<resource-group>" in str(err.value)
    assert "virtualMachines/<instance-id>" in str(err.value)
    assert "Microsoft.Compute/virtualMachines/<vm-name>" in str(err.value)   # the Flexible format too


def test_normalize_provider_id_never_crashes_on_foreign_ids():
    provider = az.AzureProvider(None, SUB)
    assert provider.normalize_provider_id(" SIM://Node-1 ") == "sim://node-1"
    assert provider.normalize_provider_id("") == ""


@pytest.mark.parametrize("headers,expected", [({"Retry-After": "3"}, 3.0), ({"Retry-After": "0.5"}, 0.5),
                                              ({"Retry-After": "soon"}, 0.0), ({}, 0.0), (None, 0.0)])
def test_retry_after_seconds(headers, expected):
    response = type("Response", (), {"headers": headers})()
    assert az.retry_after_seconds(type("Err", (), {"response": response})()) == expected


def test_normalize_provider_id_equates_casings():
    upper = "azure://" + VMSS_ID + "/virtualMachines/4"
    lower = "azure://" + VMSS_ID.lower() + "/virtualmachines/4"
    provider = az.AzureProvider(None, SUB)
    assert provider.normalize_provider_id(upper) == provider.normalize_provider_id(lower)
    assert provider.normalize_provider_id(upper) != provider.normalize_provider_id(upper.replace("/4", "/5"))


def test_provider_id_from_vm_id_lowercases_only_the_resource_group():
    assert az.provider_id_from_vm_id(VMSS_ID + "/virtualMachines/2") == (
        "azure:///subscriptions/%s/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachineScaleSets/"
        "aks-np-vmss/virtualMachines/2" % SUB)


def test_group_id_of_is_a_pure_transform():
    provider = az.AzureProvider(None, SUB)
    assert provider.group_id_of("azure://" + VMSS_ID + "/virtualMachines/9") == (
        "/subscriptions/%s/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachineScaleSets/aks-np-vmss" % SUB)


@pytest.mark.parametrize("group_id", [VMSS_ID, VMSS_ID.lower(), VMSS_ID.upper().replace("/SUBSCRIPTIONS", "/subscriptions"),
                                      VMSS_ID + "/"])
def test_group_id_good_and_canonical(group_id):
    assert az.canonical_group_id(group_id) == az.canonical_group_id(VMSS_ID)
    assert az.canonical_group_id(group_id).endswith("/providers/Microsoft.Compute/virtualMachineScaleSets/aks-np-vmss")


@pytest.mark.parametrize("group_id", [
    "", None, "aks-np-vmss", "azure://" + VMSS_ID, VMSS_ID + "/virtualMachines/0",
    "/subscriptions/%s/resourceGroups/rg/providers/Microsoft.Compute/availabilitySets/x" % SUB,
    "/subscriptions/%s/resourceGroups/rg/providers/Microsoft.Network/virtualMachineScaleSets/x" % SUB,
])
def test_group_id_bad_names_the_format(group_id):
    with pytest.raises(InvalidReferenceError) as err:
        az.parse_group_id(group_id)
    assert az.GROUP_ID_FORMAT in str(err.value)


# --------------------------------------------------------------------------- images

GALLERY = "/subscriptions/%s/resourceGroups/Images-RG/providers/Microsoft.Compute/galleries/G1/images/Node/versions/1.2.3" % SUB
GOOD_IMAGES = [
    (GALLERY, az.GALLERY_VERSION,
     "/subscriptions/%s/resourceGroups/images-rg/providers/Microsoft.Compute/galleries/g1/images/node/versions/1.2.3" % SUB,
     {"id": "/subscriptions/%s/resourceGroups/images-rg/providers/Microsoft.Compute/galleries/g1/images/node/versions/1.2.3" % SUB}),
    (GALLERY.lower(), az.GALLERY_VERSION,
     "/subscriptions/%s/resourceGroups/images-rg/providers/Microsoft.Compute/galleries/g1/images/node/versions/1.2.3" % SUB,
     None),
    ("/subscriptions/%s/resourceGroups/rg/providers/Microsoft.Compute/images/MyImage" % SUB, az.MANAGED_IMAGE,
     "/subscriptions/%s/resourceGroups/rg/providers/Microsoft.Compute/images/myimage" % SUB, None),
    ("/CommunityGalleries/Pub-123/Images/Node/Versions/2.0.0", az.COMMUNITY_GALLERY,
     "/CommunityGalleries/pub-123/Images/node/Versions/2.0.0",
     {"communityGalleryImageId": "/CommunityGalleries/pub-123/Images/node/Versions/2.0.0"}),
    ("/communityGalleries/pub-123/images/node/versions/2.0.0", az.COMMUNITY_GALLERY,
     "/CommunityGalleries/pub-123/Images/node/Versions/2.0.0", None),
    ("/SharedGalleries/abc-shared/Images/node/Versions/3.1.0", az.SHARED_GALLERY,
     "/SharedGalleries/abc-shared/Images/node/Versions/3.1.0",
     {"sharedGalleryImageId": "/SharedGalleries/abc-shared/Images/node/Versions/3.1.0"}),
    ("Canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2:22.04.202401010", az.MARKETPLACE,
     "canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2:22.04.202401010",
     {"publisher": "canonical", "offer": "0001-com-ubuntu-server-jammy", "sku": "22_04-lts-gen2",
      "version": "22.04.202401010"}),
    ("constellation-marketplace-image://Azure?offer=constellation&publisher=edgelesssystems&sku=constellation"
     "&version=2.14.0", az.MARKETPLACE, "edgelesssystems:constellation:constellation:2.14.0", None),
]


@pytest.mark.parametrize("image,kind,canonical,body", GOOD_IMAGES)
def test_images_good(image, kind, canonical, body):
    assert az.parse_image(image)[0] == kind
    assert az.canonical_image(image) == canonical
    assert az.canonical_image(canonical) == canonical   # canonical form is a fixed point
    if body is not None:
        assert az.image_reference_body(image) == body


@pytest.mark.parametrize("image,why", [
    ("", ""), (None, ""), ("ubuntu", ""), ("Canonical:Ubuntu:22_04", ""),
    ("Canonical:offer:sku:latest", "exact version"),
    (GALLERY.replace("1.2.3", "latest"), "exact version"),
    ("/subscriptions/%s/resourceGroups/rg/providers/Microsoft.Compute/galleries/g/images/node" % SUB, ""),
    ("/CommunityGalleries/pub/Images/node", ""),
    ("ami-0123456789abcdef0", ""),
    ("projects/debian-cloud/global/images/debian-12", ""),
    ("constellation-marketplace-image://AWS?offer=a&publisher=b&sku=c&version=1", "another cloud"),
    ("constellation-marketplace-image://Azure?offer=a&sku=c&version=1", "publisher, offer, sku"),
])
def test_images_bad_name_the_formats(image, why):
    with pytest.raises(InvalidReferenceError) as err:
        az.parse_image(image)
    text = str(err.value)
    assert "<publisher>:<offer>:<sku>:<version>" in text and "/CommunityGalleries/" in text
    assert why in text


@pytest.mark.parametrize("reference,expected", [
    ({"id": GALLERY}, az.canonical_image(GALLERY)),
    ({"communityGalleryImageId": "/communityGalleries/P/images/I/versions/1.0.0"}, "/CommunityGalleries/p/Images/i/Versions/1.0.0"),
    ({"sharedGalleryImageId": "/SharedGalleries/S/Images/I/Versions/1.0.0"}, "/SharedGalleries/s/Images/i/Versions/1.0.0"),
    ({"publisher": "Canonical", "offer": "O", "sku": "S", "version": "1.0.0", "exactVersion": "1.0.0"}, "canonical:o:s:1.0.0"),
    ({"publisher": "Canonical", "offer": "O", "sku": "S", "version": "latest", "exactVersion": "1.0.7"}, "canonical:o:s:1.0.7"),
    ({}, ""),
    (None, ""),
])
def test_image_from_reference(reference, expected):
    assert az.image_from_reference(reference) == expected


# --------------------------------------------------------------------------- VMs and scale sets

def _vm(iid, provisioning="Succeeded", statuses=None, computer="AKS-NP-VMSS00000A", reference=None):
    props = {"provisioningState": provisioning, "osProfile": {"computerName": computer},
             "storageProfile": {"imageReference": reference or {"id": GALLERY}},
             "timeCreated": "2026-01-02T03:04:05.1234567+00:00", "latestModelApplied": False}
    if statuses is not None:
        props["instanceView"] = {"statuses": [{"code": c} for c in statuses]}
    return {"id": VMSS_ID + "/virtualMachines/%s" % iid, "name": "aks-np-vmss_%s" % iid, "instanceId": str(iid),
            "properties": props}


@pytest.mark.parametrize("provisioning,statuses,state", [
    ("Creating", ["ProvisioningState/creating", "PowerState/starting"], CREATING),
    ("Succeeded", ["ProvisioningState/succeeded", "PowerState/running"], RUNNING),
    ("Deleting", ["ProvisioningState/deleting", "PowerState/running"], DELETING),
    ("Failed", ["ProvisioningState/failed/AllocationFailed"], FAILED),
    ("Succeeded", ["ProvisioningState/succeeded", "PowerState/deallocated"], STOPPED),
    ("Succeeded", ["ProvisioningState/succeeded", "PowerState/stopped"], STOPPED),
    ("Updating", ["ProvisioningState/updating", "PowerState/running"], RUNNING),
    ("Succeeded", ["ProvisioningState/succeeded"], UNKNOWN),
    ("Succeeded", None, RUNNING),
    ("", [], UNKNOWN),
    ("Succeeded", ["ProvisioningState/succeeded", "PowerState/starting"], CREATING),
])
def test_vm_state(provisioning, statuses, state):
    assert az.vm_state(_vm(0, provisioning, statuses)) == state


def test_instance_from_vm():
    inst = az.instance_from_vm(_vm(10, statuses=["PowerState/running"]), az.canonical_group_id(VMSS_ID))
    assert inst.node_name == "aks-np-vmss00000a"
    assert inst.provider_id.endswith("/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachineScaleSets/"
                                     "aks-np-vmss/virtualMachines/10")
    assert inst.image == az.canonical_image(GALLERY)
    assert inst.state == RUNNING
    assert inst.created_at == pytest.approx(1767323045.123456)
    assert inst.extra == {"instance_id": "10", "latest_model_applied": False}


def test_failed_instance_says_why():
    vm = _vm(3, "Failed", None)
    vm["properties"]["instanceView"] = {"statuses": [
        {"code": "ProvisioningState/failed/AllocationFailed", "message": "no capacity"}]}
    inst = az.instance_from_vm(vm, az.canonical_group_id(VMSS_ID))
    assert inst.state == FAILED
    assert inst.extra["error_code"] == "AllocationFailed" and inst.extra["capacity_refusal"] is True
    assert inst.extra["error_message"] == "no capacity"
    # The planner's key for a refusal that came after the create was accepted (it holds the surge).
    assert inst.extra["refused_for"] == "AllocationFailed: no capacity"
    vm["properties"]["instanceView"]["statuses"][0]["code"] = "ProvisioningState/failed/OSProvisioningTimedOut"
    assert az.instance_from_vm(vm, "g").extra["capacity_refusal"] is False
    assert "refused_for" not in az.instance_from_vm(vm, "g").extra
    assert az.failure_details(_vm(1, statuses=["PowerState/running"])) == {}


def test_group_from_vmss_reads_role_capacity_and_image():
    vmss = {"id": VMSS_ID, "name": "AKS-NP-VMSS", "tags": {"kubenodes-role": "control-plane"},
            "sku": {"capacity": 3},
            "properties": {"virtualMachineProfile": {"storageProfile": {"imageReference": {
                "communityGalleryImageId": "/CommunityGalleries/p/Images/i/Versions/1.0.0"}}}}}
    group = az.group_from_vmss(vmss)
    assert (group.name, group.role, group.target_size) == ("aks-np-vmss", "control-plane", 3)
    assert group.image == "/CommunityGalleries/p/Images/i/Versions/1.0.0"
    assert group.kind == "Azure VM scale set (Uniform orchestration)"
    flexible = dict(vmss, properties=dict(vmss["properties"], orchestrationMode="Flexible"))
    assert az.group_from_vmss(flexible).kind == "Azure VM scale set (Flexible orchestration)"
    assert az.group_from_vmss(dict(vmss, tags={})).role is None
    assert az.group_from_vmss(dict(vmss, tags={"kubenodes-role": "worker"})).role == "worker"


def _ids(*ids):
    return [{"instanceId": str(i)} for i in ids]


@pytest.mark.parametrize("before,after,cap_before,cap_after,expected", [
    (_ids(0, 1), _ids(0, 1, 2), 2, 3, "2"),                 # plain scale-out
    (_ids(0, 1), _ids(0, 1), 2, 3, None),                   # not listed yet
    (_ids(0, 1), _ids(0, 1, 2, 3), 2, 3, "2"),              # a racing create came after ours: we are first
    (_ids(0, 1), _ids(0, 1, 2, 3), 2, 4, "3"),              # ours landed after a 412 re-read: second slot
    (_ids(0, 1), _ids(1, 9, 10), 2, 3, "9"),                # deletions meanwhile; ids not dense
    (_ids(), _ids(10, 9), 0, 1, "9"),                       # ordered by number, not by text or listing order
    (_ids(0), _ids(0, 2), 1, 5, "2"),                       # slot out of range: the last fresh VM
])
def test_pick_new_vm(before, after, cap_before, cap_after, expected):
    vm = az.pick_new_vm(before, after, cap_before, cap_after)
    assert (vm["instanceId"] if vm else None) == expected


# --------------------------------------------------------------------------- errors

class _ArmError:
    """The attributes azure-core's HttpResponseError carries (status_code and the parsed ARM error)."""

    def __init__(self, status, code, message):
        self.status_code = status
        self.error = type("ODataV4Format", (), {"code": code, "message": message})()
        self.message = message


@pytest.mark.parametrize("status,code,message,cls,retryable", [
    (429, "TooManyRequests", "throttled", ProviderError, True),
    (500, "InternalServerError", "oops", ProviderError, True),
    (503, "ServiceUnavailable", "later", ProviderError, True),
    (404, "ResourceNotFound", "gone", NotFoundError, False),
    (400, "InvalidParameter", "bad", ProviderError, False),
    (403, "AuthorizationFailed", "no", ProviderError, False),
    (409, "OperationNotAllowed", "Operation could not be completed as it results in exceeding approved "
                                 "standardDSv5Family Cores quota.", QuotaError, False),
    (409, "OperationNotAllowed", "The scale set is being deleted.", ProviderError, False),
    (409, "SkuNotAvailable", "The requested size is not available in location westeurope.", QuotaError, False),
    (200, "AllocationFailed", "Allocation failed. We do not have sufficient capacity.", QuotaError, False),
    (200, "ZonalAllocationFailed", "no capacity in zone 1", QuotaError, False),
])
def test_classify_error(status, code, message, cls, retryable):
    err = az.classify_error(_ArmError(status, code, message), "scale out x")
    assert type(err) is cls  # pylint: disable=unidiomatic-typecheck  # the exact class, not a subclass
    assert err.retryable is retryable
    assert err.code == code and err.status == status
    assert str(err).startswith("scale out x: ") and message in str(err)


# --------------------------------------------------------------------------- options, auth, clouds

def test_arg_spec_matches_doc_fragment():
    doc = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]["azure"]
    assert doc["type"] == "dict" and doc["default"] == {}
    suboptions = doc["suboptions"]
    assert set(suboptions) == set(az.ARG_SPEC)
    for name, spec in az.ARG_SPEC.items():
        documented = suboptions[name]
        assert documented.get("type", "str") == spec["type"], name
        assert documented.get("default") == spec.get("default"), name
        assert documented.get("choices") == spec.get("choices"), name
    secrets = {n for n, s in az.ARG_SPEC.items() if s.get("no_log")}
    assert secrets == {"secret", "access_token", "password"}


def test_env_fallbacks_mirror_azure_azcollection():
    names = {n: s["fallback"][1] for n, s in az.ARG_SPEC.items() if "fallback" in s}
    assert names["subscription_id"] == ["AZURE_SUBSCRIPTION_ID"]
    assert names["client_id"] == ["AZURE_CLIENT_ID"]
    assert names["secret"][0] == "AZURE_SECRET"
    assert names["tenant"][0] == "AZURE_TENANT"
    assert names["cloud_environment"] == ["AZURE_CLOUD_ENVIRONMENT"]
    assert names["profile"] == ["AZURE_PROFILE"]
    assert names["auth_source"] == ["ANSIBLE_AZURE_AUTH_SOURCE"]


@pytest.fixture
def credentials_file(tmp_path):
    path = tmp_path / "credentials"
    path.write_text(textwrap.dedent("""\
        [default]
        subscription_id = 0b1e5c9a-dddd-4ddd-9ddd-00000000aadd
        client_id = app-default
        secret = s3cret-default
        tenant = tenant-default

        [other]
        subscription_id = 0b1e5c9a-eeee-4eee-9eee-00000000aaee
        client_id = app-other
        secret = s3cret-other
        tenant = tenant-other
        """))
    return str(path)


def test_resolve_auth_order(credentials_file, tmp_path):
    missing = str(tmp_path / "none")
    # an explicit service principal wins over the default profile
    kind, s = az.resolve_auth(dict(client_id="a", secret="b", tenant="t", subscription_id="0b1e5c9a-5555-4555-9555-00000000aa55"), {}, credentials_file)
    assert kind == "client_secret" and s["client_id"] == "a"
    # a named profile
    kind, s = az.resolve_auth(dict(profile="other"), {}, credentials_file)
    assert (kind, s["subscription_id"], s["secret"]) == ("client_secret", "0b1e5c9a-eeee-4eee-9eee-00000000aaee", "s3cret-other")
    # the [default] profile when nothing else is given
    kind, s = az.resolve_auth({}, {}, credentials_file)
    assert (kind, s["client_id"]) == ("client_secret", "app-default")
    # nothing at all: the SDK's chain, but a subscription is still needed
    assert az.resolve_auth(dict(subscription_id="0b1e5c9a-5555-4555-9555-00000000aa55"), {}, missing)[0] == "default"
    with pytest.raises(ProviderError, match="AZURE_SUBSCRIPTION_ID"):
        az.resolve_auth({}, {}, missing)
    # explicit sources
    assert az.resolve_auth(dict(auth_source="msi", subscription_id="0b1e5c9a-5555-4555-9555-00000000aa55"), {}, missing)[0] == "msi"
    assert az.resolve_auth(dict(auth_source="cli", subscription_id="0b1e5c9a-5555-4555-9555-00000000aa55"), {}, missing)[0] == "cli"
    assert az.resolve_auth(dict(auth_source="msi", access_token="x", subscription_id="0b1e5c9a-5555-4555-9555-00000000aa55"), {}, missing)[0] == "token"
    # a subscription that is not a GUID is named before any request (Azure's answer would name only a URL)
    with pytest.raises(ProviderError, match="subscription 'my-sub' .*azure.subscription_id.* not a subscription ID"):
        az.resolve_auth(dict(auth_source="msi", subscription_id="my-sub"), {}, missing)
    upper = "0B1E5C9A-5555-4555-9555-00000000AA55"
    assert az.resolve_auth(dict(auth_source="msi", subscription_id=" %s " % upper), {}, missing)[1]["subscription_id"] == upper
    with pytest.raises(ProviderError, match="needs secret, tenant"):
        az.resolve_auth(dict(auth_source="env", client_id="a", subscription_id="0b1e5c9a-5555-4555-9555-00000000aa55"), {}, missing)
    with pytest.raises(ProviderError, match="profile 'nope' not found"):
        az.resolve_auth(dict(profile="nope"), {}, credentials_file)


@pytest.mark.parametrize("options,expected", [
    ({}, ("https://management.azure.com", "login.microsoftonline.com", "https://management.azure.com/.default")),
    ({"cloud_environment": "AzureChinaCloud"}, ("https://management.chinacloudapi.cn", "login.chinacloudapi.cn",
                                                "https://management.chinacloudapi.cn/.default")),
    ({"cloud_environment": "azureusgovernment"}, ("https://management.usgovcloudapi.net", "login.microsoftonline.us",
                                                  "https://management.usgovcloudapi.net/.default")),
    # the emulator: the endpoint changes, the token scope stays the public cloud's
    ({"endpoint": "https://127.0.0.1:4443/"}, ("https://127.0.0.1:4443", "login.microsoftonline.com",
                                               "https://management.azure.com/.default")),
    ({"cloud_environment": "https://stack.example/metadata", "endpoint": "https://arm.stack.example",
      "adfs_authority_url": "https://adfs.stack.example/adfs"},
     ("https://arm.stack.example", "https://adfs.stack.example/adfs", "https://arm.stack.example/.default")),
])
def test_resolve_cloud(options, expected):
    assert az.resolve_cloud(options) == expected


@pytest.mark.parametrize("options,match", [
    ({"cloud_environment": "Mars"}, "unknown cloud_environment 'Mars'"),
    ({"endpoint": "http://127.0.0.1:80"}, "must be an https:// URL"),
])
def test_resolve_cloud_errors(options, match):
    with pytest.raises(ProviderError, match=match):
        az.resolve_cloud(options)


def test_static_token_credential():
    token = az.StaticTokenCredential("abc").get_token("https://management.azure.com/.default")
    assert token.token == "abc" and token.expires_on > 0


def test_imports_cleanly_without_the_sdk_and_names_the_package():
    code = textwrap.dedent("""
        import sys
        for name in ("azure", "azure.core", "azure.mgmt", "azure.mgmt.compute", "azure.identity"):
            sys.modules[name] = None
        sys.path[:0] = %r
        from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import azure as az
        assert not az.HAS_AZURE_SDK
        assert az.parse_image("a:b:c:1.0")[0] == "marketplace"
        try:
            az.from_params({"subscription_id": "s", "access_token": "t"})
        except az.ProviderError as exc:
            print(exc)
    """) % (sys.path,)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert "azure-mgmt-compute" in out.stdout


# --------------------------------------------------------------------------- properties

from hypothesis import given, settings, strategies as st  # noqa: E402  (kept with the property tests)

_names = st.text(alphabet=st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."),
                 min_size=1, max_size=20).filter(lambda s: s.lower() != "latest")
_versions = st.tuples(st.integers(0, 999), st.integers(0, 999), st.integers(0, 999)).map(lambda t: "%d.%d.%d" % t)


@settings(max_examples=200, deadline=None)
@given(sub=_names, rg=_names, gallery=_names, image=_names, version=_versions, flip=st.booleans())
def test_gallery_ids_are_canonical_whatever_the_casing(sub, rg, gallery, image, version, flip):
    ref = "/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/galleries/%s/images/%s/versions/%s" % (
        sub, rg, gallery, image, version)
    other = ref.swapcase() if flip else ref.upper()
    assert az.canonical_image(ref) == az.canonical_image(other)
    assert az.canonical_image(az.canonical_image(ref)) == az.canonical_image(ref)
    assert az.image_from_reference(az.image_reference_body(ref)) == az.canonical_image(ref)


@settings(max_examples=200, deadline=None)
@given(sub=_names, rg=_names, vmss=_names, instance=st.integers(0, 10 ** 6))
def test_provider_ids_round_trip(sub, rg, vmss, instance):
    vm_id = "/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/virtualMachineScaleSets/%s" \
            "/virtualMachines/%d" % (sub, rg, vmss, instance)
    provider_id = az.provider_id_from_vm_id(vm_id)
    assert az.parse_provider_id(provider_id) == (sub, rg.lower(), vmss, str(instance))
    assert az.normalize_provider_id(provider_id) == az.normalize_provider_id("azure://" + vm_id.swapcase())
    provider = az.AzureProvider(None, sub)
    assert provider.group_id_of(provider_id) == az.canonical_group_id(vm_id.rsplit("/virtualMachines/", 1)[0])


# --------------------------------------------------------------------------- Flexible orchestration

def test_flexible_provider_ids_compare_across_casings_and_keep_their_vm_name():
    assert az.provider_id_from_vm_id(FLEX_VM_ID) == (
        "azure:///subscriptions/%s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/flex_1a2b3c4d" % SUB)
    provider = az.AzureProvider(None, SUB)
    upper = FLEX_VM_PID.replace("flex_1a2b3c4d", "FLEX_1A2B3C4D").replace("/virtualMachines/", "/VIRTUALMACHINES/")
    assert provider.normalize_provider_id(upper) == provider.normalize_provider_id(FLEX_VM_PID)
    assert provider.normalize_provider_id(FLEX_VM_PID) != provider.normalize_provider_id(
        FLEX_VM_PID.replace("flex_1a2b3c4d", "flex_1a2b3c4e"))
    # a Uniform VM with the same name segment is another VM
    assert provider.normalize_provider_id(FLEX_VM_PID) != provider.normalize_provider_id(
        "azure://" + VMSS_ID + "/virtualMachines/0")


@pytest.mark.parametrize("properties,mode", [
    ({"orchestrationMode": "Flexible"}, az.FLEXIBLE), ({"orchestrationMode": "flexible"}, az.FLEXIBLE),
    ({"orchestrationMode": "Uniform"}, az.UNIFORM), ({}, az.UNIFORM), (None, az.UNIFORM),
])
def test_orchestration_mode(properties, mode):
    assert az.orchestration_mode({"properties": properties}) == mode


def test_vm_scale_set_id_and_the_filter_that_lists_a_flexible_sets_vms():
    vm = {"properties": {"virtualMachineScaleSet": {"id": FLEX_VMSS_ID.upper().replace("/SUBSCRIPTIONS", "/subscriptions")}}}
    assert az.vm_scale_set_id(vm) == az.canonical_group_id(FLEX_VMSS_ID)
    assert az.vm_scale_set_id({"properties": {}}) is None
    assert az.vm_scale_set_id({"properties": {"virtualMachineScaleSet": {"id": "/subscriptions/x/availabilitySets/y"}}}) is None
    sub, rg, name = az.parse_group_id(FLEX_VMSS_ID)
    assert az.flexible_vm_filter(sub, rg, name) == "'virtualMachineScaleSet/id' eq '%s'" % FLEX_VMSS_ID


def _flex_vm(name, created, state="Succeeded"):
    return {"id": FLEX_VM_ID.replace("flex_1a2b3c4d", name), "name": name,
            "properties": {"provisioningState": state, "timeCreated": created,
                           "virtualMachineScaleSet": {"id": FLEX_VMSS_ID},
                           "osProfile": {"computerName": "FLEX" + name[-6:].upper()},
                           "storageProfile": {"imageReference": {"id": GALLERY}}}}


def test_instance_from_a_flexible_vm():
    inst = az.instance_from_vm(_flex_vm("flex_1a2b3c4d", "2026-01-02T03:04:05Z"), az.canonical_group_id(FLEX_VMSS_ID))
    assert inst.provider_id == FLEX_VM_PID
    assert inst.node_name == "flex2b3c4d" and inst.name == "flex_1a2b3c4d"
    assert inst.state == RUNNING and inst.image == az.canonical_image(GALLERY)
    assert inst.extra == {"instance_id": "flex_1a2b3c4d", "latest_model_applied": None}


def test_pick_new_vm_orders_flexible_vms_by_creation_time_not_by_their_random_names():
    before = [_flex_vm("flex_00000001", "2026-01-01T00:00:00Z")]
    after = before + [_flex_vm("flex_ffffffff", "2026-01-01T00:01:00Z"), _flex_vm("flex_88888888", "2026-01-01T00:02:00Z")]
    assert az.pick_new_vm(before, after, 1, 2)["name"] == "flex_ffffffff"    # ours came first
    assert az.pick_new_vm(before, after, 1, 3)["name"] == "flex_88888888"    # a racing create landed before ours
    assert az.pick_new_vm(before, before, 1, 2) is None
    # names compare case-insensitively, as Azure's do
    assert az.pick_new_vm(before, [_flex_vm("FLEX_00000001", "2026-01-01T00:00:00Z")], 1, 2) is None


def test_a_token_refused_by_resource_manager_is_not_called_a_refused_login():
    """Issue 28 item 7: an ARM endpoint refusing a token was reported as the login authority refusing it."""
    import types

    from azure.core.exceptions import ClientAuthenticationError

    refused = ClientAuthenticationError(message="InvalidAuthenticationTokenAudience: The access token has been obtained "
                                                "for wrong audience")
    refused.status_code = 401
    refused.response = types.SimpleNamespace(request=types.SimpleNamespace(
        url="https://arm.example.test:8443/subscriptions/s/providers/Microsoft.Compute/virtualMachineScaleSets"))
    err = az.classify_error(refused, "listing scale sets", "service principal c (client secret) at login.example")
    assert err.code == "TOKEN_REFUSED" and err.status == 401 and not err.retryable
    message = str(err)
    assert message.startswith("listing scale sets: Azure Resource Manager at arm.example.test:8443 refused the token that "
                              "the login gave service principal c (client secret) at login.example (HTTP 401: "), message
    assert "the login itself succeeded" in message and "azure.cloud_environment or azure.endpoint" in message
    assert "the Azure login refused" not in message
    # A login that failed (no answer from ARM, or the token endpoint's): the login is named, as before.
    for login in (ClientAuthenticationError(message="AADSTS7000215: Invalid client secret"),):
        assert str(az.classify_error(login, "listing", "service principal c")).startswith(
            "listing: the Azure login refused service principal c: AADSTS7000215")
    at_login = ClientAuthenticationError(message="AADSTS700016")
    at_login.response = types.SimpleNamespace(request=types.SimpleNamespace(url="https://login.example/t/oauth2/v2.0/token"))
    assert az.classify_error(at_login, "listing").code == "AUTH_FAILED"


def test_the_autoscale_setting_of_a_scale_set_is_the_one_that_targets_it_whatever_the_case():
    group_id = "/subscriptions/s1/resourceGroups/RG/providers/Microsoft.Compute/virtualMachineScaleSets/workers"
    other = dict(id="a1", properties=dict(enabled=True, targetResourceUri=group_id + "-2"))
    mine = dict(id="a2", properties=dict(enabled=False, targetResourceUri=group_id.lower()))
    assert az.autoscale_of([other, mine], group_id) is mine
    assert az.autoscale_of([other], group_id) is None
    group = az.group_from_vmss(dict(id=group_id, name="workers", sku=dict(capacity=2), properties={}))
    assert az.with_autoscale(group, [other, mine]).settings == {
        "upgradePolicy.mode": "Manual", "automaticRepairsPolicy.enabled": "false", "overprovision": "true",
        "autoscaleSettings.enabled": "false"}
    # enabled unset reads as ARM's default, true; no setting for the scale set, no entry; a refused listing, unreadable
    mine["properties"].pop("enabled")
    assert az.with_autoscale(group, [mine]).settings["autoscaleSettings.enabled"] == "true"
    assert "autoscaleSettings.enabled" not in az.with_autoscale(az.group_from_vmss(dict(id=group_id, properties={})),
                                                                [other]).settings
    assert az.with_autoscale(group, None).settings["autoscaleSettings.enabled"] == "unreadable"


@pytest.mark.parametrize("properties, expected", [
    ({}, {"upgradePolicy.mode": "Manual", "automaticRepairsPolicy.enabled": "false", "overprovision": "true"}),
    ({"overprovision": False, "automaticRepairsPolicy": {"enabled": True, "gracePeriod": "PT10M"},
      "upgradePolicy": {"mode": "Automatic"}},
     {"upgradePolicy.mode": "Automatic", "automaticRepairsPolicy.enabled": "true", "overprovision": "false"}),
    ({"orchestrationMode": "Flexible", "automaticRepairsPolicy": {"enabled": False}},   # no overprovision there
     {"upgradePolicy.mode": "Manual", "automaticRepairsPolicy.enabled": "false"}),
])
def test_run_settings_read_unset_fields_as_arm_defaults(properties, expected):
    assert az.run_settings({"properties": properties}) == expected
