"""The MCP client side: one session per MCP server, kept up.

:class:`McpClient` runs a supervisor task that starts a stdio server (or
connects to a streamable HTTP one), initializes one ``ClientSession`` and
keeps it while it lives; every call of every capability bound to that
server goes over it, concurrently (the SDK correlates the JSON-RPC ids).
When the session ends (the process exits, the stream closes) the calls in
flight get their one failure, and the supervisor starts it again at once
(a server that keeps dying within seconds of starting, and one that cannot
be started at all, with doubling delays from 0.5 s to 30 s). A server that cannot be
started or reached never stops the daemon: it is logged and retried, and
meanwhile a call fails at once with :class:`~ampcap.caps.binding.other_protocols.NotRun`
(5002), so a capability's next binding may take over (R17).

A call cancelled from outside (the binding's timeout, the invoke's deadline,
a drain) is abandoned by the SDK with a ``notifications/cancelled`` to the
server. Progress notifications reach the caller's callback.

The session reads the transport through a watcher (:class:`_Watched`):
when the server's side ends, the watcher notices, and that is how the
supervisor knows to restart without polling the SDK's internals.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import trio

from ..caps.binding.other_protocols import McpServer, NotRun, expand_env
from ..display import shown
from ..errors import AmpError
from . import sdk
from .elicitation import content_for, question_for

__all__ = ["Ask", "McpClient", "McpClients", "Progress", "list_server_tools"]

log = logging.getLogger("ampcap.mcp")

UNAVAILABLE = 5002
INTERNAL = 5001
TIMEOUT = 5003
STABLE_S = 10.0  # a session that lived this long had started fine: its end is restarted at once
CONNECTION_CLOSED = -32000  # the SDK's code for "the connection closed under a request"

# (progress, total, message) as the SDK reports it.
Progress = Callable[[float, float | None, str | None], Awaitable[None]]
# (prompt, options) -> the AMP caller's answer (RFC 006 INPUT_REQUIRED):
# what an elicitation from the server becomes (mcp/elicitation.py).
Ask = Callable[[str, list[str] | None], Awaitable[str]]


class McpClient:
    """One MCP server and its one session (see the module docstring)."""

    def __init__(self, server: McpServer, *, environ: Mapping[str, str] | None = None,
                 connect_timeout_s: float = 10.0, first_delay_s: float = 0.5, max_delay_s: float = 30.0,
                 log_failures: bool = True) -> None:
        self.server = server
        self._log_failures = log_failures
        self._environ = os.environ if environ is None else environ
        self._connect_timeout_s = connect_timeout_s
        self._first_delay_s = first_delay_s
        self._max_delay_s = max_delay_s
        self._session: Any = None
        self._lost = trio.Event()
        self._changed = trio.Event()  # set and replaced whenever the state changes
        self._starting = True
        self._why_down = "not started yet"
        self._closed = False
        self._scope: trio.CancelScope | None = None
        self.starts = 0  # sessions that came up (a restart counts)
        self._up_at = math.inf
        # The calls in flight that can put a question to their caller. MCP
        # over stdio does not say which call an elicitation belongs to, so
        # one is asked only while it is the only such call.
        self._askers: dict[int, Ask] = {}
        self._next_asker = 0

    # ------------------------------------------------------------ life

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep a session up until :meth:`close`. ``started`` once the first
        attempt has come up or failed (so ``serve`` logs it in order)."""
        announced = False

        def announce() -> None:
            nonlocal announced
            if not announced:
                announced = True
                task_status.started()

        delay = 0.0
        quick_deaths = 0  # sessions in a row that died within STABLE_S of coming up
        while not self._closed:
            self._set_state(starting=True, why="starting")
            up_before = self.starts
            self._up_at = math.inf
            try:
                sdk.require()
                await self._one_session(announce)
            except BaseException as exc:  # the SDK raises groups; none may end the daemon
                if _is_cancel(exc):
                    raise
                why = _reason(exc)
                if self.starts == up_before and self._lost.is_set() and why == "Connection closed":
                    # The SDK says only "Connection closed": say what closed it.
                    why = ("the connection closed during the MCP handshake" if self.server.url else
                           "the process exited (or closed its output) before the MCP handshake")
                self._lost = trio.Event()  # processed: a call now waits only while starting
                self._set_state(starting=False, why=why)
                if not self._closed and self._log_failures:
                    log.warning("MCP server %s (%s) %s: %s", self.server.name, self.server.describe(),
                                "stopped" if self.starts > up_before else "cannot be started or reached", why)
            announce()
            if self._closed:
                break
            if self.starts > up_before:
                # It had come up: restart at once, unless it keeps dying soon
                # after starting (a crash loop), which backs off like a failure.
                lived = trio.current_time() - self._up_at
                quick_deaths = quick_deaths + 1 if lived < STABLE_S else 0
                delay = 0.0 if quick_deaths <= 1 else min(self._max_delay_s,
                                                          self._first_delay_s * 2 ** (quick_deaths - 2))
            else:
                delay = self._first_delay_s if delay == 0 else min(self._max_delay_s, delay * 2)
            if delay:
                log.info("MCP server %s: next attempt in %.1f s", self.server.name, delay)
                with trio.move_on_after(delay):
                    while not self._closed:
                        await self._wait_change()
        self._set_state(starting=False, why="stopped")

    @property
    def why_down(self) -> str:
        """Why there is no session now ("" while one is up)."""
        return self._why_down

    def close(self) -> None:
        """Stop the session (calls in flight end with 5002) and the supervisor."""
        self._closed = True
        if self._scope is not None:
            self._scope.cancel()
        self._set_state(starting=False, why="stopped")

    async def _one_session(self, announce: Callable[[], None]) -> None:
        from mcp.client.session import ClientSession

        self._lost = trio.Event()
        # The connect deadline covers start-up and initialize; lifted once up.
        with trio.CancelScope(deadline=trio.current_time() + self._connect_timeout_s) as scope:
            self._scope = scope
            if self._closed:
                scope.cancel()
            async with self._transport() as (read, write):
                async with ClientSession(_Watched(read, self._lost), write,
                                         elicitation_callback=self._on_elicit) as session:
                    await session.initialize()
                    scope.deadline = math.inf
                    self.starts += 1
                    self._up_at = trio.current_time()
                    self._session = session
                    self._set_state(starting=False, why="")
                    log.info("MCP server %s up (%s)%s", self.server.name, self.server.describe(),
                             "" if self.starts == 1 else f", restart {self.starts - 1}")
                    announce()
                    try:
                        await self._lost.wait()
                    finally:
                        self._session = None
                    raise ConnectionError("the server closed the session" if self.server.url else
                                          "the server process exited")
        self._scope = None
        if scope.cancelled_caught and not self._closed:
            raise TimeoutError(f"no session within {self._connect_timeout_s:g} s")

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        if self.server.url is None:
            from mcp.client.stdio import StdioServerParameters, stdio_client

            command, *args = self.server.command
            env = {k: expand_env(v, self._environ, what=f"MCP server {self.server.name}'s env {k}")
                   for k, v in self.server.env}
            params = StdioServerParameters(command=command, args=args, env=env or None, cwd=self.server.cwd)
            async with stdio_client(params, errlog=_errlog()) as (read, write):
                yield read, write
            return
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        for name in ("httpx", "httpcore", "httpx2", "httpcore2"):
            # They log each request's full URL at INFO: a ${NAME} secret's value may be in it.
            logging.getLogger(name).setLevel(logging.WARNING)
        url = expand_env(self.server.url, self._environ, what=f"MCP server {self.server.name}'s url")
        headers = {k: expand_env(v, self._environ, what=f"MCP server {self.server.name}'s header {k}")
                   for k, v in self.server.headers}
        async with create_mcp_http_client(headers=headers) as http, \
                streamable_http_client(url, http_client=http) as (read, write):
            yield read, write

    def _set_state(self, *, starting: bool, why: str) -> None:
        self._starting = starting
        self._why_down = why
        self._changed.set()
        self._changed = trio.Event()

    async def _wait_change(self) -> None:
        await self._changed.wait()

    # ------------------------------------------------------------ calls

    async def session(self) -> Any:
        """The live session; while one is starting, wait for it (bounded by
        the connect timeout); when there is none, :class:`NotRun` 5002."""
        session = self._session
        if session is not None and not self._closed and not self._lost.is_set():
            # Up: the usual case, answered without a cancel scope (a scope with
            # a deadline enters and leaves trio's deadline heap, about a tenth
            # of what this client adds to a call).
            return session
        with trio.move_on_after(self._connect_timeout_s + 1):
            while not self._closed:
                if self._session is not None and not self._lost.is_set():
                    break  # up
                if not self._starting and not self._lost.is_set():
                    break  # down, waiting to retry
                # Starting, or lost and about to restart: wait for the outcome.
                await self._wait_change()
        session = self._session
        if session is None or self._lost.is_set():
            raise NotRun(UNAVAILABLE, f"MCP server {self.server.name} is not running ({self._why_down})")
        return session

    async def call_tool(self, tool: str, arguments: dict[str, Any], progress: Progress | None = None,
                        ask: Ask | None = None) -> Any:
        """``tools/call`` on the one session. Raises :class:`NotRun` when the
        server is not running (nothing was sent), ``AmpError(5001)`` when it
        goes away during the call, and the SDK's ``MCPError`` for a
        JSON-RPC error reply. ``ask`` answers the server's elicitations
        during the call (see :meth:`_on_elicit`)."""
        from mcp.shared.exceptions import MCPError

        session = await self.session()
        token = self._next_asker
        self._next_asker += 1
        if ask is not None:
            self._askers[token] = ask
        try:
            return await session.call_tool(tool, arguments, progress_callback=progress)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED or self._lost.is_set():
                raise AmpError(INTERNAL, f"MCP server {self.server.name} went away during the call") from None
            raise
        finally:
            self._askers.pop(token, None)

    async def _on_elicit(self, context: Any, params: Any) -> Any:
        """The server's ``elicitation/create``: put to the AMP caller of the
        one call in flight as INPUT_REQUIRED, its answer sent back (accept),
        or decline (the caller declined, the answer does not fit the form,
        several calls are in flight, or it is a URL-mode request); cancel
        when no answer came in time."""
        from mcp.types import ElicitResult

        askers = list(self._askers.values())
        if len(askers) != 1 or getattr(params, "mode", "form") != "form":
            log.info("MCP server %s elicitation declined: %s", self.server.name,
                     "URL mode" if getattr(params, "mode", "form") != "form" else
                     f"{len(askers)} calls that could be asking are in flight")
            return ElicitResult(action="decline")
        question = question_for(params.message, params.requested_schema)
        try:
            answer = await askers[0](question.prompt, question.options)
        except AmpError as exc:
            return ElicitResult(action="cancel" if exc.code == TIMEOUT else "decline")
        content = content_for(question, answer)
        if content is None:
            return ElicitResult(action="decline")
        return ElicitResult(action="accept", content=content)

    async def list_tools(self) -> list[sdk.ToolInfo]:
        """Every tool the server offers (all pages)."""
        from mcp.types import PaginatedRequestParams

        session = await self.session()
        tools: list[Any] = []
        cursor: str | None = None
        for _ in range(1000):  # a server that pages for ever is cut off
            page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return sdk.tool_infos(tools)


