"""The gRPC binding against a real gRPC server with reflection."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ampcap.errors import AmpError

sys.path.insert(0, str(Path(__file__).parent))
from binding_helpers import build, capability, free_port, serving  # noqa: E402
from grpc_server import grpc_server  # noqa: E402


def grpc_cap(name: str, table: str) -> str:
    return capability(name, "[capability.binding.grpc]\n" + table)


@pytest.mark.trio
async def test_grpc_end_to_end(tmp_path: Path) -> None:
    with grpc_server() as (target, rec):
        text = (
            grpc_cap("scan", f'target = "{target}"\nmethod = "scan.v1.Scanner/Scan"\nmapping = {{ target = "path" }}\n'
                             'output_mapping = { findings = "vulnerabilities" }\ntimeout_ms = 400\n')
            + grpc_cap("fail", f'target = "{target}"\nmethod = "scan.v1.Scanner/Fail"\n')
            + grpc_cap("nomethod", f'target = "{target}"\nmethod = "scan.v1.Scanner/Nope"\n')
            + grpc_cap("down", f'target = "127.0.0.1:{free_port()}"\nmethod = "scan.v1.Scanner/Scan"\n')
        )
        manifest = build(tmp_path, text)
        async with serving(manifest) as (server, remote):
            # Mappings both ways, protobuf's JSON mapping (proto field names; defaults included).
            got = await remote.invoke("org.example.scan:1.0.0", params={"target": "src", "min_severity": "high"})
            assert got == {"vulnerabilities": ["src:high"], "elapsed": 7, "path": "src"}
            # Params that do not fit the request message: 4001, nothing sent.
            calls = rec.calls
            with pytest.raises(AmpError) as err:
                await remote.invoke("org.example.scan:1.0.0", params={"target": "x", "colour": "red"})
            assert err.value.code == 4001 and rec.calls == calls
            # A status: 5001 with its name.
            with pytest.raises(AmpError) as err:
                await remote.invoke("org.example.fail:1.0.0", params={"path": "p"})
            assert err.value.code == 5001 and "NOT_FOUND" in err.value.message and "no p" in err.value.message
            # The deadline: 5003, and the call is cancelled on the server.
            with pytest.raises(AmpError) as err:
                await remote.invoke("org.example.scan:1.0.0", params={"target": "x", "delay_ms": 5000})
            assert err.value.code == 5003
            assert rec.cancelled.wait(5)
            # No such method, no server: 5002 before anything ran.
            with pytest.raises(AmpError) as err:
                await remote.invoke("org.example.nomethod:1.0.0", params={})
            assert err.value.code == 5002 and "no method Nope" in err.value.message
            with pytest.raises(AmpError) as err:
                await remote.invoke("org.example.down:1.0.0", params={})
            assert err.value.code == 5002
            stats = server.daemon.jobs.stats
            assert stats["invokes"] == stats["completed"]


@pytest.mark.trio
async def test_grpc_over_tls_with_a_ca_file(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
    from amp_helpers import self_signed_cert

    cert, key = self_signed_cert(tmp_path)
    with grpc_server(tls=(key.read_bytes(), cert.read_bytes())) as (target, _):
        port = target.rsplit(":", 1)[1]
        text = grpc_cap("scan", f'target = "localhost:{port}"\nmethod = "scan.v1.Scanner/Scan"\ntls = true\n'
                                f'ca_file = "{cert.name}"\n')
        text += grpc_cap("untrusted", f'target = "localhost:{port}"\nmethod = "scan.v1.Scanner/Scan"\ntls = true\n')
        manifest = build(tmp_path, text)  # ca_file is relative to the manifest (tmp_path)
        async with serving(manifest) as (_, remote):
            got = await remote.invoke("org.example.scan:1.0.0", params={"path": "p"})
            assert got["findings"] == ["p:low"]
            # The system's roots do not know this certificate: nothing ran, 5002.
            with pytest.raises(AmpError) as err:
                await remote.invoke("org.example.untrusted:1.0.0", params={"path": "p"})
            assert err.value.code == 5002


@pytest.mark.trio
async def test_a_drain_cancels_a_grpc_call_in_flight_with_one_reply(tmp_path: Path) -> None:
    import trio

    with grpc_server() as (target, rec):
        manifest = build(tmp_path, grpc_cap("scan", f'target = "{target}"\nmethod = "scan.v1.Scanner/Scan"\n'
                                                    'timeout_ms = 60000\n'))
        outcome: list[object] = []
        async with serving(manifest) as (server, remote):
            async def call() -> None:
                try:
                    outcome.append(await remote.invoke("org.example.scan:1.0.0", params={"delay_ms": 20_000}))
                except AmpError as exc:
                    outcome.append(exc.code)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(call)
                with trio.fail_after(10):
                    while not rec.calls:
                        await trio.sleep(0.02)
                await server.daemon.drain(0.2)
        assert outcome == [5002]
        assert rec.cancelled.wait(5)
