"""``ampcap caps bundle MANIFEST``: the manifest's schemas as an offline bundle.

RFC 004's offline profile has a caller resolve a descriptor's schema
references from a bundle it holds. An ampcap peer also hands its schemas out
itself (:mod:`ampcap.caps.artifacts`); the bundle is for callers of peers
that do not, and for shipping schemas with a program (``ampcap mcp
--bundle``). Every artifact is verified against its descriptor's hash before
it is written, and the written bundle is read back the way a caller reads it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .errors import EXIT_OK, CommandError, local_file_error, local_file_errors

__all__ = ["add_parser"]

_DESCRIPTION = """\
Write the JSON Schemas a manifest's capabilities reference as an offline
schema bundle (RFC 004 offline profile): bundle.json naming each artifact,
and the schema files. OUT ending in .zip or .tar.gz writes an archive;
anything else is a directory (new, or empty). Give it to a caller that
cannot fetch the schemas from the peer, e.g. ampcap mcp --bundle OUT.

  ampcap caps bundle tools.toml --out tools-schemas.zip
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("bundle", help="write a manifest's schemas as an offline bundle (dir, .zip, .tar.gz)",
                       description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("manifest", nargs="?", metavar="MANIFEST", help="TOML manifest file")
    group.add_argument("--demo", action="store_true", help="the built-in demo capabilities")
    p.add_argument("--out", "-o", required=True, type=Path, metavar="OUT",
                   help="where to write: a directory, or a .zip / .tar.gz file")
    p.set_defaults(func=cmd_bundle)


def cmd_bundle(args: argparse.Namespace) -> int:
    from ..caps.artifacts import bundle_files
    from ..caps.bundle import SchemaStore
    from ..files.bundle import open_bundle, write_bundle

    if args.demo:
        from ..caps.demo import demo_manifest

        manifest = demo_manifest()
    else:
        from ..caps.manifest import ManifestError
        from ..files.manifest import check_manifest

        checked, problems = check_manifest(args.manifest)
        if checked is None:
            raise local_file_error(ManifestError(problems))
        manifest = checked
    with local_file_errors():
        files = bundle_files([manifest])
        written = write_bundle(files, args.out)
        # Read back as a caller would: every reference resolves, every hash holds.
        store = SchemaStore([open_bundle(written)], offline=True)
        for spec in manifest.capabilities:
            store.load_bytes(spec.descriptor.input_schema)
            store.load_bytes(spec.descriptor.output_schema)
    if not files:
        raise CommandError("nothing to write")
    print(f"{written}: bundle {manifest.bundle.bundle_id}, {len(files) - 1} schema artifacts")
    return EXIT_OK