class _Watched:
    """The transport's read stream as the session's dispatcher reads it,
    with ``lost`` set when it ends (the server is gone): no task and no
    extra hop per message, every other attribute passed through."""

    def __init__(self, inner: Any, lost: trio.Event) -> None:
        self._inner = inner
        self._lost = lost

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)  # last_context, close, receive...

    async def __aenter__(self) -> _Watched:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self._inner.__aexit__(*exc)
        finally:
            self._lost.set()

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._inner.__anext__()
        except BaseException as exc:
            if not isinstance(exc, trio.Cancelled):
                self._lost.set()  # the end of the stream, or it broke
            raise


def _errlog() -> Any:
    """Where a stdio server's stderr goes: ours, when it is a real file (a
    stream replaced by one without a descriptor, as under a test's capture,
    cannot be handed to a process)."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (OSError, ValueError, AttributeError):
            continue
    return open(os.devnull, "w")  # noqa: SIM115 - the process's stderr for as long as it runs


def _is_cancel(exc: BaseException) -> bool:
    """Cancellation from outside (the daemon stopping), perhaps in a group."""
    if isinstance(exc, (trio.Cancelled, KeyboardInterrupt)):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(lambda e: isinstance(e, (trio.Cancelled, KeyboardInterrupt))) is not None
    return False


def _reason(exc: BaseException) -> str:
    """One line for a failure the SDK may have wrapped in exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        inner = [e for e in exc.exceptions if not isinstance(e, trio.Cancelled)]
        exc = (inner or list(exc.exceptions))[0]
    if isinstance(exc, AmpError):
        return exc.message
    text = str(exc) or type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror:
        text = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return shown(text)


