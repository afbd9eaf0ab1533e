# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The reads before an upgrade, each with its module's own code (argument spec, rules, messages) in the controller
process: the image, the journal's target, the preflight's read of the nodes and the clouds, and the etcd read.
Used by the upgrade_start action (one task each) and by upgrade_step's start (all in the first slice's worker)."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import base, kube
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import factory
from ansible_collections.kubenodes.image_upgrade.plugins.modules import (
    csp_scaling_group, etcd_member_info, node_image_facts, upgrade_journal, upgrade_lock)


def auth_params(args):
    return base.given_options(args, kube.AUTH_ARG_SPEC)


def cloud_params(args):
    return base.given_options(args, factory.provider_argument_spec(required=False))


def prepare(args, check_mode):
    """target.yml's two reads and the preflight's read, each as its module does it: `resolved` as
    csp_scaling_group (check mode, no group), `target` as upgrade_journal (check mode), `preflight` as
    node_image_facts on the target image (None when args["preflight"] is None)."""
    steps = {}
    module = base.InProcessModule(dict(csp_scaling_group.ARGUMENT_SPEC),
                                  dict(cloud_params(args), image=args["image"], group=[]),
                                  cloud=base.CLOUD_REQUIRED, check_mode=True)

    def resolve():
        provider = factory.build_provider(module.params)
        result = csp_scaling_group.ensure_image(module, provider)
        result.update(factory.provider_extras(provider))
        return result
    steps["resolved"] = _step("resolve the image", module, resolve)
    journal = args["journal"] or {}
    module = base.InProcessModule(upgrade_journal.ARGUMENT_SPEC, dict(
        auth_params(args), name=journal.get("name"), namespace=journal.get("namespace"), image=args["image"],
        target_image=steps["resolved"]["image"], new_target=args["new_target"]),
        kube_auth=True, validate=upgrade_journal.VALIDATE, check_mode=True)
    steps["target"] = _step("the upgrade's target image", module, lambda: upgrade_journal.act(module, kube.build_api_client(module.params)))
    steps["preflight"] = None
    if args["preflight"] is not None:
        params = dict(auth_params(args), **cloud_params(args))
        params.update(args["preflight"], image=steps["target"]["target_image"])
        module = base.InProcessModule(node_image_facts.argument_spec(), params, check_mode=check_mode)
        steps["preflight"] = _step("read the nodes and the clouds", module, lambda: node_image_facts.facts(module))
    return steps


def read_etcd(params):
    """The preflight's etcd read as etcd_member_info does it (its options, rules and result), in this process: the
    controller reaches etcd itself (rolling_upgrade_etcd_delegate_to on the controller), so no module starts."""
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import etcd

    module = base.InProcessModule(etcd_member_info.ARGUMENT_SPEC, dict(params), validate=etcd_member_info.validate,
                                  check_mode=True)

    # An etcd error fails as the module's fail_from_exception() words it (InProcessModule.run).
    return _step("read the control-plane etcd members", module, lambda: etcd.inspect_cluster(
        etcd.client_from_params(module.params), module.params["expected_member_count"], timeout=module.params["timeout"]))


class StepFailed(Exception):
    def __init__(self, doing, result):
        super().__init__(result.get("msg"))
        self.doing, self.result = doing, result


def _step(doing, module, action):
    try:
        return module.run(action, doing)
    except base.ModuleFailed as exc:
        raise StepFailed(doing, exc.result) from None


def take_lock(args, lock, check_mode):
    """upgrade_lock state=present fail_when_held=false, once (the caller repeats it while the Lease is held)."""
    module = base.InProcessModule(upgrade_lock.ARGUMENT_SPEC, dict(
        auth_params(args), name=lock.get("name"), namespace=lock.get("namespace"), holder=lock.get("holder"),
        lease_duration=lock.get("lease_duration"), fail_when_held=False),
        kube_auth=True, validate=upgrade_lock.VALIDATE, check_mode=check_mode)
    return module.run(lambda: upgrade_lock.run(module, kube.build_api_client(module.params)),
                      "Lease %s/%s" % (module.params["namespace"], module.params["name"]))
