"""The suite's byte vectors of RFC 001 (A.1, A.2, A.6), run against ampcap's
own codec.

These vectors fix keys, ids, timestamps and a nonce, and give the exact bytes
an implementation must produce and accept. No target can be asked to sign
with the RFC's keys over the network, so the harness runs them only for
ampcap itself (``ampcap interop --self``); against another target they are
reported ``skip`` with that reason. The vector data is our transcription of
RFC 001 v0.42 Appendix A (``data/rfc001_appendix_a.json``, the same file the
unit tests use).

A.6 is checked as ruling R16 says: envelope encoding, Sig_Input, signature
and ciphertext length; the published ciphertext does not open under the
published keys with the standard NaCl box, and the note says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from functools import cache
from importlib import resources
from typing import Any

from ..errors import AmpError
from ..wire.cbor import dumps, loads
from ..wire.didkey import is_did
from ..wire.envelope import decode_envelope, encode_envelope, seal
from ..wire.identity import Identity
from ..wire.keyring import Keyring, default_resolver
from ..wire.receive import ReceivePipeline
from ..wire.signing import sig_input, verify_signature
from .judge import Outcome, failed, passed

__all__ = ["CODEC_CHECKS", "appendix_a"]


@cache
def appendix_a() -> dict[str, Any]:
    text = resources.files("ampcap.interop").joinpath("data/rfc001_appendix_a.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def _scripted(*chunks: bytes) -> Callable[[int], bytes]:
    """Entropy that hands out the vector's own random parts, in order."""
    it: Iterator[bytes] = iter(chunks)

    def entropy(n: int) -> bytes:
        chunk = next(it)
        if len(chunk) != n:
            raise ValueError(f"vector entropy: {n} bytes asked, {len(chunk)} given")
        return chunk

    return entropy


def _build(name: str, *, encrypt: bool = False) -> tuple[Any, bytes]:
    data = appendix_a()
    common, v = data["common"], data["vectors"][name]
    ident = Identity.from_seed(bytes.fromhex(common["ed25519_seed"]), did=v["from"],
                               x25519_secret=bytes.fromhex(common["x25519_sender_secret"]))
    mid = bytes.fromhex(v["id"])
    return seal(ident, typ=v["typ"], to=v["to"], body=loads(bytes.fromhex(v["body_cbor"])), now_ms=v["ts"],
                entropy=_scripted(mid[8:], bytes.fromhex(common["nonce"])), ttl=common["ttl"],
                reply_to=bytes.fromhex(v["reply_to"]) if "reply_to" in v else None,
                encrypt_to=bytes.fromhex(common["x25519_recipient_public"]) if encrypt else None)


def _pipeline() -> ReceivePipeline:
    common = appendix_a()["common"]
    # A.1: in the vectors both DIDs resolve to the same signing key.
    ring = Keyring.from_mapping({
        common["from"]: {"ed25519": common["ed25519_public"], "x25519": common["x25519_sender_public"]},
        common["to"]: {"ed25519": common["ed25519_public"], "x25519": common["x25519_recipient_public"],
                       "x25519_secret": common["x25519_recipient_secret"]},
    })
    return ReceivePipeline(default_resolver(ring), decrypt_with=ring.x25519_secrets())


def check_a1() -> Outcome:
    """A.1 common parameters: every public key follows from its secret, the DIDs parse."""
    common = appendix_a()["common"]
    ident = Identity.from_seed(bytes.fromhex(common["ed25519_seed"]),
                               x25519_secret=bytes.fromhex(common["x25519_sender_secret"]))
    if ident.public_key.hex() != common["ed25519_public"]:
        return failed("the Ed25519 seed does not give the published public key")
    if ident.x25519_public.hex() != common["x25519_sender_public"]:
        return failed("the sender X25519 secret does not give the published public key")
    recipient = Identity.from_seed(bytes(32), x25519_secret=bytes.fromhex(common["x25519_recipient_secret"]))
    if recipient.x25519_public.hex() != common["x25519_recipient_public"]:
        return failed("the recipient X25519 secret does not give the published public key")
    if not (is_did(common["from"]) and is_did(common["to"])):
        return failed("the vector DIDs do not parse as DIDs")
    return passed("Ed25519 and both X25519 public keys derive from the published secrets; from/to parse as DIDs")


