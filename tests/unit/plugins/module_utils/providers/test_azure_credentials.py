"""The Azure credentials AWX and azure.azcollection users give: the AZURE_* variables as AWX's Azure Resource
Manager credential writes them (service principal, or user and password), certificates, and the options
azure.azcollection has (cert_validation_mode, x509_certificate_path, thumbprint, api_profile,
disable_instance_discovery). The environment goes through Ansible's own argument-spec validation."""

import datetime
import hashlib
import warnings

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import azure as az
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers.base import ProviderError

AZURE_ENV = [name for spec in az.ARG_SPEC.values() if "fallback" in spec for name in spec["fallback"][1]]


@pytest.fixture
def env(monkeypatch):
    for name in AZURE_ENV:
        monkeypatch.delenv(name, raising=False)

    def options(**variables):
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        result = ArgumentSpecValidator(az.ARG_SPEC).validate({})
        assert not result.error_messages, result.error_messages
        return result.validated_parameters
    return options


def test_awx_user_and_password_credential_is_a_password_login(env, tmp_path):
    options = env(AZURE_SUBSCRIPTION_ID="0b1e5c9a-1111-4a1a-9a1a-00000000aa01", AZURE_AD_USER="ops@example.com", AZURE_PASSWORD="pw-123")
    kind, settings = az.resolve_auth(options, credential_file=str(tmp_path / "none"))
    assert kind == "user_password"
    assert (settings["ad_user"], settings["password"], settings["subscription_id"]) == ("ops@example.com", "pw-123", "0b1e5c9a-1111-4a1a-9a1a-00000000aa01")


def test_awx_service_principal_credential_still_wins(env, tmp_path):
    options = env(AZURE_SUBSCRIPTION_ID="0b1e5c9a-1111-4a1a-9a1a-00000000aa01", AZURE_CLIENT_ID="app", AZURE_TENANT="t", AZURE_SECRET="s")
    assert az.resolve_auth(options, credential_file=str(tmp_path / "none"))[0] == "client_secret"


def test_user_without_password_is_named(env, tmp_path):
    options = env(AZURE_SUBSCRIPTION_ID="0b1e5c9a-1111-4a1a-9a1a-00000000aa01", AZURE_AD_USER="ops@example.com")
    with pytest.raises(ProviderError, match="needs password"):
        az.resolve_auth(dict(options, auth_source="env", client_id=None), credential_file=str(tmp_path / "none"))


def test_password_is_a_secret_and_the_new_options_are_azcollections():
    assert az.ARG_SPEC["password"]["no_log"] is True
    assert az.ARG_SPEC["ad_user"]["fallback"][1] == ["AZURE_AD_USER"]
    assert az.ARG_SPEC["password"]["fallback"][1] == ["AZURE_PASSWORD"]
    # azure.azcollection's code reads AZURE_CERT_VALIDATION_MODE; its docs name AZURE_CERT_VALIDATION
    assert az.ARG_SPEC["cert_validation_mode"]["fallback"][1] == ["AZURE_CERT_VALIDATION_MODE", "AZURE_CERT_VALIDATION"]
    assert az.ARG_SPEC["cert_validation_mode"]["choices"] == ["validate", "ignore"]
    assert az.ARG_SPEC["api_profile"]["default"] == "latest"
    assert az.ARG_SPEC["disable_instance_discovery"]["type"] == "bool"


def _certificate(tmp_path, with_key=True):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubenodes-sp")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    if with_key:
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()) + pem
    path = tmp_path / ("sp.pem" if with_key else "cert-only.pem")
    path.write_bytes(pem)
    return str(path), hashlib.sha1(cert.public_bytes(serialization.Encoding.DER)).hexdigest().upper()


def test_certificate_service_principal_and_its_thumbprint(env, tmp_path):
    path, thumbprint = _certificate(tmp_path)
    options = env(AZURE_SUBSCRIPTION_ID="0b1e5c9a-5555-4555-9555-00000000aa55", AZURE_CLIENT_ID="app", AZURE_TENANT="t",
                  AZURE_X509_CERTIFICATE_PATH=path, AZURE_THUMBPRINT=thumbprint.lower())
    kind, settings = az.resolve_auth(options, credential_file=str(tmp_path / "none"))
    assert kind == "certificate" and settings["x509_certificate_path"] == path
    assert az.certificate_thumbprint(open(path).read()) == thumbprint


def test_a_wrong_thumbprint_or_a_file_without_key_fails_naming_it(env, tmp_path):
    path, thumbprint = _certificate(tmp_path)
    options = env(AZURE_SUBSCRIPTION_ID="0b1e5c9a-5555-4555-9555-00000000aa55", AZURE_CLIENT_ID="app", AZURE_TENANT="t", AZURE_X509_CERTIFICATE_PATH=path)
    with pytest.raises(ProviderError, match="does not match the certificate in %s \\(its thumbprint is %s\\)" % (path, thumbprint)):
        az.resolve_auth(dict(options, thumbprint="AB" * 20), credential_file=str(tmp_path / "none"))
    cert_only = _certificate(tmp_path, with_key=False)[0]
    with pytest.raises(ProviderError, match="certificate and its private key"):
        az.resolve_auth(dict(options, x509_certificate_path=cert_only), credential_file=str(tmp_path / "none"))
    with pytest.raises(ProviderError, match="cannot be read"):
        az.resolve_auth(dict(options, x509_certificate_path=str(tmp_path / "missing.pem")),
                        credential_file=str(tmp_path / "none"))


