"""The R21 bearer token: what it proves and every way it is refused."""

from __future__ import annotations

import base64
import json
import os

import pytest

from ampcap.errors import AmpError
from ampcap.wire.bearer import MAX_LIFETIME_S, mint, verify
from ampcap.wire.identity import DidKeyResolver, Identity

SERVER = "did:web:server.example"
NOW = 1_800_000_000_000


def _b64(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def _verify(token: str, now: int = NOW) -> str:
    return verify(token, resolver=DidKeyResolver(), audience=SERVER, now_ms=now)


def test_a_minted_token_names_its_signer() -> None:
    ident = Identity.generate(os.urandom)
    token = mint(ident, SERVER, now_ms=NOW, entropy=os.urandom)
    header = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
    assert header["alg"] == "EdDSA"
    assert _verify(token) == ident.did
    assert _verify(token, NOW + 239_000) == ident.did


@pytest.mark.parametrize("change, fragment", [
    (lambda h, c: (h | {"alg": "none"}, c), "alg"),
    (lambda h, c: (h | {"crit": ["x"]}, c), "critical"),
    (lambda h, c: (h, c | {"aud": "did:web:other"}), "aud"),
    (lambda h, c: (h, c | {"exp": c["iat"] + MAX_LIFETIME_S + 1}), "at most"),
    (lambda h, c: (h, c | {"iss": "bob"}), "iss"),
    (lambda h, c: (h, c | {"iat": "now"}), "integers"),
])
def test_tampered_tokens_are_refused(change: object, fragment: str) -> None:
    ident = Identity.generate(os.urandom)
    token = mint(ident, SERVER, now_ms=NOW, entropy=os.urandom)
    head, claims, sig = token.split(".")
    h = json.loads(base64.urlsafe_b64decode(head + "=="))
    c = json.loads(base64.urlsafe_b64decode(claims + "=="))
    h2, c2 = change(h, c)  # type: ignore[operator]
    with pytest.raises(AmpError) as refused:
        _verify(f"{_b64(h2)}.{_b64(c2)}.{sig}")
    assert refused.value.code == 3001 and fragment in refused.value.message


@pytest.mark.parametrize("token", ["", "a.b", "a.b.c.d", "!!.e30.AA", "x" * 5000])
def test_malformed_tokens_are_3001(token: str) -> None:
    with pytest.raises(AmpError) as refused:
        _verify(token)
    assert refused.value.code == 3001


def test_expired_future_and_forged_tokens_are_refused() -> None:
    ident, other = Identity.generate(os.urandom), Identity.generate(os.urandom)
    token = mint(ident, SERVER, now_ms=NOW, entropy=os.urandom)
    with pytest.raises(AmpError, match="expired"):
        _verify(token, NOW + 10 * 60_000)
    with pytest.raises(AmpError, match="future"):
        _verify(token, NOW - 10 * 60_000)
    forged = token.rsplit(".", 1)[0] + "." + mint(other, SERVER, now_ms=NOW, entropy=os.urandom).rsplit(".", 1)[1]
    with pytest.raises(AmpError, match="does not verify"):
        _verify(forged)
