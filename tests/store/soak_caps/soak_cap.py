"""A capability with an effect the soak test can count: each run appends its
token to the file named by $AMPCAP_SOAK_LOG (one line, O_APPEND), then works
for ``ms`` milliseconds."""

from __future__ import annotations

import os
import time
from typing import Any


def record(params: dict[str, Any]) -> dict[str, Any]:
    fd = os.open(os.environ["AMPCAP_SOAK_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{params['token']}\n".encode())
    finally:
        os.close(fd)
    time.sleep(params.get("ms", 0) / 1000)
    return {"token": params["token"]}
