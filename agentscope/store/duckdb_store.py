"""The embedded store: a DuckDB database of the spans and samples of trace directories.

Tables ``spans``, ``samples`` (store/sql/schema.sql); loading is in :mod:`.loading`. The store
owns its SQL (``store/sql/``): the analysis reads its input through :meth:`Store.analysis_input`
and :meth:`Store.counter_series`, saves its results with :meth:`Store.save_analysis` (the views
``tasks`` and ``critical_path``), and the reports read spans and counters through the methods
below. Nobody else runs SQL on the connection; a user's own query runs on a locked-down
connection of its own (:meth:`Store.read`, store/user_sql.py).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

import duckdb

from .. import metric_names as mn
from .. import semconv
from .._version import __version__
from ..errors import StoreError, TraceFormatError
from .connect import connect
from .loading import LoadReport, Loader, sources
from .rows import quoted
from .schema import (DEFAULT_DB, MEMORY, AnalysisInput, CollectorRun, CounterSeries, GpuIdle,
                     LatestSample, LoopLags, ProcessTrees, SeriesKey, SpanRow, WindowSample,
                     input_of_columns, sql)
from .user_sql import UserSQL, check_statement

# what DuckDB may hold while a store in a file loads or saves an analysis (by default it may
# take 80 % of the machine, and keeps every block it wrote cached): the load's sort by trace
# id (loading.SORTED_SPANS) spills beyond it. Loading 20M spans from ClickHouse: 1.38 GB at
# peak, against 1.68 GB at 1.5 GB (2-4 s less) and 7.0 GB without a limit (3 s less; 1.5 GB
# unsorted, 13 s less); 5M: 1.36 GB against 1.65 GB at 1.5 GB, 0.5 s slower
# (benchmarks/RESULTS.md)
MEMORY_LIMIT = "1.2GB"
# ... while it saves an analysis (no sort: what it inserts goes to the file or its temporary
# files rather than staying in memory until the checkpoint, which runs under it too). At 20M
# spans from ClickHouse: the save's peak 1.29 GB against 1.38 GB at 512 MB and 1.83 GB at
# 1.5 GB, in the same time (benchmarks/RESULTS.md)
SAVE_MEMORY_LIMIT = "384MB"

# the counter columns of analysis_input.sql, left out when there are no counters to join
_COUNTER_COLUMNS = ("host_code",)


# the distinct values of a cp_sections column, each with a code (0, 1, ...): saved_results reads
# a column of many repeats as codes
_CODES = ("SELECT {0}, (row_number() OVER (ORDER BY {0}) - 1)::INTEGER AS code "
          "FROM (SELECT DISTINCT {0} FROM cp_sections)")


class Store:
    """A DuckDB database holding the spans and samples of trace directories.

    ``path`` None or ``":memory:"``: in memory. ``keep_freed_blocks``: DuckDB keeps up to 1 GB
    of the blocks it frees for reuse instead of returning them to the OS (for a short batch
    process: the pages are not faulted in again and again). ``lock_wait_s``: how long to wait
    for a file another process holds (default store/connect.py's LOCK_WAIT_S) before
    StoreLockedError."""

    def __init__(self, path: "str | os.PathLike[str] | None" = None, read_only: bool = False,
                 keep_freed_blocks: bool = False, lock_wait_s: Optional[float] = None) -> None:
        if path is not None and str(path) == MEMORY:
            path = None
        self.path = None if path is None else Path(path).resolve()
        self.read_only = read_only
        self._keep_freed_blocks = keep_freed_blocks
        self._lock_wait_s = lock_wait_s
        self._capped: Optional[str] = None  # the memory limit DuckDB is held to (:meth:`capped`)
        self._user_sql: Optional[UserSQL] = None  # a store in memory: the copy users query
        # what a temporary store's file lives in (its owner removes it; None: not temporary)
        self.temporary: Any = None
        if self.path is not None and not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.con = self._connect()
        if not read_only:
            self._x(sql("schema.sql"))

    def _connect(self) -> "duckdb.DuckDBPyConnection":
        """This store's connection. A file another process holds is waited for, up to
        ``lock_wait_s`` (store/connect.py), then StoreLockedError; a file that cannot be
        opened otherwise (not a database, missing when read-only): StoreError."""
        if self.path is None:
            con = duckdb.connect(MEMORY)
        else:
            con = connect(self.path, self.read_only, wait_s=self._lock_wait_s)
        con.execute("SET enable_progress_bar = false")  # we draw our own, on stderr
        if self._keep_freed_blocks:
            con.execute("SET block_allocator_memory = '1GB'")
        if not self.read_only:
            # bulk inserts in parallel, without a rewrite at checkpoint (measured: 1M spans
            # inserted in 0.7 s instead of 1.0 s + 0.5 s checkpoint); every query of ours that
            # needs an order says ORDER BY
            con.execute("SET preserve_insertion_order = false")
        return con

    @classmethod
    def for_trace_dir(cls, trace_dir: "str | os.PathLike[str]",
                      db: "str | os.PathLike[str] | None" = None, read_only: bool = False,
                      keep_freed_blocks: bool = False) -> "Store":
        """The store of a trace directory: ``db``, else
        ``TRACE_DIR/.agentscope/agentscope.duckdb``."""
        return cls(Path(trace_dir) / DEFAULT_DB if db is None else db, read_only=read_only,
                   keep_freed_blocks=keep_freed_blocks)

    def close(self) -> None:
        self._changed()
        self.con.close()

    def _changed(self) -> None:
        """Drop the copy a user's SQL reads (a store in memory): the tables changed."""
        if self._user_sql is not None:
            self._user_sql.close()
            self._user_sql = None

    def _x(self, statement: str, params: "list | dict | None" = None) -> list:
        """Execute and fetch everything (DuckDB refuses some calls while a result is open)."""
        return self.con.execute(statement, params if params is not None else []).fetchall()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- loading (store/loading.py) -----------------------------------------------------------
    @staticmethod
    def sources(trace_dir: "str | os.PathLike[str]") -> tuple:
        """(loadable files, ignored files) below ``trace_dir``; hidden entries are skipped."""
        return sources(trace_dir)

    def load(self, trace_dir: "str | os.PathLike[str]",
             progress: Optional[Callable[[int], None]] = None,
             found: Optional[tuple] = None, repeats_by: Optional[str] = None) -> LoadReport:
        """Load what is new in ``trace_dir``. ``progress(bytes)`` is called as files are read;
        ``found`` is what :meth:`sources` returned for it, if the caller already looked.
        ``repeats_by``: the columns (SQL) by whose order the row of a repeated (trace, span)
        id that is kept is chosen, before the line order (None: the first line: files)."""
        self._changed()
        try:
            with self.capped():
                return Loader(self, repeats_by).load(trace_dir, progress, found)
        except duckdb.OutOfMemoryException as e:  # (the files loaded before it stay loaded)
            where = "memory" if self.path is None else str(self.path)
            raise StoreError(
                f"{where}: DuckDB ran out of memory loading {trace_dir} (a store in a file is "
                f"held to {MEMORY_LIMIT} while it loads: duckdb_store.MEMORY_LIMIT); what it "
                f"was loading was rolled back, and the next load goes on from there: "
                f"{str(e).splitlines()[0][:300]}") from None

    @contextlib.contextmanager
    def capped(self, limit: str = MEMORY_LIMIT) -> Iterator[None]:
        """DuckDB held to ``limit`` meanwhile, for a store in a file (a sort beyond it goes
        to DuckDB's temporary files, and the file's blocks are read again rather than kept
        cached); a store in memory holds its data there: no limit. Where DuckDB cannot meet
        the limit at once, none is set; inside another ``capped``, that one's limit holds.
        After, DuckDB's own limit is back (the default: we set no other), and its cache is
        no larger than this limit (it may grow again; :meth:`release_cache` empties it).
        The limit is the database's: another connection of this process to the same file
        is held to it meanwhile."""
        capped = False
        if self.path is not None and not self._capped:
            try:
                self.con.execute(f"SET memory_limit = '{limit}'")
                capped, self._capped = True, limit
            except duckdb.Error:
                pass
        try:
            yield
        except BaseException:
            if capped:  # (the error that ended the block is the one to see)
                self._capped = None
                with contextlib.suppress(duckdb.Error):
                    self._limit_back()
            raise
        if capped:
            self._capped = None
            self._limit_back()

    def _limit_back(self) -> None:
        """DuckDB's memory limit as it should be now: the active :meth:`capped` one, or
        DuckDB's own (we set no other)."""
        if self._capped:
            self.con.execute(f"SET memory_limit = '{self._capped}'")
        else:
            self.con.execute("RESET memory_limit")

    def problems(self) -> list:
        """Every input problem of every load, by file and line."""
        return [TraceFormatError(p, line, reason, span_id, bool(torn)) for p, line, span_id,
                reason, torn in self._x(
                    "SELECT path, line, span_id, reason, torn FROM load_problems "
                    "ORDER BY path, line NULLS FIRST")]

    def relabel_problems(self, labels: dict) -> None:
        """Name the problems of the files ``labels`` names ({path: what to call it}: files
        made on the way in and since deleted, such as a ClickHouse source's rows) as it
        says."""
        for path, label in labels.items():
            self._x("UPDATE load_problems SET path = $label WHERE path = $path",
                    {"label": label, "path": path})

    def sample_count(self) -> int:
        return self._x("SELECT count(*) FROM samples")[0][0]

    # ---- the analysis' input and output ---------------------------------------------------------
    def counter_series(self, metrics: Iterable[str]) -> Optional[CounterSeries]:
        """The samples of ``metrics`` as series (store/sql/counter_series.sql), and which GPUs
        processes use and which collectors found none; None when there are no such samples."""
        import numpy as np

        literal = ", ".join(quoted(m) for m in metrics)
        list_sql, values_sql = [q for q in sql("counter_series.sql").format(metrics=literal)
                                .split(";") if q.strip()]
        keys = self._x(list_sql)
        if not keys:
            return None
        got = self.con.execute(values_sql).fetchnumpy()
        gpus_of: dict = {}
        for host, pid, device in self._x(sql("gpus_of_processes.sql"),
                                         {"metric": mn.PROCESS_GPU_MEMORY_USAGE}):
            gpus_of.setdefault((host, pid), set()).add(device)
        no_gpu = self._x(sql("collectors_without_gpu.sql"),
                         {"up": mn.AGENTSCOPE_COLLECTOR_UP, "source": mn.SOURCE_GPU_NVIDIA})
        return CounterSeries(tuple(SeriesKey(*k) for k in keys),
                             np.asarray(got["ts_ns"], dtype=np.int64),
                             np.asarray(got["value"], dtype=np.float64),
                             tuple(CollectorRun(*r) for r in no_gpu), gpus_of)

    def loop_lags(self) -> Optional[LoopLags]:
        """The event-loop lags the in-process samplers measured (store/sql/loop_lags.sql);
        None when there are none."""
        import numpy as np

        got = self.con.execute(sql("loop_lags.sql"),
                               {"metric": mn.AGENTSCOPE_PYTHON_LOOP_LAG}).fetchnumpy()
        if not len(got["ts_ns"]):
            return None
        return LoopLags(np.asarray(got["host"], dtype=object),
                        np.asarray(got["pid"], dtype=np.int64),
                        np.asarray(got["tid"], dtype=np.int64),
                        np.asarray(np.ma.filled(np.ma.asarray(got["span_id"], dtype=object),
                                                None), dtype=object),
                        np.asarray(got["ts_ns"], dtype=np.int64),
                        np.asarray(got["lag_s"], dtype=np.float64))

    def process_trees(self) -> Optional[ProcessTrees]:
        """The process trees the sidecars sampled, with their members and CPU series
        (store/sql/process_trees.sql); None when there are none."""
        import numpy as np

        params = {"tree_cpu": mn.AGENTSCOPE_TREE_CPU_UTILIZATION,
                  "source": mn.SOURCE_PROCESS_TREE}
        trees_sql, members_sql, values_sql = [
            q for q in sql("process_trees.sql").split(";") if q.strip()]
        trees = self._x(trees_sql, {"tree_cpu": params["tree_cpu"]})
        if not trees:
            return None
        members: dict = {}
        for file_id, host, pid in self._x(members_sql, params):
            members.setdefault((file_id, host), set()).add(int(pid))
        got = self.con.execute(values_sql, {
            "tree_cpu": params["tree_cpu"],
            "tree_wait": mn.AGENTSCOPE_TREE_RUNQUEUE_WAIT}).fetchnumpy()
        counts = np.asarray([t[5] for t in trees], dtype=np.int64)
        return ProcessTrees(
            tuple(t[1] for t in trees), np.asarray([t[2] for t in trees], dtype=np.int64),
            np.asarray([t[3] for t in trees], dtype=np.int64),
            np.asarray([t[4] for t in trees], dtype=np.int64),
            tuple(frozenset(members.get((t[0], t[1]), set()) | {int(t[2])}) for t in trees),
            np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            np.asarray(got["ts_ns"], dtype=np.int64),
            np.asarray(got["value"], dtype=np.float64),
            np.asarray(got["wait"], dtype=np.float64))

    def analysis_input(self, with_counters: bool = False,
                       traces: "tuple | None" = None) -> AnalysisInput:
        """Every span as the analysis reads it (store/sql/analysis_input.sql), with the columns
        the counter rules need when ``with_counters``; ``traces``: only those of the trace ids
        ``lo <= trace_id < hi`` (a batch of :meth:`trace_batches`; either bound None: open),
        or, given a list, those of these trace ids.
        Fetching columns is many times faster than row tuples for a million spans."""
        hosts: list = []
        query = sql("analysis_input.sql")
        if with_counters:
            hosts = [h for (h,) in self._x(
                "SELECT DISTINCT host FROM spans WHERE host IS NOT NULL ORDER BY host")]
        else:
            query = f"SELECT * EXCLUDE ({', '.join(_COUNTER_COLUMNS)}) FROM ({query})"
        ids = list(traces) if isinstance(traces, list) else None
        lo, hi = traces if isinstance(traces, tuple) else (None, None)
        arrays = self.con.execute(query, {"hosts": hosts, "lo": lo, "hi": hi,
                                          "ids": ids}).fetchnumpy()
        return input_of_columns(arrays, hosts if with_counters else None)

    def release_cache(self) -> None:
        """Let DuckDB give back the blocks of the store's file it keeps cached (by default up
        to 80 % of the machine's memory), for a reader that is done with them: they are
        read from the file again when needed. A store in memory holds its data there:
        nothing is done. A limit DuckDB cannot meet at once leaves the cache as it is."""
        if self.path is None:
            return
        try:
            self.con.execute("SET memory_limit = '64MB'")  # (evicts what is above it)
        except duckdb.Error:
            pass
        finally:
            self._limit_back()

    def trace_batches(self, max_spans: int) -> list:
        """The traces in batches of about ``max_spans`` spans, in trace-id order, a trace
        never split: batch k holds the traces with k * max_spans to (k + 1) * max_spans - 1
        spans before them (so at most ``max_spans`` plus its last trace, less one). [(lo, hi)]
        for :meth:`analysis_input`, lo None for the first and hi None for the last; one
        batch, (None, None), when all fit."""
        firsts = [t for (t,) in self._x(f"""
            WITH t AS (SELECT trace_id, count(*) AS n FROM spans GROUP BY trace_id),
            c AS (SELECT trace_id, n,
                         sum(n) OVER (ORDER BY trace_id ROWS UNBOUNDED PRECEDING) AS upto
                  FROM t)
            SELECT min(trace_id) FROM c GROUP BY (upto - n) // {max(int(max_spans), 1)}
            ORDER BY 1""")]
        bounds = [None] + firsts[1:] + [None]
        return list(zip(bounds[:-1], bounds[1:]))

    def marks(self) -> tuple:
        """Where the store stands: (spans, the last span's row id, samples, the last
        sample's row id, how many times a load took a file's rows out), for
        :meth:`touched_traces`."""
        return tuple(self._x(
            "SELECT (SELECT count(*) FROM spans), (SELECT coalesce(max(rowid), -1) FROM spans),"
            " (SELECT count(*) FROM samples), (SELECT coalesce(max(rowid), -1) FROM samples)")[0]
        ) + (self._forgotten(),)

    def _forgotten(self) -> int:
        """How many times a load took a file's rows out (0 in a store, opened read-only,
        made by a build without the table)."""
        try:
            return self._x("SELECT count(*) FROM forgotten")[0][0]
        except duckdb.CatalogException:
            return 0

    def touched_traces(self, marks: tuple, metrics: Iterable[str],
                       hold_ns: int) -> Optional[list]:
        """The trace ids whose analysis may differ from one made when the store stood at
        ``marks`` (:meth:`marks`): those with spans added since, and those whose time
        overlaps, within ``hold_ns``, a sample of ``metrics`` added since (what a sample
        says reaches back to the one before it). None when the store changed otherwise
        (rows taken out or rewritten, samples of other kinds added): all must be analysed."""
        if len(marks) != 5:  # saved by a build that kept fewer
            return None
        spans, span_row, samples, sample_row, forgotten = marks
        # rows taken out: a checkpoint may since have renumbered the rest
        if self._forgotten() != forgotten:
            return None
        kept = self._x("SELECT (SELECT count(*) FROM spans WHERE rowid <= ?), "
                       "(SELECT count(*) FROM samples WHERE rowid <= ?)", [span_row, sample_row])
        if kept[0] != (spans, samples):
            return None
        names = list(metrics)
        other, lo, hi = self._x(
            "SELECT count(*) FILTER (WHERE NOT list_contains(?::VARCHAR[], metric)), "
            "min(ts_ns), max(ts_ns) FROM samples WHERE rowid > ?", [names, sample_row])[0]
        if other:
            return None
        window = "" if lo is None else (
            f" UNION SELECT trace_id FROM spans GROUP BY trace_id HAVING "
            f"min(start_ns) <= {int(hi) + int(hold_ns)} "
            f"AND max(end_ns) >= {int(lo) - int(hold_ns)}")
        return sorted(t for (t,) in self._x(
            f"SELECT DISTINCT trace_id FROM spans WHERE rowid > ?{window}", [span_row]))

    def coupled_traces(self) -> bool:
        """Whether the analysis of a trace reads other traces' spans: spans on an event loop
        or with their process's other threads' CPU recorded (analyzers/threads.py compares
        them with the spans of other tasks in that process). Then traces are analysed all
        at once, not in batches."""
        names = semconv.COUPLING_ATTRIBUTES
        plain = " OR ".join(f"contains(attrs, '\"{name}\"')" for name in names)
        parsed = " OR ".join("json_exists(attrs, ?)" for _ in names)
        return bool(self._x(
            f"SELECT 1 FROM spans WHERE {plain} "
            # (a name spelled with \u escapes, which no reader of ours writes, found by
            # parsing the few attributes with an escape in them)
            f"OR (contains(attrs, '\\u') AND ({parsed})) LIMIT 1",
            [f'$."{name}"' for name in names]))

    def save_analysis(self, task_columns: "dict | Iterable[dict]",
                      section_columns: "dict | Iterable[dict]",
                      warnings: Iterable[str] = (), redone: Optional[list] = None,
                      marks: Optional[tuple] = None, fleet: Optional[dict] = None) -> None:
        """Replace the analysis tables (and (re)create the ``tasks``/``critical_path`` views).
        Each argument maps the table's column names to equally long lists or arrays, or is
        several such dicts, inserted one after another (so that the rows of a large analysis
        are not all made at once).
        ``warnings``: the analysis' own, kept for :meth:`saved_analysis`. The analysis is saved
        with the :meth:`loaded_state` it was made from. ``redone``: the trace ids an
        incremental analysis made again (the columns hold their results alone): only their
        rows are replaced. ``marks``: where the store stood (:meth:`marks`) when the analysis
        was made (:meth:`saved_marks`). ``fleet``: what else restoring the analysis needs
        (:meth:`saved_results`), as JSON-ready data."""
        with self.capped(SAVE_MEMORY_LIMIT):
            self._save_analysis(task_columns, section_columns, warnings, redone, marks, fleet)
            if self.path is not None:
                # what it wrote, into the file under the limit (else at close, without one)
                with contextlib.suppress(duckdb.Error):  # (then at close, as before)
                    self._x("CHECKPOINT")

    def _save_analysis(self, task_columns: "dict | Iterable[dict]",
                       section_columns: "dict | Iterable[dict]",
                       warnings: Iterable[str], redone: Optional[list], marks: Optional[tuple],
                       fleet: Optional[dict]) -> None:
        self._changed()
        # first: a save cut short (a crash, a kill) leaves no analysis that claims to be current
        self._x("DROP TABLE IF EXISTS analysis_state")
        if redone is None or not self._x(
                "SELECT 1 FROM duckdb_tables() WHERE database_name = current_database() AND "
                "schema_name = 'main' AND table_name = 'cp_sections'"):
            self._x(sql("analysis_tables.sql"))
        elif redone:
            self.con.register("redone", {"trace_id": _column(redone)})
            try:
                for table in ("task_results", "cp_sections"):
                    self._x(f"DELETE FROM {table} WHERE trace_id IN "
                            "(SELECT trace_id FROM redone)")
            finally:
                self.con.unregister("redone")
        for table, pieces in (("task_results", task_columns), ("cp_sections", section_columns)):
            pieces = [pieces] if isinstance(pieces, Mapping) else pieces
            columns = [c[0] for c in self._x(f"DESCRIBE {table}")]
            for cols in pieces:
                if not cols or not len(next(iter(cols.values()))):
                    continue
                # DuckDB scans a dict of numpy arrays in place (no pandas import, no copy)
                self.con.register("incoming", {c: _column(cols[c]) for c in columns})
                try:
                    self._x(f"INSERT INTO {table} SELECT * FROM incoming")
                finally:
                    self.con.unregister("incoming")
                del cols
        self._x(_SAVED_STATE)
        self._x("INSERT INTO analysis_state VALUES (?, ?, ?, current_timestamp, ?, ?)",
                [self.loaded_state(), json.dumps(list(warnings)), __version__,
                 None if marks is None else json.dumps(list(marks)),
                 None if fleet is None else json.dumps(fleet)])

    def saved_marks(self) -> Optional[tuple]:
        """The :meth:`marks` the saved analysis was made at (None: none saved, or saved
        without them): an incremental analysis replaces rows of it only where it is the one
        it starts from."""
        try:
            row = self._x("SELECT marks, version FROM analysis_state")
        except duckdb.Error:  # none saved, or by a version without marks
            return None
        if not row or row[0][0] is None or row[0][1] != __version__:
            return None
        return tuple(json.loads(row[0][0]))

    def saved_results(self, classes: Sequence[str], bases: Sequence[str]) -> Optional[tuple]:
        """The saved analysis as data: (the task_results columns, in trace-id order; the
        cp_sections columns, with ``task``, each section's task's position there, and its
        ``class`` and ``basis`` as positions in ``classes`` and ``bases``, in no order; what
        :meth:`save_analysis` was given as ``fleet``). Columns are numpy arrays (text: object
        arrays, NULL as None). None: no analysis saved by this version of agentscope with
        its marks (:meth:`saved_marks`) and fleet."""
        import numpy as np

        if self.saved_marks() is None:
            return None
        try:
            fleet = self._x("SELECT fleet FROM analysis_state")[0][0]
        except duckdb.Error:  # saved by a build without the column
            return None
        if fleet is None:
            return None

        def columns(statement: str, params: Optional[dict] = None) -> dict:
            out = {}
            for name, a in self.con.execute(statement, params).fetchnumpy().items():
                if np.ma.isMaskedArray(a):
                    mask = np.ma.getmaskarray(a)
                    a = np.ma.getdata(a)
                    if mask.any():
                        a = a.astype(object)
                        a[mask] = None
                out[name] = a
            return out

        tasks = columns("SELECT * FROM task_results ORDER BY trace_id")
        # (sorted by the caller: DuckDB's sort of every column costs more than numpy's)
        sections = columns(
            "SELECT t.task, c.* EXCLUDE (trace_id, name, stage) REPLACE ("
            "list_position($classes, c.class) - 1 AS class, "
            "list_position($bases, c.basis) - 1 AS basis), n.code AS name, s.code AS stage "
            "FROM cp_sections AS c JOIN (SELECT trace_id, row_number() OVER (ORDER BY "
            "trace_id) - 1 AS task FROM task_results) AS t USING (trace_id) "
            f"JOIN ({_CODES.format('name')}) AS n ON c.name IS NOT DISTINCT FROM n.name "
            f"JOIN ({_CODES.format('stage')}) AS s ON c.stage IS NOT DISTINCT FROM s.stage",
            {"classes": list(classes), "bases": list(bases)})
        # names and stages repeat: each distinct one is made into a Python str once
        for column in ("name", "stage"):
            labels = self._x(f"SELECT {column} FROM ({_CODES.format(column)}) ORDER BY code")
            sections[column] = np.array([row[0] for row in labels],
                                        dtype=object)[sections[column]]
        return tasks, sections, json.loads(fleet)

    def loaded_state(self) -> str:
        """A fingerprint of what the store holds: every loaded file's row (how far it was read,
        what it gave, when it was last loaded), and the spans and samples in all. An analysis
        made when it was the same is still current."""
        return self._x(_LOADED_STATE)[0][0]

    def saved_analysis(self) -> Optional[dict]:
        """The store's saved analysis when it is current (made by this version of agentscope
        from what the store holds now: :meth:`loaded_state`): {"tasks": count, "warnings":
        [...], "saved_at": datetime}; None when there is none, or it is older than a load."""
        if not self._x("SELECT 1 FROM duckdb_tables() WHERE database_name = current_database()"
                       " AND schema_name = 'main' AND table_name = 'analysis_state'"):
            return None
        row = self._x("SELECT loaded_state, warnings, version, saved_at FROM analysis_state")
        if not row or row[0][0] != self.loaded_state() or row[0][2] != __version__:
            return None
        tasks = self._x("SELECT count(*) FROM task_results")[0][0]
        return {"tasks": tasks, "warnings": json.loads(row[0][1]), "saved_at": row[0][3]}

    def span_roles(self) -> dict:
        """Per span, in :meth:`analysis_input`'s order: ``service`` (object array), and the
        server queue it names (``queue_resource``; ``held_by``: JSON text of the traces that
        held that server's slots while it waited) (store/sql/span_roles.sql)."""
        import numpy as np

        got = self.con.execute(sql("span_roles.sql")).fetchnumpy()
        idx = np.asarray(got.pop("idx"), dtype=np.int64)
        out = {}
        for name, a in got.items():
            data = np.empty(len(idx), dtype=object)
            values = np.asarray(np.ma.getdata(a), dtype=object)
            if np.ma.isMaskedArray(a):
                values[np.ma.getmaskarray(a)] = None
            data[idx] = values
            out[name] = data
        return out

    def plan_resources(self) -> list:
        """(what, host, device, value) rows: each host's memory (``memory``, bytes) and the
        energy (``gpu_energy``/``cpu_energy``, J) each device used over the analysed tasks'
        time (store/sql/plan_resources.sql; needs a saved analysis)."""
        return self._x(sql("plan_resources.sql"), {
            "memory_limit": mn.SYSTEM_MEMORY_LIMIT, "gpu_energy": mn.HW_GPU_ENERGY,
            "cpu_energy": mn.HW_CPU_ENERGY})

    def host_cores(self) -> dict:
        """{host: logical CPUs} of every host the host sampler recorded
        (store/sql/host_cores.sql)."""
        return {h: int(c) for h, c in self._x(sql("host_cores.sql"),
                                               {"metric": mn.SYSTEM_CPU_LOGICAL_COUNT})}

    def gpu_idle(self) -> list:
        """Per GPU, its busy and idle shares over the analysed tasks' time and what the critical
        paths did while it sat idle (store/sql/gpu_idle.sql; needs a saved analysis)."""
        intervals, shares = sql("gpu_idle.sql").split(";\n\n")
        try:
            self.con.execute(intervals, {"gpu_util": mn.HW_GPU_UTILIZATION})
            return [GpuIdle(*r) for r in self._x(shares)]
        finally:
            self.con.execute("DROP TABLE IF EXISTS temp.gpu_intervals")  # (never a user's)

    def section_counter_means(self, hosts: Any, start: Any, end: Any,
                              metrics: Iterable[str], max_hold_ns: int) -> tuple:
        """The reference join of counters to sections in SQL (store/sql/section_counters.sql):
        (section index, metric, mean) arrays for every section with a host and every series
        of ``metrics`` on it; a sample describes at most ``max_hold_ns`` before it. (The
        analysis runs the same arithmetic in numpy.)"""
        import numpy as np

        hosts = np.asarray(hosts, dtype=object)
        keep = np.flatnonzero(np.not_equal(hosts, None))
        self.con.register("sections", {"sec_id": keep.astype(np.int64), "host": hosts[keep],
                                       "a": np.asarray(start, dtype=np.int64)[keep],
                                       "b": np.asarray(end, dtype=np.int64)[keep]})
        try:
            got = self.con.execute(sql("section_counters.sql").format(
                metrics=", ".join(quoted(m) for m in metrics),
                max_hold=int(max_hold_ns))).fetchnumpy()
        finally:
            self.con.unregister("sections")
        return (np.asarray(got["sec_id"], dtype=np.int64),
                np.asarray(got["metric"], dtype=object), np.asarray(got["mean"], dtype=np.float64))

    # ---- reading, for reports -------------------------------------------------------------------
    def table_rows(self, table: str, columns: Sequence[str], page: int,
                   by_trace: Optional[int] = None) -> Iterator[dict]:
        """Every row of ``table`` (``spans`` or ``samples``) as a dict of ``columns``, read
        ``page`` rows at a time: in one statement, in the table's order (not sorted: a sorted
        page a statement reads the whole table again for each page); or, with ``by_trace``
        (spans only), in (trace_id, span_id) order, a statement per batch of traces of about
        that many spans (:meth:`trace_batches`): each sorts its batch alone, and the table
        is read once a batch rather than once a page."""
        if table not in ("spans", "samples"):
            raise ValueError(f"not a table of records: {table!r}")
        if by_trace is not None and table != "spans":
            raise ValueError("only spans are read by trace")
        known = {name for (name,) in self._x(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() "
            "AND schema_name = 'main' AND table_name = ?", [table])}
        unknown = [c for c in columns if c not in known]
        if unknown:
            raise ValueError(f"not columns of {table}: {unknown!r}")
        page = max(int(page), 1)
        select = "SELECT " + ", ".join(f'"{c}"' for c in columns) + f" FROM {table}"
        if by_trace is None:
            yield from self._fetched(select, {}, page)
            return
        for lo, hi in self.trace_batches(by_trace):
            yield from self._fetched(
                f"{select} WHERE ($lo::VARCHAR IS NULL OR trace_id >= $lo) AND "
                "($hi::VARCHAR IS NULL OR trace_id < $hi) ORDER BY trace_id, span_id",
                {"lo": lo, "hi": hi}, page)

    def _fetched(self, statement: str, params: dict, page: int) -> Iterator[dict]:
        """The rows of ``statement`` as dicts, fetched ``page`` at a time on a cursor of
        their own (closed however the reader stops)."""
        cursor = self.con.cursor()
        try:
            cursor.execute(statement, params)
            names = [d[0] for d in cursor.description]
            while True:
                rows = cursor.fetchmany(page)
                if not rows:
                    return
                for row in rows:
                    yield dict(zip(names, row))
        finally:
            cursor.close()

    def spans_of(self, trace_ids: list) -> dict:
        """trace_id -> [SpanRow], in time order, parents before children that start with
        them."""
        if not trace_ids:
            return {}
        import numpy as np

        self.con.register("wanted_traces", {"trace_id": np.asarray(trace_ids, dtype=object)})
        try:
            rows = self._x(sql("spans_of_traces.sql"))
        finally:
            self.con.unregister("wanted_traces")
        out: dict = {}
        for trace_id, *row in rows:
            out.setdefault(trace_id, []).append(SpanRow(*row))
        return out

    def counters_in_windows(self, windows: list, metrics: Iterable[str],
                            per_device: str = mn.HW_GPU_UTILIZATION) -> list:
        """For each window (key, host, start_ns, end_ns): the samples of ``metrics`` on its host
        over it, from the one in force at its start (store/sql/counters_in_windows.sql):
        [WindowSample] by key, metric, device and time."""
        if not windows:
            return []
        import numpy as np

        self.con.register("windows", {
            "k": np.asarray([w[0] for w in windows], dtype=np.int64),
            "host": np.asarray([w[1] for w in windows], dtype=object),
            "lo": np.asarray([w[2] for w in windows], dtype=np.int64),
            "hi": np.asarray([w[3] for w in windows], dtype=np.int64)})
        try:
            return [WindowSample(*r) for r in self._x(
                sql("counters_in_windows.sql"), {"metrics": list(metrics),
                                                 "per_device": per_device})]
        finally:
            self.con.unregister("windows")

    def latest_samples(self, metrics: Iterable[str]) -> list:
        """The latest value of each series of ``metrics`` (store/sql/latest_samples.sql):
        [LatestSample]."""
        return [LatestSample(*r) for r in self._x(sql("latest_samples.sql"),
                                                  {"metrics": list(metrics)})]

    def span_parents(self) -> dict:
        """{(trace_id, span_id): parent_span_id} of every span."""
        return {(t, s): p for t, s, p in self._x(
            "SELECT trace_id, span_id, parent_span_id FROM spans")}

    # ---- a user's own SQL ------------------------------------------------------------------
    def read(self, statement: str, frame: bool = False) -> Any:
        """Run one reading statement of a user's (SELECT, including DESCRIBE, SHOW and
        SUMMARIZE; EXPLAIN; PRAGMA) on a locked-down connection of its own
        (store/user_sql.py: no files, network or extensions, settings locked, nothing
        written): a pandas DataFrame with ``frame``, else (column names, rows). Anything else,
        several statements, or SQL DuckDB refuses raises QueryError.

        A store in memory is copied for it (once, until the store changes); for a store in a
        file, this store's own connection steps aside while the file is opened read-only for
        the statement (DuckDB opens a file once per process with one set of settings)."""
        check_statement(statement)
        if self.path is None:
            if self._user_sql is None:
                self._user_sql = UserSQL.copy_of(self.con)
            return self._user_sql.read(statement, frame)
        self.con.close()
        try:
            with UserSQL.on_file(self.path, self._lock_wait_s) as user:
                return user.read(statement, frame)
        finally:
            self.con = self._connect()

    def query(self, statement: str, params: Optional[list] = None) -> Any:
        """Run any ``statement`` (the store's own code and tests); returns DuckDB's cursor."""
        self._changed()
        return self.con.execute(statement, params or [])


# the saved analysis' provenance: what the store held when it was made (Store.loaded_state)
_SAVED_STATE = """
    CREATE OR REPLACE TABLE analysis_state (
        loaded_state VARCHAR,  -- Store.loaded_state() when the analysis was saved
        warnings     VARCHAR,  -- JSON list: the analysis' own warnings
        version      VARCHAR,  -- agentscope's, which made it
        saved_at     TIMESTAMP,
        marks        VARCHAR,  -- JSON list: Store.marks() when it was made
        fleet        VARCHAR   -- JSON: the fleet's summary and warnings (Store.saved_results)
    )"""
# every column of every loaded file's row (how far it was read, what it gave, when: whatever
# store/loading.py keeps there), and the rows in all
_LOADED_STATE = """
    SELECT md5(coalesce(string_agg(CAST(f AS VARCHAR), chr(10) ORDER BY f.file_id), ''))
           || ':' || (SELECT count(*) FROM spans) || ':' || (SELECT count(*) FROM samples)
    FROM loaded_files AS f"""


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
