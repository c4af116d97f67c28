"""Capabilities: SemVer and ranges, names/aliases/OSSA URIs, descriptors,
offline schema bundles, params validation, descriptor signatures, the
registry with its cursors, negotiation, usage statistics, TOML manifests,
the binding model (:mod:`.binding`: what a manifest says implements a
capability; the runners are :mod:`ampcap.bindings`) and the demo set.

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
    "DescriptorTrust": "descriptor_trust", "DescriptorChecker": "descriptor_trust",
    "Manifest": "manifest", "CapabilitySpec": "manifest", "ManifestError": "manifest",
    "manifest_from_data": "manifest", "manifest_problems": "manifest",
    "Binding": "binding.kinds",
    "demo_manifest": "demo",
    "AliasTable": "names", "OssaRef": "names", "is_capability_name": "names",
    "parse_capability_id": "names", "parse_ossa_uri": "names",
    "Registry": "registry", "Page": "registry", "Admission": "registry",
    "Cursor": "cursor", "CursorCodec": "cursor",
    "Selection": "negotiate", "select": "negotiate",  # negotiate.negotiate: the submodule owns the name
    "UsageStats": "stats",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads these
    from .binding.kinds import Binding
    from .bundle import SchemaBundle, SchemaStore
    from .cursor import Cursor, CursorCodec
    from .demo import demo_manifest
    from .descriptor import Descriptor, SchemaRef, Stability
    from .descriptor_sig import sign_descriptor, verify_descriptor
    from .descriptor_trust import DescriptorChecker, DescriptorTrust
    from .manifest import CapabilitySpec, Manifest, ManifestError, manifest_from_data, manifest_problems
    from .names import AliasTable, OssaRef, is_capability_name, parse_capability_id, parse_ossa_uri
    from .negotiate import Selection, select
    from .params import ParamsValidator
    from .registry import Admission, Page, Registry
    from .semver import Range, Version
    from .stats import UsageStats


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
