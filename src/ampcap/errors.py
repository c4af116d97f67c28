"""The one exception type that crosses layer boundaries.

Every failure caused by bad input (network bytes, files) is an
:class:`AmpError` carrying the AMP error code that the RFCs assign to it, so
the daemon can answer with the right ERROR and the dump can print the finding.
Anything else escaping from the protocol core is a bug in ampcap. (A mistake
typed on the command line is the CLI's own ``UsageError``, in
``ampcap.cli.errors``: nothing was sent, so no AMP code applies.)
"""

from __future__ import annotations

from typing import Any

from .wire.registry import error_body, error_info

__all__ = ["AmpError", "LocalProtocolError", "MessageTooLarge", "NotExecuted", "RemoteProtocolError",
           "ReportedFailure", "SignedButRefused", "Unreachable"]


class AmpError(Exception):
    """A failure with an AMP error code (RFC 001 §15.3).

    ``path`` locates the fault inside a message (``body.params.a``) when known.
    """

    def __init__(self, code: int, message: str, *, path: str | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.code = int(code)
        self.message = message
        self.path = path
        self.details = details

    @property
    def name(self) -> str:
        return error_info(self.code).name

    @property
    def category(self) -> str:
        return error_info(self.code).category

    @property
    def retry(self) -> bool:
        return error_info(self.code).retry

    def to_body(self) -> dict[str, Any]:
        """The ERROR body a peer receives for this failure."""
        details = self.details
        if details is None and self.path is not None:
            details = {"path": self.path}
        return error_body(self.code, self.message, details)

    def __str__(self) -> str:
        where = f" at {self.path}" if self.path else ""
        return f"{self.code} {self.name}{where}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code}, {self.message!r}, path={self.path!r})"


class RemoteProtocolError(AmpError):
    """The peer (or the input) broke the protocol."""


class NotExecuted(AmpError):
    """Raised by an in-process capability handler that refuses a request
    before executing anything (RFC 007 A.21: a payment the workflow rejects
    on its shape, terms or state): the caller gets AMP ERROR with this code,
    not CAP_RESULT error, as for a step-7 rejection."""


class ReportedFailure(AmpError):
    """A failure the caller gets as its code, with a line for the operator
    (``log_line``) that whoever answers logs under the throttle ``topic``:
    a peer can cause it at will (say, params that make a bridge adapter
    raise), so the line must not come once per message without limit."""

    def __init__(self, code: int, message: str, *, log_line: str, topic: str) -> None:
        super().__init__(code, message)
        self.log_line = log_line
        self.topic = topic


class SignedButRefused(RemoteProtocolError):
    """A receive check failed after the signature verified: the message is
    really from its ``from``, so a reply refused this way may still end the
    call it answers. (Before the signature, ``from`` and ``reply_to`` are
    only claims, and anyone could send them.)"""


class LocalProtocolError(AmpError):
    """Our own caller tried to do something the protocol forbids."""


class Unreachable(AmpError, OSError):
    """A peer we could not connect to (5002 UNAVAILABLE): refused, no such
    host, no route. Also an ``OSError``, which is what it stands for, so
    code that catches either one catches it."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(5002, f"cannot reach {url}: {reason}")
        self.reason = reason  # the OS's words alone, for callers that name the target their own way


class MessageTooLarge(LocalProtocolError):
    """A message we built is over the connection's effective maximum size
    (RFC 002 §3.2); the sender may send something smaller in its place."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(1001, f"message of {size} bytes exceeds the effective maximum {limit}", path="body")
        self.size = size
        self.limit = limit
