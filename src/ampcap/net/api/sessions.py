"""RFC 006 sessions in the Python API: ``async with remote.session(...) as s``.

::

    async with ampcap.connect("amp://127.0.0.1:7700") as remote:
        async with remote.session(pin={"org.ampcap.demo.echo": "org.ampcap.demo.echo:1.1.0"}) as s:
            out = await s.invoke("org.ampcap.demo.echo", params={"message": "hi"})

The block opens the session (init → accept), every ``s.invoke`` is
session-scoped (signed ``body.session``, ``thread_id == session_id`` in the
coupled mode), a pinned name runs its pinned version, and leaving the block
closes the session. When the connection is lost mid-call, the session dials
the same URL again, resumes (checkpoint: the last reply it saw), and sends
the interrupted invoke again *unchanged* (same message id and signature):
the provider runs it at most once and answers with its first outcome (R8),
which the client takes once (deduplicated by message id, §7.2).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import trio

from ...errors import AmpError
from ...peer.outbound import Outbound
from ...session.client import SessionClient
from ...session.record import ThreadMode
from ...session.state import SessionState
from .timeouts import invoke_timeout_ms

if TYPE_CHECKING:
    from ..daemon.core import Daemon
    from ..daemon.link import Link

__all__ = ["Session"]

_LOST = (5002,)  # a call that ended because the connection did


class Session:
    """One open session with the agent at the other end of a connection."""

    def __init__(self, daemon: Daemon, link: Link, *, url: str | None, pin: Mapping[str, str] | None,
                 mode: ThreadMode, expires_in_ms: int, purpose: str | None, ssl_context: ssl.SSLContext | None,
                 reconnect_attempts: int, entropy: Callable[[int], bytes] = os.urandom) -> None:
        self._daemon = daemon
        self._link = link
        self._url = url
        self._ssl = ssl_context
        self._expires_in_ms = expires_in_ms
        self._purpose = purpose
        self._attempts = reconnect_attempts
        self.peer_did = link.peer_did
        self.client = SessionClient(entropy=entropy, mode=mode, pin=pin)
        self.resumes = 0  # how often it recovered from a lost connection

    @property
    def session_id(self) -> bytes:
        return self.client.session_id

    @property
    def pinned(self) -> dict[str, str]:
        return dict(self.client.pinned)

    @property
    def status(self) -> SessionState:
        return self.client.status

    async def _control(self, out: Outbound) -> Any:
        body = await self._daemon.session_control(self._link, out)
        return self.client.on_answer(body)

    async def open(self) -> None:
        await self._control(self.client.init(self._daemon.identity.did, self._expires_in_ms, purpose=self._purpose,
                                             to=self.peer_did))

    async def close(self, reason: str | None = None) -> None:
        if self.client.status in (SessionState.CLOSED, SessionState.FAILED):
            return
        await self._control(self.client.close(reason, to=self.peer_did))

    async def suspend(self) -> None:
        await self._control(self.client.suspend(to=self.peer_did))

    async def resume(self) -> None:
        await self._control(self.client.resume(to=self.peer_did))

    async def update(self, *, pin: Mapping[str, str] | None = None, allow_renegotiate: bool | None = None,
                     expires_in_ms: int | None = None) -> None:
        await self._control(self.client.update(pin=pin, allow_renegotiate=allow_renegotiate,
                                               expires_in_ms=expires_in_ms, to=self.peer_did))

    async def invoke(self, capability: str, *, version: str | None = None, params: Any = None,
                     timeout: float = 60.0, on_progress: Callable[[int | None, str | None], Any] | None = None,
                     on_input: Callable[[str, tuple[str, ...] | None], Any] | None = None,
                     delegation: Any = None) -> Any:
        """A session-scoped CAP_INVOKE; a pinned ``capability`` runs its pinned
        version. ``delegation``: on a delegator's behalf, as in
        :meth:`Remote.invoke` (the provider caches the chain's fingerprint
        and re-checks its revocation when the session is resumed). Called
        while serving an invoke, the call gets what is left of that invoke's
        budget less a margin, ``timeout`` included, as :meth:`Remote.invoke`
        does (5003 before anything is sent when none is left)."""
        if version is not None:  # the caller's mistake: ValueError, not the peer's 4001 (docs/python-api.md)
            from ...caps.semver import Version

            try:
                Version.parse(version)
            except AmpError as exc:
                raise ValueError(f"version={version!r}: {exc.message}") from None
        evidence = None
        if delegation is not None:
            from ...deleg.chain import evidence_body  # only a delegated call loads the RFC 005 model

            evidence = evidence_body(delegation)
        body = self.client.invoke_body(capability, {} if params is None else params, version=version)
        target: Any = body["id"] if "id" in body else (body["capability"], body["version"])
        timeout_ms = invoke_timeout_ms(timeout, self._daemon.clock.wall_ms())
        sent: list[Outbound] = []
        mode = self.client.mode

        def track(out: Outbound) -> None:  # before it leaves: its replies are checked (§4.4, §6)
            sent.append(out)
            self._daemon.session_calls.sent(out.msg_id or b"", self.session_id, out.thread_id, mode)

        try:
            return await self._daemon.calls.invoke(
                self._link, target, body["params"], timeout_ms=timeout_ms, on_progress=on_progress,
                to=self.peer_did, thread_id=self.client.thread_id, session=body["session"], sent=track,
                on_input=on_input, delegation=evidence)
        except AmpError as exc:
            if exc.code not in _LOST or not sent or self._url is None or self._link.open:
                raise
            return await self._recover(sent[0], timeout_ms, on_progress, on_input, exc)
        finally:
            for out in sent:
                self._daemon.session_calls.forget(out.msg_id or b"")
                self.client.last_seen = out.msg_id

    async def _recover(self, out: Outbound, timeout_ms: int, on_progress: Any, on_input: Any,
                       first: AmpError) -> Any:
        """The connection went while ``out`` waited: dial again, resume, resend ``out`` unchanged."""
        assert self._url is not None
        error = first
        for attempt in range(self._attempts):
            await trio.sleep(min(2.0, 0.1 * 2 ** attempt))
            try:
                self._link = await self._daemon.connect(self._url, peer_did=self.peer_did, ssl_context=self._ssl)
                await self.resume()
                self.resumes += 1
                self._daemon.session_calls.sent(out.msg_id or b"", self.session_id, out.thread_id, self.client.mode)
                return await self._daemon.calls.resend(self._link, out, timeout_ms=timeout_ms,
                                                       on_progress=on_progress, on_input=on_input)
            except AmpError as exc:
                if exc.code not in _LOST and exc.code != 5003:
                    raise
                error = exc
        raise error

