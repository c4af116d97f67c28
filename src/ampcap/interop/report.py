"""The interop report: the suite's JSON shape, its validation, the text table.

The report must be valid against the suite's ``interop-report.schema.json``
(suite ``2026-02-07-draft-v1``). The schema is small, so ampcap carries it
as data below and validates every report before writing it, with the
compiled validator the project already depends on (fastjsonschema). A test
checks that this copy still equals the suite's file, and validates produced
reports with ``jsonschema`` against that file as an independent check.
"""

from __future__ import annotations

import datetime
import errno
import json
import os
import platform
import stat
from functools import cache
from pathlib import Path
from typing import Any, Callable

import fastjsonschema

from .. import __version__
from ..display import json_safe, printable
from ..errors import AmpError
from ..files.write import open_for_writing, write_whole
from .runner import RunResult
from .vectors import Status

__all__ = ["SUITE_VERSION", "REPORT_SCHEMA", "build_report", "validate_report", "write_report", "render_table"]

SUITE_VERSION = "2026-02-07-draft-v1"

_TEXT = {"type": "string"}
_NONEMPTY = {"type": "string", "minLength": 1}

# The suite's report schema, written out as data (keys in the suite's order).
REPORT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": f"https://agentries.dev/conformance/{SUITE_VERSION}/interop-report.schema.json",
    "title": "AMP Interop Report",
    "type": "object",
    "required": ["suite_version", "implementation", "run", "results"],
    "properties": {
        "suite_version": {"type": "string", "const": SUITE_VERSION},
        "implementation": {
            "type": "object",
            "required": ["id", "version"],
            "properties": {"id": _NONEMPTY, "version": _NONEMPTY, "repository": _TEXT, "commit": _TEXT},
            "additionalProperties": False,
        },
        "run": {
            "type": "object",
            "required": ["executed_at", "environment"],
            "properties": {
                "executed_at": _TEXT,
                "environment": {
                    "type": "object",
                    "required": ["os", "arch", "runtime"],
                    "properties": {"os": _TEXT, "arch": _TEXT, "runtime": _TEXT, "notes": _TEXT},
                    "additionalProperties": False,
                },
            },
            "additionalProperties": False,
        },
        "results": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["vector_id", "status"],
                "properties": {
                    "vector_id": _NONEMPTY,
                    "status": {"type": "string", "enum": ["pass", "fail", "skip"]},
                    "notes": _TEXT,
                    "evidence_ref": _TEXT,
                },
                "additionalProperties": False,
            },
        },
    },
    "additionalProperties": False,
}


@cache
def _validator() -> Callable[[Any], Any]:
    # fastjsonschema reads draft-07 semantics; every keyword this schema uses
    # (type, const, enum, required, properties, additionalProperties, items,
    # minItems, minLength) means the same in 2020-12, so drop the $schema tag.
    schema = {k: v for k, v in REPORT_SCHEMA.items() if k != "$schema"}
    return fastjsonschema.compile(schema)


def validate_report(report: Any) -> None:
    """Raise ``AmpError(1001)`` naming the first violation of the suite schema."""
    try:
        _validator()(report)
    except fastjsonschema.JsonSchemaValueException as exc:
        raise AmpError(1001, f"interop report does not match the suite schema: {exc.message}") from None


def _implementation(run: RunResult) -> dict[str, str]:
    """Describe the TARGET from what it disclosed: HELLO agent_info
    ``implementation`` is conventionally ``name/version`` (RFC 001 §13.3)."""
    info = run.target_info or {}
    impl = info.get("implementation")
    if isinstance(impl, str) and impl.strip():
        name, _, version = impl.strip().partition("/")
        return {"id": name or impl, "version": version or "unknown"}
    label = info.get("name")
    if isinstance(label, str) and label.strip():
        return {"id": label.strip(), "version": "unknown"}
    return {"id": run.target_did or run.target, "version": "unknown"}


def build_report(run: RunResult, *, executed_at: datetime.datetime | None = None,
                 settings_note: str = "", implementation: dict[str, str] | None = None) -> dict[str, Any]:
    """The report of ``run``. ``implementation`` names the implementation
    under test when the caller knows it (``--self``: ampcap itself); else it
    comes from the target's HELLO ``agent_info``."""
    when = executed_at or datetime.datetime.now(datetime.timezone.utc)
    notes = f"ampcap {__version__} interop harness; target {run.target}"
    if run.target_did:
        notes += f" ({run.target_did})"
    if settings_note:
        notes += f"; {settings_note}"
    results = []
    for r in run.results:
        item: dict[str, Any] = {"vector_id": r.vector_id, "status": r.status.value}
        if r.notes:
            item["notes"] = r.notes
        results.append(item)
    report = {
        "suite_version": SUITE_VERSION,
        "implementation": implementation or _implementation(run),
        "run": {
            "executed_at": when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "environment": {
                "os": f"{platform.system().lower()}-{platform.release()}",
                "arch": platform.machine() or "unknown",
                "runtime": f"{platform.python_implementation().lower()}-{platform.python_version()}",
                "notes": notes,
            },
        },
        "results": results,
    }
    validate_report(report)
    return report


def write_report(report: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Validate, then write: a file atomically (a half-written report is
    never left behind), anything else (``/dev/null``, ``/dev/stdout``, a
    FIFO) directly, because renaming a file over it would replace the
    device or pipe itself."""
    validate_report(report)
    given = Path(path)
    target = given.resolve() if given.is_symlink() else given  # a link is written through, not replaced
    text = json_safe(json.dumps(report, indent=2, ensure_ascii=False)) + "\n"
    try:
        st: os.stat_result | None = target.stat()
    except FileNotFoundError:
        st = None  # to be created
    if st is not None and not stat.S_ISREG(st.st_mode):
        with os.fdopen(open_for_writing(target), "w", encoding="utf-8") as fh:
            fh.write(text)
        return given
    if st is not None and not os.access(target, os.W_OK):
        raise PermissionError(errno.EACCES, "the file is read-only", str(given))
    # A replaced report keeps the mode it had.
    write_whole(target, text.encode("utf-8"), mode=stat.S_IMODE(st.st_mode) if st is not None else None)
    return given


def render_table(run: RunResult, *, width: int = 100) -> str:
    """A fixed-width pass/fail/skip table plus a totals line."""
    id_w = max([len(r.vector_id) for r in run.results] + [6])
    lines = [f"{'VECTOR':<{id_w}}  RESULT  NOTES"]
    for r in run.results:
        note = printable(" ".join(r.notes.split()))  # notes quote what the target sent
        room = max(20, width - id_w - 10)
        if len(note) > room:
            note = note[: room - 1] + "…"
        lines.append(f"{r.vector_id:<{id_w}}  {r.status.value.upper():<6}  {note}")
    counts = {s: sum(1 for r in run.results if r.status is s) for s in Status}
    lines.append(f"{counts[Status.PASS]} passed, {counts[Status.FAIL]} failed, {counts[Status.SKIP]} skipped "
                 f"against {run.target}")
    return "\n".join(lines)
