"""The interop harness against a correct target, deliberately broken
targets, the suite's report schema, and the ``ampcap interop`` command line."""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
import trio

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
from amp_helpers import self_signed_cert  # noqa: E402
from demo_target import EchoProvider, Faults, serve_target  # noqa: E402

from ampcap.cli.main import main  # noqa: E402
from ampcap.interop.probe import ProbeSettings  # noqa: E402
from ampcap.interop.report import REPORT_SCHEMA, build_report, render_table, validate_report  # noqa: E402
from ampcap.interop.runner import RunResult, VectorResult, discover, run_vectors  # noqa: E402
import ampcap  # noqa: E402
from ampcap.interop.session_vectors import NO_SESSIONS  # noqa: E402
from ampcap.interop.suite import REQUIRED_VECTORS, Where, known_ids, suite_vectors  # noqa: E402
from ampcap.interop.vectors import Context, Status, demo_subject, vector_ids  # noqa: E402

# The vectors run against a target; the rest of a report is skips with reasons.
TARGET_IDS = {s.id for s in suite_vectors() if s.where is Where.TARGET}
# RFC 006's run against the target too, but the EchoProvider target has no
# sessions: it fails them (the suite requires them), and the notes say why.
SESSION_IDS = {"006:A.2", "006:A.15", "006:A.17"}
# RFC 007's: the demo target serves no payment workflow, so they skip, saying
# so (tests/pay/test_interop_pay.py runs them against a daemon that does).
from ampcap.interop.pay_vectors import NOT_SERVED, PAY_VECTORS  # noqa: E402

PAY_IDS = {v.id for v in PAY_VECTORS}
from ampcap.net.transport.url import parse_url  # noqa: E402
from ampcap.wire.identity import Identity  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402

SCHEMA_FILE = Path("/work/shared/conformance/interop-report.schema.json")
if not SCHEMA_FILE.exists():  # the suite's own copy
    SCHEMA_FILE = Path("/tmp/rfcs/conformance/2026-02-07-draft-v1/interop-report.schema.json")

FAST = ProbeSettings(timeout_s=1.0, settle_s=0.05)
RESULT_VECTORS = {"004:A.2", "004:A.3", "004:A.5", "004:A.20"}  # each expects one CAP_RESULT
PROVIDER_ERROR_VECTORS = {"004:A.4", "004:A.6", "004:A.8", "004:A.15", "004:A.16", "004:A.17", "004:A.23",
                          "005:A.4", "005:A.14", "005:A.20"}


async def _run_against(faults: Faults) -> RunResult:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_target, EchoProvider(faults), Identity.generate(os.urandom))
        result = await run_vectors(parse_url(f"amp://127.0.0.1:{port}"), FAST, demo_subject())
        nursery.cancel_scope.cancel()
    return result


@pytest.mark.trio
async def test_discovery_follows_next_cursor_across_pages() -> None:
    # One version per CAP_DECLARE: the three demo versions arrive on three pages.
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_target, EchoProvider(page_size=1), Identity.generate(os.urandom))
        ctx = Context(url=parse_url(f"amp://127.0.0.1:{port}"), settings=FAST, subject=demo_subject())
        await discover(ctx)
        nursery.cancel_scope.cancel()
    assert [str(v) for v in ctx.subject.versions] == ["1.0.0", "1.1.0", "2.0.0"]


def _failed(result: RunResult) -> set[str]:
    return {r.vector_id for r in result.results if r.status is Status.FAIL}


@pytest.mark.trio
async def test_correct_target_passes_every_vector_and_the_report_validates() -> None:
    result = await _run_against(Faults())
    # The report speaks for the whole suite: every vector once, in order.
    assert [r.vector_id for r in result.results] == known_ids()
    assert set(REQUIRED_VECTORS) <= {r.vector_id for r in result.results}
    not_passed = {r.vector_id: r.notes for r in result.results
                  if r.vector_id in TARGET_IDS - PAY_IDS and r.status is not Status.PASS}
    assert set(not_passed) == SESSION_IDS, not_passed
    assert all(r.status is Status.SKIP and r.notes == NOT_SERVED for r in result.results if r.vector_id in PAY_IDS)
    assert all(r.status is Status.FAIL for r in result.results if r.vector_id in SESSION_IDS)
    assert NO_SESSIONS in not_passed["006:A.2"] and NO_SESSIONS in not_passed["006:A.15"]
    assert "expected ERROR 1001" in not_passed["006:A.17"]  # it checks the context before any session
    skipped = {r.vector_id: r.notes for r in result.results if r.vector_id not in TARGET_IDS}
    assert all(r.status is Status.SKIP and r.notes for r in result.results if r.vector_id in skipped)
    assert "--self" in skipped["001:A.2"] and "--relay" in skipped["003:A.1"]
    assert {"005:A.4", "005:A.14", "005:A.20"} <= TARGET_IDS  # RFC 005's vectors run against the target
    assert SESSION_IDS <= TARGET_IDS  # and RFC 006's: no "not implemented yet" skip for them
    report = build_report(result)
    jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text())).validate(report)
    assert report["implementation"]["id"] == result.target_did  # ampcap's HELLO_ACK has no agent_info


