# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The reads before an upgrade, each with its module's own code (argument spec, rules, messages) in the controller
process: the image, the journal's target, the preflight's read of the nodes and the clouds, and the etcd read.
Used by the upgrade_start action (one task each) and by upgrade_step's start (all in the first slice's worker)."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import (
    base, etcd, group_image, image_facts, journal, kube, lease)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import factory


def auth_params(args):
    return base.given_options(args, kube.AUTH_ARG_SPEC)


def cloud_params(args):
    return base.given_options(args, factory.provider_argument_spec(required=False))


def prepare(args, check_mode):
    """target.yml's two reads and the preflight's read, each as its module does it: `resolved` as
    csp_scaling_group (check mode, no group), `target` as upgrade_journal (check mode), `preflight` as
    node_image_facts on the target image (None when args["preflight"] is None)."""
    steps = {}
    module = base.InProcessModule(dict(group_image.ARGUMENT_SPEC),
                                  dict(cloud_params(args), image=args["image"], group=[]),
                                  cloud=base.CLOUD_REQUIRED, check_mode=True)
    steps["resolved"] = _step("resolve the image", module, lambda: group_image.apply_image(module))
    where = args["journal"] or {}
    module = base.InProcessModule(journal.ARGUMENT_SPEC, dict(
        auth_params(args), name=where.get("name"), namespace=where.get("namespace"), image=args["image"],
        target_image=steps["resolved"]["image"], new_target=args["new_target"]),
        kube_auth=True, validate=journal.VALIDATE, check_mode=True)
    steps["target"] = _step("the upgrade's target image", module,
                            lambda: journal.apply_state(module, kube.build_api_client(module.params)))
    steps["preflight"] = None
    if args["preflight"] is not None:
        params = dict(auth_params(args), **cloud_params(args))
        params.update(args["preflight"], image=steps["target"]["target_image"])
        module = base.InProcessModule(image_facts.argument_spec(), params, check_mode=check_mode)
        steps["preflight"] = _step("read the nodes and the clouds", module, lambda: image_facts.facts(module))
    return steps


def read_etcd(params):
    """The preflight's etcd read as etcd_member_info does it (its options, rules and result), in this process: the
    controller reaches etcd itself (rolling_upgrade_etcd_delegate_to on the controller), so no module starts."""
    module = base.InProcessModule(etcd.INFO_ARGUMENT_SPEC, dict(params), validate=etcd.validate_info, check_mode=True)

    # An etcd error fails as the module's fail_from_exception() words it (InProcessModule.run).
    return _step("read the control-plane etcd members", module, lambda: etcd.inspect_from_params(module.params))


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
    module = base.InProcessModule(lease.ARGUMENT_SPEC, dict(
        auth_params(args), name=lock.get("name"), namespace=lock.get("namespace"), holder=lock.get("holder"),
        lease_duration=lock.get("lease_duration"), fail_when_held=False),
        kube_auth=True, validate=lease.VALIDATE, check_mode=check_mode)
    return module.run(lambda: lease.apply_state(module, kube.build_api_client(module.params)),
                      "Lease %s/%s" % (module.params["namespace"], module.params["name"]))
