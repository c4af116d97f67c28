"""What a dial that cannot start reports: 5002, never a resolver's own exception."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parent))
from amp_helpers import demo_daemon  # noqa: E402

from ampcap.errors import Unreachable  # noqa: E402
from ampcap.net.transport.url import AmpUrl  # noqa: E402


@pytest.mark.trio
async def test_a_host_name_the_resolver_refuses_is_unreachable_not_a_unicode_error() -> None:
    # parse_url refuses such names; an AmpUrl built by hand (or a name only
    # trio's IDNA 2008 step refuses) still reaches the resolver, which raises
    # UnicodeError ('idna' codec): that is one more unreachable host.
    async with demo_daemon() as daemon:
        for host in ("a..b", "\u2603.example"):
            with trio.fail_after(10), pytest.raises(Unreachable) as info:
                await daemon.connect(AmpUrl("amp", host, 7700), timeout_s=5)
            assert info.value.code == 5002
            assert info.value.message.startswith(f"cannot reach amp://{host}:7700: ")
