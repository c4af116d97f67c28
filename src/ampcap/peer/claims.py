"""What a worker does with an invoke whose claim it asked for (ruling R25).

Workers of one identity that share a store claim each invoke before it runs
(``store/journal.py`` :meth:`claim`): the row of its ``(sender, id)`` names
the worker running it and a lease that worker keeps renewing. The executor
accepts an invoke as if it were alone; the edge claims it before the job
starts (in place of the ``running`` row of :class:`~.journal.Persist`) and
asks :func:`judge` what the store's answer means:

* CLAIMED: the invoke is this worker's: the job starts;
* DONE (finished by any worker): its terminal bytes, as first sent (R8);
* HELD (another worker's live lease): PROCESSING now, then the same terminal
  bytes once the row is done (the edge waits: NOTIFY or polling);
* ABANDONED (the lease ran out: its worker died): what a restart does (R19),
  a 5002 sealed once and written unless the row changed hands meanwhile; or,
  for an idempotent capability, the job runs again here if this worker wins
  the row;
* CONFLICT (same key, other content): not a retry, 4001.

Plain code: the edge performs the store calls and the effects.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import msgspec

from ..errors import AmpError
from .dedupe import Terminal
from .journal import Claim, ClaimStatus, JournalRecord, interrupted
from .outbound import Outbound

__all__ = ["Verdict", "Judgement", "judge", "REUSED", "STORE_DOWN"]

REUSED = AmpError(4001, "message id reused with different content", path="id")
STORE_DOWN = AmpError(5002, "the state store cannot be reached; retry later")


class Verdict(enum.Enum):
    RUN = "run"  # ours: start the job
    ANSWER = "answer"  # send ``terminal`` (it is in the store already)
    CLOSE = "close"  # write ``closed`` (the 5002 of an abandoned invoke) if still abandoned, then answer it
    TAKE_OVER = "take over"  # an abandoned idempotent invoke: run it again if this worker wins the row
    WAIT = "wait"  # another worker runs it: PROCESSING, then its terminal bytes
    REFUSE = "refuse"  # answer ``error`` (a conflict)


class Judgement(msgspec.Struct, frozen=True):
    verdict: Verdict
    terminal: Terminal | None = None
    closed: JournalRecord | None = None
    error: AmpError | None = None
    warning: str | None = None


def judge(claim: Claim, now_ms: int, idempotent: Callable[[str], bool],
          seal: Callable[[Outbound, int], Terminal]) -> Judgement:
    """What ``claim`` (the store's answer to a worker's claim) asks of it."""
    status, found = claim.status, claim.record
    if status is ClaimStatus.CLAIMED:
        return Judgement(Verdict.RUN)
    if status is ClaimStatus.CONFLICT:
        return Judgement(Verdict.REFUSE, error=REUSED)
    assert found is not None
    if status is ClaimStatus.DONE:
        return Judgement(Verdict.ANSWER, terminal=found.terminal)
    if status is ClaimStatus.HELD:
        return Judgement(Verdict.WAIT)
    if idempotent(found.capability_id):
        return Judgement(Verdict.TAKE_OVER)
    closed, warning = interrupted(found, now_ms, seal)
    return Judgement(Verdict.CLOSE, terminal=closed.terminal, closed=closed, warning=warning)
