"""Pure logic of the GCE provider: reference formats, state mapping, naming, error classification and the
option spec. No network; the SDK-facing parts are tested against the emulator in tests/integration."""

import concurrent.futures
import random
import re
import threading
import time
import types

import pytest
import yaml

from ansible_collections.kubenodes.image_upgrade.plugins.doc_fragments import gcp as gcp_fragment
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base, gce

pytestmark = pytest.mark.timeout(30)


# ---- providerIDs ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("provider_id, expected", [
    ("gce://my-project/us-central1-a/pool-abcd", ("my-project", "us-central1-a", "pool-abcd")),
    ("gce://123456789012/europe-west3-c/n1", ("123456789012", "europe-west3-c", "n1")),
    ("  gce://my-project/us-central1-a/pool-abcd  ", ("my-project", "us-central1-a", "pool-abcd")),
    ("gce://example.com:my-proj/asia-east1-b/x-1", ("example.com:my-proj", "asia-east1-b", "x-1")),
])
def test_parse_provider_id_accepts(provider_id, expected):
    assert gce.parse_provider_id(provider_id) == expected


@pytest.mark.parametrize("provider_id", [
    "", None, "gce://", "gce:///us-central1-a/x", "gce://p/us-central1-a/", "gce://proj/us-central1-a",
    "gce://proj/us-central1-a/x/extra", "aws:///us-east-1a/i-0123", "gce://my-project/us-central1/pool-a",
    "gce://my-project/us-central1-a/Pool-A", "gce://my-project/us-central1-a/pool a",
    "gce://my-project/us-central1-a/-pool", "gce:/my-project/us-central1-a/pool",
    "azure:///subscriptions/s/resourceGroups/r/providers/Microsoft.Compute/virtualMachineScaleSets/v/virtualMachines/0",
])
def test_parse_provider_id_rejects_with_format(provider_id):
    with pytest.raises(base.InvalidReferenceError) as err:
        gce.parse_provider_id(provider_id)
    assert gce.PROVIDER_ID_FORMAT in str(err.value)


def test_provider_id_round_trip():
    assert gce.parse_provider_id(gce.provider_id_of("p-1234", "us-east1-b", "n-x")) == ("p-1234", "us-east1-b", "n-x")


# ---- group IDs --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("group_id, expected", [
    ("projects/my-project/zones/us-central1-a/instanceGroupManagers/workers",
     "projects/my-project/zones/us-central1-a/instanceGroupManagers/workers"),
    ("projects/my-project/regions/us-central1/instanceGroupManagers/control-plane",
     "projects/my-project/regions/us-central1/instanceGroupManagers/control-plane"),
    ("https://www.googleapis.com/compute/v1/projects/my-project/zones/us-central1-a/instanceGroupManagers/w",
     "projects/my-project/zones/us-central1-a/instanceGroupManagers/w"),
    ("https://compute.googleapis.com/compute/v1/projects/my-project/regions/europe-west4/instanceGroupManagers/w",
     "projects/my-project/regions/europe-west4/instanceGroupManagers/w"),
    ("http://127.0.0.1:8080/compute/v1/projects/my-project/zones/us-central1-a/instanceGroupManagers/w",
     "projects/my-project/zones/us-central1-a/instanceGroupManagers/w"),
    ("projects/123456789012/zones/us-central1-a/instanceGroupManagers/w",
     "projects/123456789012/zones/us-central1-a/instanceGroupManagers/w"),
    # An AI zone: more than one letter after the region.
    ("projects/my-project/zones/us-central1-ai1a/instanceGroupManagers/w",
     "projects/my-project/zones/us-central1-ai1a/instanceGroupManagers/w"),
])
def test_parse_group_id_accepts(group_id, expected):
    ref = gce.parse_group_id(group_id)
    assert ref.id == expected
    assert ref.regional == ("/regions/" in expected)


