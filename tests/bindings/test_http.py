"""The HTTP binding against a real local HTTP server, end to end."""

from __future__ import annotations

import sys
import logging
from pathlib import Path

import pytest

from ampcap.errors import AmpError

sys.path.insert(0, str(Path(__file__).parent))
from binding_helpers import build, capability, free_port, serving  # noqa: E402
from http_server import http_server  # noqa: E402

SECRET = "s3cr3t-value-123"


def http_cap(name: str, table: str) -> str:
    return capability(name, "[capability.binding.http]\n" + table)


@pytest.mark.trio
async def test_http_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("AMPCAP_TEST_SECRET", SECRET)
    with http_server() as (base, rec):
        text = (
            http_cap("post", f"""method = "POST"
url = "{base}/echo/{{target}}?k=${{AMPCAP_TEST_SECRET}}"
headers = {{ "X-Key" = "${{AMPCAP_TEST_SECRET}}" }}
body_template = '{{"target": "{{target}}", "label": "scan of {{target}}", "n": "{{n}}"}}'
output_mapping = {{ body = "sent" }}
""")
            + http_cap("plain", f'method = "PUT"\nurl = "{base}/echo/plain"\n')
            + http_cap("status", f'method = "GET"\nurl = "{base}/status/{{n}}"\nerror_mapping = {{ 404 = 4004 }}\n')
            + http_cap("status-secret", f'method = "GET"\nurl = "{base}/status/500?k=${{AMPCAP_TEST_SECRET}}"\n')
            + http_cap("drop", f'method = "GET"\nurl = "{base}/drop"\n')
            + http_cap("slow", f'method = "GET"\nurl = "{base}/slow"\ntimeout_ms = 300\n')
            + http_cap("text", f'method = "GET"\nurl = "{base}/text"\n')
            + http_cap("empty", f'method = "GET"\nurl = "{base}/empty"\n',)
            + http_cap("refused", f'method = "GET"\nurl = "http://127.0.0.1:{free_port()}/x"\n')
            + http_cap("unset", f'method = "GET"\nurl = "{base}/echo/x"\n'
                                'headers = { A = "${AMPCAP_NO_SUCH_VAR}" }\n')
        )
        text = text.replace('id = "org.example.empty:1.0.0"\ninput_schema = { type = "object" }\n'
                            'output_schema = { type = "object" }',
                            'id = "org.example.empty:1.0.0"\ninput_schema = { type = "object" }\n'
                            'output_schema = { type = "null" }')
        manifest = build(tmp_path, text)
        async with serving(manifest) as (server, remote):
            evil = 'x", "admin": true, "y": "/../?#'
            got = await remote.invoke("org.example.post:1.0.0", params={"target": evil, "n": 7})
            # The template's structure holds whatever the params say; the URL
            # placeholder is percent-encoded; the secret reached the server.
            assert got["sent"] == {"target": evil, "label": "scan of " + evil, "n": 7}
            assert got["path"] == "/echo/" + evil and got["query"] == f"k={SECRET}" and got["x_key"] == SECRET
            # No template: the params are the JSON body.
            got = await remote.invoke("org.example.plain:1.0.0", params={"a": [1, 2]})
            assert got["body"] == {"a": [1, 2]} and got["method"] == "PUT"
            # Statuses: mapped, or 5001; never a secret in the message.
            with pytest.raises(AmpError) as err:
                await remote.invoke("org.example.status:1.0.0", params={"n": 404})
            assert err.value.code == 4004 and "HTTP 404" in err.value.message
            with pytest.raises(AmpError) as err:
                await remote.invoke("org.example.status:1.0.0", params={"n": 503})
            assert err.value.code == 5001
            with pytest.raises(AmpError) as err:
                await remote.invoke("org.example.status-secret:1.0.0", params={})
            assert err.value.code == 5001 and SECRET not in str(err.value)
            # Dropped mid-response: one terminal reply, 5001 (it may have run).
            with pytest.raises(AmpError) as err:
                await remote.invoke("org.example.drop:1.0.0", params={})
            assert err.value.code == 5001 and "before the response was complete" in err.value.message
            # The timeout: 5003, and the request is aborted (the server sees it go).
            with pytest.raises(AmpError) as err:
                await remote.invoke("org.example.slow:1.0.0", params={})
            assert err.value.code == 5003
            assert rec.aborted.wait(5)
            with pytest.raises(AmpError) as err:
                await remote.invoke("org.example.text:1.0.0", params={})
            assert err.value.code == 5001 and "not JSON" in err.value.message
            assert await remote.invoke("org.example.empty:1.0.0", params={}) is None
            # Nothing listening: 5002 (and a fallback would try the next binding).
            with pytest.raises(AmpError) as err:
                await remote.invoke("org.example.refused:1.0.0", params={})
            assert err.value.code == 5002
            with pytest.raises(AmpError) as err:
                await remote.invoke("org.example.unset:1.0.0", params={})
            assert err.value.code == 5002 and "AMPCAP_NO_SUCH_VAR" in err.value.message
            # A missing param a placeholder needs is the caller's mistake.
            with pytest.raises(AmpError) as err:
                await remote.invoke("org.example.post:1.0.0", params={"n": 1})
            assert err.value.code == 4001
            stats = server.daemon.jobs.stats
            assert stats["invokes"] == stats["completed"]
    assert all(SECRET not in r.getMessage() for r in caplog.records)


@pytest.mark.trio
async def test_a_drain_ends_a_request_in_flight_with_one_reply_and_aborts_it(tmp_path: Path) -> None:
    import trio

    with http_server() as (base, rec):
        manifest = build(tmp_path, http_cap("slow", f'method = "GET"\nurl = "{base}/slow"\ntimeout_ms = 60000\n'))
        outcome: list[object] = []
        async with serving(manifest) as (server, remote):
            async def call() -> None:
                try:
                    outcome.append(await remote.invoke("org.example.slow:1.0.0", params={}))
                except AmpError as exc:
                    outcome.append(exc.code)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(call)
                with trio.fail_after(10):
                    while not rec.hits["slow"]:
                        await trio.sleep(0.02)
                await server.daemon.drain(0.2)
        assert outcome == [5002]
        assert rec.aborted.wait(5)
