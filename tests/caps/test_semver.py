"""SemVer 2.0.0 precedence and the RFC 004 §4.4 range subset (R11, R14)."""

import pytest
import semver as reference
from hypothesis import given, strategies as st

from ampcap.caps.semver import Range, Version
from ampcap.errors import AmpError

ident = st.one_of(
    st.integers(0, 30).map(str),
    st.text("abcxyz-", min_size=1, max_size=4).filter(lambda s: not s.isdigit()),
)
versions = st.builds(
    lambda a, b, c, pre: f"{a}.{b}.{c}" + (("-" + ".".join(pre)) if pre else ""),
    st.integers(0, 5), st.integers(0, 5), st.integers(0, 5), st.lists(ident, max_size=3),
)


@given(versions, versions)
def test_precedence_agrees_with_reference_implementation(a: str, b: str) -> None:
    ours = (Version.parse(a) > Version.parse(b)) - (Version.parse(a) < Version.parse(b))
    assert ours == reference.Version.parse(a).compare(b)


@given(versions)
def test_parse_round_trips(text: str) -> None:
    assert str(Version.parse(text)) == text


def test_semver_spec_example_order() -> None:
    chain = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2",
             "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0"]
    parsed = [Version.parse(v) for v in chain]
    assert parsed == sorted(reversed(parsed))


def test_build_metadata_kept_but_ignored_for_precedence() -> None:
    a, b = Version.parse("1.0.0+a"), Version.parse("1.0.0+b")
    assert a == b and str(a) == "1.0.0+a" and str(b) == "1.0.0+b"


# A trailing newline, and digits outside ASCII (Arabic-Indic two, fullwidth
# one) that a Unicode-aware pattern and int() would read as 2 and 1.
@pytest.mark.parametrize("bad", ["1.0", "01.0.0", "1.0.0-01", "v1.0.0", "1.0.0-", "", "1.0.0+",
                                 "1.0.0\n", "1.0.1\u0662", "\uff11.0.0", "1.0.0-\u0662", "1.0.0+\n"])
def test_malformed_versions_are_4001(bad: str) -> None:
    with pytest.raises(AmpError) as info:
        Version.parse(bad)
    assert info.value.code == 4001


@given(st.integers(0, 5), st.integers(0, 5), st.integers(0, 5), versions)
def test_comparator_sets_agree_with_reference_for_releases(a: int, b: int, c: int, low: str) -> None:
    candidate = f"{a}.{b}.{c}"
    rng = Range.parse(f">={low} <4.0.0")
    expected = reference.Version.parse(candidate).match(f">={low}") and reference.Version.parse(candidate).match("<4.0.0")
    assert rng.contains(Version.parse(candidate)) == expected


def test_exact_range_matches_exactly() -> None:
    assert Range.parse("2.1.0").contains(Version.parse("2.1.0"))
    assert not Range.parse("2.1.0").contains(Version.parse("2.1.1"))
    assert Range.parse("2.1.0-beta").contains(Version.parse("2.1.0-beta"))


def test_prerelease_needs_a_comparator_on_the_same_triple_R14() -> None:
    assert not Range.parse(">=2.0.0 <3.0.0").contains(Version.parse("3.0.0-beta"))
    assert not Range.parse(">=2.0.0 <3.0.0").contains(Version.parse("2.5.0-rc.1"))
    assert Range.parse(">=2.5.0-rc.0 <3.0.0").contains(Version.parse("2.5.0-rc.1"))
    assert not Range.parse(">=2.5.0-rc.0 <3.0.0").contains(Version.parse("2.6.0-rc.1"))


@pytest.mark.parametrize("bad,word", [
    ("^1.2.0", "caret"), ("~1.2.0", "tilde"), ("1.x", "wildcard"), (">=1.0.0 || <0.5.0", "OR"),
    ("1.2", "partial"), ("1.0.0 - 2.0.0", "hyphen"), ("", "empty"), ("1.0.0 2.0.0", "operator"),
])
def test_unsupported_range_forms_are_4001_with_a_clear_message(bad: str, word: str) -> None:
    with pytest.raises(AmpError) as info:
        Range.parse(bad)
    assert info.value.code == 4001
    assert word in info.value.message


def test_range_keeps_its_text() -> None:
    assert str(Range.parse(">=1.0.0  <2.0.0")) == ">=1.0.0  <2.0.0"


@pytest.mark.parametrize("text", [">=1.0.0 <" + "9" * 1_000_000, "1.0.0 ||" + " 2.0.0" * 300_000,
                                  "abc" * 500_000, ">=1.0" + ".0" * 500_000])
def test_a_huge_bad_range_gives_a_short_message(text: str) -> None:
    # The message goes back to the peer in an ERROR and into the log: it
    # must not echo a range of megabytes.
    with pytest.raises(AmpError) as info:
        Range.parse(text)
    assert info.value.code == 4001 and len(info.value.message) < 1_000 and f"({len(text)} chars)" in info.value.message


def test_a_huge_bad_version_gives_a_short_message() -> None:
    with pytest.raises(AmpError) as info:
        Version.parse("1.0" + "x" * 1_000_000)
    assert len(info.value.message) < 500 and "(1000003 chars) is not a SemVer" in info.value.message
