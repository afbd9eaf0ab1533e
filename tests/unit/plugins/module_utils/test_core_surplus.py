"""Provable cleanup of the collection's own surplus instances (issue 13, item 5): a node is removed as surplus
only when the journal records that this upgrade created its instance, in the node's own group, no donor needs
it, and its group holds more nodes than at the start. Nothing the journal does not record is ever removed."""

from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core, progress

from core_world import NEW, OLD, World, group

P = core.DEFAULT_PREFIX + "/"
OPTS = core.Options(image=NEW.lower())


def world(extra=("x",), outdated=0):
    """G1 started with three nodes (a, b, c); `extra` are nodes on the new image that joined since, with no pair."""
    w = World([group("G1", image=NEW), group("G2", image=NEW)])
    for name in ("a", "b", "c"):
        w.add_node(name, "G1", NEW if outdated <= 0 else OLD)
        outdated -= 1
    w.add_node("foreign", "G2", NEW)
    for name in extra:
        w.add_node(name, "G1", NEW)
    return w


def created(*names, group_id="G1"):
    return {"gce://p/z/" + n: {"group": group_id, "created": "2026-12-01T00:00:00Z"} for n in names}


def plan(w, **kw):
    return w.plan(OPTS, **kw)


def test_a_recorded_surplus_node_is_marked_obsolete_and_capacity_returns_to_the_start():
    result = plan(world(), created=created("x"), start_counts={"G1": 3})
    assert result["plan"]["obsolete"] == ["x"]
    assert result["node_patches"]["x"]["annotations"][P + "obsolete"] == "true"
    assert "obsolete@" in result["node_patches"]["x"]["annotations"][P + "phase-history"]
    assert [(s["name"], s["action"]) for s in result["plan"]["surplus"]] == [("x", "obsolete")]
    assert not result["done"]


def test_the_marked_node_is_then_drained_and_deleted_and_the_run_ends_at_the_start_count():
    w = world()
    kw = dict(created=created("x"), start_counts={"G1": 3})
    for _pass in range(6):
        result = plan(w, **kw)
        if result["done"]:
            break
        w.apply(result)
        w.tick(5)
    assert result["done"]
    assert sorted(n for n in w.nodes if n != "foreign") == ["a", "b", "c"]
    assert [i.node_name for i in w.instances["G1"]] == ["a", "b", "c"]


def test_nothing_unrecorded_is_removed():
    result = plan(world(extra=("x", "y")), created={}, start_counts={"G1": 3})
    assert result["plan"]["obsolete"] == [] and result["done"]
    result = plan(world(extra=("x", "y")), created=created("y"), start_counts={"G1": 3})
    assert result["plan"]["obsolete"] == ["y"]


def test_not_below_the_start_count():
    # Two recorded surplus nodes, but the group started with four: only one goes.
    result = plan(world(extra=("x", "y")), created=created("x", "y"), start_counts={"G1": 4})
    assert result["plan"]["obsolete"] == ["x"]
    kept = [s for s in result["plan"]["surplus"] if s["action"] == "kept"]
    assert [s["name"] for s in kept] == ["y"] and "not more than the 4" in kept[0]["reason"]
    # Without a recorded start count nothing goes, and the reason says so.
    result = plan(world(), created=created("x"))
    assert result["plan"]["obsolete"] == [] and "does not record how many nodes" in result["plan"]["surplus"][0]["reason"]


def test_a_record_of_another_group_proves_nothing():
    result = plan(world(), created=created("x", group_id="G2"), start_counts={"G1": 3})
    assert result["plan"]["obsolete"] == []


def test_a_donor_that_needs_a_heir_gets_the_recorded_node_rather_than_a_new_instance():
    # x joined, its image was cached, then its pairing was lost: it is paired with the outdated node
    # instead of standing for good while another instance is created.
    w = world(outdated=1)
    result = plan(w, created=created("x"), start_counts={"G1": 3})
    assert result["plan"]["pairs"] == [dict(heir="x", donor="a", group="G1", reason="the oldest outdated node of its group")]
    assert result["plan"]["create"] == [] and result["plan"]["obsolete"] == []
    # Without the record, x is an ordinary node and a heir is created.
    result = plan(w)
    assert result["plan"]["pairs"] == [] and result["plan"]["create"][0]["count"] == 1


def test_a_replaced_heir_is_not_surplus():
    w = world()
    history = "heir@2026-12-01T00:00:00Z,replaced@2026-12-01T00:10:00Z"
    w.nodes["x"]["metadata"]["annotations"].update({P + "phase": "replaced", P + "phase-history": history})
    result = plan(w, created=created("x"), start_counts={"G1": 3})
    assert result["plan"]["obsolete"] == []


