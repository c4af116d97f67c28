"""OpenTelemetry tracing at the edge (``serve --trace``, ``invoke --trace``,
``Peer(tracing=...)``): a span per invoke on each side, one trace across
nested invokes. Imported only when tracing is asked for, and with it
``opentelemetry`` (the ``ampcap[tracing]`` extra): a daemon that does not
trace pays one ``is None`` test per invoke and loads none of this.

**Provider side.** The dispatch hands every CAP_INVOKE it accepts for
handling to :meth:`DaemonTracing.received`, which starts a SERVER span
(named after the capability asked for) whose parent is the caller's span
when the invoke carries a verified ``ampcap.trace`` entry
(wire/trace_context.py), or no parent at all. The daemon's action stream
(:meth:`observe`, beside ``serve --metrics``) names the span after the
resolved capability when the invoke starts and ends it with the invoke's one
terminal reply (CAP_RESULT or ERROR): outcome ``ok`` or the error code. The
job's own task makes the span its current one (:meth:`entering`), so what
the capability calls through the Python API, and the spans its own code
starts, are children of it.

**Caller side.** :meth:`calling` starts a CLIENT span, a child of whatever
span is current (in a capability: the invoke being served), and, when the
link agreed ``ampcap.trace`` in HELLO with the peer the invoke goes to
(not someone behind a relay), the ``ext`` entry carrying its context.
:meth:`ended` ends it with the outcome.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from ..._version import __version__
from ...errors import AmpError
from ...peer.actions import Execute
from ...peer.dedupe import InvokeKey
from ...peer.outbound import Send
from ...wire.extensions import TRACE
from ...wire.registry import MessageType, error_info
from ...wire.trace_context import TraceParent, parse_tracestate, read_entry, signed_entry
from ..daemon.link import agreed_extensions

__all__ = ["DaemonTracing", "trace_daemon", "tracer_provider", "otlp_exporter_class", "EXPORTERS"]

log = logging.getLogger("ampcap.daemon")

_RESULT, _ERROR = int(MessageType.CAP_RESULT), int(MessageType.ERROR)
# Spans open at once (invokes awaiting their terminal reply: about the daemon's
# in flight): past it the oldest ends, marked abandoned, whatever befalls a reply.
MIN_OPEN_SPANS = 10_000
_TEXT = 200  # a peer's text (a capability name) is cut to this in attributes
EXPORTERS = ("console", "otlp")  # besides a file path (serve --trace WHERE)


def _cut(text: Any) -> str:
    return text[:_TEXT] if type(text) is str else "?"


def _requested(body: Any) -> str:
    """The capability a CAP_INVOKE body asks for, as the span's first name."""
    if type(body) is not dict:
        return "?"
    return _cut(body.get("id") if "id" in body else body.get("capability"))


def _outcome(out: Any) -> tuple[str, int | None]:
    """``("ok", None)`` or ``(code as text, code)`` for a terminal reply."""
    body = out.body
    if type(body) is not dict:
        return "?", None
    if out.typ == _RESULT:
        if "result" in body:
            return "ok", None
        body = body.get("error")
        if type(body) is not dict:
            return "?", None
    code = body.get("code")
    return (str(code), code) if type(code) is int else ("?", None)


def _end(span: Any, outcome: str, code: int | None, message: str | None = None) -> None:
    if code is None:
        span.set_attribute("ampcap.outcome", outcome)
    else:
        span.set_attributes({"ampcap.outcome": outcome, "ampcap.error.code": code})
        span.set_status(Status(StatusCode.ERROR, f"{code} {error_info(code).name}" +
                               (f": {message[:_TEXT]}" if message else "")))
    span.end()


