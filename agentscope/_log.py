"""The package logger, and logging a recurring problem once (telemetry must not spam)."""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger("agentscope")

_seen: set = set()
_lock = threading.Lock()


def log_once(key: str, msg: str, *args: Any, level: int = logging.WARNING) -> None:
    """Log ``msg`` the first time ``key`` is seen in this process."""
    with _lock:
        if key in _seen:
            return
        _seen.add(key)
    log.log(level, msg, *args)
