"""Bodies of the replies an executor sends: provisional (RFC 006 §6) and
terminal (RFC 004 §7.1 CAP_RESULT), plus the request bodies it reads.

Kept apart from the executor so that the executor reads as control flow and
this file as the wire shapes. Everything here is a pure function.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from ..errors import AmpError
from ..schema.invoke import identity_violation
from .order import NEWEST_FIRST, ORDERS
from .semver import Range, Version
from ..wire.cbor import plain_integers
from ..wire.registry import error_info

__all__ = [
    "NegotiateHints",
    "InvokeRequest",
    "QueryRequest",
    "parse_invoke_body",
    "parse_query_body",
    "result_success",
    "result_error",
    "progress_body",
    "processing_body",
    "clamp_pct",
    "SHAPE",
    "BAD_REQUEST",
    "Resolved",
    "QueryPage",
]

SHAPE = 1001  # CBOR/CDDL shape or type failure (R6)
BAD_REQUEST = 4001  # well-formed body whose fields conflict (R6)
_ORDER_NAMES = " or ".join(f'"{o}"' for o in ORDERS)


def _shape(path: str, expected: str) -> AmpError:
    return AmpError(SHAPE, f"expected {expected}", path=f"body.{path}")


def _get(body: Mapping[str, Any], key: str, kind: type | tuple[type, ...], expected: str) -> Any:
    value = body.get(key)
    # bool is an int subclass; it is never a legal value where we ask for int.
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool) and kind is int):
        raise _shape(key, expected)
    if key in body and value is None:
        raise _shape(key, expected)  # CBOR null where a value is required
    return value


def _version(text: str, path: str) -> Version:
    try:
        return Version.parse(text)
    except AmpError as exc:
        raise AmpError(BAD_REQUEST, exc.message, path=f"body.{path}") from None


def _range(text: str, path: str) -> Range:
    try:
        return Range.parse(text)
    except AmpError as exc:
        raise AmpError(BAD_REQUEST, exc.message, path=f"body.{path}") from None


class NegotiateHints(msgspec.Struct, frozen=True, kw_only=True):
    """RFC 004 §6.4 ``cap-negotiate-hints``, parsed."""

    preferred: Version | None = None
    acceptable: tuple[Version, ...] = ()
    range: Range | None = None


class InvokeRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A CAP_INVOKE body that passed step 1 (shape and identity form)."""

    capability_id: str | None
    """The ``id`` field when the by-id form was used."""
    name: str
    """Requested name as sent: ``capability``, else legacy ``type``, else the name in ``id``."""
    legacy_type: bool
    version: Version | None
    negotiate: NegotiateHints | None
    params: Any
    timeout_ms: int | None
    session: Mapping[str, Any] | None
    has_delegation: bool


