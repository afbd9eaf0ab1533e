"""Run a job the way AWX runs it: an ansible-runner private data directory holding the project
(examples/awx-project), an inventory, env/extravars (survey answers and the template's variables),
env/envvars and files in env/ exactly as AWX's credential injectors write them, env/cmdline (--check for a
job of type Check, -e @file for custom credential types' extra_vars), then `ansible-runner run`, as AWX's
worker does (here without a container: the test venv is the execution environment).

The injectors follow awx_plugins.credentials (injectors.py for the managed types; custom types are Jinja
in an ImmutableSandboxedEnvironment over the credential's inputs, files written to env/ with mode 0600,
their paths as `tower.filename` or `tower.filename.<label>`, extra_vars written to a file passed with -e @).
Without a container, AWX's in-container path of such a file is its path on this host."""

import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import tempfile
import types
import uuid

import yaml
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tests.ansible_run import COLLECTIONS, REPO

PROJECT = REPO / "examples" / "awx-project"
AWX_DIR = PROJECT / "awx"
PLAYBOOK = "upgrade_nodes.yml"
RUNNER = pathlib.Path(sys.executable).parent / "ansible-runner"


def credential_type(name):
    """A custom credential type as shipped (examples/awx-project/awx/credential_type_<name>.yml)."""
    return yaml.safe_load((AWX_DIR / ("credential_type_%s.yml" % name)).read_text())


def _env_file(private_data_dir, text):
    """A file in env/ as AWX's injectors write one: mkstemp there, mode 0600; returns its path."""
    handle, path = tempfile.mkstemp(dir=os.path.join(private_data_dir, "env"))
    with os.fdopen(handle, "w") as f:
        f.write(text)
    os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
    return path


class Job:
    """One AWX job: build its private data directory, add credentials, run it, read what it left."""

    def __init__(self, base_dir, extravars=None, check=False, ident=None, inventory=""):
        self.dir = pathlib.Path(base_dir) / ("pdd-" + uuid.uuid4().hex[:8])
        (self.dir / "env").mkdir(parents=True)
        (self.dir / "inventory").mkdir()
        shutil.copytree(PROJECT, self.dir / "project")
        # An AWX inventory with what the play needs (it runs on localhost) and the lines `inventory` adds.
        (self.dir / "inventory" / "hosts").write_text("localhost ansible_connection=local\n" + inventory)
        self.ident = ident or "job-" + uuid.uuid4().hex[:6]
        self.extravars = dict(extravars or {})
        # AWX itself puts the job's collections path and a few settings into every job's environment.
        self.envvars = {"ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS), "ANSIBLE_FORCE_COLOR": "False",
                        "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_RETRY_FILES_ENABLED": "False",
                        "ANSIBLE_LOCALHOST_WARNING": "False"}
        self.cmdline = ["--check"] if check else []
        self.result = None

    # ------------------------------------------------------------ AWX's managed credential types

    def kubernetes_bearer_token(self, host, bearer_token, ssl_ca_cert=None, verify_ssl=True):
        """OpenShift or Kubernetes API Bearer Token (awx_plugins.credentials.injectors.kubernetes_bearer_token)."""
        self.envvars["K8S_AUTH_HOST"] = host
        self.envvars["K8S_AUTH_API_KEY"] = bearer_token
        if verify_ssl and ssl_ca_cert:
            self.envvars["K8S_AUTH_VERIFY_SSL"] = "True"
            self.envvars["K8S_AUTH_SSL_CA_CERT"] = _env_file(self.dir, ssl_ca_cert)
        else:
            self.envvars["K8S_AUTH_VERIFY_SSL"] = "False"

    def gce(self, username, project, ssh_key_data):
        """Google Compute Engine (injectors.gce): the key JSON AWX builds, with Google's token_uri."""
        path = _env_file(self.dir, json.dumps({
            "type": "service_account", "private_key": ssh_key_data, "client_email": username,
            "project_id": project, "token_uri": "https://oauth2.googleapis.com/token"}, indent=2))
        self.envvars.update(GCE_EMAIL=username, GCE_PROJECT=project, GCE_CREDENTIALS_FILE_PATH=path,
                            GCP_SERVICE_ACCOUNT_FILE=path, GOOGLE_APPLICATION_CREDENTIALS=path,
                            GCP_AUTH_KIND="serviceaccount", GCP_PROJECT=project, GCP_ENV_TYPE="tower")

    def aws(self, username, password, security_token=None):
        """Amazon Web Services (injectors.aws)."""
        self.envvars.update(AWS_ACCESS_KEY_ID=username, AWS_SECRET_ACCESS_KEY=password)
        if security_token:
            self.envvars.update(AWS_SECURITY_TOKEN=security_token, AWS_SESSION_TOKEN=security_token)

    def azure_rm(self, subscription, client=None, tenant=None, secret=None, username=None, password=None,
                 cloud_environment=None):
        """Microsoft Azure Resource Manager (injectors.azure_rm)."""
        self.envvars["AZURE_SUBSCRIPTION_ID"] = subscription
        if client and tenant:
            self.envvars.update(AZURE_CLIENT_ID=client, AZURE_TENANT=tenant, AZURE_SECRET=secret or "")
        else:
            self.envvars.update(AZURE_AD_USER=username or "", AZURE_PASSWORD=password or "")
        if cloud_environment:
            self.envvars["AZURE_CLOUD_ENVIRONMENT"] = cloud_environment

    # ------------------------------------------------------------ custom credential types

    def custom(self, cred_type, inputs):
        """A custom credential type's injectors rendered over `inputs` as AWX renders them; returns
        (env set, extra_vars set) for the test to look at."""
        sandbox = ImmutableSandboxedEnvironment()
        namespace = {key: value for key, value in inputs.items() if value}
        files = {}
        single = None
        for label, template in (cred_type["injectors"].get("file") or {}).items():
            path = _env_file(self.dir, sandbox.from_string(template).render(**namespace))
            if "." in label:
                files[label.split(".", 1)[1]] = path
            else:
                single = path
        namespace["tower"] = types.SimpleNamespace(filename=single or types.SimpleNamespace(**files))
        env = {key: sandbox.from_string(template).render(**namespace)
               for key, template in (cred_type["injectors"].get("env") or {}).items()}
        self.envvars.update(env)

        def build(node):
            if isinstance(node, dict):
                return {str(build(k)): build(v) for k, v in node.items()}
            if isinstance(node, list):
                return [build(v) for v in node]
            return sandbox.from_string(node).render(**namespace)
        extra_vars = build(cred_type["injectors"].get("extra_vars") or {})
        if extra_vars:
            path = _env_file(self.dir, yaml.safe_dump(extra_vars))
            os.chmod(path, stat.S_IRUSR)
            self.cmdline += ["-e", "@" + path]
        return env, extra_vars

    # ------------------------------------------------------------ running it

    def run(self, timeout=600):
        env_dir = self.dir / "env"
        (env_dir / "extravars").write_text(yaml.safe_dump(self.extravars))
        (env_dir / "envvars").write_text(yaml.safe_dump(self.envvars))
        if self.cmdline:
            (env_dir / "cmdline").write_text(" ".join(self.cmdline))
        # AWX's settings for a job: no idle timeout, keep one artifact dir.
        settings = {"idle_timeout": 0, "job_timeout": 0, "pexpect_timeout": 5, "rotate_artifacts": 1}
        (env_dir / "settings").write_text(yaml.safe_dump(settings))
        # The runner's own environment: the venv first (the "execution environment"), nothing of the
        # test's; the job's variables come from env/envvars only. HOME is the private data dir, as in AWX's
        # EE (/runner), so no ~/.aws, ~/.kube or ~/.azure of this machine stands in for a credential.
        env = {"PATH": "%s:/usr/local/bin:/usr/bin:/bin" % pathlib.Path(sys.executable).parent,
               "HOME": str(self.dir), "LANG": "C.UTF-8"}
        proc = subprocess.run([str(RUNNER), "run", str(self.dir), "-p", PLAYBOOK, "--ident", self.ident],
                              env=env, capture_output=True, text=True, timeout=timeout, check=False)
        self.result = Result(self.dir / "artifacts" / self.ident, proc)
        return self.result