@pytest.mark.trio
@pytest.mark.parametrize(("faults", "expected"), [
    (Faults(wrong_reply_to=frozenset({MessageType.CAP_RESULT})), RESULT_VECTORS),
    (Faults(skip=frozenset({MessageType.CAP_RESULT})), RESULT_VECTORS),
    (Faults(duplicate=frozenset({MessageType.CAP_RESULT})), RESULT_VECTORS),
    (Faults(duplicate=frozenset({MessageType.ERROR})), PROVIDER_ERROR_VECTORS),
], ids=["wrong-reply_to", "missing-result", "two-results", "two-errors"])
async def test_broken_target_fails_exactly_the_faulted_vectors(faults: Faults, expected: set[str]) -> None:
    result = await _run_against(faults)
    assert _failed(result) - SESSION_IDS - PAY_IDS == expected  # 006: no sessions there (see above); 007: no payments
    assert not [r for r in result.results if r.status is Status.SKIP and r.vector_id in TARGET_IDS - PAY_IDS]
    notes = {r.vector_id: r.notes for r in result.results
             if r.status is Status.FAIL and r.vector_id not in SESSION_IDS | PAY_IDS}
    if faults.duplicate:
        assert all("2 terminal replies" in n for n in notes.values())
    else:
        assert all("no terminal reply" in n for n in notes.values())
    validate_report(build_report(result))


def test_embedded_schema_is_the_suites_schema() -> None:
    assert REPORT_SCHEMA == json.loads(SCHEMA_FILE.read_text())


def test_report_validation_refuses_a_bad_report() -> None:
    from ampcap.errors import AmpError

    with pytest.raises(AmpError) as info:
        validate_report({"suite_version": "2026-02-07-draft-v1", "implementation": {"id": "x", "version": "1"},
                         "run": {"executed_at": "now", "environment": {"os": "a", "arch": "b", "runtime": "c"}},
                         "results": [{"vector_id": "002:A.1", "status": "maybe"}]})
    assert info.value.code == 1001


@pytest.mark.trio
async def test_silent_target_times_out_as_failures_not_a_hang() -> None:
    async def swallow(stream: trio.SocketStream) -> None:
        while await stream.receive_some(65536):
            pass

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, swallow, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        settings = ProbeSettings(timeout_s=0.3, settle_s=0.05)
        with trio.fail_after(30):
            result = await run_vectors(parse_url(f"amp://127.0.0.1:{port}"), settings, demo_subject(),
                                       only=["001:hello", "002:A.1", "004:A.17"])
        nursery.cancel_scope.cancel()
    assert [(r.vector_id, r.status) for r in result.results] == [
        ("001:hello", Status.FAIL), ("002:A.1", Status.FAIL), ("004:A.17", Status.FAIL)]
    assert all("HANDSHAKE" in r.notes for r in result.results)



