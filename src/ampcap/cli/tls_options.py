"""``--ca-file`` and ``--insecure``: how a command that dials ``amps://``
checks the server's certificate.

By default the system trust store verifies it (``net.transport.tls.client_context``).
A daemon started with a self-signed certificate (``ampcap serve --tls-cert``)
is reached with ``--ca-file`` naming that certificate, or, for development
only, with ``--insecure``. Both apply to ``amps://`` URLs only: given for a
command that dials none, they are refused as usage errors, since they would
do nothing (and the user may believe the connection is TLS).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .errors import CommandError, UsageError

if TYPE_CHECKING:
    import ssl

    from ..net.transport.url import AmpUrl

__all__ = ["add_tls_client_arguments", "tls_client_context", "tls_advice"]


def add_tls_client_arguments(parser: Any, what: str = "the daemon") -> None:
    parser.add_argument("--ca-file", metavar="FILE", help=f"CA bundle (or the certificate itself) to verify {what} "
                                                          "over amps:// (default: the system trust store; "
                                                          "amps:// URLs only)")
    parser.add_argument("--insecure", action="store_true",
                        help=f"do not verify the certificate of {what} over amps:// (development only; "
                             "amps:// URLs only)")


def tls_client_context(args: argparse.Namespace, dials: Iterable[str | AmpUrl]) -> ssl.SSLContext | None:
    """The context for the amps:// URLs among ``dials`` (already checked
    URLs), or None when the flags ask for nothing special (a default
    verifying context is then made per connection). UsageError when the
    flags are given but no URL is amps://."""
    if args.ca_file is None and not args.insecure:
        return None
    if not any(part.strip().lower().startswith(("amps://", "https://", "wss://"))
               for url in dials for part in str(url).split(",")):
        flag = "--ca-file" if args.ca_file is not None else "--insecure"
        raise UsageError(f"{flag} only applies to amps:// URLs (TLS); nothing here is dialled over TLS")
    from ..net.transport.tls import client_context

    try:
        return client_context(ca_file=args.ca_file, insecure=args.insecure)
    except ValueError as exc:  # an unreadable or malformed CA file: a file that cannot be used (exit 1)
        raise CommandError(str(exc)) from None


def tls_advice(message: str, *, given_ca: bool) -> str:
    """``message`` (a failed dial's), with what to do about a certificate
    the system trust store (or the --ca-file given) does not vouch for."""
    from ..net.transport.tls import UNTRUSTED

    if UNTRUSTED not in message:
        return message
    if given_ca:
        return f"{message}; the --ca-file given does not vouch for it"
    return f"{message}; trust its CA with --ca-file FILE (or, while developing, skip the check with --insecure)"