class Result:
    """What a job left in artifacts/<ident>: rc, status, stdout, the job events, the set_stats artifacts."""

    def __init__(self, artifact_dir, proc):
        self.artifact_dir = artifact_dir
        self.proc = proc
        self.rc = int((artifact_dir / "rc").read_text()) if (artifact_dir / "rc").exists() else None
        self.status = (artifact_dir / "status").read_text() if (artifact_dir / "status").exists() else None
        self.stdout = (artifact_dir / "stdout").read_text() if (artifact_dir / "stdout").exists() else ""
        events_dir = artifact_dir / "job_events"
        self.events = [json.loads(p.read_text()) for p in sorted(events_dir.glob("*.json"))] if events_dir.exists() else []
        self.events.sort(key=lambda e: e.get("counter", 0))

    @property
    def stats_event(self):
        stats = [e for e in self.events if e.get("event") == "playbook_on_stats"]
        return stats[-1] if stats else None

    @property
    def artifacts(self):
        """The set_stats data (per_host false) that AWX stores as the job's artifacts."""
        event = self.stats_event
        return (event or {}).get("event_data", {}).get("artifact_data", {})

    def task_results(self, name_suffix):
        return [e["event_data"].get("res", {}) for e in self.events
                if e.get("event") in ("runner_on_ok", "runner_on_failed")
                and e["event_data"].get("task", "").endswith(name_suffix)]

    def failed_messages(self):
        return [e["event_data"].get("res", {}).get("msg", "") for e in self.events
                if e.get("event") == "runner_on_failed" and not e["event_data"].get("ignore_errors")]

    def describe(self):
        return "rc=%s status=%s\nstdout (end):\n%s\nrunner stderr:\n%s" % (
            self.rc, self.status, self.stdout[-6000:], self.proc.stderr[-2000:])

    def texts(self):
        """{relative path: text} of every file in the artifact dir that goes to AWX (stdout, job events),
        leaving out `command`: ansible-runner writes the job's whole environment there by design, and AWX
        keeps only a sanitized copy of it (build_safe_env), never that file."""
        found = {}
        for path in self.artifact_dir.rglob("*"):
            if path.is_file() and path.name != "command":
                found[str(path.relative_to(self.artifact_dir))] = path.read_text(errors="replace")
        return found

    def leaks(self, *secrets):
        """[(file, secret)] for every secret found in the job's output."""
        return [(name, secret[:6] + "...") for name, text in self.texts().items() for secret in secrets
                if secret and secret in text]