@pytest.mark.parametrize("group_id", [
    "", "workers", "projects/p/zones/us-central1-a/instanceGroups/workers",
    "projects/my-project/zones/us-central1/instanceGroupManagers/w",        # a region where a zone belongs
    "projects/my-project/regions/us-central1-a/instanceGroupManagers/w",    # a zone where a region belongs
    "projects/my-project/zones/us-central1-a/instanceGroupManagers/",
    "projects/my-project/zones/us-central1-a/instanceGroupManagers/w/extra",
    "projects/my-project/global/instanceGroupManagers/w",
    "/projects/my-project/zones/us-central1-a/instanceGroupManagers/w",
    "projects/my-project/zones/us-central1-a/instanceGroupManagers/Workers",
    "ftp://x/compute/v1/projects/my-project/zones/us-central1-a/instanceGroupManagers/w",
])
def test_parse_group_id_rejects_with_format(group_id):
    with pytest.raises(base.InvalidReferenceError) as err:
        gce.parse_group_id(group_id)
    assert "instanceGroupManagers/<name>" in str(err.value)
    assert "zones/<zone>" in str(err.value) and "regions/<region>" in str(err.value)


def test_group_refs_compare_by_id():
    url = "https://www.googleapis.com/compute/v1/projects/p-12345/zones/us-central1-a/instanceGroupManagers/w"
    assert gce.parse_group_id(url) == gce.parse_group_id("projects/p-12345/zones/us-central1-a/instanceGroupManagers/w")
    assert len({gce.parse_group_id(url), gce.parse_group_id(url)}) == 1


# ---- images -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("image, expected", [
    ("projects/my-project/global/images/node-v2", ("my-project", "node-v2", False)),
    ("https://www.googleapis.com/compute/v1/projects/my-project/global/images/node-v2", ("my-project", "node-v2", False)),
    ("projects/debian-cloud/global/images/family/debian-12", ("debian-cloud", "debian-12", True)),
    ("https://compute.googleapis.com/compute/v1/projects/cos-cloud/global/images/family/cos-stable",
     ("cos-cloud", "cos-stable", True)),
])
def test_parse_image_accepts(image, expected):
    assert gce.parse_image(image) == expected


@pytest.mark.parametrize("image", [
    "", "node-v2", "global/images/node-v2", "projects/my-project/images/node-v2",
    "projects/my-project/global/images/", "projects/my-project/global/images/Node-V2",
    "projects/my-project/global/images/family/", "projects/my-project/global/images/a/b",
    "projects/my-project/zones/us-central1-a/images/node", "ubuntu-2204-lts",
    "/subscriptions/s/resourceGroups/r/providers/Microsoft.Compute/galleries/g/images/i/versions/1.0.0",
    "ami-0123456789abcdef0",
])
def test_parse_image_rejects_with_format(image):
    with pytest.raises(base.InvalidReferenceError) as err:
        gce.parse_image(image)
    assert "projects/<project>/global/images/<name>" in str(err.value)


def test_normalize_image_strips_any_api_host():
    assert gce.normalize_image("https://www.googleapis.com/compute/v1/projects/p/global/images/i") == \
        "projects/p/global/images/i"
    assert gce.normalize_image("projects/p/global/images/i") == "projects/p/global/images/i"
    assert gce.normalize_image("") == ""


def test_parse_template_global_and_regional():
    assert gce.parse_template("https://www.googleapis.com/compute/v1/projects/p/global/instanceTemplates/t") == ("p", "t")
    with pytest.raises(base.ProviderError, match="regional"):
        gce.parse_template("projects/p/regions/us-central1/instanceTemplates/t")
    with pytest.raises(base.InvalidReferenceError, match="instanceTemplates"):
        gce.parse_template("projects/p/global/images/t")


