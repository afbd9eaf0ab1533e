# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The one interface every cloud implements (GCP managed instance groups, Azure VM scale sets, AWS auto
scaling groups), the plain data it returns, and the errors it raises.

The planning core only ever sees Group and Instance values (plain data, no SDK objects, defined in
model.py). A new cloud is
one new file in this package that subclasses CloudProvider.
"""

from __future__ import annotations

import abc
import contextlib
import random
import time
import typing
from typing import List, Optional

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import call_rate

# The plain data (states, roles, Group, Instance) lives in model.py; these names stay importable from here.
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import (  # noqa: F401 pylint: disable=unused-import
    CREATING,
    DELETING,
    FAILED,
    INSTANCE_STATES,
    ROLE_CONTROL_PLANE,
    ROLE_WORKER,
    RUNNING,
    STOPPED,
    UNKNOWN,
    Group,
    Instance,
)


# Instance.extra[PENDING]: a create the cloud accepted whose instance it has not named yet (no providerID).
PENDING = "pending_create"


class Ended(typing.NamedTuple):
    """A write started without waiting that ended (CloudProvider.follow_operations): its group, the instance's name,
    None when it succeeded or the ProviderError it failed with (QuotaError: refused for quota or capacity), "create" or
    "delete", and for a create the instance as the cloud now names it (None where it was known from the start)."""

    group_id: str
    name: str
    failure: Optional[Exception] = None
    kind: str = "create"
    instance: Optional[Instance] = None


class ProviderError(Exception):
    """A cloud call failed. `retryable` tells throttling and 5xx apart from answers that will not change; `throttled`
    says the cloud refused the call for its rate (with_retries then slows down and tries again until the run's
    deadline, however many attempts that takes)."""

    def __init__(self, message, status=None, code=None, retryable=False, throttled=False):
        super().__init__(message)
        self.status = status
        self.code = code
        self.throttled = bool(throttled)
        self.retryable = retryable or self.throttled


class NotFoundError(ProviderError):
    """The instance, group or image does not exist."""


class QuotaError(ProviderError):
    """A create was refused for quota or capacity. The planner reports it and lowers the surge."""


class InvalidReferenceError(ProviderError):
    """A providerID, group ID or image reference is malformed. The message names the part that is wrong, why,
    and the expected format."""


def reference_shape_problem(ref, shapes, ignore_case=False):
    """Where `ref`, a path of '/'-separated segments, departs from the closest of `shapes` (lists of fixed
    segments and <placeholders>, which take any non-empty segment without spaces): the segment and what was expected there."""
    parts = ref.split("/")

    def same(part, word):
        return part.lower() == word.lower() if ignore_case else part == word

    best = None
    for shape in shapes:
        matched = 0
        while matched < min(len(parts), len(shape)) and (
                parts[matched] and not any(c.isspace() for c in parts[matched]) if shape[matched].startswith("<")
                else same(parts[matched], shape[matched])):
            matched += 1
        if best is None or matched > best[0]:
            best = (matched, shape)
    matched, shape = best
    if matched == len(shape):
        return "it goes on with %r after %s, where the format ends" % ("/".join(parts[matched:]), "/".join(shape))
    if matched == len(parts):
        return "it ends after %r, where %s is expected" % ("/".join(parts), "/".join(shape[matched:]))
    wanted = shape[matched] if shape[matched].startswith("<") else repr(shape[matched])
    return "segment %d is %r where %s is expected" % (matched + 1, parts[matched], wanted)


class ReadingMemo:
    """reading() for a provider that keeps what it read, by kind and key, within one block (one executor
    slice, one node_image_facts call); outside a block every read goes to the cloud. The provider forgets
    what its own writes change. Nests."""

    _memo = None

    @contextlib.contextmanager
    def reading(self):
        outer = self._memo is None
        if outer:
            self._memo = {}
        try:
            yield self
        finally:
            if outer:
                self._memo = None

    def _recall(self, kind, key, fetch):
        """fetch() once per (kind, key) within reading(); every time outside it."""
        if self._memo is None:
            return fetch()
        kept = self._memo.setdefault(kind, {})
        if key not in kept:
            kept[key] = fetch()
        return kept[key]

    def _keep(self, kind, key, value):
        if self._memo is not None:
            self._memo.setdefault(kind, {})[key] = value

    def _take(self, kind, key):
        """What was kept under (kind, key), at most once; None when nothing was."""
        return None if self._memo is None else self._memo.get(kind, {}).pop(key, None)

    def _forget(self, kind):
        if self._memo is not None:
            self._memo.pop(kind, None)


class CloudProvider(abc.ABC):
    """What the collection asks of a cloud. Every method costs a constant number of API calls per group,
    never one per node."""

    name = "abstract"
    # Told, with a line naming the cloud and the cause, while a call waits to be tried again (see waiting): the
    # upgrade shows it on its progress line.
    waiting_listener = None
    _call_rate = None

    @property
    def call_rate(self):
        """The limit every API request of this provider goes through (call_rate.CallRate), at the cloud's default rate
        unless the run set one."""
        if self._call_rate is None:
            self._call_rate = call_rate.CallRate(call_rate.default_rate(self.name))
        return self._call_rate

    @call_rate.setter
    def call_rate(self, rate):
        self._call_rate = rate

    def waiting(self, error, attempt, attempts, delay):
        """with_retries' on_wait: the cloud did not answer, or answered with throttling or a server error (attempts
        None: throttled, tried again until the run's deadline)."""
        if self.waiting_listener is None:
            return
        if attempts is None:
            slowed = self.call_rate.slowed_to()
            self.waiting_listener("waiting for the %s cloud API (%s): throttled %d time(s) in a row, trying again in "
                                  "%.0fs at %.0f calls per minute" % (self.name, error, attempt, delay, slowed))
        else:
            self.waiting_listener("waiting for the %s cloud API (%s): trying again in %.0fs (attempt %d of %d)"
                                  % (self.name, error, delay, attempt + 1, attempts))

    def reading(self):
        """A context within which the provider may reuse what it read (GCE: each instance group manager and
        template once; Azure and AWS through ReadingMemo). By default, nothing is reused."""
        return contextlib.nullcontext(self)

    @abc.abstractmethod
    def list_groups(self, group_ids=None) -> List[Group]:
        """The scaling groups in scope (all discoverable ones, or exactly `group_ids`)."""

    @abc.abstractmethod
    def list_instances(self, group_id) -> List[Instance]:
        """Every instance of the group, with state, image and creation time."""

    # Whether create_instance takes wait=False: it then returns once the cloud accepted the create, and
    # follow_operations() tells how each such create ended. The instance it returns may not be known by its
    # providerID yet (the cloud picks the zone or the instance ID later): then its provider_id is "" and its extra
    # says PENDING, and follow_operations() gives it, named, once the cloud does.
    creates_without_waiting = False
    # Whether delete_instance takes wait=False: it then returns once the cloud accepted the deletion, the instance
    # lists as DELETING from then on (it holds its slot), and follow_operations() tells how the deletion ended.
    deletes_without_waiting = False
    # Whether such a deletion's operation ends when the instance is gone (else when the cloud scheduled it, as GCE's
    # deleteInstances: "DONE" is not deleted): only then does its end say that a listing would show something new.
    deletion_ends_with_operation = True

    @abc.abstractmethod
    def create_instance(self, group_id) -> Instance:
        """Add one instance to the group; return it with its future node name and providerID."""

    def follow_operations(self) -> list:
        """The writes started without waiting that ended since the last call: [Ended]. By default every write is
        waited for, so none."""
        return []

    @abc.abstractmethod
    def delete_instance(self, provider_id) -> bool:
        """Delete the instance and shrink its group. Idempotent: False when it was already gone."""

    def delete_instances(self, group_id, provider_ids, **wait) -> list:
        """Delete instances of one group, which a listing of that group just named as members not being deleted (the
        caller's cross-check, CloudAccess.delete): the providerIDs whose deletion the cloud accepted. A cloud whose
        delete call takes a list sends one request for them all, with no per-instance lookup; by default, one
        delete_instance each (`wait` passed on: wait=False where deletes_without_waiting), one already gone skipped."""
        deleted = []
        for provider_id in provider_ids:
            try:
                if self.delete_instance(provider_id, **wait):
                    deleted.append(provider_id)
            except NotFoundError:
                continue
        return deleted

    @abc.abstractmethod
    def group_image(self, group_id) -> str:
        """The image that new instances of the group get now."""

    @abc.abstractmethod
    def set_group_image(self, group_id, image) -> bool:
        """Make new instances of the group use `image`. False when it already did."""

    @abc.abstractmethod
    def validate_image(self, image) -> str:
        """Raise InvalidReferenceError (malformed) or NotFoundError (absent); return the canonical form."""

    @abc.abstractmethod
    def instance_headroom(self, group_ids) -> List[dict]:
        """How many more instances the cloud allows for these groups: one record per limit that applies
        (quota.known_limit / quota.unknown_limit: name, scope, limit, usage, the groups it constrains and
        how many more instances of each fit). A limit the identity may not read comes back unknown with
        the reason; reading quota never raises for that, since it is advice, not a step of the upgrade."""

    def searched(self) -> str:
        """Where the groups are looked for, in the words of the options that set it (such as "Azure subscription
        <id> (azure.subscription_id)"): named when a node's instance is in none of them, which a wrong account,
        project or region explains. Empty when the provider cannot tell."""
        return ""

    def normalize_provider_id(self, provider_id) -> str:
        """A form of the providerID that compares equal across spellings (case, slashes)."""
        return provider_id.strip().lower()

    def group_id_of(self, provider_id) -> Optional[str]:
        """The group ID when the providerID alone tells it (Azure); None when a listing is needed."""
        return None

    def set_run_setting(self, group_id, name, value) -> bool:
        """Set one of the group's settings (Group.settings, named as in cloud_settings.py) to `value`. False when it
        had that value already."""
        raise ProviderError("scaling group %s has no setting %s that this collection changes on %s"
                            % (group_id, name, self.name), code="NO_SUCH_SETTING")

    def restore_problem(self, group_id, name, value) -> Optional[str]:
        """Why putting the setting `name` back to `value` now would make the cloud act on the group at once (zones
        out of balance, VMs on an older model), or None when it may go back."""
        return None

    def instance_group(self, provider_id) -> Optional[str]:
        """The scaling group the cloud says the instance belongs to, read from the instance itself (a constant
        number of calls, for an instance the listing of the groups in scope did not find): the group ID, ""
        when the instance exists in no scaling group, None when it does not exist. By default the cloud cannot
        tell, which reads as absent."""
        return None


