"""upgrade_lock, autoscaler_pause and upgrade_journal through ansible-playbook against the sandbox's
real kube-apiserver, with their --diff; and fleet_report's --diff (it needs no cluster)."""

import datetime
import json
import socket
import time

import pytest
import yaml
from kubernetes import client as k8s

from ansible_collections.kubenodes.image_upgrade.plugins.modules import fleet_report
from tests.ansible_run import run_module, run_playbook

pytestmark = pytest.mark.timeout(300)


def lock(sandbox, namespace, diff=False, **args):
    return run_module("upgrade_lock", dict(sandbox.auth_args(), name="run-lock", namespace=namespace, **args), diff=diff)


def test_lock_is_exclusive_renewable_and_released(sandbox, namespace):
    coordination = k8s.CoordinationV1Api(sandbox.api_client())
    first = lock(sandbox, namespace, holder="run-a", diff=True)
    assert first["acquired"] and first["changed"] and first["action"] == "acquire", first
    assert first["diff"] == {"before": {"holder": "", "expires_at": ""},
                             "after": {"holder": "run-a", "expires_at": first["expires_at"]}}, first
    renewed = lock(sandbox, namespace, holder="run-a")
    assert renewed["acquired"] and renewed["action"] == "renew"

    blocked = lock(sandbox, namespace, holder="run-b")
    assert blocked["failed"] and "run-a" in blocked["msg"], blocked
    waiting = lock(sandbox, namespace, holder="run-b", fail_when_held=False, diff=True)
    assert not waiting["failed"] and not waiting["acquired"] and waiting["held_by"] == "run-a"
    assert "run-a" in waiting["msg"] and "diff" not in waiting, waiting

    foreign_release = lock(sandbox, namespace, holder="run-b", state="absent", diff=True)
    assert not foreign_release["changed"] and "diff" not in foreign_release, foreign_release
    assert coordination.read_namespaced_lease("run-lock", namespace).spec.holder_identity == "run-a"

    released = lock(sandbox, namespace, holder="run-a", state="absent", diff=True)
    assert released["changed"] and released["action"] == "release"
    assert released["diff"] == {"before": {"holder": "run-a", "expires_at": renewed["expires_at"]},
                                "after": {"holder": "", "expires_at": ""}}, released
    assert not coordination.read_namespaced_lease("run-lock", namespace).spec.holder_identity
    taken = lock(sandbox, namespace, holder="run-b")
    assert taken["acquired"] and taken["action"] == "acquire"


def test_expired_lease_and_dead_local_run_are_taken_over(sandbox, namespace):
    coordination = k8s.CoordinationV1Api(sandbox.api_client())
    past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=10)
    coordination.create_namespaced_lease(namespace, k8s.V1Lease(
        metadata=k8s.V1ObjectMeta(name="run-lock"),
        spec=k8s.V1LeaseSpec(holder_identity="awx-job-1", lease_duration_seconds=60, acquire_time=past, renew_time=past)))
    taken = lock(sandbox, namespace, holder="run-c")
    assert taken["acquired"] and taken["action"] == "take-over", taken

    # A run on this host whose process is gone (no such PID) is stale at once, well before expiry.
    dead = "%s/%d/12345" % (socket.gethostname(), 2 ** 22 + 17)
    lease = coordination.read_namespaced_lease("run-lock", namespace)
    lease.spec.holder_identity = dead
    lease.spec.renew_time = datetime.datetime.now(datetime.timezone.utc)
    lease.spec.lease_duration_seconds = 3600
    coordination.replace_namespaced_lease("run-lock", namespace, lease)
    resumed = lock(sandbox, namespace, holder="run-d")
    assert resumed["acquired"] and resumed["action"] == "take-over", resumed


