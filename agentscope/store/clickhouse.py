"""ClickHouse as a source of traces: the OpenTelemetry Collector's ``otel_traces`` table (its
ClickHouse exporter's schema, as the Collector made it) and agentscope's own counter samples
table, read with chdb (``chdb://PATH``: in-process ClickHouse, run in a child process of ours)
or from a server over HTTP (``clickhouse://[user[:password]@]host[:port]/database``,
clickhouse-connect); and written (``agentscope export clickhouse``), for those who start
from files.

What is read travels as Parquet files of the span and sample files' fields, is loaded into
the embedded store (DuckDB) and checked as span and sample files are, and analysed there: the
spans of the window travel to this machine. Every trace's critical path can also be walked
inside ClickHouse (:func:`critical_paths`), with only per-trace rows travelling back
(docs/clickhouse.md says what runs where). Both packages are in the ``[clickhouse]`` extra.

The URLs and their options: :mod:`agentscope.urls`. A window (``since``, ``until``) or a
service reads whole traces: every span of each trace with a span that started in it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import orjson

from .. import semconv
from ..errors import StoreError
from ..records import INT_FIELDS, MAX_EPOCH_NS, MIN_EPOCH_NS
from ..urls import Remote, is_url, parse, without_password  # noqa: F401 - (here too)
from .schema import JSON_COLUMNS, SPAN_COLUMNS, SQL_DIR

# every query's bounds: an unbounded query over a large table can take a whole machine
MAX_MEMORY_BYTES = 4 << 30
MAX_EXECUTION_S = 600
_SETTINGS = (f"max_memory_usage = {MAX_MEMORY_BYTES}, max_execution_time = {MAX_EXECUTION_S}")
# JSON lines (the walk's rows: critical_paths): integers as numbers, tuples as objects, and
# text that is not UTF-8 (ClickHouse strings are bytes) with its bad bytes replaced
_OUTPUT = ("output_format_json_quote_64bit_integers = 0, "
           "output_format_json_named_tuples_as_objects = 1, "
           "output_format_json_quote_denormals = 0, output_format_json_validate_utf8 = 1")
_BOUNDS = {name: (lo, hi) for name, lo, hi in INT_FIELDS}
# rows of data in one INSERT: in its text to a server (parsed whole: ClickHouse's
# max_query_size, 256 KiB by default), from a file for chdb
_INSERT_BYTES = 200_000
_FILE_BYTES = 32 << 20


class Connection:
    """One ClickHouse: chdb in a child process (:class:`_Apart`), or a server through
    clickhouse-connect. Every query runs with :data:`MAX_MEMORY_BYTES` and
    :data:`MAX_EXECUTION_S`."""

    def __init__(self, remote: Remote) -> None:
        self.remote = remote
        if remote.scheme == "chdb":
            self._session = _Apart(remote)
            self._client = None
        else:
            try:
                import clickhouse_connect
            except ImportError:
                raise StoreError("clickhouse:// needs clickhouse-connect: pip install "
                                 "'agentscope[clickhouse]'") from None
            try:
                self._client = clickhouse_connect.get_client(
                    host=remote.host, port=remote.port, database=remote.database,
                    username=remote.user or "default", password=remote.password or "")
            except Exception as e:  # noqa: BLE001 - the client's own errors, named
                raise StoreError(f"cannot reach {remote.display}: "
                                 f"{_redacted(str(e), remote)}") from None
            self._session = None

    def text(self, statement: str, fmt: str = "", settings: str = "") -> str:
        """The output of ``statement`` in the format ``fmt`` (none: a statement without
        output), as text."""
        return self._output(statement, fmt, settings, binary=False)

    def _output(self, statement: str, fmt: str, settings: str, binary: bool) -> Any:
        statement = (f"{statement}\nSETTINGS {_SETTINGS}" + (f", {settings}" if settings else "")
                     + (f"\nFORMAT {fmt}" if fmt else ""))
        try:
            if self._session is not None:
                return self._session.query(statement)
            got = self._client.raw_query(statement)
            return got if binary else got.decode()
        except StoreError:
            raise
        except Exception as e:  # noqa: BLE001 - ClickHouse's errors, named
            raise StoreError(f"{self.remote.display}: "
                             f"{_short(_redacted(str(e), self.remote))}") from None

    def command(self, statement: str) -> None:
        self.text(statement)

    def to_file(self, statement: str, fmt: str, path: Path, settings: str = "") -> None:
        """Write the output of ``statement`` in the format ``fmt`` to the new file ``path``
        (chdb writes it itself: no copy of it in Python)."""
        if self._session is not None:
            self.text(f"{statement}\nINTO OUTFILE {_literal(str(path))}", fmt, settings)
            if not path.exists():  # (nothing selected)
                path.write_bytes(b"")
        else:
            path.write_bytes(self._output(statement, fmt, settings, binary=True))

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
        elif self._client is not None:
            self._client.close()


class _Apart:
    """A chdb session in a child process (``_chdb_worker.py``: why, there), asked one
    statement at a time over a pipe."""

    def __init__(self, remote: Remote) -> None:
        import importlib.util

        if importlib.util.find_spec("chdb") is None:
            raise StoreError("chdb:// needs the chdb package: pip install "
                             "'agentscope[clickhouse]'")
        self.remote = remote
        self._said = tempfile.TemporaryFile()  # its stderr (a pipe could fill and block it)
        # (this process's sys.path: chdb may be reachable only through it)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("_chdb_worker.py")), remote.path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._said, text=True,
            encoding="utf-8", env=env)
        first = self._answer()
        if "error" in first:
            self.close()
            raise StoreError(f"{remote.display}: cannot open it: {_short(first['error'])}")

    def _answer(self) -> dict:
        line = self._proc.stdout.readline()
        if not line:
            self._proc.wait()
            self._said.seek(0)
            said = self._said.read().decode(errors="replace").strip().splitlines()
            raise StoreError(f"{self.remote.display}: chdb exited with {self._proc.returncode}"
                             + (f": {_short(said[-1])}" if said else ""))
        return json.loads(line)

    def query(self, statement: str) -> str:
        """The output of ``statement`` (its FORMAT in it), or :class:`Exception` with
        ClickHouse's message."""
        self._proc.stdin.write(json.dumps({"q": statement}) + "\n")
        self._proc.stdin.flush()
        got = self._answer()
        if "error" in got:
            raise Exception(got["error"])
        return got["text"]

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
            try:
                self._proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc.stdout.close()
        self._said.close()