def check_a2() -> Outcome:
    """A.2 MESSAGE with a null body: built byte for byte, then received."""
    v = appendix_a()["vectors"]["A.2"]
    env, wire = _build("A.2")
    for what, ours, theirs in (("id", env.id.hex(), v["id"]), ("body", dumps(env.body).hex(), v["body_cbor"]),
                               ("Sig_Input", sig_input(env, dumps(env.body)).hex(), v["sig_input"]),
                               ("signature", env.sig.hex(), v["signature"]), ("message", wire.hex(), v["message"])):
        if ours != theirs:
            return failed(f"{what} differs from the vector: {ours[:64]}… vs {theirs[:64]}…")
    raw = bytes.fromhex(v["message"])
    try:
        inbound = _pipeline().check(raw, v["ts"] + 1000)
    except AmpError as exc:
        return failed(f"the vector's message is refused: {exc.code} {exc.message}")
    if encode_envelope(inbound.envelope) != raw:
        return failed("the decoded message does not re-encode to the vector's bytes")
    return passed("Sig_Input, signature and message bytes reproduced; the message verifies and re-encodes exactly")


def check_a6() -> Outcome:
    """A.6 authcrypt MESSAGE: structure, Sig_Input and signature (ruling R16)."""
    data = appendix_a()
    common, v = data["common"], data["vectors"]["A.6"]
    raw = bytes.fromhex(v["message"])
    env = decode_envelope(raw)
    if env.enc is None or env.body is not None:
        return failed("the vector's message does not decode as an encrypted envelope")
    if encode_envelope(env) != raw:
        return failed("the vector's message does not re-encode to its own bytes")
    if env.enc.nonce.hex() != common["nonce"] or env.enc.ciphertext.hex() != v["ciphertext"]:
        return failed("nonce or ciphertext decoded wrongly")
    body_bytes = bytes.fromhex(v["body_cbor"])
    if sig_input(env, body_bytes).hex() != v["sig_input"]:
        return failed("Sig_Input over the plaintext body differs from the vector")
    if not verify_signature(bytes.fromhex(common["ed25519_public"]), bytes.fromhex(v["sig_input"]), env.sig):
        return failed("the vector's signature does not verify")
    built, wire = _build("A.6", encrypt=True)
    if built.sig.hex() != v["signature"]:
        return failed("our signature for the vector's content differs from the vector's")
    if built.enc is None or len(built.enc.ciphertext) != len(bytes.fromhex(v["ciphertext"])):
        return failed("our ciphertext's length differs from the vector's (tag + body)")
    try:
        inbound = _pipeline().check(wire, v["ts"])
    except AmpError as exc:
        return failed(f"our own authcrypt message for the vector is refused: {exc.code} {exc.message}")
    if dumps(inbound.body).hex() != v["body_cbor"]:
        return failed("our own authcrypt message decrypts to another body")
    return passed("envelope, Sig_Input and signature reproduced, our authcrypt round trip opens; not checked: "
                  "decrypting the published ciphertext, which does not open under the published keys with "
                  "the standard NaCl box (ruling R16)")


# vector id -> (title, check)
CODEC_CHECKS: dict[str, tuple[str, Callable[[], Outcome]]] = {
    "001:A.1": ("common parameters: keys derive, DIDs parse", check_a1),
    "001:A.2": ("MESSAGE null body byte for byte", check_a2),
    "001:A.6": ("authcrypt MESSAGE: Sig_Input and signature (R16)", check_a6),
}
