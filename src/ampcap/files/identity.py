"""Identity key files: where the default one lives, reading and writing them.

Key files are JSON with hex secrets (:meth:`Identity.to_json`), written with
mode 0600 and refused when group- or world-readable, as ssh does with private
keys: a readable secret key is a leaked secret key.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path

from ..decoders import json_loads
from ..errors import AmpError
from ..wire.identity import Identity
from .read import read_file
from .write import write_whole

__all__ = ["default_identity_path", "default_caller_path", "load_identity", "save_identity", "load_or_create"]

_MAX_IDENTITY_FILE = 64 * 1024  # a real one is under 1 KiB; this bounds what a wrong path can cost


def default_identity_path(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/ampcap/identity.json``, else ``~/.config/ampcap/identity.json``
    (a relative ``XDG_CONFIG_HOME`` is ignored, as the XDG spec says: the key
    must not depend on the current directory)."""
    environ = os.environ if env is None else env
    base = environ.get("XDG_CONFIG_HOME")
    root = Path(base) if base and os.path.isabs(base) else Path(environ.get("HOME") or Path.home()) / ".config"
    return root / "ampcap" / "identity.json"


def default_caller_path(env: Mapping[str, str] | None = None) -> Path:
    """``caller.json`` beside the default identity file: the key client
    commands (``invoke``, ``query``, ``session``, ``mcp``) and
    :func:`ampcap.connect` use when none is given.

    Why a second default: a daemon and a caller on one machine that both took
    ``identity.json`` would be one agent, and an agent does not call itself
    (the call is refused). With a default of its own, a caller works against
    a local ``ampcap serve`` as printed, with no key to make first."""
    return default_identity_path(env).with_name("caller.json")


def save_identity(identity: Identity, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Write the key file with mode 0600 (created that way, never widened
    afterwards, so the secret is not readable even for an instant)."""
    target = Path(path)
    # A device, FIFO or socket is no place for a key (and /dev/null would
    # lose it silently, with its mode narrowed for everyone else).
    if target.exists() and not target.is_file():
        raise AmpError(1001, f"{target}: not a regular file; a key file must be one")
    exists = AmpError(1001, f"{target} already exists; pass --force to replace it")
    if not overwrite and (target.exists() or target.is_symlink()):
        raise exists
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # Whole or not at all: a full disk or a crash never leaves an empty or
    # half key file, and a key being replaced (--force) survives a write
    # that fails.
    try:
        write_whole(target, (json.dumps(identity.to_json(), indent=2) + "\n").encode("utf-8"), mode=0o600,
                    replace=overwrite)
    except FileExistsError:  # another process created it meanwhile
        raise exists from None
    return target


def load_identity(path: str | os.PathLike[str], *, allow_insecure: bool = False) -> Identity:
    """The identity in a key file; ``AmpError(1001)`` saying what is wrong
    with the file (missing, not a file, readable by others, not JSON…)."""
    source = Path(path)
    try:
        st = source.stat()
    except FileNotFoundError as exc:
        raise AmpError(1001, f"{source}: no identity file (create one with 'ampcap keygen')") from exc
    if not stat.S_ISREG(st.st_mode):
        # Checked before the mode: a directory's 755 is not the problem.
        raise AmpError(1001, f"{source}: not a regular file (an identity file was expected)")
    if not allow_insecure and st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise AmpError(
            1001,
            f"{source}: identity file is accessible by group or others "
            f"(mode {stat.S_IMODE(st.st_mode):o}); run 'chmod 600 {source}'",
        )
    raw = read_file(source, _MAX_IDENTITY_FILE)
    if len(raw) > _MAX_IDENTITY_FILE:
        raise AmpError(1001, f"{source}: over {_MAX_IDENTITY_FILE // 1024} KiB, not an identity file")
    try:
        data = json_loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AmpError(1001, f"{source}: not a JSON identity file: {exc}") from exc
    return Identity.from_json(data, origin=str(source))


def load_or_create(path: str | os.PathLike[str] | None, entropy: Callable[[int], bytes], *,
                   caller: bool = False) -> tuple[Identity, Path | None]:
    """The identity in ``path``; without a path, the default identity file
    (the caller's, :func:`default_caller_path`, with ``caller``), created
    (mode 0600) when missing. Returns the identity and the path of a file this
    call created (None when it only loaded one), so the caller can say so."""
    if path is not None:
        return load_identity(path), None
    default = default_caller_path() if caller else default_identity_path()
    if default.exists():
        return load_identity(default), None
    created = Identity.generate(entropy)
    try:
        save_identity(created, default)
    except AmpError:  # another process created it first: use that one
        return load_identity(default), None
    return created, default
