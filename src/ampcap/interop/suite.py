"""What the conformance suite asks for, and which runner answers each vector.

The suite (``2026-02-07-draft-v1``, ``vector-set.json``) names the required
vectors; a report must speak for every one of them: ``pass`` or ``fail`` when
the harness ran it, ``skip`` with the reason otherwise. This module is the
registry that makes that so. Every vector the harness knows is a
:class:`SuiteVector`: a :class:`~ampcap.interop.vectors.Vector` (id, title,
coroutine over a :class:`~ampcap.interop.vectors.Context`) and where it runs:

* ``Where.TARGET``: against the target, on connections of its own (the
  scenario vectors of ``vectors.py``);
* ``Where.SELF``: against ampcap's own codec, only with ``--self`` (the RFC
  001 byte vectors, ``codec.py``: no remote target signs with the RFC's keys);
* ``Where.RELAY``: against the relay given with ``--relay URL`` (RFC 003).

A required vector nobody registered is reported ``skip`` with the reason in
:data:`UNIMPLEMENTED` (or "not implemented yet").

How a new set of vectors plugs in (the RFC 005 and 006 work does this): write
a module under ``ampcap/interop/`` whose import calls :func:`register` once
per vector, e.g. ::

    register(Vector("005:A.4", "expired credential → 3004", v005_a4))

and add the module's name to :data:`PLUGIN_MODULES`. Its vectors then run in
every run (``ampcap interop URL``, ``--self``, ``--vector 005:A.4``), their
ids become valid ``--vector`` values, and the "not implemented yet" skip for
them disappears. Nothing else changes.
"""

from __future__ import annotations

import enum
import importlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .judge import Outcome, skipped
from .vectors import VECTORS, Context, Vector

__all__ = ["SUITE_VERSION", "REQUIRED_VECTORS", "Where", "SuiteVector", "PLUGIN_MODULES", "UNIMPLEMENTED",
           "register", "suite_vectors", "known_ids", "skip_reason", "vector_key", "unclaimed"]

SUITE_VERSION = "2026-02-07-draft-v1"
# vector-set.json "required_vectors", in its order.
REQUIRED_VECTORS: tuple[str, ...] = (
    "001:A.1", "001:A.2", "001:A.6", "002:A.1", "002:A.2", "003:A.1", "003:A.5", "003:A.15",
    "004:A.2", "004:A.15", "004:A.23", "005:A.4", "005:A.14", "005:A.20", "006:A.2", "006:A.15",
    "006:A.17", "007:A.9", "007:A.17a", "007:A.17b", "007:A.18", "007:A.21",
)

# Modules that register vectors when imported: one line per plug-in.
PLUGIN_MODULES: tuple[str, ...] = ("ampcap.interop.deleg_vectors", "ampcap.interop.session_vectors",
                                   "ampcap.interop.pay_vectors")

# Why a required vector no runner answers is skipped, by RFC.
UNIMPLEMENTED: dict[str, str] = {
    "005": "not implemented yet (RFC 005 delegation vectors)",
}


class Where(enum.Enum):
    TARGET = "target"
    SELF = "self"
    RELAY = "relay"


@dataclass(frozen=True, slots=True)
class SuiteVector:
    vector: Vector
    where: Where = Where.TARGET

    @property
    def id(self) -> str:
        return self.vector.id


_REGISTERED: dict[str, SuiteVector] = {}


def register(vector: Vector, where: Where = Where.TARGET) -> None:
    """Add ``vector`` to every run (see the module docstring)."""
    if vector.id in _REGISTERED or any(v.id == vector.id for v in VECTORS):
        raise ValueError(f"vector {vector.id} is registered twice")
    _REGISTERED[vector.id] = SuiteVector(vector, where)


def _self_vector(vector_id: str, title: str, check: Callable[[], Outcome]) -> Vector:
    async def run(ctx: Context) -> Outcome:
        return check()

    return Vector(vector_id, title, run)


def _builtin() -> list[SuiteVector]:
    from .codec import CODEC_CHECKS
    from .relay_vectors import RELAY_VECTORS

    found = [SuiteVector(_self_vector(vid, title, check), Where.SELF) for vid, (title, check) in CODEC_CHECKS.items()]
    found += [SuiteVector(v) for v in VECTORS]
    found += [SuiteVector(v, Where.RELAY) for v in RELAY_VECTORS]
    return found


def suite_vectors() -> list[SuiteVector]:
    """Every vector with a runner, sorted by RFC and appendix number."""
    for module in PLUGIN_MODULES:
        importlib.import_module(module)
    return sorted([*_builtin(), *_REGISTERED.values()], key=lambda s: vector_key(s.id))


def known_ids() -> list[str]:
    """What ``--vector`` accepts: every runnable vector and every required one."""
    ids = {s.id for s in suite_vectors()} | set(REQUIRED_VECTORS)
    return sorted(ids, key=vector_key)


def skip_reason(vector_id: str) -> str:
    """Why a required vector without a runner is not run."""
    return UNIMPLEMENTED.get(vector_id.partition(":")[0], "not implemented yet")


def vector_key(vector_id: str) -> tuple[object, ...]:
    """Natural order: 001:A.2 before 001:A.10, appendix vectors before named checks."""
    rfc, _, rest = vector_id.partition(":")
    parts = [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", rest) if p]
    return (rfc, 0 if rest.startswith("A.") else 1, [(0, p) if isinstance(p, int) else (1, p) for p in parts])


def unclaimed(present: Iterable[str], only: Iterable[str] | None) -> list[tuple[str, Outcome]]:
    """The required vectors (or those of ``only``) no runner answered: ``skip`` each."""
    have = set(present)
    wanted = REQUIRED_VECTORS if only is None else tuple(only)
    return [(vid, skipped(skip_reason(vid))) for vid in wanted if vid not in have]

