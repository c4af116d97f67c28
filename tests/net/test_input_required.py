"""RFC 006 INPUT_REQUIRED end to end: a capability asks mid-call with
``ctx.ask``; the caller answers through ``on_input`` (plain or async), or
declines; inside a session the question and the answer carry the signed
session context; a question nobody answers times out (5003)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parent))
from amp_helpers import new_identity  # noqa: E402

from ampcap import AmpError  # noqa: E402
from ampcap.net.api.peer import Peer, connect  # noqa: E402

ASK = "org.example.ask"


def asking_peer() -> Peer:
    peer = Peer(new_identity())

    @peer.capability(ASK, version="1.0.0")
    async def ask(question: str, timeout_ms: int = 5_000, ctx=None) -> dict:
        answer = await ctx.ask(question, options=["yes", "no"], timeout_ms=timeout_ms)
        return {"answer": answer}

    @peer.capability("org.example.ask_sync", version="1.0.0")
    def ask_sync(question: str, ctx=None) -> dict:  # a plain function, in a worker thread
        return {"answer": ctx.ask(question)}

    return peer


@pytest.mark.trio
async def test_the_caller_answers_a_question_mid_call() -> None:
    async with asking_peer().serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=new_identity()) as remote:
            asked: list = []

            def on_input(prompt: str, options) -> str:
                asked.append((prompt, options))
                return "yes"

            out = await remote.invoke(ASK, version="1.0.0", params={"question": "Deploy?"}, on_input=on_input)
            assert out == {"answer": "yes"} and asked == [("Deploy?", ("yes", "no"))]

            async def later(prompt: str, options) -> str:
                await trio.sleep(0.05)
                return f"async: {prompt}"

            out = await remote.invoke("org.example.ask_sync", version="1.0.0", params={"question": "q"},
                                      on_input=later)
            assert out == {"answer": "async: q"}


@pytest.mark.trio
async def test_no_callback_or_none_declines_and_the_call_fails_at_once() -> None:
    async with asking_peer().serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=new_identity()) as remote:
            for kwargs in ({}, {"on_input": lambda prompt, options: None}):
                with trio.fail_after(3), pytest.raises(AmpError) as exc:
                    await remote.invoke(ASK, version="1.0.0", params={"question": "Deploy?"}, **kwargs)
                assert exc.value.code == 4001 and "declined" in exc.value.message


@pytest.mark.trio
async def test_an_unanswered_question_times_out_with_5003() -> None:
    async with asking_peer().serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=new_identity()) as remote:
            async def never(prompt: str, options) -> str:
                await trio.sleep_forever()
                raise AssertionError

            with trio.fail_after(5), pytest.raises(AmpError) as exc:
                await remote.invoke(ASK, version="1.0.0", params={"question": "?", "timeout_ms": 200},
                                    on_input=never)
            assert exc.value.code == 5003


@pytest.mark.trio
async def test_inside_a_session_question_and_answer_carry_the_context() -> None:
    async with asking_peer().serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=new_identity()) as remote:
            async with remote.session() as s:
                out = await s.invoke(ASK, version="1.0.0", params={"question": "in session?"},
                                     on_input=lambda prompt, options: "indeed")
                assert out == {"answer": "indeed"}


@pytest.mark.trio
async def test_an_answer_from_someone_else_is_refused() -> None:
    from types import SimpleNamespace

    from ampcap.peer.dedupe import InvokeKey

    async with asking_peer().serve("amp://127.0.0.1:0") as server:
        ex = server.daemon.executor
        ex._questions.ask(b"q" * 16, InvokeKey("did:key:zSomeoneElse", b"i" * 16))
        env = SimpleNamespace(reply_to=b"q" * 16, sender="did:key:zIntruder")
        with pytest.raises(AmpError) as exc:
            ex.on_input(SimpleNamespace(envelope=env, body={"answer": "x"}))  # type: ignore[arg-type]
        assert exc.value.code == 3001