def test_a_lease_with_no_time_or_held_by_pid_1_of_this_host_stays_held(sandbox, namespace):
    """Issue 28 item 6: a Lease another holder has with no acquire or renew time was taken over at once; a holder
    recorded as <this host>/1/... made every process of the host its own and told the user to stop them."""
    coordination = k8s.CoordinationV1Api(sandbox.api_client())
    coordination.create_namespaced_lease(namespace, k8s.V1Lease(
        metadata=k8s.V1ObjectMeta(name="run-lock"), spec=k8s.V1LeaseSpec(holder_identity="awx-job-9", lease_duration_seconds=60)))
    before = coordination.read_namespaced_lease("run-lock", namespace)
    held = lock(sandbox, namespace, holder="run-e")
    assert held["failed"] and not held["acquired"] and held["held_by"] == "awx-job-9", held
    assert "no readable acquire or renew time" in held["msg"] and "seen unchanged for 60 s" in held["msg"], held["msg"]
    assert "kubectl -n %s delete lease run-lock" % namespace in held["msg"], held["msg"]
    after = coordination.read_namespaced_lease("run-lock", namespace)
    assert after.metadata.resource_version == before.metadata.resource_version and after.spec.holder_identity == "awx-job-9"

    pid_1 = "%s/1/0/-" % socket.gethostname()
    after.spec.holder_identity, after.spec.renew_time = pid_1, datetime.datetime.now(datetime.timezone.utc)
    coordination.replace_namespaced_lease("run-lock", namespace, after)
    held = lock(sandbox, namespace, holder="run-f")
    assert held["failed"] and held["held_by"] == pid_1, held
    assert "still run on this host" not in held["msg"] and "stop them" not in held["msg"], held["msg"]
    assert coordination.read_namespaced_lease("run-lock", namespace).spec.holder_identity == pid_1


def test_lock_check_mode_writes_nothing(sandbox, namespace):
    coordination = k8s.CoordinationV1Api(sandbox.api_client())
    result = run_module("upgrade_lock", dict(sandbox.auth_args(), name="run-lock", namespace=namespace, holder="x"),
                        check=True, diff=True)
    assert result["changed"] and result["acquired"]
    assert result["diff"]["after"] == {"holder": "x", "expires_at": result["expires_at"]}, result
    with pytest.raises(k8s.ApiException) as error:
        coordination.read_namespaced_lease("run-lock", namespace)
    assert error.value.status == 404


def test_lock_rejects_bad_input_and_unreachable_api(sandbox, namespace, tmp_path):
    short = run_module("upgrade_lock", dict(sandbox.auth_args(), namespace=namespace, lease_duration=1))
    assert short["failed"] and "lease_duration must be a whole number from 10 to 2592000 (seconds), got 1" in short["msg"]
    missing = run_module("upgrade_lock", dict(kubeconfig=str(tmp_path / "nope"), namespace=namespace))
    assert missing["failed"] and "does not exist" in missing["msg"]


def test_lock_with_awx_bearer_token_variables_and_a_trailing_slash_host(sandbox, namespace):
    """AWX's Kubernetes bearer-token credential, as its injector writes it, with a host ending in '/'
    (AWX's own tests use one): the slash is dropped as kubernetes.core does, so the paths are not '//...'."""
    env = {"K8S_AUTH_HOST": sandbox.apiserver + "/", "K8S_AUTH_API_KEY": sandbox.admin_token,
           "K8S_AUTH_VERIFY_SSL": "True", "K8S_AUTH_SSL_CA_CERT": str(sandbox.ca)}
    args = dict(name="run-lock", namespace=namespace, holder="awx-job-1")
    taken = run_module("upgrade_lock", args, env=env)
    assert taken["acquired"] and taken["action"] == "acquire", taken
    released = run_module("upgrade_lock", dict(args, state="absent"), env=env)
    assert released["changed"] and released["action"] == "release", released
    lease = k8s.CoordinationV1Api(sandbox.api_client()).read_namespaced_lease("run-lock", namespace)
    assert not lease.spec.holder_identity


