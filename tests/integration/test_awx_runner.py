"""The AWX fit, tested the way AWX runs a job: examples/awx-project through ansible-runner, with a private
data directory holding the survey answers (env/extravars), the credentials exactly as AWX's injectors write
them (env/envvars, files in env/, -e @file for custom types; see awx_job.py) and --check for a job of type
Check. One sandbox (one control plane, one worker, on the GCP emulator insisting on credentials):

- a Check job with AWX's Kubernetes bearer-token credential (a ServiceAccount bound to rbac.yml, its CA file,
  a host ending in '/' as AWX's own tests use), AWX's GCE credential (the key file AWX writes) and the etcd
  client certificate type (rendered as AWX renders custom injectors): the preflight checks the control-plane
  etcd with the credential's files, and the plan is published as job artifacts;
- a Run job with the kubeconfig credential type that stops in its first pass: the rescue path publishes the
  report with the cause;
- a Run job to the end (the worker group): the report is published, with one row per node;
- a Check job with AWX's AWS credential on an AWS auto scaling group added to the cluster;
- last, Check jobs with AWX's Azure credential on an Azure scale set added to the cluster, logging in at the
  Azure emulator's Entra ID token endpoint: a service principal (AZURE_CLIENT_ID/AZURE_SECRET/AZURE_TENANT),
  the same with a wrong secret (the job fails naming the credential), and a user (AZURE_AD_USER/AZURE_PASSWORD).
No token, key or secret of any credential appears in the runner's stdout, job events or artifacts.
"""

import json
import pathlib
import subprocess
import sys
import time
import uuid

import pytest

import awx_job
import upgrade_helpers as uh
from sandbox import binaries
from tests.ansible_run import REPO
from tests.integration import conftest as fixtures

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 600
EMAIL = "awx-upgrader@%s.iam.gserviceaccount.com"
ETCD_TASK = "Read the control-plane etcd on the etcd host (pass 0)"


@pytest.fixture(scope="module")
def cluster():
    handle = fixtures._start("kubenodes-awx-", ["gcp", "aws", "azure"])  # pylint: disable=protected-access
    try:
        values, start = uh.prepare(handle, "gcp", control_planes=1, workers=1, groups=1)
        admin = handle.cloud("gcp")
        key = admin.create_service_account(EMAIL % admin.project)
        admin.set_faults(require_auth=True)  # from here on only the job's credential gets in
        yield handle, values, start, key
    finally:
        fixtures._stop(handle)  # pylint: disable=protected-access


@pytest.fixture(scope="module")
def service_account_token(cluster):
    handle = cluster[0]
    return uh.least_privilege_auth(handle)["api_key"]


def survey_and_template_vars(values, **more):
    """What AWX puts into env/extravars: the survey answers (strings, as AWX gives text answers) and the job
    template's variables: here the emulator's endpoint (a real job uses Google's) and the fast sandbox
    settings; never a credential."""
    gcp = {k: v for k, v in values["rolling_upgrade_gcp"].items() if k in ("endpoint", "ca_bundle")}
    answers = {"image": values["rolling_upgrade_image"], "provider": "gcp", "max_surge": "1", "gcp": gcp}
    for name in ("rolling_upgrade_pass_delay", "rolling_upgrade_heir_ready_seconds", "rolling_upgrade_lb_drain_seconds",
                 "rolling_upgrade_join_timeout",
                 "rolling_upgrade_drain_timeout", "rolling_upgrade_drain_force", "rolling_upgrade_copy_labels_exclude",
                 "rolling_upgrade_lock_duration", "rolling_upgrade_timeout", "_rolling_upgrade_passes_per_chain",
                 "rolling_upgrade_scaling_groups", "rolling_upgrade_preflight",
                 "rolling_upgrade_report_dir"):
        if name in values:
            answers[name] = values[name]
    answers.update(more)
    return answers


def etcd_inputs(handle):
    etcd = handle.cp_etcd()
    return {"etcd_ca_cert": pathlib.Path(etcd["ca"]).read_text(),
            "etcd_client_cert": pathlib.Path(etcd["cert"]).read_text(),
            "etcd_client_key": pathlib.Path(etcd["key"]).read_text()}


