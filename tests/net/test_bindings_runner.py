"""Running bindings at the trio edge: results, errors, timeouts, cancel."""

from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from ampcap.caps.binding.local import CommandBinding, PythonBinding
from ampcap.caps.demo import demo_manifest
from ampcap.errors import AmpError
from ampcap.bindings.runner import BindingRunner, RunnerContext, run_binding

PY = sys.executable


def ctx(cap: str = "org.ampcap.demo.echo:2.0.0", **kw: Any) -> RunnerContext:
    return RunnerContext(capability_id=cap, version=cap.rpartition(":")[2], **kw)


def cmd(code: str, timeout_ms: int = 10_000, **kw: Any) -> CommandBinding:
    return CommandBinding(argv=(PY, "-c", code), timeout_ms=timeout_ms, **kw)


# ------------------------------------------------------------- python bindings


@pytest.mark.trio
async def test_sync_callable_runs_in_thread_with_context() -> None:
    out = await run_binding(PythonBinding(target="ampcap.caps.demo:echo"), {"message": "hi"}, ctx())
    assert out == {"message": "hi", "version": "2.0.0", "length": 2}


@pytest.mark.trio
async def test_async_callable_reports_progress() -> None:
    reports: list[tuple[Any, Any]] = []

    async def sink(pct: float | None, text: str | None) -> None:
        reports.append((pct, text))

    out = await run_binding(PythonBinding(target="ampcap.caps.demo:sleep"), {"ms": 250},
                            ctx("org.ampcap.demo.sleep:1.0.0", progress_sink=sink))
    assert out == {"slept_ms": 250}
    assert reports and reports[-1][0] == 100.0


@pytest.mark.trio
async def test_callable_exception_is_5001_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="ampcap.bindings.runner"):
        with pytest.raises(AmpError) as info:
            await run_binding(PythonBinding(target="ampcap.caps.demo:fail"), {}, ctx("org.ampcap.demo.fail:1.0.0"))
    assert info.value.code == 5001
    assert "always fails" not in info.value.message  # no internals to the peer
    # One ERROR line naming the exception for the operator; the traceback only at DEBUG
    # (any peer can make a capability raise, and must not fill the log with tracebacks).
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "org.ampcap.demo.fail:1.0.0 raised" in error.getMessage() and error.exc_info is None
    assert any(r.exc_info for r in caplog.records if r.levelno == logging.DEBUG)


@pytest.mark.trio
async def test_a_capability_crashing_on_every_call_makes_ten_error_lines_then_one_notice(
        caplog: pytest.LogCaptureFixture) -> None:
    # Any peer can make a capability raise as often as it likes.
    runner = BindingRunner()
    with caplog.at_level(logging.DEBUG, logger="ampcap.bindings.runner"):
        for _ in range(30):
            with pytest.raises(AmpError) as info:
                await runner.run(PythonBinding(target="ampcap.caps.demo:fail"), {}, ctx("org.ampcap.demo.fail:1.0.0"))
            assert info.value.code == 5001  # every call still ends in its 5001
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 11 and sum(m.startswith("capability org.ampcap.demo.fail:1.0.0 raised") for m in errors) == 10
    assert "further ones are logged at DEBUG" in errors[10]
    demoted = [r for r in caplog.records if r.levelno == logging.DEBUG and r.getMessage().startswith("capability ")]
    assert len(demoted) == 20  # still there with -vv


_EXITING = """
import sys

def exits(params):
    sys.exit(4)

def interrupts(params):
    raise KeyboardInterrupt

async def exits_async(params):
    raise SystemExit(5)
"""


@pytest.mark.trio
@pytest.mark.parametrize("function, inline", [("exits", False), ("exits", True), ("interrupts", False),
                                               ("interrupts", True), ("exits_async", False)])
async def test_a_capability_that_exits_is_a_5001_not_the_end_of_the_daemon(
        tmp_path: Path, function: str, inline: bool) -> None:
    # sys.exit deep in a library a capability calls is that capability's crash.
    (tmp_path / "exiting_capability.py").write_text(_EXITING)
    binding = PythonBinding(target=f"exiting_capability:{function}", inline=inline, search_path=(tmp_path,))
    runner = BindingRunner()
    with pytest.raises(AmpError) as info:
        if inline:
            runner.run_inline(binding, {}, ctx())
        else:
            await runner.run(binding, {}, ctx())
    assert info.value.code == 5001


