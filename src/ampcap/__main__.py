"""``python -m ampcap`` runs the ``ampcap`` command."""

import sys

from .cli.main import main

sys.exit(main())
