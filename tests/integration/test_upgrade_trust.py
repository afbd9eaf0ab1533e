"""Issue 13 on the sandbox: with corrupted annotations, the destructive modules (node_drain, node_delete,
csp_node) refuse with a named problem and node_image_facts plans nothing destructive for the nodes
concerned, so nothing changes: nodes, labels, annotations, taints, cordons, instances per group, the group's
image and the etcd members are compared before and after each class of corruption. One scaling group on the
AWS emulator (moto in server mode, real HTTP) in the shared sandbox, one scenario per class."""

import time
import uuid

import pytest

from tests.ansible_run import run_module

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]


def _wait(predicate, timeout, what, interval=0.5):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))
        time.sleep(interval)


def _ok(result):
    assert not result["failed"], result.get("msg", result)
    return result


class Cluster:
    """Three old workers and one heir on the new image in one AWS group, annotated the way the collection
    leaves them after its first pass: w0 paired with the heir h (mutual, h Ready), w1 and w2 outdated."""

    def __init__(self, sandbox, admin):
        self.sandbox, self.admin, self.kube = sandbox, admin, sandbox.kube()
        tag = uuid.uuid4().hex[:8]
        self.old, self.new = admin.create_image("old-" + tag), admin.create_image("new-" + tag)
        self.group = admin.create_group("trust-" + tag, "worker", 3, self.old)
        self.prefix = "t%s.kubenodes.test" % tag
        self.p = self.prefix + "/"
        self.cloud = admin.provider_options()
        self.common = dict(sandbox.auth_args(), **self.cloud)
        self.common.update(image=self.new, annotation_prefix=self.prefix, scaling_groups=[self.group],
                           exclude_labels=["sandbox.kubenodes.io/image"])

    def start(self):
        originals = _wait(lambda: [i for i, _s in self.admin.group_instances(self.group)]
                          if len(self.admin.group_instances(self.group)) == 3 else None, 60, "three instances")
        self.sandbox.wait_nodes_ready(originals, timeout=180)
        _ok(run_module("csp_scaling_group", dict(self.cloud, group=[self.group], image=self.new)))
        _ok(run_module("node_pair", self.common))                    # caches group and image annotations
        created = _ok(run_module("csp_node", dict(self.cloud, group=self.group, count=1, wait=True, wait_timeout=120,
                                                  wait_sleep=1)))
        (self.heir,) = created["node_names"]
        self.sandbox.wait_nodes_ready([self.heir], timeout=180)
        paired = _ok(run_module("node_pair", self.common))
        ((self.heir_seen, donor),) = [(p["heir"], p["donor"]) for p in paired["pairs"]]
        assert self.heir_seen == self.heir
        self.donor = donor
        self.others = sorted(set(originals) - {donor})
        self.baseline = {n: self.annotations(n) for n in originals + [self.heir]}

    def annotations(self, name):
        return dict(self.kube.request("GET", "/api/v1/nodes/" + name)["metadata"].get("annotations") or {})

    def annotate(self, name, values):
        self.kube.merge_patch("/api/v1/nodes/" + name, {"metadata": {"annotations": {self.p + k: v for k, v in values.items()}}})

    def restore(self):
        for name, before in self.baseline.items():
            now = self.annotations(name)
            patch = {k: None for k in now if k.startswith(self.p) and k not in before}
            patch.update({k: v for k, v in before.items() if k.startswith(self.p) and now.get(k) != v})
            if patch:
                self.kube.merge_patch("/api/v1/nodes/" + name, {"metadata": {"annotations": patch}})

    def world(self):
        """Everything a destructive step could change."""
        nodes = {}
        for name in self.baseline:
            node = self.kube.request("GET", "/api/v1/nodes/" + name, ok=(200, 404))
            nodes[name] = None if node.get("kind") != "Node" else (
                node["metadata"].get("annotations"), node["metadata"].get("labels"),
                node["spec"].get("taints"), bool(node["spec"].get("unschedulable")))
        # The cloud through the collection's own provider, in-process (a playbook per look would cost seconds).
        provider = self.provider()
        instances = provider.list_instances(self.group)
        members = sorted(self.sandbox.cp_etcd()["members"])
        return dict(nodes=nodes, instances=sorted((i.provider_id, i.state, i.image) for i in instances),
                    group_image=[g.image for g in provider.list_groups([self.group])], etcd=members)

    def provider(self):
        from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers.factory import (  # pylint: disable=import-outside-toplevel
            PROVIDERS, build_provider)

        options = {key: spec.get("default") for key, spec in PROVIDERS["aws"].ARG_SPEC.items()}
        options.update(self.cloud["aws"])
        return build_provider({"provider": "aws", "aws": options})

    def facts(self):
        return _ok(run_module("node_image_facts", self.common))

    def drain(self, name, state="drained"):
        return run_module("node_drain", dict(self.sandbox.auth_args(), name=name, state=state, annotation_prefix=self.prefix))

    def delete(self, name):
        return run_module("node_delete", dict(self.sandbox.auth_args(), name=[name], annotation_prefix=self.prefix))

    def provider_id(self, name):
        return self.kube.request("GET", "/api/v1/nodes/" + name)["spec"]["providerID"]


