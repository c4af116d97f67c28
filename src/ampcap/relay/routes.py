"""The routes file (R24): federation peers and where recipients' messages go,
until RFC 008 discovery exists. Parsed from the decoded TOML (or JSON) value;
:func:`ampcap.files.relay_routes.load_routes` reads the file.

    [[peer]]                         # a relay we know
    did = "did:key:z6Mk..."          # its identity (receipts are signed by it)
    url = "https://relay-b.example:7443"
    trusted = true                   # may call our forward/commit endpoints
    transfer_modes = ["single", "dual"]   # default ["single"] (§5.6.1)
    receipt_algs = [-8]              # default [-8]
    max_hop_limit = 8                # optional

    [[route]]
    recipient = "did:key:z6Mk..."    # one DID, or a prefix ending in "*"
    via = ["did:key:z6Mk..."]        # peers in service order
    mode = "single"                  # transfer mode asked for (default single)

Every problem is collected and reported at once, each naming where it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import AmpError
from .federation import MODES, RelayCandidate

__all__ = ["RelayPeer", "Route", "RelayRoutes", "parse_routes"]

_BAD_CONFIG = 4001


@dataclass(frozen=True, slots=True, kw_only=True)
class RelayPeer:
    did: str
    url: str
    trusted: bool = False
    transfer_modes: tuple[str, ...] = ("single",)
    receipt_algs: tuple[int, ...] = (-8,)
    max_hop_limit: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    recipient: str
    via: tuple[str, ...]
    mode: str = "single"

    def matches(self, did: str) -> bool:
        if self.recipient.endswith("*"):
            return did.startswith(self.recipient[:-1])
        return did == self.recipient


@dataclass(frozen=True, slots=True)
class RelayRoutes:
    peers: Mapping[str, RelayPeer] = field(default_factory=dict)
    routes: tuple[Route, ...] = ()

    def trusted(self, did: str) -> bool:
        peer = self.peers.get(did)
        return peer is not None and peer.trusted

    def route_for(self, recipient: str) -> Route | None:
        """The first route that matches (file order: exact DIDs and prefixes alike)."""
        for route in self.routes:
            if route.matches(recipient):
                return route
        return None

    def candidates(self, route: Route) -> list[RelayCandidate]:
        return [RelayCandidate(did=p.did, url=p.url, order=i, transfer_modes=p.transfer_modes,
                               receipt_algs=p.receipt_algs, max_hop_limit=p.max_hop_limit)
                for i, p in enumerate(self.peers[v] for v in route.via)]

    def url_of(self, did: str) -> str | None:
        peer = self.peers.get(did)
        return None if peer is None else peer.url


def _strings(value: Any) -> bool:
    return type(value) is list and all(type(v) is str and v for v in value)


def parse_routes(data: Any, *, source: str = "routes") -> RelayRoutes:
    """A :class:`RelayRoutes` from the decoded file; one ``AmpError(4001)``
    listing every problem (``source: where: what``)."""
    problems: list[str] = []
    if not isinstance(data, Mapping):
        raise AmpError(_BAD_CONFIG, f"{source}: the routes file must be a table of [[peer]] and [[route]] entries")
    unknown = set(data) - {"peer", "route"}
    if unknown:
        problems.append(f"unknown section {sorted(unknown)[0]!r} (expected [[peer]] and [[route]])")
    peers: dict[str, RelayPeer] = {}
    raw_peers = data.get("peer", [])
    if type(raw_peers) is not list:
        problems.append("peer must be an array of tables ([[peer]])")
        raw_peers = []
    for i, entry in enumerate(raw_peers):
        where = f"peer[{i}]"
        if not isinstance(entry, Mapping):
            problems.append(f"{where}: must be a table")
            continue
        extra = set(entry) - {"did", "url", "trusted", "transfer_modes", "receipt_algs", "max_hop_limit"}
        if extra:
            problems.append(f"{where}: unknown key {sorted(extra)[0]!r}")
        did, url = entry.get("did"), entry.get("url")
        if type(did) is not str or not did.startswith("did:"):
            problems.append(f"{where}.did: must be a DID (did:...)")
            continue
        if type(url) is not str or not url.startswith(("http://", "https://")):
            problems.append(f"{where}.url: must be an http(s) URL")
            continue
        trusted = entry.get("trusted", False)
        if type(trusted) is not bool:
            problems.append(f"{where}.trusted: must be true or false")
        modes = entry.get("transfer_modes", ["single"])
        if not _strings(modes) or not set(modes) <= set(MODES):
            problems.append(f"{where}.transfer_modes: must list 'single' and/or 'dual'")
            modes = ["single"]
        algs = entry.get("receipt_algs", [-8])
        if type(algs) is not list or not all(type(a) is int for a in algs):
            problems.append(f"{where}.receipt_algs: must be a list of COSE algorithm numbers")
            algs = [-8]
        hop = entry.get("max_hop_limit")
        if hop is not None and (type(hop) is not int or hop < 0):
            problems.append(f"{where}.max_hop_limit: must be a non-negative integer")
            hop = None
        if did in peers:
            problems.append(f"{where}.did: {did} is listed twice")
        peers[did] = RelayPeer(did=did, url=url, trusted=trusted is True, transfer_modes=tuple(modes),
                               receipt_algs=tuple(algs), max_hop_limit=hop)
    routes: list[Route] = []
    raw_routes = data.get("route", [])
    if type(raw_routes) is not list:
        problems.append("route must be an array of tables ([[route]])")
        raw_routes = []
    for i, entry in enumerate(raw_routes):
        where = f"route[{i}]"
        if not isinstance(entry, Mapping):
            problems.append(f"{where}: must be a table")
            continue
        extra = set(entry) - {"recipient", "via", "mode"}
        if extra:
            problems.append(f"{where}: unknown key {sorted(extra)[0]!r}")
        recipient, via, mode = entry.get("recipient"), entry.get("via"), entry.get("mode", "single")
        if type(recipient) is not str or not recipient.startswith("did:"):
            problems.append(f"{where}.recipient: must be a DID or a DID prefix ending in '*'")
            continue
        if not _strings(via) or not via:
            problems.append(f"{where}.via: must list at least one peer DID")
            continue
        missing = [v for v in via if v not in peers]
        if missing:
            problems.append(f"{where}.via: {missing[0]} is not a [[peer]]")
            continue
        if mode not in MODES:
            problems.append(f"{where}.mode: must be 'single' or 'dual'")
            continue
        routes.append(Route(recipient=recipient, via=tuple(via), mode=mode))
    if problems:
        raise AmpError(_BAD_CONFIG, f"{source}: " + "; ".join(problems))
    return RelayRoutes(peers, tuple(routes))
