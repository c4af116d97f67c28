"""Session control bodies' pins (session/control.py): a pin maps a
capability name to one of its ids, both text."""

from __future__ import annotations

import pytest

from ampcap.errors import AmpError
from ampcap.session.control import init_body, parse_request

SID = bytes(range(16))
PARTICIPANT = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"


@pytest.mark.parametrize("pin", [{0: 0}, {"org.ampcap.demo.echo": 1}, {b"echo": "org.ampcap.demo.echo:1.0.0"}])
def test_a_pin_that_is_not_text_to_text_is_1001(pin: dict) -> None:
    # Found by the session fuzz target: {0: 0} passed the schema and reached
    # the provider, which raised TypeError on it.
    body = init_body(SID, [PARTICIPANT], 60_000)
    body["pin"] = pin
    with pytest.raises(AmpError) as err:
        parse_request(body)
    assert err.value.code == 1001 and (err.value.path or "").startswith("body.pin")


def test_a_text_pin_is_kept() -> None:
    body = init_body(SID, [PARTICIPANT], 60_000, pin={"org.ampcap.demo.echo": "org.ampcap.demo.echo:1.0.0"})
    assert parse_request(body).pin == {"org.ampcap.demo.echo": "org.ampcap.demo.echo:1.0.0"}
