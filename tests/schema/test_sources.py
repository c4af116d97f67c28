"""The packaged schema files are read the same way whether the package sits
on disk (read directly, the cheap path a one-shot command takes) or inside a
zip archive (through importlib.resources)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import ampcap
from ampcap.schema import SCHEMA_FILES, schema_sources


def test_files_on_disk_are_read_in_load_order() -> None:
    sources = schema_sources()
    assert [name for name, _ in sources] == list(SCHEMA_FILES)
    assert all("=" in text for _, text in sources)


def test_a_zipped_package_reads_the_same_text(tmp_path: Path) -> None:
    package = Path(ampcap.__file__).parent
    archive = tmp_path / "ampcap.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for folder, dirs, files in os.walk(package, followlinks=True):  # schema/cddl is a symlink in a checkout
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if name.endswith((".py", ".cddl")):
                    path = Path(folder) / name
                    zf.write(path, Path("ampcap") / path.relative_to(package))
    probe = ("import json, sys; sys.path.insert(0, sys.argv[1]); import ampcap.schema as s; "
             "print(json.dumps([s.__file__, s.schema_sources()]))")
    done = subprocess.run([sys.executable, "-c", probe, str(archive)], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    assert done.returncode == 0, done.stderr
    where, sources = json.loads(done.stdout)
    assert where.startswith(str(archive))
    assert [tuple(pair) for pair in sources] == schema_sources()
