"""How fast is the CDDL check? A typical signed CAP_INVOKE, envelope + body.

ampcap validates the decoded values (what the codec hands the receive
pipeline): the envelope map against ``amp-message`` and the body by its type
code. pycddl, measured in the same run as the independent baseline, takes
CBOR bytes and decodes them itself, so it gets the message bytes and the
body bytes ready-made (their encoding is not charged to it) and its time
includes its own decode.

Target (issue 3): ≤ 10 µs per message, and faster than pycddl.

    python tools/bench_cddl.py [--rounds 20000] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

from ampcap.schema import load_schemas, schema_sources
from ampcap.wire.cbor import dumps, loads
from ampcap.wire.envelope import seal
from ampcap.wire.identity import Identity
from ampcap.wire.registry import MessageType

TARGET_US = 10.0
BODY = {"id": "org.ampcap.demo.echo:1.1.0", "params": {"message": "x" * 160}, "timeout_ms": 30_000,
        "session": {"session_id": b"\x11" * 16, "session_scope": True}}


def per_call_us(fn: Callable[[], object], rounds: int, repeats: int = 5) -> float:
    """Best-of-``repeats`` median-ish figure: µs per call over ``rounds`` calls."""
    results = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(rounds):
            fn()
        results.append((time.perf_counter() - t0) / rounds * 1e6)
    return min(results) if len(results) < 3 else statistics.median(results)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    args = parser.parse_args()
    rounds = 500 if args.quick else args.rounds

    alice, bob = Identity.from_seed(bytes(range(32))), Identity.from_seed(bytes(range(1, 33)))
    _, message = seal(alice, typ=int(MessageType.CAP_INVOKE), to=bob.did, body=BODY,
                      now_ms=1_763_800_000_000, entropy=os.urandom)
    decoded = loads(message)
    body_bytes = dumps(decoded["body"])
    typ = decoded["typ"]

    t0 = time.perf_counter()
    schemas = load_schemas()
    load_ms = (time.perf_counter() - t0) * 1e3
    assert schemas.validate_envelope(decoded) == [] and schemas.validate_body(typ, decoded["body"]) == []

    def ours() -> None:
        schemas.validate_envelope(decoded)
        schemas.validate_body(typ, decoded["body"])

    ours_us = per_call_us(ours, rounds)
    bad = dict(decoded, body={"id": "org.ampcap.demo.echo:1.1.0", "params": 1, "timeout_ms": "soon"})
    bad_us = per_call_us(lambda: schemas.validate_body(typ, bad["body"]), rounds)

    print(f"CAP_INVOKE message of {len(message)} bytes (body {len(body_bytes)} bytes), {rounds} rounds")
    print(f"schema load from the shipped compiled form (once per process): {load_ms:.1f} ms")
    print(f"ampcap, envelope + body, valid:     {ours_us:6.2f} µs   target ≤ {TARGET_US:.0f}")
    print(f"ampcap, body with an error + path:  {bad_us:6.2f} µs")
    code = 0 if ours_us <= TARGET_US or args.quick else 1
    try:
        import pycddl
    except ImportError:
        print("pycddl not installed (pip install 'ampcap[test]'): no baseline", file=sys.stderr)
        return code
    text = "\n".join(t for _, t in schema_sources())
    envelope_schema = pycddl.Schema(f"ampcap-root = amp-message\n{text}")
    body_schema = pycddl.Schema(f"ampcap-root = cap-invoke-body\n{text}")

    def theirs() -> None:
        envelope_schema.validate_cbor(message)
        body_schema.validate_cbor(body_bytes)

    theirs()
    theirs_us = per_call_us(theirs, max(rounds // 10, 50))
    print(f"pycddl, envelope + body (bytes in): {theirs_us:6.2f} µs")
    print(f"ampcap / pycddl = {ours_us / theirs_us:.3f}×   target < 1")
    if ours_us >= theirs_us and not args.quick:
        code = 1
    return code


if __name__ == "__main__":
    raise SystemExit(main())
