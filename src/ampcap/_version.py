"""The package version, in a module of its own: ``ampcap/__init__.py``
names the Python API (``net/api/peer.py``) for type checkers, so a core
module that took the version from the package would close an import circle
through it (tests/test_layers.py forbids any)."""

__version__ = "0.1.0"
