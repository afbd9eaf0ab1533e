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
        assert set(knobs) == {"latency", "op_delay", "boot_delay", "delete_delay"}
        assert knobs["latency"] == makespan.REALISTIC[cloud]["latency"]
        assert knobs["boot_delay"] == makespan.REALISTIC[cloud]["boot_delay"] * 0.5