def test_a_module_that_exits_when_imported_is_a_binding_problem(tmp_path: Path) -> None:
    from ampcap.caps.binding.local import resolve_callable

    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(AmpError, match=r"called sys.exit\(3\)"):
        resolve_callable("exits_on_import:f", (tmp_path,))


@pytest.mark.trio
async def test_amp_error_from_callable_passes_through() -> None:
    with pytest.raises(AmpError) as info:
        await run_binding(PythonBinding(target="ampcap.caps.demo:current_time"), {"timezone": "Nowhere/Zone"},
                          ctx("org.ampcap.demo.current_time:1.0.0"))
    assert info.value.code == 4004


@pytest.mark.trio
async def test_unimportable_target_is_5001() -> None:
    with pytest.raises(AmpError) as info:
        await run_binding(PythonBinding(target="ampcap_no_such_module:f"), {}, ctx())
    assert info.value.code == 5001


@pytest.mark.trio
async def test_python_timeout_is_5003() -> None:
    with pytest.raises(AmpError) as info:
        await run_binding(PythonBinding(target="ampcap.caps.demo:sleep", timeout_ms=50), {"ms": 5000},
                          ctx("org.ampcap.demo.sleep:1.0.0"))
    assert info.value.code == 5003


@pytest.mark.trio
async def test_every_demo_capability_runs() -> None:
    runner = BindingRunner()
    params = {"echo": {"message": "m"}, "math.add": {"a": 1, "b": 2}, "sleep": {"ms": 1},
              "current_time": {"format": "unix"}, "noop": {}}
    for spec in demo_manifest().capabilities:
        short = spec.name.removeprefix("org.ampcap.demo.")
        context = ctx(spec.id)
        if short == "fail":
            with pytest.raises(AmpError) as info:
                await runner.run(spec.binding, {}, context)
            assert info.value.code == 5001
            continue
        result = await runner.run(spec.binding, params[short], context)
        if short == "noop":
            assert result is None
        elif short == "math.add":
            assert result == {"sum": 3}
        elif short == "current_time":
            assert abs(result["time"] - time.time()) < 60


# ------------------------------------------------------------ command bindings


@pytest.mark.trio
async def test_command_json_in_json_out() -> None:
    code = "import json,sys; p=json.load(sys.stdin); print(json.dumps({'sum': p['a'] + p['b']}))"
    assert await run_binding(cmd(code), {"a": 2, "b": 3}, ctx()) == {"sum": 5}


@pytest.mark.trio
async def test_command_env_and_cwd(tmp_path: Path) -> None:
    code = "import json,os; print(json.dumps([os.environ['X'], os.environ['AMPCAP_CAPABILITY_ID'], os.getcwd()]))"
    out = await run_binding(cmd(code, env={"X": "1"}, cwd=tmp_path), {}, ctx())
    assert out == ["1", "org.ampcap.demo.echo:2.0.0", str(tmp_path)]


@pytest.mark.trio
async def test_command_timeout_is_5003_and_process_killed(tmp_path: Path) -> None:
    marker = tmp_path / "still-running"
    code = f"import time,pathlib; time.sleep(1); pathlib.Path({str(marker)!r}).write_text('x')"
    started = trio.current_time()
    with pytest.raises(AmpError) as info:
        await run_binding(cmd(code, timeout_ms=200), {}, ctx())
    assert info.value.code == 5003
    assert trio.current_time() - started < 0.9
    await trio.sleep(1.2)
    assert not marker.exists()  # killed, not merely abandoned


@pytest.mark.trio
async def test_command_cancel_kills(tmp_path: Path) -> None:
    marker = tmp_path / "still-running"
    code = f"import time,pathlib; time.sleep(1); pathlib.Path({str(marker)!r}).write_text('x')"
    with trio.move_on_after(0.2):
        await run_binding(cmd(code), {}, ctx())
    await trio.sleep(1.2)
    assert not marker.exists()


