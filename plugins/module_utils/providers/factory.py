# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Choosing and building the cloud provider from module options.

Modules take `provider` (gcp, azure or aws) plus one dict of that cloud's options, named as in
google.cloud, azure.azcollection and amazon.aws (each cloud file defines ARG_SPEC and from_params).
"""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import aws, azure, gce

PROVIDERS = {"gcp": gce, "azure": azure, "aws": aws}


def provider_argument_spec(required=True):
    spec = dict(provider=dict(type="str", choices=sorted(PROVIDERS), required=required))
    for name, cloud in PROVIDERS.items():
        spec[name] = dict(type="dict", default={}, options=cloud.ARG_SPEC)
    return spec


def build_provider(params):
    """The CloudProvider for params['provider'], configured from params[<provider>]."""
    name = params["provider"]
    return PROVIDERS[name].from_params(params.get(name) or {})


def login_warnings(params):
    """Warnings about the login that params[<provider>] chooses, without the network (Azure's deprecated user
    login, providers/azure.py user_login_warning); none for a provider without such a check."""
    name = params.get("provider")
    check = getattr(PROVIDERS.get(name), "login_warnings", None)
    return check(params.get(name) or {}) if check else []


def provider_extras(provider):
    """What a module adds to its result from the provider: the AWS actions called with
    aws.debug_botocore_endpoint_logs (resource_actions, as amazon.aws returns them)."""
    actions = getattr(provider, "resource_actions", None)
    return {} if actions is None else {"resource_actions": sorted(set(actions))}
