"""Run one fuzz target under libFuzzer (atheris, not a project dependency:
``pip install atheris``).

    python tools/fuzz/run.py executor [CORPUS_DIR] [libFuzzer flags, e.g. -max_total_time=600]

The corpus directory (default ``fuzz-corpus/TARGET``) gets the target's seeds
when it is empty; a crash is written as ``crash-<sha1>`` in the current
directory and replays with ``python tools/fuzz/run.py TARGET crash-<sha1>``.
Targets: see ``tools/fuzz/targets.py``.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

try:
    import atheris
except ImportError:  # pragma: no cover - depends on the machine
    sys.exit("run.py needs atheris: pip install atheris")

sys.path.insert(0, str(Path(__file__).parent))
# Everything the targets reach must be imported here to be instrumented,
# including what the CLI imports only when a command runs.
with atheris.instrument_imports(include=["ampcap"]):
    import ampcap.cli.client  # noqa: F401
    import ampcap.cli.dump  # noqa: F401
    import ampcap.cli.main  # noqa: F401
    import ampcap.deleg.chain  # noqa: F401
    import ampcap.deleg.service  # noqa: F401
    import ampcap.display  # noqa: F401
    import ampcap.dump.correlate  # noqa: F401
    import ampcap.dump.diag  # noqa: F401
    import ampcap.dump.pcap  # noqa: F401
    import ampcap.dump.records  # noqa: F401
    import ampcap.dump.render  # noqa: F401
    import ampcap.dump.session  # noqa: F401
    import ampcap.dump.streams  # noqa: F401
    import ampcap.net.transport.http_server  # noqa: F401
    import ampcap.net.api.peer  # noqa: F401
    import ampcap.net.transport.wsmessages  # noqa: F401
    import ampcap.schema.engine  # noqa: F401
    import ampcap.session.provider  # noqa: F401
    import ampcap.wire.bearer  # noqa: F401
    from targets import TARGETS


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] not in TARGETS:
        sys.exit(f"usage: run.py {{{','.join(TARGETS)}}} [CORPUS_DIR|CRASH_FILE] [libFuzzer flags]")
    name, rest = argv[1], argv[2:]
    target = TARGETS[name]
    if not rest or rest[0].startswith("-"):
        rest = [f"fuzz-corpus/{name}", *rest]
    corpus = Path(rest[0])
    if not corpus.is_file():
        corpus.mkdir(parents=True, exist_ok=True)
        if not any(corpus.iterdir()):
            for seed in target.seeds():
                (corpus / hashlib.sha1(seed).hexdigest()).write_bytes(seed)
    flags = [f"-max_len={target.max_len}", "-timeout=10", *rest]
    atheris.Setup([argv[0], *flags], target.run)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
