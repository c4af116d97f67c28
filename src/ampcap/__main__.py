"""``python -m ampcap`` runs the ``ampcap`` command."""

import sys

from .cli.entry import run

sys.exit(run())
