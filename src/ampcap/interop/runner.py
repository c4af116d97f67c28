"""Run the interop vectors against one target and collect their outcomes.

Vectors run one after another, each on its own connection, each under a hard
deadline: a target that never answers costs at most that deadline per vector,
and nothing a target sends can raise out of the runner (a probe failure or an
AMP error becomes that vector's ``fail`` with the reason as its note). A target
that cannot be reached at all is tried once, not once per vector: every vector
then fails with that one reason and the run says so (``RunResult.unreachable``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from ..caps.semver import Version
from ..errors import AmpError
from ..net.transport.tls import tls_failure
from ..net.transport.url import AmpUrl
from ..wire.registry import ErrorCode, MessageType
from .probe import Probe, ProbeError, ProbeSettings, ProbeTimeout
from .judge import Outcome, Status, failed
from .suite import SuiteVector, Where, suite_vectors, unclaimed, vector_key
from .vectors import Context, Subject, Vector

__all__ = ["VectorResult", "RunResult", "run_vectors", "discover", "reach"]

log = logging.getLogger(__name__)
TIMEOUT, UNAVAILABLE = int(ErrorCode.TIMEOUT), int(ErrorCode.UNAVAILABLE)


@dataclass(frozen=True, slots=True)
class VectorResult:
    vector_id: str
    title: str
    status: Status
    notes: str
    seconds: float


@dataclass(slots=True, kw_only=True)
class RunResult:
    target: str
    target_did: str | None
    target_info: dict[str, Any] | None
    subject: Subject
    results: list[VectorResult] = field(default_factory=list)
    # Why no vector could run (no connection to the target): 5002, or 5003 when it did not open in time.
    unreachable: AmpError | None = None

    @property
    def failures(self) -> list[VectorResult]:
        return [r for r in self.results if r.status is Status.FAIL]

    def by_id(self) -> dict[str, VectorResult]:
        return {r.vector_id: r for r in self.results}


async def discover(ctx: Context) -> None:
    """Learn the target's DID, agent_info and the subject's declared versions
    (one HELLO and one CAP_QUERY). Failures only leave things unknown: the
    vectors that need them then skip, and the vectors that test the same
    things report the fault."""
    try:
        async with ctx.session() as probe:
            if ctx.target_did is None:
                ctx.target_did = probe.peer_did
            if probe.peer_info is not None:
                ctx.target_info = probe.peer_info
            env = await probe.send_message(MessageType.CAP_QUERY, {"filter": {"capability": ctx.subject.name}})
            ex = await probe.collect(env, frozenset({MessageType.CAP_DECLARE}))
    except (ProbeError, AmpError) as exc:
        ctx.subject.discovery_note = f"discovery failed: {exc}"
        return
    declares = [t for t in ex.terminals if t.typ == MessageType.CAP_DECLARE]
    if not declares:
        ctx.subject.discovery_note = f"CAP_QUERY answered with {ex.summary()}"
        return
    body = declares[0].envelope.body if declares[0].envelope is not None else None
    caps = body.get("capabilities") if type(body) is dict else None
    versions: set[Version] = set()
    for item in caps if type(caps) is list else ():
        if type(item) is dict and item.get("name") == ctx.subject.name and type(item.get("version")) is str:
            try:
                versions.add(Version.parse(item["version"]))
            except (AmpError, ValueError):
                continue
    # A first page may hold only some versions: follow next_cursor (R7) a few times.
    cursor = body.get("next_cursor") if type(body) is dict else None
    pages = 0
    while type(cursor) is str and pages < 32:
        pages += 1
        try:
            async with ctx.session() as probe:
                env = await probe.send_message(MessageType.CAP_QUERY, {
                    "filter": {"capability": ctx.subject.name}, "cursor": cursor})
                ex = await probe.collect(env, frozenset({MessageType.CAP_DECLARE}))
        except (ProbeError, AmpError):
            break
        page = [t for t in ex.terminals if t.typ == MessageType.CAP_DECLARE]
        if not page or page[0].envelope is None or type(page[0].envelope.body) is not dict:
            break
        for item in page[0].envelope.body.get("capabilities") or ():
            if type(item) is dict and type(item.get("version")) is str:
                try:
                    versions.add(Version.parse(item["version"]))
                except (AmpError, ValueError):
                    continue
        cursor = page[0].envelope.body.get("next_cursor")
    ctx.subject.versions = sorted(versions)


async def reach(url: AmpUrl, settings: ProbeSettings) -> AmpError | None:
    """None when a connection to ``url`` opens (TCP, and TLS for amps://),
    else why not: 5003 TIMEOUT when it did not open in time, 5002 otherwise.
    Says nothing about AMP: the vectors judge that."""
    try:
        probe = await Probe.open(url, settings)
    except ProbeError as exc:
        return AmpError(TIMEOUT if isinstance(exc, ProbeTimeout) else UNAVAILABLE, str(exc))
    try:
        if isinstance(probe.stream, trio.SSLStream):
            with trio.fail_after(settings.timeout_s):
                await probe.stream.do_handshake()
    except trio.TooSlowError:
        return AmpError(TIMEOUT, f"cannot connect to {url}: no TLS handshake within {settings.timeout_s:g} s")
    except trio.BrokenResourceError as exc:
        return AmpError(UNAVAILABLE, f"cannot connect to {url}: "
                                     f"{tls_failure(exc) or 'the connection closed during the TLS handshake'}")
    finally:
        await probe.aclose()
    return None


async def _run_one(vector: Vector, ctx: Context, limit_s: float) -> Outcome:
    try:
        with trio.move_on_after(limit_s) as scope:
            return await vector.run(ctx)
        if scope.cancelled_caught:
            return failed(f"the vector did not finish within {limit_s:.1f} s")
    except ProbeError as exc:
        return failed(str(exc))
    except AmpError as exc:
        return failed(f"could not build or read traffic: {exc}")
    return failed("the vector returned no outcome")  # pragma: no cover - unreachable


async def run_vectors(url: AmpUrl | None, settings: ProbeSettings, subject: Subject, *,
                      target_did: str | None = None, only: Sequence[str] | None = None,
                      self_test: bool = False, relay: AmpUrl | None = None, relay_did: str | None = None,
                      relay_framing: str = "raw", relay_forward: str | None = None,
                      relay_upstream: Any = None) -> RunResult:
    """Discover, then run every vector of the suite (or those named in
    ``only``): the target's against ``url``, the byte vectors when
    ``self_test`` (the target is ampcap itself), the relay vectors against
    ``relay``. Every required vector of the suite is in the result, ``skip``
    with the reason when nothing could run it."""
    ctx = Context(url=url or relay or AmpUrl("amp", "127.0.0.1", 0), settings=settings, subject=subject,
                  target_did=target_did, relay=relay, relay_did=relay_did, relay_framing=relay_framing,
                  relay_forward=relay_forward, relay_upstream=relay_upstream)
    selected = [s for s in suite_vectors() if only is None or s.id in only]
    unreachable = await reach(url, settings) if url is not None else None
    if unreachable is not None:
        # Each vector would wait for the same failed connect (a timeout each
        # against an address that drops packets) and report the same reason.
        log.info("%s: %s; no vector ran against it", url, unreachable.message)
    elif url is not None and any(s.where is Where.TARGET for s in selected):
        await discover(ctx)
    label = str(url) if url is not None else f"relay {relay}" if relay is not None else "ampcap"
    run = RunResult(target=label, target_did=ctx.target_did, target_info=ctx.target_info, subject=subject,
                    unreachable=unreachable)
    # Generous but finite: a few reply windows per vector (A.14 does several round trips).
    limit_s = settings.timeout_s * 4 + settings.settle_s * 8 + 5
    for item in selected:
        vector = item.vector
        reason = _not_here(item, url, self_test, relay)
        if reason is not None:
            run.results.append(VectorResult(vector.id, vector.title, Status.SKIP, reason, 0.0))
            continue
        if item.where is Where.TARGET and unreachable is not None:
            run.results.append(VectorResult(vector.id, vector.title, Status.FAIL,
                                            f"not run: {unreachable.message}", 0.0))
            continue
        started = trio.current_time()
        outcome = await _run_one(vector, ctx, limit_s)
        took = trio.current_time() - started
        log.info("%s %s (%.2f s) %s", vector.id, outcome.status.value, took, outcome.notes)
        run.results.append(VectorResult(vector.id, vector.title, outcome.status, outcome.notes, took))
    for vector_id, outcome in unclaimed((r.vector_id for r in run.results), only):
        run.results.append(VectorResult(vector_id, "", outcome.status, outcome.notes, 0.0))
    run.results.sort(key=lambda r: vector_key(r.vector_id))
    # Only a relay under test: the report names it.
    run.target_did = ctx.target_did if url is not None else ctx.relay_did
    run.target_info = ctx.target_info
    return run


def _not_here(item: SuiteVector, url: AmpUrl | None, self_test: bool, relay: AmpUrl | None) -> str | None:
    """Why ``item`` cannot run in this run, or None."""
    if item.where is Where.SELF and not self_test:
        return ("byte vector: it fixes the RFC's own test keys, ids and nonce, which no remote target can be "
                "made to use; `ampcap interop --self` runs it against ampcap's codec")
    if item.where is Where.RELAY and relay is None:
        return "RFC 003 relay vector: give --relay URL to test a relay"
    if item.where is Where.TARGET and url is None:
        return "no target given (only --relay)"
    return None
