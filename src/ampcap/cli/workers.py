"""N processes of one identity on shared listening sockets (``serve --workers N``).

The parent binds the listening sockets once (one per worker, on one port:
:func:`bind`), makes up the group token the
workers share their store under (store/owner.py: they coordinate by
claiming each invoke, so the store lets all of them in), and starts each
worker with the ``spawn`` start method (a fresh interpreter: nothing of the
parent's state, threads or event loop is copied), handing it the sockets.
Each worker runs the same single-process command (``run(argv)``) in its own
process group, so a Ctrl-C reaches the parent only, which passes one
SIGTERM to each: they drain as a lone daemon does. A worker that dies
otherwise is reported and started again (unless it exited with an error
right after it started: then its start-up failed, and the parent stops the
others and exits with its status). Once the group has served (a worker
printed the group's URL line: :func:`serving`), a worker that ends right after
its start is started again after a pause that doubles, up to
:data:`RESTART_MAX_S`: its start-up met something passing (a PostgreSQL
store down while it opened it), and stopping the group would take down the
workers that serve; the pause keeps a start that keeps failing from
spinning.

:func:`launch` takes the per-process run function and the addresses to
share, so other long-running commands (``relay --workers``) can use it too.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import secrets
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..net.transport.url import format_hostport
from .errors import CommandError

__all__ = ["launch", "serving", "GROUP_ENV", "WORKER_ENV"]

GROUP_ENV = "AMPCAP_STORE_GROUP"
"""The group token workers sharing one store are given (``serve --workers`` sets it for its children; the
machines of one fleet are each given the same one). Unset: the daemon is a group of one
(cli/serve_state.py reads it)."""
WORKER_ENV = "AMPCAP_WORKER"  # "<index> <generation>": worker 0's first start prints the URL line
QUICK_DEATH_S = 2.0  # a worker that ends sooner after its start failed to start
RESTART_FIRST_S = 0.5  # a failed start of a group that served: the first pause before the next try
RESTART_MAX_S = 15.0  # ... doubling up to this

_serving: Any = None  # in a worker: the group's "it has started" event (set by serving())


def serving() -> None:
    """Called by the worker that prints the group's URL line (it listens):
    the group has started, so a later failed start of a worker is retried
    rather than taken for a bad configuration. Outside a group: nothing."""
    if _serving is not None:
        _serving.set()


def worker_argv(argv: Sequence[str]) -> list[str]:
    """A worker's command line: the group's, less ``--workers N`` (a worker
    is one process)."""
    child: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--workers":
            skip = True
        elif not arg.startswith("--workers="):
            child.append(arg)
    return child


def bind(address: tuple[str, int], count: int, backlog: int = 4096) -> list[list[socket.socket]]:
    """For each of ``count`` workers, its listening sockets for ``address``
    (every address its host resolves to; port 0: one free port for all).

    One socket per worker and address, all bound to the same port with
    ``SO_REUSEPORT``: the kernel spreads new connections over the workers
    evenly (one shared socket would let whichever worker wakes first accept
    a whole burst). The parent keeps them open, so connections that arrive
    while a worker restarts wait in its socket's queue for the new one."""
    host, port = address
    made: list[socket.socket] = []
    per_worker: list[list[socket.socket]] = [[] for _ in range(count)]
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, where in infos:
            for index in range(count):
                sock = socket.socket(family, kind, proto)
                made.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                if port == 0 and len(made) > 1:  # the free port the first one got, on every socket
                    where = (where[0], made[0].getsockname()[1], *where[2:])
                sock.bind(where)
                sock.listen(backlog)
                per_worker[index].append(sock)
    except OSError as exc:
        for sock in made:
            sock.close()
        raise CommandError(f"cannot listen on {format_hostport(host or '*', port)}: {exc.strerror or exc}") \
            from None
    return per_worker


def _worker(run: Callable[[list[str]], int], argv: list[str], handed: list[tuple[tuple[str, int], list[Any]]],
            label: str, started: Any = None) -> None:
    global _serving
    os.setpgrp()  # the terminal's Ctrl-C goes to the parent, which passes it on once
    _serving = started
    from ..net.transport.inherited import adopt

    for address, sockets in handed:
        adopt(address, sockets)
    os.environ[WORKER_ENV] = label
    sys.exit(run(argv))


