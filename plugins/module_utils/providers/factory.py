# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Choosing and building the cloud provider from module options.

Modules take `provider` (gcp, azure or aws) plus one dict of that cloud's options, named as in
google.cloud, azure.azcollection and amazon.aws (each cloud file defines ARG_SPEC and from_params).
"""

from __future__ import annotations

import threading

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import aws, azure, gce

PROVIDERS = {"gcp": gce, "azure": azure, "aws": aws}


def provider_argument_spec(required=True):
    spec = dict(provider=dict(type="str", choices=sorted(PROVIDERS), required=required))
    for name, cloud in PROVIDERS.items():
        spec[name] = dict(type="dict", default={}, options=cloud.ARG_SPEC)
    return spec


_PRELOADS = {}   # provider name -> the thread preload_sdk started


def build_provider(params):
    """The CloudProvider for params['provider'], configured from params[<provider>]."""
    name = params["provider"]
    preload = _PRELOADS.pop(name, None)
    if preload is not None:
        preload.join()   # one import at a time: two threads importing the same package could see it half done
    return PROVIDERS[name].from_params(params.get(name) or {})


def preload_sdk(name):
    """Begin importing the cloud's SDK in a background thread, so that a caller's other start-up work (Kubernetes
    reads) overlaps it: google-cloud-compute takes about a second. build_provider waits for that import to end
    before it builds the provider. An import error is left for build_provider to report. Returns the thread, or
    None when the provider imports its SDK with its module."""
    load = getattr(PROVIDERS.get(name), "load_sdk", None)
    if load is None:
        return None

    def quietly():
        try:
            load()
        except Exception:  # pylint: disable=broad-except
            pass   # build_provider says what is missing
    thread = threading.Thread(target=quietly, name="kubenodes-sdk-import", daemon=True)
    _PRELOADS[name] = thread
    thread.start()
    return thread


def provider_extras(provider):
    """What a module adds to its result from the provider: the AWS actions called with
    aws.debug_botocore_endpoint_logs (resource_actions, as amazon.aws returns them)."""
    actions = getattr(provider, "resource_actions", None)
    return {} if actions is None else {"resource_actions": sorted(set(actions))}
