"""Which groups a pass lists (cloud_reads), and CloudAccess listing only those, at once, with a fresh listing on demand
(refresh) and after each of its own writes."""

import threading

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import cloud_reads, node_state
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.cloud_access import CloudAccess
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.executor import StepFailure
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.model import (
    CREATING, DELETING, FAILED, REFUSED_FOR, RUNNING, STATE_PROBLEM, STOPPED, UNKNOWN, Group, Instance)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base


def _group(gid="g1", size=2):
    return Group(id=gid, name=gid, image="img-a", target_size=size)


def _inst(name, state=RUNNING, gid="g1", **extra):
    return Instance(provider_id="gce://p/z/" + name, node_name=name, group_id=gid, image="img-a", state=state,
                    created_at=1.0, name=name, extra=dict(extra))


# -- the pure rules ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("state", [RUNNING, STOPPED])
def test_a_group_whose_instances_all_run_or_stopped_as_many_as_its_target_is_steady(state):
    assert cloud_reads.steady(_group(), [_inst("a"), _inst("b", state)])


@pytest.mark.parametrize("odd", [
    _inst("b", CREATING), _inst("b", DELETING), _inst("b", FAILED), _inst("b", UNKNOWN),
    _inst("b", current_action="VERIFYING"), _inst("b", errors=["QUOTA_EXCEEDED: no room"]),
    _inst("b", **{STATE_PROBLEM: "in repair"}), _inst("b", **{REFUSED_FOR: "ZONE_RESOURCE_POOL_EXHAUSTED"}),
    _inst("b", listed=False)])
def test_a_group_with_one_instance_the_cloud_still_acts_on_is_not_steady(odd):
    assert not cloud_reads.steady(_group(), [_inst("a", current_action="NONE"), odd])


def test_a_group_resized_away_from_its_instances_or_without_a_target_is_not_steady():
    assert not cloud_reads.steady(_group(size=3), [_inst("a"), _inst("b")])
    assert not cloud_reads.steady(_group(size=1), [_inst("a"), _inst("b")])
    assert not cloud_reads.steady(_group(size=None), [_inst("a"), _inst("b")])


def test_due_lists_new_unsteady_written_resized_and_stale_groups_and_skips_steady_recent_ones():
    steady = [_inst("a"), _inst("b")]
    kept = {"new": None, "calm": (100.0, _group("calm"), steady), "busy": (100.0, _group("busy"), [_inst("a", CREATING)]),
            "wrote": (100.0, _group("wrote"), steady), "resized": (100.0, _group("resized"), steady),
            "old": (100.0 - cloud_reads.STEADY_REREAD, _group("old"), steady), "future": (200.0, _group("future"), steady)}
    kept.pop("new")
    groups = [_group("new"), _group("calm"), _group("busy"), _group("wrote"), _group("resized", size=3), _group("old"),
              _group("future")]
    # "future": a listing stamped after now (a clock that went back) is not trusted either.
    assert cloud_reads.due(groups, kept, {"wrote"}, 100.0 + 29.0) == ["new", "busy", "wrote", "resized", "old", "future"]
    assert cloud_reads.due([_group("calm")], kept, set(), 100.0 + cloud_reads.STEADY_REREAD) == ["calm"]


def test_a_busy_group_waits_the_short_interval_unless_only_this_runs_creates_are_under_way():
    """Issue 22: what the cloud does by itself (a deletion going, someone else's create, an error, a resize) has no
    event, so it is looked at after BUSY_REREAD; this run's own creates announce themselves (their operation's end,
    their Node), so a group busy only with them is looked at after STEADY_REREAD."""
    own = {"gce://p/z/b"}
    group = _group()
    assert cloud_reads.reread_after(group, [_inst("a"), _inst("b", CREATING)], own=own) == cloud_reads.STEADY_REREAD
    assert cloud_reads.reread_after(group, [_inst("a"), _inst("B", CREATING)], own=own,
                                    normalize=str.lower) == cloud_reads.STEADY_REREAD
    pending = Instance(provider_id="", node_name="", group_id="g1", image="img-a", state=CREATING, created_at=1.0,
                       name="", extra={base.PENDING: True})
    assert cloud_reads.reread_after(group, [_inst("a"), pending]) == cloud_reads.STEADY_REREAD
    busy = cloud_reads.BUSY_REREAD
    assert cloud_reads.reread_after(group, [_inst("a"), _inst("c", CREATING)], own=own) == busy   # not ours
    assert cloud_reads.reread_after(group, [_inst("a"), _inst("b", DELETING)], own=own) == busy   # its going: no event
    assert cloud_reads.reread_after(group, [_inst("a"), _inst("b", CREATING, errors=["QUOTA_EXCEEDED"])], own=own) == busy
    assert cloud_reads.reread_after(group, [_inst("a"), _inst("b", CREATING, **{REFUSED_FOR: "ZONE_RESOURCE_POOL"})],
                                    own=own) == busy
    assert cloud_reads.reread_after(_group(size=3), [_inst("a"), _inst("b", CREATING)], own=own) == busy   # resized
    assert cloud_reads.reread_after(_group(size=None), [_inst("a"), _inst("b")]) == busy
    assert cloud_reads.reread_after(group, [_inst("a"), _inst("b")], interval=7.0) == 7.0   # steady


