"""What every command that calls a daemon shares (``query``, ``invoke``,
``session``, ``deleg query|send``): one call made through the Python API
under the shell's options (:func:`call_daemon`), its failures printed as
``error <code> <NAME>: <message>`` (exit 1), replies printed as strict JSON
(:func:`to_json`), and a session id read from the command line.

Imported by the ``--help`` path too (through :mod:`.client`): the event
loop and the Python API are imported inside :func:`call_daemon` only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

from ..display import json_safe, printable
from ..errors import AmpError
from ..files.identity import default_caller_path
from ..peer.config import rust_example_config
from .errors import EXIT_FAILURE, EXIT_OK, UsageError
from .serve import load_or_create_identity
from .tls_options import tls_advice, tls_client_context

__all__ = ["SHOWN_TEXT", "call_daemon", "interruptible", "parse_session_id", "to_json"]

SHOWN_TEXT = 500  # characters of a peer's message or progress note per line (--json has all)


def _fail(exc: AmpError, as_json: bool) -> int:
    print(f"error {exc.code} {exc.name}: {printable(exc.message, SHOWN_TEXT)}", file=sys.stderr)
    if as_json:
        err: dict[str, Any] = {"code": exc.code, "name": exc.name, "message": exc.message}
        if exc.details is not None:
            err["details"] = exc.details
        print(to_json({"error": err}))
    return EXIT_FAILURE


def to_json(value: Any, *, indent: int | None = None) -> str:
    """Strict JSON for any decoded CBOR ``value`` (ASCII-only for scripts;
    readable output keeps other characters, minus the unsafe ones)."""
    from ..dump.diag import to_json_value

    view = to_json_value(value)
    if indent is None:
        return json.dumps(view, allow_nan=False)
    return json_safe(json.dumps(view, indent=indent, ensure_ascii=False, allow_nan=False))


def call_daemon(args: argparse.Namespace, call: Any) -> int:
    """Connect to ``args.url`` as the shell's options say, run ``await
    call(remote)`` and print the text it returns; the exit status."""
    import trio

    from ..net.daemon.core import DaemonConfig
    from ..net.api.peer import Peer

    try:
        from ..net.transport.url import UrlError, parse_endpoints

        endpoints = parse_endpoints(args.url)  # one URL, or several endpoints of the peer (RFC 002 §3.5)
    except UrlError as exc:
        raise UsageError(str(exc)) from None
    if args.compat == "rust-example" and any(url.binding != "amps" for url in endpoints):
        raise UsageError("--compat rust-example speaks raw TCP framing: give an amp:// or amps:// URL")
    if args.compat == "rust-example" and args.to is None and args.peer_did is None:
        # Its raw framing has no HELLO, so nothing would tell us whom to address.
        raise UsageError("--compat rust-example needs --peer-did DID (the daemon's DID), or --to DID with a relay URL")
    ssl_context = tls_client_context(args, [args.url])
    if getattr(args, "trace", None) is not None:  # a --trace that cannot work fails before a key file is made
        from .tracing import check_tracing

        check_tracing(args.trace)
    identity = load_or_create_identity(args.identity, caller=True)  # after the checks: a usage error creates no key file

    config = DaemonConfig()
    if args.compat == "rust-example":
        connection = rust_example_config()
        config = DaemonConfig(profile=connection.profile, connection=connection)

    # --timeout bounds connecting too (never beyond the 10 s handshake timeout).
    connect_s = min(args.timeout, 10.0) if args.timeout is not None else 10.0

    tracing = None
    if getattr(args, "trace", None) is not None:  # invoke --trace: OpenTelemetry only then
        from .tracing import tracer_provider_for

        tracing = tracer_provider_for(args.trace, service="ampcap invoke", did=identity.did)

    async def main() -> str:
        async with Peer(identity, config=config, tracing=tracing).connect(args.url, peer_did=args.peer_did, relay_to=args.to,
                                                         relay_did=args.relay_did, ssl_context=ssl_context,
                                                         timeout=connect_s,
                                                         relay_profile=getattr(args, "relay_profile", "auto")) as remote:
            return await call(remote)

    from ..net.api.peer import CallsItself

    try:
        with _deprecation_lines():
            output = trio.run(main)
    except CallsItself as exc:
        raise UsageError(_calls_itself(args, exc.did)) from None
    except AmpError as exc:
        advised = tls_advice(exc.message, given_ca=args.ca_file is not None)
        return _fail(exc if advised == exc.message else AmpError(exc.code, advised, details=exc.details), args.json)
    except OSError as exc:
        return _fail(AmpError(5002, f"cannot reach {args.url}: {exc.strerror or exc}"), args.json)
    finally:
        if tracing is not None:  # the client span reaches the exporter before the command exits
            tracing.shutdown()
    # Printed out here, where a failed write (a reader gone, a full disk) is
    # main's to report as such, not mistaken for an unreachable peer.
    print(output)
    return EXIT_OK


@contextlib.contextmanager
def _deprecation_lines() -> Iterator[None]:
    """A provider's in-band deprecation notice (R23) as one line on stderr,
    once per capability version, whatever the call's outcome."""
    import warnings

    from ..caps.deprecation import AmpDeprecationWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AmpDeprecationWarning)
        try:
            yield
        finally:
            for warning in caught:
                if issubclass(warning.category, AmpDeprecationWarning):
                    print(f"warning: {warning.message}", file=sys.stderr, flush=True)
                else:
                    warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)


async def interruptible(work: Any) -> Any:
    """``await work()``; a Ctrl-C (SIGINT) meanwhile cancels it and raises
    KeyboardInterrupt (exit 130). Cancelled, an invoke asks the provider to
    stop it (ampcap's cancel, R23, when the peer announced it), and the
    connection's close still flushes that message before the process ends."""
    import signal

    import trio

    interrupted = False
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            async def watch() -> None:
                nonlocal interrupted
                async for _ in signals:
                    interrupted = True
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(watch)
            result = await work()
            nursery.cancel_scope.cancel()
    if interrupted:
        raise KeyboardInterrupt
    return result


def _calls_itself(args: argparse.Namespace, did: str) -> str:
    """Why a call to our own DID is refused, and what to do instead."""
    target = (f"--to {did}" if args.to == did else f"--peer-did {did}" if args.peer_did == did
              else f"the agent at {args.url} ({did})")
    key = (f"from --identity {args.identity}" if args.identity
           else f"from the default caller file {default_caller_path()}")
    why = ("at the relay, the caller would take the target's place and its call would come back to itself"
           if args.to == did else "an agent does not call itself")
    return (f"{target} is this caller's own DID ({key}): caller and target share one identity, and {why}. "
            f"Give the caller a key of its own: `ampcap keygen --out caller.key`, then --identity caller.key")


def parse_session_id(text: str) -> bytes:
    """``--session ID`` / ``session ... ID``: 16 bytes from 32 hex digits."""
    try:
        sid = bytes.fromhex(text)
    except ValueError:
        sid = b""
    if len(sid) != 16:
        raise UsageError(f"--session {text!r}: a session id is 32 hex digits (16 bytes, RFC 006 §4.1)")
    return sid
