"""The invokes a daemon runs for its peers: the provider side at the trio edge.

The sans-I/O :class:`~ampcap.peer.executor.Executor` decides *that* an
invoke runs (:class:`~ampcap.peer.executor.Execute`), when it must stop
(:class:`~ampcap.peer.executor.Cancel`: a deadline, the caller's cancel,
shutdown) and what the caller is told; it cannot run anything itself. This
module is the other half: each job runs as one trio task in the daemon's
nursery under its own cancel scope, or, for a quick pure function, is called
on the spot with no task at all, and either way its outcome goes back to the
executor exactly once. Counting, usage records and the per-invoke log lines
are here too, so that an inline job and a task-run one are accounted alike.

The daemon owns one :class:`Jobs` and only routes the executor's actions to
it; what the executor answers (the CAP_RESULT to send) goes back through the
daemon's ``_apply``, the one place actions become effects.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import trio

from ...caps.binding.context import SERVING_DEADLINE
from ...caps.stats import UsageStats
from ...errors import AmpError
from ...peer.dedupe import InvokeKey
from ...peer.executor import Executor, Job
from ...bindings.runner import (
    CAPABILITY_FAULTS,
    BindingRunner,
    RunnerContext,
    log_capability_crash,
    plain_result,
)
from ..transport.clock import Clock

__all__ = ["Jobs", "LocalHandler", "Later"]

# The daemon's logger: these are its lines, whichever module writes them.
log = logging.getLogger("ampcap.daemon")

INTERNAL = 5001
BAD_REQUEST, TIMEOUT = 4001, 5003

# A capability implemented in-process (the Python API): params + context in,
# result out. Manifest bindings go through the BindingRunner instead. A plain
# (not async) function with ``inline = True`` is called on the spot, as a
# quick pure binding is (net/features/payments.py: the payment workflow).
# A plain function with ``gate = True`` is no capability but a check in
# front of the capability's own binding: it takes the params and the context
# and returns the params the binding gets (or raises), and the binding runs
# on the daemon's one runner, whatever its kind, inline when it is (a paid
# capability: the payment is checked and spent, then its binding runs).
LocalHandler = Callable[[Any, RunnerContext], Awaitable[Any]]


class Later:
    """What an ``inline`` handler returns when its outcome comes later in the
    daemon's loop, with no task: it calls :meth:`settle` exactly once (the
    payment workflow: its tick's steps commit together, then each is
    answered). Settling before the daemon listens is kept until it does."""

    __slots__ = ("_then", "_outcome")

    def __init__(self) -> None:
        self._then: Callable[[Any, AmpError | None], None] | None = None
        self._outcome: tuple[Any, AmpError | None] | None = None

    def settle(self, result: Any = None, error: AmpError | None = None) -> None:
        if self._then is not None:
            then, self._then = self._then, None
            then(result, error)
        elif self._outcome is None:
            self._outcome = (result, error)

    def then(self, callback: Callable[[Any, AmpError | None], None]) -> None:
        if self._outcome is not None:
            callback(*self._outcome)
        else:
            self._then = callback


class _Question:
    __slots__ = ("done", "answer", "reason")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.answer: str | None = None
        self.reason: str | None = None


@dataclass(slots=True)
class _RunningJob:
    job: Job
    scope: trio.CancelScope
    started_ms: int


class Jobs:
    """The jobs a daemon is running, by invoke key, and the count of all it ran."""

    def __init__(self, executor: Executor, apply: Callable[[list[Any]], None], clock: Clock,
                 handlers: Mapping[str, LocalHandler]) -> None:
        self._executor = executor
        self._apply = apply  # the daemon's: the executor's answers become effects there
        self._clock = clock
        self._handlers = dict(handlers)
        self._runner = BindingRunner()
        self._running: dict[InvokeKey, _RunningJob] = {}
        self._questions: dict[bytes, _Question] = {}  # INPUT_REQUIRED id -> the job's ask waiting for it
        self.nursery: trio.Nursery | None = None  # the daemon's, once it runs
        self.stats = {"invokes": 0, "completed": 0}
        self.usage = UsageStats()  # per capability id; logged when the daemon drains
        # Tracing (net/features/tracing.py): called in each job's own task
        # before it runs, to make the invoke's span current there.
        self.entering: Callable[[Job], None] | None = None

    async def open_bindings(self, nursery: trio.Nursery, bindings: list[Any]) -> None:
        """Before serving: start the MCP servers the catalog's bindings use."""
        await self._runner.open(nursery, bindings)

    async def close_bindings(self) -> None:
        """After the drain: stop MCP servers, close connection pools."""
        await self._runner.aclose()

    def start(self, job: Job) -> None:
        """Run what the executor's ``Execute`` accepted."""
        assert self.nursery is not None
        handler = self._handlers.get(job.capability_id)
        if (self._runner.is_inline(job.binding) if handler is None or getattr(handler, "gate", False)
                else getattr(handler, "inline", False)):
            self._run_inline(job, handler)
            return
        scope = trio.CancelScope()
        running = _RunningJob(job=job, scope=scope, started_ms=self._clock.monotonic_ms())
        self._running[job.key] = running
        self._received(job)
        self.nursery.start_soon(self._run, running)

    def cancel(self, key: InvokeKey, code: int) -> None:
        """The executor's ``Cancel``: it has already sent the terminal reply (``code``)."""
        running = self._running.pop(key, None)
        if running is not None:
            running.scope.cancel()
            self._log_done(running, code)

    async def _run(self, running: _RunningJob) -> None:
        job = running.job
        key = job.key

        async def progress(pct: float | None, text: str | None) -> None:
            if key not in self._running:
                return
            if pct is not None:
                self._apply(self._executor.progress(key, pct, text, now_ms=self._clock.wall_ms()))
            elif text:  # progress with no percentage (an MCP server's without a total): PROCESSING
                self._apply(self._executor.processing(key, text, now_ms=self._clock.wall_ms()))

        async def ask(prompt: str, options: list[str] | None, timeout_ms: int | None) -> str:
            return await self._ask(job, prompt, options, timeout_ms)

        context = RunnerContext(capability_id=job.capability_id, version=str(job.descriptor.version),
                                progress_sink=progress, clock_ms=self._clock.wall_ms, delegator=job.delegator,
                                ask_sink=ask, deadline_ms=job.deadline_ms, sender=job.key.sender,
                                session=job.session, invoke_id=job.key.msg_id)
        # Deadlines that travel (R23): calls this task makes while serving
        # the invoke get what is left of its budget (this task's context only).
        SERVING_DEADLINE.set(job.deadline_ms)
        if self.entering is not None:
            self.entering(job)
        result: Any = None
        error: AmpError | None = None
        try:
            with running.scope:
                try:
                    handler = self._handlers.get(job.capability_id)
                    if handler is None:
                        result = await self._runner.run(job.binding, job.params, context)
                    elif getattr(handler, "gate", False):
                        result = await self._runner.run(job.binding, handler(job.params, context), context)
                    else:
                        result = await handler(job.params, context)
                    result = plain_result(job.capability_id, result, self._runner.crash_lines)
                except AmpError as exc:
                    error = exc
                except CAPABILITY_FAULTS as exc:  # a capability's bug is the caller's 5001, never our crash
                    log_capability_crash(job.capability_id, exc, self._runner.crash_lines)
                    error = AmpError(INTERNAL, "capability execution failed")
        except BaseException:
            # Cancelled from outside, not by the job's own scope: the task
            # group the daemon runs in is going away (a Python API caller
            # cancelled its serve block). The invoke still ends here, with
            # the shutdown code, or drain would wait for it until its timeout.
            self._end(running, error=AmpError(self._executor.config.shutdown_code, "daemon shutting down"))
            raise
        self._end(running, result=result, error=error)

    async def _ask(self, job: Job, prompt: str, options: list[str] | None, timeout_ms: int | None) -> str:
        """RFC 006 §6.3 at the edge: send INPUT_REQUIRED, wait for the
        answer (or ``timeout_ms``, at most the invoke's own deadline)."""
        now = self._clock.wall_ms()
        left = max(1, job.deadline_ms - now)
        wait_ms = min(timeout_ms, left) if timeout_ms is not None else left
        qid, actions = self._executor.input_required(job.key, prompt, options, wait_ms, now_ms=now)
        if qid is None:
            raise AmpError(TIMEOUT, "the invocation has already ended")
        question = self._questions[qid] = _Question()
        try:
            self._apply(actions)
            with trio.move_on_after(wait_ms / 1000):
                await question.done.wait()
        finally:
            self._questions.pop(qid, None)
            self._executor.forget_question(qid)
        if not question.done.is_set():
            raise AmpError(TIMEOUT, "no input from the caller in time")
        if question.answer is None:
            raise AmpError(BAD_REQUEST, f"the caller declined to answer: {question.reason or 'no reason given'}")
        return question.answer

    def answer(self, question_id: bytes, answer: str | None, reason: str | None) -> None:
        """The caller's answer (``answer``) or refusal (``reason``) to a question."""
        question = self._questions.get(question_id)
        if question is not None and not question.done.is_set():
            question.answer, question.reason = answer, reason
            question.done.set()

    def _end(self, running: _RunningJob, *, result: Any = None, error: AmpError | None = None) -> None:
        """Hand a task-run job's outcome to the executor, unless the job has
        already ended: a timeout or shutdown (its own scope cancelled) took
        it out of ``_running`` and sent its terminal CAP_RESULT then."""
        key = running.job.key
        if self._running.get(key) is not running:
            return
        del self._running[key]
        self._log_done(running, error.code if error else None)
        self._apply(self._executor.complete(key, result=result, error=error, now_ms=self._clock.wall_ms()))

    def _run_inline(self, job: Job, handler: Any = None) -> None:
        """A quick pure function: call it now and answer, with no task, no
        thread and no cancel scope (it cannot be interrupted anyway). An
        in-process handler marked ``inline`` (a plain function, not a
        coroutine: the payment workflow) runs this way too."""
        self._received(job)
        context = RunnerContext(capability_id=job.capability_id, version=str(job.descriptor.version),
                                clock_ms=self._clock.wall_ms, delegator=job.delegator, deadline_ms=job.deadline_ms,
                                sender=job.key.sender, session=job.session, invoke_id=job.key.msg_id)
        result: Any = None
        error: AmpError | None = None
        started = time.perf_counter()
        try:
            if handler is None:
                ran = self._runner.run_inline(job.binding, job.params, context)
            elif getattr(handler, "gate", False):
                ran = self._runner.run_inline(job.binding, handler(job.params, context), context)
            else:
                ran = handler(job.params, context)
                if type(ran) is Later:  # answered later in the loop (see Later)
                    ran.then(lambda result, error: self._end_later(job, started, result, error))
                    return
            result = plain_result(job.capability_id, ran, self._runner.crash_lines)
        except AmpError as exc:
            error = exc
        except CAPABILITY_FAULTS as exc:  # an inline handler's bug is the caller's 5001, never our crash
            log_capability_crash(job.capability_id, exc, self._runner.crash_lines)
            error = AmpError(INTERNAL, "capability execution failed")
        self._done(job, error.code if error else None, (time.perf_counter() - started) * 1000)
        self._apply(self._executor.complete(job.key, result=result, error=error, now_ms=self._clock.wall_ms()))

    def _end_later(self, job: Job, started: float, ran: Any, error: AmpError | None) -> None:
        """A :class:`Later`'s outcome: the inline job ends as it would have on the spot."""
        result: Any = None
        if error is None:
            try:
                result = plain_result(job.capability_id, ran, self._runner.crash_lines)
            except AmpError as exc:
                error = exc
        self._done(job, error.code if error else None, (time.perf_counter() - started) * 1000)
        self._apply(self._executor.complete(job.key, result=result, error=error, now_ms=self._clock.wall_ms()))

    def _log_done(self, running: _RunningJob, code: int | None) -> None:
        self._done(running.job, code, self._clock.monotonic_ms() - running.started_ms)

    # One place counts, records and logs every job, inline or task-run.

    def _received(self, job: Job) -> None:
        self.stats["invokes"] += 1
        if log.isEnabledFor(logging.INFO):
            log.info("invoke received id=%s cap=%s from=%s", job.key.msg_id.hex(), job.capability_id,
                     job.key.sender)

    def _done(self, job: Job, code: int | None, latency_ms: float) -> None:
        self.stats["completed"] += 1
        self.usage.record(job.capability_id, code=code, latency_ms=latency_ms)
        if log.isEnabledFor(logging.INFO):
            log.info("invoke completed id=%s cap=%s code=%s latency=%dms", job.key.msg_id.hex(),
                     job.capability_id, code if code is not None else "ok", latency_ms)
