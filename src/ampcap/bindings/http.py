"""An HTTP binding: a capability served by one HTTP request (R17), with
httpx (imported when the first such binding runs).

The request: ``url`` with its ``{field}`` placeholders percent-encoded and
``${NAME}`` read from the daemon's environment; ``headers`` likewise; the
body is ``body_template`` filled in its parsed tree (so no param can change
the document's structure), or the params themselves as JSON for POST, PUT
and PATCH without a template. The answer: a 2xx JSON response is the result
(renamed by ``output_mapping``); any other status is 5001, or the code
``error_mapping`` gives it.

What R17 needs to know is *when* a request failed: before anything reached
the server (the connection refused, the name unresolved, the connect timed
out: :class:`~ampcap.caps.binding.other_protocols.NotRun`, the next binding may run), or
after (a dropped connection mid-response, an error status, the timeout:
the answer). Messages never carry an expanded URL or header: secrets stay
out of errors and logs; the host named is the one the manifest wrote.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import Mapping
from typing import Any

from ..caps.binding.context import InvocationContext
from ..caps.binding.other_protocols import HttpBinding, NotRun, expand_env, fill_template, fill_url, map_fields
from ..decoders import json_loads
from ..errors import AmpError

__all__ = ["HttpRunner", "MAX_RESPONSE_BYTES", "quiet_http_libraries"]

log = logging.getLogger("ampcap.bindings")

INTERNAL = 5001
UNAVAILABLE = 5002
MAX_RESPONSE_BYTES = 4 << 20
CONNECT_TIMEOUT_S = 10.0
_BODY_METHODS = ("POST", "PUT", "PATCH")


def quiet_http_libraries() -> None:
    """httpx logs every request with its full URL at INFO, which may hold a
    ${NAME} secret's value (a key in the query): its loggers (and its
    transport's, which name headers at DEBUG) say only warnings."""
    for name in ("httpx", "httpcore", "httpx2", "httpcore2"):
        logging.getLogger(name).setLevel(logging.WARNING)


class HttpRunner:
    """One connection pool for every HTTP binding of the daemon."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        import httpx

        self._environ = environ
        quiet_http_libraries()
        # No overall timeout of ours here: the binding's timeout_ms bounds
        # the whole call (and cancelling aborts the request); only the
        # connect is bounded, so a dead host is "not reached" in time.
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT_S),
                                         follow_redirects=False, trust_env=False)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def run(self, binding: HttpBinding, params: Any, context: InvocationContext) -> Any:
        import httpx

        host = urllib.parse.urlsplit(binding.url).netloc  # as written: never an expanded secret
        url = expand_env(fill_url(binding.url, params), self._environ, what=f"the url of {host}")
        headers = {name: expand_env(value, self._environ, what=f"header {name}") for name, value in binding.headers}
        content: bytes | None = None
        document: Any = None
        if binding.body_template is not None:
            document = fill_template(binding.body_template, params)
        elif binding.method in _BODY_METHODS:
            document = params if params is not None else {}
        if binding.body_template is not None or binding.method in _BODY_METHODS:
            try:
                content = json.dumps(document, ensure_ascii=False, allow_nan=False).encode("utf-8")
            except (TypeError, ValueError):
                raise AmpError(INTERNAL, "params cannot be sent as JSON") from None
            if not any(k.lower() == "content-type" for k in headers):
                headers["Content-Type"] = "application/json"
        headers.setdefault("Accept", "application/json")
        headers.setdefault("Accept-Encoding", "gzip, deflate")  # what _decode reads, bounded
        body = bytearray()
        try:
            async with self._client.stream(binding.method, url, content=content, headers=headers) as response:
                status = response.status_code
                async for chunk in response.aiter_raw():
                    body.extend(chunk)
                    if len(body) > MAX_RESPONSE_BYTES:
                        raise AmpError(INTERNAL, f"the response from {host} is larger than {MAX_RESPONSE_BYTES} bytes")
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            # Nothing reached the server: the next binding may run.
            log.debug("http binding %s %s: not reached: %s", binding.method, host, type(exc).__name__)
            raise NotRun(UNAVAILABLE, f"cannot connect to {host}") from None
        except httpx.UnsupportedProtocol:
            raise NotRun(UNAVAILABLE, f"cannot connect to {host}: unsupported URL") from None
        except httpx.HTTPError as exc:
            # Sent, then the connection failed (dropped mid-response, a
            # protocol error): it may have run, so this is the answer.
            log.info("http binding %s %s failed after sending: %s", binding.method, host, type(exc).__name__)
            raise AmpError(INTERNAL, f"the connection to {host} failed before the response was complete") from None
        if not 200 <= status < 300:
            code = binding.error_mapping.get(status, INTERNAL)
            log.debug("http binding %s %s: status %d -> %d", binding.method, host, status, code)
            raise AmpError(code, f"{host} answered HTTP {status}", details={"http_status": status})
        encoding = response.headers.get("content-encoding", "identity").lower()
        data = bytes(body)
        if encoding not in ("identity", ""):
            data = _decode(data, encoding, host)
        if not data.strip():
            return None  # 204 No Content and the like: a result of null
        try:
            result = json_loads(data)
        except (ValueError, UnicodeDecodeError):
            raise AmpError(INTERNAL, f"the response from {host} is not JSON") from None
        return map_fields(result, binding.output_mapping)


def _decode(data: bytes, encoding: str, host: str) -> bytes:
    """A compressed response, bounded after decompression too."""
    import zlib

    if encoding not in ("gzip", "deflate"):
        raise AmpError(INTERNAL, f"the response from {host} uses content-encoding {encoding!r}")
    decoder = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
    try:
        out = decoder.decompress(data, MAX_RESPONSE_BYTES + 1)
    except zlib.error:
        raise AmpError(INTERNAL, f"the response from {host} is not valid {encoding}") from None
    if len(out) > MAX_RESPONSE_BYTES:
        raise AmpError(INTERNAL, f"the response from {host} is larger than {MAX_RESPONSE_BYTES} bytes")
    return out
