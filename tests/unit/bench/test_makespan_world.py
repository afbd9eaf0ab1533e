"""The worlds bench/makespan.py seeds (pure parts): one PDB-guarded Deployment per group in the large world."""

from bench import bound, makespan


def test_the_large_world_has_one_small_pdb_guarded_deployment_per_group_kept_on_its_nodes():
    objs = makespan.world_objects("bench", 0, {"g-b": 2, "g-a": 2})
    deployments = [o for _path, o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] != "cluster-autoscaler"]
    pdbs = [o for _path, o in objs if o["kind"] == "PodDisruptionBudget"]
    assert [d["metadata"]["name"] for d in deployments] == ["app-0", "app-1"]
    assert [d["spec"]["template"]["spec"]["nodeSelector"] for d in deployments] == [
        {makespan.GROUP_LABEL: "g-a"}, {makespan.GROUP_LABEL: "g-b"}]
    assert [d["spec"]["replicas"] for d in deployments] == [2, 2]
    assert [(p["metadata"]["name"], p["spec"]["maxUnavailable"]) for p in pdbs] == [("app-0", 1), ("app-1", 1)]
    assert all(p["spec"]["selector"] == d["spec"]["selector"] for p, d in zip(pdbs, deployments))


def test_the_small_world_keeps_one_deployment_of_a_replica_per_worker():
    objs = makespan.world_objects("bench", 8)
    [deployment] = [o for _path, o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "app"]
    assert deployment["spec"]["replicas"] == 8 and "nodeSelector" not in deployment["spec"]["template"]["spec"]


def test_ten_percent_per_group_of_a_thousand_workers_is_ten_waves_of_a_hundred():
    assert bound.worker_waves([100] * 10, makespan.ARMS["surge10pct"]["rolling_upgrade_max_surge"]) == (10, 100)


def test_every_cloud_has_realistic_timings_and_the_durations_are_scaled():
    for cloud in ("gcp", "azure", "aws"):
        knobs = makespan.realistic_knobs(0.5, cloud)
        assert set(knobs) == set(makespan.EMULATOR_KNOBS[cloud]) >= {"latency", "boot_delay", "delete_delay"}
        assert knobs["latency"] == makespan.REALISTIC[cloud]["latency"]
        assert knobs["delete_delay"] == makespan.REALISTIC[cloud]["delete_delay"] * 0.5
    assert makespan.realistic_knobs(0.5, "gcp")["boot_delay"] == makespan.REALISTIC_GCE["boot_delay"] * 0.5
    # Azure's scale-out operation ends when its VM runs: the emulator's boot takes the longer of the two.
    azure = makespan.REALISTIC_AZURE
    assert makespan.realistic_knobs(0.5, "azure")["boot_delay"] == max(azure["op_delay"], azure["boot_delay"]) * 0.5


def test_each_emulator_gets_the_realistic_figures_under_its_own_knob_names():
    class Admin:
        def __init__(self):
            self.calls = []

        def _call(self, method, what, body):
            self.calls.append(("_call", method, what, body))

        def set_faults(self, **knobs):
            self.calls.append(("set_faults", knobs))

    for cloud, expected in (("gcp", [("_call", "POST", "faults", {"latency": 0.2, "op_delay": 2.5, "boot_delay": 12.5,
                                                                  "delete_delay": 15.0})]),
                            ("azure", [("set_faults", {"latency": 0.2, "boot_delay": 30.0, "delete_delay": 30.0})]),
                            ("aws", [("set_faults", {"latency": 0.15, "launch_delay": 8.0, "terminate_delay": 15.0})])):
        admin = Admin()
        makespan.set_realistic(admin, cloud, makespan.realistic_knobs(0.5, cloud))
        assert admin.calls == expected, cloud


def test_off_gce_a_deletion_is_timed_from_the_nodes_deletion():
    donors = {"a": {"deleted": 10.0}, "b": {"deleted": 20.0}, "c": {"deleted": None}, "d": {"deleted": 30.0}}
    assert makespan.node_delete_times(donors, {"a": 14.5, "b": None, "c": 40.0, "d": 29.0}) == {"a": 4.5}


def test_on_gce_a_deletion_is_timed_from_its_own_request_not_a_later_donors():
    path = "/compute/v1/projects/p/zones/z/instanceGroupManagers/workers-0/deleteInstances"
    requests = [{"method": "POST", "path": path, "at": 10.0}, {"method": "POST", "path": path, "at": 12.0},
                {"method": "POST", "path": path.replace("workers-0", "workers-1"), "at": 11.0}]
    # a's Node went right after its request (10.3), b's after the next (12.2); both instances gone 15 s after theirs.
    gone = {"a": ("workers-0", 25.0, 10.3), "b": ("workers-0", 27.0, 12.2), "c": ("workers-1", 26.0, None)}
    assert makespan.delete_times(requests, gone) == {"a": 15.0, "b": 15.0, "c": 15.0}
