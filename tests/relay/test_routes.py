"""The routes file (R24): parsed with every problem named; read from disk bounded."""

from __future__ import annotations

import pytest

from ampcap.errors import AmpError
from ampcap.files.relay_routes import load_routes
from ampcap.relay.federation import RelayCandidate, select_downstream

GOOD = """
[[peer]]
did = "did:key:z6MkB"
url = "https://b.test"
trusted = true
transfer_modes = ["single", "dual"]

[[peer]]
did = "did:key:z6MkC"
url = "https://c.test"

[[route]]
recipient = "did:web:example.com:*"
via = ["did:key:z6MkC", "did:key:z6MkB"]
mode = "single"
"""


def test_a_good_file(tmp_path) -> None:
    path = tmp_path / "routes.toml"
    path.write_text(GOOD)
    routes = load_routes(path)
    assert routes.trusted("did:key:z6MkB") and not routes.trusted("did:key:z6MkC")
    route = routes.route_for("did:web:example.com:bob")
    assert route is not None and route.via == ("did:key:z6MkC", "did:key:z6MkB")
    assert routes.route_for("did:web:other") is None
    # Service order decides; dual needs a peer that offers it.
    assert [c.did for c in select_downstream(routes.candidates(route), mode="single", hop_limit=8)] == \
        ["did:key:z6MkC", "did:key:z6MkB"]
    assert [c.did for c in select_downstream(routes.candidates(route), mode="dual", hop_limit=8)] == ["did:key:z6MkB"]


def test_selection_tie_break_and_capabilities() -> None:
    cands = [RelayCandidate(did="d1", url="https://z", order=0), RelayCandidate(did="d2", url="https://a", order=0),
             RelayCandidate(did="d3", url="https://m", order=1, receipt_algs=(-7,)),
             RelayCandidate(did="d4", url="https://n", order=1, max_hop_limit=3)]
    assert [c.did for c in select_downstream(cands, mode="single", hop_limit=5)] == ["d2", "d1"]
    assert [c.did for c in select_downstream(cands, mode="single", hop_limit=2)] == ["d2", "d1", "d4"]


@pytest.mark.parametrize(("text", "words"), [
    ("[[peer]]\ndid = 'x'\nurl = 'https://a'\n", "peer[0].did"),
    ("[[peer]]\ndid = 'did:a'\nurl = 'ftp://a'\n", "peer[0].url"),
    ("[[peer]]\ndid = 'did:a'\nurl = 'https://a'\ntrusted = 'yes'\n", "peer[0].trusted"),
    ("[[route]]\nrecipient = 'did:x'\nvia = ['did:nope']\n", "not a [[peer]]"),
    ("[[peer]]\ndid = 'did:a'\nurl = 'https://a'\n[[route]]\nrecipient = 'did:x'\nvia = ['did:a']\nmode = 'x'\n",
     "route[0].mode"),
    ("[relay]\n", "unknown section"),
    ("not toml ===", "not valid TOML"),
])
def test_bad_files_get_one_clear_error(tmp_path, text, words) -> None:
    path = tmp_path / "routes.toml"
    path.write_text(text)
    with pytest.raises(AmpError) as info:
        load_routes(path)
    assert info.value.code == 4001 and words in info.value.message and str(path) in info.value.message


def test_unreadable_and_huge_files(tmp_path) -> None:
    with pytest.raises(AmpError, match="cannot read"):
        load_routes(tmp_path / "missing.toml")
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * ((1 << 20) + 10))
    with pytest.raises(AmpError, match="larger than"):
        load_routes(big)
    with pytest.raises(AmpError, match="cannot read"):
        load_routes(tmp_path)
