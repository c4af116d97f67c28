"""The capabilities one daemon serves, in the two roles the executor names.

A :class:`Catalog` is built from :class:`~ampcap.caps.manifest.CapabilitySpec`
records (a manifest, the demo set, or functions registered through the
Python API) and plays :class:`~ampcap.peer.executor.CapabilityResolver`
(steps 4 and 6 of the RFC 004 §7.2 validation order) and
:class:`~ampcap.peer.query_answers.CapabilityDirectory` (CAP_QUERY answers).
It only adapts: names and aliases live in :mod:`.names`, ordering, pages
and cursors in :mod:`.registry` and :mod:`.cursor`, version choice and
bridges in :mod:`.negotiate`.

Sans-I/O: time comes in as ``now_ms`` and the cursor key is injected.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..display import quoted
from ..errors import AmpError
from .bodies import InvokeRequest, QueryPage, QueryRequest, Resolved
from .binding.local import resolve_callable
from .cursor import CURSOR_TTL_MS
from .registry import DEFAULT_PAGE_LIMIT, Registry

if TYPE_CHECKING:  # the manifest model (and what it imports) is not needed to serve specs
    from .manifest import CapabilitySpec

__all__ = ["Catalog", "CURSOR_TTL_MS", "DEFAULT_PAGE_LIMIT"]

NOT_FOUND = 4002

# caps.negotiate (and the manifest model it reads), loaded on the first invoke
# a Catalog serves: a one-shot CLI caller builds a Catalog it never serves
# from (tests/cli/test_startup_imports.py). A global, not an import in the
# method, which would cost every invoke served a microsecond.
_negotiate: ModuleType | None = None


def _load_negotiate() -> ModuleType:
    global _negotiate
    from . import negotiate

    _negotiate = negotiate
    return negotiate


class Catalog:
    """Served capabilities, by canonical name, with their aliases."""

    def __init__(self, specs: Iterable[CapabilitySpec], *, cursor_key: bytes) -> None:
        self.registry: Registry[CapabilitySpec] = Registry(cursor_key=cursor_key)
        for spec in specs:
            try:
                self.registry.add(spec)
            except AmpError as exc:
                raise ValueError(exc.message) from None
        self._bridges: dict[str, Any] = {}

    @property
    def specs(self) -> tuple[CapabilitySpec, ...]:
        return tuple(self.registry)

    def __len__(self) -> int:
        return len(self.registry)

    def get(self, capability_id: str) -> CapabilitySpec | None:
        return self.registry.get(capability_id)

    # --------------------------------------------------- CapabilityResolver

    def canonical_name(self, name: str) -> str:
        return self.registry.canonical_name(name)

    def resolve_identity(self, request: InvokeRequest) -> list[CapabilitySpec]:
        found = self.registry.versions(request.name)
        if not found:
            raise AmpError(NOT_FOUND, f"capability {quoted(request.name)} not found")
        return found

    def check_version(self, target: list[CapabilitySpec], request: InvokeRequest) -> Resolved:
        negotiate = _negotiate or _load_negotiate()
        chosen = negotiate.select_for(target, request)
        params = negotiate.adapt_params(chosen, request.params, self._bridge)
        back = None
        if chosen.bridged and getattr(chosen.spec, "bridge_result", None) is not None:
            back = functools.partial(negotiate.adapt_result, chosen, resolve=self._bridge)
        return Resolved(descriptor=chosen.spec.descriptor, params=params, binding=chosen.spec.binding,
                        adapt_result=back)

    def _bridge(self, target: str) -> Any:
        fn = self._bridges.get(target)
        if fn is None:
            fn = self._bridges[target] = resolve_callable(target)
        return fn

    # -------------------------------------------------- CapabilityDirectory

    def query(self, request: QueryRequest, now_ms: int, *, allowed: Callable[[str], bool] | None = None) -> QueryPage:
        """One CAP_DECLARE page; ``allowed`` (a canonical name's ACL) hides
        the names the caller may not see from a ``"*"`` listing."""
        every = request.lists_every_name
        page = self.registry.query(None if every else request.name, version_range=request.version_range,
                                   order=request.order, limit=request.limit, cursor=request.cursor,
                                   filter=request.filter, now_ms=now_ms, allowed=allowed if every else None)
        return QueryPage(descriptors=tuple(s.descriptor for s in page.items), next_cursor=page.next_cursor)
