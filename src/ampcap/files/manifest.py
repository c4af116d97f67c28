"""Reading a capability manifest file (format in ``docs/manifest.md``; the
rules are :mod:`ampcap.caps.manifest`'s), and the file system it refers to.
"""

from __future__ import annotations

import os
import re
import shutil
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..caps.manifest import Manifest, ManifestError, ManifestProblem, manifest_problems
from ..decoders import toml_loads
from ..wire.identity import Identity
from .read import read_file

__all__ = ["DiskFiles", "check_manifest", "load_manifest", "sign_descriptors", "MAX_MANIFEST_BYTES"]

MAX_MANIFEST_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class DiskFiles:
    """:class:`ampcap.caps.manifest.ManifestFiles` on the real file system."""

    base_dir: Path

    def read(self, path: Path, limit: int) -> bytes:
        return read_file(path, limit)

    def resolve(self, path: Path) -> Path:
        return path.resolve()

    def is_dir(self, path: Path) -> bool:
        return path.is_dir()

    def missing_program(self, program: str, workdir: Path | None, env: Mapping[str, str]) -> str | None:
        """Why a command binding's program cannot be started, as the runner
        will start it (a relative path from the binding's cwd, a bare name
        from PATH, which ``env`` may set), or None."""
        base = workdir or Path.cwd()
        if "/" in program:
            path = Path(program) if Path(program).is_absolute() else base / program
            if not path.is_file():
                return f"no program at {str(path)!r}"
            if not os.access(path, os.X_OK):
                return f"{str(path)!r} is not executable"
            return None
        # Relative PATH entries (and empty ones, meaning ".") count from the binding's cwd, as in the child.
        entries = env.get("PATH", os.environ.get("PATH", os.defpath)).split(os.pathsep)
        search = os.pathsep.join(str(base / (entry or ".")) for entry in entries)
        if shutil.which(program, path=search) is None:
            return f"no program {program!r} on PATH"
        return None


def check_manifest(path: str | os.PathLike[str], *,
                   check_bindings: bool = False) -> tuple[Manifest | None, list[ManifestProblem]]:
    """Load a TOML manifest, returning it or every problem found.
    ``check_bindings`` also imports python bindings and bridges and looks up
    command bindings' programs (what serving would need), instead of leaving
    those failures to the first invoke."""
    p = Path(path)
    source = str(p)
    try:
        raw = read_file(p, MAX_MANIFEST_BYTES)
    except OSError as exc:
        return None, [ManifestProblem(source, f"cannot read manifest: {exc.strerror or exc}")]
    if len(raw) > MAX_MANIFEST_BYTES:
        return None, [ManifestProblem(source, f"manifest larger than {MAX_MANIFEST_BYTES} bytes")]
    try:
        text = raw.decode("utf-8")
        data = toml_loads(text)
    except UnicodeDecodeError as exc:
        return None, [ManifestProblem(source, f"not UTF-8: {exc}")]
    except tomllib.TOMLDecodeError as exc:
        # tomllib ends its message with "(at line L, column C)".
        m = re.search(r"at line (\d+)", str(exc))
        return None, [ManifestProblem(source, f"TOML syntax: {exc}{_not_toml_hint(p, text)}",
                                      line=int(m.group(1)) if m else None)]
    return manifest_problems(data, source=source, text=text, files=DiskFiles(p.parent),
                             check_bindings=check_bindings)


def _not_toml_hint(path: Path, text: str) -> str:
    """What to add to a TOML syntax error when the file looks like another
    format: a JSON (or YAML) file gets "Invalid statement" at line 1 from
    tomllib, which does not say that manifests are TOML."""
    suffix = path.suffix.lower()
    head = text.lstrip()[:2]
    # "[{", "[\"" and "[]" open a JSON array; "[name]" is a TOML table.
    if suffix == ".json" or head[:1] == "{" or head in ("[{", '["', "[]"):
        return " (manifests are TOML, docs/manifest.md; this looks like JSON)"
    if suffix in (".yaml", ".yml"):
        return " (manifests are TOML, docs/manifest.md; this looks like YAML)"
    return ""


def load_manifest(path: str | os.PathLike[str], *, check_bindings: bool = False) -> Manifest:
    """Load a manifest or raise :class:`ManifestError` (4001) listing all problems."""
    manifest, problems = check_manifest(path, check_bindings=check_bindings)
    if manifest is None:
        raise ManifestError(problems)
    return manifest


def sign_descriptors(manifest: Manifest, identity: Identity | None = None) -> Manifest:
    """The manifest with its descriptors signed as ``descriptor_signer`` asks:
    by the key file it names (read here, 0600 like every identity file), or
    by ``identity``, the daemon's own key, for ``"identity"``. Unchanged
    when the manifest asks for nothing, or for ``"identity"`` and none is
    given (``caps show`` says so). A key file that cannot be read is the
    ``AmpError(1001)`` of :func:`ampcap.files.identity.load_identity`."""
    from ..caps.descriptor_signing import sign_manifest
    from .identity import load_identity

    signer = manifest.descriptor_signer
    if signer is None:
        return manifest
    if signer.key_file is not None:
        return sign_manifest(manifest, load_identity(signer.key_file))
    return manifest if identity is None else sign_manifest(manifest, identity)