def test_lock_release_fails_on_a_404_that_is_not_a_missing_lease(sandbox, namespace):
    """Only the API server's NotFound for the Lease means 'nothing to release'. A host URL with a path the
    API server does not serve answers 404 too; releasing must fail then, not report success."""
    env = {"K8S_AUTH_HOST": sandbox.apiserver + "/not-served", "K8S_AUTH_API_KEY": sandbox.admin_token,
           "K8S_AUTH_SSL_CA_CERT": str(sandbox.ca)}
    result = run_module("upgrade_lock", dict(name="run-lock", namespace=namespace, holder="awx-job-1",
                                             state="absent"), env=env)
    assert result["failed"], result
    assert "Lease %s/run-lock" % namespace in result["msg"] and "404" in result["msg"], result["msg"]
    assert sandbox.admin_token not in json.dumps(result)


def test_lock_impersonating_a_user_in_several_groups(sandbox, namespace):
    """impersonate_groups with two groups sends both: only the second one may write Leases here."""
    rbac = k8s.RbacAuthorizationV1Api(sandbox.api_client())
    rbac.create_namespaced_role(namespace, k8s.V1Role(
        metadata=k8s.V1ObjectMeta(name="lease-writer"),
        rules=[k8s.V1PolicyRule(api_groups=["coordination.k8s.io"], resources=["leases"],
                                verbs=["get", "create", "update"])]))
    rbac.create_namespaced_role_binding(namespace, k8s.V1RoleBinding(
        metadata=k8s.V1ObjectMeta(name="lease-writer"),
        role_ref=k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="lease-writer"),
        subjects=[k8s.RbacV1Subject(kind="Group", name="lease-writers", api_group="rbac.authorization.k8s.io")]))
    args = dict(sandbox.auth_args(), name="run-lock", namespace=namespace, holder="awx-job-2",
                impersonate_user="awx-operator")
    only_first = run_module("upgrade_lock", dict(args, impersonate_groups=["readers"]))
    assert only_first["failed"] and "403" in only_first["msg"], only_first
    both = run_module("upgrade_lock", dict(args, impersonate_groups=["readers", "lease-writers"]))
    assert both["failed"] is False and both["acquired"], both
    lease = k8s.CoordinationV1Api(sandbox.api_client()).read_namespaced_lease("run-lock", namespace)
    assert lease.spec.holder_identity == "awx-job-2"


def test_a_client_whose_pool_was_widened_still_sends_every_impersonated_group(sandbox, namespace):
    """node_drain and the step engine widen the client's connection pool (a new RESTClientObject) for their
    concurrent evictions; the Impersonate-Group lines of a user in several groups must survive that."""
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import drain_api, kube

    rbac = k8s.RbacAuthorizationV1Api(sandbox.api_client())
    rbac.create_namespaced_role(namespace, k8s.V1Role(
        metadata=k8s.V1ObjectMeta(name="lease-reader"),
        rules=[k8s.V1PolicyRule(api_groups=["coordination.k8s.io"], resources=["leases"], verbs=["list"])]))
    rbac.create_namespaced_role_binding(namespace, k8s.V1RoleBinding(
        metadata=k8s.V1ObjectMeta(name="lease-reader"),
        role_ref=k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="lease-reader"),
        subjects=[k8s.RbacV1Subject(kind="Group", name="lease-readers", api_group="rbac.authorization.k8s.io")]))
    client = kube.build_api_client(dict(sandbox.auth_args(), impersonate_user="awx-operator",
                                        impersonate_groups=["readers", "lease-readers"]))
    path = "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % namespace
    # A new RoleBinding counts once the apiserver's RBAC authorizer has seen it through its informer: a 403 here came
    # in a clean-clone run on a busy machine. The client before widening waits for it, so that the call after widening
    # is the one that can fail only for a group it dropped.
    deadline = time.monotonic() + 30
    while True:
        try:
            assert kube.raw_get(client, path)["kind"] == "LeaseList"
            break
        except kube.ApiCallError as exc:
            if exc.status != 403 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    drain_api.widen_connection_pool(client, 64)
    assert client.configuration.connection_pool_maxsize == 64
    assert kube.raw_get(client, path)["kind"] == "LeaseList"


