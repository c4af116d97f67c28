"""What a one-shot command imports (issue 26): each CLI call pays for its
imports, so `ampcap --help` and a client call (`query`, `invoke`) must not
load what only serving, manifests, params checking or capture reading use.
Behaviour, not a timing: the modules present in ``sys.modules`` afterwards,
in a fresh interpreter. (tools/bench_startup.py measures the time.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
from amp_helpers import serve_process  # noqa: E402

# Imported only by serve, manifests and params checks, dump's capture
# reader and the interop harness; none of them by a client call.
# The capability negotiation and the manifest model load on the first invoke
# a Catalog serves; the other subcommands' modules only when named.
NEVER_FOR_A_CLIENT = ("jsonschema", "fastjsonschema", "dpkt", "tomllib", "ampcap.caps.demo", "ampcap.interop",
                      "ampcap.dump.pcap", "ampcap.files.manifest", "ampcap.files.policy", "ampcap.caps.negotiate",
                      "ampcap.caps.manifest", "ampcap.caps.manifest_errors", "ampcap.caps.manifest_model",
                      "ampcap.caps.capability_table", "ampcap.caps.binding.section",
                      # The serving half of the daemon: a client-only daemon builds it on the
                      # first message that needs it (tests/net/test_client_daemon.py).
                      "ampcap.peer.executor", "ampcap.peer.delegated", "ampcap.peer.invoke_state", "ampcap.deleg",
                      "ampcap.peer.actions", "ampcap.peer.caller_checks", "ampcap.peer.query_answers",
                      "ampcap.peer.invoke_validation", "ampcap.peer.journal_side", "ampcap.cli.serve_state", "ampcap.cli.workers",
                      "ampcap.store", "sqlite3", "ampcap.net.daemon.jobs", "ampcap.net.daemon.durable",
                      "ampcap.net.daemon.serving",
                      # The schemas ship compiled (schema/_compiled.py): no CDDL parsing.
                      "cddlparser", "ampcap.schema.engine",
                      # Tracing only with --trace (tests/net/test_tracing.py checks serve too).
                      "opentelemetry", "ampcap.net.features.tracing", "ampcap.wire.trace_context")
# A command line naming query or invoke builds only their parser.
OTHER_COMMANDS = ("ampcap.cli.caps", "ampcap.cli.dump", "ampcap.cli.interop", "ampcap.cli.keys")
# --help builds the parser only: no event loop, no codec, no schemas either.
# Nor msgspec (~7 ms): the modules --help loads (errors, url, frames,
# identity) keep dataclasses for that reason.
NEVER_FOR_HELP = (*NEVER_FOR_A_CLIENT, "trio", "ampcap.net.daemon", "ampcap.schema.engine", "cddlparser",
                  "ampcap.caps.manifest", "msgspec")

_PROBE = """
import contextlib, io, json, sys
import ampcap.cli.main as main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        status = main.main(sys.argv[1:])
    except SystemExit as exc:
        status = exc.code
import dataclasses
made = sorted(f"{name}.{v.__qualname__}" for name, mod in list(sys.modules.items()) if name.startswith("ampcap")
              for v in list(vars(mod).values())
              if isinstance(v, type) and v.__module__ == name and dataclasses.is_dataclass(v))
