"""An MCP binding: a capability served by a tool of an MCP server (R17).

Params are renamed by ``mapping`` and sent as the tool's arguments over the
server's one session (:mod:`ampcap.mcp.client`); the result is the tool's
``structuredContent``, else its text as a JSON object, else ``{"text":
…}`` (:func:`ampcap.mcp.sdk.tool_result_json`), renamed by
``output_mapping``. ``isError`` or a JSON-RPC error is 5001, or the code
``error_mapping`` gives the tool error's code. MCP progress becomes AMP
PROGRESS (as a percentage when the server gives a total; without one, as
PROCESSING), and an elicitation from the server becomes INPUT_REQUIRED to
the caller, whose answer goes back (mcp/elicitation.py).
"""

from __future__ import annotations

from typing import Any

from ..caps.binding.context import InvocationContext
from ..caps.binding.other_protocols import McpBinding, map_fields
from ..display import shown
from ..errors import AmpError
from ..mcp.client import McpClients
from ..mcp.sdk import tool_error, tool_result_json

__all__ = ["run_mcp"]

INTERNAL = 5001


async def run_mcp(clients: McpClients, binding: McpBinding, params: Any, context: InvocationContext) -> Any:
    from mcp.shared.exceptions import MCPError

    arguments = map_fields(params if params is not None else {}, binding.mapping)
    if not isinstance(arguments, dict):
        raise AmpError(INTERNAL, "an MCP tool takes an object of arguments; these params are not one")

    async def progress(done: float, total: float | None, message: str | None) -> None:
        # Without a total there is no percentage: the caller hears that work
        # goes on (PROCESSING, with the server's message or the count).
        percent = done * 100 / total if total else None
        await context.progress(percent, message if message or percent is not None else f"{done:g} done")

    async def ask(prompt: str, options: list[str] | None) -> str:
        return await context.ask(prompt, options=options)  # INPUT_REQUIRED to the AMP caller

    client = clients.get(binding.server)
    try:
        result = await client.call_tool(binding.tool, arguments, progress, ask)
    except MCPError as exc:
        code = binding.error_mapping.get(str(exc.code), INTERNAL)
        raise AmpError(code, f"MCP error {exc.code} from {binding.server.name}/{binding.tool}: "
                             f"{shown(exc.error.message)}") from None
    if result.is_error:
        failure = tool_error(result)
        code = binding.error_mapping.get(failure.code or "", INTERNAL)
        # The tool's own text, once: the caller knows which tool it called.
        raise AmpError(code, shown(failure.text) if failure.text else f"tool {binding.tool} failed")
    return map_fields(tool_result_json(result), binding.output_mapping)
