"""The dump decodes ampcap's extensions (R23): the HELLO announcement, a
cancel message, and a deprecation entry in ``ext`` (verified or not)."""

from __future__ import annotations

import itertools
from typing import Any

from ampcap.caps.deprecation import EXT_KEY, Notice, signed_entry
from ampcap.dump.records import Inspector
from ampcap.dump.render import Style, record_to_json, render_text
from ampcap.wire.envelope import seal
from ampcap.wire.extensions import OFFERED, cancel_body
from ampcap.wire.identity import Identity
from ampcap.wire.keyring import default_resolver
from ampcap.wire.registry import MessageType

ALICE = Identity.from_seed(b"\x41" * 32)
T0 = 1_795_000_000_000
INVOKE_ID = bytes(range(16))


def sealed(typ: int, body: Any, **extra: Any) -> bytes:
    c = itertools.count(1)
    return seal(ALICE, typ=typ, to=ALICE.did, body=body, now_ms=T0, entropy=lambda n: next(c).to_bytes(n, "big"),
                **extra)[1]


def test_hello_cancel_and_deprecation_are_decoded() -> None:
    insp = Inspector(default_resolver(), now_ms=T0)
    hello = insp.message(sealed(int(MessageType.HELLO), {"versions": ["1.0"], "extensions": list(OFFERED)}))
    assert "extensions offered: ampcap.cancel, ampcap.deprecation, ampcap.list-all" in hello.notes

    cancel = insp.message(sealed(int(MessageType.EXTENSION), cancel_body(INVOKE_ID), reply_to=INVOKE_ID))
    assert cancel.notes == [f"ampcap cancel of invoke {INVOKE_ID.hex()}"]
    assert f"ampcap cancel of invoke {INVOKE_ID.hex()}" in render_text(cancel, Style())

    notice = Notice(id="org.example.x:1.0.0", replacement="org.example.x:2.0.0", sunset="2027-01-31")
    ext = signed_entry(ALICE.sign, ALICE.did, INVOKE_ID, [notice])
    result = insp.message(sealed(int(MessageType.CAP_RESULT), {"status": "success", "result": {}},
                                 reply_to=INVOKE_ID, ext=ext))
    assert result.notes == ["ampcap deprecation (its signature verifies): org.example.x:1.0.0 is deprecated; "
                            "use org.example.x:2.0.0; sunset 2027-01-31"]
    assert record_to_json(result)["ext"][EXT_KEY]["notices"] == [notice.to_wire()]

    ext[EXT_KEY]["notices"][0]["sunset"] = "2099-01-01"  # changed on the way: ext is outside the signature
    forged = insp.message(sealed(int(MessageType.CAP_RESULT), {"status": "success", "result": {}},
                                 reply_to=INVOKE_ID, ext=ext))
    assert forged.signature == "valid"
    assert forged.notes == ["ampcap deprecation entry that does not verify (ignored by callers)"]


def test_a_trace_context_entry_is_decoded_with_whether_it_verifies() -> None:
    from ampcap.wire import trace_context

    insp = Inspector(default_resolver(), now_ms=T0)
    parent = trace_context.TraceParent(trace_id=0xabc, span_id=0xdef, flags=1, tracestate="k=v")
    message_id = T0.to_bytes(8, "big") + b"\x07" * 8
    ext = trace_context.signed_entry(ALICE.sign, ALICE.did, message_id, parent)
    invoke = insp.message(sealed(int(MessageType.CAP_INVOKE), {"id": "org.example.x:1.0.0", "params": {}},
                                 message_id=message_id, ext=ext))
    assert invoke.notes == [f"ampcap trace context (its signature verifies): traceparent {parent.header()}, "
                            "tracestate 3 characters"]
    moved = insp.message(sealed(int(MessageType.CAP_INVOKE), {"id": "org.example.x:1.0.0", "params": {}},
                                message_id=T0.to_bytes(8, "big") + b"\x08" * 8, ext=ext))  # on another message
    assert moved.notes == ["ampcap trace context that is malformed or does not verify (ignored by daemons)"]