def test_report_to_a_fifo_or_device_is_written_into_it_not_renamed_over_it(tmp_path: Path) -> None:
    # `--report /dev/null` once replaced /dev/null itself with a regular file
    # (a temporary file renamed over it). A FIFO takes the same path here.
    import stat

    from ampcap.interop.report import write_report

    run = RunResult(target="amp://t", target_did=None, target_info=None, subject=demo_subject(),
                    results=[VectorResult("004:A.5", "t", Status.PASS, "", 0.1)])
    report = build_report(run)
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader in place before the report comes
    try:
        write_report(report, fifo)  # fits in the pipe's buffer
        os.set_blocking(reader, True)
        got = b"".join(iter(lambda: os.read(reader, 65536), b""))
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert json.loads(got)["results"][0]["status"] == "pass"
    # A plain file: written whole, with the usual mode, and no temporary left.
    old = os.umask(0o022)
    try:
        path = write_report(report, tmp_path / "report.json")
    finally:
        os.umask(old)
    assert json.loads(path.read_text()) == report
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.fifo", "report.json"]
    # Replacing it keeps its mode; a symlink is written through, not replaced.
    path.chmod(0o640)
    write_report(report, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    link = tmp_path / "link.json"
    link.symlink_to(path)
    path.write_text("old")
    write_report(report, link)
    assert link.is_symlink() and json.loads(path.read_text()) == report
    # A FIFO nobody reads is an error at once, not a hang.
    with pytest.raises(OSError):
        write_report(report, fifo)


def test_table_shows_a_targets_text_escaped() -> None:
    # Notes quote what the target sent; the table must not pass its escapes on.
    run = RunResult(target="amp://t", target_did=None, target_info=None, subject=demo_subject(),
                    results=[VectorResult("004:A.5", "t", Status.FAIL, "got \x1b[2J\x9b1m\u202eX", 0.1)])
    table = render_table(run)
    assert not any(c in table for c in "\x1b\x9b\u202e")
    assert "got \\x1b[2J\\x9b1m\\u202eX" in table

# ------------------------------------------------------------- command line


@pytest.fixture
def target_port() -> Iterator[int]:
    """A correct demo target in its own thread (the CLI runs its own trio loop)."""
    ready: list[int] = []
    started = threading.Event()
    cancel: list[trio.CancelScope] = []
    token: list[trio.lowlevel.TrioToken] = []

    async def serve() -> None:
        with trio.CancelScope() as scope:
            cancel.append(scope)
            token.append(trio.lowlevel.current_trio_token())
            async with trio.open_nursery() as nursery:
                ready.append(await nursery.start(serve_target, EchoProvider(), Identity.generate(os.urandom)))
                started.set()

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    assert started.wait(10)
    yield ready[0]
    token[0].run_sync_soon(cancel[0].cancel)
    thread.join(10)


def test_cli_runs_vectors_writes_a_valid_report_and_exits_0(target_port: int, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "interop-report.json"
    code = main(["interop", f"amp://127.0.0.1:{target_port}", "--timeout", "1", "--report", str(out),
                 "--vector", "001:hello", "--vector", "004:A.5"])
    assert code == 0
    table = capsys.readouterr().out
    assert "001:hello" in table and "2 passed, 0 failed, 0 skipped" in table
    report = json.loads(out.read_text())
    jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text())).validate(report)
    assert [r["status"] for r in report["results"]] == ["pass", "pass"]


def test_cli_json_output_and_failure_exit_code(target_port: int, capsys: pytest.CaptureFixture[str]) -> None:
    # An alias the target does not know makes 004:A.7 fail (4002 instead of
    # a CAP_DECLARE), so the exit code is 1.
    code = main(["interop", f"amp://127.0.0.1:{target_port}", "--timeout", "1", "--report", "-", "--json",
                 "--alias", "no-such-alias", "--vector", "004:A.7", "--vector", "004:A.17"])
    assert code == 1
    report = json.loads(capsys.readouterr().out)
    assert {r["vector_id"]: r["status"] for r in report["results"]} == {"004:A.7": "fail", "004:A.17": "pass"}


@pytest.mark.parametrize("argv", [
    ["interop"],
    ["interop", "ftp://example.com"],
    ["interop", "wss://127.0.0.1:1", "--compat", "rust-example", "--target-did", "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"],
    ["interop", "amp://127.0.0.1:1", "--self"],
    ["interop", "amp://127.0.0.1:1", "--params", "{not json"],
    ["interop", "--self", "--compat", "rust-example"],
    ["interop", "amp://127.0.0.1:1", "--compat", "rust-example"],
])
def test_cli_bad_arguments_exit_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ampcap interop: ")


def test_cli_unreachable_target_is_tried_once_and_fails_every_vector(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from ampcap.interop.probe import Probe

    opened = []
    real_open = Probe.open.__func__  # type: ignore[attr-defined]

    async def counting_open(cls: type[Probe], *args: object, **kwargs: object) -> Probe:
        opened.append(args[0])
        return await real_open(cls, *args, **kwargs)

    monkeypatch.setattr(Probe, "open", classmethod(counting_open))
    sock_port = _free_port()  # bound and released: nobody listens there
    report_file = tmp_path / "report.json"
    code = main(["interop", f"amp://127.0.0.1:{sock_port}", "--timeout", "0.5", "--report", str(report_file)])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.splitlines() == [
        f"ampcap interop: error 5002 UNAVAILABLE: cannot connect to amp://127.0.0.1:{sock_port}: "
        f"all attempts to connect to 127.0.0.1:{sock_port} failed; no vector ran "
        f"(report, every vector failed: {report_file})"]
    assert len(opened) == 1  # not once per vector
    report = json.loads(report_file.read_text())
    jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text())).validate(report)
    assert [r["vector_id"] for r in report["results"]] == known_ids()
    ran = [r for r in report["results"] if r["vector_id"] in TARGET_IDS]
    assert {r["status"] for r in ran} == {"fail"}
    assert all(r["notes"].startswith("not run: cannot connect to") for r in ran)
    assert {r["status"] for r in report["results"] if r["vector_id"] not in TARGET_IDS} == {"skip"}


