"""Who may call, and the one denial (ruling R10, vector A.9).

CAP_INVOKE (:mod:`.executor`) and CAP_QUERY (:mod:`.query_answers`) ask the
same questions of a caller before they reveal anything: is it allowed at
all, is it within its rate, and may it learn that a name does not exist. A
refused caller always gets the same 3001 body, with no detail and no path,
whether what it asked for exists or not.
"""

from __future__ import annotations

from ..errors import AmpError
from .policy import Policy

__all__ = ["DENIED", "CallerChecks", "denied"]

UNAUTHORIZED, RATE_LIMITED = 3001, 3005
CAPABILITY_NOT_FOUND = 4002

# One denial, always the same bytes: no detail, no path (R10, A.9).
DENIED = "not authorized"


def denied() -> AmpError:
    return AmpError(UNAUTHORIZED, DENIED)


class CallerChecks:
    """The daemon's caller checks: its :class:`Policy` and the one rate
    limiter invokes and queries share (a caller's queries count against the
    same budget as its invokes)."""

    __slots__ = ("policy", "rates")

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.rates = policy.new_rate_limiter()

    def check_caller(self, sender: str, now_ms: int) -> None:
        """3001 for a caller the policy refuses, else :meth:`check_rate`."""
        if not self.policy.caller_allowed(sender):
            raise denied()
        self.check_rate(sender, now_ms)

    def check_rate(self, sender: str, now_ms: int) -> None:
        if self.rates is not None and not self.rates.allow(sender, now_ms):
            raise AmpError(RATE_LIMITED, "rate limit exceeded; retry later")

    def as_seen_by(self, sender: str, err: AmpError) -> AmpError:
        """A lookup's error as ``sender`` may see it: 4002 (no such name) is
        3001 for a caller some capability rule refuses, so it cannot tell an
        alias that leads into a namespace closed to it from no alias (R10)."""
        if err.code == CAPABILITY_NOT_FOUND and self.policy.restricts(sender):
            return denied()
        return err
