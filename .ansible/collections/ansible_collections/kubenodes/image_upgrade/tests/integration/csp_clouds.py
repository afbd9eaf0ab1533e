"""Cloud emulators for the module tests of csp_node and csp_scaling_group: every emulator present in this
checkout, each started as its own process through the sandbox.clouds launch contract, so the modules
run through Ansible against every cloud the same way."""

import importlib
import importlib.util
import shutil
import signal
import subprocess
import tempfile
import uuid

import pytest

from sandbox import clouds

_MODULES = {"gcp": "sandbox.clouds.gce", "azure": "sandbox.clouds.azure", "aws": "sandbox.clouds.aws"}


def available():
    return [c for c in clouds.CLOUDS if importlib.util.find_spec(_MODULES[c]) is not None]


class RunningCloud:
    def __init__(self, name):
        self.name = name
        self.state_dir = tempfile.mkdtemp(prefix="kubenodes-csp-%s-" % name)
        self.proc, self.info = clouds.launch(name, self.state_dir, log_path=self.state_dir + "/emulator.log")
        self.admin = importlib.import_module(_MODULES[name]).Admin(self.info)
        self.options = self.admin.provider_options()
        self.images = {}

    def image(self, label):
        """An image of this cloud, made once per label."""
        if label not in self.images:
            self.images[label] = self.admin.create_image("img-%s-%s" % (label, uuid.uuid4().hex[:6]))
        return self.images[label]

    def group(self, size=1, role="worker"):
        """A new scaling group from image "base"; its ID."""
        return self.admin.create_group("g" + uuid.uuid4().hex[:8], role, size, self.image("base"))

    def never_boot_marks(self, group_id):
        # Each emulator matches its own spelling; the group's ID and its short name cover all three.
        return [group_id, group_id.rstrip("/").split("/")[-1]]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if self.proc.stdout:
            self.proc.stdout.close()
        shutil.rmtree(self.state_dir, ignore_errors=True)


def cloud_fixture():
    """A module-scoped fixture parametrized over every available emulator."""

    @pytest.fixture(scope="module", params=available())
    def cloud(request):
        running = RunningCloud(request.param)
        try:
            yield running
        finally:
            running.stop()

    return cloud


def provider_of(running):
    """The collection's provider for `running`, built in-process (to check what the modules did)."""
    from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import factory

    name = running.options["provider"]
    spec = factory.PROVIDERS[name].ARG_SPEC
    options = {key: value.get("default") for key, value in spec.items()}
    options.update(running.options[name])
    return factory.build_provider({"provider": name, name: options})