class DaemonTracing:
    """One daemon's spans: the provider's, by invoke key, until their terminal
    reply; the caller's, handed back to :class:`~ampcap.net.daemon.calls.Calls`."""

    def __init__(self, provider: Any, *, did: str, sign: Callable[[bytes], bytes],
                 public_key: Callable[[str], bytes], max_open: int = MIN_OPEN_SPANS) -> None:
        self.provider = provider
        self._max_open = max_open
        self._tracer = provider.get_tracer("ampcap", __version__)
        self._did, self._sign, self._public_key = did, sign, public_key
        self._spans: dict[InvokeKey, Any] = {}

    # ------------------------------------------------------------ provider

    def received(self, link: Any, inbound: Any) -> None:
        """A CAP_INVOKE about to be handled: its SERVER span starts (once per
        invoke: a duplicate while it runs joins the span already open)."""
        env = inbound.envelope
        key = InvokeKey(env.sender, env.id)
        if key in self._spans:
            return
        parent: TraceParent | None = None
        # Only from the peer that agreed the extension in HELLO on this link
        # (an HTTP POST's sink has none; through a relay the sender is not the link's peer).
        if env.ext is not None and TRACE in agreed_extensions(link) and env.sender == getattr(link, "peer_did", None):
            parent = read_entry(env.ext, env.sender, env.id, self._public_key)
        if parent is None:
            ctx = otel_context.Context()  # a root: never the connection task's own context
        else:
            state = TraceState.from_header([parent.tracestate]) if parent.tracestate else None
            remote = SpanContext(parent.trace_id, parent.span_id, is_remote=True,
                                 trace_flags=TraceFlags(parent.flags & 0xFF), trace_state=state)
            ctx = trace.set_span_in_context(NonRecordingSpan(remote))
        span = self._tracer.start_span(_requested(inbound.body), context=ctx, kind=SpanKind.SERVER, attributes={
            "rpc.system": "amp", "ampcap.caller": _cut(env.sender), "ampcap.invoke_id": env.id.hex()})
        if len(self._spans) >= self._max_open:  # bounded whatever happens to a reply
            oldest = next(iter(self._spans))
            _end(self._spans.pop(oldest), "abandoned", None)
        self._spans[key] = span

    def observe(self, actions: list[Any]) -> None:
        """The daemon's action stream: an invoke starting (its resolved
        capability) and every terminal reply (its span ends)."""
        spans = self._spans
        if not spans:
            return
        for action in actions:
            kind = type(action)
            if kind is Execute:
                job = action.job
                span = spans.get(job.key)
                if span is not None:
                    span.update_name(job.capability_id)
                    span.set_attributes({"ampcap.capability.name": job.descriptor.name,  # the id: the span's name
                                         "ampcap.capability.version": str(job.descriptor.version)})
            elif kind is Send:
                out = action.out
                if (out.typ == _RESULT or out.typ == _ERROR) and out.reply_to is not None and type(out.to) is str:
                    span = spans.pop(InvokeKey(out.to, out.reply_to), None)
                    if span is not None:
                        _end(span, *_outcome(out))

    def entering(self, job: Any) -> None:
        """In the job's own task: the invoke's span becomes the current one
        there (the task's context dies with it, so nothing is detached)."""
        span = self._spans.get(job.key)
        if span is not None:
            otel_context.attach(trace.set_span_in_context(span))

    # -------------------------------------------------------------- caller

    def calling(self, link: Any, target: Any, to: str | None) -> tuple[Any, Callable[[bytes], dict[str, Any] | None]]:
        """A CLIENT span for an invoke of ``target`` on ``link`` (addressed to
        ``to``), and the invoke's ``ext`` maker: the entry carrying the span's
        context when the link agreed ``ampcap.trace`` in HELLO with the peer
        the invoke goes to (not someone behind a relay), else None (then
        nothing is sent)."""
        name = target if isinstance(target, str) else target[0]
        span = self._tracer.start_span(_cut(name), kind=SpanKind.CLIENT, attributes={
            "rpc.system": "amp", "ampcap.provider": _cut(to or link.peer_did or "-")})
        ctx = span.get_span_context()
        parent: TraceParent | None = None
        if ctx.is_valid and TRACE in link.driver.conn.extensions and (to is None or to == link.peer_did):
            # A tracestate a receiver would not read (over 512 characters) is not sent.
            state = parse_tracestate(ctx.trace_state.to_header()) if ctx.trace_state else None
            parent = TraceParent(trace_id=ctx.trace_id, span_id=ctx.span_id, flags=int(ctx.trace_flags),
                                 tracestate=state)

        def ext_for(message_id: bytes) -> dict[str, Any] | None:
            span.set_attribute("ampcap.invoke_id", message_id.hex())
            return None if parent is None else signed_entry(self._sign, self._did, message_id, parent)

        return span, ext_for

    def ended(self, span: Any, error: BaseException | None) -> None:
        """The caller's invoke ended: ``ok``, its AmpError's code, or ``cancelled``."""
        if error is None:
            _end(span, "ok", None)
        elif isinstance(error, AmpError):
            _end(span, str(error.code), error.code, error.message)
        else:
            span.set_attribute("ampcap.outcome", "cancelled" if type(error).__name__ == "Cancelled" else "failed")
            span.end()

    def shutdown(self) -> None:
        """End what is still open (a daemon stopping) and flush the exporter."""
        for span in self._spans.values():
            _end(span, "abandoned", None)
        self._spans.clear()
        shutdown = getattr(self.provider, "shutdown", None)
        if callable(shutdown):
            shutdown()