# ---- naming ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, expected", [
    ("workers", "workers-1"), ("workers-", "workers-1"), ("workers-1", "workers-2"), ("workers-9", "workers-10"),
    ("w-tmpl-41", "w-tmpl-42"), ("pool7", "pool7-1"), ("a-007", "a-8"),
    ("x" * 63, "x" * 61 + "-1"), ("x" * 60 + "-99", "x" * 59 + "-100"),
])
def test_next_template_name(name, expected):
    assert gce.next_template_name(name) == expected
    assert len(expected) <= 63 and re.match(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$", expected)


def test_random_instance_name_is_base_dash_four_and_fits():
    rng = random.Random(7)
    names = {gce.random_instance_name("pool-workers", rng) for dummy in range(200)}
    assert all(re.match(r"^pool-workers-[a-z0-9]{4}$", n) for n in names)
    assert len(names) > 190
    long_name = gce.random_instance_name("b" * 70)
    assert len(long_name) == 63 and re.match(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$", long_name)


# ---- states ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("action, status, errors, expected", [
    ("CREATING", "", False, base.CREATING),            # no instance resource yet: reads "not found"
    ("CREATING", "PROVISIONING", False, base.CREATING),
    ("CREATING", "", True, base.CREATING),             # the MIG keeps retrying (quota): still creating
    ("CREATING_WITHOUT_RETRIES", "", True, base.FAILED),
    ("CREATING_WITHOUT_RETRIES", "STAGING", False, base.CREATING),
    ("RECREATING", "RUNNING", False, base.CREATING),
    ("NONE", "STAGING", False, base.CREATING),
    ("NONE", "RUNNING", False, base.RUNNING),
    ("VERIFYING", "RUNNING", False, base.RUNNING),
    ("REFRESHING", "RUNNING", False, base.RUNNING),
    ("DELETING", "RUNNING", False, base.DELETING),
    ("DELETING", "STOPPING", False, base.DELETING),
    ("ABANDONING", "RUNNING", False, base.DELETING),
    ("NONE", "TERMINATED", False, base.STOPPED),       # GCE's TERMINATED means stopped
    ("NONE", "SUSPENDED", False, base.STOPPED),
    ("STOPPING", "RUNNING", False, base.STOPPED),
    ("NONE", "REPAIRING", False, base.UNKNOWN),
    ("SOMETHING_NEW", "RUNNING", False, base.RUNNING),
    ("SOMETHING_NEW", "SOMETHING_ELSE", False, base.UNKNOWN),
    (None, None, False, base.CREATING),
])
def test_instance_state(action, status, errors, expected):
    assert gce.instance_state(action, status, errors) == expected


@pytest.mark.parametrize("labels, name, expected", [
    ({"kubenodes-role": "control-plane"}, "x", base.ROLE_CONTROL_PLANE),
    ({"constellation-role": "ControlPlane"}, "x", base.ROLE_CONTROL_PLANE),
    ({"role": "control_plane"}, "x", base.ROLE_CONTROL_PLANE),
    ({"node-role": "worker"}, "control-plane-pool", base.ROLE_WORKER),   # the label wins over the name
    ({}, "cluster-control-plane-abc", base.ROLE_CONTROL_PLANE),
    ({}, "cluster-worker-abc", base.ROLE_WORKER),
    ({"team": "infra"}, "pool-a", None),
    (None, "pool-a", None),
])
def test_role_of(labels, name, expected):
    assert gce.role_of(labels, name) == expected


@pytest.mark.parametrize("text, expected", [
    ("2026-11-30T03:40:01.000-08:00", 1796038801.0),
    ("2026-11-30T11:40:01Z", 1796038801.0),
    ("", None), (None, None), ("yesterday", None),
])
def test_parse_rfc3339(text, expected):
    assert gce.parse_rfc3339(text) == expected


# ---- error classification ------------------------------------------------------------------------------------
gexc = pytest.importorskip("google.api_core.exceptions")


@pytest.mark.parametrize("status, reason, cls, retryable", [
    (429, "rateLimitExceeded", base.ProviderError, True),
    (500, "backendError", base.ProviderError, True),
    (502, None, base.ProviderError, True),
    (503, "backendError", base.ProviderError, True),
    (504, None, base.ProviderError, True),
    (403, "rateLimitExceeded", base.ProviderError, True),       # GCE throttles with 403 too
    (403, "userRateLimitExceeded", base.ProviderError, True),
    (403, "quotaExceeded", base.QuotaError, False),
    (403, "forbidden", base.ProviderError, False),
    (400, "invalid", base.ProviderError, False),
    (409, "alreadyExists", base.ProviderError, False),
    (404, "notFound", base.NotFoundError, False),
])
def test_error_from_api_exception(status, reason, cls, retryable):
    exc = gexc.from_http_status(status, "the API's text", errors=[{"reason": reason}] if reason else [])
    err = gce.error_from_api_exception(exc, "reading group g")
    assert err.__class__ is cls
    assert err.retryable is retryable
    assert err.status == status
    assert "reading group g" in str(err) and "the API's text" in str(err)


