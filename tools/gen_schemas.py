"""Regenerate src/ampcap/schema/_compiled.py, the compiled AMP schemas the
package ships (so a one-shot command does not parse CDDL: issue 26).

Run it after editing any file in src/ampcap/schema/cddl/ (or the compiler);
tests/schema/test_artifact.py fails while the shipped module is stale.

    python tools/gen_schemas.py [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ampcap.schema import schema_sources
from ampcap.schema.artifact import dump
from ampcap.schema.engine import compile_sources

TARGET = Path(__file__).resolve().parents[1] / "src" / "ampcap" / "schema" / "_compiled.py"


def generate() -> str:
    return dump(compile_sources(schema_sources()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the shipped module is stale; write nothing")
    args = parser.parse_args(argv)
    text = generate()
    current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else None
    if args.check:
        if current != text:
            print(f"{TARGET} is stale: run python tools/gen_schemas.py", file=sys.stderr)
            return 1
        return 0
    if current != text:
        TARGET.write_text(text, encoding="utf-8")
        print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
