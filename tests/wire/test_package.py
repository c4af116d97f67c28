"""``ampcap.wire`` re-exports its main names, lazily."""

import subprocess
import sys

import ampcap.wire as wire


def test_every_exported_name_resolves_to_its_module() -> None:
    for name in wire.__all__:
        value = getattr(wire, name)
        assert value is getattr(sys.modules[f"ampcap.wire.{wire._EXPORTS[name]}"], name)
    assert set(wire.__all__) >= {"Envelope", "seal", "decode_envelope", "ReceivePipeline", "Identity", "Keyring",
                                 "FrameDecoder", "encode_frame", "FrameType", "Framing", "dumps", "loads",
                                 "Profile"}


def test_unknown_name_is_attribute_error() -> None:
    try:
        wire.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")


def test_importing_one_submodule_stays_cheap() -> None:
    code = "import sys, ampcap.wire.frames; print('ampcap.wire.receive' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
