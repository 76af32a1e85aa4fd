"""ClickHouse as a source (store/clickhouse.py) on chdb, in-process ClickHouse: spans written
the way the OpenTelemetry Collector's ClickHouse exporter writes them (its otel_traces schema)
are analysed as the same spans from files are; `agentscope export clickhouse` and
`agentscope analyze chdb://...` round-trip a trace directory to the same analysis."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import agentscope
from agentscope.errors import StoreError
from agentscope.exporters import clickhouse as clickhouse_out
from agentscope.store import clickhouse

from .test_batches import _messy_traces

REPO = Path(__file__).resolve().parents[1]
T0_NS = 1_800_000_000_000_000_000


def _same_analysis(a, b):
    """Every result of two analyses equal, but what the loads said (files differ)."""
    da, db = a.to_dict(), b.to_dict()
    da["summary"].pop("load"), db["summary"].pop("load")
    assert da == db
    for frame in ("tasks", "critical_path"):
        x = getattr(a, frame).sort_values(list(getattr(a, frame).columns[:2])).reset_index(
            drop=True)
        y = getattr(b, frame).sort_values(list(getattr(b, frame).columns[:2])).reset_index(
            drop=True)
        assert x.equals(y), frame
    spans = "SELECT * EXCLUDE (file_id) FROM spans ORDER BY trace_id, span_id"
    x, y = a.query(spans), b.query(spans)
    assert x.drop(columns="attrs").equals(y.drop(columns="attrs"))
    # the exporter's attributes are text: a number or a list arrives as its JSON
    assert [_as_text(t) for t in x["attrs"]] == [_as_text(t) for t in y["attrs"]]


def _as_text(attrs: str) -> dict:
    return {k: v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
            for k, v in json.loads(attrs).items()}


def _round_trip(directory: Path, tmp_path: Path):
    url = f"chdb://{tmp_path / 'ch'}?table=otel_traces"
    direct = agentscope.analyze(directory, db=":memory:")
    written = clickhouse_out.export(direct, url)
    assert written.spans == direct.summary.spans or written.spans >= direct.summary.spans
    back = agentscope.analyze(url)
    assert back.source == url and "ch" in back.source
    return direct, back, written


def test_sample_traces_round_trip_to_the_same_analysis(tmp_path):
    direct, back, written = _round_trip(REPO / "sample_traces", tmp_path)
    assert written.samples > 1000 and back.load.samples_added == written.samples
    assert len(direct.task_results) == 50
    # the verdicts rest on the counters and the accounting, which travelled as the
    # exporter's string attributes and the samples table
    assert direct.summary.measured_share > 0.5
    _same_analysis(direct, back)


def test_of_a_repeated_id_the_row_critical_path_sql_keeps_is_kept(tmp_path):
    """ClickHouse gives rows in no particular order: of the rows of one (trace, span) id, the
    store keeps the earliest start, then end, then a parent (none last), then the kind, as
    critical_path.sql does; whatever order they were written in."""
    for k, order in enumerate(([0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1])):
        rows = [(2000, "", "Server"), (1000, "", "Server"),
                (1000, "a" * 16, "Internal"), (1000, "a" * 16, "Consumer")]
        ch = tmp_path / f"ch{k}"
        ch.mkdir()
        con = clickhouse._Apart(clickhouse.parse(f"chdb://{ch}"))
        con.query(clickhouse._sql("otel_traces.sql").format(table="`default`.`otel_traces`"))
        for i in order:  # (one insert each: parts that a read may give in any order)
            start, parent, kind = rows[i]
            con.query(f"INSERT INTO otel_traces (Timestamp, TraceId, SpanId, ParentSpanId, "
                      f"SpanName, SpanKind, ServiceName, Duration, StatusCode) VALUES "
                      f"(fromUnixTimestamp64Nano(toInt64({T0_NS + start})), "
                      f"'0af7651916cd43dd8448eb211c80319c', 'b7ad6b7169203331', '{parent}', "
                      f"'op', '{kind}', 'svc', 5000, 'Ok')")
        con.close()
        a = agentscope.analyze(f"chdb://{ch}")
        assert a.load.duplicates == 3
        got = a.query("SELECT start_ns, parent_span_id, kind FROM spans")
        assert got.values.tolist() == [[T0_NS + 1000, "a" * 16, "consumer"]]


def test_a_large_window_is_kept_in_a_temporary_store(tmp_path, monkeypatch):
    """A window of more spans than FILE_STORE_SPANS is held in a temporary DuckDB file rather
    than in memory: the same analysis and SQL; the file is removed at close(), or when the
    last analysis that reads it is let go."""
    import gc

    from agentscope.analysis import core

    url = f"chdb://{tmp_path / 'ch'}?table=otel_traces"
    clickhouse_out.export(agentscope.analyze(REPO / "sample_traces", db=":memory:"), url)
    in_memory = agentscope.analyze(url)
    assert in_memory._store.temporary is None and in_memory._store.path is None
    monkeypatch.setattr(core, "FILE_STORE_SPANS", 10)
    a = agentscope.analyze(url)
    where = Path(a._store.temporary.name)
    assert a._store.path == where / "store.duckdb" and a._store.path.exists()
    _same_analysis(in_memory, a)
    assert len(a.query("SELECT * FROM spans")) == a.summary.spans
    a.close()
    assert not where.exists()
    with pytest.raises(ValueError, match="store was closed"):
        a.query("SELECT 1")
    b = core.open_store(url)  # (what `agentscope query` reads)
    where = Path(b._store.temporary.name)
    assert b.query("SELECT count(*) AS n FROM spans")["n"][0] == in_memory.summary.spans
    del b
    gc.collect()
    assert not where.exists()
    in_memory.close()


def test_messy_traces_round_trip(tmp_path):
    """Orphans, gaps between roots, children outside their parent, zero-length spans, errors,
    spans without accounting, 10 Hz host counters."""
    traces = tmp_path / "traces"
    _messy_traces(traces, 3)
    direct, back, _ = _round_trip(traces, tmp_path)
    assert any(t.orphans for t in direct.task_results)
    _same_analysis(direct, back)


def test_the_export_reads_every_span_once_in_one_statement(tmp_path, monkeypatch):
    """`export clickhouse` reads the spans and samples tables in one statement each, a page
    at a time (Analysis.table_rows), not a sorted page per statement (which read the whole
    table again for each page: 24 minutes at 20M spans); every span once, in a store in a
    file too."""
    from agentscope.analysis.core import Analysis
    from agentscope.exporters.otlp_traces import SPAN_COLUMNS

    traces = tmp_path / "traces"
    _messy_traces(traces, 6)
    analysis = agentscope.analyze(traces, db=tmp_path / "store.duckdb")
    every = analysis.query("SELECT trace_id, span_id, attrs FROM spans ORDER BY ALL")
    rows = list(analysis.table_rows("spans", SPAN_COLUMNS, page=7))
    assert len(rows) == len(every) > 7 and list(rows[0]) == list(SPAN_COLUMNS)
    assert sorted((r["trace_id"], r["span_id"], r["attrs"]) for r in rows) == \
        list(every.itertuples(index=False, name=None))
    statements = []
    real = Analysis.query_rows

    def counted(self, statement):
        statements.append(statement)
        return real(self, statement)

    monkeypatch.setattr(Analysis, "query_rows", counted)
    monkeypatch.setattr(clickhouse_out, "PAGE", 7)
    written = clickhouse_out.export(analysis, f"chdb://{tmp_path / 'ch'}?table=otel_traces")
    assert written.spans == len(every)
    assert not [s for s in statements if "FROM spans" in s or "FROM samples" in s], statements
    monkeypatch.undo()
    _same_analysis(analysis, agentscope.analyze(f"chdb://{tmp_path / 'ch'}?table=otel_traces"))


def test_export_writes_each_attribute_as_its_text(tmp_path):
    """Every attribute is written as text, a string as it is and any other value as its
    compact JSON (non-ASCII escaped): integers past 64 bits, exponents, lists, nested
    objects, booleans, lone surrogates (stored as escapes), in spans and in events alike."""
    from agentscope.formats import spanfile
    from agentscope.records import SpanEvent, SpanRecord

    t0 = 1_800_000_000_000_000_000
    attrs = {"big": 2**70, "f": 1e-7, "fl": 1e20, "s": "é\ud800x", "l": ["é", 1.5, None],
             "b": True, "nested": {"k": {"j": [1, {"z": "\u202e"}]}}, "n": -5}
    record = SpanRecord("c0ffee00c0ffee00c0ffee00c0ffee00", "1" * 16, None, "run", "task",
                        "internal", t0, t0 + 10**9, "unset", None, "svc", "h", 7, None, None,
                        None, None, None, None, None, None, None, attrs,
                        (SpanEvent("ev", t0 + 5, {"n": 2**65, "s": "é"}),))
    traces = tmp_path / "traces"
    traces.mkdir()
    with open(traces / "spans-h-1-1.jsonl", "w", encoding="utf-8",
              errors="surrogatepass") as f:
        f.write(spanfile.encode(record))
    url = f"chdb://{tmp_path / 'ch'}?table=otel_traces"
    clickhouse_out.export(agentscope.analyze(traces, db=":memory:"), url)
    con = clickhouse._Apart(clickhouse.parse(f"chdb://{tmp_path / 'ch'}"))
    try:
        row = json.loads(con.query("SELECT SpanAttributes, `Events.Attributes` AS e FROM "
                                   "otel_traces FORMAT JSONEachRow"))
    finally:
        con.close()
    got = {k: v for k, v in row["SpanAttributes"].items() if k in attrs}
    assert got == {"big": "1180591620717411303424", "f": "1e-07", "fl": "1e+20",
                   "s": "é\ufffdx", "l": '["\\u00e9",1.5,null]', "b": "true",
                   "nested": '{"k":{"j":[1,{"z":"\\u202e"}]}}', "n": "-5"}
    assert row["e"] == [{"n": "36893488147419103232", "s": "é"}]


def test_the_window_is_stored_as_the_same_rows_in_a_span_file_would_be(tmp_path):
    """What travels from ClickHouse is stored as the same span written in a span file would
    be, text for text: attributes, events and links minified as the store keeps JSON (a
    "/" is not "\\/", as ClickHouse writes it), U+2028 kept; a sample value that is not
    finite is none, as JSON has it, and -0 is 0."""
    from agentscope.store.duckdb_store import Store

    attrs = {"url": "http://x/y", "k/1": "a\u2028b", "q": "\"\\", "n": "1"}
    events = [{"name": "got /x", "time_ns": 1_800_000_000_000_000_005,
               "attrs": {"path": "/a/b"}}]
    line = {"trace_id": "0af7651916cd43dd8448eb211c80319c", "span_id": "b7ad6b7169203331",
            "parent_span_id": None, "name": "a/b", "stage": "task", "kind": "server",
            "start_ns": 1_800_000_000_000_000_000, "end_ns": 1_800_000_001_000_000_000,
            "status": "ok", "status_message": None, "service": "svc", "host": "h",
            "pid": 7, "attrs": attrs, "events": events, "links": []}
    samples = [(0, 0.5), (1, float("nan")), (2, float("inf")), (3, -0.0)]
    lines = tmp_path / "lines"
    lines.mkdir()
    (lines / "spans-a-1-1.jsonl").write_text(json.dumps(line) + "\n")
    (lines / "samples-a-1-1.jsonl").write_text("".join(
        json.dumps({"ts_ns": 1_800_000_000_000_000_000 + i * 10**8, "host": "h", "pid": 7,
                    "source": "host", "device": None, "metric": "cpu.util",
                    "value": None if v != v or abs(v) == float("inf") else abs(v)}) + "\n"
        for i, v in samples))
    want = Store(":memory:")
    want.load(lines)

    con = clickhouse._Apart(clickhouse.parse(f"chdb://{tmp_path / 'ch'}"))
    con.query(clickhouse._sql("otel_traces.sql").format(table="`default`.`otel_traces`"))
    con.query(clickhouse._sql("agentscope_samples.sql").format(
        table="`default`.`agentscope_samples`"))
    con.query("INSERT INTO otel_traces (Timestamp, TraceId, SpanId, ParentSpanId, SpanName, "
              "SpanKind, ServiceName, ResourceAttributes, SpanAttributes, Duration, "
              "StatusCode, `Events.Timestamp`, `Events.Name`, `Events.Attributes`) VALUES "
              "(fromUnixTimestamp64Nano(toInt64(1800000000000000000)), "
              f"'{line['trace_id']}', '{line['span_id']}', '', 'a/b', 'Server', 'svc', "
              "map('host.name', 'h', 'process.pid', '7'), "
              "map('agentscope.stage', 'task', 'url', 'http://x/y', 'k/1', "
              "concat('a', unhex('E280A8'), 'b'), 'q', '\"\\\\', 'n', '1'), 1000000000, 'Ok', "
              "[fromUnixTimestamp64Nano(toInt64(1800000000000000005))], ['got /x'], "
              "[map('path', '/a/b')])")
    con.query("INSERT INTO agentscope_samples VALUES " + ", ".join(
        f"(fromUnixTimestamp64Nano(toInt64({1_800_000_000_000_000_000 + i * 10**8})), 'h', 7, "
        f"'host', NULL, 'cpu.util', {'nan' if v != v else repr(v)})" for i, v in samples))
    con.close()
    got = agentscope.analyze(f"chdb://{tmp_path / 'ch'}?table=otel_traces")
    assert not got.problems
    columns = "trace_id, span_id, name, attrs, events, links, status, kind"
    assert got.query_rows(f"SELECT {columns} FROM spans")[1] == \
        want._x(f"SELECT {columns} FROM spans")
    sample_sql = "SELECT ts_ns, value::VARCHAR FROM samples ORDER BY ts_ns"
    assert got.query_rows(sample_sql)[1] == want._x(sample_sql)
    assert [v for _, v in want._x(sample_sql)] == ["0.5", None, None, "0.0"]


def test_a_store_that_read_the_window_as_json_lines_replaces_its_rows(tmp_path):
    """A store kept with --db that read a ClickHouse window before its rows travelled as
    Parquet (files named spans-/samples-clickhouse-0-1.jsonl in its loaded_files) gets the
    same rows, not the samples twice."""
    from agentscope.store.duckdb_store import Store

    source = REPO / "sample_traces" / "cpu" / "cpu-compile"
    url = f"chdb://{tmp_path / 'ch'}?table=otel_traces"
    clickhouse_out.export(agentscope.analyze(source, db=":memory:"), url)
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "spans-clickhouse-0-1.jsonl").write_bytes(
        next(source.glob("spans-*.jsonl")).read_bytes())
    (earlier / "samples-clickhouse-0-1.jsonl").write_bytes(b"".join(
        p.read_bytes() for p in sorted(source.glob("samples-*.jsonl"))))
    db = tmp_path / "kept.duckdb"
    store = Store(db)
    store.load(earlier)
    before = (store._x("SELECT count(*) FROM spans")[0][0], store.sample_count())
    store.close()
    again = agentscope.analyze(url, db=db)
    assert (again.summary.spans, again.query("SELECT count(*) AS n FROM samples")["n"][0]) \
        == before
    again.close()


def test_a_parquet_setting_the_clickhouse_does_not_know_is_left_out(tmp_path, monkeypatch):
    """The Parquet settings of the read are from 2025 (a server refuses a query naming one
    it does not know): those the ClickHouse lacks are not sent. An answer that is not a
    whole Parquet file is an error naming the URL."""
    _collector_rows(tmp_path / "ch")
    url = f"chdb://{tmp_path / 'ch'}?table=otel_traces"
    monkeypatch.setitem(clickhouse._PARQUET, "output_format_parquet_from_the_future", "1")
    assert agentscope.analyze(url).summary.spans == 3
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(b"PAR1 and then the connection dropped")
    with pytest.raises(StoreError, match="^chdb://.*not a whole Parquet file"):
        clickhouse._rows(cut, clickhouse.parse(url))


def _collector_rows(path: Path):
    """Two traces as the Collector's exporter writes them (into chdb at ``path``): enum names
    in either spelling, every attribute a string, the scope in its own column, events and links
    nested."""

    con = clickhouse._Apart(clickhouse.parse(f"chdb://{path}"))
    con.query(clickhouse._sql("otel_traces.sql").format(table="`default`.`otel_traces`"))
    con.query("""INSERT INTO `default`.`otel_traces` (Timestamp, TraceId, SpanId, ParentSpanId,
        SpanName, SpanKind, ServiceName, ResourceAttributes, ScopeName, SpanAttributes,
        Duration, StatusCode, StatusMessage, `Events.Timestamp`, `Events.Name`,
        `Events.Attributes`, `Links.TraceId`, `Links.SpanId`, `Links.TraceState`,
        `Links.Attributes`) VALUES
        (fromUnixTimestamp64Nano(toInt64(1800000000000000000)),
         '0AF7651916CD43DD8448EB211C80319C', 'B7AD6B7169203331', '', 'agent.run',
         'Server', 'svc-a', map('host.name', 'h1', 'process.pid', '4242'), 'my.scope',
         map('agentscope.stage', 'task', 'agentscope.cpu.thread_ns', '1500000000',
             'thread.id', '77', 'gen_ai.usage.input_tokens', '12',
             'agentscope.analysis.bottleneck', 'cpu'),
         2000000000, 'Error', 'boom', [fromUnixTimestamp64Nano(toInt64(1800000000500000000))],
         ['exception'], [map('exception.type', 'TimeoutError')],
         ['0af7651916cd43dd8448eb211c80319d'], ['00f067aa0ba902b7'], [''], [map('k', 'v')]),
        (fromUnixTimestamp64Nano(toInt64(1800000000100000000)),
         '0AF7651916CD43DD8448EB211C80319C', '00F067AA0BA902B7', 'B7AD6B7169203331', 'llm',
         'SPAN_KIND_CLIENT', 'svc-a', map(), '', map('agentscope.cpu.thread_ns', 'nope',
         'agentscope.page_faults.major', '-3'), 1000000000, 'STATUS_CODE_OK', '', [], [],
         [], [], [], [], []),
        (fromUnixTimestamp64Nano(toInt64(1800003600000000000)),
         '1AF7651916CD43DD8448EB211C80319C', 'C7AD6B7169203331', '', 'later', 'Unspecified',
         'svc-b', map(), '', map(), 5, 'Unset', '', [], [], [], [], [], [], [])""")
    con.close()


def test_the_collectors_own_rows_are_read_as_its_otlp(tmp_path):
    _collector_rows(tmp_path / "ch")
    a = agentscope.analyze(f"chdb://{tmp_path / 'ch'}")
    assert not a.problems
    spans = {r["span_id"]: r for r in a.query(
        "SELECT * FROM spans ORDER BY start_ns").to_dict("records")}
    root, child = spans["b7ad6b7169203331"], spans["00f067aa0ba902b7"]
    assert root["trace_id"] == "0af7651916cd43dd8448eb211c80319c"
    assert (root["kind"], root["status"], root["status_message"]) == ("server", "error", "boom")
    assert (root["stage"], root["service"], root["host"], root["pid"]) == \
        ("task", "svc-a", "h1", 4242)
    assert (root["thread_cpu_ns"], root["tid"]) == (1_500_000_000, 77)
    assert (root["start_ns"], root["end_ns"]) == (1_800_000_000_000_000_000,
                                                  1_800_000_002_000_000_000)
    attrs = json.loads(root["attrs"])
    # accounting and stage became columns, the derived verdict was dropped, the scope kept
    assert attrs == {"gen_ai.usage.input_tokens": "12", "otel.scope.name": "my.scope"}
    assert json.loads(root["events"]) == [{"name": "exception",
                                           "time_ns": 1_800_000_000_500_000_000,
                                           "attrs": {"exception.type": "TimeoutError"}}]
    assert json.loads(root["links"]) == [{"trace_id": "0af7651916cd43dd8448eb211c80319d",
                                          "span_id": "00f067aa0ba902b7", "attrs": {"k": "v"}}]
    assert (child["kind"], child["status"], child["parent_span_id"]) == \
        ("client", "ok", "b7ad6b7169203331")
    # not an integer, or out of its range: no measurement (as from OTLP)
    assert child["thread_cpu_ns"] is None and child["majflt"] is None
    assert spans["c7ad6b7169203331"]["kind"] == "internal"
    assert len(a.task_results) == 2
    timeout = next(t for t in a.task_results if t.name == "agent.run")
    assert timeout.timeout_ns > 0  # the TimeoutError event, read as from any OTLP


def test_a_window_and_a_service_read_whole_traces(tmp_path):
    _collector_rows(tmp_path / "ch")
    base = f"chdb://{tmp_path / 'ch'}?table=otel_traces"
    # the child started in the window: its whole trace comes, the root before it too
    a = agentscope.analyze(base + "&since=1800000000.05&until=1800000000.2")
    assert sorted(a.query("SELECT span_id FROM spans")["span_id"]) == \
        ["00f067aa0ba902b7", "b7ad6b7169203331"]
    b = agentscope.analyze(base + "&since=2027-01-15T08:30:00Z")
    assert list(b.query("SELECT name FROM spans")["name"]) == ["later"]
    c = agentscope.analyze(base + "&service=svc-b")
    assert list(c.query("SELECT name FROM spans")["name"]) == ["later"]
    assert agentscope.analyze(base + "&service=nobody").summary.tasks == 0
    # a hostile service name is a value, never SQL
    quoted = urllib.parse.quote("svc-b' OR 1=1 OR '\\")
    assert agentscope.analyze(base + "&service=" + quoted).summary.tasks == 0


@pytest.mark.parametrize("url, says", [
    ("chdb://", "names a data directory"),
    ("chdb:///x?table=a;drop", "letters, digits"),
    ("chdb:///x?tabel=otel_traces", "unknown option"),
    ("chdb:///x?since=yesterday", "neither an ISO 8601 time"),
    ("chdb:///x?since=20&until=10", "not after its since"),
    ("clickhouse:///db", "names a host"),
    ("clickhouse://h/db-1", "letters, digits"),
])
def test_a_bad_url_is_a_clear_error(url, says):
    with pytest.raises(StoreError, match=says):
        clickhouse.parse(url)


def test_a_missing_table_is_named(tmp_path):
    with pytest.raises(StoreError, match="no such chdb data directory"):
        agentscope.analyze(f"chdb://{tmp_path / 'ch'}?table=spans_here")
    assert not (tmp_path / "ch").exists()  # (a typo makes no directory)
    (tmp_path / "ch").mkdir()
    with pytest.raises(StoreError, match="no table default.spans_here"):
        agentscope.analyze(f"chdb://{tmp_path / 'ch'}?table=spans_here")


def test_a_password_is_never_shown(tmp_path, monkeypatch):
    monkeypatch.delenv("CLICKHOUSE_PASSWORD", raising=False)
    remote = clickhouse.parse("clickhouse://ann:s3cr%40t@localhost:1/db?table=t")
    assert remote.password == "s3cr@t" and "s3cr" not in remote.display
    assert remote.display == "clickhouse://ann@localhost:1/db?table=t"
    url = clickhouse.without_password("clickhouse://ann:s3cr%40t@localhost:1/db")
    assert url == "clickhouse://ann@localhost:1/db"
    assert clickhouse.parse(url).password == "s3cr@t"  # (kept for this server and user)
    monkeypatch.setenv("CLICKHOUSE_PASSWORD", "from-env")
    assert clickhouse.parse("clickhouse://bob@localhost:1/db").password == "from-env"
    # the command line: nothing listens on port 1, so the connection fails; the error and
    # everything else it printed name the URL without the password
    got = subprocess.run(
        [sys.executable, "-m", "agentscope.cli", "analyze", "-v",
         "clickhouse://ann:s3cr%40t@127.0.0.1:1/db?table=t"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert got.returncode == 1, got.stderr
    assert "s3cr" not in got.stdout + got.stderr
    assert "clickhouse://ann@127.0.0.1:1/db" in got.stderr


def test_the_cli_exports_and_analyses_clickhouse(tmp_path):
    url = f"chdb://{tmp_path / 'ch'}?table=otel_traces"
    source = REPO / "sample_traces" / "cpu"
    out = subprocess.run([sys.executable, "-m", "agentscope.cli", "export", "clickhouse",
                          str(source), "--to", url, "--db", str(tmp_path / "a.duckdb")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "spans and" in out.stderr + out.stdout
    got = subprocess.run([sys.executable, "-m", "agentscope.cli", "analyze", url, "--format",
                          "json"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert got.returncode == 0, got.stderr
    want = subprocess.run([sys.executable, "-m", "agentscope.cli", "analyze", str(source),
                           "--format", "json", "--db", str(tmp_path / "b.duckdb")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    a, b = json.loads(got.stdout), json.loads(want.stdout)
    a["summary"].pop("load"), b["summary"].pop("load")
    assert a == b and a["tasks"]
    assert np.isfinite(a["summary"]["critical_path_s"])


def test_text_that_is_not_utf8_is_read_with_its_bad_bytes_replaced(tmp_path):
    """ClickHouse strings are bytes: a name that is not UTF-8 still loads (U+FFFD for what
    cannot be read), as the rest of the table does."""

    (tmp_path / "ch").mkdir()
    con = clickhouse._Apart(clickhouse.parse(f"chdb://{tmp_path / 'ch'}"))
    con.query(clickhouse._sql("otel_traces.sql").format(table="`default`.`otel_traces`"))
    con.query("INSERT INTO otel_traces (Timestamp, TraceId, SpanId, ParentSpanId, SpanName, "
              "SpanKind, ServiceName, Duration, StatusCode) VALUES "
              "(fromUnixTimestamp64Nano(toInt64(1800000000000000000)), "
              "'0af7651916cd43dd8448eb211c80319c', 'b7ad6b7169203331', '', unhex('61FF62'), "
              "'Server', 'svc', 1000, 'Ok')")
    con.close()
    a = agentscope.analyze(f"chdb://{tmp_path / 'ch'}")
    assert not a.problems
    assert list(a.query("SELECT name FROM spans")["name"]) == ["a\ufffdb"]


def test_the_window_options_of_the_command_line(tmp_path):
    """--since, --until and --service set the URL's window (replacing its own); a directory
    is read whole, so they are a usage error there."""
    from agentscope import urls

    _collector_rows(tmp_path / "ch")
    url = f"chdb://{tmp_path / 'ch'}?table=otel_traces&service=svc-a"
    assert urls.with_window(url, service="svc-b") == \
        f"chdb://{tmp_path / 'ch'}?table=otel_traces&service=svc-b"

    def run(*args):
        return subprocess.run([sys.executable, "-m", "agentscope.cli", *args],
                              capture_output=True, text=True, cwd=tmp_path, timeout=300)

    got = run("query", url, "--service", "svc-b", "SELECT name FROM spans", "--format", "csv")
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["name", "later"]
    got = run("query", url, "--since", "2027-01-15T08:00:00.05Z", "--until", "1800000000.2",
              "SELECT count(*) AS n FROM spans", "--format", "csv")
    # svc-a's child started in the window: its whole trace, the root before it too
    assert got.stdout.split() == ["n", "2"]
    got = run("analyze", str(REPO / "sample_traces" / "cpu"), "--since", "2026-01-01")
    assert got.returncode == 2 and "a directory or file is read whole" in got.stderr
    got = run("analyze", url, "--until", "soon")
    assert got.returncode == 1 and "'soon'" in got.stderr


def test_a_bad_row_is_named_by_the_url_and_the_rest_loads(tmp_path):
    """A row that is not a span (an id that is not hex) is a problem naming the URL and its
    row, in every output; the other rows load. No password is in the name."""

    _collector_rows(tmp_path / "ch")
    con = clickhouse._Apart(clickhouse.parse(f"chdb://{tmp_path / 'ch'}"))
    con.query("INSERT INTO otel_traces (Timestamp, TraceId, SpanId, ParentSpanId, SpanName, "
              "SpanKind, ServiceName, Duration, StatusCode) VALUES "
              "(fromUnixTimestamp64Nano(toInt64(1800000000300000000)), "
              "'2af7651916cd43dd8448eb211c80319c', 'not-hex!', '', 'bad', 'Server', 'svc-c', "
              "5, 'Ok')")
    con.close()
    url = f"chdb://{tmp_path / 'ch'}?table=otel_traces"
    a = agentscope.analyze(url)
    assert [p.path for p in a.problems] == [f"{url} (span rows)"]
    assert [p.path for p in a.load.problems] == [f"{url} (span rows)"]  # (what the load said)
    assert a.problems[0].line is not None and "span_id" in a.problems[0].reason
    assert a.to_dict()["problems"][0]["file"] == f"{url} (span rows)"
    assert a.summary.spans == 3  # (the three good rows)
    got = subprocess.run([sys.executable, "-m", "agentscope.cli", "analyze", url],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert got.returncode == 1 and "agentscope-clickhouse-" not in got.stdout + got.stderr


def test_passwords_stay_with_their_urls(monkeypatch):
    """Two servers, two passwords: each URL keeps its own (export from one to the other)."""
    from agentscope import urls

    monkeypatch.delenv("CLICKHOUSE_PASSWORD", raising=False)
    a = urls.without_password("clickhouse://reader:pw-a@a.example:8123/db")
    b = urls.without_password("clickhouse://writer:pw-b@b.example/db")
    assert "pw-" not in a + b
    assert urls.parse(a).password == "pw-a" and urls.parse(b).password == "pw-b"
    assert urls.parse("clickhouse://other@a.example/db").password is None
    # (an @ in an option's value is no cut password)
    assert urls.without_password("clickhouse://u:pw@h/db?service=team@site") == \
        "clickhouse://u@h/db?service=team@site"
    for cut in ("pa#Zq9/wd", "pa/Zq9?wd", "Zq9?x"):
        with pytest.raises(StoreError, match="percent-encoded") as e:
            urls.without_password(f"clickhouse://u:{cut}@h/db")
        assert "Zq9" not in str(e.value) and "wd" not in str(e.value)


@pytest.mark.parametrize("option", ["until=9999-12-31", "since=2300-01-01", "since=1e30",
                                    "since=inf", "until=1e300", "since=-5"])
def test_a_window_outside_what_ns_hold_is_refused(option):
    with pytest.raises(StoreError, match="outside 1970-2262"):
        clickhouse.parse(f"chdb:///x?{option}")


def test_export_takes_spans_larger_than_a_query(tmp_path):
    """A span of 400 KB (a long prompt in its attributes: over ClickHouse's 256 KiB
    max_query_size) is exported whole, and reads back the same."""
    from agentscope.formats import spanfile
    from agentscope.records import SpanRecord

    traces = tmp_path / "traces"
    traces.mkdir()
    long = "p" * 400_000
    records = [SpanRecord(f"{k + 1:032x}", f"{k + 1:016x}", None, "chat", "inference",
                          "client", 1_800_000_000_000_000_000 + k,
                          1_800_000_001_000_000_000 + k, "ok", None, "svc", "h", 1, 1, None,
                          None, None, None, None, None, None, None, {"gen_ai.prompt": long})
               for k in range(3)]
    (traces / "spans-h-1-1.jsonl").write_text("".join(spanfile.encode(r) for r in records))
    direct, back, written = _round_trip(traces, tmp_path)
    assert written.spans == 3
    prompts = back.query("SELECT attrs FROM spans")["attrs"]
    assert all(json.loads(a)["gen_ai.prompt"] == long for a in prompts)
    _same_analysis(direct, back)


def _trace_at(path: Path, trace: str, start_ns: int, service: str = "svc") -> None:
    """One root span of ``trace`` at ``start_ns`` (1 s long) into chdb's otel_traces at
    ``path`` (made where missing)."""
    con = clickhouse._Apart(clickhouse.parse(f"chdb://{path}"))
    con.query(clickhouse._sql("otel_traces.sql").format(table="`default`.`otel_traces`"))
    con.query(f"""INSERT INTO `default`.`otel_traces` (Timestamp, TraceId, SpanId, SpanName,
        SpanKind, ServiceName, Duration, StatusCode) VALUES
        (fromUnixTimestamp64Nano(toInt64({start_ns})), '{trace}', 'b7ad6b7169203331',
         'agent.run', 'Server', '{service}', 1000000000, 'Ok')""")
    con.close()


def test_a_window_given_as_a_duration_moves_with_the_clock(monkeypatch):
    from agentscope import urls

    now = 1_800_000_000 * 10**9
    monkeypatch.setattr(urls.time, "time_ns", lambda: now)
    assert urls.parse("chdb:///x?since=1h").since == now - 3600 * 10**9
    assert urls.parse("chdb:///x?since=1h30m&until=5m").until == now - 300 * 10**9
    assert urls.parse("chdb:///x?since=2w3d").since == now - (14 + 3) * 86_400 * 10**9
    assert urls.parse("chdb:///x?since=90s").since == now - 90 * 10**9
    monkeypatch.setattr(urls.time, "time_ns", lambda: now + 10**9)
    assert urls.parse("chdb:///x?since=1h").since == now + 10**9 - 3600 * 10**9
    # (a number alone is epoch seconds, as before; units and order as Prometheus writes them)
    assert urls.parse("chdb:///x?since=90").since == 90 * 10**9
    for bad in ("5x", "1m1h", "h", "1.5h"):
        with pytest.raises(StoreError, match="duration before now"):
            urls.parse(f"chdb:///x?since={bad}")
    with pytest.raises(StoreError, match="before 1970"):
        urls.parse("chdb:///x?since=10000w")


def test_serve_watches_a_clickhouse_window(tmp_path, monkeypatch):
    """serve over a URL: the window is read again when its rows changed (a new trace), not
    at a scrape that finds it as it was, nor at the first scrape after serve's own first
    read; each refresh lets the last analysis' store go. A window given as a duration moves
    with the clock, so it is read at every refresh."""
    from agentscope import urls
    from agentscope.exporters.prometheus import TraceDirCollector

    now = 1_800_000_000 * 10**9
    monkeypatch.setattr(urls.time, "time_ns", lambda: now)
    ch = tmp_path / "ch"
    _trace_at(ch, "0af7651916cd43dd8448eb211c80319c", now - 1800 * 10**9)  # 30 min ago
    _trace_at(ch, "1af7651916cd43dd8448eb211c80319c", now - 7200 * 10**9)  # 2 h ago
    since = (now - 3600 * 10**9) // 10**9

    def tasks(collector):
        fam = next(f for f in collector.collect() if f.name == "agentscope_tasks")
        return sum(s.value for s in fam.samples)

    fixed = TraceDirCollector(f"chdb://{ch}?table=otel_traces&since={since}", refresh_s=0.0)
    fixed.update()  # (what serve does before it listens)
    assert tasks(fixed) == 1 and fixed.refreshes == 1  # the first scrape: not read again
    first = fixed._analysis
    assert tasks(fixed) == 1 and fixed.refreshes == 1
    _trace_at(ch, "2af7651916cd43dd8448eb211c80319c", now - 60 * 10**9)
    assert tasks(fixed) == 2 and fixed.refreshes == 2
    with pytest.raises(ValueError, match="closed"):  # the last store was let go
        first.query("SELECT 1")
    assert fixed.failures == 0

    moving = TraceDirCollector(f"chdb://{ch}?table=otel_traces&since=1h", refresh_s=0.0)
    assert tasks(moving) == 2 and moving.refreshes == 1
    monkeypatch.setattr(urls.time, "time_ns", lambda: now + 3600 * 10**9)  # an hour on
    assert tasks(moving) == 0 and moving.refreshes == 2
    assert tasks(moving) == 0 and moving.refreshes == 3  # (read at every refresh)
    with pytest.raises(ValueError, match="a store of its own"):
        TraceDirCollector(f"chdb://{ch}?table=otel_traces", db=str(tmp_path / "x.duckdb"))


def test_serve_a_url_from_the_command_line(tmp_path):
    ch = tmp_path / "ch"
    _trace_at(ch, "0af7651916cd43dd8448eb211c80319c", 1_800_000_000 * 10**9)
    url = f"chdb://{ch}?table=otel_traces"

    def run(*args):
        return subprocess.run([sys.executable, "-m", "agentscope.cli", "serve", *args],
                              capture_output=True, text=True, cwd=tmp_path, timeout=120)

    got = run(url, "--db", str(tmp_path / "x.duckdb"))
    assert got.returncode == 2 and "keeps a trace directory's store" in got.stderr
    got = run(str(REPO / "sample_traces" / "cpu"), "--since", "1h")
    assert got.returncode == 2 and "a directory or file is read whole" in got.stderr
    got = run(url, "--since", "soon")
    assert got.returncode == 1 and "'soon'" in got.stderr
    proc = subprocess.Popen([sys.executable, "-m", "agentscope.cli", "serve", url, "--port",
                             "0", "--service", "svc"], stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    try:
        line = proc.stderr.readline()
        assert "serving metrics of chdb://" in line and "service=svc" in line, line
        body = urllib.request.urlopen(line.rsplit(" on ", 1)[1].strip(), timeout=60).read()
        assert b'agentscope_tasks_total{' in body and b'service="svc"' in body
    finally:
        proc.terminate()
        proc.wait(60)
    assert proc.returncode == 0


# the Collector's JSON-typed schema (its traces_json_table template): the attribute columns
# are JSON, where a dotted name is kept as nested objects
_JSON_TABLE = """CREATE TABLE `default`.`{table}` (
    Timestamp DateTime64(9), TraceId String, SpanId String, ParentSpanId String,
    TraceState String, SpanName LowCardinality(String), SpanKind LowCardinality(String),
    ServiceName LowCardinality(String), ResourceAttributes JSON, ScopeName String,
    ScopeVersion String, SpanAttributes JSON, Duration UInt64,
    StatusCode LowCardinality(String), StatusMessage String,
    Events Nested (Timestamp DateTime64(9), Name LowCardinality(String), Attributes JSON),
    Links Nested (TraceId String, SpanId String, TraceState String, Attributes JSON)
) ENGINE = MergeTree PARTITION BY toDate(Timestamp)
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)"""


def test_the_json_typed_schema_reads_as_the_map_schema(tmp_path):
    """The same spans in the Collector's JSON-typed schema: the same analysis, the same
    spans (dotted attribute names back from nested objects), the same critical paths."""
    direct, back, _ = _round_trip(REPO / "sample_traces", tmp_path)
    con = clickhouse._Apart(clickhouse.parse(f"chdb://{tmp_path / 'ch'}"))
    try:
        con.query(_JSON_TABLE.format(table="otel_json"))
        con.query("INSERT INTO otel_json SELECT Timestamp, TraceId, SpanId, ParentSpanId, "
                  "TraceState, SpanName, SpanKind, ServiceName, "
                  "CAST(toJSONString(ResourceAttributes), 'JSON'), ScopeName, ScopeVersion, "
                  "CAST(toJSONString(SpanAttributes), 'JSON'), Duration, StatusCode, "
                  "StatusMessage, `Events.Timestamp`, `Events.Name`, "
                  "arrayMap(a -> CAST(toJSONString(a), 'JSON'), `Events.Attributes`), "
                  "`Links.TraceId`, `Links.SpanId`, `Links.TraceState`, "
                  "arrayMap(a -> CAST(toJSONString(a), 'JSON'), `Links.Attributes`) "
                  "FROM otel_traces")
        nested = con.query("SELECT toJSONString(SpanAttributes) FROM otel_json "
                           "WHERE toJSONString(SpanAttributes) LIKE '%agentscope%' LIMIT 1 "
                           "FORMAT TabSeparatedRaw")
    finally:
        con.close()
    assert '{"agentscope":{' in nested  # (as the JSON type keeps them)
    url = f"chdb://{tmp_path / 'ch'}?table=otel_json&samples=agentscope_samples"
    with agentscope.analyze(url) as from_json:
        _same_analysis(back, from_json)
    assert clickhouse.critical_paths(url) == clickhouse.critical_paths(
        f"chdb://{tmp_path / 'ch'}?table=otel_traces")


def test_json_typed_attributes_keep_their_values(tmp_path):
    """Numbers the SDK sent arrive as numbers in a JSON column: the accounting attributes
    are read from them, the others become their decimal text; deep objects their JSON."""
    con = clickhouse._Apart(clickhouse.parse(f"chdb://{tmp_path / 'ch'}"))
    try:
        con.query(_JSON_TABLE.format(table="otel_traces"))
        con.query("""INSERT INTO otel_traces (Timestamp, TraceId, SpanId, ParentSpanId,
            SpanName, SpanKind, ServiceName, ResourceAttributes, SpanAttributes, Duration,
            StatusCode, `Events.Timestamp`, `Events.Name`, `Events.Attributes`) VALUES
            (fromUnixTimestamp64Nano(toInt64(1800000000000000000)),
             '0af7651916cd43dd8448eb211c80319c', 'b7ad6b7169203331', '', 'agent.run',
             'Server', 'svc-a', '{"host.name": "h1", "process.pid": 4242}',
             '{"agentscope.stage": "task", "agentscope.cpu.thread_ns": 1500000000,
               "gen_ai.usage.input_tokens": 12, "flag": true, "a.b.c.d.e.f.g.h": "deep"}',
             2000000000, 'Ok', [fromUnixTimestamp64Nano(toInt64(1800000000500000000))],
             ['exception'], ['{"exception.type": "TimeoutError"}'])""")
    finally:
        con.close()
    with agentscope.analyze(f"chdb://{tmp_path / 'ch'}") as a:
        row = a.query("SELECT stage, thread_cpu_ns, host, pid, attrs, events FROM spans")
    assert row["stage"][0] == "task" and row["thread_cpu_ns"][0] == 1_500_000_000
    assert row["host"][0] == "h1" and row["pid"][0] == 4242
    attrs = json.loads(row["attrs"][0])
    assert attrs["gen_ai.usage.input_tokens"] == "12" and attrs["flag"] == "true"
    assert json.loads(attrs["a.b.c.d.e.f"]) == {"g": {"h": "deep"}}
    assert json.loads(row["events"][0])[0]["attrs"] == {"exception.type": "TimeoutError"}


def test_table_rows_take_only_the_tables_columns(tmp_path):
    """Analysis.table_rows reads the spans or samples table and names only their columns (a
    name is not SQL); a page of 0 is a page of 1."""
    from agentscope.exporters.otlp_traces import SPAN_COLUMNS

    with agentscope.analyze(REPO / "sample_traces", db=tmp_path / "s.duckdb") as analysis:
        for table, columns in (("spans", ["span_id", 'x" FROM spans; --']),
                               ("task_results", ["trace_id"])):
            with pytest.raises(ValueError):
                list(analysis.table_rows(table, columns))
        rows = list(analysis.table_rows("samples", clickhouse_out.SAMPLE_COLUMNS, 0))
        assert len(rows) == analysis.query("SELECT count(*) AS n FROM samples")["n"][0] > 0
        first = next(analysis.table_rows("spans", SPAN_COLUMNS, 0))
        assert set(first) == set(SPAN_COLUMNS)