@pytest.fixture(scope="module")
def cluster(sandbox):
    admin = sandbox.cloud("aws")
    if admin is None:
        pytest.skip("the aws emulator is not available in this checkout")
    c = Cluster(sandbox, admin)
    try:
        c.start()
        yield c
    finally:
        admin.autoscaling.update_auto_scaling_group(AutoScalingGroupName=c.group, MinSize=0, DesiredCapacity=0)
        for instance_id, _state in admin.group_instances(c.group):
            c.kube.request("DELETE", "/api/v1/nodes/" + instance_id, ok=(200, 202, 404))


@pytest.fixture
def scenario(cluster):
    cluster.restore()
    yield cluster
    cluster.restore()


def destructive(facts):
    plan = facts["plan"]
    return ({d["name"] for d in plan["drain"]} | {e["name"] for e in plan["etcd_remove"]}
            | {d["name"] for d in plan["delete_nodes"]} | {d["node_name"] for d in plan["delete_instances"]})


def messages(facts, node):
    return [p["message"] for p in facts["problems"] if p["node"] == node]


def test_a_consistent_pair_is_planned_and_nothing_else(scenario):
    c = scenario
    facts = c.facts()
    assert destructive(facts) == {c.donor} and facts["problems"] == [] and facts["stop"] is None


def test_garbage_heir_on_a_ready_worker(scenario):
    c = scenario
    victim = c.others[0]
    c.annotate(victim, {"heir": "garbage!!"})
    before = c.world()
    facts = c.facts()
    assert victim not in destructive(facts)
    assert "node %s: heir annotation holds 'garbage!!', which is not a node name" % victim in messages(facts, victim)
    deleted = c.delete(victim)
    assert deleted["failed"] and "heir annotation holds 'garbage!!'" in deleted["msg"], deleted
    assert deleted["problems"][0]["code"] == "garbage_heir"
    drained = c.drain(victim)
    assert drained["failed"] and drained["reason"] == "inconsistent", drained
    cordoned = c.drain(victim, state="cordoned")
    assert cordoned["failed"] and cordoned["reason"] == "inconsistent", cordoned
    assert c.world() == before


def test_missing_heir_with_phase_deleting(scenario):
    c = scenario
    victim = c.others[0]
    c.annotate(victim, {"heir": "ghost-" + uuid.uuid4().hex[:6], "phase": "deleting"})
    before = c.world()
    facts = c.facts()
    assert victim not in destructive(facts)
    assert any("did not record it" in m for m in messages(facts, victim)), facts["problems"]
    deleted = c.delete(victim)
    assert deleted["failed"] and "which does not exist" in deleted["msg"] and "not cordoned" in deleted["msg"], deleted
    gone = run_module("csp_node", dict(c.cloud, state="absent", provider_id=[c.provider_id(c.heir)], outdated_for=c.new))
    assert gone["failed"] and "already runs the target image" in gone["msg"], gone
    assert c.world() == before


def test_up_to_date_worker_marked_obsolete_by_someone_else(scenario):
    c = scenario
    c.annotate(c.heir, {"obsolete": "true"})
    before = c.world()
    facts = c.facts()
    assert destructive(facts) == set()          # the heir, and with it its donor, are left alone
    assert any("obsolete=true was not set by this collection" in m for m in messages(facts, c.heir))
    assert messages(facts, c.donor)
    drained = c.drain(c.heir)
    assert drained["failed"] and drained["reason"] == "inconsistent", drained
    deleted = c.delete(c.heir)
    assert deleted["failed"] and "obsolete=true was not set by this collection" in deleted["msg"], deleted
    assert c.world() == before


def test_old_worker_claiming_the_target_and_another_worker_as_donor(scenario):
    c = scenario
    claimant, real = c.others
    c.annotate(claimant, {"node-image": c.new, "donor": real, "phase": "heir"})
    before = c.world()
    facts = c.facts()
    # The cloud wins: the claimant is outdated, its claim is cleared, nothing pairs the real worker with it.
    assert claimant in facts["nodes"]["outdated"] and real in facts["nodes"]["outdated"]
    assert any("the cloud wins" in m for m in messages(facts, claimant))
    assert not any(r["name"] == real for r in facts["plan"]["repairs"])
    assert not destructive(facts) & {claimant, real}
    deleted = c.delete(real)
    assert deleted["failed"] and "neither a donor" in deleted["msg"], deleted
    assert c.world() == before


def test_cached_image_claim_does_not_win_over_the_cloud(scenario):
    c = scenario
    victim = c.others[1]
    c.annotate(victim, {"node-image": c.new})
    before = c.world()
    facts = c.facts()
    assert victim in facts["nodes"]["outdated"]
    [note] = [p for p in facts["problems"] if p["node"] == victim]
    assert note["action"] == "corrected" and c.old in note["message"]
    # The donor's own instance: the cloud says it is outdated, so its deletion would be allowed; the heir's
    # is not, whatever its node's annotations say.
    refused = run_module("csp_node", dict(c.cloud, state="absent", provider_id=[c.provider_id(c.heir)], outdated_for=c.new))
    assert refused["failed"] and refused["reason"] == "inconsistent", refused
    assert c.world() == before
