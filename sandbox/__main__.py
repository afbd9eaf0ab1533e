"""`python -m sandbox up | down | status | seed`; see sandbox/cli.py."""

import sys

from sandbox.cli import main

sys.exit(main())
