# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Google Cloud options (the O(gcp) dictionary), named as in google.cloud so AWX credentials work unchanged."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  gcp:
    description:
      - How to reach Google Compute Engine when O(provider=gcp). Ignored for other providers.
      - Option names and environment variables are those of the C(google.cloud) collection, so the AWX
        I(Google Compute Engine) credential type works unchanged.
      - "Formats: providerID C(gce://<project>/<zone>/<instance>); scaling group ID
        C(projects/<project>/zones/<zone>/instanceGroupManagers/<name>) or
        C(projects/<project>/regions/<region>/instanceGroupManagers/<name>); image
        C(projects/<project>/global/images/<name>), its full C(https://www.googleapis.com/compute/v1/) URL, or
        C(projects/<project>/global/images/family/<family>), which is resolved to the family's current image
        before anything changes."
      - Needs the Python package C(google-cloud-compute).
    type: dict
    default: {}
    suboptions:
      auth_kind:
        description:
          - How to get credentials. V(application) uses Application Default Credentials (honours
            E(GOOGLE_APPLICATION_CREDENTIALS)); V(serviceaccount) a service account key from
            O(gcp.service_account_file) or O(gcp.service_account_contents); V(machineaccount) the GCE metadata
            server; V(accesstoken) the OAuth2 token in O(gcp.access_token).
          - V(anonymous) sends no credentials. It is only for local emulators such as the sandbox's.
          - Defaults to V(application) when neither this option nor E(GCP_AUTH_KIND) is set.
          - Falls back to E(GCP_AUTH_KIND).
        type: str
        choices: [accesstoken, anonymous, application, machineaccount, serviceaccount]
      project:
        description:
          - The project whose managed instance groups are listed when no group IDs are given.
          - When unset, the project of the service account key or of the application default credentials.
          - Falls back to E(GCP_PROJECT).
        type: str
      service_account_file:
        description:
          - Path to a service account JSON key, with O(gcp.auth_kind=serviceaccount).
          - Falls back to E(GCP_SERVICE_ACCOUNT_FILE).
        type: path
      service_account_contents:
        description:
          - The service account JSON key itself (a string or a dictionary), with O(gcp.auth_kind=serviceaccount).
          - Falls back to E(GCP_SERVICE_ACCOUNT_CONTENTS).
        type: jsonarg
      service_account_email:
        description:
          - The service account of the metadata server to use, with O(gcp.auth_kind=machineaccount).
            C(default) when unset.
          - Falls back to E(GCP_SERVICE_ACCOUNT_EMAIL).
        type: str
      access_token:
        description:
          - An OAuth2 access token, with O(gcp.auth_kind=accesstoken).
          - Falls back to E(GCP_ACCESS_TOKEN).
        type: str
      scopes:
        description:
          - OAuth2 scopes to request. Defaults to C(https://www.googleapis.com/auth/compute).
          - Falls back to E(GCP_SCOPES) (comma-separated).
        type: list
        elements: str
      endpoint:
        description:
          - Base URL of the Compute Engine API, for private or sovereign endpoints and for local emulators,
            for example C(http://127.0.0.1:8080). A URL without a scheme means HTTPS.
          - Defaults to C(https://compute.googleapis.com). Long-running operations are awaited through the
            same endpoint.
          - Falls back to E(GCP_COMPUTE_ENDPOINT).
        type: str
      ca_bundle:
        description:
          - Path to a PEM bundle of CA certificates that verify O(gcp.endpoint), instead of the system's.
          - Applies to these API calls only, even when E(REQUESTS_CA_BUNDLE) is set.
          - Falls back to E(GCP_CA_BUNDLE).
        type: path
      env_type:
        description:
          - Where the run comes from, added to the User-Agent of the API calls as in google.cloud (AWX's
            I(Google Compute Engine) credential sets V(tower)). It changes nothing else.
          - Falls back to E(GCP_ENV_TYPE).
        type: str
      operation_timeout:
        description:
          - Seconds to wait for each long-running operation (creating or deleting instances, inserting an
            instance template, setting it on a group) before failing.
        type: int
        default: 600
"""
