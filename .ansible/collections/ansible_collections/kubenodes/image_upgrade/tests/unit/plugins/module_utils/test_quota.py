"""The quota arithmetic (quota.py) and the providers' pure parsing of what the clouds report: headroom in
instances per limit, shared limits drawn down group by group, the surge the plan wants and the surge the
quota allows."""

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import quota
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import aws, azure, gce


def worker(gid, outdated, surge_limit=2, donor=0, in_flight=0, role="worker"):
    return dict(id=gid, role=role, outdated=outdated, donor=donor, surge_limit=surge_limit, in_flight=in_flight)


# ---------------------------------------------------------------- instances_that_fit and limits

@pytest.mark.parametrize("room, units, fit", [(4, 1, 4), (4.0, 2.0, 2), (5, 2, 2), (1, 2, 0), (0, 1, 0), (-3, 1, 0),
                                              (0.9999999999, 1, 1)])
def test_instances_that_fit(room, units, fit):
    assert quota.instances_that_fit(room, units) == fit


def test_instances_that_fit_refuses_a_non_positive_unit():
    with pytest.raises(ValueError):
        quota.instances_that_fit(4, 0)


def test_known_limit_gives_headroom_per_group_in_its_machine_type():
    lim = quota.known_limit("CPUS", "region r", 24.0, 16.0, {"small": 2, "big": 8}, unit=quota.UNIT_VCPUS)
    assert lim["headroom"] == {"small": 4, "big": 1}
    assert lim["limit"] == 24 and lim["usage"] == 16 and lim["groups"] == ["big", "small"]
    assert lim["description"] == "CPUS of region r: limit 24, usage 16 vCPUs (room for 1 in big, 4 in small)"


def test_unknown_limit_names_the_reason_and_constrains_nothing():
    lim = quota.unknown_limit("cores", "location l", ["g"], "403 AuthorizationFailed")
    granted, binding = quota.allocate([("g", 5)], [lim])
    assert granted == {"g": 5} and binding == {"g": None}
    assert "could not be read: 403 AuthorizationFailed" in lim["description"]


# ---------------------------------------------------------------- allocate

def test_a_shared_region_quota_is_drawn_down_group_by_group():
    region = quota.known_limit("INSTANCES", "region r", 10, 7, {"a": 1, "b": 1})
    granted, binding = quota.allocate([("a", 2), ("b", 2)], [region])
    assert granted == {"a": 2, "b": 1}
    assert binding["a"] is None and binding["b"]["name"] == "INSTANCES"


def test_the_tightest_limit_binds():
    instances = quota.known_limit("INSTANCES", "region r", 100, 0, {"a": 1})
    cpus = quota.known_limit("CPUS", "region r", 10, 4, {"a": 4}, unit=quota.UNIT_VCPUS)
    granted, binding = quota.allocate([("a", 3)], [instances, cpus])
    assert granted == {"a": 1} and binding["a"]["name"] == "CPUS"


limit_strategy = st.builds(
    lambda limit, usage, units: (limit, usage, units),
    st.integers(0, 50), st.integers(0, 60), st.dictionaries(st.sampled_from("abc"), st.integers(1, 8), min_size=1))


@settings(max_examples=200, deadline=None)
@given(st.lists(limit_strategy, max_size=4), st.dictionaries(st.sampled_from("abcd"), st.integers(0, 6)))
def test_allocate_never_exceeds_a_limit_nor_a_want(raw_limits, wants):
    limits = [quota.known_limit("L%d" % i, "s", lim, use, units) for i, (lim, use, units) in enumerate(raw_limits)]
    order = sorted(wants.items())
    granted = quota.allocate(order, limits)[0]
    for gid, want in order:
        assert 0 <= granted[gid] <= want
    for lim in limits:
        used = sum(granted.get(g, 0) * u for g, u in lim["units_per_instance"].items())
        assert used <= max(0, lim["limit"] - lim["usage"])
    # A group no limit covers gets everything it wants.
    covered = {g for lim in limits for g in lim["units_per_instance"]}
    for gid, want in order:
        if gid not in covered:
            assert granted[gid] == want


