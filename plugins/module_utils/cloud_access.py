# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The executor's cloud (module_utils/executor.py, its `cloud` port) in production: one provider
(module_utils/providers), read once per pass, its groups pointed at the image, instances created and deleted.
A provider's error is the executor's StepFailure, naming the step; a quota refusal ends a creation quietly."""

from __future__ import annotations

import concurrent.futures
import copy
import time

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import cloud_reads, node_state
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.executor import StepFailure
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base

# The most groups whose deletions are sent at once, where the provider allows it (deletes_in_parallel).
DELETES_AT_ONCE = 16


class CloudAccess:
    """One cloud provider (providers/factory.build_provider), with the instance listing of the last read so
    deletions skip what is already gone or going. A pass lists the instances of the groups where something can have
    changed (cloud_reads.due), at once (node_state.list_instances); a group's last listing serves until this run wrote
    to it, an operation it follows there ended or one of its Nodes changed (notice_nodes), or else
    cloud_reads.STEADY_REREAD (cloud_reads.BUSY_REREAD while the cloud acts there by itself) has passed."""

    def __init__(self, provider, clock=time.monotonic, steady_reread=cloud_reads.STEADY_REREAD,
                 busy_reread=cloud_reads.BUSY_REREAD):
        self.provider = provider
        self.listed = {}
        self.clock = clock
        self.steady_reread = float(steady_reread)
        self.busy_reread = float(busy_reread)
        self.kept = {}        # group ID: (listed at, Group, [Instance]) of its last listing
        # groups where something happened since their last listing: a write of this run, the end of an operation it
        # follows; and those where a Node appeared, turned Ready or NotReady, or went (notice_nodes)
        self.changed = set()
        self.noticed = set()
        self.own = set()      # normalized providerIDs of the instances this run created (cloud_reads.reread_after)
        self.node_marks = None   # cloud_reads.node_marks of the Nodes last noticed
        self.listings = {"read": 0, "refresh": 0}   # groups listed by read() and by refresh(), for the tests and reports
        self.fresh = set()    # groups listed in the last read or since (refresh)
        self.refused = []     # quota or capacity refusals of creates followed since the executor last asked
        self.named = []       # instances of creates started without waiting that the cloud named since then
        self.groups_read = None   # (read at, scope, [Group]) of the last read of the groups themselves
        self.deleting = {}    # normalized providerID: (group ID, moment asked) of this run's deletions not seen gone
        self.deletion_times = []   # seconds from asking to the first listing without the instance, of those seen gone

    def normalize(self, provider_id):
        return self.provider.normalize_provider_id(provider_id)

    def calls(self):
        """The provider's cloud calls so far (call_rate.CallRate.stats), for the journal and the report."""
        return self.provider.call_rate.stats()

    def reading(self):
        """One slice: the provider reads each group's manager and template once (GCE), see CloudProvider.reading."""
        return self.provider.reading()

    def read(self, scaling_groups):
        """(groups, {group: [Instance]}, {group: error}): the groups as the provider reads them now, the instances of
        those where something can have changed listed now, the others as last listed."""
        scope = sorted(scaling_groups or [])
        with self.provider.reading():
            if self._groups_if_steady(scope) is None:
                # The groups are read again anyway: at the same time as the operations are followed, one round trip
                # where there were two (a heir Ready waits for this read before it is paired).
                with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
                    following = pool.submit(self._follow)
                    groups = self._read_groups(scaling_groups, scope)
                    following.result()
            else:
                self._follow()   # an operation's end there reads the groups again
                groups = self._groups_if_steady(scope)
                if groups is None:
                    groups = self._read_groups(scaling_groups, scope)
            listing = self._due(groups, self.clock())
            instances, errors = self._list(groups, listing)
            self.listings["read"] += len(listing)
        for group in groups:
            if group.id not in instances and group.id not in errors:
                instances[group.id] = [copy.copy(i) for i in self.kept[group.id][2]]
        self.fresh = set(listing)
        self.kept = {g.id: self.kept[g.id] for g in groups if g.id in self.kept}
        self.listed = {self.normalize(i.provider_id): i for items in instances.values() for i in items}
        return groups, instances, errors

    def _read_groups(self, scaling_groups, scope):
        groups = self.provider.list_groups(list(scaling_groups) if scaling_groups else None)
        self.groups_read = (self.clock(), scope, groups)
        return groups

    def _groups_if_steady(self, scope):
        """The groups as last read when that read is younger than the steady interval, for the same scope, and none
        of them is due but for its Nodes' changes (cloud_reads.due with the writes and operations' ends only): a Node's
        change says the group's instances may have, not the group itself (its target size, template and settings move
        only by a write, which re-reads them, or by the cloud acting on its own, which the next read after the interval
        catches, a group added to the project too). Else None: the groups are read again."""
        if self.groups_read is None:
            return None
        at, last_scope, groups = self.groups_read
        now = self.clock()
        if last_scope != scope or not 0 <= now - at < self.steady_reread:
            return None
        return None if self._due(groups, now, self.changed) else list(groups)

    def _due(self, groups, now, changed=None):
        changed = self.changed | self.noticed if changed is None else changed
        return cloud_reads.due(groups, self.kept, changed, now, self.steady_reread, self.busy_reread, self.own,
                               self.normalize, *self._deletions())

    def _deletions(self):
        """(deleting, deletion_seconds) as cloud_reads.next_listing takes them."""
        timed = self.deletion_times[-cloud_reads.DELETION_SAMPLES:]
        return {pid: asked for pid, (_group, asked) in self.deleting.items()}, (min(timed) if timed else None)

    def next_listing_in(self):
        """Seconds until the first kept listing is due again while no event names its group (cloud_reads.next_listing),
        0 when one is due; None when none is kept. The executor wakes then: a listing waited for the next pass."""
        now, deletions = self.clock(), self._deletions()
        moments = [cloud_reads.next_listing(group, at, items, self.steady_reread, self.busy_reread, self.own,
                                            self.normalize, *deletions) for at, group, items in self.kept.values()]
        return max(0.0, min(moments) - now) if moments else None

    def notice_nodes(self, nodes):
        """The Nodes as this pass reads them (NodeInfo): the groups of those that appeared, turned Ready or NotReady, or
        went since the last call are listed by the next read (every group when such a Node is in no kept listing)."""
        marks = cloud_reads.node_marks(nodes, self.normalize)
        before, self.node_marks = self.node_marks, marks
        if before is None or before == marks:
            return
        where = {self.normalize(i.provider_id): group_id for group_id, (_at, _group, items) in self.kept.items()
                 for i in items if i.provider_id}
        groups = cloud_reads.changed_groups(before, marks, where)
        self.noticed.update(self.kept if groups is None else groups)

    def refresh(self, group_ids):
        """The groups of `group_ids` not listed since the last read, listed now (a destructive step is judged on a
        listing of its group made in its pass): ({group: [Instance]}, {group: error}) of those listed."""
        groups = [kept[1] for gid, kept in self.kept.items() if gid in set(group_ids) - self.fresh]
        if not groups:
            return {}, {}
        with self.provider.reading():
            instances, errors = self._list(groups, [g.id for g in groups])
        self.listings["refresh"] += len(groups)
        self.fresh.update(g.id for g in groups)
        for group_id in errors:
            self.kept.pop(group_id, None)
        for items in instances.values():
            self.listed.update((self.normalize(i.provider_id), i) for i in items)
        return instances, errors

    def _list(self, groups, group_ids):
        at = self.clock()
        instances, errors = node_state.list_instances(self.provider, group_ids)
        by_id = {g.id: g for g in groups}
        for group_id in group_ids:
            self.changed.discard(group_id)
            self.noticed.discard(group_id)
            if group_id in instances:
                self.kept[group_id] = (at, by_id[group_id], [copy.copy(i) for i in instances[group_id]])
                self._timed_deletions(group_id, instances[group_id], at)
            else:
                self.kept.pop(group_id, None)
        return instances, errors

    def _timed_deletions(self, group_id, instances, at):
        """This run's deletions in `group_id` that the listing made at `at` no longer shows: timed (from asking to this
        listing, which started at `at`: at most that long) and forgotten."""
        listed = {self.normalize(i.provider_id) for i in instances if i.provider_id}
        for pid, (group, asked) in list(self.deleting.items()):
            if group == group_id and pid not in listed:
                del self.deleting[pid]
                if at >= asked:
                    self.deletion_times.append(at - asked)
        del self.deletion_times[:-cloud_reads.DELETION_SAMPLES]

    def _follow(self):
        """The writes started without waiting whose operations ended: their groups are listed at once. A create: a
        quota or capacity refusal is kept for refusals() (the executor holds the surge, as for a create refused at
        once), a name taken meanwhile is nothing made (the plan creates again), an instance the cloud named only now
        is kept for identified() (the executor records it as this run's), and any other failure fails the step. A
        delete that failed fails the step (the instance stays listed as the cloud has it: the next run sees it)."""
        try:
            ended = self.provider.follow_operations()
        except base.ProviderError as exc:
            raise StepFailure("following the cloud's operations failed: %s" % exc, step="create")
        scheduled_only = not getattr(self.provider, "deletion_ends_with_operation", True)
        for done in ended:
            failure = done.failure
            if not (done.kind == "delete" and failure is None and scheduled_only):
                # (A deletion the cloud only scheduled: the listing after its request shows it DELETING already, and
                # the listing due when it should have ended (cloud_reads.next_listing) shows it gone.)
                self._wrote(done.group_id)
            if done.kind == "delete":
                if failure is not None and not isinstance(failure, base.NotFoundError):
                    raise StepFailure("deleting instance %s from %s failed: %s" % (done.name, done.group_id, failure),
                                      step="delete_instance", group=done.group_id)
                continue
            if failure is None or failure.code == "RESOURCE_ALREADY_EXISTS":
                if failure is None and done.instance is not None and done.instance.provider_id:
                    self.named.append(done.instance)
                    self.own.add(self.normalize(done.instance.provider_id))
                continue
            if isinstance(failure, base.QuotaError):
                self.refused.append(str(failure))
                continue
            what = "instance " + done.name if done.name else "an instance"
            raise StepFailure("creating %s in %s failed: %s" % (what, done.group_id, failure), step="create",
                              group=done.group_id)

    def identified(self):
        """The instances of creates started without waiting that the cloud named since the last call (their
        providerID was not known when the create returned): the executor records them as this run's at once."""
        named, self.named = self.named, []
        return named

    def refusals(self):
        """The quota or capacity refusals of creates followed since the last call (each said once)."""
        refused, self.refused = self.refused, []
        return refused

    def _made(self, instances):
        """This run's new instances, known by their providerIDs: the cloud creating them is no reason to list their
        group sooner (cloud_reads.reread_after)."""
        self.own.update(self.normalize(i.provider_id) for i in instances if getattr(i, "provider_id", ""))

    def _wrote(self, group_id):
        """The next read lists this group again, whatever it held."""
        if group_id:
            self.changed.add(group_id)
            self.fresh.discard(group_id)

    def set_group_image(self, group_id, image):
        self._wrote(group_id)
        try:
            self.provider.set_group_image(group_id, image)   # the provider retries its own calls (one level)
        except base.ProviderError as exc:
            raise StepFailure("setting the image of %s to %s failed: %s" % (group_id, image, exc), step="set_group_image")

    def set_setting(self, group_id, name, value):
        """One of the group's cloud settings (cloud_settings.py) set to `value`."""
        self._wrote(group_id)
        try:
            return self.provider.set_run_setting(group_id, name, value)
        except base.ProviderError as exc:
            raise StepFailure("setting %s of %s to %s failed: %s" % (name, group_id, value, exc), step="set_cloud_setting")

    @property
    def creates_in_parallel(self):
        """Whether creates in different groups may be sent at once (the provider says its client is safe for it)."""
        return bool(getattr(self.provider, "creates_in_parallel", False))

    def create(self, group_id, count):
        """Up to `count` new instances: (instances, quota message or ""). Where the provider can, each returns once
        the cloud accepted it, and the next read follows its operation (_follow): the pass goes on meanwhile. An
        instance the cloud has not named yet comes back with no providerID (extra PENDING); identified() gives it
        named later."""
        self._wrote(group_id)
        created = []
        started = dict(wait=False) if getattr(self.provider, "creates_without_waiting", False) else {}
        batch = getattr(self.provider, "create_instances", None) if count > 1 else None
        if batch is not None:
            # One request for the group's wave (GCE's createInstances names them all). A batch refused at once for
            # quota made none: then one request each below, so as many are made as the quota holds.
            try:
                created = batch(group_id, count, **started)
                self._made(created)
                return created, ""
            except base.QuotaError:
                pass
            except base.ProviderError as exc:
                raise StepFailure("creating %d instance(s) in %s failed: %s" % (count, group_id, exc),
                                  step="create", group=group_id)
        for _attempt in range(count):
            try:
                created.append(self.provider.create_instance(group_id, **started))
                self._made(created[-1:])
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
        """The instances deleted (their providerIDs), one provider.delete_instances per group this pass's listing
        names them in (one request per group where the cloud's delete takes a list). Where the provider can, each
        returns once the cloud accepted the deletion: the instance lists as DELETING from then on, so it holds its
        slot, and the next read follows the operation (_follow). An instance this pass's listing does not name, or
        names as DELETING, is skipped: it is gone, or the cloud deletes it already."""
        by_group = {}
        for provider_id in provider_ids:
            known = self.listed.get(self.normalize(provider_id)) if provider_id else None
            if known is None or not known.provider_id or not known.group_id or known.state == base.DELETING:
                continue   # already gone, or the cloud deletes it already
            by_group.setdefault(known.group_id, []).append(known.provider_id)
        started = dict(wait=False) if getattr(self.provider, "deletes_without_waiting", False) else {}

        def delete(group_id, ids):
            self._wrote(group_id)
            asked = self.clock()
            try:
                deleted = self.provider.delete_instances(group_id, ids, **started)
                self.deleting.update((self.normalize(pid), (group_id, asked)) for pid in deleted)
                return deleted, None
            except base.NotFoundError:
                return [], None   # the group itself is gone, and its instances with it
            except base.ProviderError as exc:
                return [], StepFailure("deleting %s failed: %s" % (", ".join(ids), exc), step="delete_instance",
                                       group=group_id)

        deleted, groups = [], list(by_group.items())
        if len(groups) > 1 and getattr(self.provider, "deletes_in_parallel", False):
            # Each group's request at once (a wave's donors span every group): a pass waits one round trip, not one a
            # group. Every group's deletion is sent; the first failure, in order, is raised after.
            with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(groups), DELETES_AT_ONCE)) as pool:
                outcomes = list(pool.map(lambda group: delete(*group), groups))
        else:
            outcomes = []
            for group in groups:
                outcomes.append(delete(*group))
                if outcomes[-1][1] is not None:
                    break
        for ids, failure in outcomes:
            if failure is not None:
                raise failure
            deleted.extend(ids)
        return deleted
