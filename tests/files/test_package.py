"""``ampcap.files`` re-exports its modules' functions, lazily."""

import subprocess
import sys

import ampcap.files as files


def test_every_exported_name_resolves_to_its_module() -> None:
    for name in files.__all__:
        assert getattr(files, name) is getattr(sys.modules[f"ampcap.files.{files._EXPORTS[name]}"], name)
    assert {"load_identity", "save_identity", "load_keyring", "load_policy", "load_manifest",
            "open_bundle"} <= set(files.__all__)


def test_reading_a_key_file_does_not_load_the_manifest_machinery() -> None:
    code = ("import sys; from ampcap.files import load_identity; "
            "print('ampcap.caps.manifest' in sys.modules, 'jsonschema' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False False"
