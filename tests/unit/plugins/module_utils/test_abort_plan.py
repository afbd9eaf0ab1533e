"""What an abort does for each kind of node and instance in the journal and the world (abort_plan.decide): donors
given back, the upgrade's own nodes removed only while the node they replace exists, nodes it did not create never
touched, orphans deleted, groups pointed back only at a recorded image."""

import pytest

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import abort_plan
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.vocabulary import (
    CONTROL_PLANE_LABEL, LB_EXCLUDE_LABEL, AnnotationKeys)

KEYS = AnnotationKeys()
DRAIN = KEYS.prefix + "/drain-started"
OLD, NEW = "image-old", "image-new"


def node(name, annotations=None, labels=None, cordoned=False, taints=None):
    return {"metadata": {"name": name, "annotations": dict(annotations or {}), "labels": dict(labels or {})},
            "spec": {"providerID": "cloud://%s" % name, "unschedulable": cordoned or None, "taints": list(taints or [])}}


def journal(created=(), groups=None, refills=None):
    return {"target_image": NEW, "instances_created": {"cloud://%s" % n: {"group": "G1"} for n in created},
            "group_images": {g: {"before": img, "at": "t"} for g, img in (groups or {}).items()},
            "refills": dict(refills or {})}


def decide(nodes, created=(), listed=None, groups_now=None, groups_before=None, refills=None, etcd_reachable=False):
    """abort_plan.decide on `nodes`, the cloud listing `listed` ({name: state}; by default every node's instance
    running)."""
    world = {n["metadata"]["name"]: n for n in nodes}
    listed = {name: "running" for name in world} if listed is None else listed
    instances = {"cloud://%s" % name: {"group": "G1", "state": state} for name, state in (listed or {}).items()}
    return abort_plan.decide(world, instances, journal(created, groups_before, refills), KEYS, DRAIN,
                             groups=groups_now or {}, etcd_reachable=etcd_reachable)


TAINT = {"key": KEYS.to_be_replaced, "value": "true", "effect": "PreferNoSchedule"}


def test_a_donor_being_drained_is_given_back_uncordoned_unlabelled_and_untainted():
    donor = node("old-1", {KEYS.heir: "new-1", KEYS.phase: "draining", KEYS.phase_since: "t", DRAIN: "t",
                           KEYS.phase_history: "paired@t,draining@t", KEYS.lb_excluded_since: "t"},
                 labels={LB_EXCLUDE_LABEL: ""}, cordoned=True, taints=[TAINT])
    heir = node("new-1", {KEYS.donor: "old-1", KEYS.phase: "heir"})
    decided = decide([donor, heir], created=["new-1"])["nodes"]
    assert decided["old-1"]["action"] == abort_plan.GIVE_BACK and decided["old-1"]["uncordon"] is True
    write = decided["old-1"]["write"]
    assert write["annotations"] == {KEYS.heir: None, KEYS.lb_excluded_since: None, KEYS.phase: None, KEYS.phase_since: None,
                                    KEYS.phase_history: None}
    assert write["labels"] == {LB_EXCLUDE_LABEL: None} and write["drop_taints"] == [KEYS.to_be_replaced]
    assert decided["new-1"]["action"] == abort_plan.REMOVE and decided["new-1"]["provider_id"] == "cloud://new-1"
    assert "old-1" in decided["new-1"]["reason"]


def test_an_operators_own_cordon_and_label_stay():
    donor = node("old-1", {KEYS.heir: "new-1", KEYS.phase: "paired"}, labels={LB_EXCLUDE_LABEL: ""}, cordoned=True)
    decided = decide([donor, node("new-1", {KEYS.donor: "old-1"})], created=["new-1"])["nodes"]["old-1"]
    assert decided["uncordon"] is False and "labels" not in decided["write"]


def test_a_heir_whose_donor_is_gone_stays_and_a_refill_too():
    heir = node("new-1", {KEYS.donor: "old-1", KEYS.phase: "replaced"})
    refill = node("new-2")
    decided = decide([heir, refill], created=["new-1", "new-2"], refills={"old-2": "new-2"})["nodes"]
    assert {n: d["action"] for n, d in decided.items()} == {"new-1": abort_plan.KEEP, "new-2": abort_plan.KEEP}


def test_an_unpaired_node_of_the_upgrade_is_removed_and_a_control_plane_one_is_held():
    cp = node("new-cp", labels={CONTROL_PLANE_LABEL: ""})
    decided = decide([node("old-1"), node("new-1"), cp], created=["new-1", "new-cp"])["nodes"]
    assert decided["new-1"]["action"] == abort_plan.REMOVE and "not yet paired" in decided["new-1"]["reason"]
    assert decided["new-cp"]["action"] == abort_plan.HOLD and "etcd_member_remove" in decided["new-cp"]["reason"]
    assert "etcd TLS files" in decided["new-cp"]["reason"]
    assert "old-1" not in decided, "a node the upgrade never marked is left alone"


