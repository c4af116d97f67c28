"""Per-connection settings (one frozen dataclass; limits are parameters)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .._version import __version__
from ..wire.frames import DEFAULT_MAX_SIZE, MIN_MAX_SIZE, Framing
from ..wire.signing import Profile
from ..wire.extensions import OFFERED

__all__ = ["ConnectionConfig", "UNKNOWN_PEER_DID", "RELAY_DID", "RELAY_MAX_MSG_SIZE", "RELAY_HELLO_VERSION",
           "rust_example_config"]

# HELLO needs a ``to``, but the RFC 002 handshake response carries no DID, so
# a client that was not told whom it dials addresses its HELLO here (the
# ``.invalid`` TLD can never name a real party, RFC 2606). The peer's real DID
# is then learnt from the signed HELLO_ACK.
UNKNOWN_PEER_DID = "did:web:unknown.invalid"

# The public Rust example (ruling R15) and its relay: the relay's DID (what
# its clients address their registration frame to), the largest frame it
# forwards (it closes on longer lengths) and the version its clients offer.
RELAY_DID = "did:web:example.com:relay:main"
RELAY_MAX_MSG_SIZE = 8 * 1024 * 1024
RELAY_HELLO_VERSION = "0.30.0"


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionConfig:
    """How one connection behaves. Times are milliseconds."""

    framing: Framing = Framing.RFC002
    # Largest payload we accept (offered in the HANDSHAKE). RFC 002 §3.2: never
    # below 1 MiB. A *peer* offering less than 1 MiB is treated as 1 MiB
    # (``effective_max``), because every peer must accept 1 MiB anyway.
    max_msg_size: int = DEFAULT_MAX_SIZE
    handshake_timeout_ms: int = 10_000  # RFC 002 §3.1 recommended default; covers HELLO too
    keepalive_interval_ms: int | None = 30_000  # idle time before we PING; None disables
    keepalive_timeout_ms: int = 10_000  # PONG must arrive within this
    # A frame must arrive whole within this of its first byte (None: no limit).
    # Bytes trickled into one large frame count as traffic, so keepalive alone
    # would let a peer hold up to max_msg_size of our memory for as long as it
    # likes; this makes holding it cost resending it every minute. At 60 s a
    # full 16 MiB frame needs 280 KB/s.
    frame_timeout_ms: int | None = 60_000
    # Largest frame payload accepted before HELLO completes. Until then the
    # peer has proven nothing (a HANDSHAKE is unauthenticated, a did:key
    # costs nothing), and the only frames that make sense are a HANDSHAKE,
    # a HELLO and its answer, each well under 1 KiB: a peer that declares
    # more is refused from the frame header (1001) instead of being allowed
    # to park max_msg_size of our memory per connection.
    max_negotiation_payload: int = 64 * 1024
    drain_timeout_ms: int = 30_000  # after GOAWAY, close at the latest after this
    # A clean EOF once negotiated may be a half-close (the peer still reads).
    # True: drain (InputEnded), and the owner closes once it owes nothing;
    # the daemon does. False: a clean EOF is a close, for owners that would
    # not know to close a connection the peer can no longer talk on.
    drain_on_half_close: bool = False
    versions: tuple[str, ...] = ("1.0",)  # offered / accepted AMP versions, preferred first
    agent_name: str = "ampcap"
    implementation: str = f"ampcap/{__version__}"
    # ampcap's extensions offered in HELLO (wire/extensions.py, R22/R23);
    # () offers none, as another implementation would.
    extensions: tuple[str, ...] = OFFERED
    # RFC 002 A.7: an application message before HELLO completes is answered
    # with ERROR 1004; this says whether the connection is then closed.
    close_on_pre_hello: bool = True
    # Raw framing (R3) has no HANDSHAKE; HELLO is then optional. False = the
    # version in ``versions[0]`` is taken as preconfigured (RFC 002 §3.3).
    raw_hello: bool = False
    # RFC 002 §7.1 strict principal binding: every message's ``from`` must be
    # the DID that negotiated the connection (3001, then close).
    strict_principal: bool = True
    # The link to an RFC 003 relay (net/features/relay_agent.py): every
    # message that is not itself an acknowledgement gets a recipient ACK,
    # sent after the journal holds what the message started (§5.5).
    relay_acks: bool = False
    default_ttl_ms: int = 86_400_000  # RFC 001 §8.3 suggested default
    profile: Profile = Profile.RFC  # Sig_Input variant for messages we seal (R15)
    # Bound on bytes queued for the peer; the trio driver stops reading from a
    # peer whose unsent output exceeds it (see net/transport/stream.py). The kernel's
    # socket buffer sits in front of it, so a peer that keeps up never comes
    # near; what it bounds is a peer that stops reading.
    max_send_buffer: int = 1 << 20

    def __post_init__(self) -> None:
        if self.max_msg_size < MIN_MAX_SIZE:
            raise ValueError(f"max_msg_size must be at least {MIN_MAX_SIZE} (RFC 002 §3.2)")
        if not self.versions:
            raise ValueError("at least one AMP version is required")
        for v in self.versions:
            major_of(v)
        if self.max_negotiation_payload < 1024:
            raise ValueError("max_negotiation_payload must be at least 1024 (a HELLO must fit)")
        if self.handshake_timeout_ms <= 0 or self.keepalive_timeout_ms <= 0 or self.drain_timeout_ms < 0:
            raise ValueError("timeouts must be positive")
        if self.keepalive_interval_ms is not None and self.keepalive_interval_ms <= 0:
            raise ValueError("keepalive_interval_ms must be positive or None")
        if self.frame_timeout_ms is not None and self.frame_timeout_ms <= 0:
            raise ValueError("frame_timeout_ms must be positive or None")

    @property
    def majors(self) -> frozenset[int]:
        return frozenset(major_of(v) for v in self.versions)


def major_of(version: str) -> int:
    """RFC 001 §13.1: the integer before the first dot; ``ValueError`` if none."""
    head = version.split(".", 1)[0]
    if not head.isdigit() or not head.isascii():
        raise ValueError(f"not a semver version string: {version!r}")
    return int(head)


def rust_example_config(base: ConnectionConfig | None = None) -> ConnectionConfig:
    """``base`` speaking like the public Rust example (``--compat
    rust-example``): bare 4-byte length framing, its Sig_Input variant, and
    never more than its 8 MiB frame limit."""
    base = base or ConnectionConfig()
    return replace(base, framing=Framing.RAW, profile=Profile.RUST_EXAMPLE,
                   max_msg_size=min(base.max_msg_size, RELAY_MAX_MSG_SIZE))