def autoscaler(sandbox, namespace, state, check=False, diff=False):
    return run_module("autoscaler_pause", dict(sandbox.auth_args(), namespace=namespace, state=state), check=check, diff=diff)


def make_deployment(sandbox, namespace, replicas):
    apps = k8s.AppsV1Api(sandbox.api_client())
    labels = {"app": "cluster-autoscaler"}
    apps.create_namespaced_deployment(namespace, k8s.V1Deployment(
        metadata=k8s.V1ObjectMeta(name="cluster-autoscaler"),
        spec=k8s.V1DeploymentSpec(replicas=replicas, selector=k8s.V1LabelSelector(match_labels=labels),
                                  template=k8s.V1PodTemplateSpec(
                                      metadata=k8s.V1ObjectMeta(labels=labels),
                                      spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="ca", image="ca:1")])))))
    return apps


def test_autoscaler_pause_remembers_and_restores_the_replicas(sandbox, namespace):
    apps = make_deployment(sandbox, namespace, 2)
    predicted = autoscaler(sandbox, namespace, "paused", check=True, diff=True)
    assert predicted["changed"] and predicted["diff"]["after"]["replicas"] == 0
    assert apps.read_namespaced_deployment("cluster-autoscaler", namespace).spec.replicas == 2

    paused = autoscaler(sandbox, namespace, "paused")
    assert paused["changed"] and paused["paused_replicas"] == 2
    deployment = apps.read_namespaced_deployment("cluster-autoscaler", namespace)
    assert deployment.spec.replicas == 0
    assert deployment.metadata.annotations["image-upgrade.kubenodes.io/paused-replicas"] == "2"
    again = autoscaler(sandbox, namespace, "paused")
    assert not again["changed"] and again["paused_replicas"] == 2

    restored = autoscaler(sandbox, namespace, "restored")
    assert restored["changed"] and restored["replicas"] == 2
    deployment = apps.read_namespaced_deployment("cluster-autoscaler", namespace)
    assert deployment.spec.replicas == 2
    assert "image-upgrade.kubenodes.io/paused-replicas" not in (deployment.metadata.annotations or {})
    assert not autoscaler(sandbox, namespace, "restored")["changed"]


def test_no_autoscaler_means_nothing_to_do(sandbox, namespace):
    result = autoscaler(sandbox, namespace, "paused")
    assert not result["failed"] and not result["changed"] and result["found"] is False


