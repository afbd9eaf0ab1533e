# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Azure options, named as in azure.azcollection (same AZURE_* environment variables), so AWX credential
types work unchanged."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  azure:
    description:
      - How to reach Azure when O(provider=azure). Ignored for other providers.
      - Scaling groups are virtual machine scale sets in Uniform or Flexible orchestration mode, named by their ID
        C(/subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/virtualMachineScaleSets/<name>).
        An instance's providerID is
        C(azure:///subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/virtualMachineScaleSets/<name>/virtualMachines/<instance-id>)
        in a Uniform scale set, and
        C(azure:///subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/virtualMachines/<vm-name>)
        in a Flexible one; its node name is its OS computer name, lower-cased.
      - A Flexible scale set needs a VM profile (C(virtualMachineProfile)), so that raising its capacity creates VMs
        from its model; its VMs are read through the virtual machines API (C(Microsoft.Compute/virtualMachines/read)).
      - "Images are a Compute Gallery image version ID
        (C(/subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/galleries/<gallery>/images/<image>/versions/<version>)),
        a managed image ID (C(/subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/images/<image>)),
        C(/CommunityGalleries/<gallery>/Images/<image>/Versions/<version>),
        C(/SharedGalleries/<gallery>/Images/<image>/Versions/<version>), or a Marketplace image as
        C(<publisher>:<offer>:<sku>:<version>). An exact version is required, not C(latest)."
      - Azure names are case-insensitive; scale set IDs and images are returned in one canonical spelling
        (fixed segment casing, names lower-cased) so that they compare as plain strings.
      - The role of a scale set comes from its C(kubenodes-role) tag (V(control-plane) or V(worker)).
      - To reach a local ARM emulator, give O(azure.endpoint), O(azure.ca_bundle) and any O(azure.access_token).
    type: dict
    default: {}
    suboptions:
      auth_source:
        description:
          - Where the credentials come from, as in azure.azcollection.
          - V(auto) uses O(azure.profile) when given, then O(azure.client_id) with O(azure.secret), then
            O(azure.client_id) with O(azure.x509_certificate_path), then O(azure.ad_user) with O(azure.password),
            then the C([default]) profile of C(~/.azure/credentials), then the Azure SDK's default chain
            (environment, workload identity, managed identity, Azure CLI).
          - V(env) and V(credential_file) use a service principal or a user from the options (or E(AZURE_CLIENT_ID),
            E(AZURE_SECRET), E(AZURE_TENANT), E(AZURE_AD_USER), E(AZURE_PASSWORD)) or from the profile of
            C(~/.azure/credentials).
          - AWX's I(Microsoft Azure Resource Manager) credential sets either the service principal or the user
            variables, so both work unchanged.
          - V(msi) uses the managed identity of the machine (O(azure.client_id) picks a user-assigned one);
            V(cli) uses the logged-in Azure CLI.
          - Falls back to E(ANSIBLE_AZURE_AUTH_SOURCE). Ignored when O(azure.access_token) is set.
        type: str
        default: auto
        choices: [auto, cli, credential_file, env, msi]
      profile:
        description:
          - A section of C(~/.azure/credentials) holding C(subscription_id), C(client_id), C(secret) and
            C(tenant). Falls back to E(AZURE_PROFILE).
        type: str
      subscription_id:
        description:
          - The subscription of the scale sets. Falls back to E(AZURE_SUBSCRIPTION_ID).
        type: str
      client_id:
        description:
          - The service principal's application (client) ID, or the client ID of a user-assigned managed
            identity with O(azure.auth_source=msi). Falls back to E(AZURE_CLIENT_ID).
        type: str
      secret:
        description:
          - The service principal's secret. Falls back to E(AZURE_SECRET), then E(AZURE_CLIENT_SECRET).
        type: str
      tenant:
        description:
          - The Microsoft Entra tenant ID. Falls back to E(AZURE_TENANT), then E(AZURE_TENANT_ID).
        type: str
      cloud_environment:
        description:
          - The Azure cloud, V(AzureCloud), V(AzureChinaCloud) or V(AzureUSGovernment). It picks the Resource
            Manager endpoint, the token scope and the login authority.
          - For another cloud (Azure Stack, a sovereign cloud) give its ARM URL in O(azure.endpoint).
          - Falls back to E(AZURE_CLOUD_ENVIRONMENT).
        type: str
        default: AzureCloud
      adfs_authority_url:
        description:
          - The login authority to use instead of the cloud's (ADFS). Falls back to E(AZURE_ADFS_AUTHORITY_URL).
        type: str
      access_token:
        description:
          - A bearer token for Azure Resource Manager, used as-is (for example from
            C(az account get-access-token)). Any string works against the local emulator.
          - When set, O(azure.auth_source) is not used. Falls back to E(AZURE_ACCESS_TOKEN).
        type: str
      ad_user:
        description:
          - A Microsoft Entra user name (C(user@example.com)) for a password login, with O(azure.password).
            O(azure.tenant) defaults to C(organizations) and O(azure.client_id) to the Azure CLI's public client.
          - Deprecated. azure-identity deprecates this login (C(UsernamePasswordCredential), it cannot do multifactor
            authentication, which Microsoft Entra ID enforces for Azure Resource Manager) and has no other
            credential that logs a user in without a prompt. It still works where the tenant allows it, and every
            module that uses it warns, naming the alternatives. Use a service principal (O(azure.client_id) with
            O(azure.secret) or O(azure.x509_certificate_path), and O(azure.tenant)) or a managed identity
            (O(azure.auth_source=msi)).
          - Falls back to E(AZURE_AD_USER).
        type: str
      password:
        description:
          - The password of O(azure.ad_user). Falls back to E(AZURE_PASSWORD).
        type: str
      x509_certificate_path:
        description:
          - A PEM file with a service principal's certificate and private key, used with O(azure.client_id) and
            O(azure.tenant) instead of O(azure.secret). Falls back to E(AZURE_X509_CERTIFICATE_PATH).
        type: path
      thumbprint:
        description:
          - The SHA-1 thumbprint of the certificate in O(azure.x509_certificate_path). When given, it must match
            that certificate, so a wrong file fails before any call. Falls back to E(AZURE_THUMBPRINT).
        type: str
      cert_validation_mode:
        description:
          - V(ignore) turns off the verification of the TLS certificates of Resource Manager and of the login
            endpoint (only for test clouds); V(validate) verifies them (the default behaviour).
          - Falls back to E(AZURE_CERT_VALIDATION_MODE), then E(AZURE_CERT_VALIDATION).
        type: str
        choices: [validate, ignore]
      api_profile:
        description:
          - The Azure API profile, as in azure.azcollection. Only V(latest) is supported (Azure Stack Hub's
            hybrid profiles are not); another value fails before any call.
        type: str
        default: latest
      disable_instance_discovery:
        description:
          - Skip the login's instance discovery and authority validation, for private or disconnected clouds
            whose login host Microsoft does not know (and for the local emulator).
        type: bool
        default: false
      endpoint:
        description:
          - The Azure Resource Manager base URL (C(https://) only), for sovereign clouds, Azure Stack and the
            local emulator. Defaults to the endpoint of O(azure.cloud_environment).
        type: str
      ca_bundle:
        description:
          - A PEM file of CA certificates to trust for O(azure.endpoint). It applies to each request, so
            E(REQUESTS_CA_BUNDLE) in the environment does not override it.
        type: path
      resource_group:
        description:
          - The resource group whose scale sets are discovered when no scale set is named.
            Falls back to E(AZURE_RESOURCE_GROUP).
        type: str
      location:
        description:
          - The Azure region in which shared gallery, community gallery and Marketplace images are checked when
            no scale set is at hand (a scale set's own region is used when there is one). Without it, the region
            of the scale sets in O(azure.resource_group) is used. Falls back to E(AZURE_LOCATION).
        type: str
      timeout:
        description:
          - Seconds to wait for a long-running operation (a scale-out, an image change) before failing.
        type: int
        default: 600
      polling_interval:
        description:
          - Seconds between polls of a long-running operation when Azure sends no C(Retry-After).
        type: float
        default: 2.0
      retries:
        description:
          - Attempts for a call that Azure throttled (HTTP 429) or failed with a server error (5xx), with
            jittered exponential backoff. Other errors are not retried.
        type: int
        default: 5
"""
