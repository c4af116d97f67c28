"""``--trace WHERE`` (``serve`` and ``invoke``): OpenTelemetry spans for every
invoke, exported where the user can see them.

WHERE is ``console`` (one JSON object per span on stderr), ``otlp`` (an
OTLP collector at ``OTEL_EXPORTER_OTLP_ENDPOINT``; needs
``opentelemetry-exporter-otlp``) or a file path (one JSON object per span,
appended; a file named ``console`` or ``otlp`` is ``./console``). The
``ampcap[tracing]`` extra is imported only with the option
(net/features/tracing.py); without it nothing of OpenTelemetry loads.
"""

from __future__ import annotations

import argparse
from typing import Any

from .errors import CommandError

__all__ = ["add_trace_option", "check_tracing", "tracer_provider_for", "start_tracing"]

_MISSING = "--trace needs OpenTelemetry: pip install 'ampcap[tracing]'"


def add_trace_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--trace", default=None, metavar="WHERE",
                        help=f"OpenTelemetry spans for {what}, exported to WHERE: 'console' (JSON on stderr), "
                             "'otlp' (OTEL_EXPORTER_OTLP_ENDPOINT; needs opentelemetry-exporter-otlp) or a file "
                             "(JSON lines, appended); the caller's trace context travels in a signed ext entry "
                             "between peers that both trace, so nested invokes join one trace (docs/scaling.md). "
                             "OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES and OTEL_TRACES_SAMPLER apply")


def check_tracing(where: str) -> None:
    """Fail now (one line) when ``--trace WHERE`` cannot work: the extra is
    missing, or WHERE is ``otlp`` without an OTLP exporter installed."""
    try:
        from ..net.features.tracing import otlp_exporter_class
    except ImportError:
        raise CommandError(_MISSING) from None
    if where == "otlp":
        try:
            otlp_exporter_class()
        except ValueError as exc:
            raise CommandError(str(exc)) from None
    elif not where:
        raise CommandError("--trace needs WHERE: console, otlp or a file path")
    elif where != "console":
        try:
            open(where, "a", encoding="utf-8").close()  # noqa: SIM115 - only: can it be written?
        except OSError as exc:
            raise CommandError(f"cannot write spans to {where}: {exc.strerror or exc}") from None


def tracer_provider_for(where: str, *, service: str, did: str) -> Any:
    """The TracerProvider ``--trace WHERE`` asks for (CommandError when it cannot be built)."""
    check_tracing(where)
    from ..net.features.tracing import tracer_provider

    try:
        return tracer_provider(where, service=service, did=did)
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def start_tracing(daemon: Any, where: str, *, service: str) -> None:
    """Make ``daemon`` trace every invoke it serves or makes; its spans are
    flushed by ``daemon.tracing.shutdown()`` when it stops."""
    from ..net.features.tracing import trace_daemon

    trace_daemon(daemon, tracer_provider_for(where, service=service, did=daemon.identity.did))
