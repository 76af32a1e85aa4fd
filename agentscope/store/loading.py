"""Loading a trace directory into the store, incrementally (used by ``Store.load``).

* Our span and sample files load through DuckDB's own JSON reader (the fast path); new files
  are read together, in parallel; a file that has any line it cannot take is re-read by the
  validating Python reader, which names the file and line of each problem and loads the rest.
* OTLP/JSON files: pyarrow + DuckDB where possible (otlp_arrow.py), else Python (otlp.py).
* Every other format (store/inputs.py tells which), and compressed files of any format, are
  read whole by their reader (formats/importers/) into records, when new or changed.
* Files are append-only: a file seen before is loaded from where the last load stopped (its
  last complete line); a torn last line waits for its newline. Spans are unique by
  (trace_id, span_id): a span seen again is counted as a duplicate and skipped. A file that
  was rewritten instead (shorter than what was loaded, its loaded part changed, or the same
  size with a new modification time: a user fixed a bad line) is loaded again from its start,
  what it gave before forgotten.
* Bad input is quarantined, never stored and never raised (docs/bad-input.md): every record
  passes :func:`~agentscope.records.span_problem` (the SQL checks below are the same rules),
  and each file's load is one transaction: a file the store still refuses is rolled back and
  named as a problem, and the rest loads. Problems of files that are gone are forgotten.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from typing import Any, Callable, Optional

import duckdb

from ..errors import TraceFormatError, message_of
from ..formats import samplefile, spanfile
from ..formats.lines import numbered_lines
from ..records import MAX_COUNT, MAX_EPOCH_NS, MIN_EPOCH_NS
from . import otlp_arrow
from .inputs import Source, ends_with_newline, find, rewritten, tail_hash
from .otlp import otlp_lines
from .rows import (MAX_DEPTH, chunks, db_text, placeholders, quoted, sample_rows, span_rows,
                   stored)
from .schema import JSON_COLUMNS, SAMPLE_COLUMNS, SPAN_COLUMNS, sql
from .whole import WholeFiles

BATCH_BYTES = 512 << 20  # new files read by one read_json call (a progress step each)

# spans of a store in a file (with those being inserted) from which each insert stores its
# spans in trace-id order: a trace's rows together, near those of the traces beside it in id
# order, so that a batch of traces (an id range: Store.trace_batches) reads the row groups of
# its range in each insert (a ClickHouse window is one insert; a directory one per
# BATCH_BYTES of new files) rather than every one. At 20M spans from ClickHouse the batches'
# input takes 24 s instead of 63 s, for 11-16 s more in the load; at 5M the load and the
# input together took from 2.0 s less to 0.7 s more (noisy) without samples, 1.1 s more with
# 2.6M samples; at 1M (few batches) the sort cost 0.1-0.4 s more than it saved
# (benchmarks/RESULTS.md). A store in memory is not sorted: it is not held to a limit
# (Store.capped), and its sort would take all it needs (7.0 GB at 20M)
SORTED_SPANS = 2_000_000
# the counters of a LoadReport that a rolled-back transaction puts back
_COUNTS = ("files_loaded", "spans_added", "samples_added", "duplicates")


# The rules of records.span_problem / sample_problem in SQL (store/sql/valid_spans.sql,
# valid_samples.sql): a row of our files that passes them can be stored as DuckDB read it.
_BOUNDS = {"min_epoch_ns": MIN_EPOCH_NS, "max_epoch_ns": MAX_EPOCH_NS, "max_count": MAX_COUNT,
           "max_depth": MAX_DEPTH, "max_depth_2": 2 * MAX_DEPTH,
           "list_depth": MAX_DEPTH + 2, "list_depth_2": 2 * (MAX_DEPTH + 2)}
_VALID_SPAN = sql("valid_spans.sql").format(**_BOUNDS)
_VALID_SAMPLE = sql("valid_samples.sql").format(**_BOUNDS)
# what DuckDB raises on input it cannot read: its own errors, and UnicodeDecodeError when its
# message quotes bytes of the input that are not UTF-8 (the binding cannot make the message a
# str: the input's problem, not ours). The reader that names each bad line then takes over.
_READ_ERRORS = (duckdb.Error, UnicodeDecodeError)
_OURS = ("spans", "samples")  # our own formats, which the fast path reads


def _raise_unless_input_fault(error: BaseException) -> None:
    """Re-raise ``error`` (caught as a fault of the input) where it is not one: DuckDB
    running out of memory (Store.load says so, and the file is not read again line by line,
    named as a problem or marked as read)."""
    if isinstance(error, duckdb.OutOfMemoryException):
        raise error


@dataclasses.dataclass
class LoadReport:
    """What one :meth:`Store.load` did. ``problems`` are this load's; older ones stay in the
    ``load_problems`` table."""

    files_seen: int = 0
    files_loaded: int = 0
    files_unchanged: int = 0
    spans_added: int = 0
    samples_added: int = 0
    duplicates: int = 0
    problems: list = dataclasses.field(default_factory=list)
    skipped: list = dataclasses.field(default_factory=list)  # of inputs.Skipped
    formats: dict = dataclasses.field(default_factory=dict)  # format -> files seen

    @property
    def ignored_files(self) -> list:
        """Deprecated (until 0.3): the paths of :attr:`skipped`."""
        return [s.rel for s in self.skipped]


def sources(source: "str | os.PathLike[str]") -> tuple:
    """(loadable files, skipped files) of a directory or a single file (store/inputs.py)."""
    return find(source)


class Loader(WholeFiles):
    """One load of a trace directory into a :class:`~agentscope.store.duckdb_store.Store`
    (given as the store, whose connection it uses)."""

    def __init__(self, store: Any, repeats_by: Optional[str] = None) -> None:
        self.con = store.con
        self._x = store._x
        self._repeats_by = repeats_by  # (Store.load)
        self._sorted = store.path is not None  # (SORTED_SPANS)
        self._seen: dict = {}  # file_id -> (size, mtime_ns) when this load looked at it

    def load(self, trace_dir: "str | os.PathLike[str]",
             progress: Optional[Callable[[int], None]] = None,
             found: Optional[tuple] = None) -> LoadReport:
        """Load what is new in ``trace_dir``. ``progress(bytes)`` is called as files are read;
        ``found`` is what :func:`sources` returned for it, if the caller already looked."""
        report = LoadReport()
        found, report.skipped = found if found is not None else sources(trace_dir)
        self._forget_vanished(found, report.skipped)
        for s in report.skipped:  # a file that could not be read at all: a problem too
            if s.broken:
                problem = stored(TraceFormatError(str(s.path), None, s.reason))
                self._x("DELETE FROM load_problems WHERE path = ?", [problem.path])
                self._x("INSERT INTO load_problems VALUES (?, NULL, NULL, ?, false)",
                        [problem.path, problem.reason])
                report.problems.append(problem)
        known = {path: row for path, *row in self._x(
            "SELECT path, file_id, loaded_bytes, loaded_lines, format, size, mtime_ns, "
            "tail_hash FROM loaded_files")}
        next_id = self._x("SELECT coalesce(max(file_id), 0) + 1 FROM loaded_files")[0][0]
        span_file_ids: list = []
        # new files that end with a newline (and Parquet files), by (format, parquet)
        whole: dict = {(fmt, parquet): [] for fmt in _OURS for parquet in (False, True)}
        read_whole_files: list = []  # files read whole by their format's reader
        new_files: list = []
        stale: list = []  # problems kept under the names of files seen for the first time
        pending = []
        for src in found:
            report.files_seen += 1
            report.formats[src.format] = report.formats.get(src.format, 0) + 1
            try:
                st = src.path.stat()
            except OSError as e:  # gone since it was found, or unreadable
                report.problems.append(stored(TraceFormatError(
                    str(src.path), None, f"cannot read: {e.strerror or e}")))
                continue
            size = st.st_size
            known_row = known.get(db_text(src.rel))
            row = None if known_row is None else tuple(known_row[:4])
            if row is not None and row[3] != src.format:
                # read another way than last time (an OTLP file whose first line was still
                # being written then): what it gave before is replaced, from its start
                self._forget(row[0], src)
                self._x("UPDATE loaded_files SET format = ? WHERE file_id = ?",
                        [src.format, row[0]])
                row = (row[0], 0, 0, src.format)
            elif row is not None and row[1] > 0 and rewritten(src, row[1], known_row[4:], st):
                # a user fixed a line, or the file was replaced: read again from its start
                self._forget(row[0], src)
                row = (row[0], 0, 0, src.format)
            if row is not None and row[1] >= size:
                report.files_unchanged += 1
                if progress:
                    progress(size)
                continue
            if row is None:
                row = (next_id, 0, 0, src.format)
                next_id += 1
                new_files.append((row[0], db_text(src.rel), src.format))
                stale.append(db_text(str(src.path)))  # e.g. "cannot read" from when it was broken
            self._seen[row[0]] = (size, st.st_mtime_ns)
            if src.parquet:  # read whole: a changed one replaces what it gave before
                if row[1] > 0:
                    self._forget(row[0], src)
                whole[src.format, True].append((src, row[0], size))
            elif (src.format in _OURS and src.incremental and row[1] == 0
                    and _plain_path(src) and ends_with_newline(src.path)):
                whole[src.format, False].append((src, row[0], size))
            elif not src.incremental:
                if row[1] > 0:
                    # a file read whole that changed: what it gave before is replaced (an
                    # importer builds spans from the whole file: a session root spans every
                    # round)
                    self._forget(row[0], src)
                read_whole_files.append((src, row[0], size))
            else:
                pending.append((src, row, size))
        for chunk in chunks(stale):
            self._x(f"DELETE FROM load_problems WHERE path IN ({', '.join('?' * len(chunk))})",
                    chunk)
        for chunk in chunks(new_files):  # a statement per many new files (thousands of them)
            self._x("INSERT INTO loaded_files (file_id, path, format, loaded_bytes, "
                    "loaded_lines, records, problems) SELECT *, 0, 0, 0, 0 FROM "
                    f"(VALUES {placeholders(chunk)})", [v for row in chunk for v in row])
        for (fmt, parquet), files in whole.items():
            for batch in _groups(files, BATCH_BYTES):  # a progress step per group of files
                pending.extend(self._load_whole_files(fmt, batch, report, progress,
                                                      span_file_ids, parquet))
        self._load_read_whole(read_whole_files, report, progress, span_file_ids)
        for src, (file_id, offset, lines_before, _), size in pending:
            self._load_one(src, file_id, offset, lines_before, size, report, span_file_ids)
            if progress:
                progress(size)
        if span_file_ids:  # stages from conventions: the rules of semconv.STAGE_RULES
            from ..semconv import stage_sql
            self._x(stage_sql(sql("stages_from_conventions.sql")), {"file_ids": span_file_ids})
        otlp_arrow.release_memory()
        return report

    @contextlib.contextmanager
    def _transaction(self, report: Optional[LoadReport] = None,
                     span_file_ids: Optional[list] = None):
        """One file's (or one batch's) changes to the store, all or none: a failure part way
        leaves the store as it was before (nothing half-loaded stays to be analysed), and
        ``report`` and ``span_file_ids`` as they were too."""
        counts = None if report is None else [getattr(report, f) for f in _COUNTS]
        problems = None if report is None else len(report.problems)
        ids = None if span_file_ids is None else len(span_file_ids)
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            with contextlib.suppress(*_READ_ERRORS):  # an error may have ended it already
                self.con.execute("ROLLBACK")
            if report is not None:
                for field, value in zip(_COUNTS, counts):
                    setattr(report, field, value)
                del report.problems[problems:]
            if span_file_ids is not None:
                del span_file_ids[ids:]
            raise
        self.con.execute("COMMIT")

    def _load_one(self, src: Source, file_id: int, offset: int, lines_before: int, size: int,
                  report: LoadReport, span_file_ids: list) -> None:
        """One file from ``offset``: read and checked first (:meth:`_prepare`), then inserted
        and accounted in one transaction. A file whose load fails part way is rolled back
        and named as a problem (:meth:`_quarantine`). (DuckDB ends a transaction at its first
        error, so what may fail on bad input, reading it, runs before the transaction.)"""
        try:
            try:
                insert, used, lines, problems = self._prepare(src, file_id, offset,
                                                              lines_before, size)
                with self._transaction(report, span_file_ids):
                    added, dups = insert()
                    self._account(report, src, file_id, added, dups, used, lines, problems,
                                  span_file_ids)
            finally:
                self._x("DROP TABLE IF EXISTS staging")
        except Exception as e:  # noqa: BLE001 - bad input must never stop the load
            _raise_unless_input_fault(e)
            self._quarantine(report, src, file_id, size, e, span_file_ids)

    def _quarantine(self, report: LoadReport, src: Source, file_id: int, size: int,
                    error: Exception, span_file_ids: list) -> None:
        """A file that could not be loaded (what it added rolled back): one problem naming it
        and why, and marked as read up to ``size`` so that it is tried again only when it
        changes. The reason is DuckDB's (or Python's) message, decoded leniently: such a
        message can hold bytes of the input that are not UTF-8."""
        why = message_of(error)
        problem = TraceFormatError(str(src.path), None, f"not loaded: {why}")
        try:
            with self._transaction(report, span_file_ids):
                self._account(report, src, file_id, 0, 0, size, 0, [problem], span_file_ids)
        except Exception:  # noqa: BLE001 - the store takes nothing now: say it, go on
            report.problems.append(stored(problem))

    def _forget_vanished(self, found: list, skipped: list) -> None:
        """Forget the problems of files that no longer exist: a bad file the user deleted no
        longer fails the analysis (what it loaded stays, as the spans of any removed file
        do: the store keeps what it was given). A store can hold several sources' files, so
        a file is gone when it is not on disk, not merely absent from this source; a name
        kept with ``\\x`` escapes (not UTF-8: rows.db_text) cannot be looked up, and stays
        unless this source still has it."""
        paths = [p for (p,) in self._x("SELECT DISTINCT path FROM load_problems")]
        present = {db_text(str(s.path)) for s in found}
        present.update(db_text(str(s.path)) for s in skipped if s.path is not None)
        gone = [p for p in paths if p not in present and "\\x" not in p
                and not os.path.lexists(p)]
        for chunk in chunks(gone):
            self._x(f"DELETE FROM load_problems WHERE path IN ({', '.join('?' * len(chunk))})",
                    chunk)

    def _forget(self, file_id: int, src: Source) -> None:
        """Drop what a file loaded before: its spans, its problems, its counts (and note it
        in ``forgotten``, for Store.marks)."""
        self._x("INSERT INTO forgotten (file_id) VALUES (?)", [file_id])
        self._x("DELETE FROM spans WHERE file_id = ?", [file_id])
        self._x("DELETE FROM samples WHERE file_id = ?", [file_id])
        self._x("DELETE FROM load_problems WHERE path = ?", [db_text(str(src.path))])
        self._x("UPDATE loaded_files SET records = 0, problems = 0, loaded_bytes = 0, "
                "loaded_lines = 0, tail_hash = NULL WHERE file_id = ?", [file_id])

    def _account(self, report: LoadReport, src: Source, file_id: int, added: int, dups: int,
                 used: int, lines: int, problems: list, span_file_ids: list) -> None:
        """What one file's load did, in the report and the store (:meth:`_account_many`)."""
        spans, samples = (0, added) if src.format == "samples" else (added, 0)
        self._account_many(report, [(src, file_id, spans, samples, dups, used, lines, problems)],
                           span_file_ids)

    def _fingerprint(self, src: Source, file_id: int, used: int) -> tuple:
        """(size, mtime_ns, hash of the last TAIL_BYTES before ``used``) of a file as this
        load found it: the next load tells an append from a rewrite by them."""
        size, mtime = self._seen.get(file_id, (None, None))
        tail = None
        if src.incremental and used > 0:
            with contextlib.suppress(OSError):
                tail = tail_hash(src.path, used)
        return size, mtime, tail

    def _load_whole_files(self, fmt: str, batch: list, report: LoadReport,
                          progress: Optional[Callable[[int], None]],
                          span_file_ids: list, parquet: bool = False) -> list:
        """The fast path: new files of our own format, in one parallel read_json (or
        read_parquet: ``parquet``). Files with any line (row) it cannot take or that fails
        validation are returned for the per-file path, and so is the whole batch if its
        insert fails (each file is then tried on its own). Parquet files are read through a
        view rather than copied into a table first: a ClickHouse window is one file of all
        its rows, which a table would hold in memory at once (1.4 GB more at 20M spans);
        any bad row sends the whole batch to the per-file path (a view takes no DELETE)."""
        if not batch:
            return []
        spans = fmt == "spans"
        columns = SPAN_COLUMNS if spans else SAMPLE_COLUMNS
        valid = _VALID_SPAN if spans else _VALID_SAMPLE
        by_name = {str(src.path): (src, fid, size) for src, fid, size in batch}
        try:
            if parquet:  # (a view's statement takes no parameters)
                files = ", ".join(quoted(name) for name in by_name)
                self._x(f"CREATE OR REPLACE TEMP VIEW staging AS SELECT {_casts(columns)}, "
                        "filename AS _file, file_row_number AS _row FROM read_parquet("
                        f"[{files}], filename = true, file_row_number = true)")
            else:
                with self._in_file_order():
                    self._x("CREATE OR REPLACE TEMP TABLE staging AS SELECT * FROM "
                            "read_json(?, format = 'newline_delimited', columns = "
                            + _struct(columns) + ", filename = '_file', "
                            "maximum_object_size = 67108864)", [list(by_name)])
        except _READ_ERRORS as e:  # some file has a line DuckDB cannot read
            _raise_unless_input_fault(e)
            return _pending(batch)
        done: list = []
        retry: list = []
        try:
            # (Parquet: each row checked as it is inserted, one read of the files fewer)
            bad_rows = "0" if parquet else f"count(*) FILTER (WHERE NOT coalesce({valid}, false))"
            counts = {name: (rows, bad) for name, rows, bad in self._x(
                f"SELECT _file, count(*), {bad_rows} FROM staging GROUP BY _file")}
            retry = [name for name in by_name if counts.get(name, (0, 0))[1] > 0]
            if retry:
                self._x("DELETE FROM staging WHERE _file IN (SELECT unnest(?))", [retry])
            self._x("CREATE OR REPLACE TEMP TABLE staging_files "
                    "(_file VARCHAR, file_id INTEGER)")
            keep = [[name, fid] for name, (_, fid, _) in by_name.items() if name not in retry]
            if keep:
                self.con.executemany("INSERT INTO staging_files VALUES (?, ?)", keep)
            with self._transaction(report, span_file_ids):
                added_by_file = self._insert_staging_files(
                    spans, "_file, _row" if parquet else "_file, rowid",
                    valid if parquet else None) if keep else {}
                accounts = []
                for name, (src, fid, size) in by_name.items():
                    if name in retry:
                        continue
                    rows = counts.get(name, (0, 0))[0]
                    added = added_by_file.get(fid, 0)
                    accounts.append((src, fid, 0 if not spans else added,
                                     added if not spans else 0, rows - added, size, rows, []))
                    done.append(size)
                self._account_many(report, accounts, span_file_ids)
        except _READ_ERRORS as e:  # the batch as a whole: each file on its own instead
            _raise_unless_input_fault(e)
            return _pending(batch)
        finally:
            self._x(f"DROP {'VIEW' if parquet else 'TABLE'} IF EXISTS staging")
            self._x("DROP TABLE IF EXISTS staging_files")
        if progress:
            for size in done:
                progress(size)
        return _pending([item for name, item in by_name.items() if name in retry])

    @contextlib.contextmanager
    def _in_file_order(self):
        """Statements that keep the rows in the order they were read, so that a staging
        table's rowid is its line's order (of a repeated id the first line is kept): the
        store's connection does not keep it otherwise (duckdb_store; no slower here: 1M
        spans staged in 0.76-0.79 s against 0.79-0.87 s)."""
        before = self._x("SELECT current_setting('preserve_insertion_order')")[0][0]
        self._x("SET preserve_insertion_order = true")
        try:
            yield
        finally:
            self._x(f"SET preserve_insertion_order = {'true' if before else 'false'}")

    def _insert_staging_files(self, spans: bool, order: str,
                              check: Optional[str] = None) -> dict:
        """Insert ``staging`` (rows tagged with ``_file``) into spans/samples; added per file
        (``order``: the order in the files, by which a repeated span's first row is kept).
        ``check``: the rules (SQL) each row is checked by as it is inserted; the first that
        fails them raises (:func:`_checked`), and nothing is inserted."""
        data = ", ".join(SPAN_COLUMNS if spans else SAMPLE_COLUMNS)
        join = "JOIN staging_files f USING (_file)"
        if not spans:
            self._x(f"INSERT INTO samples SELECT {data}, f.file_id FROM {_checked(check)} "
                    f"AS staging {join}")
            return dict(self._x(f"SELECT f.file_id, count(*) FROM staging {join} GROUP BY ALL"))
        self._insert_spans("f.file_id", join, order, check)
        # the files are new: every row with their ids came from this insert
        return dict(self._x("SELECT file_id, count(*) FROM spans WHERE file_id IN "
                            "(SELECT file_id FROM staging_files) GROUP BY ALL"))

    def _prepare(self, src: Source, file_id: int, offset: int, lines_before: int,
                 size: int) -> tuple:
        """Read a file from ``offset`` and check it, outside any transaction: (a function
        that inserts what it holds and returns (added, duplicates), bytes used, lines,
        problems). What is inserted is either the temp table ``staging`` (DuckDB or pyarrow
        read the lines and they passed the checks) or rows the Python readers made."""
        if src.parquet:  # its rows as lines, each row's line its number (read whole)
            data = self._parquet_lines(src)
        else:
            with open(src.path, "rb") as f:
                f.seek(offset)
                data = f.read(size - offset)
        cut = data.rfind(b"\n") + 1
        complete, rest = data[:cut], data[cut:]
        n_lines = complete.count(b"\n")
        problems: list = []
        if rest.strip():
            # an unterminated last line: the writer may still complete it; report, don't load
            problems.append(TraceFormatError(
                str(src.path), lines_before + n_lines + 1,
                "torn last line (no newline yet: the writer stopped mid-write or is writing); "
                "not loaded", torn=True))
        if not complete:
            return (lambda: (0, 0)), offset, lines_before, problems
        used, lines = (size if src.parquet else offset + cut), lines_before + n_lines
        spans = src.format != "samples"
        if src.format == "otlp-lines":
            if self._stage_otlp_fast(src, complete, offset == 0 and not rest) is not None:
                return (lambda: self._insert_staging(file_id, True)), used, lines, problems
            path = str(src.path)
            # (each record checked by otlp_common.record, with its line and place)
            rows = span_rows(otlp_lines(complete, path, lines_before, problems), file_id, path,
                             problems)
            return (lambda: self._insert_rows(rows, file_id)), used, lines, problems
        if self._stage_lines(src, complete):
            return (lambda: self._insert_staging(file_id, spans)), used, lines, problems
        insert = self._slow_path(src, file_id, complete, lines_before, problems)
        return insert, used, lines, problems

    def _parquet_lines(self, src: Source) -> bytes:
        """The rows of a Parquet file of our fields as the lines of our files, in its order
        (DuckDB writes them; the per-file path then names each bad row by its number, as
        it names a line). A file DuckDB cannot read raises (the file is quarantined)."""
        columns = SPAN_COLUMNS if src.format == "spans" else SAMPLE_COLUMNS
        fd, path = tempfile.mkstemp(suffix=".jsonl")
        os.close(fd)
        try:
            self._x(f"COPY (SELECT {_casts(columns, lenient=True)} FROM read_parquet("
                    f"{quoted(src.path)}, file_row_number = true) ORDER BY file_row_number) "
                    f"TO {quoted(path)} (FORMAT json)")
            with open(path, "rb") as f:
                return f.read()
        finally:
            os.unlink(path)

    def _stage_otlp_fast(self, src: Source, complete: bytes, whole_file: bool) -> Optional[int]:
        """Try the pyarrow fast path for OTLP lines (see store/otlp_arrow.py)."""
        if whole_file and _plain_path(src):
            return otlp_arrow.stage(self.con, str(src.path), complete)
        with _temp_jsonl(complete) as tmp:
            return otlp_arrow.stage(self.con, tmp, complete)

    def _stage_lines(self, src: Source, complete: bytes) -> bool:
        """Complete lines of one of our files into the temp table ``staging`` with DuckDB's
        reader: True if every line loads and passes the checks (else the validating reader
        takes the file, and names each bad line)."""
        spans = src.format == "spans"
        columns = SPAN_COLUMNS if spans else SAMPLE_COLUMNS
        valid = _VALID_SPAN if spans else _VALID_SAMPLE
        with _temp_jsonl(complete) as tmp:
            try:
                with self._in_file_order():
                    self._x("CREATE OR REPLACE TEMP TABLE staging AS SELECT * FROM "
                            "read_json(?, format = 'newline_delimited', columns = "
                            + _struct(columns) + ", maximum_object_size = 67108864)", [tmp])
                rows, bad = self._x(
                    f"SELECT count(*), count(*) FILTER (WHERE NOT coalesce({valid}, false)) "
                    "FROM staging")[0]
            except _READ_ERRORS as e:
                _raise_unless_input_fault(e)
                rows, bad = 0, 1
        if bad == 0 and rows == complete.count(b"\n"):
            return True
        self._x("DROP TABLE IF EXISTS staging")
        return False

    def _insert_staging(self, file_id: int, spans: bool) -> tuple:
        if not spans:
            columns = ", ".join(SAMPLE_COLUMNS)
            n = self._x(f"INSERT INTO samples SELECT {columns}, {int(file_id)} "
                        "FROM staging")[0][0]
            return n, 0
        added, rows = self._insert_spans(str(int(file_id)))
        return added, rows - added

    def _insert_spans(self, file_id: str, join: str = "", order: str = "rowid",
                      check: Optional[str] = None) -> tuple:
        """Insert the rows of ``staging`` into ``spans`` (``file_id``: the SQL giving each row's
        file), skipping spans already stored and repeats inside ``staging`` (the first by
        the load's ``repeats_by``, then ``order``, is kept: by default the first line, as
        staging keeps the file's order); ``check``: as :meth:`_insert_staging_files`.
        Returns (how many were added, rows staged)."""
        if self._repeats_by:
            order = f"{self._repeats_by}, {order}"
        # (grouped, which DuckDB can spill under Store.capped's limit; an ungrouped count of
        # distinct ids cannot)
        rows, repeats = self._x(
            "SELECT (SELECT count(*) FROM staging), EXISTS (SELECT 1 FROM staging GROUP BY "
            "hash(trace_id, span_id) HAVING count(*) > 1)")[0]
        staged = _checked(check)
        source = staged if not repeats else (
            f"(SELECT * FROM {staged} QUALIFY row_number() OVER "
            f"(PARTITION BY trace_id, span_id ORDER BY {order}) = 1)")
        # spans already stored: looked for among the stored spans of the traces staged only
        # (a join on every stored span id held a hash table of them all: at 20M spans, 2.5 GB
        # more for the last file)
        stored = self._x("SELECT count(*) FROM spans")[0][0]
        new = "" if not stored else (
            "WHERE NOT EXISTS (SELECT 1 FROM (SELECT trace_id, span_id FROM spans "
            "WHERE trace_id IN (SELECT DISTINCT trace_id FROM staging)) t "
            "WHERE t.trace_id = s.trace_id AND t.span_id = s.span_id)")
        insert = f"""
            INSERT INTO spans
            SELECT {', '.join('s.' + c for c in SPAN_COLUMNS)},
                   CASE WHEN s.stage IS NULL THEN NULL ELSE 'agentscope' END, {file_id}
            FROM {source} AS s {join}
            {new}"""
        if self._sorted and stored + rows >= SORTED_SPANS:
            # (an insert whose source has ORDER BY keeps that order whatever
            # preserve_insertion_order says)
            insert += "\nORDER BY s.trace_id"
        return self._x(insert)[0][0], rows

    def _slow_path(self, src: Source, file_id: int, complete: bytes, lines_before: int,
                   problems: list) -> Callable[[], tuple]:
        """Our lines read by the validating reader (each bad line a problem in ``problems``):
        a function that inserts the good ones."""
        spans = src.format == "spans"
        fmt = spanfile if spans else samplefile
        path = str(src.path)
        records = []
        for number, text in numbered_lines(complete, lines_before):
            try:
                records.append(fmt.decode(text, path, number))
            except TraceFormatError as e:
                problems.append(e)
        if spans:
            rows = span_rows(records, file_id, path, problems)
            return lambda: self._insert_rows(rows, file_id)
        samples = sample_rows(records, path, problems)
        return lambda: (self._insert_sample_rows(samples, file_id), 0)

    def _insert_rows(self, rows: list, file_id: int) -> tuple:
        """Insert span rows (:func:`span_rows`): (added, duplicates)."""
        if not rows:
            return 0, 0
        self._stage_span_rows(rows)
        try:
            return self._insert_staging(file_id, True)
        finally:
            self._x("DROP TABLE IF EXISTS staging")

    def _stage_span_rows(self, rows: list) -> None:
        """The temp table ``staging`` from span rows (:func:`~.rows.span_row` and a
        ``file_id`` each), typed as the ``spans`` table's columns."""
        import pandas as pd

        self.con.register("incoming", pd.DataFrame(rows, columns=[*SPAN_COLUMNS, "file_id"]))
        try:
            self._x("CREATE OR REPLACE TEMP TABLE staging AS SELECT "
                    + ", ".join(f"CAST({c} AS {t}) AS {c}" for c, t in SPAN_COLUMNS.items())
                    + ", CAST(file_id AS INTEGER) AS file_id FROM incoming")
        finally:
            self.con.unregister("incoming")

    def _insert_samples(self, records: list, file_id: int, path: str = "",
                        problems: Optional[list] = None) -> int:
        """Insert sample records; one the store cannot take (rows.sample_row) is a problem
        in ``problems`` instead."""
        return self._insert_sample_rows(sample_rows(records, path, problems), file_id)

    def _insert_sample_rows(self, rows: list, file_id: int) -> int:
        """Insert sample rows (one frame: DuckDB's executemany costs 0.6 ms a row)."""
        if not rows:
            return 0
        import pandas as pd

        self.con.register("incoming_samples", pd.DataFrame(rows, columns=list(SAMPLE_COLUMNS)))
        try:
            self._x("INSERT INTO samples SELECT "
                    + ", ".join(f"CAST({c} AS {t})" for c, t in SAMPLE_COLUMNS.items())
                    + f", {int(file_id)} FROM incoming_samples")
        finally:
            self.con.unregister("incoming_samples")
        return len(rows)