@settings(max_examples=80, deadline=None)
@given(extra=st.integers(0, 4), recorded=st.sets(st.integers(0, 5)), start=st.integers(0, 8),
       outdated=st.integers(0, 3))
def test_only_recorded_nodes_go_and_never_below_the_start(extra, recorded, start, outdated):
    names = ["x%d" % i for i in range(extra)]
    w = world(extra=names, outdated=outdated)
    record = created(*["x%d" % i for i in recorded])
    result = plan(w, created=record, start_counts={"G1": start})
    marked = set(result["plan"]["obsolete"])
    assert marked <= {"x%d" % i for i in recorded}
    g1 = [n for n in w.nodes if n != "foreign"]
    assert not marked or len(g1) - len(marked) >= start
    paired = {p["heir"] for p in result["plan"]["pairs"]}
    assert not marked & paired
    if outdated > len(paired):
        assert not marked   # a donor still needs a heir: nothing is surplus


# ------------------------------------------------------------------------- the journal's record of them

def test_the_journal_keeps_the_first_record_of_each_instance_and_start_count():
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import report
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers.base import Instance

    groups = [dict(id="G1", nodes_serving=3), dict(id="G2", nodes_serving=1)]
    first = report.created_record([Instance("gce://p/z/x", "x", "G1", NEW, created_at=1_000_000.0).to_dict()],
                                  groups, now=2_000_000.0)
    assert first == {"instances_created": {"gce://p/z/x": {"group": "G1", "created": "1970-01-12T13:46:40Z"}},
                     "start_counts": {"G1": 3, "G2": 1}}
    journal = report.merge(report.new_journal("img", None), first)
    later = report.created_record([Instance("gce://p/z/y", "y", "G1", NEW)], [dict(id="G1", nodes_serving=4)],
                                  now=2_000_000.0)
    journal = report.merge(journal, later)
    assert journal["start_counts"] == {"G1": 3, "G2": 1}          # the start, not what a later pass saw
    assert sorted(journal["instances_created"]) == ["gce://p/z/x", "gce://p/z/y"]
    # A pass that records nothing keeps the record (resumed runs re-read it).
    assert report.merge(journal, {"passes": 9})["instances_created"] == journal["instances_created"]


def run_with_duplicate_creation(resume_with_record):
    """One outdated node; the executor creates its heir, then the same creation happens again (as a run killed
    before it saw its first instance would do). Resumed runs go on, with or without the journal's record."""
    w = world(extra=(), outdated=1)
    records = []
    ex = w.executor(OPTS)
    ex.record_created = records.append
    ex.run_pass()
    # The intent goes first, with the start counts; then the instance, naming the intent it settles.
    intent, made = records
    assert intent["start_counts"] == {"G1": 3, "G2": 1} and [i["count"] for i in intent["create_intents"].values()] == [1]
    assert [e["intent"] for e in made["instances_created"].values()] == list(intent["create_intents"])
    created, _refused = ex.cloud.create("G1", 1)
    ex._record_created(created, ex.read()[0])
    assert len(ex.settings.created) == 2 and ex.settings.start_counts == {"G1": 3, "G2": 1}
    record = dict(created=ex.settings.created, start_counts=ex.settings.start_counts) if resume_with_record else {}
    for _pass in range(12):
        w.tick(120)
        result = w.executor(OPTS, **record).run_pass()
        if result["facts"]["done"]:
            break
    assert result["facts"]["done"]
    return w


def test_the_executor_records_what_it_creates_and_a_resumed_run_removes_its_surplus():
    w = run_with_duplicate_creation(resume_with_record=True)
    g1 = sorted(i.node_name for i in w.instances["G1"])
    assert len(g1) == 3 and "a" not in g1 and set(g1) == {n for n in w.nodes if n != "foreign"}
    assert [i.node_name for i in w.instances["G2"]] == ["foreign"]


def test_without_the_record_the_surplus_stays():
    """Neither unrecorded instance serves as a heir (nothing proves it ours): the resumed run creates, records and
    pairs its own, and both unrecorded ones are kept (capacity, never removed)."""
    w = run_with_duplicate_creation(resume_with_record=False)
    assert sorted(i.node_name for i in w.instances["G1"]) == ["b", "c", "n1", "n2", "n3"]   # a was the outdated one


