"""A TLS key file ampcap cannot use without a passphrase is refused in one
line; OpenSSL never gets to prompt for the passphrase."""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from amp_helpers import self_signed_cert  # noqa: E402

from ampcap.net.transport.tls import server_context  # noqa: E402


def _encrypted_key(tmp: Path) -> tuple[Path, Path]:
    """A certificate and its key, the key encrypted with a passphrase: by the
    ``cryptography`` package when installed, else by the openssl command."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        if shutil.which("openssl") is None:
            pytest.skip("neither the cryptography package nor the openssl command to make an encrypted key")
        cert, key = self_signed_cert(tmp)
        encrypted = tmp / "key-encrypted.pem"
        subprocess.run(["openssl", "pkey", "-in", str(key), "-out", str(encrypted), "-aes256", "-passout",
                        "pass:secret"], check=True, capture_output=True)
        return cert, encrypted
    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(private.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now)
                   .not_valid_after(now + datetime.timedelta(days=1)).sign(private, hashes.SHA256()))
    cert, encrypted = tmp / "cert.pem", tmp / "key-encrypted.pem"
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    encrypted.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.BestAvailableEncryption(b"secret")))
    return cert, encrypted


def test_server_context_says_an_encrypted_key_is_encrypted(tmp_path: Path) -> None:
    cert, key = _encrypted_key(tmp_path)
    with pytest.raises(ValueError) as info:
        server_context(cert, key)
    assert str(info.value).startswith(f"TLS key {key} is encrypted; ampcap needs an unencrypted key")


def test_serve_with_an_encrypted_key_fails_in_one_line_without_prompting(tmp_path: Path) -> None:
    # Before: OpenSSL prompted "Enter PEM pass phrase:" on the terminal, and
    # without one failed with "[Errno 22] Invalid argument".
    cert, key = _encrypted_key(tmp_path)
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"))
    done = subprocess.run([sys.executable, "-m", "ampcap", "serve", "--demo", "--listen", "127.0.0.1:0",
                           "--tls-cert", str(cert), "--tls-key", str(key)], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"ampcap serve: TLS key {key} is encrypted; ampcap needs an unencrypted key "
        "(e.g. openssl pkey -in KEY -out PLAIN_KEY)"]


def _localhost_only_cert(tmp: Path) -> tuple[Path, Path]:
    """A self-signed certificate naming localhost only (no IP address)."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command line to create a test certificate")
    cert, key = tmp / "cert-localhost.pem", tmp / "key-localhost.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost"], check=True, capture_output=True)
    return cert, key


def test_a_trusted_certificate_for_another_name_is_not_called_untrusted(tmp_path: Path) -> None:
    # Before: "IP address mismatch ...; trust its CA with --ca-file
    # (ampcap.net.transport.tls.client_context(ca_file=...))", with --ca-file given: the
    # command line quoted the Python API and gave advice already followed.
    from amp_helpers import serve_process

    cert, key = _localhost_only_cert(tmp_path)
    with serve_process(tmp_path, "--tls-cert", str(cert), "--tls-key", str(key)) as daemon:
        env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "client"))
        done = subprocess.run([sys.executable, "-m", "ampcap", "query", daemon.url, "echo", "--ca-file", str(cert)],
                              capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 1
        assert done.stderr.splitlines()[-1:] == [  # (after the line saying the client's identity was created)
            f"error 5002 UNAVAILABLE: {daemon.url}: TLS failed: the server's certificate does not name the host "
            "dialled (IP address mismatch, certificate is not valid for '127.0.0.1'.)"]
        # By its name it is trusted.
        done = subprocess.run([sys.executable, "-m", "ampcap", "query", daemon.url.replace("127.0.0.1", "localhost"),
                               "echo", "--ca-file", str(cert)], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
