"""The ``ampcap`` console script (and ``python -m ampcap``).

Importing the command line (:mod:`ampcap.cli.main`: argparse, logging and
the package around them) takes tens of milliseconds; a Ctrl-C landing there
printed a KeyboardInterrupt traceback. Here that import runs inside a
``try``, so Ctrl-C exits 130 quietly as everywhere else, and for ``serve``
the stop signals are held (:mod:`ampcap.cli.startup`) before it starts.
"""

from __future__ import annotations

import sys

from .startup import hold_for

__all__ = ["run"]


def run() -> int:
    argv = sys.argv[1:]
    hold_for(argv)  # serve: a signal from now on stops it with 0
    try:
        from .main import main
    except KeyboardInterrupt:
        return 130  # cli.errors.EXIT_INTERRUPTED, not imported: that import could be interrupted too
    return main(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run())
