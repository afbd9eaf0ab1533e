"""The executor when an etcd removal waits (etcd_member_remove's on_refusal=wait, EtcdRemover): the donor is
neither recorded as removed nor deleted, the pass says why, the slice waits its poll interval instead of
looking again at once, and the removal goes ahead in a later pass."""

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import core, progress

from core_world import NEW, OLD, World, group

WAITING = ("etcd member cp-2 (2) is not healthy (https://10.0.0.2:2379 did not answer within 5.0s): removing "
           "etcd member cp-old (1) now would leave 2 of 3 remaining voters healthy (2 needed for quorum); waiting")


def test_a_waiting_etcd_removal_deletes_nothing_and_goes_on_once_the_member_is_back():
    w = World([group("CP", role="control-plane", image=NEW)])
    w.add_node("cp-old", "CP", OLD, control_plane=True)
    said = []
    ex = w.executor(core.Options(image=NEW.lower()), poll=3.0)
    ex.say = said.append
    calls = []

    def etcd(item, endpoints, expected_member_count):
        calls.append(item["name"])
        if len(calls) <= 3:   # the stopped member: three looks refused
            return {"waiting": True, "msg": WAITING, "changed": False}
        w.etcd_removed.add(item["name"])
        return {"waiting": False, "changed": True}

    ex.etcd = etcd
    waited = []
    for _attempt in range(20):
        result = ex.run_pass()
        if calls and len(calls) <= 3 and calls[-1] == "cp-old" and not result["finished"]:
            waited.append(dict(result, donor_still_there="cp-old" in w.nodes))
        if result["finished"]:
            break
        w.tick()
    assert len(calls) == 4 and result["finished"] == ["cp-old"] and w.etcd_removed == {"cp-old"}
    assert len(waited) == 3
    for look in waited:
        assert look["donor_still_there"]
        assert not [d for d in look["did"] if d["step"] in ("etcd_remove", "delete")]
        assert look["moved"] is False           # the slice waits its poll interval before the next look
    assert said.count("WARNING: " + WAITING) == 3
    # The progress line of each waiting look says what waits on etcd and why, naming the member.
    for look in waited:
        assert look["facts"]["etcd_waiting"] == [dict(name="cp-old", msg=WAITING, waiting_on=[])]
        line = progress.progress_line(look["facts"], 1)
        assert "waiting on etcd to remove the member of cp-old (etcd member cp-2 (2) is not healthy" in line, line
    assert "etcd_waiting" not in result["facts"]
