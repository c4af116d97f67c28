"""The receive-side checks of RFC 001, in one place and in one order.

    decode → shape (1001) → v supported (1004) → typ known (1005)
    → time: expiry, future skew, id timestamp (1003)
    → addressed to us, when the pipeline knows who we are (3001) → sender key (3001)
    → decrypt when ``enc`` (3001) → signature (1002) → decrypted body is CBOR (1001)
    → body schema and ACK source rules (1001 / 4001) → replay cache

:meth:`ReceivePipeline.check` stops at the first failure and raises it;
:meth:`ReceivePipeline.inspect` runs the same steps but records every finding
and keeps going wherever a later step can still say something (used by
``ampcap dump``). Both share :meth:`ReceivePipeline._run`, so the order cannot
drift between them.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Protocol

import msgspec

from ..errors import AmpError, SignedButRefused
from .authcrypt import decrypt
from .cbor import DEFAULT_LIMITS, DecodeLimits, dumps, loads
from .didkey import split_did_url
from .envelope import Envelope, envelope_from_map, id_timestamp
from .identity import KeyResolver
from .registry import MessageType, is_known_type
from .replay import ReplayCache, ReplayStatus
from .signing import Profile, SignedHeaders, sig_input_of, signed_headers, verify_signature

__all__ = [
    "Finding",
    "SignatureVerdict",
    "TimeVerdict",
    "Inbound",
    "Inspection",
    "ReceivePipeline",
    "addressed_to",
    "check_ack_source",
    "verifying_profile",
    "MAX_CLOCK_SKEW_MS",
    "ID_TS_TOLERANCE_MS",
]

_ACK = int(MessageType.ACK)
MAX_CLOCK_SKEW_MS = 30_000  # RFC 001 §8.3
ID_TS_TOLERANCE_MS = 1_000  # RFC 001 §4.2 / §8.3


class Finding(msgspec.Struct, frozen=True):
    code: int
    message: str
    path: str | None = None

    @classmethod
    def of(cls, exc: AmpError) -> Finding:
        return cls(exc.code, exc.message, exc.path)


class SignatureVerdict(enum.Enum):
    VALID = "valid"
    INVALID = "invalid"  # did not verify, or the message could not be checked at all
    UNKNOWN_KEY = "unknown-key"  # no key for the sender, or nothing to decrypt with


class TimeVerdict(enum.Enum):
    VALID = "valid"
    EXPIRED = "expired"  # now > ts + ttl
    FUTURE = "future"  # ts > now + skew
    ID_MISMATCH = "id-mismatch"  # id timestamp differs from ts by more than 1 s
    UNKNOWN = "unknown"  # not evaluated (undecodable message)


class BodySchemas(Protocol):
    """What the schema layer offers (``ampcap.schema.SchemaSet``)."""

    def validate_body(self, typ: int, body: Any) -> Sequence[Any]: ...


class Inbound(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A message that passed every check (a msgspec Struct: it is built once
    per received message, and msgspec's C constructor is the cheapest; like
    the Envelope it holds only decoded values, so it is not GC-tracked)."""

    envelope: Envelope
    body: Any  # decrypted when the message was encrypted
    raw: bytes
    duplicate: bool
    replay: ReplayStatus
    fingerprint: bytes  # hash of Sig_Input: equal for true retries
    decrypted: bool = False


class Inspection(msgspec.Struct):
    """Everything :meth:`ReceivePipeline.inspect` could learn about one message."""

    raw: bytes
    decoded: Any = None  # the decoded CBOR value, when it decoded
    envelope: Envelope | None = None
    body: Any = None
    body_known: bool = False  # False when the body stayed encrypted or undecodable
    decrypted: bool = False
    signature: SignatureVerdict = SignatureVerdict.INVALID
    signature_profile: Profile | None = None  # which Sig_Input variant verified
    # UNKNOWN_KEY although the sender's key is known: the message is
    # authcrypted, and without the recipient's secret its signed plaintext is not.
    needs_secret: bool = False
    time: TimeVerdict = TimeVerdict.UNKNOWN
    replay: ReplayStatus | None = None  # what check() would say; None when not reached
    findings: list[Finding] = msgspec.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings


def check_ack_source(env: Envelope, body: Any, trusted_relays: Collection[str]) -> None:
    """RFC 001 §16.1: an ACK claiming ``ack_source = "relay"`` must come from a
    trusted relay; anything else is a protocol error (vector N5 → 1001).
    (Whether a recipient ACK's sender was a recipient of the original needs the
    original message, so the peer layer checks that.)"""
    if env.typ != _ACK or type(body) is not dict:
        return
    if body.get("ack_source") == "relay":
        did, _ = split_did_url(env.sender)
        if did not in trusted_relays and env.sender not in trusted_relays:
            raise AmpError(1001, "ACK with ack_source 'relay' from a sender that is not a trusted relay",
                           path="body.ack_source")


_HELLO = int(MessageType.HELLO)


def addressed_to(to: str | Sequence[str], did: str) -> bool:
    """Does ``to`` (a DID or a list of DIDs, DID URLs allowed) name ``did``?"""
    if isinstance(to, str):
        return to == did or split_did_url(to)[0] == did
    return any(t == did or split_did_url(t)[0] == did for t in to)


def _secret_of(item: Any) -> bytes:
    return item if isinstance(item, bytes) else item.x25519_secret


class ReceivePipeline:
    """Receive-side validation of AMP messages (sans-I/O: time is an argument)."""

    def __init__(
        self,
        resolver: KeyResolver,
        *,
        limits: DecodeLimits = DEFAULT_LIMITS,
        max_skew_ms: int = MAX_CLOCK_SKEW_MS,
        replay: ReplayCache | None = None,
        schemas: BodySchemas | None = None,
        decrypt_with: Iterable[Any] | None = None,
        profile: Profile = Profile.RFC,
        supported_versions: Collection[int] = frozenset({1}),
        trusted_relays: Collection[str] = frozenset(),
        known_type: Callable[[int], bool] = is_known_type,
        recipient: str | None = None,
        carry_encrypted: bool = False,
    ) -> None:
        self.resolver = resolver
        self.limits = limits
        self.max_skew_ms = max_skew_ms
        self.replay = replay if replay is not None else ReplayCache()
        self.schemas = schemas
        self.decrypt_secrets = [_secret_of(x) for x in (decrypt_with or ())]
        self.profile = profile
        self.supported_versions = frozenset(supported_versions)
        self.trusted_relays = frozenset(trusted_relays)
        self.known_type = known_type
        # Our DID: a message whose ``to`` does not name it is refused, since
        # ``to`` is signed precisely so that a message cannot be rerouted
        # (RFC 001 §8.1; 3001 per §15.3, "not intended for recipient").
        self.recipient = recipient
        # A carrier (a relay) passes an authcrypted message on unchecked past
        # its header: its signature covers the plaintext, which only the
        # recipient can read and check (RFC 001 §8.6). The transport's
        # principal binding still holds for its ``from``.
        self.carry_encrypted = carry_encrypted

    # ----------------------------------------------------------------- API

    def check(self, data: bytes, now_ms: int) -> Inbound:
        """Run every check; raise the first failure as ``AmpError``."""
        result = self._run(bytes(data) if not isinstance(data, bytes) else data, now_ms, None)
        assert isinstance(result, Inbound)
        return result

    def inspect(self, data: bytes, now_ms: int) -> Inspection:
        """Run every check, collecting findings instead of stopping. The
        replay cache is consulted (``Inspection.replay``) but not updated, and
        a duplicate is not a finding: retries are legal (§8.4)."""
        raw = bytes(data) if not isinstance(data, bytes) else data
        report = Inspection(raw=raw)
        self._run(raw, now_ms, report)
        return report

    def time_verdict(self, env: Envelope, now_ms: int) -> TimeVerdict:
        if now_ms > env.ts + env.ttl:
            return TimeVerdict.EXPIRED
        if env.ts > now_ms + self.max_skew_ms:
            return TimeVerdict.FUTURE
        if abs(id_timestamp(env.id) - env.ts) > ID_TS_TOLERANCE_MS:
            return TimeVerdict.ID_MISMATCH
        return TimeVerdict.VALID

    # ------------------------------------------------------------ the steps

    def _run(self, raw: bytes, now_ms: int, report: Inspection | None) -> Inbound | None:
        verified = False  # the signature checked out: failures from here on are the sender's own

        def fail(exc: AmpError) -> None:
            if report is None:
                if verified and not isinstance(exc, SignedButRefused):
                    raise SignedButRefused(exc.code, exc.message, path=exc.path, details=exc.details) from exc
                raise exc
            report.findings.append(Finding.of(exc))

        # 1. decode and 2. shape: nothing later can run without them.
        try:
            decoded = loads(raw, self.limits)
        except AmpError as exc:
            fail(exc)
            return None
        if report is not None:
            report.decoded = decoded
        try:
            env = envelope_from_map(decoded)
        except AmpError as exc:
            fail(exc)
            return None
        if report is not None:
            report.envelope = env
            if env.enc is None:
                report.body, report.body_known = env.body, True

        # 3. version, 4. type
        if env.v not in self.supported_versions:
            fail(AmpError(1004, f"protocol version {env.v} is not supported", path="v"))
        if not self.known_type(env.typ):
            fail(AmpError(1005, f"unknown message type 0x{env.typ:02X}", path="typ"))

        # 5. time
        verdict = self.time_verdict(env, now_ms)
        if report is not None:
            report.time = verdict
        if verdict is not TimeVerdict.VALID:
            fail(AmpError(1003, _TIME_MESSAGES[verdict], path="id" if verdict is TimeVerdict.ID_MISMATCH else "ts"))

        # 5b. recipient. HELLO is exempt: RFC 002's handshake carries no DID,
        # so a client cannot know ours before our HELLO_ACK.
        if self.recipient is not None and env.typ != _HELLO and not addressed_to(env.to, self.recipient):
            fail(AmpError(3001, "message is not addressed to this agent", path="to"))

        # 6. sender key
        try:
            public_key = self.resolver.ed25519_for(env.sender)
        except AmpError as exc:
            if report is None:
                raise
            report.signature = SignatureVerdict.UNKNOWN_KEY
            report.findings.append(Finding.of(exc))
            return None

        # 7. decrypt (authcrypt) or re-encode the plain body
        if env.enc is not None and self.carry_encrypted and not self.decrypt_secrets and report is None:
            fingerprint = hashlib.blake2b(raw, digest_size=16).digest()
            status = self.replay.check_and_store(env.sender, env.id, expires_at=env.ts + env.ttl,
                                                 fingerprint=fingerprint, now_ms=now_ms)
            return Inbound(envelope=env, body=None, raw=raw, duplicate=status is not ReplayStatus.NEW,
                           replay=status, fingerprint=fingerprint, decrypted=False)
        if env.enc is not None:
            try:
                body_bytes = self._decrypt(env)
            except AmpError as exc:
                if report is None:
                    raise
                report.signature = (SignatureVerdict.UNKNOWN_KEY if not self.decrypt_secrets
                                    else SignatureVerdict.INVALID)
                report.needs_secret = not self.decrypt_secrets
                report.findings.append(Finding.of(exc))
                return None
        else:
            try:
                body_bytes = dumps(env.body)
            except AmpError as exc:  # a decoded value cbor2 cannot write back (should not happen)
                fail(exc)
                return None

        # 8. signature
        try:
            headers = signed_headers(env.id, env.typ, env.ts, env.ttl, env.sender, env.to, env.reply_to,
                                     env.thread_id)
        except AmpError as exc:  # cannot happen for a decoded envelope (its shape bounds the integers)
            fail(exc)
            return None
        signed = sig_input_of(headers, body_bytes, self.profile)
        if verify_signature(public_key, signed, env.sig):
            verified = True
            if report is not None:
                report.signature, report.signature_profile = SignatureVerdict.VALID, self.profile
        else:
            if report is not None:
                self._try_other_profiles(env, headers, body_bytes, public_key, report)
            fail(AmpError(1002, "signature does not verify", path="sig"))

        # 9. the decrypted bytes must be one CBOR item
        body = env.body
        decrypted = False
        if env.enc is not None:
            try:
                body = loads(body_bytes, self.limits)
                decrypted = True
            except AmpError as exc:
                fail(AmpError(1001, f"decrypted body is not valid CBOR: {exc.message}", path="enc.ciphertext"))
                return None
            if report is not None:
                report.body, report.body_known, report.decrypted = body, True, True

        # 10. body rules
        try:
            check_ack_source(env, body, self.trusted_relays)
        except AmpError as exc:
            fail(exc)
        if self.schemas is not None:
            for failure in self._schema_failures(env.typ, body):
                fail(failure)
                if report is None:  # pragma: no cover - fail() raised
                    break

        # 11. replay
        fingerprint = hashlib.blake2b(signed, digest_size=16).digest()
        if report is not None:
            report.replay = self.replay.peek(env.sender, env.id, fingerprint, now_ms)
            return None
        status = self.replay.check_and_store(env.sender, env.id, expires_at=env.ts + env.ttl,
                                             fingerprint=fingerprint, now_ms=now_ms)
        return Inbound(envelope=env, body=body, raw=raw, duplicate=status is not ReplayStatus.NEW,
                       replay=status, fingerprint=fingerprint, decrypted=decrypted)

    def _decrypt(self, env: Envelope) -> bytes:
        assert env.enc is not None
        if not self.decrypt_secrets:
            # Sign-then-encrypt (§8.6): the signature covers the plaintext, so
            # without the recipient's secret it cannot be checked at all.
            raise AmpError(3001, "message could not be decrypted (no local key agreement key): it is authcrypted, "
                                 "and its signature covers the plaintext, so it cannot be checked without the "
                                 "recipient's X25519 secret (the sender's key is known)")
        sender_x25519 = self.resolver.x25519_for(env.sender)
        return decrypt(env.enc.ciphertext, env.enc.nonce, recipient_secrets=self.decrypt_secrets,
                       sender_public=sender_x25519)

    def _try_other_profiles(self, env: Envelope, headers: SignedHeaders, body_bytes: bytes, public_key: bytes,
                            report: Inspection) -> None:
        # Still a failure under the configured profile, but the dump can
        # name the profile under which it would verify (ruling R15).
        report.signature_profile = _other_profile(self.profile, env, headers, body_bytes, public_key)

    def verifies_under(self, env: Envelope) -> Profile | None:
        """The other Sig_Input profile under which ``env``'s signature
        verifies, if one does (why a peer's replies fail: it signs like the
        public Rust example and we do not, or the reverse; R15). ``None`` for
        an encrypted message, whose signed plaintext we may not have."""
        return verifying_profile(env, self.resolver, besides=self.profile)

    def _schema_failures(self, typ: int, body: Any) -> list[AmpError]:
        assert self.schemas is not None
        failures = []
        for violation in self.schemas.validate_body(typ, body):
            if getattr(violation, "kind", "error") != "error":
                continue  # extension keys are reported by the schema layer, not rejected
            path = getattr(violation, "path", None)
            full_path = "body" + (f".{path}" if path and not str(path).startswith("[") else (path or ""))
            expected = getattr(violation, "expected", "?")
            found = getattr(violation, "found", "?")
            failures.append(AmpError(int(getattr(violation, "code", 1001)),
                                     f"body does not match its schema: expected {expected}, found {found}",
                                     path=full_path))
        if failures and typ != _CAP_INVOKE and isinstance(body, dict) and "delegation" in body:
            # RFC 005 §5.3, A.18: delegation on any other type is 4001, even
            # where the type's body admits no such field (PING's is null).
            return [AmpError(4001, "'delegation' is only allowed on CAP_INVOKE", path="body.delegation")]
        return failures


