"""The daemon core: :class:`~ampcap.net.daemon.core.Daemon` (``core.py``)
composes the sans-I/O pieces over trio; ``dispatch.py`` routes every
inbound event; ``ports.py`` holds the narrow ``typing.Protocol``s it hands
the transports and features around it. Beside them: its settings
(``config.py``), one connection as it sees it (``link.py``), our own calls
(``calls.py``), its log lines (``actionlog.py``), and the serving half
built on first need (``serving.py``, ``jobs.py``, ``durable.py``).

Import the daemon from ``ampcap.net.daemon.core``: this package's
``__init__`` stays empty so that importing one part loads no other.
"""
