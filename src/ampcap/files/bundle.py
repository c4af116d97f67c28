"""Opening a schema bundle on disk: a directory, a ``.zip`` or a ``.tar.gz``
(``.tgz``) with ``bundle.json`` at its root (layout and failure policy in
:mod:`ampcap.caps.bundle`: anything unsafe or unreadable is 5002).

A directory's artifacts are read when first needed; an archive's are read
while it is open, since members cannot be read once it is closed.
"""

from __future__ import annotations

import functools
import os
import tarfile
import zipfile
import zlib
from pathlib import Path

from ..caps.bundle import BUNDLE_MANIFEST, BundleLimits, SchemaBundle, parse_bundle_manifest, safe_relpath
from ..errors import AmpError
from .read import read_file

__all__ = ["open_bundle", "write_bundle"]

UNAVAILABLE = 5002


def open_bundle(path: str | os.PathLike[str], *, limits: BundleLimits = BundleLimits()) -> SchemaBundle:
    """Open a bundle directory, ``.zip`` or ``.tar.gz``/``.tgz``."""
    p = Path(path)
    name = p.name.lower()
    if p.is_dir():
        return _open_dir(p, limits)
    if name.endswith(".zip"):
        return _open_zip(p, limits)
    if name.endswith((".tar.gz", ".tgz")):
        return _open_tar(p, limits)
    if not p.exists():
        raise AmpError(UNAVAILABLE, f"bundle not found: {p}")
    raise AmpError(UNAVAILABLE, f"unknown bundle format (directory, .zip, .tar.gz): {p}")


def _open_dir(root: Path, limits: BundleLimits) -> SchemaBundle:
    try:
        data = read_file(root / BUNDLE_MANIFEST, limits.max_manifest_bytes)
    except OSError as exc:
        raise AmpError(UNAVAILABLE, f"{root}: cannot read {BUNDLE_MANIFEST}: {exc.strerror or exc}") from None
    if len(data) > limits.max_manifest_bytes:
        raise AmpError(UNAVAILABLE, f"{root}: {BUNDLE_MANIFEST} too large")
    bundle_id, paths = parse_bundle_manifest(data, str(root), limits)
    real_root = root.resolve()
    lazy = {}
    for key, rel in paths.items():
        target = (root / rel).resolve()
        # A symlink inside the directory could still point outside it.
        if not target.is_relative_to(real_root):
            raise AmpError(UNAVAILABLE, f"{root}: artifact {key!r} resolves outside the bundle")
        lazy[key] = functools.partial(read_file, target)  # regular files only: a FIFO would block
    return SchemaBundle(bundle_id, lazy=lazy, source=str(root), limits=limits)


def _open_zip(path: Path, limits: BundleLimits) -> SchemaBundle:
    try:
        with zipfile.ZipFile(path) as zf:
            members = {}
            for info in zf.infolist():
                if info.is_dir():
                    continue
                members[safe_relpath(info.filename, f"{path}: member")] = info
            if len(members) > limits.max_artifacts + 1:
                raise AmpError(UNAVAILABLE, f"{path}: too many members")

            def read(rel: str, cap: int) -> bytes | None:
                info = members.get(rel)
                if info is None:
                    return None
                # Never trust file_size alone: read at most cap+1 bytes.
                with zf.open(info) as fh:
                    return fh.read(cap + 1)

            return SchemaBundle.from_reader(str(path), read, limits)
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, RuntimeError, NotImplementedError) as exc:
        raise AmpError(UNAVAILABLE, f"{path}: unreadable zip bundle: {exc}") from None


def _open_tar(path: Path, limits: BundleLimits) -> SchemaBundle:
    try:
        with tarfile.open(path, "r:gz") as tf:
            members: dict[str, tarfile.TarInfo] = {}
            declared = 0
            for count, info in enumerate(tf):
                if count > limits.max_artifacts + 64:
                    raise AmpError(UNAVAILABLE, f"{path}: too many members")
                if info.isdir():
                    continue
                rel = safe_relpath(info.name, f"{path}: member")
                if not info.isfile():
                    # Links, devices, fifos: never followed.
                    raise AmpError(UNAVAILABLE, f"{path}: member {info.name!r} is not a regular file")
                # Walking a .tar.gz decompresses every member, read or
                # not: bound that work by the declared sizes up front.
                declared += info.size
                if info.size > max(limits.max_artifact_bytes, limits.max_manifest_bytes) \
                        or declared > limits.max_total_bytes:
                    raise AmpError(UNAVAILABLE, f"{path}: member {info.name!r} exceeds the bundle size limits")
                members[rel] = info

            def read(rel: str, cap: int) -> bytes | None:
                info = members.get(rel)
                if info is None:
                    return None
                fh = tf.extractfile(info)
                if fh is None:
                    return None
                return fh.read(cap + 1)

            return SchemaBundle.from_reader(str(path), read, limits)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise AmpError(UNAVAILABLE, f"{path}: unreadable tar bundle: {exc}") from None


def write_bundle(files: dict[str, bytes], out: str | os.PathLike[str]) -> Path:
    """Write a bundle's files (relative path -> bytes, ``bundle.json``
    among them) as ``out``: a ``.zip``, a ``.tar.gz``/``.tgz``, or else a
    directory, which must not exist yet or be empty. An archive is written
    whole or not at all."""
    import io

    from .write import write_whole

    target = Path(out)
    name = target.name.lower()
    for rel in files:
        safe_relpath(rel, f"{target}: member")  # what the reader would refuse is never written
    if name.endswith(".zip"):
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
            for rel, data in sorted(files.items()):
                member = zipfile.ZipInfo(rel, date_time=(1980, 1, 1, 0, 0, 0))  # the same bytes every time
                member.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(member, data)
        write_whole(target, buffer.getvalue())
        return target
    if name.endswith((".tar.gz", ".tgz")):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
            for rel, data in sorted(files.items()):
                entry = tarfile.TarInfo(rel)
                entry.size, entry.mode = len(data), 0o644
                tf.addfile(entry, io.BytesIO(data))
        write_whole(target, buffer.getvalue())
        return target
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise AmpError(UNAVAILABLE, f"{target}: exists and is not an empty directory; give a new directory, "
                                    "or a .zip / .tar.gz file name")
    for rel, data in sorted(files.items()):
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, data)
    return target
