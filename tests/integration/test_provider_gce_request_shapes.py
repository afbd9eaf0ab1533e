"""Keep the GCE emulator honest: the requests google-cloud-compute sends for everything the provider does
are recorded in tests/fixtures/gce_request_shapes.json (method, path template, query keys, body keys).

- The SDK must still send exactly those shapes (a new SDK version that changes them fails here; re-record
  with KUBENODES_RECORD_SHAPES=1 after checking the new shapes against the real API).
- The recorded shapes must agree with what was observed against the real SDK/API (the table in
  ../shared/design/cloud-and-etcd-notes.md section 1.2), e.g. listManagedInstances is a POST without body
  and operations are awaited with POST .../wait, never polled on compute.googleapis.com.
- The emulator accepts those shapes and refuses anything else (unknown paths, methods, query parameters,
  body fields) with Google's JSON error format, so it cannot drift into accepting what the real API rejects.
"""

import json
import os
import pathlib
import time
import urllib.error
import urllib.request
import uuid

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import gce
from sandbox.clouds import gce as emulator_module
from sandbox.clouds.gce import DEFAULT_PROJECT, GceEmulator

pytestmark = pytest.mark.timeout(120)
FIXTURE = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "gce_request_shapes.json"
PROJECT = DEFAULT_PROJECT


def _shape(entry):
    return {"method": entry["method"], "path": entry["template"], "query": sorted(entry["query"]),
            "body": sorted(entry["body"]) if entry["body"] is not None else None}


def _key(shape):
    return (shape["method"], shape["path"], tuple(shape["query"]), tuple(shape["body"] or ()) if shape["body"]
            is not None else None)


def _exercise_every_call(admin, provider):
    """Every SDK call the provider makes, on a zonal and a regional group."""
    old = admin.create_image("shape-old")
    admin.create_image("shape-new", family="shape-family")
    zonal = admin.create_group("shape-zonal", "worker", 1, old)
    regional = admin.create_group("shape-regional", "control-plane", 1, old, region="us-central1")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        groups = admin.state()["groups"]
        if all(m["currentAction"] == "NONE" for g in (zonal, regional) for m in groups[g]["managed"].values()):
            break
        time.sleep(0.1)
    admin.clear_requests()
    provider.list_groups()
    provider.list_groups([zonal, regional])
    for group in (zonal, regional):
        provider.list_instances(group)
        provider.group_image(group)
        provider.instance_headroom([group])      # regions.get and machineTypes.get
        created = provider.create_instance(group)
        provider.set_group_image(group, "projects/%s/global/images/family/shape-family" % PROJECT)
        provider.validate_image("projects/%s/global/images/shape-new" % PROJECT)
        provider.delete_instance(created.provider_id, group_id=group)
        existing = [i for i in provider.list_instances(group) if i.state == "running"][0]
        gce.GceProvider(admin.provider_options()["gcp"]).delete_instance(existing.provider_id)  # reads created-by
    # The cloud setting a run neutralises (cloud_settings.py): proactive redistribution, regional groups only.
    provider.set_run_setting(regional, "updatePolicy.instanceRedistributionType", "NONE")
    provider.restore_problem(regional, "updatePolicy.instanceRedistributionType", "PROACTIVE")
    provider.set_run_setting(regional, "updatePolicy.instanceRedistributionType", "PROACTIVE")
    # An autoscaler on a group, zonal and regional: read with the group, its mode patched.
    admin.set_faults(autoscaling=False)   # the requests' shapes, not what the autoscalers do
    for group in (zonal, regional):
        admin.create_autoscaler(group, recommended=1)
        provider.list_groups([group])
        provider.set_run_setting(group, "autoscalingPolicy.mode", "OFF")
        provider.set_run_setting(group, "autoscalingPolicy.mode", "ON")
    return [_shape(r) for r in admin.requests()]


@pytest.fixture(scope="module")
def recorded():
    with GceEmulator() as emu:
        admin = emu.admin()
        provider = gce.GceProvider(admin.provider_options()["gcp"], retry_base_delay=0.02)
        shapes = _exercise_every_call(admin, provider)
    unique = {}
    for shape in shapes:
        unique.setdefault(_key(shape), shape)
    return sorted(unique.values(), key=lambda s: (s["path"], s["method"], s["query"]))


def test_the_sdk_sends_exactly_the_recorded_shapes(recorded):
    if os.environ.get("KUBENODES_RECORD_SHAPES") == "1":
        from google.cloud import compute_v1
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(json.dumps({"recorded_with": "google-cloud-compute %s" % compute_v1.__version__,
                                       "shapes": recorded}, indent=1) + "\n")
    fixture = json.loads(FIXTURE.read_text())["shapes"]
    assert all(r["path"] for r in recorded), "a request matched no emulator route: %r" % recorded
    assert {_key(s) for s in recorded} == {_key(s) for s in fixture}


def _find(shapes, method, path):
    found = [s for s in shapes if s["method"] == method and s["path"] == path]
    assert found, "no %s %s in the recorded shapes" % (method, path)
    return found