def _session(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    # RFC 004 §9: a malformed session extension is a shape error (1001);
    # a well-formed one changes nothing here (A.20) and is echoed in CAP_RESULT.
    if "session" not in body:
        return None
    session = body["session"]
    if not isinstance(session, dict):
        raise _shape("session", "a map")
    sid = session.get("session_id")
    if not isinstance(sid, bytes) or len(sid) != 16:
        raise _shape("session.session_id", "a 16-byte byte string")
    if "session_scope" in session and session["session_scope"] is not True:
        raise _shape("session.session_scope", "true")
    return session


def _hints(raw: Any) -> NegotiateHints:
    if not isinstance(raw, dict):
        raise _shape("negotiate", "a map")
    preferred = _get(raw, "preferred", str, "a semver string")
    acceptable_raw = _get(raw, "acceptable", list, "an array of semver strings")
    rng = _get(raw, "range", str, "a semver range string")
    acceptable = []
    for i, item in enumerate(acceptable_raw or ()):
        if not isinstance(item, str):
            raise _shape(f"negotiate.acceptable[{i}]", "a semver string")
        acceptable.append(_version(item, f"negotiate.acceptable[{i}]"))
    return NegotiateHints(
        preferred=_version(preferred, "negotiate.preferred") if preferred is not None else None,
        acceptable=tuple(acceptable),
        range=_range(rng, "negotiate.range") if rng is not None else None,
    )


def parse_invoke_body(body: Any) -> InvokeRequest:
    """RFC 004 §7.2 step 1. Shape/type faults → 1001; a well-formed body
    whose identity fields conflict or are missing → 4001 (ruling R6, A.8, A.16)."""
    if not isinstance(body, dict):
        raise AmpError(SHAPE, "CAP_INVOKE body must be a map", path="body")
    if "params" not in body:
        raise AmpError(SHAPE, "missing required field 'params'", path="body.params")
    ident = _get(body, "id", str, "a capability id string")
    capability = _get(body, "capability", str, "a capability name string")
    legacy = _get(body, "type", str, "a string")
    version_text = _get(body, "version", str, "a semver string")
    timeout_ms = _get(body, "timeout_ms", int, "an unsigned integer")
    if timeout_ms is not None and timeout_ms < 0:
        raise _shape("timeout_ms", "an unsigned integer")
    hints = _hints(body["negotiate"]) if "negotiate" in body else None
    session = _session(body)

    # The identity-form rules (R6) are shared with the schema layer.
    problem = identity_violation(body)
    if problem is not None:
        where = f"body.{problem.path}" if problem.path else "body"
        raise AmpError(BAD_REQUEST, f"expected {problem.expected}, found {problem.found}", path=where)
    version = _version(version_text, "version") if version_text is not None else None
    params = plain_integers(body["params"])
    if ident is not None:
        name, _, id_version = ident.partition(":")
        return InvokeRequest(capability_id=ident, name=name, legacy_type=False, version=_version(id_version, "id"),
                             negotiate=None, params=params, timeout_ms=timeout_ms,
                             session=session, has_delegation="delegation" in body)
    return InvokeRequest(capability_id=None, name=capability if capability is not None else legacy,
                         legacy_type=capability is None, version=version, negotiate=hints,
                         params=params, timeout_ms=timeout_ms, session=session,
                         has_delegation="delegation" in body)


# ampcap extension (docs/mcp-gateway.md): a CAP_QUERY whose filter names the
# capability "*" lists every capability the caller may see, by name then
# version, paged like any listing. RFC 004 §6.1 always names one capability,
# so a tool that mirrors a whole peer (the MCP gateway) had no way to ask;
# "*" is no capability name (names are dotted identifiers), so a peer
# without the extension answers 4002 and nothing else changes meaning. It is
# asked and answered only between peers that announced ampcap.list-all in
# HELLO (R22, peer/listing.py).
EVERY_CAPABILITY = "*"


class QueryRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A CAP_QUERY body that passed the shape checks (RFC 004 §6.1, §6.4)."""

    filter: Mapping[str, Any]
    name: str  # ``capability``, which wins over legacy ``type`` (§6.1)
    legacy_type: bool
    version_range: Range | None
    limit: int | None
    cursor: str | None
    order: str  # absent → "newest-first" (§6.5)

    @property
    def lists_every_name(self) -> bool:
        """The ampcap ``"*"`` extension: every name, not one."""
        return self.name == EVERY_CAPABILITY and not self.legacy_type


def parse_query_body(body: Any) -> QueryRequest:
    if not isinstance(body, dict):
        raise AmpError(SHAPE, "CAP_QUERY body must be a map", path="body")
    if "delegation" in body:
        # RFC 005 §5.3 / RFC 001 §4.6: delegation belongs only on CAP_INVOKE (A.18).
        raise AmpError(BAD_REQUEST, "'delegation' is only allowed on CAP_INVOKE", path="body.delegation")
    flt = body.get("filter")
    if not isinstance(flt, dict):
        raise _shape("filter", "a map")
    capability = _get(flt, "capability", str, "a capability name string")
    legacy = _get(flt, "type", str, "a string")
    rng = _get(flt, "version", str, "a semver range string")
    if capability is None and legacy is None:
        raise AmpError(SHAPE, "filter needs 'capability' or 'type'", path="body.filter")
    limit = _get(body, "limit", int, "an unsigned integer")
    if limit is not None and limit < 0:
        raise _shape("limit", "an unsigned integer")
    cursor = _get(body, "cursor", str, "a string")
    order = _get(body, "order", str, _ORDER_NAMES)
    if order is not None and order not in ORDERS:
        raise _shape("order", _ORDER_NAMES)
    return QueryRequest(filter=flt, name=capability if capability is not None else legacy,
                        legacy_type=capability is None,
                        version_range=_range(rng, "filter.version") if rng is not None else None,
                        limit=limit, cursor=cursor, order=order or NEWEST_FIRST)


# ------------------------------------------------------------ reply bodies


def result_success(result: Any, session: Mapping[str, Any] | None = None) -> dict[str, Any]:
    # Keys in RFC 8949 order already, so encoding needs no sorting pass.
    body: dict[str, Any] = {"result": result, "status": "success"}
    if session is not None:
        body["session"] = dict(session)
    return body


def result_error(error: AmpError, session: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``cap-result-error``: code, registry name, message, details when any."""
    err: dict[str, Any] = {"code": error.code, "name": error_info(error.code).name}
    details = error.details if error.details is not None else ({"path": error.path} if error.path else None)
    if details is not None:
        err["details"] = details
    err["message"] = error.message
    body: dict[str, Any] = {"error": err, "status": "error"}
    if session is not None:
        body["session"] = dict(session)
    return body


def clamp_pct(pct: float | int) -> int | None:
    """RFC 006 §6.2 ``progress_pct`` is a uint in 0..100. Bindings report
    floats and sometimes overshoot; round and clamp rather than fail the
    job. Non-numbers and NaN give ``None`` (the update is dropped)."""
    if isinstance(pct, bool) or not isinstance(pct, (int, float)):
        return None
    if isinstance(pct, float) and not math.isfinite(pct):
        return None if math.isnan(pct) else (100 if pct > 0 else 0)
    return int(min(100, max(0, round(pct))))


def progress_body(pct: int, text: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"progress_pct": pct}
    if text:
        body["status_text"] = text
    return body


def processing_body(text: str | None = None, eta_ms: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if text:
        body["status_text"] = text
    if eta_ms is not None and eta_ms >= 0:
        body["eta_ms"] = int(eta_ms)
    return body


# What a capability lookup answers the executor (the catalog builds them; the
# executor's protocols name them). Kept here, below both, so that caps never
# imports peer.


class Resolved(msgspec.Struct, frozen=True, kw_only=True):
    """Outcome of step 6: the descriptor that will run, with params adapted
    to it (a ``bridge`` policy may rewrite them), and the binding handle."""

    descriptor: Any  # caps.descriptor.Descriptor (``.id``, ``.to_wire()``)
    params: Any
    binding: Any = None
    # A bridge's second half: maps the served version's result back to the
    # requested version's shape (None: the result goes out as it is).
    adapt_result: Callable[[Any], Any] | None = None


class QueryPage(msgspec.Struct, frozen=True, kw_only=True):
    descriptors: tuple[Any, ...]  # caps.descriptor.Descriptor
    next_cursor: str | None = None  # R7 extension; None on the last page
