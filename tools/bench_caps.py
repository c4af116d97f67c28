"""How does the capability registry scale? (issue 4)

* 100,000 descriptors (10,000 names × 10 versions): a name + range query,
  median over many names (target ≤ 1 ms);
* paging through every descriptor (all names, 100 per page) at 10,000 and at
  100,000 descriptors: the time per descriptor should not grow (linear);
* memory per descriptor (tracemalloc, descriptor objects plus the registry's
  indexes), reported;
* negotiation over 1,000 versions of one name (target ≤ 50 µs).

    python tools/bench_caps.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc

from ampcap.caps.descriptor import Descriptor, SchemaRef
from ampcap.caps.manifest import CapabilitySpec, Policy
from ampcap.caps.bindings import PythonBinding
from ampcap.caps.negotiate import select
from ampcap.caps.registry import Registry
from ampcap.caps.semver import Range, Version

NOW = 1_763_800_000_000
KEY = b"bench-key-bench-key-bench-key!!!"


def make_registry(names: int, versions: int) -> Registry[Descriptor]:
    ref = SchemaRef(hash_alg="sha-256", hash=b"\x01" * 32, bundle_id="bundle", artifact_key="schema.json")
    reg: Registry[Descriptor] = Registry(cursor_key=KEY)
    for n in range(names):
        name = f"org.bench.cap{n:05d}"
        for v in range(versions):
            reg.add(Descriptor.build(name, Version(1 + v // 5, v % 5, 0), ref, ref))
    return reg


def page_all(reg: Registry[Descriptor]) -> tuple[int, float]:
    t0 = time.perf_counter()
    seen, cursor = 0, None
    while True:
        page = reg.query(None, limit=100, cursor=cursor, now_ms=NOW)
        seen += len(page.items)
        cursor = page.next_cursor
        if cursor is None:
            return seen, time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a short smoke run (1,000 names)")
    args = parser.parse_args()
    names = 1_000 if args.quick else 10_000
    total = names * 10

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    t0 = time.perf_counter()
    reg = make_registry(names, 10)
    build_s = time.perf_counter() - t0
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    print(f"{total:,} descriptors ({names:,} names × 10 versions) built in {build_s:.1f} s; "
          f"memory {(after - before) / total:,.0f} bytes per descriptor (objects + indexes)")

    rng = Range.parse(">=1.2.0 <2.0.0")
    samples = []
    for n in range(0, names, max(1, names // 2000)):
        t = time.perf_counter()
        page = reg.query(f"org.bench.cap{n:05d}", version_range=rng, now_ms=NOW)
        samples.append((time.perf_counter() - t) * 1e6)
        assert [str(d.version) for d in page.items] == ["1.4.0", "1.3.0", "1.2.0"]
    median = statistics.median(samples)
    print(f"name + range query: median {median:.1f} µs, p99 {sorted(samples)[int(len(samples) * .99)]:.1f} µs "
          f"over {len(samples)} names   target ≤ 1000 µs")

    small = make_registry(names // 10, 10)
    n_small, s_small = page_all(small)
    n_big, s_big = page_all(reg)
    assert (n_small, n_big) == (total // 10, total)
    per_small, per_big = s_small / n_small * 1e6, s_big / n_big * 1e6
    print(f"page through all (100 per page): {n_small:,} in {s_small:.2f} s ({per_small:.2f} µs each), "
          f"{n_big:,} in {s_big:.2f} s ({per_big:.2f} µs each); per-descriptor ratio {per_big / per_small:.2f} "
          f"(linear ≈ 1)")

    binding = PythonBinding(target="ampcap.caps.demo:noop")
    ref = SchemaRef(hash_alg="sha-256", hash=b"\x01" * 32, bundle_id="bundle", artifact_key="schema.json")
    specs = [CapabilitySpec(descriptor=Descriptor.build("org.bench.many", Version(v // 100, v % 100, 0), ref, ref),
                            policy=Policy.RANGE, binding=binding, input_schema={}, output_schema={},
                            input_source="inline", output_source="inline") for v in range(1000)]
    hints = [dict(version=None, range_=Range.parse(">=3.0.0 <4.0.0")),
             dict(version=None, preferred=Version(12, 0, 0), acceptable=[Version(55, 5, 0), Version(7, 7, 0)]),
             dict(version=Version(9, 99, 0))]
    times = []
    for kw in hints:
        select(specs, **kw)
        t = time.perf_counter()
        for _ in range(2000):
            select(specs, **kw)
        times.append((time.perf_counter() - t) / 2000 * 1e6)
    print(f"negotiation over 1,000 versions: range {times[0]:.1f} µs, preferred/acceptable {times[1]:.1f} µs, "
          f"pinned {times[2]:.1f} µs   target ≤ 50 µs")
    ok = median <= 1000 and max(times) <= 50 and per_big / per_small < 2
    return 0 if ok or args.quick else 1


if __name__ == "__main__":
    raise SystemExit(main())