def test_error_without_http_answer_is_retryable():
    err = gce.error_from_api_exception(ConnectionError("connection refused"), "listing")
    assert err.retryable and err.status is None


@pytest.mark.parametrize("errors, status, cls, code", [
    ([], 0, None, None),
    ([("QUOTA_EXCEEDED", "Quota 'CPUS' exceeded. Limit: 24.0 in region us-central1.")], 403, base.QuotaError,
     "QUOTA_EXCEEDED"),
    ([("ZONE_RESOURCE_POOL_EXHAUSTED", "The zone does not have enough resources")], 503, base.QuotaError,
     "ZONE_RESOURCE_POOL_EXHAUSTED"),
    ([("RESOURCE_ALREADY_EXISTS", "exists")], 409, base.ProviderError, "RESOURCE_ALREADY_EXISTS"),
    ([("RESOURCE_NOT_FOUND", "gone")], 404, base.NotFoundError, "RESOURCE_NOT_FOUND"),
    ([], 500, base.ProviderError, None),
])
def test_error_from_operation(errors, status, cls, code):
    err = gce.error_from_operation(errors, status, "MSG", "creating instance x")
    if cls is None:
        assert err is None
        return
    assert err.__class__ is cls and err.code == code and not err.retryable
    assert str(err).startswith("creating instance x failed: ")
    for item_code, message in errors:
        assert item_code in str(err) and message in str(err)


# ---- options -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("options, message", [
    ({"auth_kind": "application", "access_token": "t"}, "only used with auth_kind=accesstoken"),
    ({"auth_kind": "accesstoken"}, "needs gcp.access_token"),
    ({"auth_kind": "serviceaccount"}, "needs gcp.service_account_file or gcp.service_account_contents"),
    ({"auth_kind": "serviceaccount", "service_account_file": "/k.json", "service_account_contents": "{}"},
     "not both"),
    ({"auth_kind": "anonymous", "service_account_file": "/k.json"}, "only used with auth_kind=serviceaccount"),
    ({"service_account_email": "sa@p.iam.gserviceaccount.com"}, "only used with auth_kind=machineaccount"),
    ({"auth_kind": "anonymous", "operation_timeout": 0}, "operation_timeout must be a positive"),
])
def test_inconsistent_auth_options_are_refused(options, message):
    with pytest.raises(base.ProviderError, match=re.escape(message)):
        gce.check_auth_options(options)


@pytest.mark.parametrize("options, kind", [
    ({}, "application"),
    ({"auth_kind": "anonymous"}, "anonymous"),
    ({"auth_kind": "accesstoken", "access_token": "ya29.x"}, "accesstoken"),
    ({"auth_kind": "serviceaccount", "service_account_file": "/k.json"}, "serviceaccount"),
    ({"auth_kind": "machineaccount", "service_account_email": "sa@p.iam.gserviceaccount.com"}, "machineaccount"),
])
def test_consistent_auth_options(options, kind):
    assert gce.check_auth_options(options) == kind


def test_service_account_contents_load_errors_name_the_option():
    with pytest.raises(base.ProviderError, match="service_account_contents"):
        gce.GceProvider({"auth_kind": "serviceaccount", "service_account_contents": "{not json"})


def test_secrets_are_no_log_and_env_fallbacks_mirror_google_cloud():
    spec = gce.ARG_SPEC
    assert spec["access_token"]["no_log"] is True
    assert spec["service_account_contents"]["no_log"] is True
    expected_env = {"auth_kind": "GCP_AUTH_KIND", "project": "GCP_PROJECT",
                    "service_account_file": "GCP_SERVICE_ACCOUNT_FILE",
                    "service_account_contents": "GCP_SERVICE_ACCOUNT_CONTENTS",
                    "service_account_email": "GCP_SERVICE_ACCOUNT_EMAIL", "access_token": "GCP_ACCESS_TOKEN",
                    "scopes": "GCP_SCOPES"}
    for option, env in expected_env.items():
        assert spec[option]["fallback"][1] == [env], option
    assert set(spec["auth_kind"]["choices"]) >= {"application", "machineaccount", "serviceaccount", "accesstoken"}


