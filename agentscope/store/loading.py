"""Loading a trace directory into the store, incrementally (used by ``Store.load``).

* Our span and sample files load through DuckDB's own JSON reader (the fast path); new files
  are read together, in parallel; a file that has any line it cannot take is re-read by the
  validating Python reader, which names the file and line of each problem and loads the rest.
* OTLP/JSON files: pyarrow + DuckDB where possible (otlp_arrow.py), else Python (otlp.py).
* Every other format (store/inputs.py tells which), and compressed files of any format, are
  read whole by their reader (formats/importers/) into records, when new or changed.
* Files are append-only: a file seen before is loaded from where the last load stopped (its
  last complete line); a torn last line waits for its newline. Spans are unique by
  (trace_id, span_id): a span seen again is counted as a duplicate and skipped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from typing import Any, Callable, Iterable, Optional

import duckdb

from ..errors import TraceFormatError
from ..formats import samplefile, spanfile
from ..formats.spanfile import MIN_EPOCH_NS
from ..records import SpanRecord
from . import otlp_arrow
from .inputs import Source, ends_with_newline, find
from ..formats.lines import numbered_lines
from .otlp import otlp_lines
from .rows import chunks, placeholders, span_row
from .whole import WholeFiles
from .schema import SAMPLE_COLUMNS, SPAN_COLUMNS, sql

BATCH_BYTES = 512 << 20  # new files read by one read_json call (a progress step each)

_VALID_SPAN = """
    trace_id IS NOT NULL AND regexp_full_match(trace_id, '[0-9a-f]{32}')
    AND trace_id <> '00000000000000000000000000000000'
    AND span_id IS NOT NULL AND regexp_full_match(span_id, '[0-9a-f]{16}')
    AND span_id <> '0000000000000000'
    AND (parent_span_id IS NULL OR regexp_full_match(parent_span_id, '[0-9a-f]{16}'))
    AND name IS NOT NULL AND (start_ns >= MIN_EPOCH_NS OR start_ns = 0)
    AND end_ns >= start_ns
    AND kind IN ('internal', 'server', 'client', 'producer', 'consumer')
    AND status IN ('unset', 'ok', 'error')
