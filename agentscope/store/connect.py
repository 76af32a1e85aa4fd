"""Opening a store's DuckDB file, waiting a little while another process holds it.

DuckDB lets one process write a database file, or any number read it, and refuses the rest
at once ("Could not set lock on file ... Conflicting lock is held in ... (PID 123)"). Two
agentscope commands on one store are common (``serve`` refreshing while someone runs
``query``) and each holds the file for seconds at most, so an open that finds it locked
waits up to :data:`LOCK_WAIT_S`, says so once, and then fails with one line that names the
store, the holder's pid and what to do (:class:`~agentscope.errors.StoreLockedError`).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Optional

import duckdb

from .._log import log
from ..errors import StoreError, StoreLockedError

LOCK_WAIT_S = 5.0  # how long an open waits for another process to let go of the file
_RETRY_S = 0.1  # between two tries

_HOLDER = re.compile(r"Conflicting lock is held in (?P<program>.*?) \(PID (?P<pid>\d+)\)")


def connect(path: Path, read_only: bool = False, config: Optional[dict] = None,
            wait_s: Optional[float] = None) -> "duckdb.DuckDBPyConnection":
    """``duckdb.connect(path)``, retried while another process holds the file's lock, up to
    ``wait_s`` seconds (:data:`LOCK_WAIT_S` when None). Raises StoreLockedError when it is
    still held then, StoreError when the file cannot be opened for another reason (not a
    database, opened in this process with other settings, ...)."""
    wait_s = LOCK_WAIT_S if wait_s is None else wait_s
    deadline = time.monotonic() + max(wait_s, 0.0)
    said = False
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only, config=config or {})
        except duckdb.Error as e:
            message = _first_line(e)
            holder = _HOLDER.search(message)
            if holder is None and "Could not set lock" not in message:
                raise StoreError(f"cannot open the store {path}: {message}") from None
            pid = int(holder["pid"]) if holder else None
            if time.monotonic() >= deadline:
                raise StoreLockedError(path, pid) from None
            if not said:  # once: the wait is usually short, and the next line says why it ended
                log.warning("agentscope: waiting for the store %s, held by another process%s "
                            "(up to %g s)", path, f" (pid {pid})" if pid else "", wait_s)
                said = True
            time.sleep(_RETRY_S)


def _first_line(e: BaseException) -> str:
    """DuckDB's message, on one line (some carry a caret diagram or a URL after it)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