def test_a_control_plane_heir_whose_donor_is_there_is_removed_with_its_etcd_member_when_etcd_can_be_reached():
    cp = node("new-cp", {KEYS.donor: "old-cp", KEYS.phase: "heir"}, labels={CONTROL_PLANE_LABEL: ""})
    cp["status"] = {"addresses": [{"type": "Hostname", "address": "new-cp"}, {"type": "InternalIP", "address": "10.0.0.9"}]}
    donor = node("old-cp", {KEYS.heir: "new-cp", KEYS.phase: "draining"}, labels={CONTROL_PLANE_LABEL: ""}, cordoned=True)
    decided = decide([donor, cp], created=["new-cp"], etcd_reachable=True)["nodes"]
    assert decided["new-cp"]["action"] == abort_plan.REMOVE and decided["new-cp"]["control_plane"] is True
    assert decided["new-cp"]["node_ip"] == "10.0.0.9" and "etcd member is removed" in decided["new-cp"]["reason"]
    assert decided["old-cp"]["action"] == abort_plan.GIVE_BACK
    # Its donor's member removed already (past the point of no return): the heir stays, etcd or not.
    donor["metadata"]["annotations"][KEYS.phase] = "etcd-removed"
    assert decide([donor, cp], created=["new-cp"], etcd_reachable=True)["nodes"]["new-cp"]["action"] == abort_plan.KEEP


def test_a_node_the_upgrade_did_not_create_is_never_removed():
    stranger = node("new-x", {KEYS.donor: "old-1"})
    decided = decide([node("old-1", {KEYS.heir: "new-x", KEYS.phase: "paired"}), stranger], created=[])["nodes"]
    assert "new-x" not in decided and decided["old-1"]["action"] == abort_plan.GIVE_BACK


@pytest.mark.parametrize("phase", ["etcd-removed", "deleting"])
def test_a_donor_past_its_point_of_no_return_is_finished_and_its_heir_stays(phase):
    donor = node("old-1", {KEYS.heir: "new-1", KEYS.phase: phase}, cordoned=True)
    decided = decide([donor, node("new-1", {KEYS.donor: "old-1"})], created=["new-1"])["nodes"]
    assert decided["old-1"]["action"] == abort_plan.FINISH and phase in decided["old-1"]["reason"]
    # Its heir replaces a node that still exists, but one that never serves again: removing it would lose capacity.
    assert decided["new-1"]["action"] == abort_plan.KEEP


def test_a_kept_heir_loses_its_pairing_as_the_runs_promotion_takes_it_off():
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import crosschecks

    heir = node("new-1", {KEYS.donor: "old-1", KEYS.phase: "heir", KEYS.phase_since: "2026-01-01T00:00:00Z",
                          KEYS.phase_history: "heir@2026-01-01T00:00:00Z", KEYS.started_at: "2026-01-01T00:00:00Z"})
    kept = abort_plan.decide({"new-1": heir}, {}, journal(["new-1"]), KEYS, DRAIN, now=1767225660.0)["nodes"]["new-1"]
    assert kept["action"] == abort_plan.KEEP
    assert kept["write"] == {"expect": {KEYS.donor: "old-1"}, "annotations": {
        KEYS.donor: None, KEYS.phase: "replaced", KEYS.phase_since: "2026-01-01T00:01:00Z",
        KEYS.phase_history: "heir@2026-01-01T00:00:00Z,replaced@2026-01-01T00:01:00Z", KEYS.started_at: "2026-01-01T00:00:00Z"}}
    after = {k: v for k, v in dict(heir["metadata"]["annotations"], **kept["write"]["annotations"]).items() if v is not None}
    promoted = dict(heir, metadata=dict(heir["metadata"], annotations=after))
    assert crosschecks.annotation_problems(promoted, KEYS) == []
    # Once unpaired (or promoted by the run before it was killed) it is not taken for a node never paired and removed.
    again = decide([promoted], created=["new-1"])
    assert again["nodes"]["new-1"]["action"] == abort_plan.KEEP and again["nodes"]["new-1"]["write"] == {}
    assert abort_plan.done(again)


