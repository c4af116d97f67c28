"""The codes RFC 007 §8 assigns, by name, and the two shapes a payee's
answer takes before the edge turns it into bytes.

A payment request ends in exactly one of (A.21):

* :class:`Rejected`: refused before execution started (shape, version,
  semantics, state, authorization). The edge answers AMP ``ERROR``; no
  state changed and no ``op_key`` was recorded.
* :class:`Answered`: the request was executed (or replayed); ``result``
  is the §5.11 response body the edge puts in ``CAP_RESULT(status =
  "success").result``. A business outcome such as ``authorize_result``
  with ``status = "failed"`` is an answer too: it is a recorded, terminal
  lifecycle fact that a replay must reproduce.
* :class:`ExecutionFailed`: accepted, then the engine or the settlement
  adapter failed (5001, 5002). The edge answers ``CAP_RESULT(status =
  "error")``; nothing was committed, so a retry runs again.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["MALFORMED", "UNSUPPORTED_VERSION", "UNAUTHORIZED", "DELEGATION_INVALID", "BAD_REQUEST",
           "INSUFFICIENT_FUNDS", "QUOTE_EXPIRED", "INVALID_TRANSITION", "UNSUPPORTED_ASSET", "UNKNOWN_OPERATION",
           "PAYMENT_NOT_FOUND", "INTERNAL", "UNAVAILABLE", "CODE_NAMES", "Rejected", "Answered", "ExecutionFailed",
           "Decision"]

MALFORMED = 1001
UNSUPPORTED_VERSION = 1004
UNAUTHORIZED = 3001
DELEGATION_INVALID = 3004
BAD_REQUEST = 4001
INSUFFICIENT_FUNDS = 4101
QUOTE_EXPIRED = 4102
INVALID_TRANSITION = 4103
UNSUPPORTED_ASSET = 4104
UNKNOWN_OPERATION = 4105
PAYMENT_NOT_FOUND = 4106
INTERNAL = 5001
UNAVAILABLE = 5002

# The 41xx codes are not in RFC 001's registry yet (§8 registry note): names
# for logs and the CLI.
CODE_NAMES: dict[int, str] = {
    INSUFFICIENT_FUNDS: "INSUFFICIENT_FUNDS",
    QUOTE_EXPIRED: "QUOTE_EXPIRED",
    INVALID_TRANSITION: "INVALID_TRANSITION",
    UNSUPPORTED_ASSET: "UNSUPPORTED_ASSET",
    UNKNOWN_OPERATION: "UNKNOWN_OPERATION",
    PAYMENT_NOT_FOUND: "PAYMENT_NOT_FOUND",
}


class Rejected(msgspec.Struct, frozen=True, gc=False):
    """Pre-execution rejection: the edge sends AMP ERROR with this code."""

    code: int
    message: str
    path: str | None = None


class Answered(msgspec.Struct, frozen=True):
    """Executed (or replayed): the response body for CAP_RESULT success."""

    result: dict[str, Any]
    replayed: bool = False


class ExecutionFailed(msgspec.Struct, frozen=True, gc=False):
    """Accepted, then failed: the edge sends CAP_RESULT status "error"."""

    code: int
    message: str


Decision = Rejected | Answered | ExecutionFailed
