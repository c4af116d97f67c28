"""``ampcap interop``: scenario vectors driven against another implementation."""