@settings(max_examples=200, deadline=None)
@given(st.lists(limit_strategy, max_size=4), st.dictionaries(st.sampled_from("abcd"), st.integers(0, 6)))
def test_allocate_grants_everything_when_every_limit_has_room_for_it(raw_limits, wants):
    need = sum(wants.values())
    limits = [quota.known_limit("L%d" % i, "s", use + need * max(units.values()), use, units)
              for i, (dummy, use, units) in enumerate(raw_limits)]
    granted, binding = quota.allocate(sorted(wants.items()), limits)
    assert granted == wants and all(b is None for b in binding.values())


# ---------------------------------------------------------------- surge wanted and allowed

def test_surge_wanted_is_the_peak_of_each_phase_within_max_surge_total():
    reports = [worker("cp", 1, surge_limit=1, role="control-plane"), worker("a", 5, surge_limit=2),
               worker("b", 1, surge_limit=3), worker("done", 0)]
    phases = quota.surge_phases(reports, max_surge_total=None)
    assert [(p["name"], p["cap"], p["groups"]) for p in phases] == [
        ("control-plane", 1, [("cp", 1, 0)]), ("workers", None, [("a", 2, 0), ("b", 1, 0)])]
    assert quota.assess(reports, [])["surge_wanted"] == 3
    assert quota.assess(reports, [], max_surge_total=2)["surge_wanted"] == 2


def test_room_for_fewer_than_the_surge_lowers_it_and_names_the_limit():
    region = quota.known_limit("INSTANCES", "region r", 4, 3, {"w": 1})
    result = quota.assess([worker("w", 2)], [region])
    assert (result["status"], result["surge_wanted"], result["surge_allowed"]) == ("lower", 2, 1)
    assert [l["name"] for l in result["limiting"]] == ["INSTANCES"]


def test_room_for_none_is_status_none():
    region = quota.known_limit("INSTANCES", "region r", 3, 3, {"w": 1})
    result = quota.assess([worker("w", 2)], [region])
    assert (result["status"], result["surge_allowed"]) == ("none", 0)


def test_the_control_plane_without_room_fails_even_when_workers_fit():
    cp_max = quota.known_limit("MaxSize", "group cp", 1, 1, {"cp": 1})
    result = quota.assess([worker("cp", 1, surge_limit=1, role="control-plane"), worker("w", 2)], [cp_max])
    assert result["status"] == "none" and result["limiting"][0]["name"] == "MaxSize"


def test_instances_in_flight_already_count_in_the_usage():
    # A resumed run: one heir in flight already fills the quota; it stays, no more are added.
    region = quota.known_limit("INSTANCES", "region r", 4, 4, {"w": 1})
    result = quota.assess([worker("w", 1, donor=1, in_flight=1)], [region])
    assert (result["status"], result["surge_wanted"], result["surge_allowed"]) == ("lower", 2, 1)


def test_unreadable_quota_is_status_unknown_and_listed():
    lim = quota.unknown_limit("region quotas", "region r", ["w"], "403")
    result = quota.assess([worker("w", 2)], [lim])
    assert result["status"] == "unknown" and result["surge_allowed"] == 2 and result["unknown"] == [lim]


def test_nothing_left_to_replace_is_ok_without_limits():
    assert quota.assess([worker("w", 0)], [])["status"] == "ok"


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 6), st.integers(1, 4), st.integers(0, 10), st.integers(0, 10), st.one_of(st.none(), st.integers(0, 5)))
def test_surge_allowed_never_exceeds_wanted_nor_the_room(outdated, surge, limit, usage, total):
    region = quota.known_limit("INSTANCES", "region r", limit, usage, {"w": 1})
    result = quota.assess([worker("w", outdated, surge_limit=surge)], [region], max_surge_total=total)
    assert result["surge_allowed"] <= result["surge_wanted"]
    assert result["surge_allowed"] <= max(0, limit - usage) or result["status"] == "ok"
    assert (result["status"] == "none") == (result["surge_wanted"] > 0 and max(0, limit - usage) == 0)


