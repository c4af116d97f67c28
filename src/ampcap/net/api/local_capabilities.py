"""The capabilities a :class:`~ampcap.net.api.peer.Peer` offers from Python functions.

``@peer.capability(...)`` (and the module-level :func:`capability` mark that
``peer.include`` registers later) lands here: the input JSON Schema derived
from the function's type hints (:func:`schema_from_signature`), the checks a
manifest file's capability passes, made when the function is declared (where
the mistake is, not at ``serve()``), and the adapter that turns
``fn(**params[, ctx=...])`` into the daemon's ``(params, context)`` handler.
:class:`LocalCapabilities` keeps a peer's registrations and hands the daemon
their manifest specs, bundle and handlers. ``ampcap.net.api.peer`` re-exports
the public names.

The manifest model and the JSON Schema compilers are imported only when a
capability is registered or served: a pure caller never loads them.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar, get_type_hints

import msgspec

from ...caps.binding.context import InvocationContext as _ContextProtocol
from ...errors import AmpError
from ...bindings.runner import RunnerContext, ThreadContext, run_in_thread

__all__ = ["InvocationContext", "LocalCapabilities", "capability", "schema_from_signature"]

F = TypeVar("F", bound=Callable[..., Any])
InvocationContext = RunnerContext  # what a ``ctx`` parameter receives
Handler = Callable[[Any, RunnerContext], Awaitable[Any]]
_CONTEXT_PARAM = "ctx"
_DRAFT7 = "http://json-schema.org/draft-07/schema#"
_API_BUNDLE = "ampcap.local.api"


class _Registered(msgspec.Struct, frozen=True):
    name: str
    version: str
    schema: Any
    output_schema: Any
    notes: str | None
    aliases: tuple[str, ...]
    handler: Callable[[Any, RunnerContext], Awaitable[Any]]
    idempotent: bool = False  # R19: an invoke a restart interrupted runs again on retry

    def manifest_entry(self) -> dict[str, Any]:
        """This capability as a manifest table: the Python API's capabilities
        pass the same checks as a manifest file's."""
        return {"name": self.name, "version": self.version, "input_schema": self.schema,
                "output_schema": self.output_schema, "binding": {"python": f"{__name__}:_local_only"},
                **({"notes": self.notes} if self.notes else {}), **({"aliases": list(self.aliases)} if self.aliases else {}),
                **({"idempotent": True} if self.idempotent else {})}



class LocalCapabilities:
    """A peer's capabilities declared through the Python API, in declaration order."""

    def __init__(self) -> None:
        self._registered: list[_Registered] = []

    def __bool__(self) -> bool:
        return bool(self._registered)

    def register(self, fn: Callable[..., Any], name: str, version: str, *, schema: Mapping[str, Any] | None,
                 output_schema: Mapping[str, Any] | bool, notes: str | None, aliases: Sequence[str],
                 idempotent: bool) -> None:
        """Declare ``fn`` as ``name:version``: TypeError if no schema can be
        derived from its hints, ValueError naming every problem with the
        declaration (or a second one of the same id)."""
        input_schema = dict(schema) if schema is not None else schema_from_signature(fn)
        out = dict(output_schema) if isinstance(output_schema, Mapping) else output_schema
        reg = _Registered(name=name, version=version, schema=input_schema, output_schema=out,
                          notes=notes or _first_line(fn.__doc__), aliases=tuple(aliases), handler=_adapt(fn),
                          idempotent=idempotent)
        _check_registration(reg, self._registered)  # here, where the mistake is, not at serve()
        self._registered.append(reg)

    def served(self) -> tuple[list[Any], list[Any], dict[str, Handler]]:
        """What the daemon serves for them: the manifest's capability specs,
        its bundle (empty lists when nothing is registered) and the handler
        for each capability id."""
        specs: list[Any] = []
        bundles: list[Any] = []
        handlers: dict[str, Handler] = {}
        if self._registered:
            from ...caps.manifest import manifest_from_data

            data = {"bundle_id": _API_BUNDLE, "capability": [r.manifest_entry() for r in self._registered]}
            local = manifest_from_data(data, source="<python api>")
            specs.extend(local.capabilities)
            bundles.append(local.bundle)
            for reg, spec in zip(self._registered, local.capabilities):
                handlers[spec.id] = reg.handler
        return specs, bundles, handlers


def capability(name: str, version: str = "1.0.0", **kwargs: Any) -> Callable[[F], F]:
    """Mark a module-level function as a capability without a
    :class:`~ampcap.net.api.peer.Peer` at hand (same arguments as
    :meth:`~ampcap.net.api.peer.Peer.capability`); register it later with
    ``peer.include(fn)``."""

    def mark(fn: F) -> F:
        fn.__ampcap_capability__ = (name, version, kwargs)  # type: ignore[attr-defined]
        return fn

    return mark


