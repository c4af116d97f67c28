"""The compiled schemas the package ships (schema/_compiled.py) are exactly
what the compiler makes of the .cddl files today, and load into the same
rule set: a stale or hand-edited artifact fails here (issue 26)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ampcap.schema import _compiled, load_schemas, schema_sources
from ampcap.schema.artifact import dump, load
from ampcap.schema.engine import compile_sources

ROOT = Path(__file__).parents[2]


def test_the_shipped_module_is_what_the_cddl_files_compile_to() -> None:
    fresh = dump(compile_sources(schema_sources()))
    shipped = (ROOT / "src" / "ampcap" / "schema" / "_compiled.py").read_text(encoding="utf-8")
    assert shipped == fresh, "stale: run python tools/gen_schemas.py"


def test_loading_it_rebuilds_the_same_rules_nodes_and_sharing() -> None:
    compiled = compile_sources(schema_sources())
    loaded = load(_compiled)
    assert dump(loaded) == dump(compiled)  # same rows: kinds, values, descriptions, which nodes are shared
    assert (sorted(loaded.types), loaded.groups, loaded.files) == (sorted(compiled.types), compiled.groups,
                                                                    compiled.files)
    for name, node in compiled.types.items():
        assert loaded.types[name].desc == node.desc, name
    assert load_schemas().rules.types.keys() == compiled.types.keys()


def test_the_tool_checks_and_regenerates() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_schemas.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
