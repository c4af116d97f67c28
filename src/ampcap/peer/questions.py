"""Questions a running invoke asks its caller (RFC 006 §6.3 INPUT_REQUIRED),
and the answers' carriage ampcap settled (docs/sessions.md, ruling S3).

The question is the INPUT_REQUIRED message; its id (fixed by the executor)
is the question's id. The answer is a RESPONSE whose ``reply_to`` is that
id and whose body is ``{"answer": text}`` or ``{"declined": true,
?"reason": text}`` (CDDL ``input-answer-body``), with the signed session
context inside a session. Only the invoke's own caller may answer (3001);
an answer to no pending question is 4001; a body of another shape 1001.
"""

from __future__ import annotations

from typing import Any

from ..errors import AmpError
from .dedupe import InvokeKey

__all__ = ["Questions", "question_body", "parse_answer"]

UNAUTHORIZED, BAD_REQUEST, INVALID_FORMAT = 3001, 4001, 1001


def question_body(prompt: str, options: list[str] | None, timeout_ms: int | None) -> dict[str, Any]:
    """An ``input-required-body`` (RFC 006 §6.4), without the session context."""
    body: dict[str, Any] = {"prompt": prompt}
    if options is not None:
        body["options"] = list(options)
    if timeout_ms is not None:
        body["timeout_ms"] = int(timeout_ms)
    return body


def parse_answer(body: Any) -> tuple[str | None, str | None]:
    """``(answer, None)`` or ``(None, reason declined)``; AmpError 1001 otherwise."""
    if type(body) is not dict:
        raise AmpError(INVALID_FORMAT, "the answer's body must be a map", path="body")
    if body.get("declined") is True:
        reason = body.get("reason")
        return None, reason if isinstance(reason, str) else "declined"
    answer = body.get("answer")
    if not isinstance(answer, str):
        raise AmpError(INVALID_FORMAT, 'the answer must be text ({"answer": tstr})', path="body.answer")
    return answer, None


class Questions:
    """Pending questions: INPUT_REQUIRED id -> the invoke that asks."""

    def __init__(self) -> None:
        self._pending: dict[bytes, InvokeKey] = {}

    def __contains__(self, question_id: object) -> bool:
        return question_id in self._pending

    def ask(self, question_id: bytes, key: InvokeKey) -> None:
        self._pending[question_id] = key

    def forget(self, question_id: bytes) -> None:
        self._pending.pop(question_id, None)

    def answer(self, question_id: bytes | None, sender: str, body: Any) -> tuple[bytes, str | None, str | None]:
        """Check an answer: ``(question id, answer, declined reason)``."""
        if question_id is None or question_id not in self._pending:
            raise AmpError(BAD_REQUEST, "no question is pending under that reply_to", path="reply_to")
        if sender != self._pending[question_id].sender:
            raise AmpError(UNAUTHORIZED, "not authorized")
        answer, declined = parse_answer(body)
        return question_id, answer, declined
