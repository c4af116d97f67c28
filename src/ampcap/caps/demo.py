"""The demo capability set of ``ampcap serve --demo`` (spec map table).

The set is plain TOML-shaped data run through
:func:`ampcap.caps.manifest.manifest_from_data`, so ``--demo`` and
``--manifest FILE`` share one code path; the callables below are the
bindings it names. They are pure: time, sleeping and progress come from the
:class:`~ampcap.caps.binding.InvocationContext` the executor passes in.

Input schemas are closed (``additionalProperties: false``) so that a typo
in a parameter name is a visible 4004 instead of a silently ignored field.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..errors import AmpError
from .binding.context import InvocationContext
from .manifest import Manifest, manifest_from_data

__all__ = [
    "DEMO_NAMESPACE",
    "MAX_SLEEP_MS",
    "demo_manifest_data",
    "demo_manifest",
    "echo",
    "add",
    "sleep",
    "fail",
    "current_time",
    "noop",
    "DemoFailure",
]

DEMO_NAMESPACE = "org.ampcap.demo"
MAX_SLEEP_MS = 600_000
# Progress is reported every tenth of the sleep, but no more often than
# every 100 ms and no less often than every second.
_MIN_STEP_MS, _MAX_STEP_MS = 100, 1000


class DemoFailure(RuntimeError):
    """Raised on purpose by ``org.ampcap.demo.fail``; the runner maps it to 5001."""


# ---------------------------------------------------------------- callables


def _version(context: InvocationContext | None) -> str:
    return context.version if context is not None else "unknown"


def echo(params: Mapping[str, Any], context: InvocationContext) -> dict[str, Any]:
    """echo 1.0.0 / 1.1.0 return message + version; 2.0.0 adds length."""
    message = params["message"]
    version = _version(context)
    result: dict[str, Any] = {"message": message, "version": version}
    if version.split(".", 1)[0] == "2":
        result["length"] = len(message)
    return result


def add(params: Mapping[str, Any]) -> dict[str, Any]:
    return {"sum": params["a"] + params["b"]}


async def sleep(params: Mapping[str, Any], context: InvocationContext) -> dict[str, Any]:
    """Sleep ``ms`` milliseconds, reporting PROGRESS along the way."""
    total = int(params["ms"])
    step = min(_MAX_STEP_MS, max(_MIN_STEP_MS, total // 10))
    done = 0
    while done < total:
        chunk = min(step, total - done)
        await context.sleep(chunk)
        done += chunk
        await context.progress(round(100.0 * done / total, 1), f"slept {done} of {total} ms")
    return {"slept_ms": total}


async def confirm(params: Mapping[str, Any], context: InvocationContext) -> dict[str, Any]:
    """Ask the caller a question mid-call (RFC 006 INPUT_REQUIRED) and return
    its answer. Not in the demo set (its contract is fixed); a manifest binds
    it: ``binding = { python = "ampcap.caps.demo:confirm" }``, params
    ``{"question": str, "options"?: [str]}``."""
    options = params.get("options")
    answer = await context.ask(str(params.get("question", "Proceed?")),
                               options=list(options) if options is not None else None,
                               timeout_ms=params.get("timeout_ms"))
    return {"answer": answer}


def fail(params: Mapping[str, Any]) -> None:
    raise DemoFailure("org.ampcap.demo.fail always fails")


def current_time(params: Mapping[str, Any], context: InvocationContext) -> dict[str, Any]:
    """The context's clock in a timezone (default UTC) and a format."""
    zone_name = params.get("timezone", "UTC")
    try:
        zone = ZoneInfo(zone_name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        # The schema can only say "string"; an unknown zone is still the
        # caller's mistake, reported with the same class as a schema miss.
        raise AmpError(4004, f"params.timezone: unknown timezone {zone_name!r}", path="params.timezone") from None
    now_ms = context.now_ms()
    moment = datetime.datetime.fromtimestamp(now_ms / 1000, tz=datetime.timezone.utc).astimezone(zone)
    fmt = params.get("format", "iso8601")
    if fmt == "unix":
        return {"time": now_ms // 1000}
    if fmt == "human":
        return {"time": moment.strftime("%A, %d %B %Y, %H:%M:%S %Z")}
    return {"time": moment.isoformat(timespec="milliseconds")}


def noop(params: Mapping[str, Any]) -> None:
    return None


# --------------------------------------------------------------- the data


def _closed(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
            "properties": properties, "required": required, "additionalProperties": False}


_ECHO_IN = _closed({"message": {"type": "string"}}, ["message"])


def _echo_out(with_length: bool) -> dict[str, Any]:
    props: dict[str, Any] = {"message": {"type": "string"}, "version": {"type": "string"}}
    if with_length:
        props["length"] = {"type": "integer", "minimum": 0}
    return _closed(props, list(props))


def _cap(name: str, version: str, binding: str, input_schema: dict[str, Any],
         output_schema: Any, *, inline: bool = False, **extra: Any) -> dict[str, Any]:
    call: dict[str, Any] = {"python": f"{__name__}:{binding}"}
    if inline:  # pure and quick: a worker thread would cost more than the call
        call["inline"] = True
    return {"name": f"{DEMO_NAMESPACE}.{name}", "version": version,
            "input_schema": input_schema, "output_schema": output_schema,
            "binding": call, **extra}


def demo_manifest_data() -> dict[str, Any]:
    """The demo set in the shape ``tomllib`` gives for a manifest file."""
    echo_minor = {"policy": "range", "supported_ranges": [">=1.0.0 <2.0.0"], "aliases": ["echo"]}
    return {
        "bundle_id": f"{DEMO_NAMESPACE}.schemas",
        "capability": [
            _cap("echo", "1.0.0", "echo", _ECHO_IN, _echo_out(False), inline=True, **echo_minor,
                 notes="Returns the message and the version that ran."),
            _cap("echo", "1.1.0", "echo", _ECHO_IN, _echo_out(False), inline=True, **echo_minor,
                 notes="Returns the message and the version that ran."),
            _cap("echo", "2.0.0", "echo", _ECHO_IN, _echo_out(True), inline=True, aliases=["echo"],
                 policy="range", supported_ranges=[">=2.0.0 <3.0.0"],
                 notes="Major 2: also returns the message length."),
            _cap("math.add", "1.0.0", "add",
                 _closed({"a": {"type": "number"}, "b": {"type": "number"}}, ["a", "b"]),
                 _closed({"sum": {"type": "number"}}, ["sum"]),
                 inline=True, aliases=["ossa:demo/add@1.0"], policy="range", supported_ranges=[">=1.0.0 <2.0.0"],
                 notes="Adds two numbers; also declared as OSSA ossa:demo/add@1.0."),
            _cap("sleep", "1.0.0", "sleep",
                 _closed({"ms": {"type": "integer", "minimum": 0, "maximum": MAX_SLEEP_MS}}, ["ms"]),
                 _closed({"slept_ms": {"type": "integer"}}, ["slept_ms"]),
                 notes="Sleeps, sending PROGRESS while it does."),
            _cap("fail", "1.0.0", "fail", _closed({}, []), {"type": "null"},
                 stability="experimental", notes="Always fails with 5001."),
            _cap("current_time", "1.0.0", "current_time",
                 _closed({"timezone": {"type": "string", "minLength": 1, "maxLength": 64},
                          "format": {"enum": ["iso8601", "unix", "human"]}}, []),
                 _closed({"time": {"type": ["string", "integer"]}}, ["time"]),
                 notes="Current time; timezone is an IANA name (default UTC)."),
            _cap("noop", "1.0.0", "noop", _closed({}, []), {"type": "null"}, inline=True, notes="Does nothing."),
        ],
    }


def demo_manifest() -> Manifest:
    return manifest_from_data(demo_manifest_data(), source="<demo>")