"""
_VALID_SPAN = _VALID_SPAN.replace("MIN_EPOCH_NS", str(MIN_EPOCH_NS))
_VALID_SAMPLE = "ts_ns >= 0 AND metric IS NOT NULL AND metric <> '' AND source IS NOT NULL"



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

    def __init__(self, store: Any) -> None:
        self.con = store.con
        self._x = store._x

    def load(self, trace_dir: "str | os.PathLike[str]",
             progress: Optional[Callable[[int], None]] = None,
             found: Optional[tuple] = None) -> LoadReport:
        """Load what is new in ``trace_dir``. ``progress(bytes)`` is called as files are read;
        ``found`` is what :func:`sources` returned for it, if the caller already looked."""
        report = LoadReport()
        found, report.skipped = found if found is not None else sources(trace_dir)
        for s in report.skipped:  # a file that could not be read at all: a problem too
            if s.broken:
                problem = TraceFormatError(str(s.path), None, s.reason)
                self._x("DELETE FROM load_problems WHERE path = ?", [problem.path])
                self._x("INSERT INTO load_problems VALUES (?, NULL, NULL, ?, false)",
                        [problem.path, problem.reason])
                report.problems.append(problem)
        known = {path: (fid, loaded, lines, fmt) for fid, path, loaded, lines, fmt in self._x(
            "SELECT file_id, path, loaded_bytes, loaded_lines, format FROM loaded_files")}
        next_id = self._x("SELECT coalesce(max(file_id), 0) + 1 FROM loaded_files")[0][0]
        span_file_ids: list = []
        whole: dict = {"spans": [], "samples": []}  # new files that end with a newline
        read_whole_files: list = []  # files read whole by their format's reader
        new_files: list = []
        stale: list = []  # problems kept under the names of files seen for the first time
        pending = []
        for src in found:
            report.files_seen += 1
            report.formats[src.format] = report.formats.get(src.format, 0) + 1
            size = src.path.stat().st_size
            row = known.get(src.rel)
            if row is not None and row[3] != src.format:
                # read another way than last time (an OTLP file whose first line was still
                # being written then): what it gave before is replaced, from its start
                self._forget(row[0], src)
                self._x("UPDATE loaded_files SET format = ? WHERE file_id = ?",
                        [src.format, row[0]])
                row = (row[0], 0, 0, src.format)
            if row is not None and row[1] >= size:
                report.files_unchanged += 1
                if progress:
                    progress(size)
                continue
            if row is None:
                row = (next_id, 0, 0, src.format)
                next_id += 1
                new_files.append((row[0], src.rel, src.format))
                stale.append(str(src.path))  # e.g. "cannot read" from when it was broken
            if (src.format in whole and src.incremental and row[1] == 0
                    and ends_with_newline(src.path)):
                whole[src.format].append((src, row[0], size))
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
            self._x("INSERT INTO loaded_files SELECT *, 0, 0, 0, 0, current_timestamp FROM "
                    f"(VALUES {placeholders(chunk)})", [v for row in chunk for v in row])
        for fmt, files in whole.items():
            for batch in _groups(files, BATCH_BYTES):  # a progress step per group of files
                pending.extend(self._load_whole_files(fmt, batch, report, progress,
                                                      span_file_ids))
        self._load_read_whole(read_whole_files, report, progress, span_file_ids)
        for src, (file_id, offset, lines_before, _), size in pending:
            added, dups, used, lines, problems = self._load_file(src, file_id, offset,
                                                                 lines_before, size)
            self._account(report, src, file_id, added, dups, used, lines, problems,
                          span_file_ids)
            if progress:
                progress(size)
        if span_file_ids:  # stages from conventions: the rules of semconv.STAGE_RULES
            from ..semconv import stage_sql
            self._x(stage_sql(sql("stages_from_conventions.sql")), {"file_ids": span_file_ids})
        return report

    def _forget(self, file_id: int, src: Source) -> None:
        """Drop what a file loaded before: its spans, its problems, its counts."""
        self._x("DELETE FROM spans WHERE file_id = ?", [file_id])
        self._x("DELETE FROM samples WHERE file_id = ?", [file_id])
        self._x("DELETE FROM load_problems WHERE path = ?", [str(src.path)])
        self._x("UPDATE loaded_files SET records = 0, problems = 0 WHERE file_id = ?", [file_id])

    def _account(self, report: LoadReport, src: Source, file_id: int, added: int, dups: int,
                 used: int, lines: int, problems: list, span_file_ids: list) -> None:
        """What one file's load did, in the report and the store (:meth:`_account_many`)."""
        spans, samples = (0, added) if src.format == "samples" else (added, 0)
        self._account_many(report, [(src, file_id, spans, samples, dups, used, lines, problems)],
                           span_file_ids)

    def _load_whole_files(self, fmt: str, batch: list, report: LoadReport,
                          progress: Optional[Callable[[int], None]],
                          span_file_ids: list) -> list:
        """The fast path: new files of our own format, in one parallel read_json. Files with any
        line it cannot take or that fails validation are returned for the per-file path."""
        if not batch:
            return []
        spans = fmt == "spans"
        columns = SPAN_COLUMNS if spans else SAMPLE_COLUMNS
        valid = _VALID_SPAN if spans else _VALID_SAMPLE
        by_name = {str(src.path): (src, fid, size) for src, fid, size in batch}
        try:
            self._x("CREATE OR REPLACE TEMP TABLE staging AS SELECT * FROM read_json(?, "
                    "format = 'newline_delimited', columns = " + _struct(columns) + ", "
                    "filename = '_file', maximum_object_size = 67108864)", [list(by_name)])
        except duckdb.Error:
            return _pending(batch)  # some file has a line DuckDB cannot read
        try:
            counts = {name: (rows, bad) for name, rows, bad in self._x(
                f"SELECT _file, count(*), count(*) FILTER (WHERE NOT coalesce({valid}, false)) "
                "FROM staging GROUP BY _file")}
            retry = [name for name in by_name if counts.get(name, (0, 0))[1] > 0]
            if retry:
                self._x("DELETE FROM staging WHERE _file IN (SELECT unnest(?))", [retry])
            self._x("CREATE OR REPLACE TEMP TABLE staging_files (_file VARCHAR, file_id INTEGER)")
            keep = [[name, fid] for name, (_, fid, _) in by_name.items() if name not in retry]
            if keep:
                self.con.executemany("INSERT INTO staging_files VALUES (?, ?)", keep)
            added_by_file = self._insert_staging_files(spans) if keep else {}
            for name, (src, fid, size) in by_name.items():
                if name in retry:
                    continue
                rows = counts.get(name, (0, 0))[0]
                added = added_by_file.get(fid, 0)
                self._account(report, src, fid, added, rows - added, size, rows, [],
                              span_file_ids)
                if progress:
                    progress(size)
        finally:
            self._x("DROP TABLE IF EXISTS staging")
            self._x("DROP TABLE IF EXISTS staging_files")
        return _pending([item for name, item in by_name.items() if name in retry])

    def _insert_staging_files(self, spans: bool) -> dict:
        """Insert ``staging`` (rows tagged with ``_file``) into spans/samples; added per file."""
        data = ", ".join(SPAN_COLUMNS if spans else SAMPLE_COLUMNS)
        join = "JOIN staging_files f USING (_file)"
        if not spans:
            self._x(f"INSERT INTO samples SELECT {data}, f.file_id FROM staging {join}")
            return dict(self._x(f"SELECT f.file_id, count(*) FROM staging {join} GROUP BY ALL"))
        self._insert_spans("f.file_id", join, "_file")
        # the files are new: every row with their ids came from this insert
        return dict(self._x("SELECT file_id, count(*) FROM spans WHERE file_id IN "
                            "(SELECT file_id FROM staging_files) GROUP BY ALL"))

    def _load_file(self, src: Source, file_id: int, offset: int, lines_before: int,
                   size: int) -> tuple:
        """Load from ``offset``; returns (added, duplicates, bytes used, lines, problems)."""
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
            return 0, 0, offset, lines_before, problems
        if src.format == "otlp-lines":
            staged = self._stage_otlp_fast(src, complete, offset == 0 and not rest)
            if staged is not None:
                try:
                    added, dups = self._insert_staging(file_id, True)
                finally:
                    self._x("DROP TABLE IF EXISTS staging")
                return added, dups, offset + cut, lines_before + n_lines, problems
            errors = []
            records = list(otlp_lines(complete, str(src.path), lines_before, errors))
            added, dups = self._insert_records(records, file_id)
            return added, dups, offset + cut, lines_before + n_lines, problems + errors
        added, dups, slow_problems = self._load_lines(src, file_id, complete, lines_before)
        return added, dups, offset + cut, lines_before + n_lines, problems + slow_problems

    def _stage_otlp_fast(self, src: Source, complete: bytes, whole_file: bool) -> Optional[int]:
        """Try the pyarrow fast path for OTLP lines (see store/otlp_arrow.py)."""
        if whole_file:
            return otlp_arrow.stage(self.con, str(src.path), complete)
        with _temp_jsonl(complete) as tmp:
            return otlp_arrow.stage(self.con, tmp, complete)

    def _load_lines(self, src: Source, file_id: int, complete: bytes,
                    lines_before: int) -> tuple:
        """Complete lines of one of our files: DuckDB if every line loads and validates, else
        the validating reader, which names each bad line."""
        spans = src.format == "spans"
        columns = SPAN_COLUMNS if spans else SAMPLE_COLUMNS
        valid = _VALID_SPAN if spans else _VALID_SAMPLE
        with _temp_jsonl(complete) as tmp:
            try:
                self._x("CREATE OR REPLACE TEMP TABLE staging AS SELECT * FROM read_json(?, "
                        "format = 'newline_delimited', columns = " + _struct(columns) + ", "
                        "maximum_object_size = 67108864)", [tmp])
                rows, bad = self._x(
                    f"SELECT count(*), count(*) FILTER (WHERE NOT coalesce({valid}, false)) "
                    "FROM staging")[0]
            except duckdb.Error:
                rows, bad = 0, 1
            try:
                if bad == 0 and rows == complete.count(b"\n"):
                    added, dups = self._insert_staging(file_id, spans)
                    return added, dups, []
            finally:
                self._x("DROP TABLE IF EXISTS staging")
        return self._slow_path(src, file_id, complete, lines_before, spans)

    def _insert_staging(self, file_id: int, spans: bool) -> tuple:
        if not spans:
            n = self._x(f"INSERT INTO samples SELECT *, {int(file_id)} FROM staging")[0][0]
            return n, 0
        total = self._x("SELECT count(*) FROM staging")[0][0]
        added = self._insert_spans(str(int(file_id)))
        return added, total - added

    def _insert_spans(self, file_id: str, join: str = "", order: str = "") -> int:
        """Insert the rows of ``staging`` into ``spans`` (``file_id``: the SQL giving each row's
        file), skipping spans already stored and repeats inside ``staging`` (the first by
        ``order`` is kept). Returns how many were added."""
        repeats = self._x("SELECT count(*) - count(DISTINCT hash(trace_id, span_id)) "
                          "FROM staging")[0][0]
        source = "staging" if not repeats else (
            "(SELECT * FROM staging QUALIFY row_number() OVER "
            f"(PARTITION BY trace_id, span_id{' ORDER BY ' + order if order else ''}) = 1)")
        new = "" if not self._x("SELECT 1 FROM spans LIMIT 1") else (
            "WHERE NOT EXISTS (SELECT 1 FROM spans t "
            "WHERE t.trace_id = s.trace_id AND t.span_id = s.span_id)")
        return self._x(f"""
            INSERT INTO spans
            SELECT {', '.join('s.' + c for c in SPAN_COLUMNS)},
                   CASE WHEN s.stage IS NULL THEN NULL ELSE 'agentscope' END, {file_id}
            FROM {source} AS s {join}
            {new}""")[0][0]

    def _slow_path(self, src: Source, file_id: int, complete: bytes, lines_before: int,
                   spans: bool) -> tuple:
        problems: list = []
        fmt = spanfile if spans else samplefile
        records = []
        for number, text in numbered_lines(complete, lines_before):
            try:
                records.append(fmt.decode(text, str(src.path), number))
            except TraceFormatError as e:
                problems.append(e)
        if spans:
            added, dups = self._insert_records(records, file_id)
        else:
            added, dups = self._insert_samples(records, file_id), 0
        return added, dups, problems

    def _insert_records(self, records: Iterable[SpanRecord], file_id: int) -> tuple:
        rows = [span_row(r) + (file_id,) for r in records]
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

    def _insert_samples(self, records: list, file_id: int) -> int:
        """Insert sample records (one frame: DuckDB's executemany costs 0.6 ms a row)."""
        if not records:
            return 0
        import pandas as pd

        self.con.register("incoming_samples", pd.DataFrame(records,
                                                           columns=list(SAMPLE_COLUMNS)))
        try:
            self._x("INSERT INTO samples SELECT "
                    + ", ".join(f"CAST({c} AS {t})" for c, t in SAMPLE_COLUMNS.items())
                    + f", {int(file_id)} FROM incoming_samples")
        finally:
            self.con.unregister("incoming_samples")
        return len(records)


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


def _struct(columns: dict) -> str:
    return "{" + ", ".join(f"'{k}': '{v}'" for k, v in columns.items()) + "}"
