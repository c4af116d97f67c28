"""CDDL schemas for every frame ampcap sends or receives.

The schema text lives in ``cddl/`` (our transcription of the RFCs, one file
per RFC plus ``ampcap.cddl`` for helper rules). :func:`load_schemas` parses
it with cddlparser and compiles it once (:mod:`.engine`) into validator
nodes (:mod:`.nodes`); validating a value walks those nodes, never the
syntax tree. Values are what :func:`ampcap.wire.cbor.loads` returns.

Findings are :class:`~.violations.Violation` objects with a ``path``
relative to the value (``capabilities[0].input_schema.hash``), ``expected``,
``found``, ``kind`` (``"error"`` or ``"extension-key"``) and the AMP
``code`` a receiver answers with: 1001 for shape and type faults, 4001 for
the identity-form conflicts of a CAP_INVOKE (ruling R6, :mod:`.invoke`).
Extension keys are never errors: RFC 004 §10 lets a receiver ignore fields
it does not know, while ``ampcap dump`` and ``ampcap interop`` show them.

Wiring: :class:`ampcap.wire.receive.ReceivePipeline` takes
``schemas=load_schemas()`` and rejects a message whose body has errors;
``ampcap dump`` prints the verdict of :meth:`Schemas.validate_body` and of
:meth:`Schemas.validate_envelope`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..wire.registry import MessageType
from .invoke import identity_violation
from .nodes import TypeNode
from .violations import EXTENSION_KEY, SchemaError, Violation

if TYPE_CHECKING:
    from .engine import CompiledRules

__all__ = ["BODY_RULES", "Schemas", "SchemaError", "Violation", "load_schemas", "schema_sources"]

T = MessageType

# Type code → the rule its body must match. Types missing here (CONTACT_*,
# MESSAGE/REQUEST/RESPONSE, PRESENCE_*, EXTENSION) have no body schema in the
# RFCs we implement: their bodies are not checked.
BODY_RULES: dict[int, str] = {
    T.PING: "ping-body",
    T.PONG: "pong-body",
    T.ACK: "ack-body",
    T.PROC_OK: "proc-ok-body",
    T.PROC_FAIL: "proc-fail-body",
    T.PROCESSING: "processing-body",
    T.PROGRESS: "progress-body",
    T.INPUT_REQUIRED: "input-required-body",
    T.ERROR: "error-body",
    T.STREAM_START: "stream-start-body",
    T.STREAM_DATA: "stream-data-body",
    T.STREAM_END: "stream-end-body",
    T.BATCH: "batch-body",
    T.CAP_QUERY: "cap-query-body",
    T.CAP_DECLARE: "cap-declare-body",
    T.CAP_INVOKE: "cap-invoke-body",
    T.CAP_RESULT: "cap-result-body",
    T.DOC_SEND: "doc-send-body",
    T.DOC_REQUEST: "doc-request-body",
    T.CRED_ISSUE: "cred-issue-body",
    T.CRED_REQUEST: "cred-request-body",
    T.CRED_PRESENT: "cred-present-body",
    T.CRED_VERIFY: "cred-verify-body",
    T.DELEG_GRANT: "deleg-grant-body",
    T.DELEG_REVOKE: "deleg-revoke-body",
    T.DELEG_QUERY: "deleg-query-body",
    T.HELLO: "hello-body",
    T.HELLO_ACK: "hello-ack-body",
    T.HELLO_REJECT: "hello-reject-body",
}
BODY_RULES = {int(k): v for k, v in BODY_RULES.items()}

# CAP_INVOKE is checked in two steps (ruling R6): this lenient rule (every
# identity field optional) decides shape, then schema/invoke.py the identity form.
_INVOKE_SHAPE_RULE = "cap-invoke-any-form"
_INVOKE = int(T.CAP_INVOKE)

SCHEMA_FILES = ("rfc001.cddl", "rfc002.cddl", "rfc004.cddl", "rfc005.cddl", "rfc006.cddl", "ampcap.cddl")


def schema_sources() -> list[tuple[str, str]]:
    """``(file name, text)`` of the packaged schema files, in load order."""
    folder = Path(__file__).with_name("cddl")
    try:
        # A package on disk (installed or checked out): read the files
        # directly. importlib.resources (and the zipfile module it brings)
        # costs a one-shot command about 3 ms.
        return [(name, (folder / name).read_text(encoding="utf-8")) for name in SCHEMA_FILES]
    except OSError:  # not plain files: a zipped package
        pass
    from importlib import resources

    packaged = resources.files(__package__).joinpath("cddl")
    return [(name, packaged.joinpath(name).read_text(encoding="utf-8")) for name in SCHEMA_FILES]


class Schemas:
    """A compiled rule set and the type-code table."""

    def __init__(self, rules: CompiledRules, body_rules: Mapping[int, str] = BODY_RULES) -> None:
        self.rules = rules
        missing = sorted(set(body_rules.values()) - set(rules.types))
        if missing:
            raise SchemaError("<body table>", None, f"no rule named {', '.join(missing)}")
        self.body_rules = dict(body_rules)
        self._body_nodes: dict[int, TypeNode] = {typ: rules.types[name] for typ, name in body_rules.items()}
        self._invoke_shape = rules.types.get(_INVOKE_SHAPE_RULE)

    @classmethod
    def from_sources(cls, sources: Iterable[tuple[str, str]]) -> Schemas:
        # The compiler (and cddlparser) load only when schemas are compiled:
        # importing this package for schema.invoke stays cheap.
        from .engine import compile_sources

        return cls(compile_sources(sources))

    def rule_names(self) -> list[str]:
        return sorted(self.rules.types)

    def node(self, rule: str) -> TypeNode:
        try:
            return self.rules.types[rule]
        except KeyError:
            raise KeyError(f"no CDDL rule named {rule!r}") from None

    def validate(self, rule: str, value: Any) -> list[Violation]:
        """Every finding for ``value`` against ``rule`` (empty: valid, clean)."""
        node = self.node(rule)
        if node.check(value):
            return []
        found: list[Violation] = []
        node.explain(value, "", found)
        return found

    def is_valid(self, rule: str, value: Any) -> bool:
        """True when ``value`` matches ``rule`` (extension keys allowed)."""
        return not any(v.kind != EXTENSION_KEY for v in self.validate(rule, value))

    def validate_body(self, typ: int, body: Any) -> list[Violation]:
        """Findings for a message body by its type code; [] for types
        without a body rule."""
        if typ == _INVOKE and self._invoke_shape is not None:
            return self._validate_invoke(body)
        node = self._body_nodes.get(typ)
        if node is None or node.check(body):
            return []
        found: list[Violation] = []
        node.explain(body, "", found)
        return found

    def _validate_invoke(self, body: Any) -> list[Violation]:
        assert self._invoke_shape is not None
        strict = self._body_nodes[_INVOKE]
        if strict.check(body):
            # Clean under the RFC rule; the identity rules still apply (an
            # open by-id map may carry a conflicting "version").
            problem = identity_violation(body)
            return [problem] if problem is not None else []
        found: list[Violation] = []
        self._invoke_shape.explain(body, "", found)
        if any(v.kind != EXTENSION_KEY for v in found):
            return found  # a shape fault: 1001
        problem = identity_violation(body)
        if problem is not None:
            return [*found, problem]
        # Well-formed under the lenient rule and no identity conflict: report
        # what the RFC rule itself says (extension keys, at most).
        strict_found: list[Violation] = []
        strict.explain(body, "", strict_found)
        return strict_found

    def validate_envelope(self, value: Any) -> list[Violation]:
        """Findings for a decoded envelope map (``amp-message``)."""
        return self.validate("amp-message", value)


@functools.lru_cache(maxsize=1)
def load_schemas() -> Schemas:
    """The packaged schemas, compiled once per process."""
    return Schemas.from_sources(schema_sources())
