"""Schema artifacts handed out by the peer that declares them (an ampcap extension).

RFC 004 descriptors carry schema *references* (bundle id, artifact key,
hash); the bytes come from a registry or, in the offline profile, from a
bundle the caller already holds. A caller that met a peer for the first time
(the MCP gateway, ``ampcap query --show-schema``, a Python program) has
neither, so an MCP tool served as a capability lost its input and output
schema on the way back out to an MCP host.

So every ampcap daemon that serves capabilities also serves one more,
``org.ampcap.schema.artifact`` 1.0.0: params ``{"bundle_id", "artifact_key"}``,
result ``{"media_type": text, "bytes": bstr}``, for the artifacts its own
descriptors reference (nothing else: it is not a file server). Callers never
trust it: the bytes are checked against the hash of the descriptor that
named them (:meth:`SchemaStore.load_bytes`), exactly as bytes from a
bundle are, and a mismatch fails closed (5002).

How a caller finds out: the same way as for the ``"*"`` listing, by asking.
A peer without the extension answers 4002 (no such capability), after which
the caller does not ask that peer again and the schema stays unavailable,
as before (a permissive object schema in the gateway; ``--bundle`` still
works). The capability is an ordinary one, so ``ampcap query`` lists it and
a daemon's policy can deny it like any other.

``ampcap caps bundle MANIFEST`` writes the same artifacts as an offline
bundle for peers that do not serve them (:func:`bundle_files`).

Sans-I/O: :func:`artifact_service` returns the spec and a handler for the
daemon to run; :class:`ArtifactFetcher` is handed an ``invoke`` coroutine
by whoever holds a connection.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import AmpError
from .bundle import BUNDLE_MANIFEST, SchemaBundle, SchemaStore, digest
from .descriptor import Descriptor, SchemaRef

if TYPE_CHECKING:
    from .manifest import CapabilitySpec, Manifest

__all__ = ["ARTIFACT_CAPABILITY", "ARTIFACT_ID", "artifact_service", "ArtifactFetcher", "bundle_files"]

ARTIFACT_CAPABILITY = "org.ampcap.schema.artifact"
ARTIFACT_VERSION = "1.0.0"
ARTIFACT_ID = f"{ARTIFACT_CAPABILITY}:{ARTIFACT_VERSION}"
_SERVICE_BUNDLE = "org.ampcap.schema"
NOT_FOUND, UNAVAILABLE = 4002, 5002
MAX_ARTIFACT_BYTES = 1 << 20  # what a caller accepts (BundleLimits' default per artifact)

_PARAMS = {
    "type": "object",
    "required": ["bundle_id", "artifact_key"],
    "properties": {"bundle_id": {"type": "string", "minLength": 1, "maxLength": 512},
                   "artifact_key": {"type": "string", "minLength": 1, "maxLength": 2048}},
    "additionalProperties": False,
}
_NOTES = ("ampcap: the schema artifact one of this peer's descriptors references, by bundle_id and artifact_key; "
          "verify the bytes against the descriptor's hash.")


def _refs(specs: Iterable[CapabilitySpec]) -> set[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    for spec in specs:
        for ref in (spec.descriptor.input_schema, spec.descriptor.output_schema):
            if ref.bundle_id is not None and ref.artifact_key is not None:
                out.add((ref.bundle_id, ref.artifact_key))
    return out


def artifact_service(specs: Iterable[CapabilitySpec], store: SchemaStore
                     ) -> tuple[list[CapabilitySpec], dict[str, Callable[[Any, Any], Awaitable[Any]]]]:
    """The service's capability spec (with its own bundle added to ``store``)
    and its handler by capability id, serving the artifacts ``specs``
    reference from ``store``. Nothing to serve (no specs): nothing offered."""
    specs = list(specs)
    served = _refs(specs)
    if not served or any(s.descriptor.name == ARTIFACT_CAPABILITY for s in specs):
        return [], {}  # a pure caller: nothing loaded, nothing offered
    from .manifest import manifest_from_data

    manifest: Manifest = manifest_from_data({"bundle_id": _SERVICE_BUNDLE, "capability": [{
        "name": ARTIFACT_CAPABILITY, "version": ARTIFACT_VERSION, "input_schema": _PARAMS, "output_schema": {},
        "notes": _NOTES, "idempotent": True, "annotations": {"readOnlyHint": True},
        "binding": {"python": "ampcap.net.api.local_capabilities:_local_only"}}]}, source="<schema artifacts>")
    if _SERVICE_BUNDLE not in store.bundles:
        store.add_bundle(manifest.bundle)

    async def handler(params: Any, context: Any) -> dict[str, Any]:
        key = (params["bundle_id"], params["artifact_key"])
        if key not in served:
            raise AmpError(NOT_FOUND, "no descriptor of this peer references that schema artifact")
        bundle = store.bundles.get(key[0])
        if bundle is None:
            raise AmpError(UNAVAILABLE, "that schema bundle is not loaded here")
        return {"media_type": "application/schema+json", "bytes": bundle.read(key[1])}

    spec = manifest.capabilities[0]
    return [spec], {spec.id: handler}


Invoke = Callable[[str, Mapping[str, Any]], Awaitable[Any]]


class ArtifactFetcher:
    """A caller's side: the schemas of one peer's descriptors, fetched with
    ``invoke(capability_id, params)`` and verified by hash, kept in a
    :class:`SchemaStore` (local bundles first; fetched ones added as
    in-memory bundles). One per connection."""

    def __init__(self, invoke: Invoke, store: SchemaStore | None = None) -> None:
        self._invoke = invoke
        self.store = store if store is not None else SchemaStore(offline=True)
        self._fetched: dict[str, dict[str, bytes]] = {}  # bundle_id -> artifact_key -> verified bytes
        self.offered: bool | None = None  # None: not asked yet; False: the peer answered 4002

    async def schema(self, ref: SchemaRef) -> Any:
        """The parsed schema ``ref`` names: from a local bundle, else from
        the peer (5002 when neither has it, or the bytes fail the hash)."""
        try:
            return self.store.load_json(ref)
        except AmpError:
            if not await self._fetch(ref):
                raise
        return self.store.load_json(ref)

    async def schemas(self, descriptor: Descriptor) -> tuple[Any | None, Any | None]:
        """(params schema, result schema) of ``descriptor``; None for one
        that cannot be had (said in the log by the caller, not raised)."""
        out: list[Any | None] = []
        for ref in (descriptor.input_schema, descriptor.output_schema):
            try:
                out.append(await self.schema(ref))
            except AmpError:
                out.append(None)
        return out[0], out[1]

    async def _fetch(self, ref: SchemaRef) -> bool:
        if self.offered is False or ref.bundle_id is None or ref.artifact_key is None:
            return False
        if ref.bundle_id in self.store.bundles and ref.bundle_id not in self._fetched:
            return False  # a local bundle of that id answers for it, and did not have it
        try:
            result = await self._invoke(ARTIFACT_ID, {"bundle_id": ref.bundle_id, "artifact_key": ref.artifact_key})
        except AmpError as exc:
            if exc.code == NOT_FOUND and "capability" in exc.message:
                self.offered = False  # a peer without the extension: not asked again
            return False
        self.offered = True
        data = result.get("bytes") if isinstance(result, dict) else None
        if not isinstance(data, bytes) or len(data) > MAX_ARTIFACT_BYTES:
            return False
        if digest(ref.hash_alg, data) != ref.hash:
            raise AmpError(UNAVAILABLE, f"schema artifact {ref.artifact_key!r} from the peer fails "
                                        f"{ref.hash_alg} verification")
        held = self._fetched.setdefault(ref.bundle_id, {})
        held[ref.artifact_key] = data
        # Rebuilt with the new artifact (bundles are immutable); the store's
        # cache is keyed by locator and hash, so nothing stale survives.
        bundles = dict(self.store.bundles)
        bundles[ref.bundle_id] = SchemaBundle(ref.bundle_id, artifacts=held, source="<peer>")
        store = SchemaStore(bundles.values(), offline=True)
        self.store = store
        return True


def bundle_files(manifests: Iterable[Manifest]) -> dict[str, bytes]:
    """The files of an offline bundle (RFC 004 offline profile, the layout
    :mod:`ampcap.caps.bundle` reads) holding every schema the manifests'
    descriptors reference: relative path -> bytes, ``bundle.json`` included.
    One bundle id per bundle: manifests with different ids are refused (write
    one bundle per manifest)."""
    manifests = list(manifests)
    ids = {m.bundle.bundle_id for m in manifests}
    if len(ids) != 1:
        raise AmpError(4001, f"one bundle holds one bundle_id; these manifests have {len(ids)}: {sorted(ids)}")
    (bundle_id,) = ids
    files: dict[str, bytes] = {}
    artifacts: dict[str, str] = {}
    for manifest in manifests:
        store = manifest.schema_store()
        for spec in manifest.capabilities:
            for ref in (spec.descriptor.input_schema, spec.descriptor.output_schema):
                if ref.bundle_id != bundle_id or ref.artifact_key is None or ref.artifact_key in artifacts:
                    continue
                data = store.load_bytes(ref)  # verified against the descriptor's hash
                path = _path_for(ref.artifact_key, len(artifacts))
                artifacts[ref.artifact_key] = path
                files[path] = data
    files[BUNDLE_MANIFEST] = (json.dumps({"bundle_id": bundle_id, "artifacts": artifacts}, indent=2,
                                         sort_keys=True) + "\n").encode("utf-8")
    return files


def _path_for(artifact_key: str, index: int) -> str:
    """A safe relative path for an artifact: its key when that is already
    one (``name/1.0.0/input``), else a numbered file."""
    import re

    if re.fullmatch(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*", artifact_key) and ".." not in artifact_key.split("/"):
        return f"schemas/{artifact_key}.schema.json"
    return f"schemas/artifact-{index}.schema.json"