def zone_imbalance(counts):
    """Why a group whose zones hold `counts` ({zone: instances}) is out of the balance the cloud keeps (more than one
    apart), or None."""
    if len(counts) < 2 or max(counts.values()) - min(counts.values()) <= 1:
        return None
    return ("its zones are more than one instance apart (%s), so the cloud would remove one at once, without a drain; "
            "even them out (replace a node of the fullest zone) and set it back yourself"
            % ", ".join("%s: %d" % item for item in sorted(counts.items())))


def with_retries(call, attempts=5, base_delay=0.5, max_delay=8.0, sleep=time.sleep, on_wait=None, rate=None, kind=None):
    """Call `call()` and retry ProviderError with retryable=True, with jittered exponential backoff; before each
    wait, on_wait(error, attempt, attempts, delay) is told (CloudProvider.waiting). Anything else, or the last
    failure, propagates. With `rate` (call_rate.CallRate): each try first takes a token of it when `kind` names the
    call (a provider that counts its requests below this level gives none), and a throttling answer is no attempt:
    the rate slows down and the call is tried again, told with attempts None, until rate.throttled says the run's
    deadline would pass (then the answer propagates)."""
    attempt, in_a_row, since = 0, 0, None
    while True:
        if rate is not None and kind is not None:
            rate.take(kind)
        try:
            return call()
        except ProviderError as exc:
            if exc.throttled and rate is not None:
                in_a_row += 1
                since = rate.clock() if since is None else since
                delay = rate.throttled(in_a_row, since, base_delay)
                if delay is not None:
                    if on_wait is not None:
                        on_wait(exc, in_a_row, None, delay)
                    sleep(delay)
                    continue
                raise
            if not exc.retryable or attempt == attempts - 1:
                raise
            attempt += 1
            longest = min(max_delay, base_delay * (2 ** (attempt - 1)))
            delay = random.uniform(longest / 2, longest)
            if on_wait is not None:
                on_wait(exc, attempt, attempts, delay)
            sleep(delay)