# ---------------------------------------------------------------- the clouds' answers (pure parsing)

def test_gce_family_metrics():
    assert gce.family_cpu_metric("n2-standard-4") == "N2_CPUS"
    assert gce.family_cpu_metric("c3-highcpu-8") == "C3_CPUS"
    assert gce.family_cpu_metric("e2-standard-2") is None
    assert gce.family_cpu_metric("custom-2-4096") is None
    assert gce.region_of_zone("europe-west4-b") == "europe-west4"


def test_gce_region_limits_use_the_family_metric_when_the_region_reports_it():
    quotas = {"INSTANCES": (24.0, 20.0), "CPUS": (24.0, 8.0), "N2_CPUS": (16.0, 12.0)}
    groups = [("e2", "e2-standard-2", 2), ("n2", "n2-standard-4", 4), ("c9", "c9-standard-4", 4)]
    limits = quota_by_name(gce.region_limits("p", "r", quotas, groups))
    assert limits["INSTANCES"]["headroom"] == {"e2": 4, "n2": 4, "c9": 4}
    assert limits["N2_CPUS"]["units_per_instance"] == {"n2": 4} and limits["N2_CPUS"]["headroom"] == {"n2": 1}
    # A family metric the region does not report (C9_CPUS) falls back to CPUS.
    assert limits["CPUS"]["units_per_instance"] == {"e2": 2, "c9": 4}


def test_gce_region_limits_with_an_unknown_machine_type():
    limits = quota_by_name(gce.region_limits("p", "r", {"CPUS": (8.0, 0.0)}, [("g", "", None)]))
    assert not limits["CPUS"]["known"] and "unknown" in limits["CPUS"]["reason"]


def test_azure_sku_facts_and_location_limits():
    skus = [{"resourceType": "disks", "name": "Standard_D2s_v5"},
            {"resourceType": "virtualMachines", "name": "Standard_D2s_v5", "family": "standardDSv5Family",
             "capabilities": [{"name": "vCPUs", "value": "2"}]}]
    assert azure.sku_facts(skus, "standard_d2s_v5") == (2, "standardDSv5Family")
    assert azure.sku_facts(skus, "Standard_E2s_v5") == (None, None)
    usages = {"cores": (10, 6), "standardDSv5Family": (8, 6), "virtualMachines": (100, 3)}
    limits = quota_by_name(azure.location_limits("westeurope", usages, [("g", 2, "standardDSv5Family")]))
    assert limits["cores"]["headroom"] == {"g": 2}
    assert limits["standardDSv5Family"]["headroom"] == {"g": 1}
    assert limits["virtualMachines"]["headroom"] == {"g": 97}


def test_aws_group_and_vcpu_limits():
    [max_size] = aws.group_limits([{"AutoScalingGroupName": "w", "MaxSize": 4, "DesiredCapacity": 3}])
    assert max_size["headroom"] == {"w": 1} and max_size["scope"] == "auto scaling group w"
    vcpu = aws.vcpu_limit("us-east-1", 16.0, ["m5.large", "m5.large", "p3.2xlarge", "t3.micro"],
                          {"m5.large": 2, "p3.2xlarge": 8, "t3.micro": 2, "g5.xlarge": 4},
                          {"w": "m5.large", "gpu": "g5.xlarge"})
    assert vcpu["usage"] == 6                      # the P instance counts against its own quota
    assert vcpu["units_per_instance"] == {"w": 2}  # and the G group is not constrained by this one
    assert vcpu["headroom"] == {"w": 5}
    assert aws.is_standard_instance_type("t3.micro") and aws.is_standard_instance_type("r6g.large")
    assert not aws.is_standard_instance_type("inf2.xlarge") and not aws.is_standard_instance_type("x2idn.large")


def quota_by_name(limits):
    return {l["name"]: l for l in limits}