def test_journal_records_idempotently_and_reports(sandbox, namespace, tmp_path):
    base = dict(sandbox.auth_args(), namespace=namespace, image="img-b")
    observation = {"started": "2026-11-30T10:00:00Z", "passes": 2, "nodes": {"w-0": {
        "group": "g", "heir": "w-9", "role": "worker", "evicted": ["default/web-1"],
        "phases": {"paired": "2026-11-30T10:00:10Z", "draining": "2026-11-30T10:01:00Z", "deleted": "2026-11-30T10:02:00Z"}}}}
    first = run_module("upgrade_journal", dict(base, record=observation), diff=True)
    assert first["changed"] and first["journal"]["nodes"]["w-0"]["heir"] == "w-9"
    assert first["diff"] == {"before": {}, "after": first["journal"]}, first
    again = run_module("upgrade_journal", dict(base, record=observation), diff=True)
    assert not again["changed"] and "diff" not in again, again

    # --diff --check of the report: each file it would write, before (none yet) and after; nothing written.
    checked = run_module("upgrade_journal", dict(base, state="report", report_dir=str(tmp_path)), check=True, diff=True)
    assert [(d["after_header"], d["before"]) for d in checked["diff"]] == [(f, "") for f in checked["files"]], checked
    assert not list(tmp_path.iterdir())
    reported = run_module("upgrade_journal", dict(base, state="report", report_dir=str(tmp_path)))
    assert reported["summary"]["nodes_replaced"] == 1 and reported["summary"]["pods_evicted"] == 1
    summary = json.loads((tmp_path / "image-upgrade-report.json").read_text())
    assert summary["nodes"][0]["phase_seconds"] == {"paired": 50, "draining": 60, "deleted": 0}
    assert "| w-0 | w-9 | g | worker |" in (tmp_path / "image-upgrade-report.md").read_text()
    assert (tmp_path / "image-upgrade-report.svg").read_text().startswith("<svg")

    # Another image while that upgrade is unfinished: refused, naming new_target; with it, started afresh.
    refused = run_module("upgrade_journal", dict(base, image="img-c", record={"nodes": {}}))
    assert refused["failed"] and refused["reason"] == "target_conflict" and "new_target" in refused["msg"], refused
    fresh = run_module("upgrade_journal", dict(base, image="img-c", new_target=True, record={"nodes": {}}))
    assert fresh["changed"] and fresh["journal"]["nodes"] == {} and fresh["journal"]["image"] == "img-c"

    # A wrong-shaped journal is named malformed with how to reset it; state=absent resets it.
    sandbox.core_v1().patch_namespaced_config_map("kubenodes-image-upgrade-journal", namespace,
                                                  {"data": {"journal.json": "[1, 2]"}})
    malformed = run_module("upgrade_journal", dict(base, image="img-c", record={"passes": 1}))
    assert malformed["failed"] and malformed["reason"] == "malformed_journal", malformed
    assert "is malformed (it holds list, not a JSON object)" in malformed["msg"]
    assert "delete configmap kubenodes-image-upgrade-journal" in malformed["msg"]
    # A value of the wrong type deep inside (an int where a list is expected) is named, key and all, by every reader.
    sandbox.core_v1().patch_namespaced_config_map("kubenodes-image-upgrade-journal", namespace, {"data": {
        "journal.json": json.dumps({"image": "img-c", "nodes": {"w-0": {"evicted": 5}}})}})
    for args in (dict(base, image="img-c", record={"passes": 1}), dict(base, state="report", report_dir=str(tmp_path))):
        malformed = run_module("upgrade_journal", args)
        assert malformed["failed"] and malformed["reason"] == "malformed_journal", malformed
        assert ("journal ConfigMap %s/kubenodes-image-upgrade-journal is malformed (its nodes.w-0.evicted is 5, not a "
                "list)" % namespace) in malformed["msg"] and "correct that key, or delete it" in malformed["msg"], malformed

    gone = run_module("upgrade_journal", dict(base, state="absent"), diff=True)
    reset = {"before": {"malformed": "its nodes.w-0.evicted is 5, not a list"}, "after": {}}
    assert gone["changed"] and gone["diff"] == reset, gone
    again = run_module("upgrade_journal", dict(base, state="absent"), diff=True)
    assert not again["changed"] and "diff" not in again


def _finished_nodes(first, count, pods):
    return {"w-%05d" % i: {"group": "projects/p/zones/z/instanceGroupManagers/workers-%d" % (i % 10), "heir": "h-%05d" % i,
                           "role": "worker", "evicted": ["namespace-%d/pod-%05d-%02d" % (i % 7, i, p) for p in range(pods)],
                           "phases": {"paired": "2026-11-30T10:00:10Z", "draining": "2026-11-30T10:01:00Z",
                                      "deleted": "2026-11-30T10:02:00Z"}}
            for i in range(first, first + count)}