def trace_daemon(daemon: Any, provider: Any = None, *, max_open: int | None = None) -> DaemonTracing:
    """Make ``daemon`` trace its invokes with ``provider`` (None: the global
    TracerProvider OpenTelemetry was configured with). ``max_open`` spans at
    once: by default twice the daemon's in-flight limit, at least 10,000."""
    if max_open is None:
        max_open = max(MIN_OPEN_SPANS, 2 * daemon.config.max_in_flight)
    tracing = DaemonTracing(provider if provider is not None else trace.get_tracer_provider(),
                            did=daemon.identity.did, sign=daemon.identity.sign,
                            public_key=daemon.pipeline.resolver.ed25519_for, max_open=max_open)
    daemon.traced_by(tracing)
    return tracing


def tracer_provider(where: str, *, service: str, did: str) -> Any:
    """A TracerProvider exporting to ``where``: ``console`` (one JSON object
    per span on stderr), ``otlp`` (OTLP over HTTP or gRPC, whichever exporter
    package is installed; the endpoint from ``OTEL_EXPORTER_OTLP_ENDPOINT``),
    or a file path (one JSON object per span, appended). The standard
    ``OTEL_*`` variables (service name, resource attributes, sampler) apply.
    Raises ValueError with a one-line reason when it cannot be built."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    exporter: Any
    if where == "console":
        exporter = ConsoleSpanExporter(out=sys.stderr, formatter=_one_line)
    elif where == "otlp":
        exporter = _otlp_exporter()
    else:
        try:
            out = open(where, "a", encoding="utf-8")  # noqa: SIM115 - the exporter keeps it open
        except OSError as exc:
            raise ValueError(f"cannot write spans to {where}: {exc.strerror or exc}") from None
        exporter = ConsoleSpanExporter(out=out, formatter=_one_line)
    # OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) wins over ours.
    resource = Resource.create({"ampcap.did": did})
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": service}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _one_line(span: Any) -> str:
    import json

    return json.dumps(json.loads(span.to_json()), separators=(",", ":")) + "\n"


def otlp_exporter_class() -> Any:
    """The OTLP span exporter installed (HTTP first, else gRPC); ValueError when neither is."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ValueError("--trace otlp needs an OTLP exporter: pip install opentelemetry-exporter-otlp "
                             "(or use --trace console, or --trace FILE)") from None
    return OTLPSpanExporter


def _otlp_exporter() -> Any:
    return otlp_exporter_class()()
