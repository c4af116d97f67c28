"""TLS for ``amps://`` (RFC 002 §4.1: TLS 1.2 or newer).

The server context loads the certificate chain and key given on the command
line (``--tls-cert`` / ``--tls-key``). The client context verifies the server
against the system trust store by default, or against a given CA file;
``insecure=True`` turns verification off and is meant for development only.
Both refuse anything older than TLS 1.2.
"""

from __future__ import annotations

import os
import ssl

import trio

__all__ = ["server_context", "client_context", "wrap_client", "wrap_server", "tls_failure", "ALPN", "UNTRUSTED"]

ALPN = "amp/1"  # offered, never required: peers that do not speak ALPN still connect


def server_context(cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str] | None = None) -> ssl.SSLContext:
    """A server context from a PEM certificate chain and private key."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    # ssl cannot say which of the two files it failed on; a missing one we can.
    for what, path in (("certificate", cert_file), ("key", key_file)):
        if path is not None and not os.path.isfile(path):
            raise ValueError(f"cannot read TLS {what} {os.fspath(path)!r}: not a readable file")
    try:
        # A password callback, so that OpenSSL never prompts on the terminal
        # for an encrypted key (without one it failed with "[Errno 22]").
        ctx.load_cert_chain(os.fspath(cert_file), os.fspath(key_file) if key_file is not None else None,
                            password=_refuse_password)
    except _EncryptedKey:
        raise ValueError(f"TLS key {os.fspath(key_file if key_file is not None else cert_file)} is encrypted; "
                         "ampcap needs an unencrypted key (e.g. openssl pkey -in KEY -out PLAIN_KEY)") from None
    except (OSError, ssl.SSLError) as exc:
        pair = os.fspath(cert_file) + (f"' and key '{os.fspath(key_file)}" if key_file is not None else "")
        raise ValueError(f"cannot load TLS certificate '{pair}' (PEM certificate and its private key "
                         f"expected): {exc}") from exc
    ctx.set_alpn_protocols([ALPN])
    return ctx


class _EncryptedKey(Exception):
    """The key file asks for a passphrase."""


def _refuse_password() -> bytes:
    raise _EncryptedKey


def client_context(*, ca_file: str | os.PathLike[str] | None = None, insecure: bool = False) -> ssl.SSLContext:
    """A client context: verify by default (system store, or ``ca_file``)."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca_file is not None:
        if not os.path.isfile(ca_file):  # a FIFO would block the load forever
            raise ValueError(f"cannot load CA file {os.fspath(ca_file)!r}: not a readable file")
        try:
            ctx.load_verify_locations(cafile=os.fspath(ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"cannot load CA file {os.fspath(ca_file)!r}: {exc}") from exc
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols([ALPN])
    return ctx


def wrap_client(stream: trio.abc.Stream, ctx: ssl.SSLContext, server_hostname: str) -> trio.SSLStream[trio.abc.Stream]:
    """TLS client side; the handshake runs on first use."""
    return trio.SSLStream(stream, ctx, server_hostname=server_hostname)


def wrap_server(stream: trio.abc.Stream, ctx: ssl.SSLContext) -> trio.SSLStream[trio.abc.Stream]:
    """TLS server side; the handshake runs on first use."""
    return trio.SSLStream(stream, ctx, server_side=True)


UNTRUSTED = "the server's certificate is not trusted"
# X509_V_ERR_HOSTNAME_MISMATCH, _EMAIL_MISMATCH, _IP_ADDRESS_MISMATCH: a trusted
# certificate, for another name.
_NAME_MISMATCH = frozenset((62, 63, 64))

# OpenSSL's reasons when the bytes that came back were not TLS at all.
_NOT_TLS = frozenset(("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL", "RECORD_LAYER_FAILURE"))


def tls_failure(exc: BaseException) -> str | None:
    """``"TLS failed: REASON"`` when ``exc`` is trio's wrapper around an
    SSL error, else None. Says when the peer plainly does not speak TLS: a
    plain amp:// peer on an amps:// port (or the reverse) would otherwise
    read as a peer that simply hung up."""
    cause = exc if isinstance(exc, ssl.SSLError) else exc.__cause__
    if not isinstance(cause, ssl.SSLError):
        return None
    if isinstance(cause, ssl.SSLCertVerificationError):
        # No advice here: this text reaches Python callers and the command
        # line alike, and each has its own way to trust a CA (client_context
        # (ca_file=...), --ca-file); the command line adds its own.
        if cause.verify_code in _NAME_MISMATCH:
            return f"TLS failed: the server's certificate does not name the host dialled ({cause.verify_message})"
        # The usual case is a self-signed development certificate.
        return f"TLS failed: {UNTRUSTED} ({cause.verify_message})"
    reason = cause.reason or cause.strerror or str(cause)
    if reason in _NOT_TLS:
        reason += " (the other side does not speak TLS: amps:// against an amp:// port, or the reverse?)"
    return f"TLS failed: {reason}"