def verifying_profile(env: Envelope, resolver: KeyResolver, *, besides: Profile | None = None) -> Profile | None:
    """The Sig_Input profile, other than ``besides``, under which ``env``'s
    signature verifies with its sender's key from ``resolver``; None when
    none does, the key is unknown, or ``env`` is encrypted (its signed
    plaintext is not at hand)."""
    if env.enc is not None:
        return None
    try:
        public_key = resolver.ed25519_for(env.sender)
        headers = signed_headers(env.id, env.typ, env.ts, env.ttl, env.sender, env.to, env.reply_to,
                                 env.thread_id)
        body_bytes = dumps(env.body)
    except AmpError:
        return None
    return _other_profile(besides, env, headers, body_bytes, public_key)


def _other_profile(ours: Profile | None, env: Envelope, headers: SignedHeaders, body_bytes: bytes,
                   public_key: bytes) -> Profile | None:
    for profile in Profile:
        if profile is not ours and verify_signature(public_key, sig_input_of(headers, body_bytes, profile), env.sig):
            return profile
    return None


_CAP_INVOKE = int(MessageType.CAP_INVOKE)

_TIME_MESSAGES = {
    TimeVerdict.EXPIRED: "message expired (now > ts + ttl)",
    TimeVerdict.FUTURE: "message timestamp is too far in the future",
    TimeVerdict.ID_MISMATCH: "message id timestamp differs from ts by more than 1 s",
}
