"""MCP elicitation and AMP INPUT_REQUIRED, mapped both ways (no I/O, no SDK).

AMP's question (RFC 006 §6.3) is a prompt, optional options, and a text
answer; MCP's ``elicitation/create`` (form mode) is a message and a flat
object schema of primitive fields, answered accept (with content), decline
or cancel.

* A bound MCP server asks (:func:`question_for`, :func:`content_for`): one
  field is asked as itself (its ``enum``, or ``true``/``false`` for a
  boolean, become the options) and the answer is converted to the field's
  type; several fields are asked for as one JSON object. An answer that does
  not fit is a decline; the caller declining is a decline; no answer in
  time is a cancel.
* The gateway asks an MCP host (:func:`schema_for`, :func:`answer_from`):
  one text field, ``answer``, whose ``enum`` is the options.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["Question", "question_for", "content_for", "schema_for", "answer_from", "ANSWER_FIELD"]

ANSWER_FIELD = "answer"
_MAX_PROMPT = 4000


class Question:
    """What to ask the AMP caller, and how its answer becomes MCP content."""

    __slots__ = ("prompt", "options", "field", "kind")

    def __init__(self, prompt: str, options: list[str] | None, field: str | None, kind: str | None) -> None:
        self.prompt, self.options, self.field, self.kind = prompt, options, field, kind


def question_for(message: str, schema: Any) -> Question:
    """The INPUT_REQUIRED for an MCP server's elicitation (form mode)."""
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    prompt = message[:_MAX_PROMPT]
    if isinstance(properties, Mapping) and len(properties) == 1:
        ((field, spec),) = properties.items()
        spec = spec if isinstance(spec, Mapping) else {}
        kind = spec.get("type") if isinstance(spec.get("type"), str) else "string"
        options = None
        if isinstance(spec.get("enum"), list) and all(isinstance(o, str) for o in spec["enum"]):
            options = list(spec["enum"])
        elif kind == "boolean":
            options = ["true", "false"]
        return Question(prompt, options, str(field), kind)
    names = ", ".join(str(k) for k in properties) if isinstance(properties, Mapping) else ""
    hint = f" (answer with a JSON object{': ' + names if names else ''})"
    return Question(prompt + hint, None, None, None)


def content_for(question: Question, answer: str) -> dict[str, Any] | None:
    """The MCP ``content`` for the caller's ``answer``; None when it does not fit."""
    if question.field is None:
        try:
            value = json.loads(answer)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
    text = answer.strip()
    converted: Any
    try:
        if question.kind == "integer":
            converted = int(text)
        elif question.kind == "number":
            converted = float(text)
        elif question.kind == "boolean":
            if text.lower() not in ("true", "false", "yes", "no"):
                return None
            converted = text.lower() in ("true", "yes")
        else:
            converted = answer
    except ValueError:
        return None
    return {question.field: converted}


def schema_for(options: tuple[str, ...] | list[str] | None) -> dict[str, Any]:
    """The form the gateway puts to an MCP host for an AMP question."""
    field: dict[str, Any] = {"type": "string"}
    if options:
        field["enum"] = list(options)
    return {"type": "object", "properties": {ANSWER_FIELD: field}, "required": [ANSWER_FIELD]}


def answer_from(action: str, content: Any) -> str | None:
    """The AMP answer in a host's elicitation result; None: declined."""
    if action != "accept" or not isinstance(content, Mapping):
        return None
    value = content.get(ANSWER_FIELD)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return None
