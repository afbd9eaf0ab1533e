"""GCE credentials and transport for real: the emulator can insist on credentials and then accepts only
tokens it handed out (or an admin added) and JWTs signed with a service account key it issued (google-cloud-
compute sends service-account keys as self-signed JWTs, as the real API allows), and it can serve HTTPS
with a sandbox CA. So auth_kind=serviceaccount (file and contents), accesstoken and anonymous, and the
endpoint/ca_bundle options, are exercised through google-auth and google-cloud-compute as in production."""

import json

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base, gce
from sandbox.clouds.gce import DEFAULT_PROJECT, GceEmulator

pytestmark = [pytest.mark.timeout(120)]
EMAIL = "upgrader@%s.iam.gserviceaccount.com" % DEFAULT_PROJECT


@pytest.fixture(scope="module")
def emulator():
    emu = GceEmulator().start()
    try:
        admin = emu.admin()
        admin.create_group("auth-workers", "worker", 0, admin.create_image("auth-image"))
        yield emu
    finally:
        emu.stop()


@pytest.fixture
def admin(emulator):
    adm = emulator.admin()
    adm.set_faults(require_auth=True)
    yield adm
    adm.set_faults()


def _options(admin, **auth):
    return dict(project=DEFAULT_PROJECT, endpoint=admin.endpoint, **auth)


def _group_ids(provider):
    return [g.id for g in provider.list_groups()]


def test_service_account_key_contents_are_exchanged_for_a_token(admin):
    key = admin.create_service_account(EMAIL)
    provider = gce.from_params(_options(admin, auth_kind="serviceaccount", service_account_contents=json.dumps(key)))
    assert "projects/%s/zones/us-central1-a/instanceGroupManagers/auth-workers" % DEFAULT_PROJECT in _group_ids(provider)
    grant = admin.token_grants()[-1]       # the signature was checked against the issued key
    assert grant["iss"] == EMAIL and grant["kind"] == "self-signed"
    assert grant["scope"] == "https://www.googleapis.com/auth/compute"     # the default scope


def test_service_account_key_file_and_custom_scopes(admin, tmp_path):
    key = admin.create_service_account("file-" + EMAIL)
    path = tmp_path / "key.json"
    path.write_text(json.dumps(key))
    scopes = ["https://www.googleapis.com/auth/cloud-platform"]
    provider = gce.from_params(_options(admin, auth_kind="serviceaccount", service_account_file=str(path),
                                        scopes=scopes))
    assert _group_ids(provider)
    assert admin.token_grants()[-1]["scope"] == scopes[0]
    # The project comes from the key when not given.
    keyed = gce.from_params(dict(endpoint=admin.endpoint, auth_kind="serviceaccount", service_account_file=str(path)))
    assert keyed.project == DEFAULT_PROJECT


def test_a_key_the_cloud_does_not_know_fails_without_retries(admin):
    key = admin.create_service_account("known-" + EMAIL)
    forged = dict(key, client_email="forged-" + EMAIL)
    provider = gce.GceProvider(_options(admin, auth_kind="serviceaccount", service_account_contents=json.dumps(forged)),
                               retry_base_delay=0.01)
    before = len(admin.requests())
    with pytest.raises(base.ProviderError) as err:
        provider.list_groups()
    assert err.value.status == 401 and not err.value.retryable and "authentication credentials" in str(err.value)
    # google-auth itself re-signs and resends after a 401 (twice at most); our backoff adds nothing.
    assert len(admin.requests()) - before == 3


def test_access_token_is_sent_as_bearer_and_a_wrong_one_is_not_retried(admin):
    admin.add_access_token("ya29.good-token")
    good = gce.from_params(_options(admin, auth_kind="accesstoken", access_token="ya29.good-token"))
    assert _group_ids(good)
    bad = gce.GceProvider(_options(admin, auth_kind="accesstoken", access_token="ya29.wrong"), retry_base_delay=0.01)
    before = len(admin.requests())
    with pytest.raises(base.ProviderError) as err:
        bad.list_groups()
    assert err.value.status == 401 and err.value.code == "AUTH_FAILED" and not err.value.retryable
    assert "refused gcp.access_token" in str(err.value)
    assert len(admin.requests()) - before == 1


def test_anonymous_is_refused_by_a_cloud_that_wants_credentials(admin):
    provider = gce.GceProvider(_options(admin, auth_kind="anonymous"), retry_base_delay=0.01)
    with pytest.raises(base.ProviderError) as err:
        provider.list_groups()
    assert err.value.status == 401 and err.value.code == "AUTH_FAILED" and "sends none" in str(err.value)


def test_https_endpoint_with_ca_bundle_even_when_requests_ca_bundle_is_set(tmp_path, monkeypatch):
    # This machine (and CI) exports REQUESTS_CA_BUNDLE, which would override a session's own CA.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    with GceEmulator(tls_dir=tmp_path / "tls") as emu:
        admin = emu.admin()
        assert admin.endpoint.startswith("https://127.0.0.1:")
        image = admin.create_image("tls-image")
        group = admin.create_group("tls-workers", "worker", 0, image)
        options = admin.provider_options()["gcp"]
        assert options["ca_bundle"] == emu.ca_cert
        provider = gce.from_params(options)
        assert provider.group_image(group) == image
        assert provider.create_instance(group).image == image      # operations awaited over HTTPS too

        untrusting = gce.GceProvider(dict(options, ca_bundle=None), retry_base_delay=0.01)
        before = len(admin.requests())
        with pytest.raises(base.ProviderError) as err:
            untrusting.group_image(group)
        assert err.value.code == "TLS_VERIFY_FAILED" and not err.value.retryable
        assert "gcp.ca_bundle" in str(err.value)
        assert len(admin.requests()) == before


def test_env_type_goes_into_the_user_agent(emulator, admin):
    """AWX's GCE credential sets GCP_ENV_TYPE=tower; as in google.cloud it only marks the User-Agent."""
    emulator.state.user_agents.clear()
    key = admin.create_service_account("agent-" + EMAIL)
    provider = gce.from_params(_options(admin, auth_kind="serviceaccount", service_account_contents=json.dumps(key),
                                        env_type="tower"))
    assert "projects/%s/zones/" % DEFAULT_PROJECT in " ".join(_group_ids(provider))
    agents = [agent for agent in emulator.state.user_agents if agent]
    assert agents and all("kubenodes.image_upgrade env/tower" in agent for agent in agents), agents
    assert gce.user_agent({}) == "kubenodes.image_upgrade" and gce.user_agent({"env_type": " "}) == "kubenodes.image_upgrade"
