"""Binding descriptions: validation, callable resolution, context detection."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ampcap.caps.binding.context import InvocationContext
from ampcap.caps.binding.local import (
    DEFAULT_COMMAND_TIMEOUT_MS,
    CommandBinding,
    PythonBinding,
    resolve_callable,
    wants_context,
)
from ampcap.errors import AmpError


@pytest.mark.parametrize("target", ["", "mod", ":f", "mod:", "a b:f", "mod:f-g", "1mod:f"])
def test_python_target_syntax(target: str) -> None:
    with pytest.raises(AmpError) as info:
        PythonBinding(target=target)
    assert info.value.code == 4001


def test_python_binding_accepts_dotted_paths() -> None:
    b = PythonBinding(target="ampcap.caps.demo:echo", timeout_ms=10)
    assert b.kind == "python" and b.describe() == "ampcap.caps.demo:echo"


@pytest.mark.parametrize("argv", [(), ("",), ("a\x00b",)])
def test_command_argv(argv: tuple[str, ...]) -> None:
    with pytest.raises(AmpError):
        CommandBinding(argv=argv)


@pytest.mark.parametrize("timeout", [0, -1, True, 1.5, 10**12])
def test_timeouts_are_bounded(timeout: Any) -> None:
    with pytest.raises(AmpError):
        CommandBinding(argv=("x",), timeout_ms=timeout)


def test_command_defaults_and_immutability() -> None:
    b = CommandBinding(argv=("cat",), env={"A": "1"})
    assert b.timeout_ms == DEFAULT_COMMAND_TIMEOUT_MS and b.kind == "command"
    with pytest.raises(TypeError):
        b.env["B"] = "2"  # type: ignore[index]


def test_resolve_callable() -> None:
    from ampcap.caps import demo

    assert resolve_callable("ampcap.caps.demo:echo") is demo.echo
    assert resolve_callable("ampcap.caps.demo:DemoFailure.__init__")
    for bad in ("no_such_module_xyz:f", "ampcap.caps.demo:nope", "ampcap.caps.demo:DEMO_NAMESPACE"):
        with pytest.raises(AmpError) as info:
            resolve_callable(bad)
        assert info.value.code == 4001


def test_resolve_callable_with_search_path(tmp_path: Path) -> None:
    (tmp_path / "ampcap_test_plugin_mod.py").write_text("def run(params):\n    return 7\n")
    fn = resolve_callable("ampcap_test_plugin_mod:run", (tmp_path,))
    assert fn({}) == 7


def test_wants_context() -> None:
    def one(params: Any) -> None: ...
    def two(params: Any, context: Any) -> None: ...
    def star(*args: Any) -> None: ...
    def kw_only(params: Any, *, context: Any = None) -> None: ...
    async def atwo(params: Any, ctx: Any) -> None: ...

    assert not wants_context(one)
    assert wants_context(two) and wants_context(star) and wants_context(atwo)
    assert not wants_context(kw_only)
    wants_context(print)  # builtins without a signature must not crash


def test_context_protocol_is_runtime_checkable() -> None:
    class Ctx:
        capability_id = "a.b:1.0.0"
        version = "1.0.0"

        def now_ms(self) -> int:
            return 0

        def remaining_ms(self) -> int | None:  # R23: the invoke's budget left
            return None

        async def sleep(self, ms: int) -> None: ...

        async def progress(self, percent: float | None, message: str | None = None) -> None: ...

        async def ask(self, prompt: str, *, options: list[str] | None = None,  # RFC 006 INPUT_REQUIRED
                      timeout_ms: int | None = None) -> str: ...

    assert isinstance(Ctx(), InvocationContext)
    assert not isinstance(object(), InvocationContext)
