"""One decoded record per frame, built from the receive pipeline's inspection.

:class:`Inspector` is the dump's sans-I/O core: it takes a frame (plus where
and when it was seen) and returns a :class:`Record` holding everything the
dump prints. Nothing here reads files, sockets or the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import AmpError
from ..wire.cbor import DEFAULT_LIMITS, DecodeLimits
from ..wire.frames import Frame, FrameType
from ..wire.identity import KeyResolver
from ..wire.receive import Finding, Inspection, ReceivePipeline
from ..wire.registry import MessageType, type_name
from ..wire.signing import Profile
from ..wire.transport import decode_control_payload
from .steering import steering_notes

__all__ = ["Record", "Inspector", "CddlVerdict", "load_schemas"]


@dataclass(frozen=True, slots=True)
class CddlVerdict:
    """Outcome of the CDDL check of one body."""

    status: str  # "valid" | "invalid" | "unavailable" (no schema engine / body unknown)
    failing_paths: tuple[str, ...] = ()
    extension_keys: tuple[str, ...] = ()


@dataclass(slots=True)
class Record:
    """Everything the dump knows about one frame.

    Mutable only while the dump assembles it (correlation fills ``answers``,
    ``latency_ms`` and ``flags`` after later frames arrive).
    """

    index: int
    frame_type: FrameType | None
    raw: bytes
    direction: str | None = None  # "c2s" / "s2c"
    src: str | None = None
    dst: str | None = None
    at: float | None = None  # capture time, Unix seconds
    # AMP envelope (None for control frames or undecodable input)
    typ: int | None = None
    id: bytes | None = None
    sender: str | None = None
    to: Any = None
    ts: int | None = None
    ttl: int | None = None
    reply_to: bytes | None = None
    thread_id: bytes | None = None
    encrypted: bool = False
    body: Any = None
    body_known: bool = False
    decrypted: bool = False
    signature: str | None = None  # valid | invalid | unknown-key
    signature_profile: str | None = None  # the profile under which it verified
    signature_note: str | None = None  # why the signature could not be checked, when that is not obvious
    time: str | None = None  # TimeVerdict value
    cddl: CddlVerdict = CddlVerdict("unavailable")
    ext: Any = None  # the envelope's ext map (unsigned, RFC 001 §8.7), as sent
    control: Any = None  # decoded payload of a HANDSHAKE/GOAWAY/ERROR/PING/PONG frame
    errors: list[Finding] = field(default_factory=list)
    # correlation
    answers: tuple[str, str] | None = None  # (request id hex, request type name)
    latency_ms: float | None = None
    flags: list[str] = field(default_factory=list)  # correlation problems (count for --strict)
    notes: list[str] = field(default_factory=list)  # informational only
    # RFC 005: a CAP_INVOKE's body.delegation (or a DELEG_GRANT's credential)
    # explained: {"links": [...], "verdict": {...}} as ampcap.deleg.explain gives
    delegation: dict[str, Any] | None = None
    # RFC 006 (dump/sessions.py): the session (hex id) it belongs to, its control op
    session: str | None = None
    session_op: str | None = None
    input_answer: bool = False  # a RESPONSE answering an INPUT_REQUIRED

    @property
    def typ_name(self) -> str | None:
        return type_name(self.typ) if self.typ is not None else None

    @property
    def is_amp(self) -> bool:
        return self.frame_type in (None, FrameType.AMP_MESSAGE)


def load_schemas() -> Any | None:
    """The compiled CDDL schema set (None if the packaged schemas cannot be
    loaded, which a broken installation would cause: the dump then says
    "unavailable" instead of failing)."""
    from ..schema import load_schemas as _load

    try:
        return _load()
    except (AmpError, OSError):
        return None


class Inspector:
    """Turns frames into :class:`Record` values (sans-I/O)."""

    def __init__(self, resolver: KeyResolver, *, decrypt_with: Sequence[bytes] = (),
                 profile: Profile = Profile.RFC, schemas: Any | None = None,
                 limits: DecodeLimits = DEFAULT_LIMITS,
                 now_ms: Callable[[Record], int] | int = 0) -> None:
        # The pipeline gets no schemas: the dump runs the CDDL check itself so
        # it can report the verdict, failing paths and extension keys apart.
        self._pipeline = ReceivePipeline(resolver, limits=limits, decrypt_with=list(decrypt_with),
                                         profile=profile)
        self._schemas = schemas
        self._resolver = resolver
        self._now = now_ms
        self._count = 0

    def frame(self, frame: Frame, *, direction: str | None = None, src: str | None = None,
              dst: str | None = None, at: float | None = None) -> Record:
        rec = Record(index=self._count, frame_type=frame.type, raw=frame.payload,
                     direction=direction, src=src, dst=dst, at=at)
        self._count += 1
        if frame.type is FrameType.AMP_MESSAGE:
            self._amp(rec)
        else:
            try:
                rec.control = decode_control_payload(frame.type, frame.payload)
            except AmpError as exc:
                rec.errors.append(Finding.of(exc))
        return rec

    def message(self, data: bytes, **where: Any) -> Record:
        """A bare amp-message (no framing)."""
        return self.frame(Frame(FrameType.AMP_MESSAGE, bytes(data)), **where)

    def stream_error(self, exc: AmpError, *, direction: str | None = None, src: str | None = None,
                     dst: str | None = None, at: float | None = None, raw: bytes = b"") -> Record:
        """A record for bytes that could not even be framed."""
        rec = Record(index=self._count, frame_type=None, raw=raw, direction=direction, src=src,
                     dst=dst, at=at, errors=[Finding.of(exc)])
        self._count += 1
        return rec

    # ---------------------------------------------------------------- AMP

    def _amp(self, rec: Record) -> None:
        now = self._now(rec) if callable(self._now) else self._now
        report: Inspection = self._pipeline.inspect(rec.raw, now)
        rec.errors.extend(report.findings)
        env = report.envelope
        if env is not None:
            rec.typ, rec.id, rec.sender, rec.to = env.typ, env.id, env.sender, env.to
            rec.ts, rec.ttl, rec.reply_to, rec.thread_id = env.ts, env.ttl, env.reply_to, env.thread_id
            rec.encrypted = env.enc is not None
        elif isinstance(report.decoded, dict):
            _partial_fields(rec, report.decoded)
        if report.decoded is None:
            return  # not CBOR: no verdicts to give
        rec.body, rec.body_known, rec.decrypted = report.body, report.body_known, report.decrypted
        rec.signature = report.signature.value
        if report.signature_profile is not None:
            rec.signature_profile = report.signature_profile.value
        if report.needs_secret:
            rec.signature_note = ("the sender's key is known, but the signature covers the encrypted plaintext: "
                                  "it cannot be checked without the recipient's X25519 secret")
        rec.time = report.time.value
        if env is not None:
            rec.ext = env.ext
            rec.notes.extend(steering_notes(env, rec.body, rec.body_known, self._resolver))  # R23
        if rec.typ is not None and rec.body_known:
            rec.cddl = self._cddl(rec)
            if isinstance(rec.body, dict) and ("delegation" in rec.body or rec.typ == _DELEG_GRANT):
                rec.delegation = self._delegation(rec, now)
            if rec.typ == _DECLARE:
                from .descriptors import descriptor_notes

                rec.notes.extend(descriptor_notes(rec.body, rec.sender))

    def _delegation(self, rec: Record, now: int) -> dict[str, Any] | None:
        """The chain a message carries and the RFC 005 §6.1 verdict a
        verifier at ``to`` would give its sender (revocations are not known
        to the dump); a DELEG_GRANT's credential is judged as the chain it starts."""
        from ..deleg.explain import explain_chain

        body = rec.body
        if not isinstance(body, dict) or rec.sender is None or rec.typ is None:
            return None
        verifier_did = rec.to if isinstance(rec.to, str) else None
        caller: str | None = None
        capability: str | None = None
        if rec.typ == _DELEG_GRANT:
            evidence: Any = {"chain": [body.get("credential")]}
        else:
            evidence = body.get("delegation")
            caller = rec.sender
            named = body.get("id", body.get("capability"))
            if isinstance(named, str):
                version = body.get("version")
                capability = f"{named}:{version}" if "id" not in body and isinstance(version, str) else named
        report = explain_chain(evidence if isinstance(evidence, dict) else {"chain": evidence}, caller=caller,
                               capability=capability, verifier_did=verifier_did, now_ms=now,
                               resolver=self._resolver, typ=rec.typ)
        return {"links": report["links"], "verdict": report["verdict"], "summary": report["lines"][-1]}

    def _cddl(self, rec: Record) -> CddlVerdict:
        if self._schemas is None or rec.typ is None:
            return CddlVerdict("unavailable")
        try:
            violations = self._schemas.validate_body(rec.typ, rec.body)
        except AmpError as exc:
            rec.errors.append(Finding.of(exc))
            return CddlVerdict("invalid", (exc.path or "body",))
        failing: list[str] = []
        extensions: list[str] = []
        for v in violations:
            path = _body_path(getattr(v, "path", None))
            if getattr(v, "kind", "error") == "extension-key":
                extensions.append(path)
                continue
            failing.append(path)
            rec.errors.append(Finding(int(getattr(v, "code", 1001)),
                                      f"body does not match its schema: expected {getattr(v, 'expected', '?')}, "
                                      f"found {getattr(v, 'found', '?')}", path))
        return CddlVerdict("invalid" if failing else "valid", tuple(failing), tuple(extensions))


