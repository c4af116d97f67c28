"""The user's files on disk: identity key files, keyrings, policies,
manifests and schema bundles read, key files and reports written.

The sans-I/O packages below (``wire``, ``schema``, ``caps``, ``peer``) parse
and check what these files hold but never open one; this layer does, so a
test of a rule needs no file and a file's problems (missing, unreadable, too
large, a FIFO, readable by others) are reported in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

# name -> submodule that defines it
_EXPORTS: dict[str, str] = {
    "read_file": "read",
    "write_whole": "write", "open_for_writing": "write", "output_path_problem": "write",
    "default_identity_path": "identity", "load_identity": "identity", "save_identity": "identity",
    "load_or_create": "identity",
    "load_keyring": "keyring",
    "load_policy": "policy",
    "check_manifest": "manifest", "load_manifest": "manifest",
    "open_bundle": "bundle",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads these
    from .bundle import open_bundle
    from .identity import default_identity_path, load_identity, load_or_create, save_identity
    from .keyring import load_keyring
    from .manifest import check_manifest, load_manifest
    from .policy import load_policy
    from .read import read_file
    from .write import open_for_writing, output_path_problem, write_whole


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