def test_the_progress_line_names_the_surplus_it_removes_and_the_slice_follows_the_mark_at_once():
    w = world()
    ex = w.executor(OPTS, created=created("x"), start_counts={"G1": 3})
    marked = ex.run_pass()
    assert marked["facts"]["plan"]["obsolete"] == ["x"]
    # Nothing else moved in that pass: the mark alone makes the next look come at once, not after the poll.
    assert marked["moved"] is True
    line = progress.progress_line(marked["facts"], 1)
    assert "0/0 nodes on the image" in line and "removing 1 surplus node(s): x" in line, line
    leaving = ex.run_pass()
    assert "removing 1 surplus node(s): x" in progress.progress_line(leaving["facts"], 2) and leaving["finished"] == ["x"]


# An instance created by a run killed before its journal record is never provably ours (issue 13): it is kept,
# and reported by name as a problem with action "kept", the newest unrecorded nodes first, as many as the excess.

def unproven(result):
    return [p for p in result["problems"] if p["code"] == "unproven_surplus"]


def test_unrecorded_extra_nodes_are_kept_and_named_newest_first():
    w = world(extra=("x", "y"))
    instances = {i.node_name: i for i in w.instances["G1"]}
    instances["y"].created_at = w.now - 60      # y joined last
    instances["x"].created_at = w.now - 600
    result = plan(w, created={}, start_counts={"G1": 3, "G2": 1})
    assert result["plan"]["obsolete"] == [] and result["done"]
    assert [p["node"] for p in unproven(result)] == ["y", "x"]
    assert all(p["action"] == "kept" and p["step"] is None for p in unproven(result))
    message = unproven(result)[0]["message"]
    assert message.startswith("node y: scaling group G1 holds 5 nodes, 2 more than the 3 it had when the upgrade started")
    assert "gce://p/z/y" in message and "kubectl drain y" in message and "csp_node state=absent" in message
    assert not any(p["node"] == "foreign" for p in unproven(result))   # G2 is at its start count


def test_unproven_surplus_only_names_the_excess_and_only_in_a_settled_group():
    w = world(extra=("x", "y"))
    result = plan(w, created={}, start_counts={"G1": 4})
    assert len(unproven(result)) == 1
    assert unproven(plan(w, created={}, start_counts={"G1": 5})) == []
    assert unproven(plan(w, created={})) == []                        # no start count: nothing to compare with
    # A recorded surplus node is being removed: the group is not settled, the count will come down by itself.
    assert unproven(plan(w, created=created("x"), start_counts={"G1": 3})) == []
    # While the group is still being replaced, extra nodes are the surge at work, not a problem.
    assert unproven(plan(world(extra=("x",), outdated=1), created={}, start_counts={"G1": 3})) == []


def test_the_progress_line_names_the_kept_unproven_nodes():
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import progress

    w = world()
    next(i for i in w.instances["G1"] if i.node_name == "x").created_at = w.now - 60
    line = progress.progress_line(plan(w, created={}, start_counts={"G1": 3}), pass_number=4)
    assert "kept, not provably ours: node x: scaling group G1 holds 4 nodes, 1 more than the 3" in line


def test_an_intent_is_written_before_the_create_and_settled_with_what_it_made():
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import report
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers.base import Instance

    intended, keys = report.intent_record([dict(group="G1", count=2), dict(group="G2", count=1)], 1_000_000.9, tag="t")
    assert keys == {"G1": "G1@1970-01-12T13:46:40Z#t", "G2": "G2@1970-01-12T13:46:40Z#t"}
    assert intended["create_intents"]["G1@1970-01-12T13:46:40Z#t"] == dict(group="G1", at="1970-01-12T13:46:40Z", count=2)
    made = report.settled_record(report.created_record([Instance("gce://p/z/x", "x", "g1", NEW, created_at=1_000_001.0)],
                                                       [], now=2_000_000.0), keys)
    assert made["instances_created"]["gce://p/z/x"]["intent"] == keys["G1"]
    assert made["create_intents"] == {keys["G1"]: {"settled": 1}, keys["G2"]: {"settled": 0}}
    # The journal keeps each field's first record: the intent, then its settlement.
    journal = report.merge(report.merge(report.new_journal("img", None), intended), made)
    assert journal["create_intents"][keys["G1"]] == dict(group="G1", at="1970-01-12T13:46:40Z", count=2, settled=1)
    assert report.merge(journal, {"create_intents": {keys["G1"]: {"settled": 5}}})["create_intents"][keys["G1"]]["settled"] == 1