@pytest.mark.parametrize("scope", ["zones/{zone}", "regions/{region}"])
def test_recorded_shapes_agree_with_the_real_api(scope):
    """Facts observed against the real SDK (cloud-and-etcd-notes.md 1.2 and 1.3)."""
    shapes = json.loads(FIXTURE.read_text())["shapes"]
    mig = "projects/{p}/%s/instanceGroupManagers/{m}" % scope
    for shape in _find(shapes, "POST", mig + "/listManagedInstances"):
        assert shape["body"] is None                                   # POST, not GET, and no body
    for shape in _find(shapes, "POST", mig + "/createInstances"):
        assert shape["body"] == ["instances"] and shape["query"] == ["requestId"]
    for shape in _find(shapes, "POST", mig + "/deleteInstances"):
        assert shape["body"] == ["instances", "skipInstancesOnValidationError"]
    for shape in _find(shapes, "POST", mig + "/setInstanceTemplate"):
        assert shape["body"] == ["instanceTemplate"]
    for shape in _find(shapes, "GET", mig):
        assert shape["body"] is None and shape["query"] == []
    _find(shapes, "POST", "projects/{p}/%s/operations/{name}/wait" % scope)
    assert not [s for s in shapes if s["method"] == "GET" and s["path"].endswith("/operations/{name}")]
    _find(shapes, "GET", "projects/{p}/aggregated/instanceGroupManagers")
    _find(shapes, "POST", "projects/{p}/global/instanceTemplates")
    _find(shapes, "POST", "projects/{p}/global/operations/{name}/wait")
    _find(shapes, "GET", "projects/{p}/global/images/family/{family}")
    _find(shapes, "GET", "projects/{p}/zones/{zone}/instances/{name}")     # created-by metadata
    for shape in _find(shapes, "GET", "projects/{p}/zones/{zone}/instances"):
        assert shape["query"] == ["filter"]


def test_the_emulator_routes_accept_every_recorded_shape():
    shapes = json.loads(FIXTURE.read_text())["shapes"]
    routes = {(method, template): (query, body) for method, template, dummy, query, body, dummy2 in emulator_module.ROUTES}
    for shape in shapes:
        assert (shape["method"], shape["path"]) in routes, shape
        query, body = routes[(shape["method"], shape["path"])]
        assert set(shape["query"]) <= query | emulator_module.SYSTEM_QUERY, shape
        if shape["body"] is not None:
            assert body is not None and set(shape["body"]) <= body, shape


@pytest.fixture(scope="module")
def raw():
    with GceEmulator() as emu:
        admin = emu.admin()
        image = admin.create_image("raw-image")
        admin.create_group("raw-group", "worker", 0, image)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

        def call(method, path, body=None):
            data = json.dumps(body).encode() if body is not None else None
            req = urllib.request.Request(emu.endpoint + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
            try:
                with opener.open(req, timeout=10) as resp:
                    return resp.status, json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())
        yield call


MIG = "/compute/v1/projects/%s/zones/us-central1-a/instanceGroupManagers/raw-group" % PROJECT


@pytest.mark.parametrize("method, path, body, code, text", [
    ("GET", "/compute/v1/projects/%s/zones/us-central1-a/widgets/x" % PROJECT, None, 404, "was not found"),
    ("GET", "/compute/beta/projects/%s/zones/us-central1-a/instances/x" % PROJECT, None, 404, "was not found"),
    ("GET", "/", None, 404, "was not found"),
    ("GET", MIG + "/listManagedInstances", None, 405, "not allowed"),        # it is a POST
    ("DELETE", MIG, None, 405, "not allowed"),
    ("GET", MIG + "?bogus=1", None, 400, 'Unknown name "bogus"'),
    ("POST", MIG + "/createInstances", {"instances": [{"name": "raw-1"}], "extra": 1}, 400, 'Unknown name "extra"'),
    ("POST", MIG + "/createInstances", {"instances": [{"name": "raw-1", "zone": "x"}]}, 400, 'Unknown name "zone"'),
    ("POST", MIG + "/createInstances", {"instances": [{"name": "Bad_Name"}]}, 400, "Invalid value"),
    ("POST", MIG + "/createInstances", {"instances": []}, 400, "At least one instance"),
    ("POST", MIG + "/deleteInstances", {"instances": ["zones/us-central1-a/instances/nope"]}, 400,
     "not a member of the group"),
    ("POST", MIG + "/listManagedInstances", {"unexpected": True}, 400, 'Unknown name "unexpected"'),
    ("POST", MIG + "/resize?size=-1", None, 400, "greater than or equal to 0"),
    ("POST", MIG + "/setInstanceTemplate", {"instanceTemplate": "projects/%s/global/instanceTemplates/none" % PROJECT},
     404, "does not exist"),
    ("GET", "/compute/v1/projects/%s/zones/us-central1/instances/x" % PROJECT, None, 400, "Unknown zone"),
    ("POST", "/compute/v1/projects/%s/global/instanceTemplates" % PROJECT,
     {"name": "t-x", "properties": {"disks": [{"boot": True, "initializeParams": {"sourceImage": "projects/%s/global/"
                                                                                  "images/raw-image" % PROJECT}}],
                                    "colour": "blue"}}, 400, 'Unknown name "colour"'),
])
def test_the_emulator_refuses_what_the_api_would_refuse(raw, method, path, body, code, text):
    status, payload = raw(method, path, body)
    assert status == code
    error = payload["error"]
    assert error["code"] == code and text in error["message"]
    assert error["errors"][0]["domain"] == "global" and error["errors"][0]["reason"] and error["status"]


def test_the_emulator_answers_a_repeated_request_id_with_the_first_operation(raw):
    request_id = str(uuid.uuid4())
    body = {"instances": [{"name": "raw-once"}]}
    first = raw("POST", MIG + "/createInstances?requestId=" + request_id, body)
    second = raw("POST", MIG + "/createInstances?requestId=" + request_id, body)
    assert first[0] == second[0] == 200
    assert first[1]["name"] == second[1]["name"] and "error" not in second[1]
    status, managed = raw("POST", MIG + "/listManagedInstances")
    assert [m["name"] for m in managed["managedInstances"]] == ["raw-once"]
