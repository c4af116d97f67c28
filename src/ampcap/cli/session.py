"""``ampcap session URL open|resume|close``: RFC 006 sessions from the shell.

A session outlives the command that opened it: the provider keeps it (with
its pins, across its own restarts under ``--state-dir``) until it is closed
or expires. ``open`` prints its id; ``ampcap invoke --session ID`` resumes
it and runs the invoke inside it; ``close ID`` ends it. Every command must
use the same identity (``--identity``): only the session's participants may
touch it (3001 otherwise).
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ..display import printable
from .calling import call_daemon, parse_session_id, to_json
from .errors import UsageError

__all__ = ["register_session", "run_session", "resumed"]


def register_session(subparsers: Any, common: argparse.ArgumentParser) -> None:
    s = subparsers.add_parser(
        "session", parents=[common], help="RFC 006 sessions: open, resume or close one",
        description="Open an RFC 006 session with the daemon at URL (prints its id), resume one (prints its "
                    "state) or close one. `ampcap invoke URL ... --session ID` runs an invoke inside it. "
                    "Exit status 0 on success, 1 when the daemon refuses (the AMP code is printed), "
                    "2 for a usage mistake.")
    s.add_argument("action", choices=("open", "resume", "close"), help="what to do")
    s.add_argument("session_id", nargs="?", default=None, metavar="ID",
                   help="the session (32 hex digits); for resume and close")
    s.add_argument("--pin", action="append", default=[], metavar="NAME=ID",
                   help="open: keep capability NAME at version ID (name:version) for the whole session; "
                        "may be repeated")
    s.add_argument("--expires-in", type=float, default=3600.0, metavar="S",
                   help="open: the session's lifetime in seconds (default 3600)")
    s.add_argument("--independent", action="store_true",
                   help="open: thread_mode independent (default coupled, thread_id == session id)")
    s.set_defaults(func=run_session)


def _pins(given: list[str]) -> dict[str, str]:
    pins = {}
    for item in given:
        name, sep, cid = item.partition("=")
        if not sep or not name or ":" not in cid:
            raise UsageError(f"--pin {item!r}: expected NAME=NAME:VERSION, e.g. org.x.echo=org.x.echo:1.0.0")
        pins[name] = cid
    return pins


@asynccontextmanager
async def resumed(remote: Any, session_id: bytes) -> AsyncIterator[Any]:
    """The session ``session_id`` resumed on ``remote`` (left open afterwards)."""
    session = remote.existing_session(session_id)
    await session.resume()
    yield session


def run_session(args: argparse.Namespace) -> int:
    if args.action == "open":
        if args.session_id is not None:
            raise UsageError("session open makes a new id: drop ID")
        if not 0 < args.expires_in <= 7 * 86_400:
            raise UsageError("--expires-in must be from 0 to 604800 seconds")
    elif args.session_id is None:
        raise UsageError(f"session {args.action} needs the session ID")
    elif args.pin or args.independent:
        raise UsageError("--pin and --independent go with open")
    sid = parse_session_id(args.session_id) if args.session_id is not None else None
    pins = _pins(args.pin)

    async def call(remote: Any) -> str:
        if sid is None:
            # Opened and left open: a later command resumes it (or it expires).
            session = remote.new_session(pin=pins, independent=args.independent, expires_in=args.expires_in,
                                         reconnect_attempts=0)
            await session.open()
        else:
            session = remote.existing_session(sid, reconnect_attempts=0)
            if args.action == "resume":
                await session.resume()
            else:
                await session.close()
        state = {"session_id": session.session_id.hex(), "status": session.status.value,
                 "thread_mode": session.client.mode.value, "expires_at": session.client.expires_at,
                 "pinned": session.pinned}
        if args.json:
            return to_json(state)
        lines = [f"session {state['session_id']} {state['status']} ({state['thread_mode']})"]
        lines += [printable(f"  pinned {name} = {cid}") for name, cid in sorted(session.pinned.items())]
        return "\n".join(lines)

    return call_daemon(args, call)
