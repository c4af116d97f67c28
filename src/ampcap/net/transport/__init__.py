"""How bytes move between agents: the connection driver over a trio stream
(``stream.py``), the TCP/TLS listener, TLS contexts, ``amp://`` URLs, the
edge's clocks and shared buffer budgets, dialing a URL (``dial.py``), and the
RFC 002 HTTP and WebSocket bindings (``http_server.py``, ``http_client.py``,
``httppool.py``, ``wsmessages.py``, ``sink.py``).

A new transport goes here. Nothing here knows the daemon: the modules that
hand it a connection (dialing, the HTTP server) see it through a port of
:mod:`ampcap.net.daemon.ports`.
"""
