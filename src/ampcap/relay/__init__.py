"""The RFC 003 relay, sans-I/O: queue records, ingress, delivery, commit and
federation as plain code over a :class:`~ampcap.relay.queue.RelayQueue`.

Modules: :mod:`.states` (the §6 machines as tables), :mod:`.model` (config,
queue rows, actions), :mod:`.queue` (what the store implements),
:mod:`.core` (:class:`RelayCore`: ingress §5.1, commit §5.5, polling §5.4,
pushes and expiry), :mod:`.custody` (§5.6 handoffs, both sides),
:mod:`.federation` (wrappers, receipts, loop rule, downstream selection),
:mod:`.delivery` (endpoint priority, backoff), :mod:`.replies` (the relay's
signed ERROR and ACK), :mod:`.routes` (the routes file), :mod:`.webhook`
(the RFC 002 §6.3 delivery, built and checked).

Design note for phase B (the ``ampcap relay`` process and the agent side)
---------------------------------------------------------------------------

The edge owns sockets, HTTP, the clock and the store; it drives one
:class:`RelayCore` per process (``owner`` unique per process, R25) and
performs the actions it returns, in order. Events in:

* AMPS/WSS session authenticated (HELLO) -> ``link_up(did, now)``; closed ->
  ``link_down(did)``. An HTTP bearer principal -> ``register(did, now)``.
* A message on AMPS/WSS or ``POST /amp/v1/messages`` -> ``submit(raw,
  principal=..., now=...)``. Its :class:`~.model.Reply` actions addressed to
  the submitter answer it (on AMPS/WSS as frames; on HTTP the ERROR's code
  picks the status via ``wire.httpmap.status_for_code``, the ERROR or relay
  ACK bytes are the body).
* ``GET /amp/v1/messages?cursor=&limit=`` -> ``poll(principal, cursor, limit,
  now).body`` (the §6.2 wrapper; a bad cursor is AmpError 1001 -> 400).
* ``POST /amp/v1/relay/forward`` / ``/commit`` -> ``receive_forward`` /
  ``receive_commit_report`` (body, principal): the returned bytes are the
  response body (status from its ``error_code``: 3001 -> 403, 2003 -> 429,
  1001/1004 -> 400, else 200).
* A push failed (link dropped mid-send, webhook not 2xx) ->
  ``delivery_failed(seq, recipient, now)``. A forward POST answered ->
  ``forward_answered(seq, recipient, body, now)``; failed ->
  ``forward_failed``.
* The timer: ``tick(now)`` at ``next_deadline(now)`` (and after any event).

Actions out: :class:`~.model.Deliver` (send ``raw`` on ``recipient``'s live
link, amps before wss (``delivery.order_endpoints``), else its webhook with
``webhook.build_webhook``; a ``seq`` of None is a TTL=0
message), :class:`~.model.Reply`, :class:`~.model.Forward` (POST
``wrapper`` to ``url``, bearer token for the downstream DID),
:class:`~.model.ReportCommit` (POST ``report`` to ``url``), and the audit
records :class:`~.model.Accepted`, :class:`~.model.Committed`,
:class:`~.model.Finalized`, :class:`~.model.Audit` (log lines; the RFC 002
§7.2/§7.3 audit tuples come from them).

Durability: every queue method is its own transaction, so when a method
returns, what its actions depend on is on disk (store contract rule 8);
the edge must not perform an action before the call returned. After a
crash the queue is the truth: claims whose lease ran out are taken again
(at-least-once), nothing in memory needs rebuilding except ``online``.

The agent side (``serve --relay URL``) needs no core here: it polls (or
holds a link), passes each message to its normal receive path, and sends
the recipient ACK (``ack_source = "recipient"``, ``reply_to`` = the id)
only once its journal holds the message.
"""

from __future__ import annotations

from .core import Ingress, RelayCore
from .model import (Accepted, Action, Audit, Committed, Deliver, Finalized, Forward, PollPage, Refusal, RelayConfig,
                    Reply, ReportCommit)
from .queue import RelayQueue
from .routes import RelayRoutes, parse_routes

__all__ = ["RelayCore", "Ingress", "RelayConfig", "RelayQueue", "RelayRoutes", "parse_routes", "Action", "Deliver",
           "Reply", "Forward", "ReportCommit", "Accepted", "Committed", "Finalized", "Audit", "Refusal", "PollPage"]