def test_due_lists_a_busy_group_on_its_events_at_once_and_otherwise_after_its_interval():
    kept = {"mine": (100.0, _group("mine"), [_inst("a"), _inst("b", CREATING)]),
            "going": (100.0, _group("going"), [_inst("a"), _inst("c", DELETING)]),
            "calm": (100.0, _group("calm"), [_inst("a"), _inst("d")])}
    groups = [_group("mine"), _group("going"), _group("calm")]
    own = {"gce://p/z/b"}
    busy = cloud_reads.BUSY_REREAD
    assert cloud_reads.due(groups, kept, set(), 100.0 + busy - 0.1, own=own) == []
    assert cloud_reads.due(groups, kept, set(), 100.0 + busy, own=own) == ["going"]
    assert cloud_reads.due(groups, kept, {"mine"}, 100.0 + 1, own=own) == ["mine"]   # an event: at once
    assert cloud_reads.due(groups, kept, set(), 100.0 + cloud_reads.STEADY_REREAD, own=own) == ["mine", "going", "calm"]
    # Without the run's own creates known (a new process after a kill), its creating instance reads as the cloud's.
    assert cloud_reads.due(groups, kept, set(), 100.0 + busy) == ["mine", "going"]


class _Node:
    def __init__(self, provider_id, ready=True):
        self.provider_id, self.ready = provider_id, ready


def test_a_node_that_appears_turns_ready_or_notready_or_goes_names_its_group_and_one_of_no_kept_listing_every_group():
    before = cloud_reads.node_marks([_Node("gce://p/z/a"), _Node("gce://p/z/b", False), _Node("")])
    assert before == {"gce://p/z/a": True, "gce://p/z/b": False}
    where = {"gce://p/z/a": "g1", "gce://p/z/b": "g2", "gce://p/z/c": "g3"}
    same = cloud_reads.node_marks([_Node("gce://p/z/b", False), _Node("gce://p/z/a")])
    assert cloud_reads.changed_groups(before, same, where) == set()
    assert cloud_reads.changed_groups(before, cloud_reads.node_marks([_Node("gce://p/z/a"), _Node("gce://p/z/b")]),
                                      where) == {"g2"}                     # turned Ready
    assert cloud_reads.changed_groups(before, {"gce://p/z/a": False, "gce://p/z/b": False}, where) == {"g1"}   # NotReady
    assert cloud_reads.changed_groups(before, dict(before, **{"gce://p/z/c": False}), where) == {"g3"}   # appeared
    assert cloud_reads.changed_groups(before, {"gce://p/z/a": True}, where) == {"g2"}   # went
    assert cloud_reads.changed_groups(before, dict(before, **{"gce://p/z/x": False}), where) is None   # group unknown


