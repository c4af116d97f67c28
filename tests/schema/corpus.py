"""Valid and invalid instances for the CDDL rules, with the path each
invalid one must be reported at.

``CORPUS`` rows are ``(rule, value, expected)``: ``expected`` is ``[]`` for a
valid, clean value, or the sorted paths of its *error* findings. Extension
keys are listed separately (``EXTENSIONS``) because they are findings, not
errors.
"""

from __future__ import annotations

from typing import Any

MID = bytes(range(16))
SID = b"\x11" * 16
H32 = b"\x22" * 32
H64 = b"\x33" * 64
DROP = ...  # in the builders below: leave this key out


def ref(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"uri": "https://schemas.example/in.json", "hash_alg": "sha-256", "hash": H32}
    base.update(over)
    return {k: v for k, v in base.items() if v is not DROP}


def offline(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"bundle_id": "org.example.bundle", "artifact_key": "in.json",
                            "hash_alg": "sha-512", "hash": H64}
    base.update(over)
    return {k: v for k, v in base.items() if v is not DROP}


def descriptor(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"id": "org.example.sum:1.2.0", "name": "org.example.sum", "version": "1.2.0",
                            "input_schema": offline(hash_alg="sha-256", hash=H32),
                            "output_schema": offline()}
    base.update(over)
    return {k: v for k, v in base.items() if v is not DROP}


def envelope(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"v": 1, "id": MID, "typ": 0x22, "ts": 1_707_055_200_000, "ttl": 60_000,
                            "from": "did:key:z6MkAlice", "to": "did:key:z6MkBob", "sig": b"\x00" * 64,
                            "body": {"id": "org.example.sum:1.2.0", "params": {"a": 1}}}
    base.update(over)
    return {k: v for k, v in base.items() if v is not DROP}