print(json.dumps({"status": status, "modules": sorted(sys.modules), "dataclasses": made}))
"""

# Creating a dataclass costs ~0.5 ms at import (it compiles the source of
# each generated method; slots=True builds the class twice), a msgspec
# Struct ~0.01 ms: message, event and config classes a client call loads are
# Structs. These few stay dataclasses, each for a reason (init=False fields,
# or dataclasses.replace callers); a new one on the client path should be a
# Struct (docs/performance.md, start-up) or be added here with its reason.
CLIENT_DATACLASSES = {
    "ampcap.caps.semver.Version",  # a cached comparison key: field(init=False, compare=False)
    "ampcap.deleg.chain.Decision",  # dataclasses.replace in the executor
    "ampcap.deleg.chain.VerifierConfig",  # dataclasses.replace in the daemon
    "ampcap.deleg.scope.EffectiveScope",  # a cached flag: field(init=False)
    "ampcap.session.record.SessionRecord",  # dataclasses.replace in the session provider
    "ampcap.peer.config.ConnectionConfig",  # dataclasses.replace in the daemon, relay and HTTP clients
    "ampcap.peer.invoker.InvokeProgress",
    "ampcap.peer.limits.InFlightLimits",  # counters: field(init=False)
    "ampcap.peer.policy.Pattern",  # a compiled regex: field(init=False, compare=False)
    "ampcap.wire.cbor.decode.DecodeLimits",  # dataclasses.replace in the daemon
    # Loaded by --help too, which does not import msgspec (see NEVER_FOR_HELP).
    "ampcap.net.transport.url.AmpUrl", "ampcap.wire.frames.Frame", "ampcap.wire.identity.Identity",
    "ampcap.wire.registry.ErrorInfo",
    # Left as they were while the sessions branch changed these files.
    "ampcap.bindings.runner.RunnerContext", "ampcap.bindings.runner.ThreadContext",
    "ampcap.net.daemon.calls.CallOutcome", "ampcap.net.daemon.jobs._RunningJob",
}


def _report(tmp: Path, *argv: str) -> dict[str, Any]:
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp / "caller-config"))
    done = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, env=env, timeout=60)
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return report


def _modules_after(tmp: Path, *argv: str) -> tuple[int, set[str]]:
    report = _report(tmp, *argv)
    return report["status"], set(report["modules"])


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_help_imports_no_event_loop_schemas_or_servers(tmp_path: Path) -> None:
    for argv in (["--help"], ["invoke", "--help"], ["query", "--help"], ["dump", "--help"]):
        status, modules = _modules_after(tmp_path, *argv)
        assert status in (0, None), argv
        assert _loaded(modules, NEVER_FOR_HELP) == [], argv
        if argv[0] in ("invoke", "query"):
            assert _loaded(modules, OTHER_COMMANDS) == [], argv


def test_a_client_call_imports_only_what_it_uses(tmp_path: Path) -> None:
    (tmp_path / "server").mkdir()
    with serve_process(tmp_path / "server") as daemon:
        for argv in (["invoke", daemon.url, "org.ampcap.demo.math.add:1.0.0", "--params", '{"a": 1, "b": 2}'],
                     ["query", daemon.url, "org.ampcap.demo.echo", "--json"]):
            status, modules = _modules_after(tmp_path, *argv)
            assert status == 0, argv
            assert "trio" in modules and "ampcap.net.daemon.core" in modules  # it did run the call
            assert _loaded(modules, (*NEVER_FOR_A_CLIENT, *OTHER_COMMANDS)) == [], argv


def test_a_client_call_defines_its_classes_cheaply(tmp_path: Path) -> None:
    (tmp_path / "server").mkdir()
    with serve_process(tmp_path / "server") as daemon:
        report = _report(tmp_path, "invoke", daemon.url, "org.ampcap.demo.math.add:1.0.0", "--params", '{"a": 1, "b": 2}')
    assert report["status"] == 0
    assert "ampcap.peer.events" in report["modules"] and "ampcap.wire.transport" in report["modules"]
    assert sorted(set(report["dataclasses"]) - CLIENT_DATACLASSES) == []


def test_the_command_table_names_every_subcommand_and_its_module() -> None:
    import argparse
    import importlib

    from ampcap.cli.main import COMMAND_MODULES, SUBCOMMAND_MODULES, build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert sorted(COMMAND_MODULES) == sorted(sub.choices)
    for command, module in COMMAND_MODULES.items():
        assert module in SUBCOMMAND_MODULES
        one = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(f"ampcap.cli.{module}").register(one)
        assert command in one.choices, (command, module)


def test_only_a_named_command_builds_just_its_parser() -> None:
    import argparse

    from ampcap.cli.main import build_parser

    def commands(argv: list[str] | None) -> list[str]:
        parser = build_parser(argv)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return sorted(sub.choices)

    everything = commands(None)
    assert commands(["invoke", "amp://x", "y"]) == ["invoke", "query", "session"]  # cli/client.py's three
    assert commands(["mcp", "amp://x"]) == ["mcp"]
    assert commands(["-vv", "--verbose", "keygen"]) == ["id", "keygen"]
    # Anything that could change the parse, or no command at all: every parser,
    # so --help lists them all and a wrong name is told the choices.
    for argv in ([], ["--help"], ["--help", "invoke"], ["--version"], ["nosuch"], ["--", "invoke"], ["-x", "dump"]):
        assert commands(argv) == everything, argv
