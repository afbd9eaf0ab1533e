"""Local emulators of the cloud APIs the collection calls, driven by the official SDKs over real HTTP.

Contract every emulator module here (gce.py, azure.py, aws.py) follows, so the sandbox can start any
of them the same way:

- `python -m sandbox.clouds.<cloud> --state-dir DIR [--nodesim-url URL]` binds 127.0.0.1 on a port the
  kernel picks, and prints ONE JSON line on stdout when it serves:
  {"cloud": "...", "endpoint": "http(s)://127.0.0.1:PORT", "ca_cert": path-or-null, "pid": N}
  It runs until SIGTERM. Instances it creates call sandbox.instance_hooks (created/deleted) so that
  nodes join the sandbox cluster.
- The module has an `Admin` class built from that JSON line with at least:
    create_image(name) -> image reference in the cloud's own format
    create_group(name, role, size, image) -> canonical group ID ("control-plane" or "worker" role)
    set_faults(error_rate=0.0, codes=(429, 500, 503), latency=0.0, never_boot=(), quota=None)
    provider_options() -> the module arguments that reach this emulator, e.g.
        {"provider": "gcp", "gcp": {"project": ..., "endpoint": ..., "auth_kind": ...}}
- It can also run in-process for tests (a class with start()/stop()).
"""

import json
import os
import subprocess
import sys

CLOUDS = ("gcp", "azure", "aws")
_MODULES = {"gcp": "sandbox.clouds.gce", "azure": "sandbox.clouds.azure", "aws": "sandbox.clouds.aws"}


def launch(cloud, state_dir, nodesim_url=None, log_path=None, timeout=60):
    """Start the emulator of `cloud` as a process; return (Popen, the JSON line as a dict)."""
    cmd = [sys.executable, "-m", _MODULES[cloud], "--state-dir", str(state_dir)]
    if nodesim_url:
        cmd += ["--nodesim-url", nodesim_url]
    log = open(log_path or os.devnull, "ab")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, cwd=repo, start_new_session=True)
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=5)
        raise RuntimeError("the %s emulator exited (code %s) before serving; see %s" % (cloud, proc.returncode, log_path))
    return proc, json.loads(line)
