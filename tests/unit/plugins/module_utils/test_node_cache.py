"""node_cache.NodeStore: what the watch's events and the executor's own writes make of the Nodes (pure)."""

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.node_cache import NodeStore


def node(name, version, uid=None, **labels):
    return {"metadata": {"name": name, "uid": uid or "uid-" + name, "resourceVersion": str(version), "labels": labels}}


def event(kind, obj):
    return {"type": kind, "object": obj}


def names(store):
    return [n["metadata"]["name"] for n in store.snapshot()]


def test_events_add_change_and_remove_nodes_and_move_the_version():
    store = NodeStore([node("a", 1)], "1")
    assert store.apply(event("ADDED", node("b", 2)))
    assert store.apply(event("MODIFIED", node("a", 3, team="x")))
    assert names(store) == ["a", "b"] and store.nodes["a"]["metadata"]["labels"] == {"team": "x"}
    assert store.apply(event("DELETED", node("b", 4)))
    assert names(store) == ["a"] and store.version == "4"
    assert store.apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}})
    assert store.version == "9" and names(store) == ["a"]


def test_an_error_event_leaves_the_store_to_be_listed_again():
    store = NodeStore([node("a", 1)], "1")
    assert store.apply({"type": "ERROR", "object": {"code": 410, "reason": "Expired"}}) is False
    assert store.version is None


def test_an_own_write_is_read_at_once_and_older_events_for_it_do_not_undo_it():
    store = NodeStore([node("a", 1)], "1")
    store.write_through(node("a", 5, written="yes"))
    assert store.nodes["a"]["metadata"]["labels"] == {"written": "yes"}
    # Someone else's change before the write (the write's result holds it) comes first: skipped.
    store.apply(event("MODIFIED", node("a", 4, other="yes")))
    assert store.nodes["a"]["metadata"]["labels"] == {"written": "yes"}
    # The write itself, then a later change: applied.
    store.apply(event("MODIFIED", node("a", 5, written="yes")))
    store.apply(event("MODIFIED", node("a", 6, written="yes", later="yes")))
    assert store.nodes["a"]["metadata"]["labels"] == {"written": "yes", "later": "yes"} and not store.pending


def test_an_own_write_the_watch_brought_already_is_not_pending():
    """The watch may bring a write before its answer reaches the writer, and a newer change after it: the store keeps
    the newer one and skips nothing later."""
    store = NodeStore([node("a", 1)], "1")
    store.apply(event("MODIFIED", node("a", 5, written="yes")))
    store.apply(event("MODIFIED", node("a", 6, newer="yes")))
    store.write_through(node("a", 5, written="yes"))
    assert store.nodes["a"]["metadata"]["labels"] == {"newer": "yes"} and not store.pending
    store.apply(event("MODIFIED", node("a", 7, newest="yes")))
    assert store.nodes["a"]["metadata"]["labels"] == {"newest": "yes"}


def test_an_own_deletion_is_gone_at_once_and_a_new_node_of_that_name_comes_back():
    store = NodeStore([node("a", 1), node("b", 1)], "1")
    store.mark_deleted(node("a", 1))
    assert names(store) == ["b"]
    store.apply(event("MODIFIED", node("a", 2, late="yes")))    # older than the deletion
    assert names(store) == ["b"]
    store.apply(event("DELETED", node("a", 3)))
    store.apply(event("ADDED", node("a", 4, uid="uid-a-again")))
    assert names(store) == ["a", "b"] and store.nodes["a"]["metadata"]["uid"] == "uid-a-again"
    # A deletion the watch brought first: nothing is held back.
    store.apply(event("DELETED", node("b", 5)))
    store.mark_deleted(node("b", 1))
    store.apply(event("ADDED", node("b", 6, uid="uid-b-again")))
    assert names(store) == ["a", "b"]


def test_the_planner_gets_copies():
    store = NodeStore([node("a", 1)], "1")
    store.snapshot()[0]["metadata"]["labels"]["changed"] = "by the planner"
    assert store.nodes["a"]["metadata"]["labels"] == {}


def test_the_copies_are_deep_and_equal_to_the_nodes_at_every_level():
    held = node("a", 1, zone="z1")
    held["spec"] = {"taints": [{"key": "k", "effect": "NoSchedule"}], "unschedulable": False}
    held["status"] = {"conditions": [{"type": "Ready", "status": "True"}], "capacity": {"pods": "110"}, "weight": 1.5}
    store = NodeStore([held], "1")
    copied = store.snapshot()[0]
    assert copied == held
    copied["spec"]["taints"][0]["effect"] = "NoExecute"
    copied["status"]["conditions"].append({"type": "DiskPressure"})
    assert held["spec"]["taints"][0]["effect"] == "NoSchedule" and len(held["status"]["conditions"]) == 1


def test_a_read_copies_only_the_nodes_that_changed_since_the_last():
    """Issue 22: the copy of an unchanged Node is handed out again (no copy per read); a Node an event, an own write or
    a deletion replaced is copied anew, and one gone is dropped."""
    store = NodeStore([node("a", 1), node("b", 1), node("c", 1)], "1")
    first = dict(zip(names(store), store.snapshot()))
    second = dict(zip(names(store), store.snapshot()))
    assert all(second[name] is first[name] for name in "abc")
    store.apply(event("MODIFIED", node("a", 2, team="x")))
    store.write_through(node("b", 3, written="yes"))
    store.mark_deleted(node("c", 1))
    third = dict(zip(names(store), store.snapshot()))
    assert sorted(third) == ["a", "b"] and set(store.copies) == {"a", "b"}
    assert third["a"] is not first["a"] and third["a"]["metadata"]["labels"] == {"team": "x"}
    assert third["b"] is not first["b"] and third["b"]["metadata"]["labels"] == {"written": "yes"}
    assert third["a"] is not store.nodes["a"] and third["b"] is not store.nodes["b"]


def test_a_copy_a_read_gave_keeps_what_it_held_whatever_the_watch_brings_later():
    """The planner never sees a Node object that a later event changes: the store replaces what it holds, and its
    copies are not what it holds."""
    store = NodeStore([node("a", 1, team="x")], "1")
    given = store.snapshot()[0]
    store.apply(event("MODIFIED", node("a", 2, team="y")))
    store.apply(event("DELETED", node("a", 3)))
    store.apply(event("ADDED", node("a", 4, uid="uid-a-again", team="z")))
    assert given["metadata"] == {"name": "a", "uid": "uid-a", "resourceVersion": "1", "labels": {"team": "x"}}
    # Even what the store holds changed in place (no event does that) does not reach a copy already given.
    again = store.snapshot()[0]
    store.nodes["a"]["metadata"]["labels"]["team"] = "changed in place"
    assert again["metadata"]["labels"] == {"team": "z"}