def _short(message: str, most: int = 600) -> str:
    """ClickHouse's message without the query it quotes (a whole generated SELECT)."""
    message = " ".join(message.split())
    return message if len(message) <= most else message[:most] + " ..."


def _redacted(message: str, remote: Remote) -> str:
    return message.replace(remote.password, "***") if remote.password else message


def _sql(name: str) -> str:
    return (SQL_DIR / "clickhouse" / name).read_text()


def _literal(text: str) -> str:
    """A ClickHouse string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _window(remote: Remote, part: "tuple | None" = None) -> tuple:
    """(the condition on a span that puts its trace in, the condition on the spans read).
    ``part`` (k, parts): only the traces whose id hashes to part k of that many."""
    window, near = [], []
    if part is not None:  # (lower: a trace whose rows spell its id in two cases stays whole)
        window.append(f"cityHash64(lower(TraceId)) % {int(part[1])} = {int(part[0])}")
    day = 86_400 * 1_000_000_000
    if remote.since is not None:  # (urls.parse keeps both within 1970-2262, less a day)
        window.append(f"Timestamp >= fromUnixTimestamp64Nano(toInt64({remote.since}))")
        near.append("Timestamp >= fromUnixTimestamp64Nano(toInt64("
                    f"{max(remote.since - day, 0)}))")
    if remote.until is not None:
        window.append(f"Timestamp < fromUnixTimestamp64Nano(toInt64({remote.until}))")
        near.append(f"Timestamp < fromUnixTimestamp64Nano(toInt64({remote.until + day}))")
    if remote.service is not None:
        window.append(f"ServiceName = {_literal(remote.service)}")
    return " AND ".join(window) or "1", " AND ".join(near) or "1"


def _integer_attribute(attr: str, column: str) -> str:
    """An accounting attribute (text in the exporter's map) as its column: an integer in the
    column's range (a decimal number truncated), else NULL."""
    lo, hi = _BOUNDS[column]
    text = f"SpanAttributes[{_literal(attr)}]"
    # (multiIf evaluates a branch only for the rows that reach it: most spans lack the
    # attribute or hold an integer, and the decimal's branch costs the most)
    number = (f"multiIf({text} = '', NULL, isNotNull(toInt64OrNull({text})), "
              f"toInt64OrNull({text}), "
              f"isFinite(toFloat64OrZero({text})) AND abs(toFloat64OrZero({text})) < 9e18, "
              f"toInt64OrNull(toString(trunc(toFloat64OrNull({text})))), NULL)")
    return f"if({number} BETWEEN {lo} AND {hi}, {number}, NULL)"


# the attribute columns that the Collector's JSON-typed schema makes JSON (Map in its default)
_ATTRIBUTE_COLUMNS = ("ResourceAttributes", "SpanAttributes", "Events.Attributes",
                      "Links.Attributes")
# levels of a JSON column's objects read back into dotted keys (agentscope.cpu.thread_ns: 3;
# deeper objects stay JSON text under their dotted prefix)
_JSON_LEVELS = 6


def _flat_attributes(value: str) -> str:
    """The SQL of a Map(String, String) of the JSON-typed attributes ``value`` as the
    exporter's Map schema holds them: ClickHouse's JSON type keeps a dotted name as nested
    objects ("agentscope.stage" comes back as {"agentscope": {"stage": ...}}), so objects
    are walked back into dotted keys; a string value is its text, any other its JSON (a number
    as its decimal text, as the Map schema writes it)."""
    def pairs(raw: str, prefix: str, depth: int) -> str:
        p = f"p{depth}"
        key = f"{p}.1" if prefix == "" else f"concat({prefix}, '.', {p}.1)"
        inner = (f"if(JSONType({p}.2) = 'Object', {pairs(f'{p}.2', key, depth + 1)}, "
                 f"[({key}, {p}.2)])" if depth + 1 < _JSON_LEVELS else f"[({key}, {p}.2)]")
        return (f"arrayFlatten(arrayMap({p} -> {inner}, "
                f"JSONExtractKeysAndValuesRaw({raw})))")

    flat = pairs(f"toJSONString({value})", "", 0)
    return (f"mapFromArrays(arrayMap(q -> q.1, {flat}), arrayMap(q -> if(JSONType(q.2) = "
            f"'String', JSONExtractString(q.2), q.2), {flat}))")


def source(con: "Connection", remote: Remote) -> str:
    """What the queries read ``remote``'s spans from: its table, or, where it has the
    Collector's JSON-typed schema (attribute columns of type JSON), the table with those
    columns as the Map schema has them (:func:`_flat_attributes`)."""
    table = remote.quoted(remote.table)
    names = ", ".join(_literal(c) for c in _ATTRIBUTE_COLUMNS)
    types = dict(line.split("\t", 1) for line in con.text(
        f"SELECT name, type FROM system.columns WHERE database = {_literal(remote.database)} "
        f"AND table = {_literal(remote.table)} AND name IN ({names})",
        "TabSeparated").splitlines() if "\t" in line)
    replaced = []
    for column in _ATTRIBUTE_COLUMNS:
        kind = types.get(column, "")
        if kind.startswith(("JSON", "Object")):
            replaced.append(f"{_flat_attributes(f'`{column}`')} AS `{column}`")
        elif kind.startswith(("Array(JSON", "Array(Object")):
            replaced.append(f"arrayMap(a -> {_flat_attributes('a')}, `{column}`) AS `{column}`")
    if not replaced:
        return table
    return f"(SELECT * REPLACE ({', '.join(replaced)}) FROM {table})"


# of the rows of a (trace, span) id, the one the store keeps (Store.load's repeats_by): the
# earliest start, then end, parent (none last) and kind, as critical_path.sql keeps
REPEATS_BY = "start_ns, end_ns, parent_span_id NULLS LAST, kind"


def spans_query(remote: Remote, table: "str | None" = None,
                part: "tuple | None" = None, flat: bool = False) -> str:
    """The SELECT that reads ``remote``'s spans as span file lines, in no particular order
    (from ``table``: the :func:`source` of the spans; default: the URL's table, in the Map
    schema; ``part``: see :func:`_window`). ``flat``: as columns for a columnar format
    instead (:func:`_flat_columns`)."""
    window, near = _window(remote, part)
    accounting = "".join(f"{_integer_attribute(attr, column)} AS {column},\n    "
                         for column, attr in semconv.ACCOUNTING_ATTRIBUTES.items())
    consumed = "[" + ", ".join(_literal(a) for a in (
        *semconv.ACCOUNTING_ATTRIBUTES.values(), semconv.STAGE)) + "]"
    lo, hi = _BOUNDS["pid"]
    pid_text = "trimBoth(ResourceAttributes['process.pid'])"
    pid = (f"if(match({pid_text}, '^[0-9]{{1,12}}$') AND toInt64({pid_text}) BETWEEN {lo} "
           f"AND {hi}, toInt64({pid_text}), NULL)")
    return _sql("spans_of_otel_traces.sql").format(
        table=table or remote.quoted(remote.table), window=window, near=near, pid=pid,
        accounting=accounting, consumed=consumed,
        columns=_flat_columns() if flat else ", ".join(SPAN_COLUMNS))


def _flat_columns() -> str:
    """The span file's fields as flat columns: attributes, events and links as their JSON
    text (integers unquoted, tuples as objects; the store minifies it as it does a span
    file's), and every text valid UTF-8, bad bytes replaced by U+FFFD (ClickHouse strings
    are bytes; a columnar reader takes no bad bytes)."""
    def flat(column: str, kind: str) -> str:
        if column in JSON_COLUMNS:
            return f"toValidUTF8(toJSONString({column})) AS {column}"
        return f"toValidUTF8({column}) AS {column}" if kind == "VARCHAR" else column
    return ", ".join(flat(column, kind) for column, kind in SPAN_COLUMNS.items())


class Read(NamedTuple):
    """A file :func:`read_into` writes: its format (``inputs.Source``), what its rows are
    (in the names of their problems), and its name in a store's ``loaded_files``: the name it
    had as JSON lines, so that a store kept with ``--db`` that read the window before
    replaces those rows rather than adding them again."""

    format: str
    rows: str
    rel: str


FILES = {"spans-clickhouse-0-1.parquet": Read("spans", "span rows",
                                              "spans-clickhouse-0-1.jsonl"),
         "samples-clickhouse-0-1.parquet": Read("samples", "sample rows",
                                                "samples-clickhouse-0-1.jsonl")}
# Parquet for a file read once, by DuckDB, right away: text as text (not bytes), LZ4, and
# none of what serves later readers (bloom filters, page indexes, checksums): at 5M spans
# 4.9 s to write and 1.5 s to load, against 5.5-6.1 s and 2.0 s with them and row groups of
# 100k rows (benchmarks/RESULTS.md). A setting the ClickHouse does not know (the last three
# are from 2025) is left out: a server refuses a query that names one.
_PARQUET = {"output_format_parquet_string_as_string": "1",
            "output_format_parquet_compression_method": "'lz4'",
            "output_format_parquet_write_bloom_filter": "0",
            "output_format_parquet_write_page_index": "0",
            "output_format_parquet_write_checksums": "0"}


def _parquet_settings(con: "Connection") -> str:
    """The settings of :data:`_PARQUET` that ``con``'s ClickHouse knows."""
    names = ", ".join(_literal(name) for name in _PARQUET)
    known = set(con.text(f"SELECT name FROM system.settings WHERE name IN ({names})",
                         "TabSeparated").split())
    return ", ".join(f"{name} = {value}" for name, value in _PARQUET.items() if name in known)


def read_into(remote: Remote, directory: Path, spans: str = "all",
              samples: bool = True) -> tuple:
    """Write ``remote``'s spans (whole traces in its window) and the samples over their time
    into ``directory`` as Parquet files of the span and sample files' fields (:data:`FILES`;
    ``Source.parquet``), for the store to load (with ``repeats_by=`` :data:`REPEATS_BY`):
    (spans, samples written). chdb writes them itself, in its own process
    (:class:`_Apart`: its engine's memory is given back before the analysis). Parquet rather
    than JSON lines: at 1M spans the store loads it in 0.4 s instead of 1.4 s
    (benchmarks/RESULTS.md). Without ``samples``, the spans alone. ``spans="refused"``: of
    the spans only the rows the store would refuse (for their problems: the analysis runs
    over :func:`analysis_inputs`, which has the others)."""
    with _reading(remote) as (con, table):
        directory.mkdir(parents=True, exist_ok=True)
        span_file, sample_file = FILES
        settings = _parquet_settings(con)
        query = spans_query(remote, table, flat=True) if spans != "refused" else \
            f"SELECT {_flat_columns()} FROM ({_valid_spans(remote, table, None, '*', True)})"
        con.to_file(query, "Parquet", directory / span_file, settings)
        n_spans = _rows(directory / span_file, remote)
        n_samples = 0
        if samples and (n_spans or spans == "refused") and _has_rows(con, remote,
                                                                    remote.samples):
            con.to_file(_samples_query(remote, _bounds(con, remote, table)), "Parquet",
                        directory / sample_file, settings)
            n_samples = _rows(directory / sample_file, remote)
        return n_spans, n_samples


@contextlib.contextmanager
def _reading(remote: Remote, columns: bool = True) -> Iterator[tuple]:
    """(a connection to ``remote``, what its spans are read from: :func:`source`, which
    looks up the table's columns; without ``columns``, the table as it is), once its chdb
    directory and its spans table are known to exist; closed after."""
    if remote.scheme == "chdb" and not Path(remote.path).is_dir():
        raise StoreError(f"{remote.display}: no such chdb data directory")
    con = Connection(remote)
    try:
        if not _exists(con, remote, remote.table):
            raise StoreError(f"{remote.display}: no table {remote.database}.{remote.table} "
                             "(the Collector's ClickHouse exporter makes otel_traces; "
                             "`agentscope export clickhouse` makes one from trace files)")
        yield con, source(con, remote) if columns else remote.quoted(remote.table)
    finally:
        con.close()


def window_state(remote: Remote) -> tuple:
    """What changes when ``remote``'s window gains or loses rows: the count and the latest
    timestamp of the spans (and of the samples, where there is a samples table) within a day
    of it (its ``near``: what a read of it scans), by an aggregate query each. When this has
    not changed, a new read of the window would find nothing new. A window given as a
    duration moves with the clock: its state is the time, without a query."""
    if remote.moving:
        return (time.monotonic_ns(),)
    _, near = _window(remote)
    state: list = []
    with _reading(remote, columns=False) as (con, _):  # (counts: no column is read)
        for table in (remote.table, remote.samples):
            if table != remote.table and not _exists(con, remote, table):
                continue
            state.append(tuple(con.text(
                f"SELECT count(), max(toUnixTimestamp64Nano(Timestamp)) FROM "
                f"{remote.quoted(table)} WHERE {near}", "TabSeparated").split()))
    return tuple(state)


def _parts(con: Connection, remote: Remote, part_spans: int) -> int:
    """In how many parts (traces split by the hash of their id) ``remote``'s window is read
    for each to hold about ``part_spans`` spans: by the count of the spans in the window."""
    rows = int(con.text(f"SELECT count() FROM {remote.quoted(remote.table)} "
                        f"WHERE {_window(remote)[0]}", "TabSeparated").strip() or 0)
    return _part_count(rows, part_spans)


def _part_count(rows: int, part_spans: int) -> int:
    """The parts that hold ``rows`` rows at about ``part_spans`` each (at least one)."""
    return max(1, -(-rows // max(int(part_spans), 1)))


def _rows(path: Path, remote: Remote) -> int:
    """The rows of the Parquet file ``path`` that ``remote`` wrote (from its footer; an
    empty file: none). A file that is not Parquet (a server's answer cut short) is a
    StoreError naming ``remote``."""
    if not path.stat().st_size:
        return 0
    import duckdb

    try:
        with duckdb.connect() as con:
            return int(con.execute("SELECT coalesce(sum(num_rows), 0) FROM "
                                   "parquet_file_metadata(?)", [str(path)]).fetchone()[0])
    except duckdb.Error as e:
        raise StoreError(f"{remote.display}: what it sent is not a whole Parquet file "
                         f"({_short(str(e), 200)})") from None


def _exists(con: Connection, remote: Remote, table: str) -> bool:
    got = con.text(f"SELECT count() FROM system.tables WHERE database = "
                   f"{_literal(remote.database)} AND name = {_literal(table)}", "TabSeparated")
    return got.strip() not in ("", "0")


def _has_rows(con: Connection, remote: Remote, table: str) -> bool:
    """Whether ``table`` exists and holds a row (a row read, not counted: the time of the
    spans, which the samples' read is bounded by, is then not asked for: at 5M spans 0.3 s)."""
    return _exists(con, remote, table) and bool(con.text(
        f"SELECT 1 FROM {remote.quoted(table)} LIMIT 1", "TabSeparated").strip())


# ---- the critical path, in ClickHouse --------------------------------------------------
def path_query(remote: Remote, table: "str | None" = None,
               part: "tuple | None" = None) -> str:
    """The SELECT of every trace's critical path in ``remote``'s window (one row per trace:
    ``critical_path.sql``), over the spans :func:`spans_query` reads from ``table``. It
    groups by trace only, so on a table sharded by trace id it can run on each shard apart
    (docs/clickhouse.md)."""
    spans = _valid_spans(remote, table, part,
                         "trace_id, span_id, parent_span_id, kind, start_ns, end_ns, host, pid")
    return _sql("critical_path.sql").format(spans=f"({spans})")


def _valid_spans(remote: Remote, table: "str | None", part: "tuple | None",
                 columns: str, refused: bool = False) -> str:
    """The SELECT of ``columns`` of the rows of :func:`spans_query` that the store would
    load (path_spans.sql); ``refused``: of those it would refuse instead."""
    return _sql("path_spans.sql").format(columns=columns, spans=spans_query(remote, table, part),
                                         refused="NOT" if refused else "",
                                         min_epoch_ns=MIN_EPOCH_NS, max_epoch_ns=MAX_EPOCH_NS)


class TracePath(NamedTuple):
    """A trace's critical path as ClickHouse walked it: the fields (and values) of
    :class:`agentscope.analyzers.critical_path.CriticalPath`."""

    sections: tuple  # of (span_id or None for a gap, start ns, end ns): ascending, merged
    start: int
    end: int
    roots: tuple  # ids of the root spans walked
    off_path: int  # spans left off: outside their parent, not blocking, unreachable
    duplicates: int  # rows of a span id already seen
    # with critical_paths(..., counters=COUNTER_JOIN): {metric: the mean over each section,
    # None where none} as analyzers.counters.section_means gives it (section_counters.sql)
    counters: Any = None


# spans walked in one query: the query holds each trace's arrays (a few hundred bytes a span)
# at once; a larger window is walked in parts, traces split by the hash of their id
PART_SPANS = 2_000_000


def critical_paths(remote: "Remote | str", part_spans: int = PART_SPANS,
                   counters: Any = ()) -> dict:
    """Every trace's critical path in ``remote`` (a URL, or its :class:`Remote`), walked in
    ClickHouse: {trace_id: :class:`TracePath`}, what
    :func:`agentscope.analyzers.critical_path.critical_path` gives of the trace as the store
    holds it (orphans adopted, each span id once, rows the store refuses left out). A trace
    without a root (a parent cycle alone) has no section. Only these per-trace rows travel
    back, through a file. A window of more than ``part_spans`` spans is walked in parts
    (traces split by the hash of their id: each part is what a shard would walk).

    ``counters``: the rules of the counter join
    (:data:`agentscope.analyzers.counters.COUNTER_JOIN`), to join the counters' means over
    each section in ClickHouse too (:func:`counters_query`): each path's ``counters``,
    {metric: a mean per section, None where none}, is what
    :func:`agentscope.analyzers.counters.section_means` gives of the same sections on their
    spans' hosts and processes (decided per part where the window is walked in parts, as
    the embedded analysis decides per batch: section_counters.sql). Only the sections'
    means travel back, not the samples."""
    if isinstance(remote, str):
        remote = parse(remote)
    paths: dict = {}
    with _reading(remote) as (con, table):
        parts = _parts(con, remote, part_spans)
        bounds = _bounds(con, remote, table) if counters and _exists(
            con, remote, remote.samples) else None
        with tempfile.TemporaryDirectory(prefix="agentscope-paths-") as tmp:
            for k in range(parts):
                part = (k, parts) if parts > 1 else None
                out = Path(tmp) / f"paths-{k}.jsonl"
                query = counters_query(remote, counters, table, part, bounds) \
                    if bounds is not None else \
                    f"SELECT * EXCEPT (section_owners) FROM ({path_query(remote, table, part)})"
                con.to_file(query, "JSONEachRow", out, _OUTPUT)
                with open(out, encoding="utf-8") as f:
                    for line in f:
                        row = json.loads(line)
                        sections = tuple((s, int(a), int(b)) for s, a, b in row["sections"])
                        paths[row["trace_id"]] = TracePath(
                            sections, int(row["path_start"]), int(row["path_end"]),
                            tuple(row["root_ids"]), int(row["off_path"]),
                            int(row["duplicates"]),
                            _per_section(row.get("counters", ()), len(sections))
                            if counters else None)
    return paths


def _bounds(con: Connection, remote: Remote, table: str) -> tuple:
    """The first start and the last end of the spans of ``remote``'s window: the time over
    which their samples are read (samples_of_agentscope_samples.sql)."""
    window, near = _window(remote)
    got = con.text(_sql("bounds_of_otel_traces.sql").format(table=table, window=window,
                                                             near=near), "TabSeparated")
    first, last = (int(x) for x in got.split())
    return (first, last)


def _samples_query(remote: Remote, bounds: tuple) -> str:
    """The SELECT of ``remote``'s samples over ``bounds`` (:func:`_bounds`) as the fields of
    a sample file (samples_of_agentscope_samples.sql)."""
    first, last = bounds
    return _sql("samples_of_agentscope_samples.sql").format(
        table=remote.quoted(remote.samples), since_ns=first, until_ns=last)


class CounterJoin(NamedTuple):
    """What the counter join needs of the analysis' rules, given as a mapping of these
    fields (``agentscope.analyzers.counters.COUNTER_JOIN``): the metrics joined, those
    joined per process, how long a sample holds its value back at most, the GPU utilization
    metric, and the names of the two marks section_means adds."""

    metrics: tuple
    per_process: tuple
    max_hold_ns: int
    gpu_util: str
    gpu_of_process: str
    no_gpu: str


def counters_query(remote: Remote, counters: Any, table: "str | None", part: "tuple | None",
                   bounds: tuple) -> str:
    """The SELECT of every trace's critical path in ``remote``'s window (:func:`path_query`'s
    columns) with the means of the counters over each of its sections (section_counters.sql:
    ``counters``, per metric its name, section numbers from 1 and means), by the rules
    ``counters`` gives (a mapping of :class:`CounterJoin`'s fields), from the samples table
    over ``bounds`` (:func:`_bounds`, as the window's read takes them; ``table``, ``part``:
    as :func:`path_query`'s)."""
    from ..metric_names import (AGENTSCOPE_COLLECTOR_UP, PROCESS_GPU_MEMORY_USAGE,
                                SOURCE_GPU_NVIDIA)

    join = CounterJoin(**counters)

    def array(names: Any) -> str:
        return "[" + ", ".join(_literal(x) for x in names) + "]::Array(String)"

    return _sql("section_counters.sql").format(
        paths=path_query(remote, table, part), samples=_samples_query(remote, bounds),
        metrics=array(join.metrics), per_process=array(join.per_process),
        max_hold=int(join.max_hold_ns), gpu_util=_literal(join.gpu_util),
        gpu_memory=_literal(PROCESS_GPU_MEMORY_USAGE),
        gpu_of_process=_literal(join.gpu_of_process), no_gpu=_literal(join.no_gpu),
        up=_literal(AGENTSCOPE_COLLECTOR_UP), gpu_source=_literal(SOURCE_GPU_NVIDIA))


def _per_section(means: Any, n: int) -> dict:
    """{metric: a tuple of ``n`` means (None where none)} from (metric, section numbers from
    1, their means) triples."""
    out: dict = {}
    for metric, secs, values in means:
        got = [None] * n
        for sec, mean in zip(secs, values):
            got[sec - 1] = None if mean is None else float(mean)
        out[metric] = tuple(got)
    return out


# ---- writing (agentscope export clickhouse) -----------------------------------------------
_SPAN_INPUT = ("ts Int64, dur Int64, trace String, span String, parent String, name String, "
               "kind String, service String, resource Map(String, String), scope String, "
               "attrs Map(String, String), status String, message String, "
               "event_ts Array(Int64), event_name Array(String), "
               "event_attrs Array(Map(String, String)), link_trace Array(String), "
               "link_span Array(String), link_attrs Array(Map(String, String))")
_SPAN_INSERT = (
    "INSERT INTO {table} (Timestamp, TraceId, SpanId, ParentSpanId, TraceState, SpanName, "
    "SpanKind, ServiceName, ResourceAttributes, ScopeName, ScopeVersion, SpanAttributes, "
    "Duration, StatusCode, StatusMessage, `Events.Timestamp`, `Events.Name`, "
    "`Events.Attributes`, `Links.TraceId`, `Links.SpanId`, `Links.TraceState`, "
    "`Links.Attributes`) SELECT fromUnixTimestamp64Nano(ts), trace, span, parent, '', name, "
    "kind, service, resource, scope, '', attrs, toUInt64(dur), status, message, "
    "arrayMap(t -> fromUnixTimestamp64Nano(t), event_ts), event_name, event_attrs, "
    "link_trace, link_span, arrayMap(x -> '', link_trace), link_attrs "
    "FROM {source}")
_SAMPLE_INPUT = ("ts Int64, host String, pid Nullable(Int32), source String, "
                 "device Nullable(String), metric String, value Float64")
_SAMPLE_INSERT = ("INSERT INTO {table} SELECT fromUnixTimestamp64Nano(ts), host, pid, source, "
                  "device, metric, value FROM {source}")
# (the exporter's names for kinds and status codes: pdata's SpanKind and StatusCode)
_KIND = {"internal": "Internal", "server": "Server", "client": "Client",
         "producer": "Producer", "consumer": "Consumer"}
_STATUS = {"unset": "Unset", "ok": "Ok", "error": "Error"}


def _text(value: Any) -> str:
    """An attribute value as the exporter writes it: strings as they are, others as JSON."""
    if isinstance(value, str):
        return value
    if type(value) is int:  # (the most common after strings; bool is not one)
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def _attrs(value: Any) -> dict:
    return {str(k): _text(v) for k, v in (value or {}).items()}


def _loads(text: str) -> Any:
    """The JSON ``text`` (a stored span's attributes, events or links): orjson's parse, or
    json's where orjson would read it otherwise (an integer past 64 bits, which orjson
    makes a float) or refuses it (a lone surrogate's escape, NaN): the same values."""
    if _LONG_DIGITS.search(text):
        return json.loads(text)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


_LONG_DIGITS = re.compile(r"[0-9]{20}")  # (int64 has 19 digits: maybe a longer integer)


def _dumps(value: Any) -> str:
    """A line of :data:`_SPAN_INPUT` as compact JSON: orjson's, or json's where orjson
    refuses the value (a lone surrogate in a string; an integer past 64 bits). ClickHouse
    reads both the same (orjson writes other characters as UTF-8, json as escapes)."""
    try:
        return orjson.dumps(value).decode()
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value, separators=(",", ":"))


def span_line(row: dict) -> str:
    """One span of the store (a ``spans`` row, attrs/events/links as JSON text) as a line of
    :data:`_SPAN_INPUT`: the OTLP a Collector would have written of it."""
    attrs = _attrs(_loads(row["attrs"]) if row["attrs"] else {})
    scope = attrs.pop("otel.scope.name", "")
    for column, attr in semconv.ACCOUNTING_ATTRIBUTES.items():
        if row[column] is not None:
            attrs[attr] = str(int(row[column]))
    if row["stage"] is not None:
        attrs[semconv.STAGE] = row["stage"]
    resource = {}
    if row["service"] is not None:
        resource["service.name"] = row["service"]
    if row["host"] is not None:
        resource["host.name"] = row["host"]
    if row["pid"] is not None:
        resource["process.pid"] = str(int(row["pid"]))
    events = _loads(row["events"]) if row["events"] else []
    links = _loads(row["links"]) if row["links"] else []
    return _dumps({
        "ts": row["start_ns"], "dur": row["end_ns"] - row["start_ns"], "trace": row["trace_id"],
        "span": row["span_id"], "parent": row["parent_span_id"] or "", "name": row["name"],
        "kind": _KIND.get(row["kind"], "Internal"), "service": row["service"] or "",
        "resource": resource, "scope": scope, "attrs": attrs,
        "status": _STATUS.get(row["status"], "Unset"), "message": row["status_message"] or "",
        "event_ts": [e["time_ns"] for e in events], "event_name": [e["name"] for e in events],
        "event_attrs": [_attrs(e.get("attrs")) for e in events],
        "link_trace": [k["trace_id"] for k in links], "link_span": [k["span_id"] for k in links],
        "link_attrs": [_attrs(k.get("attrs")) for k in links]})


def sample_line(row: dict) -> str:
    return json.dumps({"ts": row["ts_ns"], "host": row["host"] or "", "pid": row["pid"],
                       "source": row["source"] or "", "device": row["device"],
                       "metric": row["metric"], "value": row["value"]}, separators=(",", ":"))


def write(remote: Remote, spans: Any, samples: Any) -> None:
    """Create ``remote``'s tables where missing (the Collector's ``otel_traces`` DDL, our
    samples DDL) and insert ``spans`` and ``samples`` (iterables of lines: :func:`span_line`,
    :func:`sample_line`), appending to what the tables hold. chdb reads the rows from files,
    a chunk of :data:`_FILE_BYTES` at a time; a server gets them in the INSERT's text, a chunk
    of :data:`_INSERT_BYTES` (its max_query_size)."""
    con = Connection(remote)
    try:
        if remote.scheme == "chdb":
            con.command(f"CREATE DATABASE IF NOT EXISTS `{remote.database}`")
        con.command(_sql("otel_traces.sql").format(table=remote.quoted(remote.table)))
        con.command(_sql("agentscope_samples.sql").format(table=remote.quoted(remote.samples)))
        with tempfile.TemporaryDirectory(prefix="agentscope-export-") as tmp:
            chunk_file = Path(tmp) / "rows.jsonl"
            most = _FILE_BYTES if remote.scheme == "chdb" else _INSERT_BYTES

            def insert(statement: str, structure: str, table: str, lines: list) -> None:
                data = "\n".join(lines) + "\n"
                if remote.scheme == "chdb":
                    chunk_file.write_text(data)
                    source = (f"file({_literal(str(chunk_file))}, JSONEachRow, "
                              f"{_literal(structure)})")
                else:
                    source = f"format(JSONEachRow, {_literal(structure)}, {_literal(data)})"
                con.command(statement.format(table=remote.quoted(table), source=source))

            for lines, statement, structure, table in (
                    (spans, _SPAN_INSERT, _SPAN_INPUT, remote.table),
                    (samples, _SAMPLE_INSERT, _SAMPLE_INPUT, remote.samples)):
                chunk: list = []
                size = 0
                for line in lines:
                    chunk.append(line)
                    size += len(line) + 1
                    if size >= most:
                        insert(statement, structure, table, chunk)
                        chunk, size = [], 0
                if chunk:
                    insert(statement, structure, table, chunk)
    finally:
        con.close()


# ---- the analysis' input, in ClickHouse ------------------------------------------------
def input_statements(remote: Remote, table: "str | None" = None) -> tuple:
    """The statements that compute what the analyzers read of every span of ``remote``'s
    window: the rows and columns of the embedded store's analysis_input.sql, the host as
    text (store/sql/clickhouse/analysis_input.sql). (the statement that reads the window's
    rows into :data:`WINDOW_TABLE`, run once; a function of (lo, hi): the statements of the
    part of the traces whose id hashes into lo .. hi, each but the last making one of
    :data:`TEMPORARY_TABLES` in the session, the last the SELECT of its rows). Run them with
    :data:`INPUT_SETTINGS`."""
    from ..semconv import stage_sql

    spans = _valid_spans(remote, table, None, "*")
    coupling = "[" + ", ".join(_literal(n) for n in semconv.COUPLING_ATTRIBUTES) + "]"
    # (split before the spans go in: a service name in the window may hold the separator)
    window, *steps = [s for s in stage_sql(_sql("analysis_input.sql")).split(";\n\n")
                      if s.strip()]
    window = window.replace("{coupling}", coupling).replace("{spans}", f"({spans})")
    return window, lambda lo, hi: [s.replace("{lo}", str(int(lo))).replace("{hi}", str(int(hi)))
                                   for s in steps]


def hash_ranges(parts: int) -> list:
    """The hashes of trace ids (UInt64) in ``parts`` equal ranges: [(lo, hi)], inclusive."""
    parts = max(int(parts), 1)
    bounds = [k * 2 ** 64 // parts for k in range(parts)] + [2 ** 64]
    return [(lo, hi - 1) for lo, hi in zip(bounds, bounds[1:])]


# the session's temporary table of the window's rows (input_statements' first statement), and
# those each part's statements make
WINDOW_TABLE = "agentscope_window"
TEMPORARY_TABLES = ("agentscope_staged", "agentscope_repeated", "agentscope_base",
                    "agentscope_found", "agentscope_linked")
# a LEFT JOIN's missing row as NULLs (ClickHouse's default is each type's zero)
INPUT_SETTINGS = "join_use_nulls = 1"
# the window's rows written in blocks of at most 64 MB (the default squashes 256 MB before it
# writes; measured at 1M spans: 1.18 GB for chdb's process against 1.38-1.49 GB, no slower)
WINDOW_SETTINGS = "min_insert_block_size_bytes = 67108864"


def _drop(con: Connection, tables: tuple) -> None:
    """The session's temporary ``tables`` dropped (those that exist)."""
    for name in tables:
        con.command(f"DROP TEMPORARY TABLE IF EXISTS {name}")


@contextlib.contextmanager
def _dropped(con: Connection, tables: tuple) -> Iterator[None]:
    """The session's temporary ``tables`` dropped on the way out, however it is left."""
    try:
        yield
    finally:
        _drop(con, tables)


def analysis_inputs(remote: "Remote | str", with_counters: bool = False,
                    part_spans: int = PART_SPANS, parts: "int | None" = None,
                    counts: "dict | None" = None) -> Iterator[Any]:
    """What the analyzers read of every span of ``remote``'s window, computed in ClickHouse:
    one :class:`~agentscope.store.schema.AnalysisInput` (with the host of each span where
    ``with_counters``) per part of about ``part_spans`` spans (traces split by ranges of the
    hash of their id; ``parts``: that many instead), its rows and trace numbers from 0 as
    those of a batch of the embedded store's. Where the analysis of a trace reads other
    traces' spans (``semconv.COUPLING_ATTRIBUTES``), one part whatever these say. The
    window's rows are read once (into a temporary table of the session), each part from
    there. Only the input's columns travel, through a Parquet file per part. ``counts`` (a
    dict), when given, gets ``rows``: the rows the store would have loaded (a span id on
    several rows counted each time), ``spans``: the spans, and ``parts``: the parts."""
    import duckdb

    from .schema import input_of_columns

    if isinstance(remote, str):
        remote = parse(remote)
    with _reading(remote) as (con, table):
        settings = ", ".join(x for x in (INPUT_SETTINGS, _parquet_settings(con)) if x)
        window, statements = input_statements(remote, table)
        with tempfile.TemporaryDirectory(prefix="agentscope-input-") as tmp, \
                _dropped(con, (WINDOW_TABLE,)):
            con.text(window, "", f"{INPUT_SETTINGS}, {WINDOW_SETTINGS}")
            rows, coupled = (int(x or 0) for x in (con.text(
                f"SELECT count(), countIf(coupled) FROM {WINDOW_TABLE}",
                "TabSeparated").split() + ["0", "0"])[:2])
            if coupled:
                parts = 1
            elif parts is None:
                parts = _part_count(rows, part_spans)
            if counts is not None:
                counts.update(rows=rows, parts=parts)
            for k, (lo, hi) in enumerate(hash_ranges(parts)):
                out = Path(tmp) / f"input-{k}.parquet"
                *steps, select = statements(lo, hi)
                try:
                    for step in steps:
                        con.text(step, "", INPUT_SETTINGS)
                    con.to_file(select, "Parquet", out, settings)
                finally:
                    _drop(con, TEMPORARY_TABLES)
                if not out.stat().st_size:
                    continue
                with duckdb.connect() as db:
                    arrays = db.execute("SELECT * FROM read_parquet(?)",
                                        [str(out)]).fetchnumpy()
                out.unlink()
                if counts is not None:
                    counts["spans"] = counts.get("spans", 0) + len(arrays["idx"])
                if not len(arrays["idx"]):  # (no span in this part)
                    continue
                if not with_counters:
                    del arrays["host"]
                inp = input_of_columns(arrays)
                del arrays  # (held while the engine ran: every column twice)
                yield inp
                del inp