def _checked(check: Optional[str]) -> str:
    """The rows of ``staging``, each checked by the rules ``check`` (SQL of its columns) where
    given: a row that fails them raises (DuckDB's ``error``), ending the statement."""
    if check is None:
        return "staging"
    return (f"(SELECT * FROM staging WHERE CASE WHEN coalesce({check}, false) THEN true "
            "ELSE error('a row fails the checks of its fields') END)")


def _plain_path(src: Source) -> bool:
    """Whether DuckDB and pyarrow can open the file by its name (a name that is not UTF-8
    cannot be passed to them: such a file is read by Python)."""
    try:
        str(src.path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@contextlib.contextmanager
def _temp_jsonl(data: bytes):
    """A temporary file holding ``data`` (for DuckDB and pyarrow, which read files)."""
    fd, path = tempfile.mkstemp(suffix=".jsonl")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield path
    finally:
        os.unlink(path)


def _groups(files: list, limit: int) -> list:
    """Consecutive groups of (src, file_id, size) of at most ``limit`` bytes (at least one
    file each): read in parallel within a group, with progress between groups."""
    groups, current, size = [], [], 0
    for item in files:
        if current and size + item[2] > limit:
            groups.append(current)
            current, size = [], 0
        current.append(item)
        size += item[2]
    if current:
        groups.append(current)
    return groups


def _pending(batch: list) -> list:
    """New files of a fast-path batch, as entries for the per-file path (from offset 0)."""
    return [(src, (fid, 0, 0, src.format), size) for src, fid, size in batch]


def _casts(columns: dict, lenient: bool = False) -> str:
    """The select list that gives a Parquet file's columns the table's types (JSON for
    attributes, events and links: their text is JSON, kept as read_json keeps it, minified
    and unescaped where JSON allows: ClickHouse writes ``/`` as ``\\/``). ``lenient``:
    for the lines the validating reader checks instead: numbers as they are (one out of its
    column's range is named there, not refused here), and JSON text that does not parse
    kept as a JSON string (named there too: not an object)."""
    if not lenient:  # (json(): minified as read_json keeps it, "\/" as "/")
        return ", ".join(f"json({k}) AS {k}" if k in JSON_COLUMNS else f"CAST({k} AS {v}) AS {k}"
                         for k, v in columns.items())
    return ", ".join(f"coalesce(TRY_CAST({k} AS JSON), to_json({k})) AS {k}"
                     if k in JSON_COLUMNS else k for k in columns)


def _struct(columns: dict) -> str:
    """The ``columns`` argument of read_json: the table's types, but JSON for attributes,
    events and links (a JSON string there must stay a string, not pass for an object)."""
    return "{" + ", ".join(f"'{k}': '{'JSON' if k in JSON_COLUMNS else v}'"
                           for k, v in columns.items()) + "}"
