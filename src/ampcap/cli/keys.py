"""``ampcap keygen`` and ``ampcap id``: create and show the local identity.

The identity is an Ed25519 key whose DID is a ``did:key`` (ruling R2); the key
file is JSON, mode 0600. This is the edge, so it may use ``os.urandom``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from ..display import printable
from ..files.identity import default_identity_path, load_identity, save_identity
from ..files.write import output_path_problem
from ..wire.identity import Identity
from .errors import CommandError, local_file_errors


def register(subparsers: Any) -> None:
    default = default_identity_path()
    keygen = subparsers.add_parser(
        "keygen",
        help="create a new Ed25519 identity (did:key) and print its DID",
        description=(
            "Create a new Ed25519 identity and write it to a key file readable only by you "
            "(mode 0600). Prints the identity's did:key on stdout."
        ),
    )
    keygen.add_argument("--out", "-o", default=None, metavar="FILE",  # text: Path() drops a trailing "/"
                        help=f"where to write the key file (default: {default})")
    keygen.add_argument("--force", action="store_true", help="overwrite an existing key file")
    keygen.set_defaults(func=run_keygen)

    ident = subparsers.add_parser(
        "id",
        help="print the DID of an identity",
        description=("Print the did:key (or configured DID) of an identity file. The file is checked first: "
                     "a did:key must be the one its key gives, any other DID must be well-formed "
                     "(did:METHOD:ID), and only kind 'ampcap-identity', version 1 is read."),
    )
    ident.add_argument("--identity", "-i", type=Path, default=None, metavar="FILE",
                       help=f"identity key file (default: {default})")
    ident.add_argument("--verbose-keys", action="store_true",
                       help="also print the Ed25519 and X25519 public keys (hex)")
    ident.set_defaults(func=run_id)


def run_keygen(args: argparse.Namespace) -> int:
    path = Path(args.out) if args.out is not None else default_identity_path()
    # Before "exists": --force could not help. The default's directory is ours to create.
    if args.out is not None and (problem := output_path_problem(args.out)) is not None:
        example = f" (e.g. {path / 'identity.json'})" if path.is_dir() else ""
        raise CommandError(f"{args.out}: {problem}{example}")
    identity = Identity.generate(os.urandom)
    with local_file_errors():  # an existing file (without --force) or a non-file is refused there
        save_identity(identity, path, overwrite=args.force)
    print(identity.did)
    return 0


def run_id(args: argparse.Namespace) -> int:
    path: Path = args.identity or default_identity_path()
    with local_file_errors():
        identity = load_identity(path)  # a DID that is not one, or not its key's, is refused there
    print(printable(identity.did))  # the file's text all the same: it must not drive the terminal
    if args.verbose_keys:
        print(f"ed25519 {identity.public_key.hex()}")
        print(f"x25519  {identity.x25519_public.hex()}")
    return 0
