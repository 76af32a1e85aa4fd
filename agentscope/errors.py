"""Typed errors. Input problems name the file, the line and (when known) the span."""

from __future__ import annotations

from typing import Optional


class AgentscopeError(Exception):
    """Base class of agentscope's own errors."""


class TraceFormatError(AgentscopeError):
    """A line of a trace file that cannot be loaded, and why."""

    def __init__(
        self,
        path: str,
        line: Optional[int],
        reason: str,
        span_id: Optional[str] = None,
        torn: bool = False,
    ) -> None:
        self.path = str(path)
        self.line = line
        self.reason = reason
        self.span_id = span_id
        self.torn = torn  # the unterminated last line of a file whose writer stopped mid-write
        where = self.path if line is None else f"{self.path}:{line}"
        span = f" (span {span_id})" if span_id else ""
        super().__init__(f"{where}{span}: {reason}")


class QueryError(AgentscopeError):
    """A SQL statement the store could not run (its reason is DuckDB's)."""


class StoreError(AgentscopeError):
    """A store that cannot be opened (missing, or locked by another process)."""


class StoreLockedError(StoreError):
    """A store whose file another process holds (DuckDB lets one process write a file, or
    several read it): ``path``, and ``pid``, the holder's process id when DuckDB names it."""

    def __init__(self, path: object, pid: Optional[int] = None) -> None:
        self.path = str(path)
        self.pid = pid
        holder = f" (pid {pid})" if pid else ""
        super().__init__(
            f"the store {self.path} is in use by another process{holder}: wait for it to "
            "finish and try again, or keep this run's store apart with --db FILE or --db "
            ":memory: (db= in Python)")


def message_of(error: BaseException, limit: int = 300) -> str:
    """``"TypeName: first line of the message"`` of any exception, as text that can always be
    stored and printed: DuckDB's messages quote their input, which may not be UTF-8 (they then
    hold lone surrogates, which a UTF-8 stream refuses), and ``str()`` of an exception can
    itself raise. Surrogates and other unprintable text become backslash escapes."""
    try:
        text = str(error)
    except Exception:  # noqa: BLE001 - a message that cannot be made into text
        try:
            text = repr(error.args)
        except Exception:  # noqa: BLE001
            text = "(no readable message)"
    text = text.encode("utf-8", "backslashreplace").decode("utf-8", "replace")
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(error).__name__}: {first[:limit]}"
