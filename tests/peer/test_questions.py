"""The INPUT_REQUIRED answer's carriage (peer/questions.py, ruling S3)."""

from __future__ import annotations

import pytest

from ampcap.errors import AmpError
from ampcap.peer.dedupe import InvokeKey
from ampcap.peer.questions import Questions, parse_answer, question_body
from ampcap.schema import load_schemas


def test_bodies_match_their_cddl() -> None:
    schemas = load_schemas()
    assert schemas.is_valid("input-required-body", question_body("Ship?", ["yes", "no"], 500))
    for body in ({"answer": "yes"}, {"declined": True}, {"declined": True, "reason": "busy"}):
        assert schemas.is_valid("input-answer-body", body)
        parse_answer(body)
    assert not schemas.is_valid("input-answer-body", {"declined": False})


@pytest.mark.parametrize("body", ["yes", {"answer": 1}, {"declined": False}, {}])
def test_other_shapes_are_1001(body: object) -> None:
    with pytest.raises(AmpError) as exc:
        parse_answer(body)
    assert exc.value.code == 1001


def test_only_the_caller_may_answer_a_pending_question() -> None:
    q = Questions()
    q.ask(b"q" * 16, InvokeKey("did:key:zCaller", b"i" * 16))
    assert q.answer(b"q" * 16, "did:key:zCaller", {"answer": "ok"}) == (b"q" * 16, "ok", None)
    with pytest.raises(AmpError) as exc:
        q.answer(b"q" * 16, "did:key:zOther", {"answer": "ok"})
    assert exc.value.code == 3001
    q.forget(b"q" * 16)
    with pytest.raises(AmpError) as exc:
        q.answer(b"q" * 16, "did:key:zCaller", {"answer": "ok"})
    assert exc.value.code == 4001