@pytest.mark.parametrize("state", ["deleting", None])
def test_a_donor_whose_instance_is_deleted_is_finished_not_given_back_and_its_heir_stays(state):
    """Killed between the donor's instance deletion and its Node's: giving it back would leave a Node with no machine
    and remove the heir, the only capacity left."""
    donor = node("old-1", {KEYS.heir: "new-1", KEYS.phase: "drained", DRAIN: "t"}, cordoned=True)
    listed = {"new-1": "running", **({"old-1": state} if state else {})}
    decided = decide([donor, node("new-1", {KEYS.donor: "old-1"})], created=["new-1"], listed=listed)["nodes"]
    assert decided["old-1"]["action"] == abort_plan.FINISH and "its instance is" in decided["old-1"]["reason"]
    assert decided["old-1"]["instance"] == (abort_plan.GOING if state else abort_plan.GONE)
    assert decided["new-1"]["action"] == abort_plan.KEEP
    # A node never paired is not judged by its instance (it may be in a group the abort does not list).
    assert "old-2" not in decide([node("old-2")], listed={})["nodes"]


def test_instances_created_and_never_nodes_are_deleted_unless_already_going():
    decision = decide([node("old-1")], created=["new-1", "new-2", "new-3"],
                      listed={"new-1": "running", "new-2": "deleting", "old-1": "running"})
    assert decision["instances"] == [dict(provider_id="cloud://new-1", group="G1")]


def test_groups_point_back_only_at_their_recorded_image():
    decision = decide([], groups_now={"G1": NEW, "G2": OLD, "G3": NEW}, groups_before={"G1": OLD, "G2": OLD})
    assert decision["groups"] == [dict(group="G1", image=OLD, now=NEW)]
    assert decision["unrecorded_groups"] == ["G3"]
    lines = abort_plan.describe(decision)
    assert any("G1: pointed back from image-new to image-old" in line for line in lines)
    assert any("G3" in line and "no record" in line for line in lines)


def test_done_when_only_kept_and_held_nodes_are_left():
    heir = node("new-1", {KEYS.phase: "replaced"})
    assert abort_plan.done(decide([heir, node("new-cp", labels={CONTROL_PLANE_LABEL: ""})], created=["new-1", "new-cp"]))
    # A kept heir still paired with its gone donor is a step left: its pairing ends first.
    assert not abort_plan.done(decide([node("new-1", {KEYS.donor: "old-1"})], created=["new-1"]))
    assert not abort_plan.done(decide([node("old-1"), node("new-1", {KEYS.donor: "old-1"})], created=["new-1"]))
    assert not abort_plan.done(decide([], groups_now={"G1": NEW}, groups_before={"G1": OLD}))


def test_a_donor_given_back_is_a_plain_outdated_node_to_the_planners_checks():
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import crosschecks

    donor = node("old-1", {KEYS.heir: "new-1", KEYS.phase: "draining", KEYS.phase_since: "2026-01-01T00:00:00Z",
                           KEYS.phase_history: "paired@2026-01-01T00:00:00Z,draining@2026-01-01T00:01:00Z"})
    # The check this guards: a trail that ends in a phase the annotation no longer says.
    unphased = {k: v for k, v in donor["metadata"]["annotations"].items() if k != KEYS.phase}
    assert [p["code"] for p in crosschecks.annotation_problems(
        dict(donor, metadata=dict(donor["metadata"], annotations=unphased)), KEYS)] == ["phase_not_recorded"]
    write = decide([donor, node("new-1", {KEYS.donor: "old-1"})], created=["new-1"])["nodes"]["old-1"]["write"]
    after = {k: v for k, v in dict(donor["metadata"]["annotations"], **write["annotations"]).items() if v is not None}
    assert crosschecks.annotation_problems(dict(donor, metadata=dict(donor["metadata"], annotations=after)), KEYS) == []


@pytest.mark.parametrize("state, step", [("running", abort_plan.RUNNING), ("deleting", abort_plan.GOING), (None, abort_plan.GONE)])
def test_a_leaving_nodes_next_step_follows_its_instance(state, step):
    """Drained only while its instance runs: once the instance goes its kubelet is gone, its pods never end, and a
    drain again would wait for ever; its Node goes when the cloud lists the instance no more."""
    listed = {"new-1": state} if state else {}
    decided = decide([node("old-1"), node("new-1", {KEYS.donor: "old-1"})], created=["new-1"], listed=listed)["nodes"]
    assert decided["new-1"]["action"] == abort_plan.REMOVE and decided["new-1"]["instance"] == step


