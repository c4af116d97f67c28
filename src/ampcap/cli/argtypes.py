"""Argument types shared by the subcommands, checked while argparse parses.

A value argparse's own ``type=float`` takes can still be one the command
cannot use: ``1e308`` seconds overflows when turned into milliseconds,
``nan`` compares false with everything. Checking here, once, makes every
such value a usage error (exit 2, argparse's one line naming the option)
before any work starts, with the same words for every option.
"""

from __future__ import annotations

import math
from argparse import ArgumentTypeError
from collections.abc import Callable
from pathlib import Path

from ..wire.didkey import is_did

__all__ = ["MAX_SECONDS", "seconds", "did", "semver", "semver_range", "whole_number", "state_dir"]

# A week: longer than any wait a person means to type, far below what
# becomes a problem (milliseconds past 2**64 on the wire, trio deadlines).
MAX_SECONDS = 7 * 24 * 3600


def seconds(*, unlimited: bool = False) -> Callable[[str], float]:
    """A ``type=`` for an option given in seconds: a number above 0 and at
    most :data:`MAX_SECONDS`; with ``unlimited``, also ``inf`` (no limit of
    our own: wait as long as the other side allows)."""
    allowed = f"more than 0 and at most {MAX_SECONDS}" + (", or 'inf' for no limit" if unlimited else "")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ArgumentTypeError(f"{text!r} is not a number of seconds ({allowed})") from None
        if value == math.inf and unlimited:
            return value
        if not 0 < value <= MAX_SECONDS:  # NaN fails too
            raise ArgumentTypeError(f"{text} seconds is out of range ({allowed})")
        return value

    parse.__name__ = "seconds"  # argparse names the type in some messages
    return parse


def did(text: str) -> str:
    """A ``type=`` for an option naming a DID. A did:key is its key, so one
    whose key does not decode names nobody: refused here rather than
    accepted into a credential no one can ever use."""
    if not is_did(text):
        raise ArgumentTypeError(f"{text!r} is not a DID (did:METHOD:ID, e.g. did:key:z6Mk… or did:web:example.com)")
    if text.startswith("did:key:"):
        from ..errors import AmpError
        from ..wire.didkey import ed25519_from_did_key

        try:
            ed25519_from_did_key(text)
        except AmpError:
            raise ArgumentTypeError(f"{text[:80]!r} is not a valid did:key (no Ed25519 key decodes from it): "
                                    "copy the DID `ampcap id` prints") from None
    return text


def semver(text: str) -> str:
    """A ``type=`` for ``--version``: a SemVer 2.0.0 version, checked here
    rather than sent for the peer to refuse (4001)."""
    from ..caps.semver import Version
    from ..errors import AmpError

    try:
        Version.parse(text)
    except AmpError as exc:
        raise ArgumentTypeError(exc.message) from None
    return text


def semver_range(text: str) -> str:
    """A ``type=`` for ``--range``: an RFC 004 §4.4 version range."""
    from ..caps.semver import Range
    from ..errors import AmpError

    try:
        Range.parse(text)
    except AmpError as exc:
        raise ArgumentTypeError(exc.message) from None
    return text


def whole_number(option: str, low: int, high: int, why: str = "") -> Callable[[str], int]:
    """A ``type=`` for ``option``: a whole number from ``low`` to ``high``
    (``why``, if given, is added to the out-of-range message)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise ArgumentTypeError(f"{option} must be between {low} and {high}" + (f" ({why})" if why else ""))
        return value

    parse.__name__ = "whole number"  # argparse names the type in some messages
    return parse


def state_dir(text: str) -> Path | None:
    """A ``type=`` for ``--state-dir``: a directory, or ``none`` (None)."""
    from ..store import parse_state_dir

    try:
        return parse_state_dir(text)
    except ValueError as exc:
        raise ArgumentTypeError(str(exc)) from None
