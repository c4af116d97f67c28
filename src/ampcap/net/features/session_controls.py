"""RFC 006: our own session-control REQUESTs (init, resume, close, ...)
waiting for their RESPONSE or ERROR, by message id.

The daemon keeps one :class:`ControlRequests` (through
:class:`~ampcap.net.features.session_routing.SessionRouting`): the Python
API's sessions (net/api/sessions.py) send through it, the daemon's dispatch
settles it with each RESPONSE or ERROR that answers one, and a link's end
fails what is still waiting on it (5002).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from ...display import MESSAGE_LIMIT, printable
from ...errors import AmpError, LocalProtocolError, MessageTooLarge
from ...peer.outbound import Outbound
from ...wire.registry import MessageType

if TYPE_CHECKING:
    from ..daemon.link import Link

__all__ = ["ControlRequests"]

UNAVAILABLE = 5002

_ERROR = int(MessageType.ERROR)


class _Wait:
    """One control request of ours, until its answer (or its link's end)."""

    __slots__ = ("link", "done", "body", "error")

    def __init__(self, link: Link) -> None:
        self.link = link
        self.done = trio.Event()
        self.body: Any = None
        self.error: AmpError | None = None


class ControlRequests:
    """The daemon's session-control REQUESTs awaiting their RESPONSE, by id."""

    def __init__(self) -> None:
        self._pending: dict[bytes, _Wait] = {}

    async def request(self, link: Link, out: Outbound, timeout_s: float) -> Any:
        """Send ``out`` (its id fixed) on ``link``; the answer's body, or its AmpError."""
        assert out.msg_id is not None
        wait = self._pending[out.msg_id] = _Wait(link)
        try:
            try:
                link.driver.send_nowait(out)
            except (LocalProtocolError, MessageTooLarge) as exc:
                raise AmpError(UNAVAILABLE, f"cannot send: {exc.message}") from None
            with trio.move_on_after(timeout_s):
                await wait.done.wait()
        finally:
            self._pending.pop(out.msg_id, None)
        if not wait.done.is_set():
            raise AmpError(5003, "no answer to the session request in time")
        if wait.error is not None:
            raise wait.error
        return wait.body

    def settle(self, inbound: Any) -> bool:
        """A RESPONSE or ERROR: True when it answered one of ours (then taken)."""
        env, body = inbound.envelope, inbound.body
        wait = self._pending.pop(env.reply_to, None) if env.reply_to is not None else None
        if wait is None:
            return False
        if env.typ == _ERROR:
            code = body.get("code") if type(body) is dict else None
            message = body.get("message") if type(body) is dict else None
            wait.error = AmpError(code if type(code) is int else 5001,
                                  printable(str(message or "error"), MESSAGE_LIMIT))
        else:
            wait.body = body
        wait.done.set()
        return True

    def end_on(self, link: Link) -> None:
        """``link`` closed: its requests can no longer be answered (5002)."""
        for handle, wait in list(self._pending.items()):
            if wait.link is link:
                del self._pending[handle]
                wait.error = AmpError(UNAVAILABLE, "connection closed before the session answer")
                wait.done.set()
