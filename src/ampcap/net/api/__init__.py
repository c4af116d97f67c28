"""The Python API, above the daemon core: ``peer.py`` (``Peer``, ``Server``,
``connect``; it re-exports the others' public names, and :mod:`ampcap`
re-exports the main ones), ``remote.py`` (``Remote``, the caller's handle on
one connection), ``local_capabilities.py`` (what ``@peer.capability``
declares) and ``sessions.py`` (``remote.session(...)``, RFC 006).
"""
