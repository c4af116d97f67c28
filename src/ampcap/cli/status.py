"""``ampcap status URL``: one daemon's figures, read from its ``--metrics`` endpoint.

The same numbers Prometheus scrapes (net/daemon/metrics.py), printed for a
person: invokes by capability and outcome with their mean latency, in
flight, connections, store commits, claim conflicts, and the gauges a
feature added (a relay's queue). With ``serve --workers`` the endpoint sums
every worker.
"""

from __future__ import annotations

import argparse
from typing import Any

from .errors import CommandError, UsageError

__all__ = ["register", "run_status"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "status", help="print a daemon's figures (invokes, latency, in flight, store) from its --metrics endpoint",
        description="Read the Prometheus metrics a daemon serves (serve --metrics HOST:PORT) and print them "
                    "for a person. URL: http://HOST:PORT (/metrics is added when missing).")
    p.add_argument("url", metavar="URL", help="the daemon's metrics endpoint, e.g. http://127.0.0.1:9464")
    p.add_argument("--timeout", type=float, default=5.0, metavar="S", help="how long to wait (default 5 s)")
    p.set_defaults(func=run_status)


def _families(url: str, timeout: float) -> list[Any]:
    import urllib.error
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    if not url.startswith(("http://", "https://")):
        raise UsageError(f"status {url!r}: expected http://HOST:PORT (serve --metrics)")
    if not url.rstrip("/").endswith("/metrics"):
        url = url.rstrip("/") + "/metrics"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (http(s) only, checked)
            text = response.read(16 << 20).decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise CommandError(f"cannot read {url}: {getattr(exc, 'reason', exc)}") from None
    try:
        return list(text_string_to_metric_families(text))
    except Exception:
        raise CommandError(f"{url} did not answer with Prometheus metrics") from None


def run_status(args: argparse.Namespace) -> int:
    families = {f.name: f for f in _families(args.url, args.timeout)}
    if "ampcap_invokes" not in families:
        raise CommandError(f"{args.url} serves metrics, but not an ampcap daemon's")

    def samples(name: str, suffix: str = "") -> list[Any]:
        family = families.get(name)
        return [s for s in family.samples if s.name == name + suffix] if family is not None else []

    counts: dict[tuple[str, str], float] = {}
    for s in samples("ampcap_invokes", "_total"):
        key = (s.labels.get("capability", "?"), s.labels.get("outcome", "?"))
        counts[key] = counts.get(key, 0.0) + s.value
    sums = {s.labels.get("capability"): s.value for s in samples("ampcap_invoke_seconds", "_sum")}
    runs = {s.labels.get("capability"): s.value for s in samples("ampcap_invoke_seconds", "_count")}
    print("invokes (capability, outcome: count; mean latency of those that ran)")
    for (capability, outcome), value in sorted(counts.items()):
        mean = ""
        if runs.get(capability):
            mean = f"  mean {sums.get(capability, 0.0) / runs[capability] * 1000:.1f} ms"
        print(f"  {capability} {outcome}: {int(value)}{mean}")
    if not counts:
        print("  none yet")
    for name, label in (("ampcap_invokes_in_flight", "in flight"), ("ampcap_claim_conflicts", "claim conflicts")):
        values = samples(name) or samples(name, "_total")
        print(f"{label}: {int(sum(s.value for s in values))}")
    for s in samples("ampcap_connections"):
        print(f"connections ({s.labels.get('transport', '?')}): {int(s.value)}")
    commits = samples("ampcap_store_commit_seconds", "_count")
    total = sum(s.value for s in samples("ampcap_store_commit_seconds", "_sum"))
    n = sum(s.value for s in commits)
    print(f"store commits: {int(n)}" + (f", mean {total / n * 1000:.2f} ms" if n else ""))
    for name, family in sorted(families.items()):
        if name.startswith("ampcap_relay_"):
            print(f"{name[len('ampcap_'):]}: {sum(s.value for s in family.samples):g}")
    return 0