def awx_credentials(job, handle, key, token, etcd=True):
    """The credentials a job template of docs/awx.md attaches: bearer token, GCE, etcd client certificate."""
    job.kubernetes_bearer_token(handle.apiserver + "/", token, pathlib.Path(handle.ca).read_text())
    job.gce(key["client_email"], key["project_id"], key["private_key"])
    if etcd:
        return job.custom(awx_job.credential_type("etcd"), etcd_inputs(handle))
    return None


def secrets_of(handle, key, token):
    return [token, key["private_key"].split("\n")[1], etcd_inputs(handle)["etcd_client_key"].split("\n")[1]]


def interpreter_that_logs(tmp_path):
    """(path, log): a Python interpreter for an inventory host that writes each module it runs to `log`."""
    log = tmp_path / "etcd-host-python.log"
    wrapper = tmp_path / "etcd-host-python"
    wrapper.write_text('#!/bin/sh\necho "$@" >> %s\nexec %s "$@"\n' % (log, sys.executable))
    wrapper.chmod(0o755)
    return wrapper, log


def test_check_job_with_awx_credentials_checks_etcd_and_publishes_the_plan(cluster, service_account_token, tmp_path):
    """Also: the etcd steps delegated to a control-plane host of the inventory run with that host's Python,
    not the controller's (upgrade_nodes.yml once set ansible_python_interpreter as a play variable, which
    applied to delegated tasks too); and this first plan on a cluster nobody has upgraded names each node's
    scaling group (it once said "node X in None")."""
    handle, values, start, key = cluster
    admin = handle.cloud("gcp")
    python, python_log = interpreter_that_logs(tmp_path)
    job = awx_job.Job(tmp_path, survey_and_template_vars(values, rolling_upgrade_etcd_delegate_to="etcd-cp"),
                      check=True, inventory="etcd-cp ansible_connection=local ansible_python_interpreter=%s\n" % python)
    env, extra_vars = awx_credentials(job, handle, key, service_account_token)
    # The etcd credential type gives the role its three variables, paths of files in the job's env/ holding
    # the PEM texts.
    assert env == {}
    assert sorted(extra_vars) == ["rolling_upgrade_etcd_ca_cert", "rolling_upgrade_etcd_client_cert",
                                  "rolling_upgrade_etcd_client_key"]
    for name, field in (("ca_cert", "etcd_ca_cert"), ("client_cert", "etcd_client_cert"), ("client_key", "etcd_client_key")):
        path = pathlib.Path(extra_vars["rolling_upgrade_etcd_" + name])
        assert path.parent == job.dir / "env" and path.read_text() == etcd_inputs(handle)[field]
    grants_before = len(admin.token_grants())

    result = job.run(timeout=RUN_TIMEOUT)
    assert result.rc == 0 and result.status == "successful", result.describe()

    # The preflight read etcd with the credential's files (a control-plane node is to be replaced), on the
    # delegated host with that host's Python: the only module that ran there.
    [health] = result.task_results(ETCD_TASK)
    assert health["healthy"] is True, health
    assert health["invocation"]["module_args"]["client_key"] == extra_vars["rolling_upgrade_etcd_client_key"]
    assert "localhost -> etcd-cp" in result.stdout
    ran_there = python_log.read_text().splitlines() if python_log.exists() else []
    assert len(ran_there) == 1 and "AnsiballZ_etcd_member_info.py" in ran_there[0], ran_there
    # The order names each node's scaling group, read from this plan (no node has the annotation yet).
    [order] = [r["check_plan"]["order"] for r in result.task_results("") if "check_plan" in r]
    assert " in None" not in order, order
    for label, names in start["groups"].items():
        for name in names:
            assert "%s in %s" % (name, start["group_ids"][label]) in order, order
    # The GCE credential's key signed the calls (the emulator checked each signature).
    grants = admin.token_grants()[grants_before:]
    assert grants and {g["iss"] for g in grants} == {key["client_email"]}

    plan = result.artifacts["image_upgrade"]
    assert plan["kind"] == "plan" and plan["outcome"] == "planned", plan
    assert plan["image"] == values["rolling_upgrade_image"] and plan["provider"] == "gcp"
    assert plan["summary"]["nodes_to_replace"] == len(start["node_names"]) == 2
    assert plan["summary"]["nodes_on_image"] == 0 and plan["summary"]["stop"] is None
    assert sorted(n["node"] for n in plan["nodes"]) == start["node_names"]
    assert plan["nodes"][0]["role"] == "control-plane"  # the control plane goes first
    # Check mode changed nothing: no Lease, no annotation.
    assert uh.lease_holder(handle) is None and not uh.node_annotations_with_prefix(handle)
    assert not result.leaks(*secrets_of(handle, key, service_account_token))
    # The token did reach the job (the runner's command file holds the job's environment), so its absence
    # from stdout, events and artifacts is the masking's doing.
    assert service_account_token in (result.artifact_dir / "command").read_text()