def test_fragment_documents_the_spec_exactly():
    doc = yaml.safe_load(gcp_fragment.ModuleDocFragment.DOCUMENTATION)["options"]["gcp"]
    assert doc["type"] == "dict"
    suboptions = doc["suboptions"]
    assert set(suboptions) == set(gce.ARG_SPEC)
    for name, spec in gce.ARG_SPEC.items():
        documented = suboptions[name]
        assert documented["type"] == spec["type"], name
        assert documented.get("default") == spec.get("default"), name
        assert sorted(documented.get("choices") or []) == sorted(spec.get("choices") or []), name
        assert documented.get("elements") == spec.get("elements"), name
        for var in (spec.get("fallback") or (None, []))[1]:
            assert "E(%s)" % var in " ".join(documented["description"]), name


def test_from_params_without_sdk_names_the_package(monkeypatch):
    monkeypatch.setattr(gce, "HAS_GCE_SDK", False)
    monkeypatch.setattr(gce, "compute_v1", None)
    monkeypatch.setattr(gce, "GCE_IMPORT_ERROR", ImportError("No module named 'google.cloud.compute_v1'"))
    with pytest.raises(base.ProviderError, match="google-cloud-compute"):
        gce.from_params({"auth_kind": "anonymous"})


def test_from_params_builds_a_provider_with_project_and_timeout():
    provider = gce.from_params({"auth_kind": "anonymous", "project": "p-123456", "endpoint": "http://127.0.0.1:9",
                                "operation_timeout": 30})
    assert isinstance(provider, base.CloudProvider)
    assert provider.project == "p-123456" and provider.operation_timeout == 30
    assert provider.group_id_of("gce://p-123456/us-central1-a/x") is None
    assert provider.normalize_provider_id(" gce://P-123456/us-central1-a/x/ ") == "gce://p-123456/us-central1-a/x"


def test_ca_bundle_survives_requests_env_override(monkeypatch, tmp_path):
    """requests lets REQUESTS_CA_BUNDLE override a session's verify; the provider's session must not read it."""
    bundle = tmp_path / "ca.pem"
    bundle.write_text("not used for a connection here")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    provider = gce.from_params({"auth_kind": "anonymous", "project": "p-123456",
                                "endpoint": "https://127.0.0.1:9", "ca_bundle": str(bundle)})
    session = provider._client("InstancesClient")._transport._session
    settings = session.merge_environment_settings("https://127.0.0.1:9/x", {}, None, None, None)
    assert session.verify == str(bundle) and session.trust_env is False
    assert settings["verify"] == str(bundle)


