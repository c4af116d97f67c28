"""What does one RFC 007 payment operation cost the payee? (issue 37, phase A)

The protocol work of one operation, in this process: params read (§5.11),
the §5.9 replay lookup, the plan against the §7 table, the local ledger's
movements and signed settlement proof, and the commit to the state store
(in memory, and a WAL file on disk, each a real SQLite transaction).
Measured per operation kind (quote_request, authorize, capture, a replayed
capture, status_query) against one Ed25519 sign + verify of a 200-byte
message in the same run, the floor of any signed AMP message; and the
cached signed-descriptor check (RFC 004 §5.2) a client repeats per invoke.

tools/bench_payments_daemon.py measures the daemon's CPU for a paid invoke
and each payment step against a plain invoke; this is the part of it that
is new.

    python tools/bench_payments.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nacl.signing import VerifyKey

from ampcap.caps.descriptor import Descriptor
from ampcap.caps.descriptor_signing import sign_manifest
from ampcap.caps.descriptor_trust import DescriptorChecker, DescriptorTrust
from ampcap.caps.manifest import manifest_from_data
from ampcap.pay.ledger import LocalLedger
from ampcap.pay.money import Money
from ampcap.pay.payee import Payee, handle
from ampcap.pay.workflow import WORKFLOW_ID, capability_table
from ampcap.store.database import StateStore
from ampcap.store.payments import PaymentStore
from ampcap.wire.identity import Identity

PAYER = "did:example:bench-payer"
NET = "ampcap-local-ledger"
NOW = 1_800_000_000_000


def per_call_us(fn: Callable[[int], Any], count: int, rounds: int) -> float:
    """Median over rounds of the mean µs per call; ``fn(i)`` does call i."""
    results = []
    base = 0
    for _ in range(rounds):
        start = time.perf_counter()
        for i in range(base, base + count):
            fn(i)
        results.append((time.perf_counter() - start) / count * 1e6)
        base += count
    return statistics.median(results)


def bench_store(store: StateStore, count: int, rounds: int) -> dict[str, float]:
    ledger = LocalLedger(Identity.from_seed(b"\x01" * 32))
    payee_did = Identity.from_seed(b"\x02" * 32).did
    payee = Payee(payee_did, ledger)
    state = PaymentStore(store)
    total = count * rounds
    state.deposit(ledger.deposit("bench", PAYER, Money(10 * total, "USD", NET)))
    quotes: dict[int, dict[str, Any]] = {}

    def pid(i: int) -> bytes:
        return i.to_bytes(16, "big")

    def send(params: dict[str, Any]) -> Any:
        decision, _ = handle(payee, params, sender=PAYER, now_ms=NOW, state=state)
        return decision

    def quote(i: int) -> None:
        quotes[i] = send({"pay_v": 1, "op": "quote_request", "payment_id": pid(i), "payee": payee_did,
                          "money": {"amount_minor": 5, "asset": "USD", "network": NET}}).result

    def authorize(i: int) -> None:
        q = quotes[i]
        send({"pay_v": 1, "op": "authorize", "payment_id": pid(i), "quote_id": q["quote_id"], "payer": PAYER,
              "payee": payee_did, "money": q["money"]})

    def capture(i: int) -> None:
        send({"pay_v": 1, "op": "capture", "payment_id": pid(i), "quote_id": quotes[i]["quote_id"],
              "money": quotes[i]["money"]})

    def status(i: int) -> None:
        send({"pay_v": 1, "op": "status_query", "payment_id": pid(i)})

    out = {}
    for name, fn in (("quote_request", quote), ("authorize", authorize), ("capture", capture),
                     ("capture, replayed", capture), ("status_query", status)):
        out[name] = per_call_us(fn, count, rounds)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a short pass (the smoke test)")
    args = parser.parse_args()
    count, rounds = (50, 2) if args.quick else (1000, 5)

    key = Identity.from_seed(b"\x03" * 32)
    verify = VerifyKey(key.public_key)
    message = bytes(200)
    floor = per_call_us(lambda i: verify.verify(message, key.sign(message)), count * 2, rounds)
    print(f"Ed25519 sign + verify (200 bytes):        {floor:8.1f} µs   (1.00x, the floor)")

    manifest = sign_manifest(manifest_from_data({"capability": [capability_table(
        {"python": "ampcap.caps.demo:noop"})]}), key)
    descriptor = manifest.find(WORKFLOW_ID)[0].descriptor
    checker = DescriptorChecker(DescriptorTrust(require_all=True, owners={"org.agentries.payment": (key.did,)}),
                                artifacts=manifest.schema_store())
    checker.check(descriptor)
    cached = per_call_us(lambda i: checker.check(descriptor), count * 10, rounds)
    print(f"signed descriptor check, same object:     {cached:8.1f} µs   ({cached / floor:4.2f}x)")
    copies = [Descriptor.from_wire(descriptor.to_wire()) for _ in range(count * 10 * rounds)]
    by_content = per_call_us(lambda i: checker.check(copies[i]), count * 10, rounds)
    print(f"signed descriptor check, re-declared copy: {by_content:7.1f} µs   ({by_content / floor:4.2f}x)")

    with tempfile.TemporaryDirectory(prefix="ampcap-bench-pay-") as tmp:
        for label, store in (("in memory", StateStore.open(None)), ("WAL file", StateStore.open(Path(tmp)))):
            print(f"-- one payment operation, store {label}")
            for name, us in bench_store(store, count, rounds).items():
                print(f"   {name:<38}{us:8.1f} µs   ({us / floor:4.2f}x)")
            store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
