"""Wire-core speed against its floor, measured in the same run.

    encode+sign   ampcap.wire.envelope.seal                 vs  cbor2.dumps(canonical=True) + PyNaCl sign
    decode+verify ampcap.wire.receive.ReceivePipeline.check vs  cbor2.loads + PyNaCl verify
                  (literal floor: it verifies Sig_Input bytes computed ahead of time,
                  which no verifier has), and vs the bare-library floor: cbor2.loads,
                  then Sig_Input built with cbor2.dumps(canonical=True) (body
                  re-encoded, as RFC 001 §8.2 mandates), then PyNaCl verify
    decode only   ampcap.wire.envelope.decode_envelope      vs  cbor2.loads

for a typical ~400-byte CAP_INVOKE envelope (params ~200 bytes). Prints the
median µs per operation over several repeats and the ratio to the floor
(target: ≤ 1.3). ``--quick`` runs a few-second smoke version.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import cbor2
from nacl.signing import SigningKey

from ampcap.wire.cbor import dumps
from ampcap.wire.envelope import decode_envelope, seal
from ampcap.wire.identity import DidKeyResolver, Identity
from ampcap.wire.receive import ReceivePipeline
from ampcap.wire.signing import sig_input

NOW = 1_795_343_646_134
BODY = {
    "capability": "org.ampcap.demo.echo",
    "version": "1.0.0",
    "params": {
        "message": "The quick brown fox jumps over the lazy dog, twice over.",
        "count": 3,
        "tags": ["alpha", "beta", "gamma"],
        "options": {"uppercase": False, "repeat": 2, "separator": ", "},
        "note": "x" * 30,
    },
    "timeout_ms": 30000,
}
# Same message with float parameters: floats force cbor2's slower canonical
# mode for the body (shortest float form), so it is reported separately.
FLOAT_BODY = {**BODY, "params": {**BODY["params"], "ratio": 0.75, "threshold": 1.5e-3}}


def per_op(fn: Callable[[], object], number: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number * 1e6)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="few-second smoke run")
    args = parser.parse_args(argv)
    number, repeats = (300, 3) if args.quick else (3000, 9)

    sender = Identity.from_seed(bytes(range(32)))
    receiver = Identity.from_seed(bytes(range(1, 33)))
    counter = iter(range(1 << 62))

    def entropy(n: int) -> bytes:
        return next(counter).to_bytes(n, "big")

    key = SigningKey(bytes(range(32)))
    verify_key = key.verify_key
    worst = 0.0
    for title, body in (("typical CAP_INVOKE", BODY), ("with float params", FLOAT_BODY)):
        env, wire = seal(sender, typ=0x22, to=receiver.did, body=body, now_ms=NOW, entropy=entropy, ttl=60_000)
        signed = sig_input(env, dumps(body))
        as_map = cbor2.loads(wire)
        pipeline = ReceivePipeline(DidKeyResolver())

        def floor_encode() -> None:
            cbor2.dumps(as_map, canonical=True)
            key.sign(signed)

        def ours_encode() -> None:
            seal(sender, typ=0x22, to=receiver.did, body=body, now_ms=NOW, entropy=entropy, ttl=60_000)

        def floor_decode() -> None:
            m = cbor2.loads(wire)
            verify_key.verify(signed, m["sig"])

        def ours_decode() -> None:
            pipeline.check(wire, NOW)

        decoded_body = as_map["body"]

        def floor_decode_reencode() -> None:
            # The RFC also makes every verifier re-encode the body (§8.2):
            # the same floor plus that mandated cbor2 canonical encode.
            m = cbor2.loads(wire)
            cbor2.dumps(decoded_body, canonical=True)
            verify_key.verify(signed, m["sig"])

        def floor_decode_bare_library() -> None:
            # What the same operation costs written with the bare libraries:
            # a verifier has only the message, so it must build Sig_Input.
            m = cbor2.loads(wire)
            headers = {k: m[k] for k in ("id", "typ", "ts", "ttl", "from", "to") }
            signed_here = cbor2.dumps(
                ["AMP-v1", b"", headers, cbor2.dumps(m["body"], canonical=True)], canonical=True)
            verify_key.verify(signed_here, m["sig"])

        def floor_loads() -> None:
            cbor2.loads(wire)

        def ours_loads() -> None:
            decode_envelope(wire)

        print(f"{title}: envelope {len(wire)} bytes, params {len(dumps(body['params']))} bytes; "
              f"{repeats} repeats x {number} ops, best of 2 interleaved medians")
        for label, floor, ours in (
            ("encode+sign", floor_encode, ours_encode),
            ("decode+verify", floor_decode, ours_decode),
            ("  vs floor incl. body re-encode", floor_decode_reencode, ours_decode),
            ("  vs bare-library floor", floor_decode_bare_library, ours_decode),
            ("decode only", floor_loads, ours_loads),
        ):
            # interleave so that machine noise hits both sides alike
            f1 = per_op(floor, number, repeats)
            o1 = per_op(ours, number, repeats)
            f2 = per_op(floor, number, repeats)
            o2 = per_op(ours, number, repeats)
            f, o = min(f1, f2), min(o1, o2)
            ratio = o / f
            if label in ("encode+sign", "decode+verify") and body is BODY:
                worst = max(worst, ratio)
            print(f"  {label:32s} floor {f:8.2f} us   ampcap {o:8.2f} us   ratio {ratio:5.2f}")
    print(f"worst ratio for the typical envelope (encode+sign, decode+verify): {worst:.2f} (target <= 1.30)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
