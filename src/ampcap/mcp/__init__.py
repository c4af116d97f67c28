"""MCP (the Model Context Protocol), the one home of ampcap's MCP code.

- :mod:`ampcap.mcp.sdk`: the official SDK imported lazily (``pip install
  'ampcap[mcp]'``), and the conversions every MCP user of ampcap shares: a
  tool result as JSON (ruling R17), a tool error's code, tool schemas.
- :mod:`ampcap.mcp.client`: the client side. One session per MCP server
  (a stdio command or a streamable HTTP URL) carrying every call, started
  once, restarted with backoff when it dies, calls cancelled with
  ``notifications/cancelled``, progress passed on.

Neither imports :mod:`ampcap.net`: the bindings (:mod:`ampcap.bindings`)
and the gateway build on them.
"""
