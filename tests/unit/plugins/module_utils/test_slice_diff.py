"""upgrade_step's --diff (progress.slice_diff): what a slice's steps changed, from the executor's own `did` in the
in-memory world, and nothing when the slice changed nothing."""

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core, progress

from core_world import NEW, OLD, World, group


def run_until_finished(world, executor, passes=10):
    did = []
    for _attempt in range(passes):
        result = executor.run_pass()
        did.extend(result["did"])
        if result["finished"]:
            return did
        world.tick()
    raise AssertionError("the control-plane replacement did not finish in %d passes: %s" % (passes, did))


def test_a_control_plane_replacement_shows_the_group_the_heir_and_the_donor_from_found_to_deleted():
    w = World([group("CP", role="control-plane")])
    w.add_node("cp-old", "CP", OLD, control_plane=True)
    ex = w.executor(core.Options(image=NEW.lower()))
    did = run_until_finished(w, ex)
    diff = progress.slice_diff(did, NEW.lower())
    assert diff["before"]["groups"] == {"CP": {"image": "another image"}}
    assert diff["after"]["groups"] == {"CP": {"image": NEW.lower(), "instances_created": 1}}
    # The donor: from the first step's state to each step's result, in order.
    assert diff["before"]["nodes"]["cp-old"] == "annotations and labels as read"
    assert diff["after"]["nodes"]["cp-old"] == (
        "annotations and labels written, drained (0 pod(s) evicted), etcd member removed, deleted"), diff["after"]["nodes"]
    heirs = [n for n in diff["after"]["nodes"] if n != "cp-old"]
    assert heirs and all(diff["after"]["nodes"][n] == "annotations and labels written" for n in heirs), diff
    assert "instances" not in diff["after"]


def test_instances_deleted_without_a_node_and_an_uncordon_are_shown():
    did = [dict(step="delete_instance", provider_id="gce://p/z/i-1", reason="never joined"),
           dict(step="uncordon", name="n1"), dict(step="drain", name="n2", drained=False, evicted=3)]
    assert progress.slice_diff(did, "img") == dict(
        before={"instances": {"gce://p/z/i-1": "present"}, "nodes": {"n1": "cordoned", "n2": "not drained"}},
        after={"instances": {"gce://p/z/i-1": "deleted (never joined)"},
               "nodes": {"n1": "uncordoned", "n2": "draining (3 pod(s) evicted)"}})


def test_a_drain_of_several_rounds_and_a_write_made_twice_are_said_once():
    did = [dict(step="patch", name="n1"), dict(step="patch", name="n1"),
           dict(step="drain", name="n1", drained=False, evicted=10), dict(step="drain", name="n1", drained=False, evicted=1),
           dict(step="drain", name="n1", drained=True, evicted=0), dict(step="delete", name="n1")]
    diff = progress.slice_diff(did, "img")
    assert diff == dict(before={"nodes": {"n1": "annotations and labels as read"}},
                        after={"nodes": {"n1": "annotations and labels written, drained (11 pod(s) evicted), deleted"}})


def test_a_slice_that_changed_nothing_has_no_diff():
    assert progress.slice_diff([], "img") is None
    # A create the cloud refused for quota made no instance.
    assert progress.slice_diff([dict(step="create", group="G1", count=0)], "img") is None
