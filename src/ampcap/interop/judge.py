"""Judging what a target sent back: exactly one terminal reply, correlated
by ``reply_to``, passing our receive checks, with the expected type or code."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..wire.registry import MessageType
from .probe import Exchange, Received

__all__ = ["Status", "Outcome", "passed", "failed", "skipped", "single_terminal", "expect_error",
           "expect_message", "expect_success", "expect_rejection"]


class Status(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True, slots=True)
class Outcome:
    status: Status
    notes: str = ""


def passed(notes: str = "") -> Outcome:
    return Outcome(Status.PASS, notes)


def failed(notes: str) -> Outcome:
    return Outcome(Status.FAIL, notes)


def skipped(notes: str) -> Outcome:
    return Outcome(Status.SKIP, notes)


def single_terminal(ex: Exchange) -> Received | Outcome:
    """The one terminal reply, or the failure that there is not exactly one."""
    if not ex.terminals:
        return failed(f"no terminal reply correlated by reply_to: {ex.summary()}")
    if len(ex.terminals) > 1:
        return failed(f"{len(ex.terminals)} terminal replies, expected exactly one: {ex.summary()}")
    reply = ex.terminals[0]
    if reply.check_error is not None:
        return failed(f"the reply fails our receive checks: {reply.check_error}")
    return reply


def expect_error(ex: Exchange, *codes: int) -> Outcome:
    reply = single_terminal(ex)
    if isinstance(reply, Outcome):
        return reply
    code = reply.error_code
    if code in codes:
        return passed(f"{reply.describe()}")
    wanted = " or ".join(str(c) for c in codes)
    return failed(f"expected ERROR {wanted}, got {reply.describe()}")


def expect_message(ex: Exchange, typ: int) -> Received | Outcome:
    """The one terminal reply if it has type ``typ``, else the failure."""
    reply = single_terminal(ex)
    if isinstance(reply, Outcome) or reply.typ == typ:
        return reply
    return failed(f"expected {MessageType(typ).name}, got {reply.describe()}")


def expect_success(ex: Exchange, version: str | None = None) -> Outcome:
    reply = expect_message(ex, MessageType.CAP_RESULT)
    if isinstance(reply, Outcome):
        return reply
    body = reply.envelope.body if reply.envelope is not None else None
    if type(body) is not dict or body.get("status") != "success" or "result" not in body:
        return failed(f"CAP_RESULT is not status=success with a result: {body!r:.200}")
    result = body["result"]
    if version is not None and type(result) is dict and "version" in result:
        if result["version"] != version:
            return failed(f"negotiated {result['version']!r}, expected {version!r}")
        return passed(f"CAP_RESULT success, ran version {version}")
    if version is not None:
        return passed(f"CAP_RESULT success (the result does not show which version ran; expected {version})")
    return passed("one CAP_RESULT status=success")


def expect_rejection(ex: Exchange, *codes: int) -> Outcome:
    """A protocol violation: an ERROR with one of ``codes`` (AMP or transport
    frame), or, as RFC 002 allows by policy, a plain close."""
    for item in ex.terminals:
        if item.error_code in codes:
            return passed(item.describe())
    if ex.terminals:
        return failed(f"rejected with the wrong code: {ex.summary()}")
    if ex.closed:
        return passed("rejected by closing the connection (no ERROR frame)")
    return failed(f"not rejected: {ex.summary()}")