# -- node_state.list_instances: at once, a bounded number at a time ------------------------------------------------
class _Provider(base.ReadingMemo):
    """Groups of instances in memory; counts its listings, and how many ran at once."""

    name = "fake"
    waiting_listener = None

    def __init__(self, groups, fail=(), hold=None):
        self.groups = groups            # {group ID: (Group, [Instance])}
        self.fail = dict(fail)          # {group ID: exception}
        self.listings = []
        self.running = self.most = 0
        self.lock = threading.Lock()
        self.hold = hold                # a threading.Barrier the listings wait at, to prove they overlap

    def list_groups(self, group_ids=None):
        self.group_reads = getattr(self, "group_reads", 0) + 1
        return [self.groups[g][0] for g in (group_ids or sorted(self.groups))]

    def list_instances(self, group_id):
        with self.lock:
            self.listings.append(group_id)
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            if self.hold is not None:
                self.hold.wait(timeout=5)
            if group_id in self.fail:
                raise self.fail[group_id]
            return list(self.groups[group_id][1])
        finally:
            with self.lock:
                self.running -= 1

    def normalize_provider_id(self, provider_id):
        return provider_id.lower()

    def delete_instance(self, provider_id):
        return True

    delete_instances = base.CloudProvider.delete_instances   # one delete_instance each, as a cloud without batches

    def create_instance(self, group_id):
        return _inst("new", CREATING, gid=group_id)

    def set_group_image(self, group_id, image):
        return True

    def follow_operations(self):
        return []


def _world(count=3):
    return {"g%d" % n: (_group("g%d" % n), [_inst("g%d-a" % n, gid="g%d" % n), _inst("g%d-b" % n, gid="g%d" % n)])
            for n in range(1, count + 1)}


def test_groups_are_listed_at_once_up_to_the_thread_bound_and_a_failing_group_is_its_own_error():
    count = cloud_reads.READ_THREADS
    provider = _Provider(_world(count + 2), fail={"g2": base.ProviderError("503 from the API")},
                         hold=threading.Barrier(count))
    instances, errors = node_state.list_instances(provider, ["g%d" % n for n in range(1, count + 1)])
    assert provider.most == count   # all in flight together: the barrier let them through
    assert sorted(instances) == sorted("g%d" % n for n in range(1, count + 1) if n != 2)
    assert errors == {"g2": "503 from the API"}


def test_an_error_that_is_no_provider_error_propagates_from_the_threads():
    provider = _Provider(_world(2), fail={"g2": KeyError("bug")})
    with pytest.raises(KeyError):
        node_state.list_instances(provider, ["g1", "g2"])


# -- CloudAccess: listing only what can have changed ---------------------------------------------------------------
class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _access(world=None):
    provider, clock = _Provider(world or _world(2)), _Clock()
    return CloudAccess(provider, clock=clock), provider, clock


def test_a_steady_group_is_listed_again_only_after_the_reread_interval_and_served_meanwhile_as_last_listed():
    cloud, provider, clock = _access()
    first = cloud.read(None)
    assert provider.listings == ["g1", "g2"] and cloud.fresh == {"g1", "g2"}
    clock.now += cloud_reads.STEADY_REREAD - 1
    again = cloud.read(None)
    assert provider.listings == ["g1", "g2"] and cloud.fresh == set()
    assert again[1] == first[1] and again[2] == {}
    assert set(cloud.listed) == {"gce://p/z/g1-a", "gce://p/z/g1-b", "gce://p/z/g2-a", "gce://p/z/g2-b"}
    clock.now += 1
    cloud.read(None)
    assert provider.listings == ["g1", "g2", "g1", "g2"]


def test_the_groups_themselves_are_read_again_only_when_one_is_due_or_after_the_interval_or_for_another_scope():
    cloud, provider, clock = _access()
    cloud.read(None)
    clock.now += 1
    cloud.read(None)
    assert provider.group_reads == 1, "every group steady and recently read: nothing read"
    cloud.read(["g1"])
    assert provider.group_reads == 2, "another scope"
    cloud.read(None)
    cloud.create("g2", 1)
    cloud.read(None)
    assert provider.group_reads == 4 and provider.listings[-1] == "g2", "a group written to: the groups and it"
    clock.now += cloud_reads.STEADY_REREAD
    cloud.read(None)
    assert provider.group_reads == 5 and provider.listings[-2:] == ["g1", "g2"]


def test_a_group_the_cloud_acts_on_by_itself_is_listed_again_after_the_busy_interval_not_every_pass():
    world = _world(2)
    world["g2"][1][1] = _inst("g2-b", CREATING, gid="g2")   # not this run's: nothing announces its next change
    cloud, provider, clock = _access(world)
    cloud.read(None)
    clock.now += cloud_reads.BUSY_REREAD - 0.1
    cloud.read(None)
    cloud.read(None)
    assert provider.listings == ["g1", "g2"]
    clock.now += 0.1
    cloud.read(None)
    assert provider.listings == ["g1", "g2", "g2"]