def test_journal_of_a_large_upgrade_fits_its_configmap(sandbox, namespace, tmp_path):
    """A ConfigMap holds at most 1 MiB: 1,500 replaced nodes with 30 evicted pods each (about 2 MB of names)
    are kept as counts, and 4,500 nodes in all are stored gzipped; the report still counts every pod."""
    base = dict(sandbox.auth_args(), namespace=namespace, image="img-b")
    in_flight = {"busy": {"group": "g", "heir": "busy-heir", "role": "worker", "evicted": ["ns/still-here"],
                          "phases": {"draining": "2026-11-30T10:03:00Z"}}}
    first = run_module("upgrade_journal", dict(base, record={"started": "2026-11-30T10:00:00Z",
                                                             "nodes": dict(_finished_nodes(0, 1500, 30), **in_flight)}))
    assert first["changed"] and not first.get("failed"), first.get("msg")
    stored = k8s.CoreV1Api(sandbox.api_client()).read_namespaced_config_map("kubenodes-image-upgrade-journal", namespace)
    assert set(stored.data) == {"journal.json"} and not stored.binary_data
    journal = json.loads(stored.data["journal.json"])
    assert journal["nodes"]["w-00000"]["evicted_count"] == 30 and journal["nodes"]["busy"]["evicted"] == ["ns/still-here"]

    second = run_module("upgrade_journal", dict(base, record={"nodes": _finished_nodes(1500, 3000, 0)}))
    assert second["changed"] and not second.get("failed"), second.get("msg")
    stored = k8s.CoreV1Api(sandbox.api_client()).read_namespaced_config_map("kubenodes-image-upgrade-journal", namespace)
    assert not stored.data and set(stored.binary_data) == {"journal.json.gz"}
    # Recording what is already there changes nothing, through the gzipped form too.
    assert not run_module("upgrade_journal", dict(base, record={"nodes": in_flight}))["changed"]

    reported = run_module("upgrade_journal", dict(base, state="report", report_dir=str(tmp_path)))
    assert reported["summary"]["nodes_total"] == 4501 and reported["summary"]["nodes_replaced"] == 4500
    assert reported["summary"]["pods_evicted"] == 1500 * 30 + 1


def _node_events(sandbox, node):
    answer = sandbox.core_v1().list_namespaced_event(
        "default", field_selector="involvedObject.kind=Node,involvedObject.name=%s" % node)
    return {(e.reason, e.message): e for e in answer.items if e.source and e.source.component == "kubenodes-image-upgrade"}


def test_journal_writes_each_step_as_one_event_on_its_node_and_aggregates_repeats(sandbox, namespace):
    donor, heir = "ev-" + namespace, "ev-heir-" + namespace
    base = dict(sandbox.auth_args(), namespace=namespace, image="img-b")
    problem = {"node": donor, "reason": "UpgradeProblem", "type": "Warning", "time": "2026-12-02T10:00:05Z",
               "message": "node %s: its phase-history is out of order" % donor}
    phases = {"paired": "2026-12-02T10:00:00Z", "heir-ready": "2026-12-02T10:00:02Z"}
    paired = {"passes": 1, "nodes": {donor: {"group": "g", "heir": heir, "phases": phases}}}
    # Check mode writes no Event; events=false neither.
    assert run_module("upgrade_journal", dict(base, record=paired), check=True)["changed"]
    assert not run_module("upgrade_journal", dict(base, record=dict(paired, events=[problem]), events=False))["failed"]
    assert _node_events(sandbox, donor) == {} and _node_events(sandbox, heir) == {}
    run_module("upgrade_journal", dict(base, state="absent"))

    first = run_module("upgrade_journal", dict(base, record=dict(paired, events=[problem])))
    assert first["changed"] and first["events_written"] == 3, first
    on_donor, on_heir = _node_events(sandbox, donor), _node_events(sandbox, heir)
    assert set(on_donor) == {("UpgradePaired", "to be replaced by %s in g" % heir), ("UpgradeProblem", problem["message"])}
    assert set(on_heir) == {("UpgradeHeirReady", "Ready: the heir of %s" % donor)}
    assert on_donor[("UpgradeProblem", problem["message"])].type == "Warning"
    assert on_donor[("UpgradePaired", "to be replaced by %s in g" % heir)].involved_object.uid == donor

    # The same pass again: the phases are known (no Event), the problem is aggregated into its Event.
    again = run_module("upgrade_journal", dict(base, record=dict(paired, events=[dict(problem, time="2026-12-02T10:01:05Z")])))
    assert again["changed"] and again["events_written"] == 1, again
    on_donor = _node_events(sandbox, donor)
    assert len(on_donor) == 2
    repeated = on_donor[("UpgradeProblem", problem["message"])]
    assert repeated.count == 2 and repeated.last_timestamp > repeated.first_timestamp
    assert on_donor[("UpgradePaired", "to be replaced by %s in g" % heir)].count == 1
    assert "events" not in json.dumps(again["journal"])

    # New phases: one new Event each. A drain cordons first in the same call, so its start is the cordon too.
    phases = {"draining": "2026-12-02T10:02:00Z", "drained": "2026-12-02T10:03:00Z"}
    drained = {"passes": 2, "nodes": {donor: {"evicted": ["web/a"], "phases": phases}}}
    third = run_module("upgrade_journal", dict(base, record=drained))
    assert third["events_written"] == 3, third
    on_donor = _node_events(sandbox, donor)
    assert ("UpgradeCordoned", "cordoned; its heir %s is Ready" % heir) in on_donor
    assert ("UpgradeDrainStarted", "drain started through the Eviction API; heir %s" % heir) in on_donor
    assert ("UpgradeDrained", "drained (1 pods evicted); heir %s" % heir) in on_donor


