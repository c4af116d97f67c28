"""What the daemon composes: one role or message family per module, each
handed a narrow port of :mod:`ampcap.net.daemon.ports` (or a few callables),
never the ``Daemon``: joining a forwarding relay like the Rust example's
(``forwarding_relay.py``), DELEG_* answers and the revocation refresher (``delegation.py``), RFC 006 session routing and
our session-control requests (``session_routing.py``,
``session_controls.py``), and the dump's live tap (``tap.py``).

A new feature goes here; the core builds it and its dispatch routes to it.
"""