def test_each_write_of_the_run_has_its_group_listed_by_the_next_read():
    cloud, provider, _clock = _access()
    cloud.read(None)
    cloud.create("g1", 1)
    cloud.read(None)
    assert provider.listings[2:] == ["g1"]
    cloud.delete(["gce://p/z/g2-a"])
    cloud.read(None)
    assert provider.listings[3:] == ["g2"]
    cloud.set_group_image("g1", "img-b")
    cloud.read(None)
    assert provider.listings[4:] == ["g1"]
    cloud.read(None)
    assert provider.listings[5:] == []


def test_a_group_whose_listing_failed_is_listed_again_and_not_served_from_an_older_listing():
    cloud, provider, _clock = _access()
    cloud.read(None)
    provider.fail["g1"] = base.ProviderError("503")
    cloud.kept.clear()   # as after a write: both listed now; g1 fails
    _groups, instances, errors = cloud.read(None)
    assert errors == {"g1": "503"} and "g1" not in instances
    provider.fail.clear()
    _groups, instances, errors = cloud.read(None)
    assert provider.listings[-1] == "g1" and errors == {} and "g1" in instances


def test_refresh_lists_now_only_the_named_groups_not_listed_since_the_last_read():
    cloud, provider, clock = _access(_world(3))
    cloud.read(None)
    clock.now += 1
    cloud.read(None)
    assert provider.listings == ["g1", "g2", "g3"]
    provider.groups["g2"][1].pop()   # the cloud (an autoscaler) removed g2-b on its own
    instances, errors = cloud.refresh(["g2", "g3"])
    assert sorted(instances) == ["g2", "g3"] and errors == {}
    assert [i.name for i in instances["g2"]] == ["g2-a"]
    assert cloud.refresh(["g2", "g3"]) == ({}, {})   # fresh in this pass already
    assert provider.listings == ["g1", "g2", "g3", "g2", "g3"]


# -- creates that return before the cloud ran them, followed by the next read ---------------------------------------
class _Starting(_Provider):
    """A provider whose creates return at once; `ended` is what follow_operations() reports next."""

    creates_without_waiting = True

    def __init__(self, groups):
        super().__init__(groups)
        self.ended, self.waits = [], []

    def create_instance(self, group_id, wait=True):
        self.waits.append(wait)
        return _inst("new", CREATING, gid=group_id)

    def follow_operations(self):
        ended, self.ended = self.ended, []
        return ended


def test_a_create_returns_without_waiting_and_the_next_read_follows_its_operation():
    provider = _Starting(_world(2))
    cloud = CloudAccess(provider, clock=_Clock())
    cloud.read(None)
    assert [i.name for i in cloud.create("g1", 2)[0]] == ["new", "new"] and provider.waits == [False, False]
    provider.ended = [base.Ended("g1", "new-1"),
                      base.Ended("g2", "new-2", base.QuotaError("creating new-2: QUOTA_EXCEEDED", code="QUOTA_EXCEEDED")),
                      base.Ended("g2", "new-3", base.ProviderError("creating new-3: taken", code="RESOURCE_ALREADY_EXISTS"))]
    cloud.read(None)
    # Both groups listed again (g1 was written, g2's operations ended); the quota refusal told once.
    assert provider.listings[2:] == ["g1", "g2"]
    assert cloud.refusals() == ["creating new-2: QUOTA_EXCEEDED"] and cloud.refusals() == []


class _Meeting(_Starting):
    """follow_operations and list_groups each wait at one barrier of two (while `meeting` is set): both pass it only
    while both run at once. `calls` keeps their order."""

    def __init__(self, groups):
        super().__init__(groups)
        self.meeting, self.met, self.calls = threading.Barrier(2), [], []

    def _meet(self, who):
        self.calls.append(who)
        if self.meeting is None:
            return
        try:
            self.meeting.wait(timeout=5)
            self.met.append(who)
        except threading.BrokenBarrierError:
            self.meeting.reset()

    def list_groups(self, group_ids=None):
        self._meet("groups")
        return super().list_groups(group_ids)

    def follow_operations(self):
        self._meet("operations")
        return super().follow_operations()