def launch(run: Callable[[list[str]], int], argv: Sequence[str], count: int,
           addresses: Sequence[tuple[str, int]], *, what: str = "serve",
           on_exit: Callable[[int], None] | None = None) -> int:
    """Run ``run(argv)`` in ``count`` worker processes sharing sockets bound
    to ``addresses`` (each as its command line names it) and one store group;
    until SIGTERM/SIGINT/SIGHUP, which drains them all. ``on_exit(pid)``
    hears of each worker that ended. Returns the exit status."""
    bound = [(address, bind(address, count)) for address in addresses]
    os.environ.setdefault(GROUP_ENV, secrets.token_hex(16))
    context = multiprocessing.get_context("spawn")
    stopping: list[int] = []

    def stop(signum: int, frame: Any) -> None:
        stopping.append(signum)
        for proc in procs:
            if proc is not None and proc.pid is not None and proc.exitcode is None:
                try:
                    os.kill(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def start(index: int, generation: int) -> Any:
        handed = [(address, sockets[index]) for address, sockets in bound]
        proc = context.Process(target=_worker, args=(run, list(argv), handed, f"{index} {generation}", served),
                               name=f"ampcap {what} worker {index}", daemon=False)
        proc.start()
        started[index] = time.monotonic()
        return proc

    procs: list[Any] = [None] * count
    started = [0.0] * count
    served = context.Event()  # set once worker 0 listens and prints the URL line (serving())
    pauses = [0.0] * count  # the pause before a failed start's next try (0: its last start went well)
    restart_at: list[float | None] = [None] * count  # a worker waiting to be started again
    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    status = 0
    try:
        for index in range(count):
            procs[index] = start(index, 0)
        generations = [0] * count
        while any(proc.exitcode is None for proc in procs) or (not stopping and any(restart_at)):
            now = time.monotonic()
            waits = [at - now for at in restart_at if at is not None]
            multiprocessing.connection.wait([proc.sentinel for proc in procs if proc.exitcode is None],
                                            timeout=max(0.0, min([1.0, *waits])))
            for index, proc in enumerate(procs):
                at = restart_at[index]
                if at is not None:
                    if not stopping and time.monotonic() >= at:
                        restart_at[index] = None
                        generations[index] += 1
                        procs[index] = start(index, generations[index])
                    continue
                code = proc.exitcode
                if code is None or stopping or getattr(proc, "reported", False):
                    continue
                proc.reported = True
                if on_exit is not None:
                    on_exit(proc.pid)
                how = f"signal {signal.Signals(-code).name}" if code < 0 else f"status {code}"
                if code > 0 and time.monotonic() - started[index] < QUICK_DEATH_S:  # killed: not its fault
                    if not served.is_set():  # no worker ever served: the start-up itself fails
                        print(f"ampcap {what}: worker {index} (pid {proc.pid}) ended at start with {how}; stopping",
                              file=sys.stderr, flush=True)
                        status = code if code > 0 else 1
                        stop(signal.SIGTERM, None)
                        continue
                    pauses[index] = min(RESTART_MAX_S, pauses[index] * 2 or RESTART_FIRST_S)
                    print(f"ampcap {what}: worker {index} (pid {proc.pid}) ended at start with {how}; starting it "
                          f"again in {pauses[index]:g} s", file=sys.stderr, flush=True)
                    restart_at[index] = time.monotonic() + pauses[index]
                    continue
                pauses[index] = 0.0
                generations[index] += 1
                print(f"ampcap {what}: worker {index} (pid {proc.pid}) died ({how}); starting it again",
                      file=sys.stderr, flush=True)
                procs[index] = start(index, generations[index])
        if not status and not stopping:
            status = max((proc.exitcode for proc in procs), default=0) or 0
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for _, per_worker in bound:
            for sockets in per_worker:
                for sock in sockets:
                    sock.close()
    return status

