"""RFC 003 Appendix A vectors driven against a relay (``--relay URL``).

What can be driven from outside a relay, with two clients and the relay's
federation endpoint, and nothing else:

* 003:A.1 TTL=0 to an offline recipient: one AMP ERROR 2003 answering the
  message, and the message is not queued (the recipient, connecting after,
  gets nothing);
* 003:A.5 federation loop: a relay-forward wrapper (RFC 002 §6.5) whose
  ``relay_path`` already names the relay is refused with 2003 and no receipt;
* 003:A.6 hop-limit exhaustion: ``hop_limit = 0`` likewise;
* 003:A.7 duplicate suppression: the same message sent twice reaches its
  recipient once;
* 003:A.15 byte-level codes: 2003 is encoded ``19 07 d3`` in the relay's
  ERROR and in its relay-forward-response. Its 3001 half (a transfer receipt
  that fails verification) needs a custody transfer to answer, which no
  outside client can start: the note says it was not driven.

The relay is reached with its own framing (``raw``, as the public Rust
example's relay and ``tools/stand_in_relay.py``, or ``rfc002``), registered
as those relays do it: each client's first frame names it. The relay's DID
(the ``relay_path`` entry A.5 needs) is ``--relay-did``, or learned from the
``from`` of its ERROR in A.1. The federation endpoint is
``POST /amp/v1/relay/forward`` on ``--relay-forward URL`` (default: the
relay's own host and port over http; ``ampcap relay`` serves it on its
``--http`` address).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import trio

from ..errors import AmpError
from ..net.transport.clock import wall_clock_ms
from ..peer.config import RELAY_HELLO_VERSION
from ..wire.bearer import mint
from ..wire.cbor import dumps, loads
from ..wire.envelope import seal
from ..wire.frames import Framing
from ..wire.identity import Identity
from ..wire.registry import MessageType
from .judge import Outcome, expect_error, failed, passed, skipped
from .probe import Probe, ProbeError, ProbeSettings
from .vectors import Context, Vector

__all__ = ["RELAY_VECTORS", "relay_settings", "forward"]

_CODE_2003 = bytes.fromhex("64636f64651907d3")  # "code": 2003
_ERROR_CODE_2003 = bytes.fromhex("6a6572726f725f636f64651907d3")  # "error_code": 2003
_RESPONSE_LIMIT = 1 << 20
FORWARD_PATH = "/amp/v1/relay/forward"


def relay_settings(ctx: Context) -> ProbeSettings:
    """How to speak to the relay: its framing, our Sig_Input profile."""
    framing = Framing.RAW if ctx.relay_framing == "raw" else Framing.RFC002
    return replace(ctx.settings, framing=framing, hello_versions=(RELAY_HELLO_VERSION,) if framing is Framing.RAW
                   else ctx.settings.hello_versions)


@asynccontextmanager
async def _client(ctx: Context, identity: Identity | None = None) -> AsyncIterator[Probe]:
    """A client registered at the relay (its first frame, a HELLO to the relay, names it)."""
    assert ctx.relay is not None
    probe = await Probe.open(ctx.relay, relay_settings(ctx), identity=identity)
    try:
        if probe.settings.raw:
            await probe.send_message(MessageType.HELLO, {"versions": [RELAY_HELLO_VERSION]},
                                     to=ctx.relay_did or "did:web:relay.invalid")
        else:
            await probe.open_session()
        yield probe
    finally:
        await probe.aclose()


async def _settle(ctx: Context) -> None:
    # A relay registers a connection when it reads its first frame: give it
    # that moment before another connection addresses this one.
    await trio.sleep(max(ctx.settings.settle_s, 0.05))


async def v003_a1(ctx: Context) -> Outcome:
    """A.1: ttl = 0 to a recipient that is offline → ERROR 2003, not queued."""
    offline = Identity.generate(os.urandom)
    async with _client(ctx) as sender:
        await _settle(ctx)
        env = await sender.send_message(MessageType.MESSAGE, {"text": "ttl 0"}, to=offline.did, ttl_ms=0)
        ex = await sender.collect(env, frozenset())
    outcome = expect_error(ex, 2003)
    if outcome.status.value != "pass":
        return outcome
    reply = ex.terminals[0]
    assert reply.envelope is not None
    if ctx.relay_did is None:
        ctx.relay_did = reply.envelope.sender
    ctx.relay_error_raw = reply.raw
    # Not queued: the recipient, connecting now, must get nothing.
    async with _client(ctx, offline) as recipient:
        late = await recipient.collect(None, frozenset(), timeout_s=max(ctx.settings.settle_s, 0.2))
    delivered = [r for r in late.others if r.envelope is not None and r.envelope.id == env.id]
    if delivered:
        return failed("the ttl = 0 message was queued and delivered later")
    return passed(f"{outcome.notes} from {reply.envelope.sender}; not delivered when the recipient came online")


async def v003_a7(ctx: Context) -> Outcome:
    """A.7: the same message handed to the relay twice reaches its recipient once."""
    async with _client(ctx) as recipient, _client(ctx) as sender:
        await _settle(ctx)
        env, wire = sender.seal(MessageType.MESSAGE, {"text": "once"}, to=recipient.identity.did)
        framed = sender.frame(wire)
        await sender.send_bytes(framed)
        await sender.send_bytes(framed)
        seen = await recipient.collect(None, frozenset(), timeout_s=ctx.settings.timeout_s / 2)
    copies = [r for r in seen.others if r.envelope is not None and r.envelope.id == env.id]
    if len(copies) == 1:
        return passed("one delivery of a message sent twice")
    if not copies:
        return failed("the message never reached its online recipient")
    return failed(f"{len(copies)} deliveries of one message (dedupe key (from, id, recipient), RFC 003 §5.6.3)")


def upstream(ctx: Context) -> Identity:
    """Who the harness hands messages off as: an upstream relay. A relay
    answers the federation endpoints only for a trusted upstream whose
    bearer token names it (RFC 002 §7.3), so the relay under test must list
    this DID as a trusted peer (``interop --self`` sets that up)."""
    if ctx.relay_upstream is None:
        ctx.relay_upstream = Identity.generate(os.urandom)
    identity: Identity = ctx.relay_upstream
    return identity


def _wrapper(ctx: Context, *, relay_path: list[str], hop_limit: int) -> dict[str, Any]:
    origin = Identity.generate(os.urandom)
    recipient = "did:web:recipient.invalid"
    _, message = seal(origin, typ=int(MessageType.MESSAGE), to=recipient, body={"text": "handoff"},
                      now_ms=wall_clock_ms(), entropy=os.urandom, ttl=60_000)
    return {"fwd_v": 1, "message": message, "from_did": origin.did, "recipient_did": recipient,
            "relay_path": relay_path, "hop_limit": hop_limit, "upstream_relay": upstream(ctx).did,
            "transfer_mode": "single"}


async def forward(ctx: Context, wrapper: dict[str, Any]) -> tuple[int, bytes]:
    """POST one relay-forward wrapper; (HTTP status, response body)."""
    target = ctx.relay_forward or (f"http://{ctx.relay.host}:{ctx.relay.port}" if ctx.relay else "")
    parts = urlsplit(target)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProbeError(f"--relay-forward {target!r} is not an http(s) URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = parts.path if parts.path not in ("", "/") else FORWARD_PATH
    body = dumps(wrapper)
    token = ""
    if ctx.relay_did is not None:  # the R21 bearer token of the upstream the wrapper names
        token = "Authorization: Bearer " + mint(upstream(ctx), ctx.relay_did, now_ms=wall_clock_ms(),
                                                entropy=os.urandom) + "\r\n"
    head = (f"POST {path} HTTP/1.1\r\nHost: {parts.hostname}:{port}\r\nContent-Type: application/cbor\r\n"
            f"Accept: application/cbor\r\nX-AMP-Transport-Version: 1\r\nContent-Length: {len(body)}\r\n"
            f"{token}Connection: close\r\n\r\n").encode("ascii")
    try:
        with trio.fail_after(ctx.settings.timeout_s):
            stream: trio.abc.Stream = await trio.open_tcp_stream(parts.hostname, port)
            if parts.scheme == "https":
                from ..net.transport.tls import client_context, wrap_client

                stream = wrap_client(stream, ctx.settings.ssl_context or client_context(), parts.hostname)
            try:
                await stream.send_all(head + body)
                received = bytearray()
                while len(received) < _RESPONSE_LIMIT:
                    data = await stream.receive_some(64 * 1024)
                    if not data:
                        break
                    received += data
            finally:
                await trio.aclose_forcefully(stream)
    except trio.TooSlowError:
        raise ProbeError(f"no answer from {target} within {ctx.settings.timeout_s:g} s") from None
    except (OSError, trio.BrokenResourceError) as exc:
        raise ProbeError(f"cannot POST to {target}: {exc}") from None
    status_line, _, rest = bytes(received).partition(b"\r\n")
    words = status_line.split()
    if len(words) < 2 or not words[0].startswith(b"HTTP/") or not words[1].isdigit():
        raise ProbeError(f"{target} did not answer with HTTP: {bytes(status_line[:60])!r}")
    _, _, payload = rest.partition(b"\r\n\r\n")
    return int(words[1]), payload


def _judge_refusal(status: int, payload: bytes, reason_word: str) -> Outcome:
    try:
        answer = loads(payload)
    except AmpError as exc:
        return failed(f"HTTP {status} with a body that is not CBOR: {exc.message}")
    if type(answer) is not dict:
        return failed(f"HTTP {status} with a body that is not a relay-forward-response map")
    if answer.get("error_code") == 3001 or status in (401, 403):
        return failed(f"HTTP {status}, error_code {answer.get('error_code')!r}: the relay does not answer this "
                      "harness as a trusted upstream relay; list the DID the report names as a trusted peer in "
                      "its routes file (RFC 002 §7.3)")
    if answer.get("accepted") is not False:
        return failed(f"the handoff was not refused (HTTP {status}, accepted={answer.get('accepted')!r})")
    if "receipt" in answer:
        return failed("a refused handoff carries a receipt (RFC 002 §6.5 forbids it)")
    if answer.get("error_code") != 2003:
        return failed(f"refused with error_code {answer.get('error_code')!r}, expected 2003")
    message = answer.get("error_message")
    note = f"HTTP {status}, accepted=false, error_code 2003"
    if type(message) is str:
        note += f" ({message[:120]})"
        if reason_word not in message.lower():
            note += f"; the reason does not say '{reason_word}'"
    return passed(note)


async def _relay_did(ctx: Context) -> str | None:
    if ctx.relay_did is None:
        await v003_a1(ctx)  # its ERROR names the relay
    return ctx.relay_did


async def v003_a5(ctx: Context) -> Outcome:
    """A.5: a handoff whose relay_path already names this relay → 2003, no receipt."""
    did = await _relay_did(ctx)
    if did is None:
        return skipped("the relay's DID is unknown (its A.1 ERROR did not name it): give --relay-did")
    status, payload = await forward(ctx, _wrapper(ctx, relay_path=[upstream(ctx).did, did], hop_limit=4))
    outcome = _judge_refusal(status, payload, "loop")
    if outcome.status.value == "pass":
        ctx.relay_forward_raw = payload
    return outcome


async def v003_a6(ctx: Context) -> Outcome:
    """A.6: a handoff with hop_limit = 0 → 2003, no receipt."""
    await _relay_did(ctx)  # the bearer token's audience
    status, payload = await forward(ctx, _wrapper(ctx, relay_path=[upstream(ctx).did], hop_limit=0))
    return _judge_refusal(status, payload, "hop")


async def v003_a15(ctx: Context) -> Outcome:
    """A.15: 2003 is encoded 19 07 d3 wherever the relay sends it."""
    if ctx.relay_error_raw is None:
        await v003_a1(ctx)
    if ctx.relay_forward_raw is None:
        await v003_a5(ctx)
    checked = []
    if ctx.relay_error_raw is not None:
        if _CODE_2003 not in ctx.relay_error_raw:
            return failed("the relay's ERROR does not encode code 2003 as 19 07 d3")
        checked.append("ERROR code")
    if ctx.relay_forward_raw is not None:
        if _ERROR_CODE_2003 not in ctx.relay_forward_raw:
            return failed("the relay-forward-response does not encode error_code 2003 as 19 07 d3")
        checked.append("relay-forward-response error_code")
    if not checked:
        return failed("the relay sent no 2003 to check (see 003:A.1 and 003:A.5)")
    return passed(f"2003 → 19 07 d3 in the {' and the '.join(checked)}; the 3001 half (a transfer receipt that "
                  "fails verification) needs a custody transfer no outside client can start: not driven")


RELAY_VECTORS: tuple[Vector, ...] = (
    Vector("003:A.1", "ttl 0 to an offline recipient → 2003, not queued", v003_a1),
    Vector("003:A.5", "federation loop (relay_path) → 2003", v003_a5),
    Vector("003:A.6", "hop_limit 0 → 2003", v003_a6),
    Vector("003:A.7", "duplicate suppressed: one delivery", v003_a7),
    Vector("003:A.15", "2003 encoded 19 07 d3", v003_a15),
)
