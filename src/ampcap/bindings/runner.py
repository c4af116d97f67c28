"""Run capability bindings at the trio edge.

The executor (sans-I/O) decides *that* a capability runs; this module makes
it happen:

- Python callables: ``async def`` functions are awaited in the current task;
  plain functions run in a worker thread (``trio.to_thread.run_sync``) so a
  slow one never blocks the event loop, unless the binding says ``inline``
  (quick pure functions, called directly: see :meth:`BindingRunner.run_inline`). On cancellation a worker thread is
  abandoned (Python threads cannot be killed); its result is discarded.
- Commands: ``argv`` runs without a shell, params arrive on stdin as JSON,
  the result is read from stdout as JSON. Output is capped, only the last
  few KiB of stderr are kept, and the process is killed (SIGKILL) when the
  invocation times out or is cancelled.

Error mapping (RFC 004 §9): the binding's own ``timeout_ms`` elapsing is
5003; a raising callable, a non-zero exit, oversized or invalid JSON output
is 5001. ``AmpError`` raised deliberately by a callable passes through
unchanged. Tracebacks are logged at ERROR level and never sent to the peer.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import math
import os
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import cbor2
import msgspec
import trio

from ..caps.binding.context import InvocationContext, binding_timeout_ms
from ..caps.binding.kinds import Binding
from ..caps.binding.local import CommandBinding, PythonBinding, resolve_callable, wants_context
from ..caps.binding.other_protocols import Fallback, NotRun
from ..display import shown
from ..errors import AmpError
from ..decoders import json_loads
from ..peer.logthrottle import LogThrottle

__all__ = ["RunnerContext", "BindingRunner", "run_binding"]

log = logging.getLogger(__name__)

INTERNAL_ERROR = 5001
TIMEOUT = 5003
STDERR_TAIL_BYTES = 2048

ProgressSink = Callable[[float | None, str | None], Awaitable[None]]


async def _no_progress(percent: float | None, message: str | None) -> None:
    return None


# (prompt, options, timeout_ms) -> the invoker's answer
AskSink = Callable[[str, list[str] | None, int | None], Awaitable[str]]


async def _cannot_ask(prompt: str, options: list[str] | None, timeout_ms: int | None) -> str:
    raise AmpError(INTERNAL_ERROR, "this invocation cannot ask its caller for input")


def _wall_clock_ms() -> int:
    """Unix time in milliseconds (the daemon's own is net/transport/clock.py;
    this package never imports net/)."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class RunnerContext:
    """The edge's :class:`InvocationContext`: trio sleeping, the wall clock,
    and a progress sink the executor wires to PROGRESS messages."""

    capability_id: str
    version: str
    progress_sink: ProgressSink = _no_progress
    clock_ms: Callable[[], int] = field(default=_wall_clock_ms)
    delegator: str | None = None
    """RFC 005: the DID the caller acts for (a verified chain's first delegator), or None."""
    ask_sink: AskSink = _cannot_ask
    deadline_ms: int | None = None
    """The invoke's deadline (Unix ms): when its budget runs out (R23)."""
    sender: str | None = None
    """The caller's DID (the invoke envelope's ``from``): for in-process handlers that act per caller."""
    session: Any = None
    """The invoke body's ``session`` map (RFC 006), or None."""
    invoke_id: bytes = b""
    """The CAP_INVOKE's message id (with ``sender``, the invoke's key)."""

    def now_ms(self) -> int:
        return self.clock_ms()

    def remaining_ms(self) -> int | None:
        return None if self.deadline_ms is None else max(0, self.deadline_ms - self.clock_ms())

    async def sleep(self, ms: int) -> None:
        await trio.sleep(max(0, ms) / 1000)

    async def progress(self, percent: float | None, message: str | None = None) -> None:
        if percent is not None and not (isinstance(percent, (int, float)) and math.isfinite(percent)):
            percent = None
        elif percent is not None:
            percent = min(100.0, max(0.0, float(percent)))
        await self.progress_sink(percent, message)

    async def ask(self, prompt: str, *, options: list[str] | None = None, timeout_ms: int | None = None) -> str:
        """RFC 006 INPUT_REQUIRED: ask the invoker and wait for its answer."""
        if not isinstance(prompt, str) or (options is not None and not all(isinstance(o, str) for o in options)):
            raise TypeError("ask(prompt: str, options: list[str] | None)")
        if timeout_ms is not None and not (isinstance(timeout_ms, int) and timeout_ms > 0):
            raise ValueError("timeout_ms must be a positive integer")
        return await self.ask_sink(prompt, list(options) if options is not None else None, timeout_ms)