def schema_from_signature(fn: Callable[..., Any]) -> dict[str, Any]:
    """A JSON Schema (draft-07) object for ``fn``'s keyword parameters
    (``ctx`` excluded), derived with ``msgspec`` from the type hints; closed
    to other keys unless ``fn`` takes ``**kwargs``."""
    try:
        hints = get_type_hints(fn)
    except NameError as exc:  # a hint naming something not importable where fn lives
        raise TypeError(f"{fn.__name__}: its type hints cannot be resolved ({exc}); give the capability an "
                        "explicit schema={...}") from None
    fields: list[Any] = []
    ctx_name = _context_param(fn)
    parameters = inspect.signature(fn).parameters.values()
    open_ended = any(param.kind is param.VAR_KEYWORD for param in parameters)
    for param in parameters:
        if param.name == ctx_name or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.kind is param.POSITIONAL_ONLY:
            raise TypeError(f"{fn.__name__}: positional-only parameter {param.name!r} cannot take a named param")
        annotation = hints.get(param.name, Any)
        if param.default is param.empty:
            fields.append((param.name, annotation))
        else:
            fields.append((param.name, annotation, param.default))
    struct = msgspec.defstruct(f"{fn.__name__}_params", fields)
    try:
        generated = msgspec.json.schema(struct)
    except TypeError:
        for name, annotation, *_ in fields:  # which parameter: msgspec's message does not say
            try:
                msgspec.json.schema(annotation)
            except TypeError:
                raise TypeError(f"{fn.__name__}: no JSON Schema can be derived from the type of parameter "
                                f"{name!r} ({getattr(annotation, '__name__', annotation)}); give the "
                                "capability an explicit schema={...}") from None
        raise
    generated = _as_draft7(generated)
    defs = dict(generated.get("$defs", {}))
    body = dict(defs.pop(f"{fn.__name__}_params", {"type": "object"}))
    body.pop("title", None)
    schema: dict[str, Any] = {"$schema": _DRAFT7, **body, "additionalProperties": open_ended}
    if defs:
        schema["$defs"] = defs
    return schema


def _as_draft7(node: Any) -> Any:
    """msgspec writes tuples in 2020-12 terms (``prefixItems``, then
    ``items: false``); under the draft-07 label that would refuse every item.
    Draft-07 spells it ``items: [...]`` and ``additionalItems``."""
    if isinstance(node, list):
        return [_as_draft7(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _as_draft7(value) for key, value in node.items()}
    if "prefixItems" in out:
        rest = out.pop("items", None)
        out["items"] = out.pop("prefixItems")
        if rest is not None:
            out["additionalItems"] = rest
    return out


def _check_registration(reg: _Registered, registered: Sequence[_Registered]) -> None:
    """ValueError naming every problem with one capability (name, version,
    schemas, aliases), or a second registration of the same id."""
    from ...caps.manifest import ManifestError, manifest_from_data

    ident = f"{reg.name}:{reg.version}"
    if any(r.name == reg.name and r.version == reg.version for r in registered):
        raise ValueError(f"capability {ident} is already registered on this peer")
    try:
        manifest_from_data({"bundle_id": _API_BUNDLE, "capability": [reg.manifest_entry()]}, source="<python api>")
    except ManifestError as exc:
        problems = "; ".join(f"{p.key}: {p.message}" if p.key else p.message for p in exc.problems)
        raise ValueError(f"capability {ident}: {problems}") from None


def _context_param(fn: Callable[..., Any]) -> str | None:
    """The parameter that receives the invocation context: the one annotated
    ``InvocationContext`` (whatever its name), else one named ``ctx``."""
    parameters = inspect.signature(fn).parameters
    for name, param in parameters.items():
        annotation = param.annotation
        if annotation is RunnerContext or annotation is _ContextProtocol or (
                isinstance(annotation, str) and annotation.rsplit(".", 1)[-1] == "InvocationContext"):
            return name
    return _CONTEXT_PARAM if _CONTEXT_PARAM in parameters else None


def _adapt(fn: Callable[..., Any]) -> Callable[[Any, RunnerContext], Awaitable[Any]]:
    """Turn ``fn(**params[, ctx=...])`` into the daemon's (params, context) handler."""
    ctx_name = _context_param(fn)
    is_async = inspect.iscoroutinefunction(fn)
    try:
        hints = {name: hint for name, hint in get_type_hints(fn).items()
                 if name not in ("return", ctx_name) and hint is not Any}
    except NameError:  # no hints to honour (the capability has an explicit schema)
        hints = {}

    def typed(params: Mapping[str, Any]) -> dict[str, Any]:
        # The params passed the JSON Schema; give the function the types it
        # declared (a dataclass, an Enum member, a tuple), not their JSON form.
        kwargs = dict(params)
        for name, hint in hints.items():
            if name in kwargs:
                try:
                    kwargs[name] = msgspec.convert(kwargs[name], hint, strict=False)
                except msgspec.ValidationError as exc:
                    raise AmpError(4004, f"params.{name}: {exc}", path=f"params.{name}") from None
        return kwargs

    async def handler(params: Any, context: RunnerContext) -> Any:
        kwargs = typed(params) if isinstance(params, Mapping) else {}
        if is_async:
            if ctx_name is not None:
                kwargs[ctx_name] = context
            return await fn(**kwargs)
        if ctx_name is not None:  # a plain function cannot await: progress and sleep are plain calls
            kwargs[ctx_name] = ThreadContext(context)
        # A plain function may block: keep it off the event loop.
        return await run_in_thread(functools.partial(fn, **kwargs))

    return handler


def _local_only(params: Any) -> Any:  # pragma: no cover - never called: the daemon uses the handler
    raise AmpError(5001, "capability registered through the Python API has no importable binding")


def _first_line(doc: str | None) -> str | None:
    return doc.strip().splitlines()[0] if doc and doc.strip() else None