def test_a_line_per_call_says_what_it_did_and_what_is_left():
    line = abort_plan.progress_line(dict(done=False, waiting=False, left=3, did=[
        dict(step="set_group_image", group="G1", image=OLD), dict(step="give_back", name="old-1", uncordoned=True),
        dict(step="unpair", name="new-2"), dict(step="drain", name="new-1")]))
    assert line == ("abort: pointed group G1 back at image-old; gave back old-1 (uncordoned); unpaired the kept heir "
                    "new-2; draining new-1 (3 thing(s) were left to undo before this step)")
    assert abort_plan.progress_line(dict(done=False, waiting=False, left=1, did=[])) == (
        "abort: waiting for the cloud (1 thing(s) were left to undo before this step)")
    assert "waiting for the live run to stop" in abort_plan.progress_line(dict(done=False, waiting=True))
    assert abort_plan.progress_line(dict(done=True, waiting=False, msg="the upgrade to x is aborted")) == (
        "abort: done: the upgrade to x is aborted")


def test_left_counts_what_is_still_to_undo():
    decision = decide([node("old-1", {KEYS.heir: "new-1", KEYS.phase: "paired"}), node("new-1", {KEYS.donor: "old-1"}),
                       node("new-2", {KEYS.donor: "gone-1"})], created=["new-1", "new-2", "new-3"],
                      listed={"old-1": "running", "new-1": "running", "new-2": "running", "new-3": "running"},
                      groups_now={"G1": NEW}, groups_before={"G1": OLD})
    # old-1 given back, new-1 removed, new-2 unpaired, instance new-3 deleted, G1 pointed back.
    assert abort_plan.left(decision) == 5


# ------------------------------------------------------------------- an abort at every moment of one replacement

def _moments():
    """Every state one replacement (donor old-1, heir new-1 of this upgrade) can be killed in, as the run moves it:
    the heir's instance only created, or joined; the donor paired, draining, drained, its etcd member removed; its
    instance deleting or gone; its Node deleted. Yields (name, nodes, listed {name: state})."""
    yield "heir instance created, no Node yet", [node("old-1")], {"old-1": "running", "new-1": "running"}
    yield "heir joined, not paired", [node("old-1"), node("new-1")], None
    for phase in (None, "paired", "draining", "drained", "etcd-removed"):
        annotations = {KEYS.heir: "new-1"}
        if phase:
            annotations[KEYS.phase] = phase
        cordoned = phase not in (None, "paired")
        for donor_instance in ("running", "deleting", "gone"):
            if donor_instance != "running" and phase not in ("drained", "etcd-removed"):
                continue   # the run deletes an instance only once its node is drained
            listed = {"new-1": "running"}
            if donor_instance != "gone":
                listed["old-1"] = donor_instance
            donor = node("old-1", dict(annotations, **({DRAIN: "t"} if cordoned else {})), cordoned=cordoned)
            yield ("donor %s, its instance %s" % (phase or "half paired", donor_instance),
                   [donor, node("new-1", {KEYS.donor: "old-1", KEYS.phase: "heir"})], listed)
    yield "donor's Node deleted", [node("new-1", {KEYS.donor: "old-1", KEYS.phase: "heir"})], {"new-1": "running"}


@pytest.mark.parametrize("moment", list(_moments()), ids=lambda m: m[0])
def test_an_abort_at_any_moment_of_a_replacement_leaves_exactly_one_of_donor_and_heir(moment):
    """Whatever moment the run was killed in, the abort ends the replacement with one node serving: the donor given
    back, its heir's instance removed; or, once the donor can never serve again, the heir kept and the donor's
    deletion finished. Never both (an instance left behind), never neither (capacity below the start)."""
    _name, nodes, listed = moment
    decision = decide(nodes, created=["new-1"], listed=listed)
    acted = {n: d["action"] for n, d in decision["nodes"].items()}
    names = {n["metadata"]["name"] for n in nodes}
    orphans = {i["provider_id"] for i in decision["instances"]}
    donor_serves = "old-1" in names and acted.get("old-1") not in (abort_plan.FINISH, abort_plan.REMOVE)
    heir_serves = ("new-1" in names and acted.get("new-1") in (abort_plan.KEEP, abort_plan.HOLD)) or (
        "new-1" not in names and "cloud://new-1" not in orphans and listed and listed.get("new-1") == "running")
    assert donor_serves != heir_serves, (acted, orphans)
    if donor_serves:
        # A donor never comes back once its etcd member is removed or its instance is going.
        donor = next(n for n in nodes if n["metadata"]["name"] == "old-1")
        assert donor["metadata"]["annotations"].get(KEYS.phase) != "etcd-removed" and (listed or {}).get("old-1", "running") == "running"
        assert acted.get("new-1") == abort_plan.REMOVE or "cloud://new-1" in orphans