@dataclass(frozen=True, slots=True)
class ThreadContext:
    """What a plain (non-async) capability function receives as its context:
    it runs in a worker thread and cannot await, so here ``progress`` and
    ``sleep`` are plain calls (``ctx.progress(50, "half")``), carried to the
    event loop with ``trio.from_thread``."""

    context: RunnerContext

    @property
    def capability_id(self) -> str:
        return self.context.capability_id

    @property
    def version(self) -> str:
        return self.context.version

    def now_ms(self) -> int:
        return self.context.now_ms()

    def remaining_ms(self) -> int | None:
        return self.context.remaining_ms()

    def sleep(self, ms: int) -> None:
        trio.from_thread.run(self.context.sleep, ms)

    def progress(self, percent: float | None, message: str | None = None) -> None:
        trio.from_thread.run(self.context.progress, percent, message)

    def ask(self, prompt: str, *, options: list[str] | None = None, timeout_ms: int | None = None) -> str:
        answer: str = trio.from_thread.run(lambda: self.context.ask(prompt, options=options, timeout_ms=timeout_ms))
        return answer


async def _kill_now(process: trio.Process) -> None:
    # Cancellation or timeout: no grace period, the invocation is over.
    process.kill()


def _tail(data: bytes) -> str:
    return data[-STDERR_TAIL_BYTES:].decode("utf-8", "replace")


class CapabilityExit(RuntimeError):
    """A plain capability function raised SystemExit or KeyboardInterrupt:
    its own doing (a worker thread gets no signals; an inline function is
    over in microseconds), so it is a crash like any other, 5001, and never
    the end of the daemon."""


