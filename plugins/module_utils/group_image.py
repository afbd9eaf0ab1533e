# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""Setting the image new instances of a scaling group get, as csp_scaling_group does (the module and the
upgrade_step action run this code), on any cloud through its provider."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base, factory


# csp_scaling_group's options (also run in the controller by the upgrade_step action).
ARGUMENT_SPEC = dict(
    state=dict(type="str", choices=["present"], default="present"),
    group=dict(type="list", elements="str", default=[]),
    image=dict(type="str"),
)


def plan_image_changes(groups, image):
    """IDs of the groups whose image differs from `image` (pure, for the diff and check mode)."""
    return [g.id for g in groups if g.image != image]


def ensure_image(module, provider):
    """csp_scaling_group's work: the image new instances of each group get set to module.params' image (in check
    mode with no group, only that image resolved); also run in the controller by the upgrade_step action."""
    group_ids, image = module.params["group"], module.params["image"]
    if not group_ids and module.check_mode and image:
        # No group in check mode: only the exact image the reference names now (a family: its newest image),
        # as the rolling_upgrade role resolves it once per upgrade.
        return dict(changed=False, changed_groups=[], image=provider.validate_image(image.strip()), groups=[])
    if not group_ids:
        module.fail_json(msg="state=present needs at least one group")
    if not image:
        module.fail_json(msg="state=present needs image")
    image = provider.validate_image(image)
    groups = provider.list_groups(group_ids)
    to_change = plan_image_changes(groups, image)
    result = dict(changed=bool(to_change), changed_groups=to_change, image=image)
    if module._diff:
        result["diff"] = dict(before={g.id: g.image for g in groups},
                              after={g.id: (image if g.id in to_change else g.image) for g in groups})
    if not module.check_mode:
        done = []
        for group_id in to_change:
            try:
                provider.set_group_image(group_id, image)
            except base.ProviderError as exc:
                module.fail_json(msg="setting the image of %s to %s failed: %s" % (group_id, image, exc),
                                 changed=bool(done), changed_groups=done, retryable=exc.retryable,
                                 error_code=exc.code)
            done.append(group_id)
    for group in groups:
        if group.id in to_change:
            group.image = image
    result["groups"] = [g.to_dict() for g in groups]
    return result


def apply_image(module, built=None):
    """ensure_image() with the provider module.params name (`built` when given: one built from these params), and that
    provider's extras (AWS resource_actions)."""
    provider = built if built is not None else factory.build_provider(module.params)
    result = ensure_image(module, provider)
    result.update(factory.provider_extras(provider))
    return result
