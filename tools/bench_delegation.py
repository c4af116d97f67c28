"""What does RFC 005 delegation cost a daemon? A depth-3 delegated invoke
against a plain invoke, in the same run, the same way as
``tools/bench_protocol.py``: two daemons in this process joined by
hand-pumped connections (no sockets, no event-loop waits), and the serving
daemon's CPU per invoke measured for

* ``plain``: CAP_INVOKE of org.ampcap.demo.echo:1.0.0 without delegation;
* ``depth-3, repeated``: the same call carrying one chain A → B → C →
  caller, the same chain every time (its links' signatures are verified
  once, then found in the verifier's link cache; continuity, validity,
  audience, revocation, depth, narrowing and the target are still decided
  for every invoke);
* ``depth-3, first seen``: a different chain for every invoke (fresh
  delegation ids, so fresh bytes): three signature verifications each.

Rounds alternate between the three so that drift hits them alike. The unit
for "three extra signature verifications" is measured in the same rounds,
on the same material: each round also verifies its first-seen chains' own
links (their Sig_structures, about 400 bytes, under three delegators' keys)
with nothing else around, so the extra is printed in verifications of
exactly what the verifier checks. Printed too: first seen against repeated,
which leaves out what both pay for carrying the chain (about 1.5 KB more to
decode, re-encode for Sig_Input and hash).

A fourth kind is a what-if, to show where the floor is: ``first seen,
parse free`` sends fresh chains too, but the verifier is handed their links
already parsed (this script swaps the verifier's credential reader for a
lookup while that batch runs); their signatures are still verified, and
everything else runs as usual. What remains over the repeated chain is the
three verifications and the bookkeeping around them.

    python tools/bench_delegation.py [--rounds 100] [--batch 32]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).parent))
from bench_protocol import Pair, _now_ms, demo_daemons, pair_args, run_with_identity, start_pair  # noqa: E402

import ampcap.deleg.chain as verifier_module  # noqa: E402
from ampcap.deleg.chain import evidence_body  # noqa: E402
from ampcap.deleg.cose import decode_sign1  # noqa: E402
from ampcap.deleg.credential import Credential, issue, parse_credential  # noqa: E402
from ampcap.wire.didkey import ed25519_from_did_key  # noqa: E402
from ampcap.wire.identity import Identity  # noqa: E402
from ampcap.wire.signing import verify_signature  # noqa: E402

HOUR = 3_600_000


def chain(ids: list[Identity], caller: str, tag: str) -> dict[str, Any]:
    now = _now_ms()
    a, b, c = ids
    links = [
        issue(a, delegation_id=f"{tag}-1", delegate=b.did, issued_at=now, expires_at=now + HOUR,
              capabilities=["org.ampcap.demo.echo"], allow_subdelegation=True),
        issue(b, delegation_id=f"{tag}-2", delegate=c.did, issued_at=now, expires_at=now + HOUR,
              capabilities=["org.ampcap.demo.echo"], allow_subdelegation=True),
        issue(c, delegation_id=f"{tag}-3", delegate=caller, issued_at=now, expires_at=now + HOUR,
              capabilities=["org.ampcap.demo.echo:1.0.0"]),
    ]
    return evidence_body(links)


def link_material(evidence: dict[str, Any]) -> list[tuple[bytes, bytes, bytes]]:
    """(public key, Sig_structure, signature) of each link: what step 4 verifies."""
    out = []
    for item in evidence["chain"]:
        signed = decode_sign1(item["credential"])
        out.append((ed25519_from_did_key(signed.signer_did), signed.to_be_signed(), signed.signature))
    return out


def verifications_s(material: list[list[tuple[bytes, bytes, bytes]]]) -> float:
    """Seconds to verify every link of ``material`` (the round's chains)."""
    t = time.perf_counter()
    for links in material:
        for key, message, signature in links:
            if not verify_signature(key, message, signature):
                raise SystemExit("a link does not verify")
    return time.perf_counter() - t


def parse_free(pair: Pair, batch: int, evidences: list[dict[str, Any]], parsed: dict[bytes, Credential]) -> float:
    """The serving daemon's seconds for ``batch`` first-seen chains whose links
    the verifier gets already parsed (signatures still checked)."""
    reader = verifier_module.parse_credential
    verifier_module.parse_credential = parsed.__getitem__
    try:
        return pair.invokes(batch, delegations=evidences)[1]
    finally:
        verifier_module.parse_credential = reader


async def run(args: argparse.Namespace, identity_file: Path) -> None:
    server, client = demo_daemons(identity_file, args.batch)
    ids = [Identity.generate(os.urandom) for _ in range(3)]
    caller = client.identity.did
    repeated = chain(ids, caller, "repeated")
    warm, rounds = 5, args.rounds
    fresh = [[chain(ids, caller, f"fresh-{r}-{i}") for i in range(args.batch)] for r in range(warm + rounds)]
    material = [[link_material(ev) for ev in batch] for batch in fresh]
    free = [[chain(ids, caller, f"free-{r}-{i}") for i in range(args.batch)] for r in range(warm + rounds)]
    parsed = {item["credential"]: parse_credential(item["credential"])
              for batch in free for ev in batch for item in ev["chain"]}
    plain: list[float] = []
    cached: list[float] = []
    first: list[float] = []
    floor: list[float] = []
    unit: list[float] = []  # one link's verification, µs, in this round
    async with trio.open_nursery() as nursery:
        pair = await start_pair(nursery, server, client, Pair)
        before = server.verifier.verifications
        for r in range(warm + rounds):
            # the serving daemon's seconds for each batch
            p = pair.invokes(args.batch, delegations=[None] * args.batch)[1]
            c = pair.invokes(args.batch, delegations=[repeated] * args.batch)[1]
            f = pair.invokes(args.batch, delegations=fresh[r])[1]
            u = verifications_s(material[r])
            o = parse_free(pair, args.batch, free[r], parsed)
            if r >= warm:
                plain.append(p * 1e6 / args.batch)
                cached.append(c * 1e6 / args.batch)
                first.append(f * 1e6 / args.batch)
                floor.append(o * 1e6 / args.batch)
                unit.append(u * 1e6 / (3 * args.batch))
        verified = server.verifier.verifications - before
        nursery.cancel_scope.cancel()
    v = statistics.median(unit)
    p, c, f = (statistics.median(x) for x in (plain, cached, first))
    print(f"daemon CPU per invoke, no I/O (org.ampcap.demo.echo:1.0.0, batches of {args.batch}, "
          f"{rounds} rounds, CPython {sys.version.split()[0]})")
    print(f"one link's Ed25519 verification here (its ~400-byte Sig_structure): {v:.1f} µs")
    print(f"{'invoke':>22} | {'daemon µs':>9} | {'× plain':>7} | {'extra µs':>8} | {'extra / verify':>14}")
    for name, value in (("plain", p), ("depth-3, repeated", c), ("depth-3, first seen", f)):
        print(f"{name:>22} | {value:>9.1f} | {value / p:>7.2f} | {value - p:>8.1f} | {(value - p) / v:>14.2f}")
    o = statistics.median(floor)
    print(f"{'first seen, parse free':>22} | {o:>9.1f} | {o / p:>7.2f} | {o - p:>8.1f} | {(o - p) / v:>14.2f}")
    expected = 2 * 3 * (warm + rounds) * args.batch + 3
    print(f"signature verifications by the verifier: {verified} (3 per first-seen chain, parse free or not, "
          f"+ 3 for the repeated one: {expected})")
    # Each round's own ratio (its batches ran back to back) cancels most of
    # the drift a shared machine adds between rounds.
    per_round = statistics.median(ci / pi for ci, pi in zip(cached, plain))
    first_round = statistics.median(fi / pi for fi, pi in zip(first, plain))
    over_repeated = statistics.median((fi - ci) / ui for fi, ci, ui in zip(first, cached, unit))
    over_plain = statistics.median((fi - pi) / ui for fi, pi, ui in zip(first, plain, unit))
    print(f"median of per-round ratios: repeated {per_round:.2f}×, first seen {first_round:.2f}×")
    floor_repeated = statistics.median((oi - ci) / ui for oi, ci, ui in zip(floor, cached, unit))
    print(f"first seen, in verifications (median per round): {over_plain:.2f} over a plain invoke, "
          f"{over_repeated:.2f} over the repeated chain ({floor_repeated:.2f} if parsing were free)")
    print(f"repeated depth-3 chain / plain invoke: {c / p:.2f}×")


def main() -> None:
    args = pair_args(__doc__, rounds=100, rounds_help="rounds measured (default 100)", batch=32,
                     batch_help="invokes per batch (default 32)", quick_rounds=5)
    run_with_identity(run, args)


if __name__ == "__main__":
    main()