def inline_kubeconfig(handle):
    """The admin kubeconfig with every certificate and key inline, as a kubeconfig credential must hold it."""
    kubectl = [str(binaries.path_of("kubectl")), "--kubeconfig", handle.kubeconfig]
    return subprocess.run(kubectl + ["config", "view", "--flatten", "--raw"], check=True, capture_output=True,
                          text=True, timeout=60).stdout


def test_run_jobs_publish_the_report_when_they_fail_and_when_they_finish(cluster, service_account_token, tmp_path):
    """First rolling_upgrade_timeout 1: the run takes the lock and stops in its first pass, before any change to
    a node, through the role's rescue path, which publishes the report with the cause. Then the same job
    template without it runs the upgrade to its end and publishes the report, one row per node."""
    handle, values, start, key = cluster
    secrets = secrets_of(handle, key, service_account_token)
    # The worker group only (one replacement, the Check job above covered the control plane and etcd): the
    # time a job takes is the tests' budget.
    values = dict(values)
    upgraded = uh.limit_to_groups(values, start, ["workers-0"])
    workers = sorted(n for label in upgraded for n in start["groups"][label])
    # This job reaches the cluster through the kubeconfig credential type instead of the bearer token.
    # The Check job above ran the preflight; these runs leave it out to keep the jobs short.
    values["rolling_upgrade_preflight"] = False
    # No report_dir: the default lands where ansible-playbook started (ansible-runner: the project directory),
    # not in the collection's playbooks/ directory, the directory of the imported play.
    job = awx_job.Job(tmp_path, survey_and_template_vars(
        {k: v for k, v in values.items() if k != "rolling_upgrade_report_dir"}, rolling_upgrade_timeout=1))
    kubeconfig = inline_kubeconfig(handle)
    env, extra_vars = job.custom(awx_job.credential_type("kubeconfig"), {"kubeconfig": kubeconfig})
    assert extra_vars == {} and list(env) == ["K8S_AUTH_KUBECONFIG"]
    assert pathlib.Path(env["K8S_AUTH_KUBECONFIG"]).read_text() == kubeconfig
    job.gce(key["client_email"], key["project_id"], key["private_key"])
    job.custom(awx_job.credential_type("etcd"), etcd_inputs(handle))
    client_key = [line for line in kubeconfig.splitlines() if "client-key-data" in line][0].split(":", 1)[1].strip()
    result = job.run(timeout=RUN_TIMEOUT)
    assert result.rc != 0 and result.status == "failed", result.describe()
    assert not result.leaks(client_key)
    report = result.artifacts["image_upgrade"]
    assert report["kind"] == "run" and report["outcome"] == "failed", report
    assert "rolling_upgrade_timeout (1s)" in report["cause"] and "pass 1" in report["cause"], report["cause"]
    assert report["target_image"] == values["rolling_upgrade_image"]
    assert report["summary"]["attempt_outcomes"] == {"failed": 1}
    assert report["summary"]["nodes_replaced"] == 0
    assert uh.lease_holder(handle) is None  # released on the way out
    assert not result.leaks(*secrets)
    written = json.loads((job.dir / "project" / "image-upgrade-report" / "image-upgrade-report.json").read_text())
    assert written["attempt_outcomes"] == {"failed": 1}
    assert not (REPO / "playbooks" / "image-upgrade-report").exists()

    # The same job template without the timeout runs the upgrade to its end.
    job = awx_job.Job(tmp_path, survey_and_template_vars(values))
    awx_credentials(job, handle, key, service_account_token)
    result = job.run(timeout=RUN_TIMEOUT)
    assert result.rc == 0 and result.status == "successful", result.describe()
    report = result.artifacts["image_upgrade"]
    assert report["kind"] == "run" and report["outcome"] == "done" and report["cause"] == "", report
    summary = report["summary"]
    assert summary["nodes_total"] == summary["nodes_replaced"] == len(workers) == 1
    assert summary["attempt_outcomes"] == {"failed": 1, "done": 1}  # both jobs worked on this upgrade
    assert [row["node"] for row in report["nodes"]] == workers
    [row] = report["nodes"]
    assert row["done"] is True and row["phase"] == "deleted" and row["role"] == "worker", row
    assert row["heir"] and row["heir"] not in start["node_names"] and row["seconds"] > 0 and row["error"] == ""
    # What AWX stores is small.
    assert len(json.dumps(result.artifacts)) < 5000
    assert not result.leaks(*secrets)


