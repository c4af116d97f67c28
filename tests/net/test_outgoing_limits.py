"""The Python API refuses, before sending, a call its peer could not decode."""

from __future__ import annotations

import os

import pytest
import trio

import ampcap
from ampcap.wire.cbor import TooDeep
from ampcap.wire.identity import Identity


@pytest.mark.trio
async def test_invoke_with_params_nested_too_deep_raises_locally_and_the_connection_lives_on() -> None:
    peer = ampcap.Peer(Identity.generate(os.urandom))

    @peer.capability("org.example.echo", version="1.0.0", schema={"type": "object"})
    async def echo(**params: object) -> dict[str, object]:
        return {"echo": params}

    deep: object = 0
    for _ in range(30):
        deep = [deep]
    async with peer.serve("amp://127.0.0.1:0") as server:
        async with ampcap.connect(server.url, identity=Identity.generate(os.urandom)) as remote:
            with trio.fail_after(10):
                # Before: sent, refused by the daemon's decoder, unanswered:
                # "5002 UNAVAILABLE: connection closed before the reply".
                with pytest.raises(TooDeep) as info:
                    await remote.invoke("org.example.echo:1.0.0", params={"message": deep})
                assert info.value.code == 1001
                # The params fit, but echoed inside CAP_RESULT's body they would
                # not: the provider answers 5001 instead of sending a reply
                # the caller cannot decode (which closed the connection).
                fits = deep[0]  # type: ignore[index]
                with pytest.raises(ampcap.AmpError) as info:
                    await remote.invoke("org.example.echo:1.0.0", params={"message": fits})
                assert info.value.code == 5001 and "not encodable" in info.value.message
                # The connection lives on.
                assert await remote.invoke("org.example.echo:1.0.0", params={"message": [[1]]}) == {
                    "echo": {"message": [[1]]}}
