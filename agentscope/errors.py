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