def group_node(handle, group, timeout=120):
    """The Node of the one instance of scaling group `group`, once Ready: (provider ID, node name)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [i for i in handle.nodesim.instances() if i["group_id"] == group and i["state"] != "deleted"]
        if found:
            handle.wait_nodes_ready([found[0]["node_name"]], timeout=max(1, deadline - time.monotonic()))
            return found[0]["provider_id"], found[0]["node_name"]
        assert time.monotonic() < deadline, "no instance of group %s booted" % group
        time.sleep(0.5)


def test_check_job_with_the_awx_aws_credential(cluster, service_account_token, tmp_path):
    """AWX's AWS credential (access key, secret and STS token, as its injector writes them) is all the job has
    for AWS: the runner's environment holds no other. Runs last: it adds an AWS group's node to the cluster,
    which it removes again."""
    handle, values, start, key = cluster
    admin = handle.cloud("aws")
    image_b = admin.create_image("awx-b")
    group = admin.create_group("awx-workers", "worker", 1, admin.create_image("awx-a"))
    provider_id, node = group_node(handle, group)
    try:
        aws = admin.provider_options()["aws"]
        secret, sts = "awx-aws-secret-" + uuid.uuid4().hex, "awx-aws-sts-" + uuid.uuid4().hex
        job = awx_job.Job(tmp_path, {
            "image": image_b, "provider": "aws", "max_surge": "1",
            "aws": {"region": aws["region"], "endpoint_url": aws["endpoint_url"]},
            "rolling_upgrade_scaling_groups": [group],
            "rolling_upgrade_report_dir": values["rolling_upgrade_report_dir"]}, check=True)
        job.kubernetes_bearer_token(handle.apiserver, service_account_token, pathlib.Path(handle.ca).read_text())
        job.aws("AKIAAWXJOB", secret, security_token=sts)
        result = job.run(timeout=RUN_TIMEOUT)
        assert result.rc == 0 and result.status == "successful", result.describe()
        plan = result.artifacts["image_upgrade"]
        assert plan["kind"] == "plan" and plan["provider"] == "aws" and plan["target_image"] == image_b, plan
        assert [n["node"] for n in plan["nodes"]] == [node] and plan["summary"]["nodes_to_replace"] == 1
        assert not result.leaks(secret, sts, service_account_token)
        assert secret in (result.artifact_dir / "command").read_text()
    finally:
        admin.autoscaling.delete_auto_scaling_group(AutoScalingGroupName=group, ForceDelete=True)
        handle.nodesim.delete_instance(provider_id)
        handle.kube().request("DELETE", "/api/v1/nodes/" + node, ok=(200, 202, 404))


AZURE_TENANT = "6f1d2c3b-0000-4000-8000-0000000a2a11"
AZURE_CLIENT = "2b7e151a-0000-4000-8000-0000000a2c11"


def test_check_jobs_with_the_awx_azure_credential(cluster, service_account_token, tmp_path):
    """AWX's Azure Resource Manager credential as its injector writes it, first a service principal
    (AZURE_CLIENT_ID, AZURE_SECRET, AZURE_TENANT), then a user (AZURE_AD_USER, AZURE_PASSWORD), both with
    AZURE_SUBSCRIPTION_ID: the modules log in with it at the emulator's Entra ID token endpoint, and Resource
    Manager accepts only the tokens issued there. The job template's variables point the login at the
    emulator (azure.adfs_authority_url, azure.disable_instance_discovery). A wrong secret fails the job,
    naming the credential. Runs last: it adds an Azure scale set's node to the cluster, which it removes."""
    handle, values, start, key = cluster
    admin = handle.cloud("azure")
    image_b = admin.create_image("awx-az-b")
    group = admin.create_group("awx-az-workers", "worker", 1, admin.create_image("awx-az-a"))
    provider_id, node = group_node(handle, group)
    secret, password = "awx-az-secret-" + uuid.uuid4().hex, "awx-az-password-" + uuid.uuid4().hex
    user = "awx-upgrader@example.org"
    admin.create_service_principal(AZURE_TENANT, AZURE_CLIENT, secret)
    admin.create_user(user, password, AZURE_TENANT)
    admin.set_faults(require_auth=True)
    options = admin.login_options()
    subscription = options.pop("subscription_id")  # the credential's

    def check_job(**azure):
        return awx_job.Job(tmp_path, {
            "image": image_b, "provider": "azure", "max_surge": "1", "azure": dict(options, **azure),
            "rolling_upgrade_scaling_groups": [group],
            "rolling_upgrade_report_dir": values["rolling_upgrade_report_dir"]}, check=True)

    def plan_of(result):
        assert result.rc == 0 and result.status == "successful", result.describe()
        plan = result.artifacts["image_upgrade"]
        assert plan["kind"] == "plan" and plan["provider"] == "azure" and plan["target_image"] == image_b, plan
        assert [n["node"] for n in plan["nodes"]] == [node] and plan["summary"]["nodes_to_replace"] == 1
        return plan

    try:
        job = check_job()
        job.kubernetes_bearer_token(handle.apiserver, service_account_token, pathlib.Path(handle.ca).read_text())
        job.azure_rm(subscription, client=AZURE_CLIENT, tenant=AZURE_TENANT, secret=secret)
        since = len(admin.token_grants())
        result = job.run(timeout=RUN_TIMEOUT)
        plan_of(result)
        logins = admin.token_grants()[since:]
        assert logins and {(g["grant_type"], g["client_id"], g["tenant"]) for g in logins} == {
            ("client_credentials", AZURE_CLIENT, AZURE_TENANT)}, logins
        assert not result.leaks(secret, service_account_token)
        assert secret in (result.artifact_dir / "command").read_text()

        # The same job with a wrong secret: the first module that reads Azure fails, naming the credential.
        job = check_job()
        job.kubernetes_bearer_token(handle.apiserver, service_account_token, pathlib.Path(handle.ca).read_text())
        wrong = "awx-az-wrong-" + uuid.uuid4().hex
        job.azure_rm(subscription, client=AZURE_CLIENT, tenant=AZURE_TENANT, secret=wrong)
        result = job.run(timeout=RUN_TIMEOUT)
        assert result.rc != 0 and result.status == "failed", result.describe()
        # The first upgrade_step call fails, then the role's rescue stops with the same cause (the run had not begun).
        refused = [m for m in result.failed_messages() if "Azure login refused" in m]
        assert len(refused) == 2 and "The run had not begun: nothing was changed" in refused[1], result.describe()
        message = refused[0]
        assert "AADSTS7000215" in message and "azure.secret (AZURE_SECRET)" in message, message
        assert "azure.client_id %r (AZURE_CLIENT_ID)" % AZURE_CLIENT in message, message
        assert not result.leaks(wrong, secret, service_account_token)

        # AWX's user/password credential carries no tenant: the template's variables name the login's, here
        # the emulator's "adfs" (for any other, MSAL asks Entra's user realm discovery on port 443 of the
        # authority host, which the emulator on a free port is not).
        job = check_job(tenant="adfs")
        job.kubernetes_bearer_token(handle.apiserver, service_account_token, pathlib.Path(handle.ca).read_text())
        job.azure_rm(subscription, username=user, password=password)
        since = len(admin.token_grants())
        result = job.run(timeout=RUN_TIMEOUT)
        plan_of(result)
        logins = admin.token_grants()[since:]
        assert logins and {(g["grant_type"], g["username"]) for g in logins} == {("password", user)}, logins
        assert not result.leaks(password, service_account_token)
    finally:
        admin.set_faults()
        handle.nodesim.delete_instance(provider_id)
        handle.kube().request("DELETE", "/api/v1/nodes/" + node, ok=(200, 202, 404))
