"""The AMP wire layer: deterministic CBOR, envelopes, signatures, identities,
receive-side checks and RFC 002 frames.

The main names are re-exported here and loaded on first use (PEP 562), so
``import ampcap.wire.frames`` does not pull in the whole layer and the CLI
starts fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

# name -> submodule that defines it
_EXPORTS: dict[str, str] = {
    "dumps": "cbor", "loads": "cbor", "DecodeLimits": "cbor", "DEFAULT_LIMITS": "cbor",
    "Envelope": "envelope", "EncryptedPayload": "envelope", "seal": "envelope",
    "encode_envelope": "envelope", "decode_envelope": "envelope", "new_message_id": "envelope",
    "Profile": "signing", "sig_input": "signing",
    "Identity": "identity", "KeyResolver": "identity",
    "Keyring": "keyring", "default_resolver": "keyring",
    "ReceivePipeline": "receive", "Inbound": "receive", "Inspection": "receive", "Finding": "receive",
    "ReplayCache": "replay",
    "Frame": "frames", "FrameDecoder": "frames", "FrameType": "frames", "Framing": "frames",
    "FramingError": "frames", "encode_frame": "frames",
    "MessageType": "registry", "ErrorCode": "registry", "type_name": "registry",
    "error_info": "registry", "error_body": "registry",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads these
    from .cbor import DEFAULT_LIMITS, DecodeLimits, dumps, loads
    from .envelope import EncryptedPayload, Envelope, decode_envelope, encode_envelope, new_message_id, seal
    from .frames import Frame, FrameDecoder, FrameType, Framing, FramingError, encode_frame
    from .identity import Identity, KeyResolver
    from .keyring import Keyring, default_resolver
    from .receive import Finding, Inbound, Inspection, ReceivePipeline
    from .registry import ErrorCode, MessageType, error_body, error_info, type_name
    from .replay import ReplayCache
    from .signing import Profile, sig_input


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
