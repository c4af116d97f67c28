"""The caller's side of one connection: :class:`Remote`, what it sends and what it gets back.

A :class:`Remote` is handed out by :meth:`ampcap.net.api.peer.Peer.connect` (and
:func:`ampcap.net.api.peer.connect`, :meth:`ampcap.net.api.peer.Server.remotes`):
CAP_QUERY (:class:`QueryResult` pages), CAP_INVOKE (a full id, or a name with a
version, a range or :class:`Negotiate` hints, or an OSSA/MCP URI), the RFC 005
DELEG_* requests and RFC 006 sessions (:class:`~ampcap.net.api.sessions.Session`).
It holds no state of its own beyond the link: every call goes through the
daemon's :class:`~ampcap.net.daemon.calls.Calls`. ``ampcap.net.api.peer`` re-exports
every public name here; a one-shot client call imports this module, so it
loads nothing the caller does not use (the RFC 005 model only on a delegated
call).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import trio

from ...caps.descriptor import Descriptor
from ...caps.names import OssaRef, is_full_id, parse_ossa_uri
from ...caps.order import ORDERS, Order
from ...caps.semver import Range, Version
from ...errors import AmpError
from ...caps.deprecation import Notice
from ...peer.invoker import RetryPolicy, Target
from ...session.record import ThreadMode
from ...wire.cbor import UINT64_MAX  # timeout_ms and limit are wire uints
from ...wire.registry import MessageType
from ..daemon.core import Daemon
from ..daemon.link import Link
from .sessions import Session
from .timeouts import invoke_timeout_ms, wire_ms

__all__ = ["Remote", "Negotiate", "QueryResult", "ProgressCallback", "InputCallback"]

ProgressCallback = Callable[[int | None, str | None], Any]
InputCallback = Callable[[str, tuple[str, ...] | None], Any]  # -> str (the answer) or None (decline)


class Negotiate(msgspec.Struct, frozen=True, kw_only=True):
    """RFC 004 §6.3 hints: the preferred version, then acceptable ones in
    order, then the highest provider version inside ``range``."""

    preferred: str | None = None
    acceptable: Sequence[str] = ()
    range: str | None = None

    def to_wire(self) -> dict[str, Any]:
        hints: dict[str, Any] = {}
        if self.preferred is not None:
            hints["preferred"] = self.preferred
        if self.acceptable:
            hints["acceptable"] = list(self.acceptable)
        if self.range is not None:
            hints["range"] = self.range
        if not hints:
            raise ValueError("Negotiate needs preferred, acceptable or range")
        return hints


class QueryResult(msgspec.Struct, frozen=True):
    """A CAP_DECLARE page: the descriptors, and the cursor for the next page."""

    capabilities: tuple[Descriptor, ...]
    next_cursor: str | None
    # R23: what the provider said in-band about deprecated versions listed, by id
    deprecations: Mapping[str, Notice] = msgspec.field(default_factory=dict)

    def __iter__(self) -> Iterator[Descriptor]:
        return iter(self.capabilities)

    def __len__(self) -> int:
        return len(self.capabilities)


class Remote:
    """One open connection to another agent, seen from the caller's side."""

    def __init__(self, daemon: Daemon, link: Link, *, to: str | None = None, url: str | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self._daemon = daemon
        self._link = link
        self._to = to  # through a relay: the agent calls are addressed to
        self._url = url  # where a session, or the next call, dials again after a lost connection
        self._ssl = ssl_context
        self._closed = False  # closed by its owner: never dialled again
        self._redialling: trio.Lock | None = None
        self._artifacts: Any = None  # caps.artifacts.ArtifactFetcher, on the first schemas()

    @property
    def did(self) -> str:
        """The DID the other side proved in HELLO / HELLO_ACK (through a
        relay: the DID calls are addressed to, proved by every signed reply)."""
        if self._to is not None:
            return self._to
        assert self._link.peer_did is not None
        return self._link.peer_did

    async def query(self, name: str, *, range: str | None = None, limit: int | None = None,
                    cursor: str | None = None, order: Order | None = None, timeout: float = 30.0) -> QueryResult:
        """CAP_QUERY: descriptors of ``name`` (an alias or legacy type works too),
        optionally within a version ``range``; raises :class:`AmpError` (4002, 4003…).
        ``name="*"`` lists every capability the peer lets us see (an ampcap
        extension, docs/steering.md): to a peer that did not announce
        ``ampcap.list-all`` in HELLO, nothing is sent and 4002 is raised
        (:data:`ampcap.peer.listing.NOT_OFFERED`)."""
        if limit is not None and not 0 <= limit <= UINT64_MAX:
            raise ValueError(f"limit must be from 0 to {UINT64_MAX}")
        if order is not None and order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(map(repr, ORDERS))}, not {order!r}")
        flt: dict[str, Any] = {"capability": name}
        if range is not None:
            _checked(Range, range, "range")
            flt["version"] = range
        answer = await self._daemon.calls.query(await self._live(), flt, limit=limit, cursor=cursor, order=order,
                                                timeout_ms=wire_ms(timeout), to=self._to)
        return QueryResult(answer.descriptors, answer.next_cursor, {n.id: n for n in answer.notices})

    async def schemas(self, descriptor: Descriptor, *, timeout: float = 30.0) -> tuple[Any, Any]:
        """(params schema, result schema) of one of this peer's descriptors,
        as parsed JSON Schema; None for one that cannot be had. The bytes
        come from the peer (an ampcap peer serves the artifacts its
        descriptors reference, :mod:`ampcap.caps.artifacts`) and are checked
        against the descriptor's hash, and kept for this connection."""
        fetcher = self._artifacts
        if fetcher is None:
            from ...caps.artifacts import ArtifactFetcher

            async def fetch(capability_id: str, params: Any) -> Any:
                return await self.invoke(capability_id, params=params, timeout=timeout)

            fetcher = self._artifacts = ArtifactFetcher(fetch)
        return await fetcher.schemas(descriptor)

    async def invoke(self, capability: str, *, version: str | None = None, range: str | None = None,
                     negotiate: Negotiate | None = None, params: Any = None, timeout: float | None = None,
                     on_progress: ProgressCallback | None = None, retry: bool | RetryPolicy = False,
                     encrypt: bool = False, delegation: Any = None,
                     on_input: InputCallback | None = None) -> Any:
        """CAP_INVOKE and wait for the one outcome; returns the result.

        ``delegation`` invokes on a delegator's behalf (RFC 005): a chain of
        credentials (:class:`ampcap.deleg.credential.Credential` or their
        COSE bytes, first link first, the last one delegating to this
        caller), or an evidence map ``{"chain": [...]}`` as sent.

        ``capability`` is a full id (``name:version``) or a name combined
        with exactly one of ``version``, ``range`` or ``negotiate``; an OSSA
        or MCP URI (``ossa:demo/add@1.0``) alone asks for OSSA's compatible
        versions, the range ``>=1.0.0 <2.0.0`` (same major, minor at least
        the URI's). Raises
        :class:`AmpError` with the remote code, 5003 when ``timeout``
        seconds pass without a terminal reply, or, when the connection ends
        first, the code and reason that ended it (5002 without a code: the
        peer closed it). ``on_progress(pct, text)``
        (plain or async) sees every PROGRESS, and, with pct None, every PROCESSING
        that has a text (progress without a total); ``on_input(prompt, options)``
        (plain or async) answers the provider's questions (RFC 006
        INPUT_REQUIRED) with a string, or None to decline (without it every
        question is declined). ``retry=True`` resends the same
        message after a local timeout or a retryable ERROR (RFC 001 §16.3; the
        provider runs it once; a CAP_RESULT error is final). ``encrypt=True``
        sends the invoke authcrypted (RFC 001 §8.5) to the peer's X25519 key
        (did:key, or the keyring); an ampcap daemon encrypts its replies back.

        ``timeout`` (seconds) defaults to 60. Called while serving an invoke
        (inside a capability), the call gets what is left of that invoke's
        budget less a small margin, ``timeout`` included, and fails 5003
        before sending anything when none is left (deadlines that travel).
        Cancelled (trio), the call asks the provider to stop the invoke
        when the peer announced ampcap's cancel in HELLO (docs/steering.md).
        """
        target = _target(capability, version, range, negotiate)
        timeout_ms = invoke_timeout_ms(timeout, self._daemon.clock.wall_ms())
        policy = RetryPolicy() if retry is True else retry if isinstance(retry, RetryPolicy) else None
        evidence = None
        if delegation is not None:
            from ...deleg.chain import evidence_body  # only a delegated call loads the RFC 005 model

            evidence = evidence_body(delegation)
        link = self._link if self._link.open else await self._live()  # the hot path skips the redial check
        return await self._daemon.calls.invoke(link, target, {} if params is None else params,
                                               timeout_ms=timeout_ms, retry=policy, on_progress=on_progress,
                                               to=self._to, encrypt=encrypt, delegation=evidence,
                                               on_input=on_input)

    # RFC 005 DELEG_* messages: the peer as delegate, verifier or publisher.

    async def deleg_grant(self, credential: Any, *, timeout: float = 10.0) -> None:
        """DELEG_GRANT: hand the peer a credential (a ``Credential``); it
        verifies and keeps it, or raises its AmpError."""
        from ...deleg.bodies import grant_body

        await self._deleg(MessageType.DELEG_GRANT, grant_body(credential), timeout)

    async def deleg_revoke(self, revocation: Any, *, timeout: float = 10.0) -> None:
        """DELEG_REVOKE: a signed ``Revocation`` (``ampcap.deleg.credential.revoke``)."""
        from ...deleg.bodies import revoke_body

        await self._deleg(MessageType.DELEG_REVOKE, revoke_body(revocation), timeout)

    async def deleg_query(self, delegation_id: str, *, delegator: str | None = None,
                          timeout: float = 10.0) -> Any:
        """DELEG_QUERY: the peer's status for a delegation, as a
        ``ampcap.deleg.revocation.QueryResult`` (1001 if its answer is not one)."""
        from ...deleg.bodies import query_body
        from ...deleg.revocation import query_result_from_wire

        answer = await self._deleg(MessageType.DELEG_QUERY, query_body(delegation_id, delegator), timeout)
        return query_result_from_wire(answer.body)

    async def _deleg(self, typ: int, body: dict[str, Any], timeout: float) -> Any:
        return await self._daemon.calls.request(await self._live(), int(typ), body, timeout_ms=wire_ms(timeout),
                                                to=self._to)

    def new_session(self, *, pin: Mapping[str, str] | None = None, independent: bool = False,
                    expires_in: float = 3600.0, purpose: str | None = None, reconnect_attempts: int = 5) -> Session:
        """An RFC 006 session not opened yet (``await s.open()``; ``close()`` it
        when done, or let it expire). :meth:`session` does both around a block."""
        if self._to is not None:
            raise ValueError("sessions through a relay are not supported")
        return Session(self._daemon, self._link, url=self._url, pin=pin,
                       mode=ThreadMode.INDEPENDENT if independent else ThreadMode.COUPLED,
                       expires_in_ms=wire_ms(expires_in), purpose=purpose, ssl_context=self._ssl,
                       reconnect_attempts=reconnect_attempts)

    @asynccontextmanager
    async def session(self, *, pin: Mapping[str, str] | None = None, independent: bool = False,
                      expires_in: float = 3600.0, purpose: str | None = None,
                      reconnect_attempts: int = 5) -> AsyncIterator[Session]:
        """An RFC 006 session for the block (see :mod:`ampcap.net.api.sessions`):
        ``pin`` maps capability names to the full ids they keep for the whole
        session (4003 if the provider cannot serve one). A lost connection is
        dialled again and the session resumed, up to ``reconnect_attempts``."""
        session = self.new_session(pin=pin, independent=independent, expires_in=expires_in, purpose=purpose,
                                   reconnect_attempts=reconnect_attempts)
        await session.open()
        try:
            yield session
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                try:
                    await session.close()
                except AmpError:
                    pass  # the session ends with its expiry instead

    def existing_session(self, session_id: bytes, *, reconnect_attempts: int = 2) -> Session:
        """A handle on a session opened earlier (by this identity, perhaps in
        another process): ``await s.resume()`` first (it learns the mode and
        the pins), then invoke, ``close()``... Nothing is sent until then."""
        session = Session(self._daemon, self._link, url=self._url, pin=None, mode=ThreadMode.COUPLED,
                          expires_in_ms=1, purpose=None, ssl_context=self._ssl,
                          reconnect_attempts=reconnect_attempts)
        session.client.session_id = bytes(session_id)
        return session

    def on_declare(self, callback: Callable[[Any], None] | None) -> None:
        """Call ``callback(body)`` for every CAP_DECLARE the other side
        sends unasked (without ``reply_to``: announcing its capabilities,
        not answering a query), or stop with ``None``. The body passed the
        CDDL checks; ``callback`` runs in the connection's task and must
        not block."""
        self._link.on_declare = callback

    @property
    def open(self) -> bool:
        """Is the connection still open (neither side closed it)?"""
        return self._link.open

    async def closed(self) -> None:
        """Wait until the connection has ended, whoever ended it."""
        await self._link.driver.closed.wait()

    async def aclose(self) -> None:
        self._closed = True
        self._link.driver.close()
        await self._link.driver.closed.wait()

    async def _live(self) -> Link:
        """The connection the next call goes on. One that was lost (the
        peer closed it, a WebSocket's keepalive failed, the network broke)
        is dialled again at the same URL for the same DID, as a session
        does; a call already waiting when it was lost still fails with the
        reason (only a new call redials: the old one may have run)."""
        link = self._link
        if link.open or self._url is None or self._closed:
            return link
        if not link.driver.closed.is_set():  # closing: its driver ends within a moment
            with trio.move_on_after(2):
                await link.driver.closed.wait()
            if not link.driver.closed.is_set():
                return link  # still ending: this call gets the reason
        if self._redialling is None:
            self._redialling = trio.Lock()
        async with self._redialling:  # concurrent calls share one dial
            if self._link is link:
                fresh = await self._daemon.connect(self._url, peer_did=link.peer_did, ssl_context=self._ssl)
                fresh.on_declare = link.on_declare
                self._link = fresh
        return self._link