def test_the_groups_are_read_while_the_operations_are_followed_and_an_ended_ones_group_is_listed_after_both():
    """A read that reads the groups again follows the operations at the same time (one round trip, not two, before the
    listings a heir Ready waits for); the groups of the operations that ended are listed after both."""
    provider = _Meeting(_world(2))
    cloud = CloudAccess(provider, clock=_Clock())
    cloud.read(None)
    assert sorted(provider.met) == ["groups", "operations"]
    cloud.create("g1", 1)
    provider.ended, provider.met = [base.Ended("g2", "new-2")], []
    cloud.read(None)   # g1 written to: the groups are read again, while g2's create is seen to end
    assert sorted(provider.met) == ["groups", "operations"]
    assert provider.listings[2:] == ["g1", "g2"] and provider.group_reads == 2
    provider.ended, provider.meeting, provider.calls = [base.Ended("g1", "new-1")], None, []
    cloud.read(None)   # every group steady: the operations first, and the one that ended reads the groups again
    assert provider.calls == ["operations", "groups"] and provider.group_reads == 3
    assert provider.listings[4:] == ["g1"]


def test_a_followed_create_that_failed_for_another_reason_fails_the_step_naming_it():
    provider = _Starting(_world(1))
    cloud = CloudAccess(provider, clock=_Clock())
    gone = base.ProviderError("creating new-1: the template is gone", code="RESOURCE_NOT_READY")
    provider.ended = [base.Ended("g1", "new-1", gone)]
    with pytest.raises(StepFailure, match="creating instance new-1 in g1 failed: creating new-1: the template is gone"):
        cloud.read(None)


def test_a_provider_that_waits_for_its_creates_is_asked_as_before():
    provider = _Provider(_world(1))
    assert [i.name for i in CloudAccess(provider, clock=_Clock()).create("g1", 1)[0]] == ["new"]


# -- creates not named at once, and deletions that return before the cloud ran them --------------------------------
class _Deferring(_Starting):
    """_Starting whose creates come back unnamed (no providerID yet: AWS, Azure, a regional GCE group) and whose
    deletions return once accepted (`deletes`: the providerIDs and how each was asked)."""

    deletes_without_waiting = True

    def __init__(self, groups):
        super().__init__(groups)
        self.deletes = []

    def create_instance(self, group_id, wait=True):
        self.waits.append(wait)
        return Instance(provider_id="", node_name="", group_id=group_id, image="img-a", state=CREATING, created_at=1.0,
                        name="", extra={base.PENDING: True, "listed": False})

    def delete_instance(self, provider_id, wait=True):
        self.deletes.append((provider_id, wait))
        return True


def test_an_unnamed_create_is_given_named_by_the_read_that_follows_its_end_once_and_a_failed_one_is_not():
    provider = _Deferring(_world(2))
    cloud = CloudAccess(provider, clock=_Clock())
    cloud.read(None)
    [made] = cloud.create("g1", 1)[0]
    assert made.provider_id == "" and made.extra[base.PENDING] and provider.waits == [False]
    named = _inst("g1-c", CREATING)
    provider.ended = [base.Ended("g1", "g1-c", None, "create", named),
                      base.Ended("g2", "", base.QuotaError("launch refused: InsufficientInstanceCapacity"))]
    cloud.read(None)
    assert cloud.identified() == [named] and cloud.identified() == []
    assert cloud.refusals() == ["launch refused: InsufficientInstanceCapacity"]


def test_a_deletion_returns_once_accepted_and_a_second_one_of_what_lists_deleting_or_unnamed_is_not_asked():
    world = _world(1)
    world["g1"][1].append(_inst("g1-gone", DELETING))
    world["g1"][1].append(Instance(provider_id="", node_name="", group_id="g1", image="img-a", state=CREATING,
                                   created_at=1.0, name="", extra={base.PENDING: True}))
    provider = _Deferring(world)
    cloud = CloudAccess(provider, clock=_Clock())
    cloud.read(None)
    assert cloud.delete(["gce://p/z/g1-a", "gce://p/z/g1-gone", "", "gce://p/z/unknown"]) == ["gce://p/z/g1-a"]
    assert provider.deletes == [("gce://p/z/g1-a", False)]
    # The deletion's group is listed by the next read, whatever it held (the instance then lists DELETING).
    before = len(provider.listings)
    cloud.read(None)
    assert provider.listings[before:] == ["g1"]


