# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The executor's cloud (module_utils/executor.py, its `cloud` port) in production: one provider
(module_utils/providers), read once per pass, its groups pointed at the image, instances created and deleted.
A provider's error is the executor's StepFailure, naming the step; a quota refusal ends a creation quietly."""

from __future__ import annotations

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import node_state
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.executor import StepFailure
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base


class CloudAccess:
    """One cloud provider (providers/factory.build_provider), with the instance listing of the last read so
    deletions skip what is already gone or going."""

    def __init__(self, provider):
        self.provider = provider
        self.listed = {}

    def normalize(self, provider_id):
        return self.provider.normalize_provider_id(provider_id)

    def calls(self):
        """The provider's cloud calls so far (call_rate.CallRate.stats), for the journal and the report."""
        return self.provider.call_rate.stats()

    def reading(self):
        """One slice: the provider reads each group's manager and template once (GCE), see CloudProvider.reading."""
        return self.provider.reading()

    def read(self, scaling_groups):
        groups, instances, errors = node_state.read_cloud(self.provider, scaling_groups)
        self.listed = {self.normalize(i.provider_id): i for items in instances.values() for i in items}
        return groups, instances, errors

    def set_group_image(self, group_id, image):
        try:
            self.provider.set_group_image(group_id, image)   # the provider retries its own calls (one level)
        except base.ProviderError as exc:
            raise StepFailure("setting the image of %s to %s failed: %s" % (group_id, image, exc), step="set_group_image")

    def set_setting(self, group_id, name, value):
        """One of the group's cloud settings (cloud_settings.py) set to `value`."""
        try:
            return self.provider.set_run_setting(group_id, name, value)
        except base.ProviderError as exc:
            raise StepFailure("setting %s of %s to %s failed: %s" % (name, group_id, value, exc), step="set_cloud_setting")

    def create(self, group_id, count):
        created = []
        for _attempt in range(count):
            try:
                created.append(self.provider.create_instance(group_id))
            except base.QuotaError as exc:
                return created, str(exc)
            except base.ProviderError as exc:
                if exc.code == "CreateTimeout":
                    # The capacity stays raised and the launch may come: the next pass's create waits for it, or takes
                    # its late refusal (which holds the surge); failing the run here would leave it behind.
                    if self.provider.waiting_listener is not None:
                        self.provider.waiting_listener("%s; the next pass looks for it again" % exc)
                    return created, ""
                raise StepFailure("creating an instance in %s failed after %d created: %s" % (group_id, len(created), exc),
                                  step="create", group=group_id)
        return created, ""

    def delete(self, provider_ids):
        deleted = []
        for provider_id in provider_ids:
            known = self.listed.get(self.normalize(provider_id))
            if known is None or known.state == base.DELETING:
                continue   # already gone, or the cloud deletes it already
            try:
                if self.provider.delete_instance(known.provider_id):
                    deleted.append(known.provider_id)
            except base.NotFoundError:
                continue
            except base.ProviderError as exc:
                raise StepFailure("deleting %s failed: %s" % (provider_id, exc), step="delete_instance")
        return deleted
