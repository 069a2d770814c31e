"""``python3 -m qdisc_lab ARGS``: the ``qdisc-lab`` command (see cli.py)."""

import sys

from .cli import main

sys.exit(main())