def test_a_followed_deletion_that_failed_fails_the_step_naming_the_instance_and_one_already_gone_does_not():
    provider = _Deferring(_world(1))
    cloud = CloudAccess(provider, clock=_Clock())
    provider.ended = [base.Ended("g1", "g1-a", base.NotFoundError("deleting g1-a: not found"), "delete")]
    cloud.read(None)
    provider.ended = [base.Ended("g1", "g1-b", base.ProviderError("deleting g1-b: RESOURCE_IN_USE"), "delete")]
    with pytest.raises(StepFailure, match="deleting instance g1-b from g1 failed: deleting g1-b: RESOURCE_IN_USE") as err:
        cloud.read(None)
    assert err.value.details["step"] == "delete_instance"


class _Batching(_Deferring):
    """_Deferring whose cloud deletes a group's instances in one call (GCE, Azure): `batches` records each call."""

    def __init__(self, groups, refuse=None):
        super().__init__(groups)
        self.batches = []
        self.refuse = refuse     # {group ID: ProviderError} the group's call raises

    def delete_instances(self, group_id, provider_ids, wait=True):
        self.batches.append((group_id, list(provider_ids), wait))
        if self.refuse and group_id in self.refuse:
            raise self.refuse[group_id]
        return list(provider_ids)


def test_a_pass_deleting_instances_of_two_groups_sends_one_call_per_group_named_by_its_listing_and_none_per_instance():
    """Issue 22: the group of each instance is the one this pass's listing names (no lookup per instance); what the
    listing does not name, names as DELETING, or names without a providerID is never asked for."""
    world = _world(2)
    world["g1"][1].extend([_inst("g1-c", gid="g1"), _inst("g1-gone", DELETING)])
    provider = _Batching(world)
    cloud = CloudAccess(provider, clock=_Clock())
    cloud.read(None)
    asked = ["gce://p/z/g1-a", "GCE://p/z/g2-b", "gce://p/z/g1-gone", "", "gce://p/z/unknown", "gce://p/z/g1-c",
             "gce://p/z/g2-a"]
    assert cloud.delete(asked) == ["gce://p/z/g1-a", "gce://p/z/g1-c", "gce://p/z/g2-b", "gce://p/z/g2-a"]
    assert provider.batches == [("g1", ["gce://p/z/g1-a", "gce://p/z/g1-c"], False),
                                ("g2", ["gce://p/z/g2-b", "gce://p/z/g2-a"], False)]
    assert provider.deletes == []   # never one instance at a time
    before = len(provider.listings)
    cloud.read(None)
    assert sorted(provider.listings[before:]) == ["g1", "g2"]   # both written to: listed again


def test_a_group_whose_batch_fails_fails_the_step_naming_its_instances_and_group():
    provider = _Batching(_world(2), refuse={"g2": base.ProviderError("403 forbidden")})
    cloud = CloudAccess(provider, clock=_Clock())
    cloud.read(None)
    with pytest.raises(StepFailure, match="deleting gce://p/z/g2-a, gce://p/z/g2-b failed: 403 forbidden") as err:
        cloud.delete(["gce://p/z/g1-a", "gce://p/z/g2-a", "gce://p/z/g2-b"])
    assert err.value.details == {"step": "delete_instance", "group": "g2"}
    assert [b[0] for b in provider.batches] == ["g1", "g2"]


def test_a_cloud_without_batches_deletes_one_instance_at_a_time_and_one_gone_meanwhile_is_not_an_error():
    world = _world(1)
    provider = _Deferring(world)
    cloud = CloudAccess(provider, clock=_Clock())
    cloud.read(None)

    def gone_then_fine(provider_id, wait=True):
        provider.deletes.append((provider_id, wait))
        if provider_id.endswith("g1-a"):
            raise base.NotFoundError("g1-a: not found")
        return True

    provider.delete_instance = gone_then_fine
    assert cloud.delete(["gce://p/z/g1-a", "gce://p/z/g1-b"]) == ["gce://p/z/g1-b"]
    assert provider.deletes == [("gce://p/z/g1-a", False), ("gce://p/z/g1-b", False)]


