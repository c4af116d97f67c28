"""RFC 004 §7.3, the executor side: one invocation's states, as a table.

:data:`TRANSITIONS` maps ``(InvokeState, InvokeInput)`` to the next state;
:func:`advance` looks a pair up, and a pair missing from the table is a bug
in the executor (:class:`~ampcap.errors.LocalProtocolError`, 5001), never
something a peer can cause. The executor (``peer/executor.py``, which
re-exports these names) walks every invoke through it: received, validated
(the §7.2 steps), then rejected with one ERROR, or executing until its one
CAP_RESULT.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import LocalProtocolError
from .state import TableEnum

__all__ = ["InvokeState", "InvokeInput", "TRANSITIONS", "advance"]

INTERNAL_ERROR = 5001


class InvokeState(TableEnum):
    RECEIVED = "received"
    VALIDATING = "validating"
    REJECTED = "rejected"
    EXECUTING = "executing"
    DONE = "done"


class InvokeInput(TableEnum):
    VALIDATE = "validate"
    REJECT = "reject"  # a §7.2 step failed → ERROR
    ACCEPT = "accept"  # all steps passed → Execute
    PROVISIONAL = "provisional"  # PROCESSING / PROGRESS sent
    FINISH = "finish"  # CAP_RESULT sent: completion, timeout or shutdown


# RFC 004 §7.3, executor side. A pair missing here is a bug in the executor.
TRANSITIONS: Mapping[tuple[InvokeState, InvokeInput], InvokeState] = {
    (InvokeState.RECEIVED, InvokeInput.VALIDATE): InvokeState.VALIDATING,
    (InvokeState.VALIDATING, InvokeInput.REJECT): InvokeState.REJECTED,
    (InvokeState.VALIDATING, InvokeInput.ACCEPT): InvokeState.EXECUTING,
    (InvokeState.EXECUTING, InvokeInput.PROVISIONAL): InvokeState.EXECUTING,
    (InvokeState.EXECUTING, InvokeInput.FINISH): InvokeState.DONE,
}


def advance(state: InvokeState, event: InvokeInput) -> InvokeState:
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise LocalProtocolError(INTERNAL_ERROR, f"invocation cannot {event.value} in state {state.value}") from None