def test_amps_against_a_port_that_does_not_speak_tls(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def answer_in_plain_text() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        server = threading.Thread(target=answer_in_plain_text, daemon=True)
        server.start()
        code = main(["interop", f"amps://127.0.0.1:{port}", "--insecure", "--timeout", "2", "--report", "-"])
        server.join(5)
    (line,) = capsys.readouterr().err.splitlines()
    assert code == 1
    assert line.startswith(f"ampcap interop: error 5002 UNAVAILABLE: cannot connect to amps://127.0.0.1:{port}: "
                           "TLS failed: ")
    assert line.endswith("; no vector ran")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_self_passes_every_vector_it_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``ampcap interop --self``: the real daemon with the demo set, every vector."""
    import importlib.util

    if importlib.util.find_spec("ampcap.net.daemon.core") is None:
        pytest.skip("ampcap.net.daemon.core (the in-process daemon) has not landed in this tree yet")
    out = tmp_path / "self-report.json"
    code = main(["interop", "--self", "--timeout", "2", "--report", str(out)])
    report = json.loads(out.read_text())
    jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text())).validate(report)
    problems = {r["vector_id"]: r.get("notes") for r in report["results"]
                if r["status"] == "fail" or (r["status"] == "skip" and not r.get("notes"))}
    assert problems == {} and code == 0, capsys.readouterr().out
    # The whole suite is there, and the byte vectors ran against our own codec.
    statuses = {r["vector_id"]: r["status"] for r in report["results"]}
    assert set(REQUIRED_VECTORS) <= set(statuses)
    assert [statuses[v] for v in ("001:A.1", "001:A.2", "001:A.6")] == ["pass"] * 3
    assert report["implementation"] == {"id": "ampcap", "version": ampcap.__version__}


def test_a_report_that_cannot_be_written_does_not_lose_the_results(tmp_path: Path) -> None:
    import subprocess

    fifo = tmp_path / "nobody-reads"
    os.mkfifo(fifo)
    argv = [sys.executable, "-m", "ampcap.cli.main", "interop", "--self", "--vector", "004:A.7", "--report",
            str(fifo)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "004:A.7" in done.stdout and "PASS" in done.stdout
    assert done.stderr.strip().splitlines()[-1].startswith(f"ampcap interop: cannot write the report to {fifo}")


def test_self_target_warnings_stay_off_the_report_unless_verbose(tmp_path: Path) -> None:
    """Vector A.7 calls the deprecated alias 'echo' on purpose; the self-target
    daemon's warning about it is shown with -v and not otherwise, while the
    harness's own output is the same either way."""
    import subprocess

    argv = [sys.executable, "-m", "ampcap.cli.main", "interop", "--self", "--vector", "004:A.7", "--report", "-"]
    quiet = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    loud = subprocess.run(argv[:3] + ["-v"] + argv[3:], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert quiet.returncode == loud.returncode == 0, quiet.stderr + loud.stderr
    assert "004:A.7" in quiet.stdout and "PASS" in quiet.stdout
    assert "deprecated" not in quiet.stderr, quiet.stderr
    assert "alias 'echo' is deprecated" in loud.stderr, loud.stderr


@pytest.mark.trio
async def test_amps_target_over_tls(tmp_path: Path) -> None:
    from ampcap.net.transport.tls import client_context, server_context

    cert, key = self_signed_cert(tmp_path)
    settings = ProbeSettings(timeout_s=2.0, settle_s=0.05, ssl_context=client_context(ca_file=cert))
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(functools.partial(
                serve_target, EchoProvider(), Identity.generate(os.urandom), ssl_context=server_context(cert, key)))
            result = await run_vectors(parse_url(f"amps://127.0.0.1:{port}"), settings, demo_subject(),
                                       only=["001:hello", "002:A.5", "004:A.5"])
            nursery.cancel_scope.cancel()
    assert {r.vector_id: r.status for r in result.results} == {
        "001:hello": Status.PASS, "002:A.5": Status.PASS, "004:A.5": Status.PASS}, result.results


def test_amps_against_a_port_that_never_answers_the_tls_hello(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()  # the kernel accepts; nobody ever reads or writes
        port = listener.getsockname()[1]
        code = main(["interop", f"amps://127.0.0.1:{port}", "--insecure", "--timeout", "0.3", "--report", "-"])
    assert code == 1
    assert capsys.readouterr().err.splitlines() == [
        f"ampcap interop: error 5003 TIMEOUT: cannot connect to amps://127.0.0.1:{port}: "
        "no TLS handshake within 0.3 s; no vector ran"]