# -- issue 22: a busy group listed on its events, and the fresh listings of a pass's steps --------------------------
def test_a_group_busy_only_with_the_runs_creates_is_listed_on_their_events_not_every_pass():
    provider = _Starting(_world(2))
    cloud = CloudAccess(provider, clock=_Clock())
    cloud.read(None)
    made = cloud.create("g1", 1)[0]
    provider.groups["g1"][1].append(_inst("new", CREATING, gid="g1"))
    provider.groups["g1"] = (_group("g1", size=3), provider.groups["g1"][1])
    cloud.read(None)                       # written to: listed, the new instance CREATING
    assert provider.listings[2:] == ["g1"] and made[0].name == "new"
    cloud.clock.now += cloud_reads.BUSY_REREAD * 3
    cloud.read(None)
    cloud.read(None)
    assert provider.listings[3:] == [], "only this run's create under way: no listing without an event"
    provider.ended = [base.Ended("g1", "new", None, "create")]   # its operation ended
    cloud.read(None)
    assert provider.listings[3:] == ["g1"]
    provider.groups["g1"][1][-1] = _inst("new", gid="g1")   # it runs; its Node appears, then turns Ready
    cloud.notice_nodes([_Node("gce://p/z/g1-a"), _Node("gce://p/z/g1-b"), _Node("gce://p/z/g2-a"), _Node("gce://p/z/g2-b")])
    cloud.read(None)
    assert provider.listings[4:] == []
    cloud.notice_nodes([_Node("gce://p/z/g1-a"), _Node("gce://p/z/g1-b"), _Node("gce://p/z/g2-a"), _Node("gce://p/z/g2-b"),
                        _Node("gce://p/z/new", False)])
    cloud.read(None)
    assert provider.listings[4:] == ["g1"]
    cloud.notice_nodes([_Node("gce://p/z/g1-a"), _Node("gce://p/z/g1-b"), _Node("gce://p/z/g2-a"), _Node("gce://p/z/g2-b"),
                        _Node("gce://p/z/new")])
    cloud.read(None)
    cloud.read(None)
    assert provider.listings[5:] == ["g1"], "listed once per change"
    assert cloud.listings == {"read": 6, "refresh": 0}


def test_a_node_of_no_kept_listing_has_every_group_listed():
    cloud, provider, _clock = _access()
    cloud.notice_nodes([_Node("gce://p/z/g1-a")])
    cloud.read(None)
    cloud.notice_nodes([_Node("gce://p/z/g1-a"), _Node("gce://p/z/elsewhere")])
    cloud.read(None)
    assert provider.listings == ["g1", "g2", "g1", "g2"]


def test_a_pairing_drain_or_deletion_in_a_group_not_listed_by_the_read_gets_a_listing_of_that_group_only_counted():
    """The steps' fresh listings (Executor._read_fresh, refresh) list the groups they act in, not every group: over a
    pass that serves every group from kept listings, a step in g2 lists g2 alone."""
    world = _world(3)
    world["g2"][1][1] = _inst("g2-b", CREATING, gid="g2")
    cloud, provider, clock = _access(world)
    cloud.own.add("gce://p/z/g2-b")   # this run's create: no listing without an event
    cloud.read(None)
    clock.now += cloud_reads.BUSY_REREAD * 2
    for _pass in range(5):
        cloud.read(None)
        cloud.refresh(["g2"])
    assert provider.listings == ["g1", "g2", "g3"] + ["g2"] * 5
    assert cloud.listings == {"read": 3, "refresh": 5}


def test_a_nodes_change_lists_its_groups_instances_without_reading_the_groups_again_and_a_write_reads_them():
    """A Node's change says the group's instances may have changed, not the group (its target size, template and
    settings move by a write, which reads the groups again, or by the cloud by itself: the interval)."""
    cloud, provider, _clock = _access()
    nodes = [_Node("gce://p/z/g1-a"), _Node("gce://p/z/g1-b"), _Node("gce://p/z/g2-a"), _Node("gce://p/z/g2-b")]
    cloud.notice_nodes(nodes)
    cloud.read(None)
    cloud.notice_nodes(nodes[:3] + [_Node("gce://p/z/g2-b", False)])
    cloud.read(None)
    assert provider.listings == ["g1", "g2", "g2"] and provider.group_reads == 1
    cloud.set_group_image("g1", "img-b")
    cloud.read(None)
    assert provider.listings[3:] == ["g1"] and provider.group_reads == 2


