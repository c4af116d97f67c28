"""The trio edge of ampcap, one folder per concept.

* :mod:`ampcap.net.transport`: how bytes move (the connection driver, the
  TCP/TLS listener, TLS, URLs, clocks, dialing, HTTP and WebSocket);
* :mod:`ampcap.net.daemon`: the daemon core (``core.py``), its dispatch,
  and the narrow ports (``ports.py``) it hands what it composes;
* :mod:`ampcap.net.features`: what the daemon composes (relay joining,
  delegation answers, session routing, the live tap), each given a port,
  never the daemon;
* :mod:`ampcap.net.api`: the Python API (``Peer``, ``Remote``,
  ``connect``), which :mod:`ampcap` re-exports.

docs/architecture.md says what goes where.
"""
