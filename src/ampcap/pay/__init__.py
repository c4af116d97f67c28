"""RFC 007 payments on the CAP path (ruling R26), sans-I/O.

- :mod:`.money`: §4.2 amounts, assets and networks (never floats);
- :mod:`.bodies`: the §5.11 request bodies read from CAP_INVOKE params, the
  §5.1 dispatch guard, response bases;
- :mod:`.lifecycle`: the §7 state machine as a table;
- :mod:`.settlement`: §6 settlement proofs, the adapter protocol;
- :mod:`.ledger`: the local ledger adapter (balances in the store);
- :mod:`.state`: the payment record, plans, the store's protocol;
- :mod:`.payee`: the payee's engine (§5.9 idempotency, §8 mapping);
- :mod:`.payer`: the payer's bodies and checks (quote terms and expiry, settlement proofs);
- :mod:`.workflow`: ``org.agentries.payment.workflow:1.0.0`` and its schemas;
- :mod:`.codes`: the §8 codes and the three decisions (A.21).

Nothing here reads a clock, a file or the network: time is ``now_ms``,
state is an injected :class:`~.state.PaymentState` (``ampcap.store.payments``).
"""
