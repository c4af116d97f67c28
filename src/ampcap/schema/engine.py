"""The CDDL compiler: cddlparser's syntax tree in, :mod:`.nodes` out.

It runs once, when a schema set loads; validation never walks the syntax
tree. Everything the engine does not implement is refused here, naming the
file, the line and the construct, so a schema can never be half-understood
and silently accept what it should refuse. cddlparser checks syntax only,
so duplicate rule names and undefined references are caught here too.

Supported: type choices ``/``, group choices ``//``, nested and optional
groups, occurrence (``?``, ``*``, ``+``, ``n*m``), maps with quoted,
bare-word and numeric keys, computed keys (``* tstr => any``), arrays,
literals (text, numbers, byte strings, ``true``/``false``/``null``), the
prelude types in :data:`.nodes.PRELUDE`, ranges, ``.size`` on ``tstr``,
``bstr`` and ``uint``, ``.default`` (ignored), tags ``#6.n(type)``, rule
references in any order, and recursive rules.
"""

from __future__ import annotations

import base64
import math
import re
from typing import Any, Iterable, Sequence

import cddlparser
import msgspec
from cddlparser import Marker, Tokens, ast

from . import nodes
from .group_nodes import Alternatives, ArrayType, Computed, MapType, Member
from .nodes import Choice, IntRange, Literal, Prim, Reference, Sized, Tagged, TypeNode
from .artifact import CompiledRules
from .violations import SchemaError

__all__ = ["compile_sources", "CompiledRules"]

INF = math.inf

# Control operators that have a meaning here. Every other one (.regexp,
# .bits, .cbor, .lt, ...) is refused rather than ignored.
_SIZE = "size"
_DEFAULT = "default"


class _LineMarker(Marker):
    """Serialises a tree with a numbered marker in front of every node, so
    the text position (hence the line) of each node can be recovered;
    cddlparser keeps no positions of its own."""

    def __init__(self) -> None:
        self.nodes: list[ast.CDDLNode] = []

    def markupFor(self, node: ast.CDDLNode) -> tuple[str | None, str | None]:
        self.nodes.append(node)
        return (f"\x00{len(self.nodes) - 1}\x01", None)


_MARK = re.compile(r"\x00(\d+)\x01")


def _node_lines(tree: ast.CDDLTree) -> dict[int, int]:
    marker = _LineMarker()
    text = tree.serialize(marker)
    lines: dict[int, int] = {}
    line, last = 1, 0
    for m in _MARK.finditer(text):
        line += text.count("\n", last, m.start())
        last = m.end()
        lines[id(marker.nodes[int(m.group(1))])] = line
    return lines


class _RuleDef(msgspec.Struct):
    name: str
    file: str
    rule: ast.Rule
    group: ast.Group | None  # set for group rules (``name = ( ... )``)


def compile_sources(sources: Iterable[tuple[str, str]]) -> CompiledRules:
    """Compile ``(file name, CDDL text)`` pairs as one rule set."""
    return _Compiler(list(sources)).run()


