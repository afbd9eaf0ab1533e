"""A GCP service-account key given as a dict (the natural form in YAML and AWX): its private key never
leaves the module, and its project ID, e-mail and URLs are not masked in the results (ansible-core takes
every value of a no_log dict for a secret: the project vanished from every group ID node_image_facts
returned, and the preflight then refused those IDs as invalid)."""

import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import base

KEY_LINE = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7kncanarykeyline"
PRIVATE_KEY = "-----BEGIN PRIVATE KEY-----\n%s\n%s\n-----END PRIVATE KEY-----\n" % (KEY_LINE, KEY_LINE[::-1])
KEY = {"type": "service_account", "project_id": "my-project-4711", "private_key_id": "kncanarykeyid0123456789",
       "private_key": PRIVATE_KEY, "client_email": "upgrader@my-project-4711.iam.gserviceaccount.com",
       "token_uri": "https://oauth2.googleapis.com/token"}


@pytest.mark.parametrize("form", ["dict", "json"])
def test_a_key_dict_masks_its_secrets_and_nothing_else(form, capsys):
    contents = KEY if form == "dict" else json.dumps(KEY)

    def main():
        module = base.KubenodesModule(argument_spec={}, cloud=base.CLOUD_REQUIRED, supports_check_mode=True)
        module.exit_json(changed=False, group="projects/my-project-4711/zones/z/instanceGroupManagers/g",
                         echoed=PRIVATE_KEY, key_id=KEY["private_key_id"])

    with patch_module_args(dict(provider="gcp", gcp=dict(auth_kind="serviceaccount", service_account_contents=contents))):
        with pytest.raises(SystemExit):
            main()
    out = capsys.readouterr()
    result = json.loads(out.out)
    assert result["group"] == "projects/my-project-4711/zones/z/instanceGroupManagers/g"
    text = out.out + out.err
    assert KEY_LINE not in text and KEY_LINE[::-1] not in text and KEY["private_key_id"] not in text


def test_public_key_values():
    assert base.public_key_values(KEY) == {"service_account", "my-project-4711", KEY["client_email"], KEY["token_uri"]}
    assert base.public_key_values(json.dumps(KEY)) == base.public_key_values(KEY)
    assert base.public_key_values("not json") == set() and base.public_key_values(None) == set()
