"""Reading one credential payload (RFC 005 §4.4): the typed fast path and the
general proof of deterministic CBOR must give the same verdicts.

parse_credential types the payload with msgspec and, when its maps have
known layouts in order, proves it deterministic with one plain re-encode;
everything else goes through the general re-encode. Each case below is a
payload written byte by byte, so the test sees what a hostile issuer sends.
Revocations and a publisher's status answers are typed the same way, with
the same account of a faulty field (1001 and its path).
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path
from typing import Any

import cbor2
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from deleg_helpers import IDS, NOW, did  # noqa: E402

from ampcap.deleg.cose import COSE_SIGN1_TAG, _sig_structure, default_kid, protected_header  # noqa: E402
from ampcap.deleg.credential import Credential, parse_credential, parse_revocation  # noqa: E402
from ampcap.deleg.revocation import query_result_from_wire  # noqa: E402
from ampcap.errors import AmpError  # noqa: E402
from ampcap.wire.cbor import CBORTag, dumps  # noqa: E402

CAP = "org.agentries.code-review"


def signed(payload: bytes) -> bytes:
    """A credential from A around ``payload`` exactly as given, validly signed."""
    protected = protected_header(default_kid(did("A")))
    signature = IDS["A"].sign(_sig_structure(protected, payload))
    return dumps(CBORTag(COSE_SIGN1_TAG, [protected, {}, payload, signature]))


_DROP = object()


def base(**changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {"cred_v": 1, "delegation_id": "x", "delegator": did("A"), "delegate": did("D"),
                               "scope": {"capabilities": [CAP]},
                               "validity": {"issued_at": NOW, "expires_at": NOW + 60_000}}
    for key, value in changes.items():
        if value is _DROP:
            payload.pop(key, None)
        else:
            payload[key] = value
    return payload


def outcome(payload: bytes) -> int | Credential:
    try:
        return parse_credential(signed(payload))
    except AmpError as err:
        return err.code


def test_the_usual_payload_parses() -> None:
    cred = outcome(dumps(base(allow_subdelegation=True, max_chain_depth=2, aud=[did("B")], nonce=b"n")))
    assert isinstance(cred, Credential)
    assert (cred.delegator, cred.delegate, cred.allow_subdelegation, cred.max_chain_depth, cred.aud, cred.nonce) == (
        did("A"), did("D"), True, 2, (did("B"),), b"n")
    assert cred.scope.capabilities == frozenset({CAP}) and cred.not_before == NOW


@pytest.mark.parametrize("where", ["top", "scope", "validity"])
def test_keys_out_of_order_are_refused(where: str) -> None:
    payload = base(scope={"capabilities": [CAP], "actions": ["invoke"]})
    if where == "top":
        payload = dict(reversed(list(payload.items())))
    elif where == "scope":
        payload["scope"] = {"capabilities": [CAP], "actions": ["invoke"]}  # "actions" is shorter: it goes first
    else:
        payload["validity"] = {"issued_at": NOW, "expires_at": NOW + 1}  # expires_at sorts first
    raw = cbor2.dumps(payload)  # the dicts' own order, as a careless issuer writes it
    assert raw != dumps(payload)
    assert outcome(raw) == 1001
    assert isinstance(outcome(dumps(payload)), Credential)  # the same payload in order is fine


def test_a_longer_integer_head_than_needed_is_refused() -> None:
    good = dumps(base())
    marker = cbor2.dumps("cred_v") + b"\x01"
    assert marker in good
    assert outcome(good.replace(marker, cbor2.dumps("cred_v") + b"\x18\x01")) == 1001


def test_trailing_bytes_are_refused() -> None:
    assert outcome(dumps(base()) + b"\x00") == 1001


def test_unknown_fields_are_ignored_when_deterministic() -> None:
    # An extension key holding a float: deterministic only in its shortest width.
    short = dumps(base(x_ext=1.5))
    assert isinstance(outcome(short), Credential)
    half = b"\xf9\x3e\x00"  # 1.5 as a half-precision float
    assert half in short
    assert outcome(short.replace(half, b"\xfb" + struct.pack(">d", 1.5))) == 1001
    # An extension key holding a map, in order and out of order.
    assert isinstance(outcome(dumps(base(x_ext={"b": 1, "aa": 2}))), Credential)
    assert outcome(_with_raw_ext(base(), {"aa": 2, "b": 1})) == 1001


def _with_raw_ext(payload: dict[str, Any], ext: dict[str, Any]) -> bytes:
    """``payload`` in order, plus an extension map written in ``ext``'s own order."""
    placeholder = cbor2.dumps("x_ext") + b"\x00"
    raw = dumps({**payload, "x_ext": 0})
    assert raw.count(placeholder) == 1
    return raw.replace(placeholder, cbor2.dumps("x_ext") + cbor2.dumps(ext))


def test_constraints_go_through_the_general_proof() -> None:
    ok = outcome(dumps(base(scope={"capabilities": [CAP], "constraints": {"max_amount": 5.5}})))
    assert isinstance(ok, Credential) and ok.scope.constraints == {"max_amount": 5.5}
    out_of_order = base(scope={"capabilities": [CAP], "constraints": {"bb": 1, "a": 2}})
    assert outcome(cbor2.dumps(out_of_order)) == 1001


