"""Capabilities: SemVer and ranges, descriptors, offline schema bundles,
params validation, descriptor signatures, TOML manifests and the demo set.

The main names of the landed modules are re-exported here and loaded on first
use (PEP 562): the manifest machinery pulls in jsonschema, which commands
that never touch a manifest should not pay for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

# name -> submodule that defines it
_EXPORTS: dict[str, str] = {
    "Version": "semver", "Range": "semver",
    "Descriptor": "descriptor", "SchemaRef": "descriptor", "Stability": "descriptor",
    "SchemaBundle": "bundle", "SchemaStore": "bundle",
    "ParamsValidator": "params",
    "sign_descriptor": "descriptor_sig", "verify_descriptor": "descriptor_sig",
    "Manifest": "manifest", "CapabilitySpec": "manifest", "ManifestError": "manifest",
    "load_manifest": "manifest", "check_manifest": "manifest",
    "Binding": "bindings",
    "demo_manifest": "demo",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads these
    from .bindings import Binding
    from .bundle import SchemaBundle, SchemaStore
    from .demo import demo_manifest
    from .descriptor import Descriptor, SchemaRef, Stability
    from .descriptor_sig import sign_descriptor, verify_descriptor
    from .manifest import CapabilitySpec, Manifest, ManifestError, check_manifest, load_manifest
    from .params import ParamsValidator
    from .semver import Range, Version


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
