"""``org.agentries.payment.workflow:1.0.0`` (RFC 007 §5.10) as a capability
a manifest can declare: its identity and its JSON Schemas.

The schemas describe the §5.11 bodies (each op under ``$defs``), but the
top level only requires a map: RFC 004 step 7 answers 4004 for a schema
miss, while RFC 007 §8 assigns its own codes to the same faults (1001 for a
missing ``payment_id``, 1004 for ``pay_v`` 2, 4001 for ``"usd"``, 4105 for
an unknown op). So the payment core (:func:`.bodies.parse_request`) is the
validator that decides codes, and the schemas document the shapes. They
also cannot say "byte string": JSON Schema has no such type, and the CBOR
``bstr`` fields (``payment_id``, ``quote_id``, ``sig``) are annotated only.
"""

from __future__ import annotations

from typing import Any

from .bodies import REQUEST_OPS, RESPONSE_OPS

__all__ = ["WORKFLOW_NAME", "WORKFLOW_VERSION", "WORKFLOW_ID", "input_schema", "output_schema",
           "capability_table"]

WORKFLOW_NAME = "org.agentries.payment.workflow"
WORKFLOW_VERSION = "1.0.0"
WORKFLOW_ID = f"{WORKFLOW_NAME}:{WORKFLOW_VERSION}"

_BSTR16 = {"description": "CBOR byte string, 16 bytes"}
_MONEY = {
    "type": "object", "required": ["amount_minor", "asset", "network"],
    "properties": {"amount_minor": {"type": "integer", "minimum": 0, "description": "integer minor units"},
                   "asset": {"type": "string", "pattern": "^[A-Z0-9._-]{1,32}$"},
                   "network": {"type": "string", "pattern": "^[a-z0-9._-]{1,64}$"}},
}
_BASE = {"pay_v": {"const": 1}, "payment_id": _BSTR16,
         "session": {"type": "object", "properties": {"session_id": _BSTR16, "session_scope": {"const": True}}}}
_PROOF = {"type": "object", "required": ["payload", "adapter_id", "sig_alg", "sig"],
          "properties": {"adapter_id": {"type": "string"}, "sig_alg": {"const": "Ed25519"},
                         "sig": {"description": "CBOR byte string, 64 bytes"}}}


def _body(op: str, required: list[str], **fields: Any) -> dict[str, Any]:
    return {"type": "object", "required": ["pay_v", "op", "payment_id", *required],
            "properties": {**_BASE, "op": {"const": op}, **fields}}


_REQUESTS = {
    "quote_request": _body("quote_request", ["payee", "money"], payee={"type": "string"}, money=_MONEY,
                           service_ref={"type": "string"}),
    "authorize": _body("authorize", ["quote_id", "payer", "payee", "money"], quote_id=_BSTR16,
                       payer={"type": "string"}, payee={"type": "string"}, money=_MONEY),
    "capture": _body("capture", ["quote_id", "money"], quote_id=_BSTR16, money=_MONEY),
    "cancel": _body("cancel", [], reason={"type": "string"}),
    "refund": _body("refund", [], money=_MONEY, reason={"type": "string"}),
    "status_query": _body("status_query", []),
}
_STATUS = {"enum": ["quoted", "authorized", "captured", "settled", "failed", "canceled", "refund_pending",
                    "refunded"]}
_RESPONSES = {
    "quote": _body("quote", ["quote_id", "payee", "payer", "money", "quote_expires_at"], quote_id=_BSTR16,
                   payee={"type": "string"}, payer={"type": "string"}, money=_MONEY,
                   quote_expires_at={"type": "integer", "minimum": 0}),
    "authorize_result": _body("authorize_result", ["status"], status={"enum": ["authorized", "failed"]},
                              reason_code={"type": "integer"}, authorized_at={"type": "integer"}),
    "capture_result": _body("capture_result", ["status"], status={"enum": ["captured", "settled", "failed"]},
                            settlement=_PROOF, reason_code={"type": "integer"}),
    "cancel_result": _body("cancel_result", ["status"], status={"enum": ["canceled", "failed"]}),
    "refund_result": _body("refund_result", ["status"], status={"enum": ["refund_pending", "refunded", "failed"]},
                           settlement=_PROOF, reason_code={"type": "integer"}),
    "status": _body("status", ["status"], status=_STATUS, settlement=_PROOF, updated_at={"type": "integer"}),
}
assert tuple(_REQUESTS) == REQUEST_OPS and tuple(_RESPONSES) == RESPONSE_OPS


def input_schema() -> dict[str, Any]:
    """``app-cap-invoke-params``: one request body (shapes under ``$defs``)."""
    return {"$schema": "http://json-schema.org/draft-07/schema#", "title": "app-cap-invoke-params",
            "type": "object", "$defs": dict(_REQUESTS)}


def output_schema() -> dict[str, Any]:
    """``app-cap-result-success``: one response body (shapes under ``$defs``)."""
    return {"$schema": "http://json-schema.org/draft-07/schema#", "title": "app-cap-result-success",
            "type": "object", "$defs": dict(_RESPONSES)}


def capability_table(binding: dict[str, Any]) -> dict[str, Any]:
    """The ``[[capability]]`` table (TOML-shaped) that declares the workflow;
    the daemon (net/features/payments.py) runs :func:`.payee.handle` for it."""
    return {"name": WORKFLOW_NAME, "version": WORKFLOW_VERSION, "input_schema": input_schema(),
            "output_schema": output_schema(), "binding": binding, "idempotent": True,
            "notes": "RFC 007 payment workflow (CAP path): quote, authorize, capture, cancel, refund, status."}
