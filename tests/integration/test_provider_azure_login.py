"""The Azure provider's own login (azure-identity and MSAL, no static token) against the emulator's Entra ID
token endpoint, over HTTPS with the emulator's CA: a service principal's secret and a user's password reach
Resource Manager only when the token endpoint accepts them; a wrong one fails once, naming the credential's
options and never the secret. The user's login, deprecated by azure-identity, still works, with a warning."""

import warnings

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import azure as az
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers.base import ProviderError
from sandbox.clouds import azure as emu

pytestmark = pytest.mark.timeout(120)

DEFAULTS = {name: spec.get("default") for name, spec in az.ARG_SPEC.items()}
TENANT = "5c1e7a0d-0000-4000-8000-0000000a11ce"
CLIENT_ID = "3f0c2b1e-0000-4000-8000-000000000515"
SECRET = "sp-secret-ZQ8~right"
USER, PASSWORD = "upgrader@example.org", "user-password-7Hq!"


@pytest.fixture(scope="module")
def admin(tmp_path_factory):
    server = emu.AzureEmulator(str(tmp_path_factory.mktemp("azure-login"))).start()
    admin = emu.Admin(server.info())
    admin.create_service_principal(TENANT, CLIENT_ID, SECRET)
    admin.create_user(USER, PASSWORD, TENANT)
    admin.set_faults(require_auth=True)
    admin.group = admin.create_group("login-workers", "worker", 1, admin.create_image("login-a"))
    yield admin
    server.stop()


def provider(admin, **credential):
    # retries 3: a refused login must still be tried only once.
    return az.from_params(dict(DEFAULTS, **dict(admin.login_options(), retries=3, **credential)))


def logins(admin, since):
    return admin.token_grants()[since:]


def test_arm_refuses_a_token_the_token_endpoint_did_not_issue(admin):
    static = az.from_params(dict(DEFAULTS, **admin.provider_options()["azure"]))
    with pytest.raises(ProviderError, match="InvalidAuthenticationToken") as failure:
        static.list_groups([admin.group])
    # Resource Manager refused the token, not the login authority (issue 28 item 7): named as such.
    message = str(failure.value)
    assert "Azure Resource Manager at %s refused the token" % admin.endpoint.split("://", 1)[1].rstrip("/") in message, message
    assert failure.value.code == "TOKEN_REFUSED" and "the Azure login refused" not in message, message


def test_a_service_principal_logs_in_with_its_secret(admin):
    since = len(admin.token_grants())
    [group] = provider(admin, client_id=CLIENT_ID, secret=SECRET, tenant=TENANT).list_groups([admin.group])
    assert group.id.lower() == admin.group.lower()
    [login] = logins(admin, since)
    assert (login["grant_type"], login["client_id"], login["tenant"]) == ("client_credentials", CLIENT_ID, TENANT)
    assert login["scope"] == "https://management.azure.com/.default" and "refused" not in login


def test_a_wrong_secret_fails_once_naming_the_credential_not_the_secret(admin):
    since = len(admin.token_grants())
    with pytest.raises(ProviderError) as failure:
        provider(admin, client_id=CLIENT_ID, secret="sp-secret-wrong", tenant=TENANT).list_groups([admin.group])
    message = str(failure.value)
    assert "AADSTS7000215" in message and failure.value.code == "AUTH_FAILED" and not failure.value.retryable
    for named in ("azure.client_id %r (AZURE_CLIENT_ID)" % CLIENT_ID, "azure.tenant %r" % TENANT,
                  "azure.secret (AZURE_SECRET)", admin.endpoint, "Microsoft Azure Resource Manager credential"):
        assert named in message, message
    assert "sp-secret-wrong" not in message and SECRET not in message
    assert [g.get("refused") for g in logins(admin, since)] == [7000215]


def test_a_user_logs_in_with_the_password_and_a_wrong_one_fails(admin):
    # Through the "adfs" tenant: for any other MSAL asks user realm discovery on port 443 of the authority
    # host (Entra's own), which the emulator on a free port is not.
    since = len(admin.token_grants())
    with warnings.catch_warnings(record=True) as python_warnings:
        warnings.simplefilter("always")
        [group] = provider(admin, ad_user=USER, password=PASSWORD, tenant="adfs").list_groups([admin.group])
    assert group.id.lower() == admin.group.lower()
    # Deprecated by azure-identity and still working (AWX's credential with a user): the module warns once, in
    # its own words naming the alternative, and azure-identity's Python warning is not repeated on stderr.
    assert not [w for w in python_warnings if "UsernamePasswordCredential" in str(w.message)]
    [warning] = az.login_warnings(dict(DEFAULTS, **dict(admin.login_options(), ad_user=USER, password=PASSWORD)))
    assert "azure.ad_user %r (AZURE_AD_USER)" % USER in warning and "use a service principal" in warning.lower()
    assert PASSWORD not in warning
    [login] = logins(admin, since)
    assert (login["grant_type"], login["username"], login["client_id"]) == ("password", USER, az.AZURE_CLI_CLIENT_ID)

    since = len(admin.token_grants())
    with pytest.raises(ProviderError) as failure:
        provider(admin, ad_user=USER, password="not-the-password", tenant="adfs").list_groups([admin.group])
    message = str(failure.value)
    assert "AADSTS50126" in message and "azure.ad_user %r (AZURE_AD_USER)" % USER in message, message
    assert "azure.password (AZURE_PASSWORD)" in message and "not-the-password" not in message
    assert [g.get("refused") for g in logins(admin, since)] == [50126]


def test_an_unknown_tenant_is_refused_naming_it(admin):
    # MSAL turns the token endpoint's AADSTS90002 for the tenant's configuration into its own words.
    with pytest.raises(ProviderError, match="azure.tenant '00000000-0000-4000-8000-00000000dead' .*Unable to get "
                       "authority configuration"):
        provider(admin, client_id=CLIENT_ID, secret=SECRET,
                 tenant="00000000-0000-4000-8000-00000000dead").list_groups([admin.group])
