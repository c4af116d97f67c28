"""``ampcap.caps`` re-exports the landed modules' main names, lazily."""

import subprocess
import sys

import ampcap.caps as caps


def test_every_exported_name_resolves_to_its_module() -> None:
    for name in caps.__all__:
        value = getattr(caps, name)
        assert value is getattr(sys.modules[f"ampcap.caps.{caps._EXPORTS[name]}"], name)
    assert set(caps.__all__) >= {"Version", "Range", "Descriptor", "SchemaRef", "SchemaBundle", "SchemaStore",
                                 "ParamsValidator", "manifest_from_data", "demo_manifest"}


def test_semver_alone_does_not_load_the_manifest_machinery() -> None:
    code = "import sys; from ampcap.caps import Version; print('ampcap.caps.manifest' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
