"""What bench/chaos.py's aimed kills wait for (pure: the emulators' request-log entries and the watch's node
records, as they are shaped)."""

import threading

from bench import chaos


def test_the_instance_deletion_request_of_each_cloud():
    assert chaos.is_instance_deletion("gcp", {"method": "POST", "path": "/compute/v1/projects/p/zones/z/"
                                              "instanceGroupManagers/workers/deleteInstances"})
    assert not chaos.is_instance_deletion("gcp", {"method": "POST", "path": "/compute/v1/projects/p/zones/z/"
                                                  "instanceGroupManagers/workers/createInstances"})
    template = "/subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets/{vmss}"
    assert chaos.is_instance_deletion("azure", {"method": "POST", "template": template + "/delete"})
    assert not chaos.is_instance_deletion("azure", {"method": "DELETE", "template": template})
    assert chaos.is_instance_deletion("aws", {"action": "TerminateInstanceInAutoScalingGroup"})
    assert not chaos.is_instance_deletion("aws", {"action": "TerminateInstances"})


class _Watch:
    """The part of world.ClusterWatch the trigger reads."""

    def __init__(self, nodes):
        self.nodes, self.lock, self.pods = nodes, threading.Lock(), {}

    def snapshot(self):
        return {k: dict(v) for k, v in self.nodes.items()}, {}


def test_a_drain_counts_only_when_it_began_after_the_run_started():
    watch = _Watch({"resumed": {"phases": {"draining": 90.0}, "phase": "draining"},
                    "gone": {"phases": {"draining": 120.0}, "phase": "draining", "deleted": 121.0}})
    assert chaos.aim_trigger("draining", watch, None, "gcp", 100.0, 0) is None
    watch.nodes["fresh"] = {"phases": {"paired": 95.0, "draining": 130.0}, "phase": "draining"}
    assert chaos.aim_trigger("draining", watch, None, "gcp", 100.0, 0) == {"node": "fresh", "seen": 130.0}
    watch.pods = {"u1": {"node": "fresh", "daemonset": False}, "u2": {"node": "fresh", "daemonset": True}}
    met = chaos.at_kill("draining", {"node": "fresh", "seen": 130.0}, watch)
    assert met["phase"] == "draining" and met["pods_left"] == 1


class _Admin:
    def __init__(self, entries):
        self.entries = entries

    def requests(self):
        return list(self.entries)


def test_a_deletion_counts_only_when_requested_by_this_run():
    old = {"action": "TerminateInstanceInAutoScalingGroup"}
    admin = _Admin([old, {"action": "DescribeAutoScalingGroups"}])
    assert chaos.aim_trigger("deleting", None, admin, "aws", 0.0, 1) is None
    admin.entries.append({"action": "TerminateInstanceInAutoScalingGroup"})
    assert chaos.aim_trigger("deleting", None, admin, "aws", 0.0, 1)["request"] == "TerminateInstanceInAutoScalingGroup"