def _target(capability: str, version: str | None, range: str | None, negotiate: Negotiate | None) -> Target:
    chosen = sum(x is not None for x in (version, range, negotiate))
    if chosen > 1:
        raise ValueError("pass at most one of version, range, negotiate")
    if chosen and is_full_id(capability):
        raise ValueError(f"{capability!r} is a full id (name:version): drop the ':version' part, or the "
                         "version=/range=/negotiate= argument")
    if chosen == 0:
        ref = _uri(capability)
        if ref is not None:  # ossa:d/n@M.m carries OSSA's rule: same major, minor at least m
            return (capability, {"range": str(ref.compatible)})
        if not is_full_id(capability):
            raise ValueError("pass a full id 'name:version', or version=/range=/negotiate=")
        return capability
    if version is not None:
        _checked(Version, version, "version")
        return (capability, version)
    if range is not None:
        _checked(Range, range, "range")
        return (capability, {"range": range})
    assert negotiate is not None
    return (capability, negotiate.to_wire())


def _checked(kind: type[Version] | type[Range], text: Any, what: str) -> None:
    """A malformed version or range is the caller's mistake: ``ValueError``
    here (docs/python-api.md), not the peer's 4001 after a round trip."""
    if not isinstance(text, str):
        raise ValueError(f"{what} must be a string, not {type(text).__name__}")
    try:
        kind.parse(text)
    except AmpError as exc:
        raise ValueError(f"{what}={text!r}: {exc.message}") from None


def _uri(capability: str) -> OssaRef | None:
    """The OSSA/MCP URI ``capability`` is, if it is one (``ValueError`` if malformed)."""
    try:
        return parse_ossa_uri(capability)
    except AmpError as exc:
        raise ValueError(exc.message) from None