@pytest.mark.parametrize(("field", "value", "path"), [
    ("max_chain_depth", None, "max_chain_depth"),
    ("aud", None, "aud"),
    ("aud", [], "aud"),
    ("allow_subdelegation", None, "allow_subdelegation"),
    ("allow_subdelegation", 1, "allow_subdelegation"),
    ("delegation_id", "", "delegation_id"),
    ("delegation_id", "x" * 513, "delegation_id"),
    ("delegator", 5, "delegator"),
    ("scope", {"capabilities": [CAP], "actions": ["invoke", 7]}, "scope.actions[1]"),
    ("scope", {"capabilities": []}, "scope.capabilities"),
    ("validity", {"issued_at": NOW, "expires_at": -1}, "validity.expires_at"),
    ("validity", {"issued_at": NOW, "expires_at": NOW + 1, "not_before": None}, "validity.not_before"),
    ("validity", {"expires_at": NOW + 1}, "validity.issued_at"),
    ("delegate", _DROP, "delegate"),
    ("nonce", "text", "nonce"),
])
def test_wrong_types_are_1001_with_their_path(field: str, value: Any, path: str) -> None:
    with pytest.raises(AmpError) as err:
        parse_credential(signed(dumps(base(**{field: value}))))
    assert err.value.code == 1001
    assert err.value.path == path, err.value.message


def test_a_null_nonce_is_an_absent_one() -> None:
    cred = outcome(dumps(base(nonce=None)))
    assert isinstance(cred, Credential) and cred.nonce is None


def test_version_is_decided_before_the_fields_but_after_determinism() -> None:
    assert outcome(dumps(base(cred_v=2, delegator=5))) == 1004
    assert outcome(dumps(base(cred_v=True))) == 1004
    assert outcome(dumps(base(cred_v=_DROP))) == 1001
    assert outcome(cbor2.dumps(dict(reversed(list(base(cred_v=2).items()))))) == 1001
    assert outcome(dumps([1, 2])) == 1001


def test_semantic_rules_keep_their_codes() -> None:
    assert outcome(dumps(base(validity={"issued_at": NOW, "expires_at": NOW}))) == 3004
    assert outcome(dumps(base(max_chain_depth=0))) == 3004
    assert outcome(dumps(base(scope={"capabilities": ["org.x.*"]}))) == 3004
    assert outcome(dumps(base(scope={"capabilities": [f"org.x.c{i}" for i in range(65)]}))) == 3004
    assert outcome(dumps(base(scope={}))) == 3004
    assert outcome(dumps(base(delegate=did("D") + "#k"))) == 1001
    assert outcome(dumps(base(aud=["not a did"]))) == 1001


def test_revocation_payloads_are_typed_alike() -> None:
    protected = protected_header(default_kid(did("A")))

    def revocation(payload: dict[str, Any]) -> bytes:
        body = dumps(payload)
        return dumps(CBORTag(COSE_SIGN1_TAG, [protected, {}, body, IDS["A"].sign(_sig_structure(protected, body))]))

    good = {"rev_v": 1, "delegation_id": "x", "delegator": did("A"), "revoked_at": NOW}
    rev = parse_revocation(revocation({**good, "reason": None}))
    assert (rev.delegation_id, rev.delegator, rev.revoked_at, rev.reason) == ("x", did("A"), NOW, None)
    for change, path in (({"revoked_at": -1}, "revoked_at"), ({"revoked_at": True}, "revoked_at"),
                         ({"delegation_id": ""}, "delegation_id"), ({"delegator": "not a did"}, "delegator"),
                         ({"reason": 5}, "reason"), ({"revoked_at": _DROP}, "revoked_at")):
        payload = {k: v for k, v in {**good, **change}.items() if v is not _DROP}
        with pytest.raises(AmpError) as err:
            parse_revocation(revocation(payload))
        assert (err.value.code, err.value.path) == (1001, path), err.value.message
    with pytest.raises(AmpError) as err:
        parse_revocation(revocation({**good, "rev_v": 2}))
    assert err.value.code == 1004


def test_a_publishers_status_answer_is_typed_alike() -> None:
    good = {"delegator": did("A"), "delegation_id": "x", "status": "revoked", "updated_at": NOW,
            "revoked_at": NOW - 1, "max_age_s": None}
    result = query_result_from_wire(good)
    assert (result.status, result.updated_at, result.revoked_at, result.max_age_s) == ("revoked", NOW, NOW - 1, None)
    for change, path in (({"updated_at": None}, "updated_at"), ({"updated_at": True}, "updated_at"),
                         ({"max_age_s": -5}, "max_age_s"), ({"expires_at": "soon"}, "expires_at"),
                         ({"delegator": 7}, "delegator"), ({"status": "gone"}, "status"),
                         ({"delegation_id": _DROP}, "delegation_id")):
        answer = {k: v for k, v in {**good, **change}.items() if v is not _DROP}
        with pytest.raises(AmpError) as err:
            query_result_from_wire(answer)
        assert (err.value.code, err.value.path) == (1001, path), err.value.message
    with pytest.raises(AmpError) as err:
        query_result_from_wire([good])
    assert err.value.code == 1001