# ---- properties ----------------------------------------------------------------------------------------------------
hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies
NAMES = st.from_regex(r"\A[a-z]([-a-z0-9]{0,20}[a-z0-9])?\Z")
PROJECTS = st.from_regex(r"\A[a-z][-a-z0-9]{4,20}[a-z0-9]\Z") | st.from_regex(r"\A[1-9][0-9]{5,12}\Z")
REGIONS = st.from_regex(r"\A[a-z]{2,12}-[a-z]{2,12}[0-9]{1,2}\Z")


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(PROJECTS, REGIONS, st.sampled_from("abcf"), NAMES)
def test_references_round_trip(project, region, letter, name):
    zone = "%s-%s" % (region, letter)
    assert gce.parse_provider_id(gce.provider_id_of(project, zone, name)) == (project, zone, name)
    for kind, scope in (("zones", zone), ("regions", region)):
        group_id = "projects/%s/%s/%s/instanceGroupManagers/%s" % (project, kind, scope, name)
        assert gce.parse_group_id(group_id).id == group_id
        assert gce.parse_group_id(gce.API_PREFIX + group_id).id == group_id
    image = gce.canonical_image(project, name)
    assert gce.parse_image(gce.API_PREFIX + image) == (project, name, False)


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(st.from_regex(r"\A[a-z]([-a-z0-9]{0,61}[a-z0-9])?\Z"))
def test_next_template_name_is_always_a_new_valid_name(name):
    following = gce.next_template_name(name)
    assert following != name
    assert re.match(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$", following)


def test_an_image_url_on_a_foreign_host_is_refused_naming_the_host():
    """Issue 28 item 7: the host of an image URL was dropped without a word."""
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers.gce import image_host_problem

    path = "projects/p-123456/global/images/node-v2"
    for ok in (path, "https://www.googleapis.com/compute/v1/" + path, "https://compute.googleapis.com/compute/beta/" + path):
        assert image_host_problem(ok) is None, ok
    assert image_host_problem("http://127.0.0.1:8089/compute/v1/" + path, "http://127.0.0.1:8089") is None
    problem = image_host_problem("https://images.example.com/compute/v1/" + path)
    assert problem.startswith("the image URL 'https://images.example.com/compute/v1/%s' is on host images.example.com, "
                              "which is not the Compute Engine API (www.googleapis.com or compute.googleapis.com): the "
                              "image would be read from GCE as %s instead" % (path, path)), problem
    assert "or set gcp.endpoint to that host's API" in problem
    foreign = image_host_problem("https://images.example.com/compute/v1/" + path, "http://127.0.0.1:1")
    assert "nor gcp.endpoint http://127.0.0.1:1" in foreign


def test_a_late_refusal_is_the_quota_errors_of_an_instance_still_being_created():
    errors = [("QUOTA_EXCEEDED", "Quota 'CPUS' exceeded.  Limit: 24.0 in region us-central1."),
              ("CONDITION_NOT_MET", "something else")]
    assert gce.late_refusal(errors, base.CREATING) == "QUOTA_EXCEEDED: Quota 'CPUS' exceeded.  Limit: 24.0 in region " \
                                                      "us-central1."
    assert gce.late_refusal(errors, base.FAILED).startswith("QUOTA_EXCEEDED")
    assert gce.late_refusal([("ZONE_RESOURCE_POOL_EXHAUSTED", "no room")], base.CREATING) == \
        "ZONE_RESOURCE_POOL_EXHAUSTED: no room"
    # Errors of an earlier attempt on a VM that runs now, or errors that are not quota or capacity: no refusal.
    assert gce.late_refusal(errors, base.RUNNING) is None
    assert gce.late_refusal([("CONDITION_NOT_MET", "x")], base.CREATING) is None


def test_a_template_is_kept_across_slices_while_the_groups_read_name_it_and_read_again_once_none_did():
    """Issue 22: templates are immutable and GCE refuses to delete one a managed instance group uses, so a template that
    every read of the groups finds named is kept (no re-read every 30 s); one a read finds unnamed may be deleted and
    made again under its name, so it is read again when a group names it next. `fresh` always reads."""
    provider = gce.from_params({"auth_kind": "anonymous", "project": "p-123456", "endpoint": "https://127.0.0.1:9"})
    reads = []

    def call(doing, func, **kwargs):
        reads.append(kwargs["instance_template"])
        return "template %s #%d" % (kwargs["instance_template"], len(reads))
    provider._call = call
    url = "https://www.googleapis.com/compute/v1/projects/p-123456/global/instanceTemplates/%s"
    first = provider._get_template(url % "a")
    provider._keep_named({url % "a": first, url % "b": provider._get_template(url % "b")})
    for _slice in range(3):
        with provider.reading():
            assert provider._get_template(url % "a") == first
    assert reads == ["a", "b"]
    provider._keep_named({url % "b": None})          # a read of the groups where none names "a" any more
    assert provider._get_template(url % "a") == "template a #3" and reads == ["a", "b", "a"]
    assert provider._get_template(url % "b") == "template b #2"
    assert provider._get_template(url % "b", fresh=True) == "template b #4"


# ---- the reads before the first create, at once (issue 22) ------------------------------------------------
_URL = "https://www.googleapis.com/compute/v1/projects/p-123456/"


def _fake_igm(name, template, zone="us-central1-a"):
    return types.SimpleNamespace(
        name=name, self_link=_URL + "zones/%s/instanceGroupManagers/%s" % (zone, name),
        instance_template=_URL + "global/instanceTemplates/" + template, versions=[], target_size=2,
        update_policy=None, status=None, distribution_policy=None)


def _fake_template(name, image="projects/p-123456/global/images/old", machine_type="e2-standard-2"):
    disk = types.SimpleNamespace(boot=True, initialize_params=types.SimpleNamespace(source_image=image))
    return types.SimpleNamespace(name=name, properties=types.SimpleNamespace(
        disks=[disk], labels={}, machine_type=machine_type))


class _Calls:
    """A stand-in for GceProvider._call: answers by the argument that names what is read, counts the calls and the most
    in flight at once; `fail` maps a name to the ProviderError its read raises."""

    def __init__(self, answers, fail=None):
        self.answers, self.fail = answers, fail or {}
        self.made, self.in_flight, self.most = [], 0, 0
        self.lock = threading.Lock()

    def __call__(self, doing, func, **kwargs):
        name = kwargs.get("instance_template") or kwargs.get("instance_group_manager") or kwargs.get("machine_type") \
            or kwargs.get("image") or kwargs.get("region")
        with self.lock:
            self.made.append(name)
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            time.sleep(0.02)
            if name in self.fail:
                raise self.fail[name]
            return self.answers[name]
        finally:
            with self.lock:
                self.in_flight -= 1


def _provider_with(calls, igms=()):
    provider = gce.from_params({"auth_kind": "anonymous", "project": "p-123456", "endpoint": "https://127.0.0.1:9"})
    provider._call = calls
    provider._client = lambda kind: types.SimpleNamespace(get=None, aggregated_list=None)
    provider._list = lambda doing, func, **kwargs: [("zones/us-central1-a", types.SimpleNamespace(
        instance_group_managers=list(igms)))]
    return provider


def test_a_listing_reads_its_groups_templates_at_once_and_each_failure_stays_with_its_group():
    """The templates of a listing go READS_AT_ONCE at a time, each once (two groups share one); a template that cannot
    be read skips its group in the listing's order, as when they were read one after another, and a retryable
    failure still fails the listing."""
    igms = [_fake_igm("w%d" % i, "t%d" % (i // 2)) for i in range(10)]
    templates = {"t%d" % i: _fake_template("t%d" % i) for i in range(5)}
    calls = _Calls(templates, fail={"t3": base.NotFoundError("template t3 is gone", status=404)})
    provider = _provider_with(calls, igms)
    with provider.reading():
        groups = provider.list_groups()
    assert sorted(calls.made) == ["t0", "t1", "t2", "t3", "t4"]
    assert 1 < calls.most <= gce.READS_AT_ONCE
    assert [g.name for g in groups] == ["w0", "w1", "w2", "w3", "w4", "w5", "w8", "w9"]
    assert [skipped[0].rsplit("/", 1)[-1] for skipped in provider.skipped_groups] == ["w6", "w7"]
    assert "template t3 is gone" in provider.skipped_groups[0][1]
    # Kept templates are not read again; a retryable failure of a new one fails the listing.
    igms.append(_fake_igm("w10", "t9"))
    calls.fail = {"t9": base.ProviderError("backend error", retryable=True)}
    with pytest.raises(base.ProviderError, match="backend error"):
        provider.list_groups()
    assert calls.made[5:] == ["t3", "t9"]


def test_groups_pointed_at_an_image_at_once_check_it_once_within_a_slice():
    """set_group_image from several threads (the executor's groups at once) checks the image once within reading(),
    and every group gets the first check's answer, a refusal included; outside reading() each call checks it."""
    provider = gce.from_params({"auth_kind": "anonymous", "project": "p-123456", "endpoint": "https://127.0.0.1:9"})
    checks = []

    def validate(image):
        checks.append(image)
        time.sleep(0.05)
        if image.endswith("gone"):
            raise base.NotFoundError("image %s does not exist" % image)
        return "projects/p/global/images/" + image.rsplit("/", 1)[-1]
    provider.validate_image = validate
    with provider.reading():
        with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
            answers = list(pool.map(provider._checked_image, ["new"] * 6))
            refusals = [pool.submit(provider._checked_image, "gone") for dummy in range(4)]
        assert answers == ["projects/p/global/images/new"] * 6
        for refusal in refusals:
            with pytest.raises(base.NotFoundError, match="gone does not exist"):
                refusal.result()
    assert checks == ["new", "gone"]
    provider._checked_image("new")
    provider._checked_image("new")
    assert checks == ["new", "gone", "new", "new"]


def test_the_quota_read_shares_a_machine_type_read_and_a_failed_read_is_no_machine_type():
    """instance_headroom: one machineTypes.get per machine type and zone, the groups' reads at once; a group whose
    manager or machine type cannot be read has no machine type (advice, never fatal), as before."""
    igms = {"w%d" % i: _fake_igm("w%d" % i, "t%d" % i) for i in range(6)}
    answers = dict(igms)
    answers.update({"t%d" % i: _fake_template("t%d" % i, machine_type="e2-standard-2" if i < 4 else "n2-standard-8")
                    for i in range(6)})
    answers["e2-standard-2"] = types.SimpleNamespace(guest_cpus=2)
    answers["us-central1"] = types.SimpleNamespace(quotas=[], zones=[_URL + "zones/us-central1-a"])
    calls = _Calls(answers, fail={"w1": base.ProviderError("forbidden"),
                                  "n2-standard-8": base.ProviderError("no such machine type")})
    provider = _provider_with(calls)
    refs = [gce.parse_group_id(igm.self_link) for igm in igms.values()]
    assert provider._machine_types_of(refs, []) == [
        ("e2-standard-2", 2), ("", None), ("e2-standard-2", 2), ("e2-standard-2", 2), ("", None), ("", None)]
    assert calls.made.count("e2-standard-2") == 1 and calls.made.count("n2-standard-8") == 1
    assert 1 < calls.most <= gce.READS_AT_ONCE


def test_a_template_clone_is_inserted_first_and_a_taken_name_read_only_then():
    """The clone's name is usually free: its insert goes first (no read of the free name); a name taken (409) by a clone
    of the same image that an interrupted run left is reused, one with another image passes to the next name."""
    provider = gce.from_params({"auth_kind": "anonymous", "project": "p-123456", "endpoint": "https://127.0.0.1:9"})
    new = "projects/p-123456/global/images/new"
    template = gce.compute_v1.InstanceTemplate(name="w-tmpl", properties=gce.compute_v1.InstanceProperties(disks=[
        gce.compute_v1.AttachedDisk(boot=True, initialize_params=gce.compute_v1.AttachedDiskInitializeParams(
            source_image="projects/p-123456/global/images/old"))]))
    taken = {}
    made = []

    def call(doing, func, **kwargs):
        request = kwargs.get("request")
        if request is not None:
            name = request.instance_template_resource.name
            made.append(("insert", name))
            if name in taken:
                raise base.ProviderError("already exists", status=409)
            return "operation for %s" % name
        made.append(("get", kwargs["instance_template"]))
        return taken[kwargs["instance_template"]]
    provider._call = call
    provider._client = lambda kind: types.SimpleNamespace(insert_unary=None, get=None)
    provider._wait = lambda op, doing, project, *more: made.append(("wait", op))
    assert provider._insert_template_clone("p-123456", template, new).endswith("/instanceTemplates/w-tmpl-1")
    assert made == [("insert", "w-tmpl-1"), ("wait", "operation for w-tmpl-1")]
    del made[:]
    taken["w-tmpl-1"] = _fake_template("w-tmpl-1", image="projects/p-123456/global/images/other")
    taken["w-tmpl-2"] = _fake_template("w-tmpl-2", image=new)
    assert provider._insert_template_clone("p-123456", template, new).endswith("/instanceTemplates/w-tmpl-2")
    assert made == [("insert", "w-tmpl-1"), ("get", "w-tmpl-1"), ("insert", "w-tmpl-2"), ("get", "w-tmpl-2")]