def call_own(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` for a plain capability function, with its SystemExit or
    KeyboardInterrupt made a :class:`CapabilityExit` (``sys.exit`` in a
    library it calls must not stop the daemon)."""
    try:
        return fn(*args)
    except (SystemExit, KeyboardInterrupt) as exc:
        raise CapabilityExit(f"raised {type(exc).__name__}({exc})") from None


async def run_in_thread(fn: Callable[[], Any]) -> Any:
    """A plain capability function, off the event loop (it may block), its
    exits made crashes (:func:`call_own`). On cancellation the thread is
    abandoned: it runs to its end, and its result goes nowhere."""
    return await trio.to_thread.run_sync(functools.partial(call_own, fn), abandon_on_cancel=True)


# What an async capability may raise that is its own fault (KeyboardInterrupt
# is not among them: on the event loop it may be the operator's Ctrl-C).
CAPABILITY_FAULTS = (Exception, SystemExit)


def _throttled_error(throttle: LogThrottle, topic: str, message: str, *args: Any) -> None:
    """An ERROR line a peer can cause at will (see :class:`LogThrottle`)."""
    throttle.log(log, topic, logging.ERROR, int(time.monotonic() * 1000), message, *args)


def log_capability_crash(capability_id: str, exc: BaseException, throttle: LogThrottle) -> None:
    """A capability's own bug: one ERROR line, its traceback at DEBUG (-vv).
    Any peer can make a capability raise, so a traceback per call at the
    default level would let it fill the log; and past ``throttle``'s burst
    of crashes of one capability (its topic; capability ids are a bounded
    set, the catalog's) the line itself goes to DEBUG too, saying so once."""
    _throttled_error(throttle, f"{capability_id} raised", "capability %s raised %s: %s (traceback with -vv)",
                     capability_id, type(exc).__name__, shown(exc))
    log.debug("traceback of capability %s", capability_id, exc_info=exc)


# What CBOR carries as itself and to_builtins would otherwise turn into text
# (or refuse: a CBORTag a capability built on purpose).
_CBOR_NATIVE = (bytes, bytearray, memoryview, cbor2.CBORTag)


def plain_result(capability_id: str, result: Any, throttle: LogThrottle) -> Any:
    """What a Python capability returned, as plain values for the CAP_RESULT:
    dataclasses and msgspec Structs become maps, Enum members their values,
    sets arrays, datetimes ISO 8601 text (the forms params arrive in). A
    value with no such form is the capability's bug: 5001 to the caller and
    one ERROR line here naming the type, instead of an "ok" in the log and a
    5001 the provider never hears of."""
    try:
        return msgspec.to_builtins(result, builtin_types=_CBOR_NATIVE)
    except (TypeError, ValueError) as exc:
        try:
            cbor2.dumps(result)  # something else cbor2 encodes natively (a Fraction, an IP address…)
            return result
        except Exception:
            pass
        _throttled_error(throttle, f"{capability_id} result", "capability %s returned a result that cannot be "
                         "sent: %s", capability_id, shown(exc))
        raise AmpError(INTERNAL_ERROR, "capability result is not encodable") from None


_LOCAL = (PythonBinding, CommandBinding, Fallback)  # Fallback: each of its bindings decides


class BindingRunner:
    """Runs bindings; caches imported callables by target."""

    def __init__(self) -> None:
        self._callables: dict[tuple[str, tuple[Any, ...]], tuple[Callable[..., Any], bool, bool]] = {}
        self.crash_lines = LogThrottle()
        self._nursery: trio.Nursery | None = None
        self._remote: Any = None  # ampcap.bindings.protocols.RemoteBindings, once a binding needs it

    # MCP, HTTP and gRPC bindings (R17) run in ampcap.bindings, imported
    # only when a manifest has one: their libraries are heavy.

    async def open(self, nursery: trio.Nursery, bindings: list[Binding]) -> None:
        """Where remote bindings keep their sessions (the daemon's nursery);
        start every MCP server ``bindings`` use."""
        self._nursery = nursery
        if any(not isinstance(b, (PythonBinding, CommandBinding)) for b in bindings):
            await self._remote_bindings().start(bindings)

    async def aclose(self) -> None:
        """Stop the MCP servers, close connection pools (the daemon's drain)."""
        if self._remote is not None:
            await self._remote.aclose()

    def _remote_bindings(self) -> Any:
        if self._remote is None:
            if self._nursery is None:
                raise AmpError(5002, "MCP, HTTP and gRPC bindings run in a daemon (open the runner first)")
            from .protocols import RemoteBindings

            self._remote = RemoteBindings(self._nursery)
        return self._remote

    async def run(self, binding: Binding, params: Any, context: InvocationContext) -> Any:
        timeout_ms = binding.timeout_ms
        if not isinstance(binding, _LOCAL):
            # Another protocol's request (MCP, HTTP, gRPC) gets the invoke's
            # budget left less the margin (R23), so that its failure is the
            # reply; a local one is stopped at the invoke's deadline itself.
            timeout_ms = binding_timeout_ms(timeout_ms, context)
        if timeout_ms is None:
            return await self._dispatch(binding, params, context)
        with trio.move_on_after(timeout_ms / 1000) as scope:
            return await self._dispatch(binding, params, context)
        if scope.cancelled_caught:
            raise AmpError(TIMEOUT, f"{context.capability_id} did not finish within {timeout_ms} ms")
        raise AssertionError("unreachable")  # pragma: no cover

    async def _dispatch(self, binding: Binding, params: Any, context: InvocationContext) -> Any:
        if isinstance(binding, CommandBinding):
            return await self._run_command(binding, params, context)
        if isinstance(binding, PythonBinding):
            return await self._run_python(binding, params, context)
        if isinstance(binding, Fallback):
            from .fallback import run_fallback

            return await run_fallback(binding, lambda one: self.run(one, params, context), context.capability_id)
        return await self._remote_bindings().run(binding, params, context)

    def _resolve(self, binding: PythonBinding) -> tuple[Callable[..., Any], bool, bool]:
        """The callable, whether it takes the context, whether it is async:
        inspected once per target, not per call (inspect.signature is slow)."""
        key = (binding.target, binding.search_path)
        entry = self._callables.get(key)
        if entry is None:
            try:
                fn = resolve_callable(binding.target, binding.search_path)
            except AmpError as exc:
                log.error("binding %s unusable: %s", binding.target, exc.message)
                # Nothing ran: a capability's next binding may (R17).
                raise NotRun(INTERNAL_ERROR, "capability implementation unavailable") from None
            entry = self._callables[key] = (fn, wants_context(fn), _is_async(fn))
        return entry

    def is_inline(self, binding: Binding) -> bool:
        """True when ``binding`` can run synchronously on the event loop."""
        if not isinstance(binding, PythonBinding) or not binding.inline:
            return False
        try:
            return not self._resolve(binding)[2]
        except AmpError:
            return False  # let the normal path report it

    def run_inline(self, binding: PythonBinding, params: Any, context: InvocationContext) -> Any:
        """Call an ``inline`` plain function right here (see PythonBinding)."""
        fn, with_context, _ = self._resolve(binding)
        try:
            return call_own(fn, params, context) if with_context else call_own(fn, params)
        except AmpError:
            raise
        except Exception as exc:
            log_capability_crash(context.capability_id, exc, self.crash_lines)
            raise AmpError(INTERNAL_ERROR, "capability execution failed") from None

    async def _run_python(self, binding: PythonBinding, params: Any, context: InvocationContext) -> Any:
        fn, with_context, is_async = self._resolve(binding)
        args: tuple[Any, ...] = (params, context) if with_context else (params,)
        try:
            if is_async:
                return await fn(*args)
            if binding.inline:
                result = call_own(fn, *args)
            else:
                if with_context and isinstance(context, RunnerContext):
                    args = (params, ThreadContext(context))
                result = await run_in_thread(functools.partial(fn, *args))
            if hasattr(result, "__await__"):  # a sync wrapper that returned a coroutine
                return await result
            return result
        except AmpError:
            raise
        except CAPABILITY_FAULTS as exc:
            log_capability_crash(context.capability_id, exc, self.crash_lines)
            raise AmpError(INTERNAL_ERROR, "capability execution failed") from None

    async def _run_command(self, binding: CommandBinding, params: Any, context: InvocationContext) -> Any:
        try:
            stdin = json.dumps(params, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError):
            # CBOR params (bytes, tags, NaN) that have no JSON form.
            raise AmpError(INTERNAL_ERROR, "params cannot be passed to a command as JSON") from None
        env = dict(os.environ)
        env.update(binding.env)
        env["AMPCAP_CAPABILITY_ID"] = context.capability_id
        limit = binding.max_output_bytes
        stdout = bytearray()
        stderr = bytearray()
        too_big = False

        async def feed(stream: trio.abc.SendStream) -> None:
            try:
                async with stream:
                    await stream.send_all(stdin)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the command does not read its input: its business

        async def drain_stdout(stream: trio.abc.ReceiveStream, process: trio.Process) -> None:
            nonlocal too_big
            async for chunk in stream:
                stdout.extend(chunk)
                if len(stdout) > limit:
                    too_big = True
                    process.kill()
                    return

        async def drain_stderr(stream: trio.abc.ReceiveStream) -> None:
            async for chunk in stream:
                stderr.extend(chunk)
                if len(stderr) > 2 * STDERR_TAIL_BYTES:
                    del stderr[:-STDERR_TAIL_BYTES]

        start_error: OSError | None = None
        # Errors are caught inside the nursery: trio would wrap anything
        # leaving it in an ExceptionGroup.
        async with trio.open_nursery() as nursery:
            start = functools.partial(
                trio.run_process, list(binding.argv), stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False,
                cwd=binding.cwd, env=env, deliver_cancel=_kill_now,
            )
            try:
                process: trio.Process = await nursery.start(start)
            except OSError as exc:
                start_error = exc
            else:
                assert process.stdin and process.stdout and process.stderr
                nursery.start_soon(feed, process.stdin)
                nursery.start_soon(drain_stdout, process.stdout, process)
                nursery.start_soon(drain_stderr, process.stderr)
        if start_error is not None:
            _throttled_error(self.crash_lines, f"{context.capability_id} failed", "capability %s: cannot start %r: %s",
                             context.capability_id, binding.argv[0], start_error)
            raise NotRun(INTERNAL_ERROR, "capability command could not be started")  # the next binding may run
        tail = _tail(bytes(stderr))
        details: dict[str, Any] = {"exit_status": process.returncode}
        if binding.stderr_to_caller:
            details["stderr_tail"] = tail

        def failed(why: str) -> AmpError:
            # Any peer can make a command fail (bad params): throttled like a crash.
            _throttled_error(self.crash_lines, f"{context.capability_id} failed", "capability %s: %s; stderr: %s",
                             context.capability_id, why, tail or "(empty)")
            return AmpError(INTERNAL_ERROR, why, details=details)

        if too_big:
            raise failed(f"command output exceeds {limit} bytes")
        if process.returncode != 0:
            raise failed(f"command exited with status {process.returncode}")
        try:
            return json_loads(bytes(stdout))
        except (ValueError, UnicodeDecodeError):  # json_loads turns deep nesting into a ValueError
            raise failed("command output is not valid JSON") from None


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


_default_runner = BindingRunner()


async def run_binding(binding: Binding, params: Any, context: InvocationContext) -> Any:
    """Run ``binding`` with the process-wide runner (see :class:`BindingRunner`)."""
    return await _default_runner.run(binding, params, context)
