"""Policy file parsing, DID and capability matching, token buckets."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from ampcap.errors import AmpError
from ampcap.peer.policy import ALLOW_ALL, Pattern, RateLimit, RateLimiter, parse_policy

DOC = Path(__file__).parents[2] / "docs" / "policy.md"
OURS = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"


def test_example_in_docs_parses_and_means_what_it_says() -> None:
    example = re.search(r"## Example\s+```toml\n(.*?)```", DOC.read_text(), re.S)
    assert example is not None
    policy = parse_policy(tomllib.loads(example.group(1)), source="policy.md")
    assert policy.caller_allowed(OURS)
    assert policy.caller_allowed("did:web:partner.example:agents:bob")
    assert not policy.caller_allowed("did:web:partner.example:agents:retired")
    assert not policy.caller_allowed("did:web:stranger.example")
    assert policy.capability_allowed("did:web:partner.example:a", "org.ampcap.demo.echo")
    assert not policy.capability_allowed("did:web:partner.example:a", "org.example.admin.reboot")
    assert policy.capability_allowed(OURS, "org.example.admin.reboot")
    assert policy.rate_limit == RateLimit(rate_per_s=5.0, burst=20)


def test_patterns() -> None:
    assert Pattern("did:web:example.com:*").matches("did:web:example.com:agent:bob")
    assert not Pattern("did:web:example.com:*").matches("did:web:example.com")
    assert not Pattern("did:web:example.com:*").matches("did:web:evil.com:did:web:example.com")
    assert Pattern("org.ampcap.demo.*").matches("org.ampcap.demo.math.add")
    assert not Pattern("org.ampcap.demo.*").matches("org.ampcap.demoX")
    assert Pattern("a[b]?").matches("a[b]?") and not Pattern("a[b]?").matches("ab")  # literal, not fnmatch
    assert Pattern("a.b").matches("a.b") and not Pattern("a.b").matches("axb")


def test_defaults_and_precedence() -> None:
    assert ALLOW_ALL.caller_allowed("did:x") and ALLOW_ALL.capability_allowed("did:x", "a.b")
    p = parse_policy({"default": "deny", "allow": ["did:a:*"], "deny": ["did:a:bad"]})
    assert p.caller_allowed("did:a:good") and not p.caller_allowed("did:a:bad") and not p.caller_allowed("did:b")
    rules = parse_policy({"capability": [
        {"match": "x.secret", "allow": []},
        {"match": "x.*", "deny": ["did:m"]},
        {"match": "x.open"},  # never reached: x.* matched first
    ]})
    assert not rules.capability_allowed("did:a", "x.secret")
    assert not rules.capability_allowed("did:m", "x.open") and rules.capability_allowed("did:a", "x.open")
    assert rules.capability_allowed("did:m", "y.z")


@pytest.mark.parametrize("data, fragment", [
    ({"default": "maybe"}, "default: expected"),
    ({"alow": []}, "alow: unknown key"),
    ({"allow": "did:x"}, "allow: expected a list"),
    ({"deny": [1]}, "deny[0]: expected a non-empty string"),
    ({"capability": [{"allow": []}]}, "capability[0].match: required"),
    ({"capability": [{"match": "a.*", "allow": [""]}]}, "capability[0].allow[0]"),
    ({"capability": {"match": "a"}}, "capability: expected an array"),
    ({"rate_limit": {"rate": 0, "burst": 1}}, "rate_limit.rate"),
    ({"rate_limit": {"rate": 1, "burst": 1.5}}, "rate_limit.burst"),
    ({"rate_limit": {"rate": 1, "burst": 1, "x": 1}}, "rate_limit.x: unknown key"),
])
def test_bad_policies_name_file_and_key(data: dict, fragment: str) -> None:
    with pytest.raises(AmpError) as exc:
        parse_policy(data, source="p.toml")
    assert exc.value.code == 4001
    assert exc.value.message.startswith("p.toml: ") and fragment in exc.value.message


def test_all_problems_are_listed() -> None:
    with pytest.raises(AmpError) as exc:
        parse_policy({"default": 1, "deny": [2]}, source="p.toml")
    assert len(exc.value.details) == 2 and "(and 1 more)" in exc.value.message


def test_token_bucket_refills_with_time_only() -> None:
    rl = RateLimiter(RateLimit(rate_per_s=2, burst=3))
    t = 1_000_000
    assert [rl.allow("d", t) for _ in range(4)] == [True, True, True, False]
    assert not rl.allow("d", t + 499)  # half a token is not a token
    assert rl.allow("d", t + 500) and not rl.allow("d", t + 500)
    assert rl.allow("other", t)  # per sender
    assert not rl.allow("d", t - 10_000)  # a clock stepping back mints nothing
    assert [rl.allow("d", t + 60_000) for _ in range(4)] == [True, True, True, False]  # capped at burst


def test_token_bucket_memory_is_bounded() -> None:
    rl = RateLimiter(RateLimit(rate_per_s=1, burst=1, max_senders=3))
    for i in range(100):
        rl.allow(f"did:{i}", 0)
    assert len(rl) == 3
