"""Deprecation in-band (R23) between real daemons: a manifest's deprecated
version (``stability = "deprecated"``, ``deprecated_by``, ``sunset_date``;
or a ``deprecated_ranges`` of its name) reaches the caller in a signed
``ext`` entry of CAP_RESULT and CAP_DECLARE; the Python API warns once per
capability; peers that did not announce the extension get none; an entry
whose signature does not verify is ignored."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parent))
from amp_helpers import new_identity  # noqa: E402

from ampcap.caps.manifest import manifest_from_data  # noqa: E402
from ampcap.net.api.peer import Peer, connect  # noqa: E402
from ampcap.net.daemon import calls as calls_module  # noqa: E402
from ampcap.net.daemon.config import DaemonConfig  # noqa: E402
from ampcap.peer.config import ConnectionConfig  # noqa: E402
from ampcap.caps.deprecation import EXT_KEY, AmpDeprecationWarning, Notice, notices_for, read_entry, signed_entry  # noqa: E402

EXAMPLES = Path(__file__).parents[2] / "examples" / "manifest.toml"
COUNTDOWN = "org.example.greeter.countdown:0.9.0"


@pytest.fixture(autouse=True)
def fresh_warnings() -> None:
    calls_module._WARNED.clear()


def test_which_versions_are_deprecated() -> None:
    def cap(version: str, **extra: object) -> dict:
        return {"id": f"org.example.x:{version}", "input_schema": {"type": "object"},
                "output_schema": {"type": "object"}, "binding": {"python": "json:dumps"}, **extra}

    manifest = manifest_from_data({"capability": [
        cap("1.0.0"), cap("1.5.0", stability="deprecated", sunset_date="2027-01-31"),
        cap("2.0.0", deprecated_ranges=[">=1.0.0 <1.5.0"]), cap("3.0.0")]})
    found = notices_for(c.descriptor for c in manifest.capabilities)
    assert set(found) == {"org.example.x:1.0.0", "org.example.x:1.5.0"}
    assert found["org.example.x:1.0.0"] == Notice(id="org.example.x:1.0.0", ranges=(">=1.0.0 <1.5.0",),
                                                  replacement="org.example.x:3.0.0")
    assert found["org.example.x:1.5.0"].sunset == "2027-01-31"
    assert "use org.example.x:3.0.0" in found["org.example.x:1.0.0"].line()


def test_the_entry_verifies_only_as_signed() -> None:
    me = new_identity()
    entry = signed_entry(me.sign, me.did, b"r" * 16, [Notice(id="a:1.0.0")])
    key = lambda did: me.public_key  # noqa: E731
    assert read_entry(entry, me.did, b"r" * 16, key) == (Notice(id="a:1.0.0"),)
    assert read_entry(entry, me.did, b"x" * 16, key) == ()  # another message's
    entry[EXT_KEY]["notices"][0]["id"] = "b:1.0.0"
    assert read_entry(entry, me.did, b"r" * 16, key) == ()  # altered on the way
    assert read_entry({"other": 1}, me.did, None, key) == () and read_entry(None, me.did, None, key) == ()


@pytest.mark.trio
async def test_a_deprecated_version_warns_the_caller_once() -> None:
    async with Peer(new_identity(), manifest=EXAMPLES).serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=new_identity()) as remote:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                assert await remote.invoke(COUNTDOWN, params={"from": 1}) == {"done": True}
                await remote.invoke(COUNTDOWN, params={"from": 1})
                page = await remote.query("org.example.greeter.countdown")
                assert await remote.invoke("org.example.greeter.greet:1.2.0", params={"name": "Ada"})
            deprecations = [w for w in caught if issubclass(w.category, AmpDeprecationWarning)]
            assert len(deprecations) == 1, [str(w.message) for w in caught]
            text = str(deprecations[0].message)
            assert text.startswith(f"{COUNTDOWN} is deprecated") and "org.example.greeter.countdown:1.0.0" in text
            assert "2027-06-30" in text and deprecations[0].filename == __file__
            assert page.deprecations[COUNTDOWN].replacement == "org.example.greeter.countdown:1.0.0"


@pytest.mark.trio
async def test_a_peer_without_the_extension_gets_no_entry() -> None:
    quiet = DaemonConfig(connection=ConnectionConfig(extensions=()))
    async with Peer(new_identity(), manifest=EXAMPLES).serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=new_identity(), config=quiet) as remote:
            sent: list = []
            original = remote._link.driver.conn.receive_data

            def spy(data: bytes, now_ms: int) -> None:
                sent.append(bytes(data))
                original(data, now_ms)

            remote._link.driver.conn.receive_data = spy  # type: ignore[method-assign]
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                await remote.invoke(COUNTDOWN, params={"from": 1})
                page = await remote.query("org.example.greeter.countdown")
            assert not [w for w in caught if issubclass(w.category, AmpDeprecationWarning)]
            assert page.deprecations == {}
            assert sent and not any(EXT_KEY.encode() in chunk for chunk in sent)
            await trio.sleep(0)