CORPUS: list[tuple[str, Any, list[str]]] = [
    # ---- RFC 001 envelope (§4.1)
    ("amp-message", envelope(), []),
    ("amp-message", envelope(to=["did:key:a", "did:key:b"], reply_to=MID, thread_id=b"t"), []),
    ("amp-message", envelope(body=None, ext={"trace": "x"}), []),
    ("amp-message", envelope(body=DROP, enc={"alg": "X25519-XSalsa20-Poly1305", "mode": "authcrypt",
                                             "nonce": b"\x01" * 24, "ciphertext": b"ct"}), []),
    ("amp-message", envelope(id=b"short"), ["id"]),
    ("amp-message", envelope(v=-1), ["v"]),
    ("amp-message", envelope(to=[]), ["to"]),
    ("amp-message", envelope(sig=DROP), ["sig"]),
        ("encrypted-payload", {"alg": "X25519-XSalsa20-Poly1305", "mode": "authcrypt",
                           "nonce": b"\x01" * 23, "ciphertext": b""}, ["nonce"]),
    ("encrypted-payload", {"alg": "X25519-XSalsa20-Poly1305", "mode": "authcrypt", "nonce": b"\x01" * 24,
                           "ciphertext": b"\x00" * 17}, []),
    ("encrypted-payload", {"alg": "AES", "mode": "authcrypt", "nonce": b"\x01" * 24,
                           "ciphertext": b""}, ["alg"]),
    # ---- RFC 001 bodies (§4.4)
    ("ping-body", None, []),
    ("ping-body", {}, [""]),
    ("pong-body", None, []),
    ("ack-body", {"ack_source": "recipient", "received_at": 5}, []),
    ("ack-body", {"ack_source": "relay", "received_at": 5, "verified": True, "chunks_received": 3}, []),
    ("ack-body", {"ack_source": "sender", "received_at": 5}, ["ack_source"]),
    ("ack-body", {"ack_source": "relay", "received_at": -5}, ["received_at"]),
    ("ack-body", {"ack_source": "relay", "received_at": 5, "verified": 1}, ["verified"]),
    ("proc-ok-body", {}, []),
    ("proc-ok-body", {"details": [1, 2]}, []),
    ("proc-fail-body", {"error": "x"}, []),
    ("proc-fail-body", [], [""]),
    ("error-body", {"code": 4001, "category": "capability", "message": "bad", "retry": False}, []),
    ("error-body", {"code": 4001, "message": "bad"}, ["category"]),
    ("error-body", {"code": "4001", "category": "c", "message": "bad"}, ["code"]),
    ("error-body", {"code": 1, "category": "c", "message": "m", "batch_index": True}, ["batch_index"]),
    ("hello-body", {"versions": ["1.0"], "agent_info": {"name": "ampcap"}}, []),
    ("hello-body", {"versions": []}, ["versions"]),
    ("hello-body", {"versions": ["1.0"], "agent_info": {"implementation": "x"}}, ["agent_info.name"]),
    ("hello-body", {"versions": ["1.0", 2]}, ["versions[1]"]),
    ("hello-ack-body", {"selected": "1.0"}, []),
    ("hello-ack-body", {}, ["selected"]),
    ("hello-reject-body", {}, []),
    ("hello-reject-body", {"reason": 5}, ["reason"]),
    ("batch-body", {"items": [b"\xa0"]}, []),
    ("batch-body", {"items": []}, ["items"]),
    ("doc-request-body", {}, []),
    ("doc-request-body", {"hash": "not bytes"}, ["hash"]),
    ("doc-send-body", {"content_type": "text/plain", "filename": "a.txt", "size": 2, "hash": H32, "data": b"hi"}, []),
    ("doc-send-body", {"content_type": "text/plain", "filename": "a.txt", "size": 2, "hash": H32}, ["data"]),
    ("stream-start-body", {"stream_id": "s1", "content_type": "video/mp4", "filename": "v.mp4", "total_size": 9,
                           "total_chunks": 3, "chunk_size": 3, "hash_algo": "sha-256"}, []),
    ("stream-start-body", {"stream_id": "s1", "content_type": "video/mp4", "filename": "v.mp4", "total_size": 9,
                           "total_chunks": -3, "chunk_size": 3, "hash_algo": "sha-256"}, ["total_chunks"]),
    ("stream-data-body", {"stream_id": "s1", "index": 0, "data": b"abc"}, []),
    ("stream-data-body", {"stream_id": "s1", "index": 0, "data": "abc"}, ["data"]),
    ("stream-end-body", {"stream_id": "s1", "hash": H32}, []),
    ("stream-end-body", {"hash": H32}, ["stream_id"]),
    ("cred-issue-body", {"format": "jwt_vc", "credential": "eyJ…", "purpose": "p"}, []),
    ("cred-issue-body", {"credential": "eyJ…"}, ["format"]),
    ("cred-request-body", {"format": "jwt_vc"}, []),
    ("cred-request-body", {"format": 1}, ["format"]),
    ("cred-present-body", {"format": "jwt_vc", "credential": {"a": 1}}, []),
    ("cred-present-body", {"format": "jwt_vc"}, ["credential"]),
    ("cred-verify-body", {"format": "jwt_vc", "credential": None}, []),
    ("cred-verify-body", {"credential": None}, ["format"]),
    ("deleg-grant-body", {"credential": {"format": "cose_sign1", "credential": b"c"},
                          "expires": "2026-12-31T23:59:59Z"}, []),
    ("deleg-grant-body", {"credential": {"format": "cose_sign1", "credential": b"c"}, "expires": 20261231},
     ["expires"]),
    ("deleg-grant-body", {"credential": b"not a map"}, ["credential"]),
    ("deleg-revoke-body", {"delegation_id": "d1", "revocation": b"r"}, []),
    ("deleg-revoke-body", {"delegation_id": "d1"}, ["revocation"]),
    ("deleg-query-body", {"delegation_id": "d1", "delegator": "did:key:z6Mk"}, []),
    ("deleg-query-body", {"delegator": "did:key:z6Mk"}, ["delegation_id"]),
    ("proc-ok-body", 5, [""]),
    ("doc-request-body", {"accept": "text/plain", "doc_id": "d"}, []),
    ("session-context", {"session_id": SID, "session_scope": True}, []),
    ("session-context", {"session_id": SID}, ["session_scope"]),
    ("pong-body", "x", [""]),
    # ---- RFC 002 transport objects (§4.4, §4.5)
    ("handshake-request", {"version": 1, "max_msg_size": 1 << 20}, []),
    ("handshake-request", {"version": 1, "max_msg_size": 1 << 20, "extensions": ["x"], "token": b"t"}, []),
    ("handshake-request", {"version": 1}, ["max_msg_size"]),
    ("handshake-response", {"version": 1, "accepted": True, "max_msg_size": 65536}, []),
    ("handshake-response", {"version": 1, "accepted": "yes", "max_msg_size": 65536}, ["accepted"]),
    ("goaway", {"reason": 0, "message": "bye", "last_id": MID}, []),
    ("goaway", {"reason": 0, "last_id": b"x"}, ["last_id"]),
    ("transport-error", {"code": 1001, "message": "bad frame"}, []),
    ("transport-error", {"message": "bad frame"}, ["code"]),
    # ---- RFC 004 descriptors and schema refs (§4.2)
    ("schema-ref", ref(), []),
    ("schema-ref", offline(), []),
    ("schema-ref", ref(bundle_id="b", artifact_key="k", media_type="application/schema+json"), []),
    ("schema-ref", ref(hash_alg="md5"), ["hash_alg"]),
    ("schema-ref", ref(hash=DROP), ["hash"]),
    # an optional group half present: neither form accepts it
    ("schema-ref", ref(bundle_id="b"), ["artifact_key"]),
    ("capability-descriptor", descriptor(), []),
    ("capability-descriptor", descriptor(supported_ranges=[">=1.0.0 <2.0.0"], notes="n",
                                         descriptor_sig=b"s"), []),
    ("capability-descriptor", descriptor(version=DROP), ["version"]),
    ("capability-descriptor", descriptor(supported_ranges=">=1.0.0"), ["supported_ranges"]),
    ("capability-descriptor", descriptor(input_schema={"uri": "u"}), ["input_schema.hash",
                                                                      "input_schema.hash_alg"]),
    # ---- RFC 004 §6.4 query and declare (with R7's next_cursor)
    ("cap-query-body", {"filter": {"capability": "org.example.sum"}}, []),
    ("cap-query-body", {"filter": {"type": "sum", "version": ">=1.0.0"}, "limit": 2, "order": "oldest-first"}, []),
    ("cap-query-body", {"filter": {"capability": "x"}, "cursor": "c", "order": "random"}, ["order"]),
    ("cap-query-body", {"filter": {"version": ">=1.0.0"}}, ["filter.capability"]),
    ("cap-query-body", {"filter": {"capability": "x"}, "limit": -1}, ["limit"]),
    ("cap-query-body", {}, ["filter"]),
    ("cap-declare-body", {"capabilities": [descriptor()]}, []),
    ("cap-declare-body", {"capabilities": [descriptor()], "next_cursor": "opaque"}, []),
    ("cap-declare-body", {"capabilities": []}, ["capabilities"]),
    ("cap-declare-body", {"capabilities": [descriptor(output_schema=ref(hash=5))]},
     ["capabilities[0].output_schema.hash"]),
    ("cap-declare-body", {"capabilities": [descriptor()], "next_cursor": 7}, ["next_cursor"]),
    ("cap-negotiate-hints", {"preferred": "1.2.0", "acceptable": ["1.1.0"], "range": ">=1.0.0 <2.0.0"}, []),
    ("cap-negotiate-hints", {"acceptable": "1.1.0"}, ["acceptable"]),
    # ---- RFC 004 §7.4 invoke and result, session context
    ("cap-invoke-body", {"id": "org.example.sum:1.2.0", "params": {"a": 1}}, []),
    ("cap-invoke-body", {"capability": "org.example.sum", "version": "1.2.0", "params": None}, []),
    ("cap-invoke-body", {"type": "sum", "negotiate": {"range": ">=1.0.0"}, "params": [], "timeout_ms": 5}, []),
    ("cap-invoke-body", {"id": "org.example.sum:1.2.0", "params": 1,
                         "session": {"session_id": SID, "session_scope": True}}, []),
    ("cap-invoke-body", {"id": "org.example.sum:1.2.0"}, ["params"]),
    ("cap-invoke-body", {"id": "org.example.sum:1.2.0", "params": 1, "timeout_ms": -1}, ["timeout_ms"]),
    ("cap-invoke-body", {"id": "org.example.sum:1.2.0", "params": 1, "session": {"session_id": b"x"}},
     ["session.session_id"]),
    ("cap-invoke-any-form", {"params": 1}, []),
    ("cap-invoke-any-form", {"params": 1, "version": 2}, ["version"]),
    ("cap-session-context", {"session_id": SID}, []),
    ("cap-session-context", {"session_id": SID, "session_scope": False}, ["session_scope"]),
    ("cap-result-body", {"status": "success", "result": {"sum": 3}}, []),
    ("cap-result-body", {"status": "error", "error": {"code": 5003, "name": "TIMEOUT", "message": "late"}}, []),
    ("cap-result-body", {"status": "error", "error": {"code": -1}}, ["error.code"]),
    ("cap-result-body", {"status": "done", "result": 1}, ["status"]),
    ("cap-result-body", {"status": "success"}, ["result"]),
    # ---- RFC 006 §6.4 provisional bodies
    ("processing-body", {}, []),
    ("processing-body", {"status_text": "queued", "eta_ms": 5, "cancellable": True}, []),
    ("processing-body", {"eta_ms": "soon"}, ["eta_ms"]),
    ("progress-body", {"progress_pct": 40, "session": {"session_id": SID, "session_scope": True}}, []),
    ("progress-body", {"status_text": "x"}, ["progress_pct"]),
    ("progress-body", {"progress_pct": 4.5}, ["progress_pct"]),
    ("input-required-body", {"prompt": "which?", "options": ["a", "b"], "timeout_ms": 9}, []),
    ("input-required-body", {"prompt": "which?", "options": [1]}, ["options[0]"]),
]

# Values whose only findings are extension keys (forward compatibility).
EXTENSIONS: list[tuple[str, Any, list[str]]] = [
    ("cap-invoke-by-id", {"id": "a.b:1.0.0", "params": 1, "priority": "high"}, ["priority"]),
    ("cap-result-body", {"status": "success", "result": 1, "trace": "t"}, ["trace"]),
    ("cap-declare-body", {"capabilities": [descriptor(stability="stable")]}, ["capabilities[0].stability"]),
    ("ack-body", {"ack_source": "relay", "received_at": 1, "x": 1}, ["x"]),
    # a key no entry of `{* tstr => any}` can take is still only unknown, not wrong
    ("amp-message", envelope(ext={1: "x"}), ["ext[1]"]),
]