@pytest.mark.trio
async def test_command_nonzero_exit_is_5001_and_stderr_stays_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    code = "import sys; sys.stderr.write('x' * 10000 + 'password=hunter2'); sys.exit(3)"
    with pytest.raises(AmpError) as info:
        await run_binding(cmd(code), {}, ctx())
    assert info.value.code == 5001
    assert info.value.details == {"exit_status": 3}  # what the caller sees
    logged = [r.getMessage() for r in caplog.records if "exited with status 3" in r.getMessage()]
    assert len(logged) == 1 and logged[0].endswith("password=hunter2")


@pytest.mark.trio
async def test_command_stderr_reaches_the_caller_only_when_asked() -> None:
    code = "import sys; sys.stderr.write('x' * 10000 + 'the end'); sys.exit(3)"
    with pytest.raises(AmpError) as info:
        await run_binding(cmd(code, stderr_to_caller=True), {}, ctx())
    assert info.value.details["exit_status"] == 3
    tail = info.value.details["stderr_tail"]
    assert tail.endswith("the end") and len(tail) <= 2048


@pytest.mark.trio
@pytest.mark.parametrize("output", ["", "not json", "{\"a\": "])
async def test_command_invalid_json_is_5001(output: str) -> None:
    with pytest.raises(AmpError) as info:
        await run_binding(cmd(f"print({output!r})"), {}, ctx())
    assert info.value.code == 5001


@pytest.mark.trio
async def test_command_output_is_capped() -> None:
    code = "import sys\nwhile True: sys.stdout.write('x' * 65536)"
    with pytest.raises(AmpError) as info:
        await run_binding(CommandBinding(argv=(PY, "-c", code), max_output_bytes=100_000), {}, ctx())
    assert info.value.code == 5001
    assert "exceeds" in info.value.message


@pytest.mark.trio
async def test_command_that_ignores_stdin_and_missing_program() -> None:
    assert await run_binding(cmd("print('[1]')"), {"big": "y" * 1_000_000}, ctx()) == [1]
    with pytest.raises(AmpError) as info:
        await run_binding(CommandBinding(argv=("/nonexistent/program",)), {}, ctx())
    assert info.value.code == 5001


@pytest.mark.trio
async def test_params_without_json_form_are_5001() -> None:
    with pytest.raises(AmpError) as info:
        await run_binding(cmd("print(1)"), {"b": b"\x00"}, ctx())
    assert info.value.code == 5001


@pytest.mark.trio
async def test_progress_is_clamped() -> None:
    seen: list[Any] = []

    async def sink(pct: float | None, text: str | None) -> None:
        seen.append(pct)

    c = ctx(progress_sink=sink)
    for value in (150, -3, float("nan"), None, 42.5):
        await c.progress(value)
    assert seen == [100.0, 0.0, None, None, 42.5]


def _which_thread(params: Any) -> str:
    return threading.current_thread().name


@pytest.mark.trio
async def test_inline_binding_runs_on_the_event_loop_thread() -> None:
    runner = BindingRunner()
    target = f"{__name__}:_which_thread"
    inline, threaded = PythonBinding(target=target, inline=True), PythonBinding(target=target)
    main = threading.current_thread().name
    assert runner.is_inline(inline) and not runner.is_inline(threaded)
    assert runner.run_inline(inline, {}, ctx()) == main
    assert await runner.run(inline, {}, ctx()) == main
    assert await runner.run(threaded, {}, ctx()) != main


def _raises(params: Any) -> None:
    raise KeyError("secret detail")


@pytest.mark.trio
async def test_inline_binding_errors_are_5001() -> None:
    runner = BindingRunner()
    with pytest.raises(AmpError) as info:
        runner.run_inline(PythonBinding(target=f"{__name__}:_raises", inline=True), {}, ctx())
    assert info.value.code == 5001 and "secret" not in info.value.message
    # An async function is never inline, whatever the flag says.
    assert not runner.is_inline(PythonBinding(target="ampcap.caps.demo:sleep", inline=True))