class _Compiler:
    def __init__(self, sources: Sequence[tuple[str, str]]) -> None:
        self.sources = sources
        self._lines: dict[int, int] | None = None  # node id -> line, worked out for the first error
        self.file_of: dict[int, str] = {}  # id(rule) -> file
        self.defs: dict[str, _RuleDef] = {}
        self.types: dict[str, TypeNode] = {}
        self.in_progress: set[str] = set()
        self.groups_in_progress: set[str] = set()
        self.pending: list[Reference] = []
        self.group_cache: dict[str, tuple[tuple, tuple]] = {}
        self.current: _RuleDef | None = None
        self._trees: list[ast.CDDLTree] = []  # kept alive: line table is keyed by id()

    # ------------------------------------------------------------ driver

    def run(self) -> CompiledRules:
        for file, text in self.sources:
            self._collect(file, text)
        for name, d in self.defs.items():
            if d.group is None:
                self._rule_type(name, d.rule)
            else:
                self._group_alts(name, d.rule)  # refuse what cannot be used, even if unused
        for ref in self.pending:
            ref.target = self.types[ref.name]
        for name, t in self.types.items():
            if isinstance(t, Reference) and t.name == name:
                d = self.defs[name]
                raise self._error(d.rule.name, f"rule '{name}' is defined only in terms of itself", d)
        groups = frozenset(n for n, d in self.defs.items() if d.group is not None)
        return CompiledRules(dict(self.types), groups, tuple(f for f, _ in self.sources))

    def _collect(self, file: str, text: str) -> None:
        try:
            tree = cddlparser.parse(text)
        except cddlparser.ParserError as exc:
            m = re.search(r"line (\d+)", exc.message)
            raise SchemaError(file, int(m.group(1)) if m else None, f"syntax error: {exc.message}") from None
        except Exception as exc:  # cddlparser has internal asserts and may raise other errors
            raise SchemaError(file, None, f"syntax error: {exc}") from None
        self._trees.append(tree)
        for rule in tree.rules:
            name = rule.name.name
            here = _RuleDef(name, file, rule, None)
            if rule.assign.type != Tokens.ASSIGN:
                # The token's literal is empty for '/=' and '//='; its type holds the operator.
                raise self._error(rule.name, f"rule extension '{rule.assign.type.value}' is not supported", here)
            if name.startswith("$"):
                raise self._error(rule.name, f"socket/plug '{name}' is not supported", here)
            if rule.name.parameters is not None:
                raise self._error(rule.name, f"generic rule '{name}<...>' is not supported", here)
            if name in self.defs:
                first = self.defs[name]
                where = f"{first.file}:{self._line(first.rule.name)}"
                raise self._error(rule.name, f"duplicate rule '{name}' (first defined at {where})", here)
            here.group = _group_body(rule)
            self.defs[name] = here

    # ------------------------------------------------------------ errors

    def _line(self, node: ast.CDDLNode) -> int | None:
        if self._lines is None:
            # Only an error needs a line number, and finding them means
            # serializing every tree (a fifth of compiling a valid set).
            self._lines = {}
            for tree in self._trees:
                self._lines.update(_node_lines(tree))
        line = self._lines.get(id(node))
        if line is not None:
            return line
        for child in node.getChildren():
            line = self._line(child)
            if line is not None:
                return line
        return None

    def _error(self, node: ast.CDDLNode, message: str, where: _RuleDef | None = None) -> SchemaError:
        d = where or self.current
        return SchemaError(d.file if d else "?", self._line(node), message)

    # ------------------------------------------------------------ rules

    def _rule_type(self, name: str, at: ast.CDDLNode) -> TypeNode:
        done = self.types.get(name)
        if done is not None:
            return done
        d = self.defs.get(name)
        if d is None:
            raise self._error(at, f"undefined rule '{name}'")
        if d.group is not None:
            raise self._error(at, f"'{name}' is a group (defined as '{name} = ( ... )'), used here as a type; "
                                  "drop the outer parentheses if a type is meant (ruling R13)")
        if name in self.in_progress:
            ref = Reference(name)  # recursion: bound once every rule is compiled
            self.pending.append(ref)
            return ref
        outer, self.current = self.current, d
        self.in_progress.add(name)
        try:
            typ = d.rule.type
            assert isinstance(typ, ast.Type)
            node = self._type(typ, name_hint=name)
        finally:
            self.in_progress.discard(name)
            self.current = outer
        self.types[name] = node
        return node

    def _group_alts(self, name: str, at: ast.CDDLNode) -> tuple[tuple, tuple]:
        """A group rule's ``//`` alternatives and computed entries (cached)."""
        cached = self.group_cache.get(name)
        if cached is not None:
            return cached
        d = self.defs[name]
        if name in self.groups_in_progress:
            raise self._error(at, f"group '{name}' includes itself; recursive groups are not supported")
        outer, self.current = self.current, d
        self.groups_in_progress.add(name)
        try:
            assert d.group is not None
            result = self._map_group(d.group, allow_computed=True)
        finally:
            self.groups_in_progress.discard(name)
            self.current = outer
        self.group_cache[name] = result
        return result

    # ------------------------------------------------------------ types

    def _type(self, node: ast.Type, name_hint: str | None = None) -> TypeNode:
        if len(node.types) == 1:
            return self._type1(node.types[0], name_hint)
        return Choice([self._type1(t) for t in node.types])

    def _type1(self, node: Any, name_hint: str | None = None) -> TypeNode:
        if isinstance(node, ast.Value):
            return Literal(self._value(node))
        if isinstance(node, ast.Typename):
            return self._typename(node)
        if isinstance(node, ast.Map):
            alts, computed = self._map_group(node, allow_computed=True)
            return MapType(alts, computed, desc=name_hint or "map")
        if isinstance(node, ast.Array):
            return self._array(node)
        if isinstance(node, ast.Group):
            raise self._error(node, "a parenthesised group where a type is expected")
        if isinstance(node, ast.Type):  # "( type )"
            return self._type(node, name_hint)
        if isinstance(node, ast.Operator):
            return self._operator(node)
        if isinstance(node, ast.Range):
            return self._range(node)
        if isinstance(node, ast.Tag):
            return self._tag(node)
        if isinstance(node, ast.ChoiceFrom):
            raise self._error(node, "choice from a group ('&') is not supported")
        raise self._error(node, f"unsupported construct {type(node).__name__}")

    def _typename(self, node: ast.Typename) -> TypeNode:
        name = node.name
        if node.unwrapped is not None:
            raise self._error(node, f"unwrap operator '~{name}' is not supported")
        if node.parameters is not None:
            raise self._error(node, f"generic arguments '{name}<...>' are not supported")
        if name.startswith("$"):
            raise self._error(node, f"socket/plug '{name}' is not supported")
        if name in self.defs:  # a rule may shadow a prelude name
            return self._rule_type(name, node)
        if name in nodes.PRELUDE:
            return Prim(name)
        if name in _KNOWN_PRELUDE:
            raise self._error(node, f"prelude type '{name}' is not supported")
        raise self._error(node, f"undefined rule '{name}'")

    def _value(self, node: ast.Value) -> str | int | float | bytes:
        text = node.value
        try:
            if node.type == "number":
                return _number(text)
            if node.type == "text":
                return text
            if node.type == "bytes":
                return text.encode("utf-8")
            if node.type == "hex":
                return bytes.fromhex("".join(text.split()))
            if node.type == "base64":
                return base64.b64decode(text + "=" * (-len(text) % 4))
        except ValueError:
            pass
        raise self._error(node, f"cannot read literal {node.type} value {text!r}")

    def _literal_number(self, node: Any) -> int | float:
        """A range or size bound: a number literal or a rule naming one."""
        if isinstance(node, ast.Type) and len(node.types) == 1:
            return self._literal_number(node.types[0])
        if isinstance(node, ast.Value) and node.type == "number":
            value = self._value(node)
            assert isinstance(value, (int, float))
            return value
        if isinstance(node, ast.Typename) and node.name in self.defs:
            target = self._rule_type(node.name, node)
            if isinstance(target, Literal) and isinstance(target.value, (int, float)):
                return target.value
        raise self._error(node, "a range bound must be a number")

    def _range(self, node: ast.Range) -> IntRange:
        lo, hi = self._literal_number(node.min), self._literal_number(node.max)
        if isinstance(lo, float) != isinstance(hi, float):
            raise self._error(node, "a range mixes integer and float bounds")
        return IntRange(lo, hi, inclusive=node.rangeop.type == Tokens.INCLRANGE)

    def _operator(self, node: ast.Operator) -> TypeNode:
        op = node.name.literal
        if op == _DEFAULT:  # a default value changes nothing about validity
            return self._type1(node.type)
        if op != _SIZE:
            raise self._error(node, f"control operator '.{op}' is not supported")
        base = self._type1(node.type)
        kind = getattr(base, "name", None) if isinstance(base, Prim) else None
        if kind in ("tstr", "text"):
            kind = "tstr"
        elif kind in ("bstr", "bytes"):
            kind = "bstr"
        elif kind in ("uint", "unsigned"):
            kind = "uint"
        else:
            raise self._error(node, f"'.size' applies to tstr, bstr or uint here, not {base.desc}")
        lo, hi = self._size_bounds(node.controller)
        return Sized(kind, lo, hi)

    def _size_bounds(self, node: Any) -> tuple[int, int]:
        if isinstance(node, ast.Type) and len(node.types) == 1:
            return self._size_bounds(node.types[0])
        if isinstance(node, ast.Range):
            lo, hi = self._literal_number(node.min), self._literal_number(node.max)
            exclusive = node.rangeop.type != Tokens.INCLRANGE
            if not (isinstance(lo, int) and isinstance(hi, int)) or lo < 0:
                raise self._error(node, "'.size' bounds must be unsigned integers")
            return lo, hi - 1 if exclusive else hi
        size = self._literal_number(node)
        if not isinstance(size, int) or size < 0:
            raise self._error(node, "'.size' must be an unsigned integer")
        return size, size

    def _tag(self, node: ast.Tag) -> TypeNode:
        number = node.numericPart.literal if node.numericPart is not None else ""
        major, _, tag = number.partition(".")
        if major != "6" or not tag.isdigit() or node.typePart is None:
            raise self._error(node, f"tag form '#{number}' is not supported (only #6.n(type))")
        return Tagged(int(tag), self._type(node.typePart))

    # ------------------------------------------------------------ groups

    def _map_group(self, group: ast.Group, *, allow_computed: bool) -> tuple[tuple, tuple]:
        """A map's group: its ``//`` alternatives (each a sequence of
        Member/Alternatives) and its computed entries."""
        computed: list[Computed] = []
        alts = []
        single = len(group.groupChoices) == 1
        for choice in group.groupChoices:
            seq: list[Any] = []
            self._map_entries(choice, seq, computed if (single and allow_computed) else None)
            alts.append(tuple(seq))
        return tuple(alts), tuple(computed)

    def _map_entries(self, choice: ast.GroupChoice, seq: list[Any], computed: list[Computed] | None) -> None:
        for entry in choice.groupEntries:
            low, high = self._occurrence(entry.occurrence)
            if entry.key is not None:
                self._member(entry, low, high, seq, computed)
                continue
            inner = _sole_type1(entry.type)
            if isinstance(inner, ast.Group) and not isinstance(inner, (ast.Map, ast.Array)):
                alts, inner_computed = self._map_group(inner, allow_computed=computed is not None)
            elif isinstance(inner, ast.Typename) and inner.name in self.defs and self.defs[inner.name].group:
                if inner.parameters is not None:
                    raise self._error(inner, "generic arguments are not supported")
                alts, inner_computed = self._group_alts(inner.name, inner)
            else:
                raise self._error(entry, "a map entry needs a key; a bare type inside a map's group is not "
                                         "valid CDDL (write a type choice of maps, or '//' group choices; R13)")
            if (low, high) == (1, 1):
                if len(alts) == 1:
                    seq.extend(alts[0])  # a plain group: splice it in
                    if inner_computed:
                        if computed is None:
                            raise self._error(entry, "computed keys inside a group choice are not supported")
                        computed.extend(inner_computed)
                    continue
                seq.append(Alternatives(alts, optional=False))
            elif (low, high) == (0, 1):
                seq.append(Alternatives(alts, optional=True))
            else:
                raise self._error(entry, "repeated groups inside a map are not supported (only '?')")
            if inner_computed:
                raise self._error(entry, "computed keys inside an optional group or group choice are not supported")

    def _member(self, entry: ast.GroupEntry, low: int, high: float, seq: list[Any],
                computed: list[Computed] | None) -> None:
        key = entry.key
        assert key is not None
        vtype = self._type(entry.type)
        ktype = key.type
        if key.hasColon:  # bare word or literal value before ':'
            if isinstance(ktype, ast.Typename):
                literal: Any = ktype.name
            elif isinstance(ktype, ast.Value):
                literal = self._value(ktype)
            else:
                raise self._error(entry, "unsupported member key")
        elif isinstance(ktype, ast.Value):
            literal = self._value(ktype)
        else:  # "type => value": a computed key
            if computed is None:
                raise self._error(entry, "computed keys inside an optional group or group choice are not supported")
            computed.append(Computed(self._type1(ktype), vtype, low, high))
            return
        if high == 0:
            return  # "0*0 key: t" forbids nothing we track
        seq.append(Member(literal, vtype, required=low >= 1))

    def _occurrence(self, occ: ast.Occurrence | None) -> tuple[int, float]:
        if occ is None:
            return 1, 1
        # cddlparser stores '?' as 0..inf like '*'; the token tells them apart.
        if occ.tokens and occ.tokens[-1].type == Tokens.QUEST:
            return 0, 1
        return int(occ.n), occ.m

    def _array(self, node: ast.Array) -> ArrayType:
        if len(node.groupChoices) != 1:
            raise self._error(node, "group choices ('//') inside an array are not supported")
        entries: list[tuple[int, float, TypeNode]] = []
        for entry in node.groupChoices[0].groupEntries:
            low, high = self._occurrence(entry.occurrence)
            inner = _sole_type1(entry.type)
            if isinstance(inner, ast.Group) and not isinstance(inner, (ast.Map, ast.Array)):
                raise self._error(entry, "nested groups inside an array are not supported")
            if isinstance(inner, ast.Typename) and inner.name in self.defs and self.defs[inner.name].group:
                raise self._error(entry, f"group '{inner.name}' inside an array is not supported")
            # A key on an array entry only names the position (RFC 8610 §3.4).
            entries.append((low, high, self._type(entry.type)))
        return ArrayType(entries)


