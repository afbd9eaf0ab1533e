"""No secret in any output (issue 14): canaries in every secret option and environment variable the
collection accepts, and the real credentials of the run, then the main playbook in check mode, a real
no-op run (every node already on the image) and each module with a failure provoked, all at -vvv. Every
line of output, the report directory and every object the collection writes (the journal ConfigMap,
Leases, node annotations, the autoscaler Deployment, Events) is searched for each secret: zero hits.

One sandbox (GCP emulator), three ansible-playbook runs. The role authenticates as the ServiceAccount
rbac.yml ships, so this also runs the least-privilege identity through check mode and a no-op run.
"""

import base64
import gzip
import json
import pathlib
import subprocess
import sys
import uuid

import pytest
import yaml

import upgrade_helpers as uh
from sandbox import netutil
from tests.ansible_run import REPO, ansible_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT = 300


def canary(what):
    """A secret-looking value nobody else writes: letters and digits only, so no quoting or escaping can
    change how it is spelled in any output."""
    return "kncanary%s%s" % (what, uuid.uuid4().hex[:12])


def pem_body_line(pem_text):
    """One base64 line of a PEM key: present in the key however it is quoted (JSON, repr, YAML)."""
    lines = [line for line in pem_text.strip().splitlines() if line and not line.startswith("-----")]
    return lines[1]


