"""Command-line input the audit found mishandled: bad host names, IPv6
without brackets, out-of-range seconds. Each is a usage error (exit 2, one
line naming what was wrong, no AMP code), never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from ampcap.cli.argtypes import MAX_SECONDS
from ampcap.cli.main import main

LONG_LABEL = "a" * 64


def _usage_line(capsys: pytest.CaptureFixture[str], code: int) -> str:
    out, err = capsys.readouterr()
    assert code == 2, err
    assert "Traceback" not in out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines
    return lines[-1]


@pytest.fixture(autouse=True)
def _own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


@pytest.mark.parametrize("argv, host", [
    (["query", "amp://a..b:7700", "echo"], "a..b"),
    (["query", f"amp://{LONG_LABEL}:7700", "echo"], LONG_LABEL),
    (["invoke", "amp://a..b:7700", "org.ampcap.demo.echo:1.0.0"], "a..b"),
    (["interop", "amp://a..b:7700", "--report", "-"], "a..b"),
    (["serve", "--demo", "--listen", "a..b:0"], "a..b"),
    (["serve", "--demo", "--listen", ":0", "--connect", "amp://a..b:7700"], "a..b"),
    (["serve", "--demo", "--listen", ":0", "--relay", f"amp://{LONG_LABEL}:7700"], LONG_LABEL),
    (["dump", "--listen", "a..b:0", "--upstream", "127.0.0.1:9"], "a..b"),
])
def test_a_host_name_the_resolver_refuses_is_a_usage_error_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], host: str) -> None:
    # Before: a 42-line traceback (UnicodeError from the 'idna' codec) from the dial.
    line = _usage_line(capsys, main(argv))
    assert line.startswith(f"ampcap {argv[0]}: ") and f"'{host}' is not a valid host name" in line, line
    assert not (tmp_path / "config").exists()  # refused before the default identity is made


@pytest.mark.parametrize("listen, fragment", [
    ("::1", "IPv6 addresses go in brackets: [::1]:7700"),
    ("[::1", "IPv6 addresses go in brackets: [::1]:7700"),
    ("[zz]:0", "[zz] is not an IPv6 address"),
    ("a:b:c:0", "IPv6 addresses go in brackets: [::1]:7700"),
    ("[]:0", "[] is not an IPv6 address"),
])
def test_bad_ipv6_listen_addresses_are_usage_errors_with_the_bracket_hint(
        capsys: pytest.CaptureFixture[str], listen: str, fragment: str) -> None:
    # Before: exit 1 "cannot listen on [:]:1" (misparsed), or [] bound 127.0.0.1.
    line = _usage_line(capsys, main(["serve", "--demo", "--listen", listen]))
    assert line.startswith("ampcap serve: --listen: ") and fragment in line, line


def test_an_unbracketed_ipv6_url_gets_the_bracket_hint(capsys: pytest.CaptureFixture[str]) -> None:
    line = _usage_line(capsys, main(["query", "amp://::1:7700", "echo"]))
    assert line == "ampcap query: 'amp://::1:7700' has no host (IPv6 addresses go in brackets: amp://[::1]:7700)"


@pytest.mark.parametrize("argv", [
    ["serve", "--demo", "--listen", ":0", "--drain-timeout", "1e308"],    # OverflowError traceback
    ["serve", "--demo", "--listen", ":0", "--drain-timeout", "inf"],
    ["serve", "--demo", "--listen", ":0", "--drain-timeout", "nan"],
    ["serve", "--demo", "--listen", ":0", "--drain-timeout", "0"],
    ["query", "amp://127.0.0.1:9", "echo", "--timeout", str(MAX_SECONDS + 1)],
    ["invoke", "amp://127.0.0.1:9", "org.ampcap.demo.echo:1.0.0", "--timeout", "nan"],
    ["invoke", "amp://127.0.0.1:9", "org.ampcap.demo.echo:1.0.0", "--timeout", "0"],
    ["invoke", "amp://127.0.0.1:9", "org.ampcap.demo.echo:1.0.0", "--timeout", "-1"],
    ["interop", "amp://127.0.0.1:9", "--timeout", "1e308"],
    ["interop", "amp://127.0.0.1:9", "--timeout", "0"],
    ["interop", "amp://127.0.0.1:9", "--timeout", "soon"],
])
def test_seconds_out_of_range_are_refused_while_parsing(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    line = _usage_line(capsys, int(exc.value.code or 0))
    option = argv[-2]
    assert line.startswith(f"ampcap {argv[0]}: error: argument {option}: ") and f"at most {MAX_SECONDS}" in line


def test_interop_takes_inf_like_query_and_invoke(capsys: pytest.CaptureFixture[str]) -> None:
    # inf was refused by interop alone; now it means no limit for every --timeout.
    from ampcap.cli.main import build_parser

    parser = build_parser()
    for argv in (["interop", "amp://h:1"], ["query", "amp://h:1", "x"], ["invoke", "amp://h:1", "x:1.0.0"]):
        assert parser.parse_args([*argv, "--timeout", "inf"]).timeout == float("inf")
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--drain-timeout", "inf"])
    assert "(default 5;" in " ".join(parser._subparsers._group_actions[0].choices["interop"]  # type: ignore[union-attr]
                                     .format_help().split())


def test_interop_connect_timeout_reads_as_a_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    # A listening socket that never accepts: the connect itself is what a
    # nanosecond cannot wait for. Before: "error 5002 ... cannot connect to
    # amp://...: ; no vector ran" (an empty reason).
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        code = main(["interop", f"amp://127.0.0.1:{port}", "--timeout", "1e-9", "--report", "-"])
    out, err = capsys.readouterr()
    assert code == 1
    assert err.strip() == (f"ampcap interop: error 5003 TIMEOUT: cannot connect to amp://127.0.0.1:{port}: "
                           "no connection within 1e-09 s; no vector ran")


def _nested(levels: int) -> str:
    return '{"message": ' + "[" * levels + "0" + "]" * levels + "}"


@pytest.mark.parametrize("params, message", [
    # The daemon's decoder (max_depth 32) refused it and never answered:
    # "error 5002 UNAVAILABLE: connection closed before the reply".
    (_nested(30), "--params nests deeper than 30 levels of arrays and objects (the receiver decodes at most 32, "
                  "counting the message around them)"),
    # Was exit 1, "error 1001 INVALID_MESSAGE: value cannot be encoded as CBOR".
    ('{"message": "\\ud800"}', "--params has text that is not valid Unicode (a lone surrogate such as \\ud800); "
                               "CBOR text must be UTF-8"),
    # Was "... use sys.set_int_max_str_digits() to increase the limit".
    ('{"n": ' + "9" * 5000 + "}", "--params has an integer too large to send: integers may have at most 1024 bits "
                                  "(2**1024 has 309 digits)"),
    ('{"n": -' + "9" * 400 + "}", "--params has an integer too large to send"),
])
def test_params_that_cannot_be_sent_are_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     params: str, message: str) -> None:
    line = _usage_line(capsys, main(["invoke", "amp://127.0.0.1:9", "org.ampcap.demo.echo:1.0.0", "--params", params]))
    assert line.startswith(f"ampcap invoke: {message}"), line
    assert not (tmp_path / "config").exists()  # refused before anything else


def test_params_just_within_the_limits_pass_the_local_checks() -> None:
    from ampcap.cli.client import local_params

    assert local_params(_nested(29))["message"] == [[[[[[[[[[[[[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]]]]]]]]]]]]
    assert local_params('{"n": ' + str(2 ** 1024 - 1) + "}") == {"n": 2 ** 1024 - 1}


@pytest.mark.parametrize("argv, message", [
    # Accepted, and --compat silently won.
    (["serve", "--demo", "--framing", "rfc002", "--compat", "rust-example"],
     "ampcap serve: --compat rust-example frames raw (bare 4-byte lengths): drop --framing rfc002"),
    # Plain amp:// ignored the CA file but still failed on a missing one.
    (["query", "amp://127.0.0.1:9", "echo", "--ca-file", "/nonexistent/ca.pem"],
     "ampcap query: --ca-file only applies to amps:// URLs (TLS); nothing here is dialled over TLS"),
    (["invoke", "amp://127.0.0.1:9", "org.ampcap.demo.echo:1.0.0", "--insecure"],
     "ampcap invoke: --insecure only applies to amps:// URLs (TLS); nothing here is dialled over TLS"),
    (["serve", "--demo", "--connect", "amp://127.0.0.1:9", "--ca-file", "/nonexistent/ca.pem"],
     "ampcap serve: --ca-file only applies to amps:// URLs (TLS); nothing here is dialled over TLS"),
    (["interop", "--self", "--insecure"],
     "ampcap interop: --insecure only applies to amps:// URLs (TLS); nothing here is dialled over TLS"),
    (["interop", "--self", "--target-did", "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"],
     "ampcap interop: --target-did names a TARGET's DID; --self tests an ampcap whose DID it knows"),
])
def test_contradictions_are_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                         message: str) -> None:
    assert _usage_line(capsys, main(argv)) == message
    assert not (tmp_path / "config").exists()


@pytest.mark.parametrize("argv", [
    ["interop", "--self", "--target-did", "garbage"],  # was accepted
    ["interop", "amp://127.0.0.1:9", "--compat", "rust-example", "--target-did", "did:key:"],
    ["query", "amp://127.0.0.1:9", "echo", "--peer-did", "z6Mk"],
    ["invoke", "amp://127.0.0.1:9", "x:1.0.0", "--to", "did:Web:x"],
    ["serve", "--demo", "--relay-did", "relay"],
])
def test_a_did_option_takes_only_a_did(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    line = _usage_line(capsys, int(exc.value.code or 0))
    assert f"argument {argv[-2]}: {argv[-1]!r} is not a DID (did:METHOD:ID" in line


def test_a_start_up_dial_failure_is_named_by_its_flag_whatever_its_code() -> None:
    from ampcap.cli.serve import _dial_error
    from ampcap.errors import AmpError, Unreachable

    # 5003 lacked the "--connect URL:" the 5002 case had.
    timeout = _dial_error("--connect", "amp://h:1", AmpError(5003, "amp://h:1: cannot open connection: no answer"),
                          given_ca=False)
    assert (timeout.code, timeout.message) == (5003, "--connect amp://h:1: cannot open connection: no answer")
    refused = _dial_error("--relay", "amp://h:1", Unreachable("amp://h:1", "Connection refused"), given_ca=False)
    assert (refused.code, refused.message) == (5002, "--relay amp://h:1: cannot reach it: Connection refused")
    untrusted = AmpError(5002, "amps://h:1: TLS failed: the server's certificate is not trusted (self-signed)")
    assert _dial_error("--connect", "amps://h:1", untrusted, given_ca=True).message == (
        "--connect amps://h:1: TLS failed: the server's certificate is not trusted (self-signed); "
        "the --ca-file given does not vouch for it")


@pytest.mark.parametrize("argv, prog", [
    (["query", "amp://127.0.0.1:9", "echo", "extra"], "ampcap query"),
    (["serve", "--demo", "stray"], "ampcap serve"),
    (["caps", "validate", "a.toml", "b.toml"], "ampcap caps validate"),
])
def test_an_unknown_extra_argument_names_the_subcommand(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                        prog: str) -> None:
    # Before: the top-level usage ("usage: ampcap [-h] [--version] ...").
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err == f"{prog}: error: unrecognized arguments: {argv[-1]} (see {prog} --help)\n"


@pytest.mark.parametrize("argv", [
    ["invoke"],
    ["deleg", "grant", "--to", "nobody"],
    ["query", "amp://h:1", "x", "--limit", "many"],
    ["serve", "--no-such-option"],
    ["session", "open"],
])
def test_a_usage_mistake_is_one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """README: "Mistakes exit 2 with one line" (issue 38 item 12): not
    argparse's usage block, which for invoke was eight lines."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "error: " in err and "--help)" in err, err


def test_help_states_the_limit_defaults_and_when_an_identity_is_created() -> None:
    from ampcap.caps.registry import DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT
    from ampcap.cli.main import build_parser

    choices = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    query = " ".join(choices["query"].format_help().split())
    assert (f"--limit N versions per page (0 or omitted: the daemon's default, {DEFAULT_PAGE_LIMIT} for ampcap; "
            f"ampcap serves at most {MAX_PAGE_LIMIT} per page" in query)
    for command in ("serve", "query", "invoke"):
        text = " ".join(choices[command].format_help().split())
        assert "the default file is created if missing, a file given here must exist" in text, command
        assert "created if missing)" not in text.replace("a file given here must exist)", "")
