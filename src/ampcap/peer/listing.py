"""R22, both sides: who may ask for, and who answers, the ``"*"`` listing.

RFC 004 §6.1 always names one capability; ampcap's CAP_QUERY
``capability = "*"`` (every name the caller may see, paged as usual) is an
extension, :data:`~ampcap.wire.extensions.LISTING`, that counts only between
two peers that both announced it in HELLO (wire/extensions.py). So:

- the provider lists for ``"*"`` only on a link that agreed it (:func:`agrees`),
  and anywhere else answers it as the RFC answers any name it has no
  descriptor for (peer/query_answers.py);
- the caller never sends ``"*"`` to a peer that did not agree it, and says so
  instead (:func:`caller_refusal`).

A query that came through a relay (its sender is not the DID that proved
itself in the link's HELLO) has no HELLO of its own between the two ends:
nothing is agreed for it, whatever the relay announced. Sans-I/O, no state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..caps.bodies import EVERY_CAPABILITY
from ..errors import AmpError
from ..wire.extensions import LISTING

__all__ = ["CAPABILITY_NOT_FOUND", "NOT_OFFERED", "agrees", "caller_refusal"]

CAPABILITY_NOT_FOUND = 4002
NOT_OFFERED = ("the peer does not offer listing every capability ('*' is the ampcap extension "
               f"{LISTING}, which it did not announce in HELLO): name the capabilities to query")


def agrees(extensions: frozenset[str], peer_did: str | None, other_end: str | None) -> bool:
    """True when the link's agreed ``extensions`` include the listing and
    ``other_end`` (the query's sender, or the DID it is addressed to) is the
    peer that announced them, not someone behind a relay."""
    return LISTING in extensions and (other_end is None or other_end == peer_did)


def caller_refusal(flt: Mapping[str, Any], agreed: bool) -> AmpError | None:
    """The error a caller raises instead of sending a ``"*"`` query to a peer
    that did not agree the listing (``agreed``: :func:`agrees`), else None.
    4002 because it is the answer such a peer would give."""
    if flt.get("capability") != EVERY_CAPABILITY or agreed:
        return None
    return AmpError(CAPABILITY_NOT_FOUND, NOT_OFFERED)