# -- a group where the cloud only deletes what this run deleted: listed when the deletion is due to end --------------
def test_a_group_only_deleting_the_runs_instances_is_listed_when_the_first_is_due_to_end_then_every_second():
    group = _group(size=2)
    listing = [_inst("a"), _inst("b"), _inst("c", DELETING)]
    deleting = {"gce://p/z/c": 100.0}
    lower = str.lower

    def moment(listed_at, seconds=15.0, items=None, asked=None):
        return cloud_reads.next_listing(group, listed_at, listing if items is None else items, own=frozenset(),
                                        normalize=lower, deleting=deleting if asked is None else asked,
                                        deletion_seconds=seconds)

    assert moment(101.0) == 115.0, "listed just after asking: not again before the deletion's end"
    assert moment(115.2) == 115.2 + cloud_reads.DELETION_REREAD, "past its end: every DELETION_REREAD"
    late = 115.0 + cloud_reads.DELETION_LATE
    assert moment(late) == late + cloud_reads.BUSY_REREAD, "far past its end: the busy interval again"
    # Nothing timed yet, someone else's deletion, or the cloud acting besides: the busy interval as before.
    assert moment(101.0, seconds=None) == 101.0 + cloud_reads.BUSY_REREAD
    assert moment(101.0, asked={}) == 101.0 + cloud_reads.BUSY_REREAD
    other = [_inst("a"), _inst("b", CREATING), _inst("c", DELETING)]
    assert moment(101.0, items=other) == 101.0 + cloud_reads.BUSY_REREAD
    assert cloud_reads.deleting_only(_group(size=3), listing, normalize=lower, deleting=deleting) == []
    assert cloud_reads.due([group], {"g1": (101.0, group, listing)}, set(), 114.9, own=frozenset(), normalize=lower,
                           deleting=deleting, deletion_seconds=15.0) == []
    assert cloud_reads.due([group], {"g1": (101.0, group, listing)}, set(), 115.0, own=frozenset(), normalize=lower,
                           deleting=deleting, deletion_seconds=15.0) == ["g1"]


def test_cloud_access_times_its_deletions_by_the_listings_and_says_when_the_next_listing_is_due():
    world = _world(1)
    provider = _Batching(world)
    clock = _Clock()
    cloud = CloudAccess(provider, clock=clock)
    cloud.read(None)
    assert cloud.next_listing_in() == cloud_reads.STEADY_REREAD
    # The first deletion: nothing timed yet, the busy interval.
    assert cloud.delete(["gce://p/z/g1-a"]) == ["gce://p/z/g1-a"]
    world["g1"] = (_group(size=1), [_inst("g1-a", DELETING), _inst("g1-b")])
    cloud.read(None)
    assert cloud.next_listing_in() == cloud_reads.BUSY_REREAD
    clock.now += 10.0
    world["g1"] = (_group(size=1), [_inst("g1-b")])
    cloud.read(None)
    assert cloud.deletion_times == [10.0] and cloud.deleting == {}
    # The second: listed when it is due to end, 10 s after it was asked, and not before.
    world["g1"] = (_group(size=1), [_inst("g1-b"), _inst("g1-c")])
    clock.now += cloud_reads.STEADY_REREAD
    cloud.read(None)
    cloud.delete(["gce://p/z/g1-c"])
    world["g1"] = (_group(size=1), [_inst("g1-b"), _inst("g1-c", DELETING)])
    clock.now += 0.5
    cloud.read(None)
    assert cloud.next_listing_in() == 9.5
    listings = len(provider.listings)
    clock.now += 9.4
    cloud.read(None)
    assert len(provider.listings) == listings
    clock.now += 0.1
    cloud.read(None)
    assert len(provider.listings) == listings + 1 and cloud.next_listing_in() == cloud_reads.DELETION_REREAD


@pytest.mark.parametrize("ends_with_operation", [True, False])
def test_a_deletions_operation_end_lists_its_group_only_where_it_means_the_instance_is_gone(ends_with_operation):
    """GCE's deleteInstances is DONE once scheduled: listing the group at its end showed nothing new (a request of
    every group a wave, E14); elsewhere (Azure) it ends with the instance gone, and the group is listed then."""
    provider = _Deferring(_world(1))
    provider.deletion_ends_with_operation = ends_with_operation
    cloud = CloudAccess(provider, clock=_Clock())
    cloud.read(None)
    cloud.delete(["gce://p/z/g1-a"])
    cloud.read(None)
    before = len(provider.listings)
    provider.ended = [base.Ended("g1", "g1-a", None, "delete")]
    cloud.read(None)
    assert provider.listings[before:] == (["g1"] if ends_with_operation else [])