class McpClients:
    """The daemon's MCP clients, one per distinct server, each run by its
    own supervisor task in ``nursery``."""

    def __init__(self, nursery: trio.Nursery, *, environ: Mapping[str, str] | None = None,
                 connect_timeout_s: float = 10.0) -> None:
        self._nursery = nursery
        self._environ = environ
        self._connect_timeout_s = connect_timeout_s
        self._clients: dict[McpServer, McpClient] = {}

    def get(self, server: McpServer) -> McpClient:
        """The client of ``server``, started on first use."""
        client = self._clients.get(server)
        if client is None:
            client = self._clients[server] = McpClient(server, environ=self._environ,
                                                       connect_timeout_s=self._connect_timeout_s)
            self._nursery.start_soon(client.run)
        return client

    async def start(self, servers: list[McpServer]) -> None:
        """Start ``servers`` now (``serve``), each once, their first attempts
        side by side; returns when each is up or has failed (logged)."""
        async with trio.open_nursery() as waiting:
            for server in servers:
                if server not in self._clients:
                    client = self._clients[server] = McpClient(server, environ=self._environ,
                                                               connect_timeout_s=self._connect_timeout_s)
                    waiting.start_soon(self._nursery.start, client.run)

    def close(self) -> None:
        for client in self._clients.values():
            client.close()


async def list_server_tools(server: McpServer, *, connect_timeout_s: float = 10.0) -> list[sdk.ToolInfo]:
    """Start (or connect to) ``server`` once, list its tools, stop it. A
    server that cannot be started or reached is ``AmpError(5002)`` with the
    reason."""
    client = McpClient(server, connect_timeout_s=connect_timeout_s, log_failures=False)
    tools: list[sdk.ToolInfo] | None = None
    failure: BaseException | None = None
    async with trio.open_nursery() as nursery:
        await nursery.start(client.run)
        why = client.why_down  # before close() makes it "stopped"
        try:
            if client.starts:
                tools = await client.list_tools()
        except Exception as exc:  # raised out here, not wrapped in the nursery's group
            failure = exc
        finally:
            client.close()
    if failure is not None:
        raise AmpError(UNAVAILABLE, f"MCP server {server.name} cannot list its tools: {_reason(failure)}")
    if tools is None:
        raise AmpError(UNAVAILABLE, f"MCP server {server.name} ({server.describe()}) cannot be started or "
                                    f"reached: {why}")
    return tools
