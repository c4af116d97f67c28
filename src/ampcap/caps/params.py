"""Validate invocation params against a capability's input JSON Schema.

Engine choice: schemas are compiled with ``fastjsonschema`` (≈1 µs per
check, library-notes) because params validation sits on every CAP_INVOKE.
It implements drafts 04/06/07; a schema that declares draft 2019-09 or
2020-12 in ``$schema`` is compiled with ``jsonschema``'s prebuilt
``Draft202012Validator`` (≈25 µs) instead, because for those drafts
correctness beats speed: fastjsonschema would silently ignore keywords
such as ``prefixItems`` or ``unevaluatedProperties`` and accept params the
schema forbids. Schemas without ``$schema`` are treated as draft-07.

Cost is linear in the params: for the 2019-09/2020-12 path, ``uniqueItems``
and ``unevaluatedItems``/``unevaluatedProperties`` are replaced by versions
with hash lookups, because jsonschema's own are quadratic (a 50 KB array of
objects held the event loop for a minute).

Remote ``$ref`` is never fetched (offline rule of §5.3): fastjsonschema is
given handlers that refuse every scheme, jsonschema's ``referencing`` does
not fetch.

Error mapping:
- params that violate the schema → ``AmpError(4004)`` with a short message
  such as ``params.a: must be number`` (never the schema itself);
- a schema that cannot be compiled → ``AmpError(5002)``: the artifact was
  verified but is unusable, which is a registry-availability fault of the
  provider, not of the caller (4004 is reserved for "params fail a loaded
  schema", §5.3), and it is retryable once the provider fixes it.
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import AmpError
from .bundle import SchemaStore
from .descriptor import Descriptor, SchemaRef

__all__ = ["CompiledSchema", "ParamsValidator", "compile_schema"]

log = logging.getLogger(__name__)

SCHEMA_VIOLATION = 4004
UNAVAILABLE = 5002
_MAX_MESSAGE = 160
_MODERN_DRAFTS = ("draft/2019-09", "draft/2020-12")


if TYPE_CHECKING:
    import jsonschema

# fastjsonschema and jsonschema (≈60 ms to import, jsonschema's referencing
# machinery most of it) are imported when a schema is first compiled: a
# client call, `ampcap --help` and everything else that imports the
# capability model without checking params never pays for them.


def _refuse_remote(uri: str) -> Any:
    import fastjsonschema

    raise fastjsonschema.JsonSchemaDefinitionException(f"remote $ref not allowed offline: {uri}")


_NO_NETWORK = {scheme: _refuse_remote for scheme in ("http", "https", "file", "ftp", "urn", "")}


def _shorten(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"


_JSON_TYPES = ("string", "number", "integer", "object", "array", "boolean", "null")


def _compile_problem(schema: Any, exc: Exception) -> str:
    """Why a schema does not compile, naming what is wrong where we can: the
    compilers say only "Unknown type" (fastjsonschema) or quote their
    meta-schema (jsonschema), neither names the type or where it is."""
    found = _unknown_type(schema, "", 0)
    if found is not None:
        where, value = found
        return (f"{where.lstrip('.')} is {value!r:.60}, which is not a JSON Schema type "
                f"(one of {', '.join(_JSON_TYPES)})")
    return str(exc).split("\n", 1)[0]


def _unknown_type(node: Any, where: str, depth: int) -> tuple[str, Any] | None:
    """The first ``type`` keyword (path, value) naming no JSON type."""
    if depth > 64:  # schemas nest as deep as the file allows; this is only a hint
        return None
    if isinstance(node, dict):
        kind = node.get("type")
        if kind is not None:
            kinds = kind if isinstance(kind, list) else [kind]
            for one in kinds:
                if not isinstance(one, str) or one not in _JSON_TYPES:
                    return f"{where}.type", one
        for key, value in node.items():
            if key in ("const", "enum", "default", "examples"):
                continue  # values, not schemas: a "type" key in them is data
            found = _unknown_type(value, f"{where}.{key}", depth + 1)
            if found is not None:
                return found
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found = _unknown_type(value, f"{where}[{i}]", depth + 1)
            if found is not None:
                return found
    return None


def _join(root: str, parts: list[Any] | tuple[Any, ...]) -> str:
    out = root
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


class CompiledSchema(msgspec.Struct, frozen=True):
    """A ready-to-run validator for one verified schema."""

    engine: str  # "fastjsonschema" or "jsonschema-2020-12"
    _check: Callable[[Any, str], None]

    def validate(self, value: Any, *, root: str = "params") -> None:
        """Raise ``AmpError(4004)`` if ``value`` violates the schema."""
        self._check(value, root)

    def errors(self, value: Any, *, root: str = "result") -> list[str]:
        """The violation (as a list, empty when valid), for tests and debug."""
        try:
            self._check(value, root)
        except AmpError as exc:
            return [exc.message]
        return []


def _fast(schema: Any, what: str) -> Callable[[Any, str], None]:
    import fastjsonschema

    try:
        fn = fastjsonschema.compile(schema, handlers=_NO_NETWORK, use_default=False)
    except Exception as exc:  # any failure of a foreign schema: unusable
        raise AmpError(UNAVAILABLE, _shorten(f"{what} does not compile: {_compile_problem(schema, exc)}")) from None
    value_error = fastjsonschema.JsonSchemaValueException

    def check(value: Any, root: str) -> None:
        try:
            fn(value)
        except value_error as exc:
            # exc.name is "data.a" / "data.items[1]" and prefixes the message.
            name = exc.name or "data"
            where = root + name[4:] if name.startswith("data") else root
            text = exc.message or "invalid"
            text = text[len(name):].strip() if text.startswith(name) else text
            raise AmpError(SCHEMA_VIOLATION, _shorten(f"{where}: {text}"), path=where) from None
        except RecursionError:
            raise AmpError(SCHEMA_VIOLATION, f"{root}: nested too deeply", path=root) from None
        except (TypeError, RuntimeError) as exc:
            # CBOR values JSON has no words for, such as a tag around a map
            # inside a uniqueItems array, cannot be compared by the schema.
            raise AmpError(SCHEMA_VIOLATION, _shorten(f"{root}: holds a value the schema cannot check ({exc})"),
                           path=root) from None

    return check


def _json_identity(value: Any) -> Any:
    """A hashable stand-in that is equal exactly when two values are equal
    as JSON (RFC 8259 / JSON Schema §4.2.2): ``1 == 1.0``, ``true != 1``,
    member order does not matter, array order does."""
    if value is True or value is False:
        return ("bool", value)
    if value is None or isinstance(value, (int, float, str)):
        return value  # hash(1) == hash(1.0); bools were handled above
    if isinstance(value, dict):
        return ("object", frozenset((k, _json_identity(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("array", tuple(_json_identity(v) for v in value))
    try:
        hash(value)
    except (TypeError, RuntimeError):  # e.g. a CBOR tag around a map: only equal to itself
        return ("object-id", id(value))
    return ("other", type(value).__name__, value)


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Any:
    # jsonschema compares items pairwise (equal() on each pair) whenever they
    # do not sort, which is any array of objects or of mixed types: 5,000
    # small objects took 67 s. Hashing a JSON-equality stand-in is linear.
    import jsonschema

    if unique and validator.is_type(instance, "array"):
        seen = set()
        for item in instance:
            key = _json_identity(item)
            if key in seen:
                yield jsonschema.ValidationError("has non-unique elements")
                return
            seen.add(key)


def _linear_unevaluated() -> dict[str, Any]:
    """``unevaluatedItems`` / ``unevaluatedProperties`` with set lookups.

    jsonschema finds the evaluated indexes or keys in linear time, then
    tests every item against that *list*: quadratic, 8,000 items took 0.5 to
    1 s and a full-size message would take minutes. These use the same
    finders (private helpers, hence the guard: without them the library's
    own keywords stay) and a set.
    """
    import jsonschema

    try:
        from jsonschema._utils import (find_evaluated_item_indexes_by_schema,
                                       find_evaluated_property_keys_by_schema)
    except ImportError:  # pragma: no cover - a jsonschema that moved them
        return {}

    def unevaluated_items(validator: Any, unevaluated: Any, instance: Any, schema: Any) -> Any:
        if validator.is_type(instance, "array"):
            # Indexes come back repeated (prefixItems and contains both count
            # index 0); an item is unevaluated iff its index is missing.
            evaluated = set(find_evaluated_item_indexes_by_schema(validator, instance, schema))
            if len(evaluated) < len(instance):
                yield jsonschema.ValidationError("has unevaluated items")

    def unevaluated_properties(validator: Any, unevaluated: Any, instance: Any, schema: Any) -> Any:
        if validator.is_type(instance, "object"):
            evaluated = set(find_evaluated_property_keys_by_schema(validator, instance, schema))
            for key, value in instance.items():
                if key not in evaluated and next(validator.descend(value, unevaluated, path=key), None):
                    yield jsonschema.ValidationError(f"{key!r} is unevaluated and not allowed")
                    return

    return {"unevaluatedItems": unevaluated_items, "unevaluatedProperties": unevaluated_properties}


@functools.lru_cache(maxsize=1)
def _draft202012() -> Any:
    import jsonschema

    return jsonschema.validators.extend(jsonschema.Draft202012Validator,
                                        {"uniqueItems": _unique_items, **_linear_unevaluated()})
# best_match ranks the errors it is given; taking the first few bounds the
# work on a large invalid instance (iter_errors is lazy) while still
# preferring a deep, specific error over its wrapper.
_ERRORS_RANKED = 16


def _modern(schema: Any, what: str) -> Callable[[Any, str], None]:
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
        validator = _draft202012()(schema)
    except Exception as exc:
        raise AmpError(UNAVAILABLE, _shorten(f"{what} does not compile: {_compile_problem(schema, exc)}")) from None

    def check(value: Any, root: str) -> None:
        try:
            error = jsonschema.exceptions.best_match(itertools.islice(validator.iter_errors(value), _ERRORS_RANKED))
        except Exception as exc:  # unresolvable $ref at run time and the like
            raise AmpError(UNAVAILABLE, _shorten(f"input schema unusable: {exc}")) from None
        if error is not None:
            where = _join(root, list(error.absolute_path))
            # The jsonschema message embeds the instance and sometimes the
            # schema value; name the keyword only.
            raise AmpError(SCHEMA_VIOLATION, _shorten(f"{where}: fails '{error.validator}'"), path=where)

    return check


def compile_schema(schema: Any, *, what: str = "input schema") -> CompiledSchema:
    """Compile a parsed JSON Schema (5002 when it cannot be used). ``what``
    names it in the message: a manifest's output schema is compiled here
    too, and must not be reported as its input schema."""
    if not isinstance(schema, (dict, bool)):
        raise AmpError(UNAVAILABLE, f"{what} must be a JSON object or boolean")
    declared = schema.get("$schema", "") if isinstance(schema, dict) else ""
    if isinstance(declared, str) and any(d in declared for d in _MODERN_DRAFTS):
        return CompiledSchema("jsonschema-2020-12", _modern(schema, what))
    return CompiledSchema("fastjsonschema", _fast(schema, what))


class ParamsValidator:
    """Compiles each capability's schemas once and checks params with them.

    The cache key is ``(descriptor id, hash_alg, hash)`` as RFC 004 §5.2
    recommends; it is bounded (least recently used goes first) so a peer
    declaring many descriptors cannot grow it without end.
    """

    def __init__(self, store: SchemaStore, *, max_cached: int = 1024) -> None:
        self._store = store
        self._max = max_cached
        self._compiled: OrderedDict[tuple[str, str, bytes], CompiledSchema] = OrderedDict()

    def compiled(self, capability_id: str, ref: SchemaRef, *, what: str = "input schema") -> CompiledSchema:
        key = (capability_id, ref.hash_alg, ref.hash)
        hit = self._compiled.get(key)
        if hit is not None:
            self._compiled.move_to_end(key)
            return hit
        # load_json verifies the hash first (5002 on any fault), so 4004 can
        # only ever come from a schema that was loaded and verified.
        schema = self._store.load_json(ref)
        compiled = compile_schema(schema, what=what)
        self._compiled[key] = compiled
        if len(self._compiled) > self._max:
            self._compiled.popitem(last=False)
        return compiled

    def validate_params(self, descriptor: Descriptor, params: Any) -> None:
        """RFC 004 §7.2 step 7: 4004 on violation, 5002 if the schema is unusable."""
        self.compiled(descriptor.id, descriptor.input_schema).validate(params, root="params")

    def validate_result(self, descriptor: Descriptor, result: Any) -> list[str]:
        """Output-schema findings, for tests and debugging; not enforced on the wire."""
        compiled = self.compiled(descriptor.id, descriptor.output_schema, what="output schema")
        return compiled.errors(result, root="result")

    def __len__(self) -> int:
        return len(self._compiled)

