"""``ampcap pay`` against a real ``ampcap serve --demo --payments``: a paid
capability bought from the command line and called with ``ampcap invoke``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "tests" / "net"))
from amp_helpers import serve_process  # noqa: E402

PYTHON = sys.executable
PAID = "org.ampcap.demo.paid_echo:1.0.0"


def ampcap(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp / "caller-config"))
    return subprocess.run([PYTHON, "-m", "ampcap.cli.main", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def test_buy_then_call_the_paid_capability_and_each_step(tmp_path: Path) -> None:
    with serve_process(tmp_path, "--payments", "--state-dir", "none") as daemon:
        bought = ampcap(tmp_path, "pay", "buy", daemon.url, "--amount", "500", "--service-ref", PAID)
        assert bought.returncode == 0, bought.stderr
        line = bought.stdout.strip()
        assert line.startswith("buy payment_id=") and "status=settled" in line
        payment_id = line.split()[1].split("=", 1)[1]
        called = ampcap(tmp_path, "invoke", daemon.url, PAID, "--json",
                        "--params", json.dumps({"message": "hello", "$payment": payment_id}))
        assert called.returncode == 0, called.stderr
        assert json.loads(called.stdout) == {"result": {"message": "hello", "paid": True}}
        again = ampcap(tmp_path, "invoke", daemon.url, PAID,
                       "--params", json.dumps({"message": "hello", "$payment": payment_id}))
        assert again.returncode == 1 and "error 3001" in again.stderr
        status = ampcap(tmp_path, "pay", "status", daemon.url, payment_id)
        assert status.returncode == 0 and "status=settled" in status.stdout

        # Step by step: quote (JSON), authorize and capture from that quote, refund.
        quoted = ampcap(tmp_path, "pay", "quote", daemon.url, "--amount", "250", "--json")
        assert quoted.returncode == 0, quoted.stderr
        quote = json.loads(quoted.stdout)["quote"]
        assert quote["money"] == {"amount_minor": 250, "asset": "USD", "network": "ampcap-local-ledger"}
        for step in ("authorize", "capture"):
            done = ampcap(tmp_path, "pay", step, daemon.url, "--quote", quoted.stdout)
            assert done.returncode == 0, done.stderr
        assert "status=settled" in done.stdout
        refunded = ampcap(tmp_path, "pay", "refund", daemon.url, quote["payment_id"])
        assert refunded.returncode == 0 and "status=refunded" in refunded.stdout
        canceled = ampcap(tmp_path, "pay", "cancel", daemon.url, quote["payment_id"])
        assert canceled.returncode == 1 and "error 4103" in canceled.stderr
        unknown = ampcap(tmp_path, "pay", "status", daemon.url, "00" * 16)
        assert unknown.returncode == 1 and "error 4106" in unknown.stderr


def test_bad_pay_arguments_are_usage_errors(tmp_path: Path) -> None:
    for args in (["pay", "status", "amp://127.0.0.1:1", "xyz"],
                 ["pay", "quote", "amp://127.0.0.1:1", "--amount", "-5"],
                 ["pay", "quote", "amp://127.0.0.1:1", "--amount", "5", "--asset", "usd"],
                 ["pay", "capture", "amp://127.0.0.1:1", "--quote", "{}"]):
        done = ampcap(tmp_path, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_signed_descriptors_served_and_required_with_trust(tmp_path: Path) -> None:
    """serve signs what the manifest asks (descriptor_signer = "identity") and
    the workflow; --trust requires signatures: signed ones pass (schemas
    fetched and hash-checked), unsigned ones are 3001 before any invoke."""
    manifest = tmp_path / "signed.toml"
    manifest.write_text('descriptor_signer = "identity"\n'
                        '[[capability]]\nname = "org.example.signed.add"\nversion = "1.0.0"\n'
                        'binding = { python = "ampcap.caps.demo:add" }\n'
                        'input_schema = { type = "object", required = ["a", "b"], properties = '
                        '{ a = { type = "integer" }, b = { type = "integer" } } }\n'
                        'output_schema = { type = "object" }\n')
    with serve_process(tmp_path, "--payments", "--state-dir", "none", "--manifest", str(manifest)) as daemon:
        trust = tmp_path / "trust.toml"
        trust.write_text('require_signatures = ["org.example.signed.add", "org.agentries.payment.workflow", '
                         f'"org.ampcap.demo.echo"]\n[owners]\n"org" = ["{daemon.did}"]\n')
        listed = ampcap(tmp_path, "query", daemon.url, "org.example.signed.add", "--trust", str(trust))
        assert listed.returncode == 0, listed.stderr
        assert "signed, verified" in listed.stdout
        added = ampcap(tmp_path, "invoke", daemon.url, "org.example.signed.add:1.0.0", "--trust", str(trust),
                       "--json", "--params", '{"a": 2, "b": 3}')
        assert added.returncode == 0 and json.loads(added.stdout) == {"result": {"sum": 5}}, added.stderr
        bought = ampcap(tmp_path, "pay", "buy", daemon.url, "--amount", "100", "--trust", str(trust))
        assert bought.returncode == 0 and "status=settled" in bought.stdout, bought.stderr
        refused = ampcap(tmp_path, "invoke", daemon.url, "org.ampcap.demo.echo:1.0.0", "--trust", str(trust),
                         "--params", '{"message": "x"}')
        assert refused.returncode == 1 and "error 3001" in refused.stderr
        stranger = tmp_path / "stranger.toml"
        stranger.write_text('require_signatures = "all"\n[owners]\n'
                            '"org" = ["did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"]\n')
        forged = ampcap(tmp_path, "query", daemon.url, "org.example.signed.add", "--trust", str(stranger))
        assert forged.returncode == 1 and "error 3001" in forged.stderr


def test_a_manifest_price_makes_any_capability_paid(tmp_path: Path) -> None:
    """price = { … } on a manifest capability: its schema asks for $payment,
    a call without a captured payment for it is 3001, with one it runs once."""
    manifest = tmp_path / "priced.toml"
    manifest.write_text('[[capability]]\nname = "org.example.priced.add"\nversion = "1.0.0"\n'
                        'binding = { python = "ampcap.caps.demo:add" }\n'
                        'price = { amount_minor = 250, asset = "USD", network = "ampcap-local-ledger" }\n'
                        'input_schema = { type = "object", required = ["a", "b"], properties = '
                        '{ a = { type = "integer" }, b = { type = "integer" } } }\n'
                        'output_schema = { type = "object" }\n')
    refused = ampcap(tmp_path, "serve", "--manifest", str(manifest), "--listen", "127.0.0.1:0", "--state-dir", "none")
    assert refused.returncode == 2 and "--payments" in refused.stderr
    target = "org.example.priced.add:1.0.0"
    with serve_process(tmp_path, "--payments", "--state-dir", "none", "--manifest", str(manifest)) as daemon:
        unpaid = ampcap(tmp_path, "invoke", daemon.url, target, "--params", '{"a": 1, "b": 2, "$payment": "' +
                        "00" * 16 + '"}')
        assert unpaid.returncode == 1 and "error 3001" in unpaid.stderr
        cheap = ampcap(tmp_path, "pay", "buy", daemon.url, "--amount", "100", "--service-ref", target)
        assert cheap.returncode == 1 and "error 4001" in cheap.stderr
        bought = ampcap(tmp_path, "pay", "buy", daemon.url, "--amount", "250", "--service-ref", target)
        assert bought.returncode == 0, bought.stderr
        payment_id = bought.stdout.split()[1].split("=", 1)[1]
        params = json.dumps({"a": 1, "b": 2, "$payment": payment_id})
        added = ampcap(tmp_path, "invoke", daemon.url, target, "--json", "--params", params)
        assert added.returncode == 0 and json.loads(added.stdout) == {"result": {"sum": 3}}, added.stderr
        again = ampcap(tmp_path, "invoke", daemon.url, target, "--params", params)
        assert again.returncode == 1 and "error 3001" in again.stderr