def test_fleet_report_diff_shows_each_report_file_it_writes(tmp_path):
    report_dir = tmp_path / "fleet"
    args = dict(state="report", batches=[1, "100%"], hosts=["canary", "rest"], report_dir=str(report_dir),
                clusters={"canary": {"outcome": "succeeded", "started": "2026-12-01T10:00:00Z",
                                     "finished": "2026-12-01T10:20:00Z"}})
    checked = run_module("fleet_report", args, check=True, diff=True)
    assert checked["changed"] and not report_dir.exists(), checked
    assert [(d["before_header"], d["before"]) for d in checked["diff"]] == [(f, "") for f in checked["files"]]
    written = run_module("fleet_report", args, diff=True)
    assert [d["after"] for d in written["diff"]] == [open(f).read() for f in written["files"]], written
    # The report carries the time it was made: a later run rewrites what changed, and its diff starts from the file.
    again = run_module("fleet_report", args, diff=True)
    assert again["changed"] == bool(again.get("diff")), again
    previous = {d["after_header"]: d["after"] for d in written["diff"]}
    assert all(d["before"] == previous[d["before_header"]] for d in again.get("diff", [])), again
    assert "diff" not in run_module("fleet_report", dict(args, state="plan"), diff=True)


def test_the_example_that_needs_no_cluster_runs_in_check_mode_as_written(tmp_path, monkeypatch):
    """Every module example is parsed and checked against its argument spec (tests/unit/test_doc_examples.py); the
    one that needs no cluster and no cloud, fleet_report's, also runs as the documentation shows it, in check mode:
    the report is planned (changed, with its diff) and nothing is written into its relative report_dir."""
    monkeypatch.chdir(tmp_path)
    # A fleet play's hosts are its clusters: the example's two, and one its batches have not reached.
    play = [{"hosts": "all", "connection": "local", "gather_facts": False, "tasks": yaml.safe_load(fleet_report.EXAMPLES)}]
    rc, output = run_playbook(play, check=True, diff=True, inventory="canary,eu-1,eu-2,")
    [task] = output["plays"][0]["tasks"]
    [result] = task["hosts"].values()
    assert rc == 0 and not result.get("failed") and result["changed"], result
    assert result["diff"] and result["summary"]["outcome"] == "failed", result   # its eu-1 failed a health gate
    assert list(tmp_path.iterdir()) == [], "check mode wrote %s" % list(tmp_path.iterdir())