def test_user_and_password_from_a_credentials_file_profile(tmp_path):
    path = tmp_path / "credentials"
    path.write_text("[ops]\nsubscription_id = 0b1e5c9a-9999-4a9a-9a9a-00000000aa09\nad_user = ops@example.com\npassword = pw-9\n")
    kind, settings = az.resolve_auth(dict(profile="ops"), {}, str(path))
    assert (kind, settings["ad_user"], settings["subscription_id"]) == ("user_password", "ops@example.com", "0b1e5c9a-9999-4a9a-9a9a-00000000aa09")


def test_cert_validation_mode_and_ca_bundle_decide_what_the_transport_verifies():
    assert az.transport_verify({}) is None
    assert az.transport_verify({"ca_bundle": "/ca.pem"}) == "/ca.pem"
    assert az.transport_verify({"ca_bundle": "/ca.pem", "cert_validation_mode": "ignore"}) is False
    assert az.transport_verify({"cert_validation_mode": "validate"}) is None


def test_only_the_latest_api_profile_is_accepted():
    az.check_api_profile({"api_profile": "latest"})
    az.check_api_profile({})
    with pytest.raises(ProviderError, match="api_profile '2020-09-01-hybrid' is not supported"):
        az.check_api_profile({"api_profile": "2020-09-01-hybrid"})


def test_the_credentials_get_the_login_options():
    settings = dict(subscription_id="s", client_id=None, tenant=None, ad_user="ops@example.com", password="pw")
    options = dict(disable_instance_discovery=True, ca_bundle="/ca.pem")
    credential = az.build_credential("user_password", settings, options, "https://login.example.invalid")
    assert type(credential).__name__ == "UsernamePasswordCredential"


def test_the_user_login_builds_without_azure_identitys_own_deprecation_warning():
    settings = dict(subscription_id="s", client_id=None, tenant=None, ad_user="ops@example.com", password="pw")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        credential = az.build_credential("user_password", settings, {}, None)
    assert type(credential).__name__ == "UsernamePasswordCredential"


def test_awx_user_login_warns_naming_the_options_and_the_alternative_never_the_password(env, tmp_path):
    options = env(AZURE_SUBSCRIPTION_ID="0b1e5c9a-1111-4a1a-9a1a-00000000aa01", AZURE_AD_USER="ops@example.com", AZURE_PASSWORD="pw-123")
    [message] = az.login_warnings(options, credential_file=str(tmp_path / "none"))
    for named in ("azure.ad_user 'ops@example.com' (AZURE_AD_USER)", "azure.password (AZURE_PASSWORD)",
                  "UsernamePasswordCredential", "deprecates", "multifactor", "https://aka.ms/azsdk/identity/mfa",
                  "azure.client_id", "azure.secret", "azure.tenant", "AZURE_CLIENT_ID, AZURE_SECRET, AZURE_TENANT",
                  "Client ID, Client Secret and Tenant ID", "azure.auth_source msi"):
        assert named in message, named
    assert "pw-123" not in message


def test_other_logins_and_refused_options_give_no_login_warning(env, tmp_path):
    none = str(tmp_path / "none")
    assert az.login_warnings(env(AZURE_SUBSCRIPTION_ID="0b1e5c9a-1111-4a1a-9a1a-00000000aa01", AZURE_CLIENT_ID="app", AZURE_TENANT="t",
                                 AZURE_SECRET="s"), credential_file=none) == []
    assert az.login_warnings(dict(env(AZURE_SUBSCRIPTION_ID="0b1e5c9a-1111-4a1a-9a1a-00000000aa01"), auth_source="msi"), credential_file=none) == []
    # A user without a password is refused when the provider is built (naming the password), not warned about here.
    assert az.login_warnings(dict(env(AZURE_SUBSCRIPTION_ID="0b1e5c9a-1111-4a1a-9a1a-00000000aa01", AZURE_AD_USER="ops@example.com"),
                                  auth_source="env"), credential_file=none) == []


def test_a_module_with_the_awx_user_credential_warns_once(env, tmp_path, monkeypatch):
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import base

    monkeypatch.setenv("HOME", str(tmp_path))
    env(AZURE_SUBSCRIPTION_ID="0b1e5c9a-1111-4a1a-9a1a-00000000aa01", AZURE_AD_USER="ops@example.com", AZURE_PASSWORD="pw-123")
    module = base.InProcessModule({}, {"provider": "azure"}, cloud=base.CLOUD_REQUIRED)
    [message] = module.warnings
    assert message.startswith("azure.ad_user 'ops@example.com' (AZURE_AD_USER)") and "pw-123" not in message
    assert base.InProcessModule({}, {"provider": "gcp"}, cloud=base.CLOUD_REQUIRED).warnings == []


def test_credential_summary_names_the_options_and_variables_never_the_secret():
    settings = {"client_id": "app-1", "tenant": "t-1", "secret": "s3cr3t", "ad_user": "u@x", "password": "pw-1",
                "x509_certificate_path": "/k/sp.pem"}
    secret = az.credential_summary("client_secret", settings, "https://login.example")
    assert secret == ("the service principal azure.client_id 'app-1' (AZURE_CLIENT_ID) of azure.tenant 't-1' "
                      "(AZURE_TENANT) with the secret of azure.secret (AZURE_SECRET) at https://login.example")
    assert "'/k/sp.pem'" in az.credential_summary("certificate", settings, None)
    user = az.credential_summary("user_password", settings, None)
    assert "azure.ad_user 'u@x' (AZURE_AD_USER)" in user and "azure.password (AZURE_PASSWORD)" in user
    for kind in ("client_secret", "certificate", "user_password", "msi", "default"):
        text = az.credential_summary(kind, settings, None)
        assert "s3cr3t" not in text and "pw-1" not in text
