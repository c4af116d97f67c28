"""Stopping the daemons and relays the tests start as processes."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any


def stop_process(proc: subprocess.Popen[Any], timeout: float = 30.0) -> int:
    """SIGTERM (serve and relay drain and exit 0), SIGKILL if that takes
    longer than ``timeout``; the stdout pipe closed. The exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
    return proc.returncode


class ProcessHandle:
    """What a started daemon or relay offers a test (mixed into the
    dataclasses that also carry its URL and DID)."""

    proc: subprocess.Popen[str]
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def terminate(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)
