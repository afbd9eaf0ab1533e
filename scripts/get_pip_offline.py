"""Stand-in for the pip bootstrap script that ansible-test downloads from a host this machine cannot
reach. It installs the pip wheel bundled with Python (ensurepip), then lets that pip install what
ansible-test asked for from the package index. scripts/sanity puts it where ansible-test looks.
Like get-pip.py it understands --no-setuptools and --no-wheel."""

import ensurepip
import os
import subprocess
import sys

GET_PIP_ONLY = ("--no-setuptools", "--no-wheel")
args = [a for a in sys.argv[1:] if a not in GET_PIP_ONLY]
ensurepip.bootstrap(upgrade=True)
# ensurepip points PIP_CONFIG_FILE at /dev/null in this process; the real install needs the machine's
# pip configuration (index, CA bundle) back.
env = {k: v for k, v in os.environ.items() if k != "PIP_CONFIG_FILE"}
code = subprocess.call([sys.executable, "-m", "pip", "install"] + args, env=env)
if code == 0 and "--no-setuptools" in sys.argv:
    code = subprocess.call([sys.executable, "-m", "pip", "uninstall", "-q", "-y", "setuptools"], env=env)
sys.exit(code)
