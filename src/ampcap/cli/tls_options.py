"""``--ca-file`` and ``--insecure``: how a command that dials ``amps://``
checks the server's certificate.

By default the system trust store verifies it (``net.tls.client_context``).
A daemon started with a self-signed certificate (``ampcap serve --tls-cert``)
is reached with ``--ca-file`` naming that certificate, or, for development
only, with ``--insecure``. Plain ``amp://`` URLs ignore both.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from .errors import CommandError

if TYPE_CHECKING:
    import ssl

__all__ = ["add_tls_client_arguments", "tls_client_context"]


def add_tls_client_arguments(parser: Any, what: str = "the daemon") -> None:
    parser.add_argument("--ca-file", metavar="FILE", help=f"CA bundle (or the certificate itself) to verify {what} "
                                                          "over amps:// (default: the system trust store)")
    parser.add_argument("--insecure", action="store_true",
                        help=f"do not verify the certificate of {what} over amps:// (development only)")


def tls_client_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The context for amps:// dials, or None when the flags ask for nothing
    special (a default verifying context is then made per connection)."""
    if args.ca_file is None and not args.insecure:
        return None
    from ..net.tls import client_context

    try:
        return client_context(ca_file=args.ca_file, insecure=args.insecure)
    except ValueError as exc:  # an unreadable or malformed CA file: a file that cannot be used (exit 1)
        raise CommandError(str(exc)) from None
