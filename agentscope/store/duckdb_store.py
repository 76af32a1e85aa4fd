"""The embedded store: a DuckDB database of the spans and samples of trace directories.

Tables ``spans``, ``samples`` (store/sql/schema.sql); loading is in :mod:`.loading`; the
analysis results and the views ``tasks`` and ``critical_path`` are saved here by the
analyzers (:meth:`Store.save_analysis`). SQL lives in ``store/sql/``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

import duckdb

from ..errors import TraceFormatError

if TYPE_CHECKING:  # pragma: no cover
    from .loading import LoadReport

SQL_DIR = Path(__file__).with_name("sql")
DEFAULT_DB = Path(".agentscope") / "agentscope.duckdb"

SPAN_COLUMNS = {
    "trace_id": "VARCHAR", "span_id": "VARCHAR", "parent_span_id": "VARCHAR", "name": "VARCHAR",
    "stage": "VARCHAR", "kind": "VARCHAR", "start_ns": "BIGINT", "end_ns": "BIGINT",
    "status": "VARCHAR", "status_message": "VARCHAR", "service": "VARCHAR", "host": "VARCHAR",
    "pid": "INTEGER", "tid": "BIGINT", "thread_cpu_ns": "BIGINT", "child_cpu_ns": "BIGINT",
    "children": "INTEGER", "vcsw": "BIGINT", "ivcsw": "BIGINT", "minflt": "BIGINT",
    "majflt": "BIGINT", "child_majflt": "BIGINT", "attrs": "VARCHAR", "events": "VARCHAR",
    "links": "VARCHAR",
}


def _column(values: object) -> object:
    import numpy as np

    if isinstance(values, np.ndarray):
        return values
    values = list(values)
    if any(isinstance(v, str) or v is None for v in values):
        a = np.empty(len(values), dtype=object)
        a[:] = values
        return a
    return np.asarray(values)


def sql(name: str) -> str:
    return (SQL_DIR / name).read_text()


class Store:
    """A DuckDB database holding the spans and samples of trace directories."""

    def __init__(self, path: "str | os.PathLike[str] | None" = None, read_only: bool = False):
        self.path = None if path is None else Path(path)
        if self.path is not None and not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.con = duckdb.connect(":memory:" if path is None else str(path), read_only=read_only)
        self.con.execute("SET enable_progress_bar = false")  # we draw our own, on stderr
        if not read_only:
            # bulk inserts in parallel, without a rewrite at checkpoint (measured: 1M spans
            # inserted in 0.7 s instead of 1.0 s + 0.5 s checkpoint); every query of ours that
            # needs an order says ORDER BY
            self.con.execute("SET preserve_insertion_order = false")
            self._x(sql("schema.sql"))

    @classmethod
    def for_trace_dir(cls, trace_dir: "str | os.PathLike[str]",
                      db: "str | os.PathLike[str] | None" = None,
                      read_only: bool = False) -> "Store":
        return cls(Path(trace_dir) / DEFAULT_DB if db is None else db, read_only=read_only)

    def close(self) -> None:
        self.con.close()

    def _x(self, statement: str, params: "list | dict | None" = None) -> list:
        """Execute and fetch everything (DuckDB refuses some calls while a result is open)."""
        return self.con.execute(statement, params if params is not None else []).fetchall()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- loading (agentscope/store/loading.py) ------------------------------------------------
    @staticmethod
    def sources(trace_dir: "str | os.PathLike[str]") -> tuple:
        """(loadable files, ignored files) below ``trace_dir``; hidden entries are skipped."""
        from .loading import sources

        return sources(trace_dir)

    def load(self, trace_dir: "str | os.PathLike[str]",
             progress: Optional[Callable[[int], None]] = None,
             found: Optional[tuple] = None) -> "LoadReport":
        """Load what is new in ``trace_dir``. ``progress(bytes)`` is called as files are read;
        ``found`` is what :meth:`sources` returned for it, if the caller already looked."""
        from .loading import Loader

        return Loader(self).load(trace_dir, progress, found)

    # ---- analysis results -----------------------------------------------------------------------
    def save_analysis(self, task_columns: dict, section_columns: dict) -> None:
        """Replace the analysis tables (and (re)create the ``tasks``/``critical_path`` views).
        Each argument maps the table's column names to equally long lists or arrays."""
        self._x(sql("analysis_tables.sql"))
        for table, cols in (("task_results", task_columns), ("cp_sections", section_columns)):
            if not cols or not len(next(iter(cols.values()))):
                continue
            columns = [c[0] for c in self._x(f"DESCRIBE {table}")]
            # DuckDB scans a dict of numpy arrays in place (no pandas import, no copy)
            self.con.register("incoming", {c: _column(cols[c]) for c in columns})
            try:
                self._x(f"INSERT INTO {table} SELECT * FROM incoming")
            finally:
                self.con.unregister("incoming")

    # ---- reading --------------------------------------------------------------------------------
    def all_problems(self) -> list:
        return [TraceFormatError(p, line, reason, span_id, bool(torn)) for p, line, span_id,
                reason, torn in self.con.execute(
                    "SELECT path, line, span_id, reason, torn FROM load_problems "
                    "ORDER BY path, line NULLS FIRST").fetchall()]

    def query(self, statement: str, params: Optional[list] = None):
        return self.con.execute(statement, params or [])