def kubeconfig(server, user, ca=None):
    cluster = {"server": server}
    if ca:
        cluster["certificate-authority"] = ca
    return {"apiVersion": "v1", "kind": "Config", "current-context": "c", "preferences": {},
            "clusters": [{"name": "k", "cluster": cluster}], "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}


def find(secrets, texts):
    """[(secret name, where)] of every secret found in any of the texts ({where: text})."""
    return [(name, where) for name, value in secrets.items() for where, text in texts.items() if value in text]


@pytest.mark.timeout(600)
def test_no_secret_in_any_output_or_object(upgrade_cluster, tmp_path, monkeypatch):
    handle, values, _start = upgrade_cluster("gcp", control_planes=1, workers=1, groups=1)
    gcp_admin = handle.cloud("gcp")
    secrets = {}  # name -> value that must appear nowhere

    # ---- real credentials of the successful runs
    token = values["rolling_upgrade_kube"]["api_key"]  # the shipped ServiceAccount's token
    secrets["kube api_key (ServiceAccount token)"] = token
    key = gcp_admin.create_service_account("upgrader@%s.iam.gserviceaccount.com" % values["rolling_upgrade_gcp"]["project"])
    secrets["gcp service account private key"] = pem_body_line(key["private_key"])
    secrets["gcp service account private_key_id"] = key["private_key_id"]
    key_file = tmp_path / "gcp-key.json"
    key_file.write_text(json.dumps(key))
    secrets["etcd client key"] = pem_body_line(pathlib.Path(values["rolling_upgrade_etcd_client_key"]).read_text())
    kubeconfig_file = tmp_path / "kubeconfig-sa"
    kubeconfig_file.write_text(yaml.safe_dump(kubeconfig(handle.apiserver, {"token": token}, handle.ca)))

    # ---- canaries for the clouds the run does not use, in options and in the environment
    azure = {"subscription_id": "00000000-0000-0000-0000-000000000000", "client_id": canary("azureclientid"),
             "tenant": canary("azuretenant"), "secret": canary("azuresecret")}
    # The access key ID is no secret (amazon.aws shows it too, no_log=False): a canary, but not searched for.
    aws = {"region": "us-east-1", "access_key": canary("awsaccesskey"), "secret_key": canary("awssecretkey"),
           "session_token": canary("awssessiontoken")}
    env = {"AZURE_SECRET": canary("envazuresecret"), "AZURE_CLIENT_SECRET": canary("envazureclientsecret"),
           "AZURE_ACCESS_TOKEN": canary("envazureaccesstoken"), "AWS_ACCESS_KEY_ID": canary("envawsaccesskey"),
           "AWS_SECRET_ACCESS_KEY": canary("envawssecretkey"), "AWS_SESSION_TOKEN": canary("envawssessiontoken")}
    for name in ("secret",):
        secrets["azure." + name] = azure[name]
    for name in ("secret_key", "session_token"):
        secrets["aws." + name] = aws[name]
    secrets.update(("env " + name, value) for name, value in env.items() if name != "AWS_ACCESS_KEY_ID")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    outputs = {}

    # ---- 1. the main playbook in check mode: kubeconfig as a dict, GCP key as a JSON string. (As a dict, Ansible
    # takes every value in it for a no_log value, the project ID too, and masks the project in the group IDs
    # node_image_facts returns, which breaks the preflight: the dict form is exercised in step 3.)
    check_values = dict(values, rolling_upgrade_kube={"kubeconfig": kubeconfig(handle.apiserver, {"token": token}, handle.ca)},
                        rolling_upgrade_gcp=dict(values["rolling_upgrade_gcp"], auth_kind="serviceaccount",
                                                 service_account_contents=json.dumps(key)),
                        rolling_upgrade_azure=azure, rolling_upgrade_aws=aws)
    run = uh.PlaybookRun(check_values, tmp_path / "check.log", check=True, extra_args=["-vvv"])
    assert run.wait(RUN_TIMEOUT) == 0, run.output()[-6000:]
    outputs["check mode"] = run.output()
    assert "node(s) to replace" in outputs["check mode"]

    # ---- 2. a real no-op run: every node already runs the image; kubeconfig file, GCP key file
    [current] = set(uh.group_images(values).values())
    noop_values = dict(values, rolling_upgrade_image=current, rolling_upgrade_kube={"kubeconfig": str(kubeconfig_file)},
                       rolling_upgrade_gcp=dict(values["rolling_upgrade_gcp"], auth_kind="serviceaccount",
                                                service_account_file=str(key_file)),
                       rolling_upgrade_azure=azure, rolling_upgrade_aws=aws)
    run = uh.PlaybookRun(noop_values, tmp_path / "noop.log", extra_args=["-vvv"])
    assert run.wait(RUN_TIMEOUT) == 0, run.output()[-6000:]
    outputs["no-op run"] = run.output()
    assert "0 node(s) replaced" in outputs["no-op run"], outputs["no-op run"][-3000:]

    # ---- 3. every module with a failure provoked, canaries in every secret it takes
    refused = "127.0.0.1:%d" % netutil.free_port()
    kube_canaries = {name: canary(name) for name in ("kubetoken", "kubeclientkeydata", "kubepassword", "kubeapikey",
                                                     "kubefiletoken", "kubefileclientkeydata", "kubeenvapikey",
                                                     "kubeproxybasicauth", "kubebasicauth", "kubeenvpassword",
                                                     "malformedtoken")}
    secrets.update(("kube " + name, value) for name, value in kube_canaries.items())
    dict_kubeconfig = kubeconfig("https://" + refused, {"token": kube_canaries["kubetoken"],
                                                        "client-key-data": kube_canaries["kubeclientkeydata"]})
    file_kubeconfig = tmp_path / "kubeconfig-canary"
    file_kubeconfig.write_text(yaml.safe_dump(kubeconfig("https://" + refused, {
        "token": kube_canaries["kubefiletoken"], "client-key-data": kube_canaries["kubefileclientkeydata"]})))
    malformed = {"users": [{"name": "u", "user": {"token": kube_canaries["malformedtoken"]}}], "clusters": "not a list"}
    client_key_file = tmp_path / "client.key"
    secrets["kube client_key file"] = canary("kubeclientkeyfile")
    client_key_file.write_text("-----BEGIN PRIVATE KEY-----\n%s\n-----END PRIVATE KEY-----\n" % secrets["kube client_key file"])
    etcd_key_file = tmp_path / "etcd.key"
    secrets["etcd client_key file"] = canary("etcdclientkeyfile")
    etcd_key_file.write_text("-----BEGIN PRIVATE KEY-----\n%s\n-----END PRIVATE KEY-----\n" % secrets["etcd client_key file"])
    gcp_canaries = {name: canary(name) for name in ("gcpprivatekeydict", "gcpprivatekeystring", "gcpprivatekeyfile",
                                                    "gcpaccesstoken", "gcpenvcontents", "gcpenvaccesstoken",
                                                    "gcpprivatekeystep")}
    secrets.update(("gcp " + name, value) for name, value in gcp_canaries.items())

    def gcp_key(private_key):
        key_id = secrets["gcp private_key_id %d" % len(secrets)] = canary("gcpkeyid")
        return dict(key, private_key="-----BEGIN PRIVATE KEY-----\n%s\n-----END PRIVATE KEY-----\n" % private_key,
                    private_key_id=key_id)

    bad_key_file = tmp_path / "gcp-bad-key.json"
    bad_key_file.write_text(json.dumps(gcp_key(gcp_canaries["gcpprivatekeyfile"])))
    # auth_kind given: without it google-auth would look for a metadata server
    gcp_refused = {"project": values["rolling_upgrade_gcp"]["project"], "endpoint": "http://" + refused,
                   "auth_kind": "serviceaccount"}
    azure_refused = dict(azure, endpoint="https://" + refused, resource_group="rg", retries=1, timeout=10,
                         access_token=canary("azureaccesstoken"))
    secrets["azure.access_token"] = azure_refused["access_token"]
    azure_secret_refused = dict(azure, endpoint="https://" + refused, resource_group="rg", retries=1, timeout=10,
                                cloud_environment="AzureStack", adfs_authority_url="https://" + refused)
    aws_refused = dict(aws, endpoint_url="http://" + refused)
    etcd = {"endpoints": ["https://" + refused], "ca_cert": values["rolling_upgrade_etcd_ca_cert"],
            "client_cert": values["rolling_upgrade_etcd_client_cert"], "client_key": str(etcd_key_file),
            "request_timeout": 2}
    plain_http_endpoint = "http://0.0.0.0:%d" % netutil.free_port()
    good_kube = {"host": handle.apiserver, "ca_cert": handle.ca, "api_key": token}
    tasks = [
        ("node_image_facts", {"kubeconfig": dict_kubeconfig, "image": "x", "provider": "gcp", "gcp": gcp_refused}),
        # a plain http:// host outside loopback (0.0.0.0 refuses at once) is named in a warning
        ("upgrade_lock", {"kubeconfig": malformed, "host": plain_http_endpoint}),
        ("node_drain", {"kubeconfig": str(file_kubeconfig), "name": "n"}),
        ("upgrade_journal", {"host": "https://" + refused, "api_key": kube_canaries["kubeapikey"],
                             "username": "u", "password": kube_canaries["kubepassword"],
                             "proxy_headers": {"proxy_basic_auth": kube_canaries["kubeproxybasicauth"],
                                               "basic_auth": kube_canaries["kubebasicauth"]},
                             "record": {"passes": 1}}),
        ("node_delete", {"host": "https://" + refused, "client_cert": values["rolling_upgrade_etcd_client_cert"],
                         "client_key": str(client_key_file), "name": ["n"]}),
        ("autoscaler_pause", {"state": "paused"}),  # K8S_AUTH_* canaries from the environment below
        ("node_pair", dict(good_kube, image="x", provider="gcp",
                           gcp=dict(gcp_refused, auth_kind="serviceaccount",
                                    service_account_contents=json.dumps(gcp_key(gcp_canaries["gcpprivatekeystring"]))))),
        ("csp_node", {"state": "present", "group": "g", "provider": "gcp",
                      "gcp": dict(gcp_refused, auth_kind="serviceaccount",
                                  service_account_contents=gcp_key(gcp_canaries["gcpprivatekeydict"]))}),
        ("csp_node", {"state": "present", "group": "g", "provider": "gcp",
                      "gcp": dict(gcp_refused, auth_kind="serviceaccount", service_account_file=str(bad_key_file))}),
        ("csp_scaling_group", {"state": "present", "image": "x", "group": ["g"], "provider": "gcp",
                               "gcp": dict(gcp_refused, auth_kind="accesstoken", access_token=gcp_canaries["gcpaccesstoken"])}),
        ("csp_scaling_group", {"state": "present", "image": "x", "group": ["g"], "provider": "azure", "azure": azure_refused}),
        ("csp_node", {"state": "present", "group": "g", "provider": "azure", "azure": azure_secret_refused}),
        ("csp_node", {"state": "present", "group": "g", "provider": "aws", "aws": aws_refused}),
        ("csp_scaling_group", {"state": "present", "image": "ami-0123456789abcdef0", "group": ["g"], "provider": "aws",
                               "aws": {"region": "us-east-1", "endpoint_url": "http://" + refused}}),  # AWS_* from env
        # the action plugin the role repeats (plugin_utils/action_base masks what the controller shows)
        ("upgrade_step", {"kubeconfig": dict_kubeconfig, "image": "x", "provider": "gcp", "etcd": etcd,
                          "gcp": dict(gcp_refused, service_account_contents=gcp_key(gcp_canaries["gcpprivatekeystep"]))}),
        ("etcd_member_info", etcd),
        ("etcd_member_remove", dict(etcd, node_ip="10.0.0.9")),
    ]
    environment = {"K8S_AUTH_HOST": "https://" + refused, "K8S_AUTH_API_KEY": kube_canaries["kubeenvapikey"],
                   "K8S_AUTH_PASSWORD": kube_canaries["kubeenvpassword"], "K8S_AUTH_USERNAME": "u",
                   "GCP_SERVICE_ACCOUNT_CONTENTS": json.dumps(gcp_key(gcp_canaries["gcpenvcontents"])),
                   "GCP_ACCESS_TOKEN": gcp_canaries["gcpenvaccesstoken"],
                   # kube.request retries a refused API server for 60 s by default; 2 s still take the retry
                   # path (and its message, searched for secrets below) without a minute per module
                   "KUBENODES_API_RETRY_SECONDS": "2"}
    # The secrets reach ansible-playbook as a user's would: in its environment and in a variables file. (Written
    # into the playbook, Ansible itself shows them: -vvv prints a play's `environment:` in each command line, and
    # an error quotes the lines of the task around it.) Two playbooks at once: most of the time is spent waiting
    # on refused connections and their retries.
    args_file = tmp_path / "failure-args.json"
    args_file.write_text(json.dumps({"failure_args": [args for _module, args in tasks]}))
    procs = []
    for half in (0, 1):
        play = [{"hosts": "localhost", "connection": "local", "gather_facts": False,
                 "tasks": [{"name": "provoke a failure: %s %d" % (module, number),
                            "kubenodes.image_upgrade." + module: {key: "{{ failure_args[%d][%r] }}" % (number, key) for key in args},
                            "ignore_errors": True}
                           for number, (module, args) in enumerate(tasks) if number % 2 == half]}]
        playbook = tmp_path / ("failures-%d.yml" % half)
        playbook.write_text(yaml.safe_dump(play, sort_keys=False))
        procs.append(subprocess.Popen([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                                       str(playbook), "-e", "@" + str(args_file), "-vvv"],
                                      env=ansible_env(dict(environment, ANSIBLE_STDOUT_CALLBACK="default")),
                                      cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    stdout, stderr = "", ""
    for half, proc in enumerate(procs):
        try:
            out, err = proc.communicate(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise
        outputs["module failures %d (stdout)" % half], outputs["module failures %d (stderr)" % half] = out, err
        stdout, stderr = stdout + out, stderr + err
    failed = stdout.count("...ignoring")
    assert failed == len(tasks), "expected every task to fail (%d of %d did):\n%s" % (failed, len(tasks), stdout[-8000:])

    # A plain http:// endpoint is named in a warning; the loopback emulator endpoint of the runs is not.
    # (warnings go to stderr, wrapped at the terminal width: compare with the whitespace folded)
    folded = " ".join(stderr.split())
    assert "host is a plain http:// URL (%s)" % plain_http_endpoint in folded, stderr[-4000:]
    assert "plain http://" not in outputs["check mode"] + outputs["no-op run"]

    # ---- search everything
    kube = handle.kube()
    texts = dict(outputs)
    report_dir = pathlib.Path(values["rolling_upgrade_report_dir"])
    texts.update(("report " + path.name, path.read_text(errors="replace")) for path in report_dir.iterdir())
    assert any(name.endswith(".json") for name in texts if name.startswith("report ")), sorted(texts)
    for what, path in [("ConfigMaps", "/api/v1/configmaps"), ("Leases", "/apis/coordination.k8s.io/v1/leases"),
                       ("Nodes", "/api/v1/nodes"), ("Events", "/api/v1/events"),
                       ("events.k8s.io Events", "/apis/events.k8s.io/v1/events"),
                       ("Deployments", "/apis/apps/v1/deployments")]:
        texts[what] = json.dumps(kube.request("GET", path))
    journal = kube.request("GET", "/api/v1/namespaces/kube-system/configmaps/kubenodes-image-upgrade-journal")
    assert "journal.json" in journal.get("data", {}) or journal.get("binaryData"), journal
    for name, item in (journal.get("binaryData") or {}).items():
        texts["journal " + name] = gzip.decompress(base64.b64decode(item)).decode("utf-8")
    leaks = find(secrets, texts)
    assert not leaks, "secrets found:\n" + "\n".join("  %s in %s" % leak for leak in leaks)