_DELEG_GRANT = int(MessageType.DELEG_GRANT)
_DECLARE = int(MessageType.CAP_DECLARE)


def _body_path(path: Any) -> str:
    if path is None or path == "":
        return "body"
    text = str(path)
    if text.startswith("body"):
        return text
    return "body" + (text if text.startswith("[") else "." + text)


def _partial_fields(rec: Record, m: dict[Any, Any]) -> None:
    """Best-effort fields of a map that failed the envelope shape check, so the
    dump still shows what it can."""

    def pick(key: str, kind: type | tuple[type, ...]) -> Any:
        v = m.get(key)
        return v if isinstance(v, kind) and not isinstance(v, bool) else None

    rec.typ = pick("typ", int)
    rec.id = pick("id", bytes)
    rec.sender = pick("from", str)
    to = m.get("to")
    # A list only when every item is text: a peer may send anything there, and
    # the renderers join and serialise it (the finding says what was wrong).
    rec.to = to if isinstance(to, str) or (isinstance(to, list) and all(isinstance(t, str) for t in to)) else None
    rec.ts = pick("ts", int)
    rec.ttl = pick("ttl", int)
    rec.reply_to = pick("reply_to", bytes)
    rec.thread_id = pick("thread_id", bytes)
    rec.encrypted = "enc" in m