def _group_body(rule: ast.Rule) -> ast.Group | None:
    """The group of a group rule, or None for a type rule. cddlparser gives
    a rule ``name = ( ... )`` as a group entry or as a type wrapping a bare
    group; a rule like ``name = key: type`` is a one-entry group."""
    typ = rule.type
    if isinstance(typ, ast.GroupEntry):
        inner = _sole_type1(typ.type) if typ.key is None and typ.occurrence is None else None
        if isinstance(inner, ast.Group) and not isinstance(inner, (ast.Map, ast.Array)):
            return inner
        return ast.Group([ast.GroupChoice([typ])])
    inner = _sole_type1(typ)
    if isinstance(inner, ast.Group) and not isinstance(inner, (ast.Map, ast.Array)):
        return inner
    return None


def _sole_type1(node: Any) -> Any:
    if isinstance(node, ast.Type) and len(node.types) == 1 and node.openToken is None:
        return node.types[0]
    return None


def _number(text: str) -> int | float:
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")
    lower = body.lower()
    if lower.startswith("0x") and "." not in lower and "p" not in lower:
        return sign * int(body[2:], 16)
    if lower.startswith("0b"):
        return sign * int(body[2:], 2)
    if body.isdigit():
        return sign * int(body)
    return float(text)


# Prelude names RFC 8610 defines but this engine refuses (so the message can
# say "not supported" rather than "undefined").
_KNOWN_PRELUDE = frozenset({
    "tdate", "time", "biguint", "bignint", "bigint", "decfrac", "bigfloat", "eb64url",
    "eb64legacy", "eb16", "encoded-cbor", "uri", "b64url", "b64legacy", "regexp",
    "mime-message", "cbor-any", "undefined",
})
