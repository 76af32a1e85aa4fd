"""The DuckDB store: fast and validating loads, incremental loads, OTLP files, conventions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import agentscope
from agentscope.formats import spanfile
from agentscope.records import SpanRecord
from agentscope.store import duckdb_store
from agentscope.store.duckdb_store import Store

CORPUS = Path(__file__).resolve().parent / "corpus"  # vendored: see corpus/README.md
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="shared corpus not present")


T0 = 1_700_000_000_000_000_000


def rec(n, trace="a" * 32, parent=None, start=T0 + 1000, end=T0 + 2000, **kw):
    base = SpanRecord(trace, f"{n:016x}", parent, f"s{n}", "tool", "internal", start, end,
                      "unset", None, "svc", "h", 1, 1, 10, 0, 0, 0, 0, 0, 0, 0, {})
    return base._replace(**kw)


def write(path, records, extra=""):
    path.write_text("".join(spanfile.encode(r) for r in records) + extra)


def test_fast_path_and_incremental_reload(tmp_path):
    write(tmp_path / "spans-h-1-1.jsonl", [rec(i) for i in range(1, 6)])
    with Store(tmp_path / "db.duckdb") as store:
        r = store.load(tmp_path)
        assert (r.files_loaded, r.spans_added, r.problems) == (1, 5, [])
        again = store.load(tmp_path)
        assert (again.files_loaded, again.files_unchanged, again.spans_added) == (0, 1, 0)
        with open(tmp_path / "spans-h-1-1.jsonl", "a") as f:  # the writer appends more
            f.write(spanfile.encode(rec(6)))
        write(tmp_path / "spans-h-2-1.jsonl", [rec(7), rec(3)])  # another process; 3 again
        more = store.load(tmp_path)
        assert (more.files_loaded, more.spans_added, more.duplicates) == (2, 2, 1)
        assert store.query("SELECT count(*) FROM spans").fetchone()[0] == 7
        assert store.query("SELECT DISTINCT stage_from FROM spans").fetchall() == [("agentscope",)]


def test_clean_files_take_the_fast_path(tmp_path, monkeypatch):
    """Valid files load through DuckDB alone: the line-by-line reader is not needed."""
    write(tmp_path / "spans-h-1-1.jsonl", [rec(i) for i in range(1, 6)])
    write(tmp_path / "spans-h-2-1.jsonl", [rec(i) for i in range(6, 9)])

    def not_expected(*args, **kwargs):
        raise AssertionError("the validating reader ran on a clean file")

    monkeypatch.setattr(spanfile, "decode", not_expected)
    with Store(None) as store:
        r = store.load(tmp_path)  # new files: read together
        assert (r.files_loaded, r.spans_added, r.problems) == (2, 8, [])
        with open(tmp_path / "spans-h-1-1.jsonl", "a") as f:  # appended lines: one file
            f.write(spanfile.encode(rec(9)))
        r = store.load(tmp_path)
        assert (r.files_loaded, r.spans_added, r.problems) == (1, 1, [])


def test_bad_lines_are_named_and_the_rest_loads(tmp_path):
    path = tmp_path / "spans-h-1-1.jsonl"
    good = [rec(1), rec(2)]
    lines = [spanfile.encode(good[0]), "{oops\n",
             spanfile.encode(rec(3, start=T0 + 5, end=T0 + 4)),
             json.dumps({"trace_id": "a" * 32, "name": "no ids"}) + "\n",
             spanfile.encode(good[1])]
    path.write_text("".join(lines) + spanfile.encode(rec(4))[:30])  # torn last line
    with Store(None) as store:
        r = store.load(tmp_path)
        assert r.spans_added == 2
        where = sorted((p.line, p.torn) for p in r.problems)
        assert where == [(2, False), (3, False), (4, False), (6, True)]
        reasons = {p.line: p.reason for p in r.problems}
        assert "not valid JSON" in reasons[2]
        assert "before start_ns" in reasons[3]
        assert "span_id must be" in reasons[4]
        assert all(str(p).startswith(str(path)) for p in r.problems)
        # the writer completes the torn line: it loads next time, nothing before it again
        with open(path, "w") as f:
            f.write("".join(lines) + spanfile.encode(rec(4)))
        r2 = store.load(tmp_path)
        assert r2.spans_added == 1 and r2.problems == []
        # the three bad lines stay reported; the torn one is gone now that it loaded
        assert sorted(p.line for p in store.problems()) == [2, 3, 4]


def test_samples_load(tmp_path):
    agentscope.init(tmp_path, flush_interval_s=0.1)
    with agentscope.stage("tool"):
        pass
    agentscope.shutdown()
    with Store(None) as store:
        r = store.load(tmp_path)
        assert r.samples_added == 3
        dropped = store.query("SELECT value FROM samples WHERE metric = "
                              "'agentscope.capture.spans_dropped'").fetchone()[0]
        assert dropped == 0


@needs_corpus
def test_otlp_examples_load_and_bad_ids_are_reported(tmp_path):
    shutil.copytree(CORPUS / "otlp_examples", tmp_path / "otlp")
    with Store(None) as store:
        r = store.load(tmp_path)
        ids = store.query("SELECT trace_id, span_id, kind FROM spans "
                          "WHERE name = 'I''m a server span'").fetchall()
        assert ids == [("5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174", "server")]
        # the spec's file-exporter example has empty ids: every span reported, none loaded
        bad = [p for p in r.problems if "traces.jsonl" in p.path]
        assert len(bad) == 8 and all("traceId missing" in p.reason for p in bad)
        assert {p.line for p in bad} == {1, 2, 3, 4}
        skipped = {k.rel: k.reason for k in r.skipped}
        assert skipped["otlp/opentelemetry-proto/metrics.json"] == "OTLP metrics, not traces"
        assert skipped["otlp/opentelemetry-proto/README.md"] == "a document, not traces"
        assert {k.rel for k in r.skipped if not k.quiet} == {  # the ones analyze warns about
            f"otlp/opentelemetry-proto/{n}.json" for n in ("metrics", "logs", "events")} | {
            f"otlp/otel_spec_file_exporter/{n}.jsonl" for n in ("metrics", "logs")}


@needs_corpus
def test_stages_from_genai_conventions(tmp_path):
    shutil.copytree(CORPUS / "agent_traces" / "derived_otlp", tmp_path / "otlp")
    with Store(None) as store:
        store.load(tmp_path)
        stages = dict(store.query("SELECT stage, count(*) FROM spans GROUP BY ALL").fetchall())
        assert stages == {"agent": 7, "tool": 18, "inference": 25}
        assert store.query("SELECT DISTINCT stage_from FROM spans").fetchall() == [("convention",)]


def test_otlp_round_trip_of_our_accounting(tmp_path):
    request = {"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "svc"}}]}, "scopeSpans": [{"spans": [{
            "traceId": "AAAAAAAAAAAAAAAAAAAAAQ==", "spanId": "AAAAAAAAAAI=",  # base64 ids
            "name": "t", "kind": "SPAN_KIND_CLIENT", "startTimeUnixNano": str(T0 + 10),
            "endTimeUnixNano": T0 + 20, "status": {"code": 2, "message": "boom"},
            "attributes": [
                {"key": "agentscope.stage", "value": {"stringValue": "tool"}},
                {"key": "agentscope.cpu.thread_ns", "value": {"intValue": "7"}},
                {"key": "http.request.method", "value": {"stringValue": "GET"}}]}]}]}]}
    (tmp_path / "export.json").write_text(json.dumps(request))
    with Store(None) as store:
        store.load(tmp_path)
        row = store.query("SELECT trace_id, span_id, stage, stage_from, kind, status, "
                          "status_message, thread_cpu_ns, service, attrs FROM spans").fetchone()
    assert row[:9] == ("00000000000000000000000000000001", "0000000000000002", "tool",
                       "agentscope", "client", "error", "boom", 7, "svc")
    assert json.loads(row[9]) == {"http.request.method": "GET"}


def test_timestamps_in_the_wrong_unit_are_named(tmp_path):
    """Exporters that write microseconds (or ms) where nanoseconds belong are caught."""
    write(tmp_path / "spans-h-1-1.jsonl", [rec(1), rec(2, start=1_700_000_000_000_000,
                                                   end=1_700_000_000_500_000)])
    request = {"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "1" * 32, "spanId": "2" * 16, "name": "ms",
        "startTimeUnixNano": "1700000000000", "endTimeUnixNano": "1700000000500"}]}]}]}
    (tmp_path / "export.json").write_text(json.dumps(request))
    with Store(None) as store:
        r = store.load(tmp_path)
    assert r.spans_added == 1
    reasons = sorted(p.reason for p in r.problems)
    assert "looks like microseconds" in reasons[1] and reasons[1].startswith("start_ns")
    assert "looks like milliseconds" in reasons[0]


def test_progress_reports_every_byte_once(tmp_path):
    write(tmp_path / "spans-h-1-1.jsonl", [rec(i) for i in range(1, 50)])
    write(tmp_path / "spans-h-2-1.jsonl", [rec(i) for i in range(50, 60)], extra="{torn")
    total = sum(p.stat().st_size for p in tmp_path.iterdir())
    seen = []
    with Store(None) as store:
        store.load(tmp_path, progress=seen.append)
        assert sum(seen) == total
        seen.clear()
        store.load(tmp_path, progress=seen.append)  # unchanged files still advance the bar
        assert sum(seen) == total
        torn = [p for p in store.problems() if p.torn]
        assert len(torn) == 1  # found on both loads, reported once


def _spans_table(directory, fast, monkeypatch):
    from agentscope.store import otlp_arrow

    staged = []
    real = otlp_arrow.stage
    monkeypatch.setattr(otlp_arrow, "stage",
                        lambda *a: staged.append(real(*a) if fast else None) or staged[-1])
    with Store(None) as store:
        report = store.load(directory)
        assert (staged and all(n is not None for n in staged)) if fast else staged == [None]
        rows = store.query("SELECT * EXCLUDE (attrs, events, links, file_id) FROM spans "
                           "ORDER BY trace_id, span_id").fetchall()
        attrs = [json.loads(a) for (a,) in store.query(
            "SELECT attrs FROM spans ORDER BY trace_id, span_id").fetchall()]
    monkeypatch.undo()
    return report, rows, attrs


def test_otlp_fast_path_gives_what_the_python_reader_gives(tmp_path, monkeypatch):
    pytest.importorskip("pyarrow")
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from gen_traces import write_otlp_lines

    write_otlp_lines(tmp_path / "export.jsonl", 20, spans_per_task=30, spans_per_request=37)
    with open(tmp_path / "export.jsonl", "a") as f:  # every value type, a remote parent
        f.write(json.dumps({"resourceSpans": [{"resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": "svc"}},
            {"key": "host.name", "value": {"stringValue": "h1"}},
            {"key": "process.pid", "value": {"intValue": "42"}}]},
            "scopeSpans": [{"scope": {"name": "lib"}, "spans": [{
                "traceId": "ABCDEF0123456789ABCDEF0123456789", "spanId": "0123456789ABCDEF",
                "parentSpanId": "", "name": "all types", "kind": 3,
                "startTimeUnixNano": str(T0), "endTimeUnixNano": str(T0 + 5),
                "status": {"code": 2, "message": 'boom "quoted"'},
                "attributes": [
                    {"key": "s", "value": {"stringValue": 'a "b" \u00e9'}},
                    {"key": "i", "value": {"intValue": "-7"}},
                    {"key": "d", "value": {"doubleValue": 0.25}},
                    {"key": "b", "value": {"boolValue": True}},
                    {"key": "agentscope.stage", "value": {"stringValue": "tool"}},
                    {"key": "agentscope.cpu.thread_ns", "value": {"intValue": "99"}}]}]}]}]})
                + "\n")
    fast_report, fast_rows, fast_attrs = _spans_table(tmp_path, True, monkeypatch)
    slow_report, slow_rows, slow_attrs = _spans_table(tmp_path, False, monkeypatch)
    assert fast_report.spans_added == slow_report.spans_added == 581
    assert fast_rows == slow_rows
    assert fast_attrs == slow_attrs
    special = fast_attrs[[r[1] for r in fast_rows].index("0123456789abcdef")]
    assert special == {"s": 'a "b" \u00e9', "i": -7, "d": 0.25, "b": True,
                       "otel.scope.name": "lib"}


def test_otlp_fast_path_steps_aside_for_what_it_does_not_handle(tmp_path, monkeypatch):
    pytest.importorskip("pyarrow")
    from agentscope.store import otlp_arrow

    calls = []
    real = otlp_arrow.stage
    monkeypatch.setattr(otlp_arrow, "stage", lambda *a: calls.append(real(*a)) or calls[-1])
    span = {"traceId": "1" * 32, "spanId": "2" * 16, "name": "x",
            "startTimeUnixNano": str(T0), "endTimeUnixNano": str(T0 + 1),
            "attributes": [{"key": "tags", "value": {"arrayValue": {"values": [
                {"stringValue": "a"}]}}}]}
    (tmp_path / "a.jsonl").write_text(json.dumps(
        {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}) + "\n")
    with Store(None) as store:
        r = store.load(tmp_path)
        attrs = json.loads(store.query("SELECT attrs FROM spans").fetchall()[0][0])
    assert calls == [None] and r.spans_added == 1  # the Python reader took it
    assert attrs == {"tags": ["a"]}


def _three_ways(directory, monkeypatch):
    """The spans table of ``directory`` loaded by the Arrow columns, by DuckDB's SQL and by the
    Python reader (each forced), and which way each OTLP file took in the first."""
    from agentscope.store import otlp_arrow

    taken = []
    real_columns = otlp_arrow._columns

    def columns(table):
        try:
            out = real_columns(table)
        except otlp_arrow._NotHere as e:
            taken.append("python" if e.python else "sql")
            raise
        taken.append("columns")
        return out

    def no_columns(table):  # what the columns would take goes to the SQL instead
        real_columns(table)
        raise otlp_arrow._NotHere(False)

    got = []
    for mode in ("columns", "sql", "python"):
        monkeypatch.setattr(otlp_arrow, "_columns", columns if mode == "columns" else no_columns)
        if mode == "python":
            monkeypatch.setattr(otlp_arrow, "stage", lambda *a: None)
        with Store(None) as store:
            report = store.load(directory)
            rows = store.query("SELECT * EXCLUDE (attrs, file_id) FROM spans "
                               "ORDER BY trace_id, span_id").fetchall()
            attrs = [json.loads(a) for (a,) in store.query(
                "SELECT attrs FROM spans ORDER BY trace_id, span_id").fetchall()]
        got.append((report.spans_added, len(report.problems), rows, attrs))
        monkeypatch.undo()
    return got, taken


def _otlp_line(spans, resource=None, scope="lib"):
    return json.dumps({"resourceSpans": [{
        "resource": {"attributes": resource or []},
        "scopeSpans": [{"scope": {"name": scope} if scope else {}, "spans": spans}]}]}) + "\n"


def _otlp_span(n, attributes=(), **kw):
    span = {"traceId": f"{n:032X}", "spanId": f"{n + 1:016X}", "name": f"s{n}",
            "startTimeUnixNano": str(T0 + n), "endTimeUnixNano": str(T0 + 2 * n + 5),
            "attributes": list(attributes)}
    span.update(kw)
    return span


def _kv(key, **value):
    return {"key": key, "value": value}


def test_otlp_columns_sql_and_python_reader_give_the_same_spans(tmp_path, monkeypatch):
    """The Arrow columns (otlp_arrow._columns) take plain files, DuckDB's SQL those with a
    string to escape or an integer in another spelling, the Python reader the rest: the same
    rows and attributes all three ways, for every value type, the accounting attributes
    (the last of repeated ones, bounds, doubles truncated), resources, scopes and codes."""
    pytest.importorskip("pyarrow")
    resource = [_kv("service.name", stringValue="svc"), _kv("host.name", stringValue="h1"),
                _kv("process.pid", intValue="42"), _kv("service.name", stringValue="second")]
    plain = [
        _otlp_span(1, [_kv("s", stringValue="caf\u00e9 \u4e2d"), _kv("i", intValue="-7"),
                       _kv("d", doubleValue=0.25), _kv("big", doubleValue=1e300),
                       _kv("b", boolValue=False), _kv("bytes", bytesValue="AAEC"),
                       _kv("empty"), _kv("agentscope.stage", stringValue="tool"),
                       _kv("whole", doubleValue=2.0), _kv("negative_zero", doubleValue=-0.0),
                       _kv("agentscope.cpu.thread_ns", intValue="5"),
                       _kv("agentscope.analysis.bottleneck", stringValue="cpu")],
                   kind=3, parentSpanId="00000000000000AB",
                   status={"code": 2, "message": "boom"}),
        _otlp_span(2, [_kv("agentscope.ctx_switches.voluntary", doubleValue=12.9),
                       _kv("agentscope.children.count", intValue="4294967296"),  # > int32
                       _kv("agentscope.page_faults.major", intValue="-1"),  # not a count
                       _kv("thread.id", intValue="-3"),
                       _kv("otel.scope.name", stringValue="own")],
                   kind=7, status={"code": 9}, parentSpanId="0000000000000000"),
        _otlp_span(3, [], kind=5, parentSpanId="xyz", status={"message": ""}),
    ]
    (tmp_path / "plain.jsonl").write_text(
        _otlp_line(plain[:2], resource) + _otlp_line(plain[2:], [
            _kv("process.pid", stringValue="77")], scope=None))
    (tmp_path / "escaped.jsonl").write_text(_otlp_line([_otlp_span(
        10, [_kv("quote", stringValue='say "hi"\\\n'), _kv("i", intValue="0012")])]))
    (tmp_path / "spelled.jsonl").write_text(_otlp_line([_otlp_span(
        20, [_kv("agentscope.cpu.thread_ns", intValue=" 12")])],
        [_kv("process.pid", intValue=" 43")]))
    (tmp_path / "array.jsonl").write_text(_otlp_line([_otlp_span(
        30, [_kv("tags", arrayValue={"values": [{"stringValue": "a"}]})])]))
    (tmp_path / "event.jsonl").write_text(_otlp_line([_otlp_span(
        40, events=[{"name": "e", "timeUnixNano": str(T0 + 41)}])]))
    (tmp_path / "repeated.jsonl").write_text(_otlp_line([_otlp_span(  # a key given twice
        50, [_kv("server.address", stringValue="localhost"), _kv("x", intValue="1"),
             _kv("agentscope.cpu.thread_ns", intValue="99"),
             _kv("server.address", stringValue="example.com"),
             _kv("agentscope.cpu.thread_ns", intValue="7")])]))
    got, taken = _three_ways(tmp_path, monkeypatch)
    assert sorted(taken) == ["columns", "python", "python", "python", "sql", "sql"]
    (n, problems, rows, attrs), sql_way, python_way = got
    assert n == 8 and problems == 0
    assert sql_way == got[0] and python_way[:3] == got[0][:3] and python_way[3] == attrs
    # ... to the type and order of each value (== takes 2 for 2.0)
    assert [json.dumps(a) for a in attrs] == [json.dumps(a) for a in sql_way[3]] == \
        [json.dumps(a) for a in python_way[3]]
    by_span = {r[1]: (r, a) for r, a in zip(rows, attrs)}
    first, first_attrs = by_span["0000000000000002"]
    assert first[:6] == ("00000000000000000000000000000001", "0000000000000002",
                         "00000000000000ab", "s1", "tool", "client")
    assert first[8:13] == ("error", "boom", "second", "h1", 42) and first[14] == 5
    assert first_attrs == {"s": "caf\u00e9 \u4e2d", "i": -7, "d": 0.25, "big": 1e300,
                           "b": False, "bytes": "AAEC", "empty": None, "whole": 2.0,
                           "negative_zero": -0.0, "otel.scope.name": "lib"}
    # a double stays a double (JSON's 2 would read back as an integer)
    assert [type(first_attrs[k]) for k in ("whole", "negative_zero")] == [float, float]
    assert str(first_attrs["negative_zero"]) == "-0.0"
    repeated, repeated_attrs = by_span["0000000000000033"]  # the last value, the first place
    assert repeated[14] == 7 and list(repeated_attrs.items()) == [
        ("server.address", "example.com"), ("x", 1), ("otel.scope.name", "lib")]
    second, second_attrs = by_span["0000000000000003"]
    assert second[2] is None and second[5] == "internal" and second[8] == "unset"
    assert (second[13], second[17], second[19]) == (-3, 12, None)  # tid, vcsw, majflt
    assert second[16] is None  # children beyond int32
    assert second_attrs == {"otel.scope.name": "own"}
    third, third_attrs = by_span["0000000000000004"]
    assert third[2] is None and third[5] == "consumer" and third[9] is None
    assert third[12] == 77 and third_attrs == {}


def test_the_analysis_reads_its_attributes_however_they_are_spelled(tmp_path):
    """analysis_input.sql parses a span's attributes only where one of the names it reads can
    be in the text: a name written with \\u escapes is still read, and attributes without
    any of them read as none."""
    write(tmp_path / "spans-a.jsonl", [
        rec(1, attrs={"server.address": "localhost", "gen_ai.latency.time_in_queue": 0.5}),
        rec(2, attrs={"note": "mentions server.address in a value"}),
        rec(3, attrs={"x": 1})])
    escaped = ('{"\\u0073erver.address": "127.0.0.1", '
               '"\\u0067en_ai.latency.time_in_queue": 0.25}')
    with Store(None) as store:
        assert store.load(tmp_path).spans_added == 3
        # (the readers decode escapes; a store written by other means may hold them)
        store.con.execute("INSERT INTO spans SELECT * REPLACE ('0000000000000004' AS span_id, "
                          "? AS attrs) FROM spans WHERE span_id = ?", [escaped, f"{3:016x}"])
        inp = store.analysis_input()
    got = {inp.span_id[i]: (bool(inp.server_local[i]), float(inp.queue_s[i]))
           for i in range(len(inp.span_id))}
    assert got == {f"{1:016x}": (True, 0.5), f"{2:016x}": (False, 0.0),
                   f"{3:016x}": (False, 0.0), f"{4:016x}": (True, 0.25)}


def test_an_unforeseen_failure_of_the_columns_falls_back_to_the_sql(tmp_path, monkeypatch):
    pytest.importorskip("pyarrow")
    from agentscope.store import otlp_arrow

    def broken(table):
        raise RuntimeError("not foreseen")

    (tmp_path / "a.jsonl").write_text(_otlp_line([_otlp_span(1, [_kv("k", stringValue="v")])]))
    monkeypatch.setattr(otlp_arrow, "_columns", broken)
    with Store(None) as store:
        assert store.load(tmp_path).spans_added == 1
        assert json.loads(store.query("SELECT attrs FROM spans").fetchall()[0][0]) == {
            "k": "v", "otel.scope.name": "lib"}


def test_a_span_repeated_in_one_file_keeps_its_first_line(tmp_path):
    # (the first of each span is at its later time: a sort by time would keep the other)
    firsts = [rec(n, start=T0 + 5000, end=T0 + 9000) for n in range(1, 3000)]
    again = [rec(n, start=T0, end=T0 + 100) for n in range(1, 3000)]
    write(tmp_path / "spans-h-1-1.jsonl", firsts + again[::-1])
    with agentscope.analyze(tmp_path, db=":memory:") as a:
        got = a.query("SELECT DISTINCT start_ns FROM spans")
        assert got["start_ns"].tolist() == [T0 + 5000]
        assert a.load.duplicates == 2999


def test_a_span_its_own_parent_names_its_trace_task(tmp_path):
    write(tmp_path / "spans-h-1-1.jsonl", [rec(1, parent=f"{1:016x}"),
                                           rec(2, parent=f"{1:016x}", start=T0 + 1200)])
    with agentscope.analyze(tmp_path, db=":memory:") as a:
        assert [t.trace_id for t in a.task_results] == ["a" * 32]


def test_of_a_repeated_id_in_a_large_file_the_first_line_is_kept(tmp_path):
    """A file large enough for DuckDB to read in parallel: of a span id on its first and
    its last line, the first is kept, every time (the store's connection keeps no insertion
    order of its own; staging does). Without it, the last was kept in 5 of 8 loads here."""
    from .test_parquet_rows import span_line

    filler = json.loads(span_line(5))
    with open(tmp_path / "spans-x-1-1.jsonl", "w") as f:
        f.write(span_line(1, span_id="a" * 16, name="first") + "\n")
        for i in range(200_000):
            filler["span_id"] = f"{i + 16:016x}"
            f.write(json.dumps(filler) + "\n")
        f.write(span_line(1, span_id="a" * 16, name="last") + "\n")
    for _ in range(4):
        store = Store(":memory:")
        report = store.load(tmp_path)
        assert (report.spans_added, report.duplicates) == (200_001, 1)
        assert store._x(f"SELECT name FROM spans WHERE span_id = '{'a' * 16}'") == \
            [("first",)]
        assert store._x("SELECT current_setting('preserve_insertion_order')") == [(False,)]
        store.close()


def test_spans_are_stored_in_trace_id_order(tmp_path, monkeypatch):
    """A load into a store in a file of loading.SORTED_SPANS spans or more inserts its spans
    in trace-id order (whatever order the files hold them in), so that a batch of traces (an
    id range) reads its own row groups: within one load the row ids follow the trace ids
    (of a repeated span the first line is still the one kept); a later load's rows come
    after, in their own order. A store in memory keeps the files' order."""
    from agentscope.store import loading

    monkeypatch.setattr(loading, "SORTED_SPANS", 150)
    ids = [f"{(k * 7919) % 101 + 1:032x}" for k in range(40)]  # ids out of order in the file
    # (span 7 twice, its second row later: the first line is kept, as unsorted)
    write(tmp_path / "spans-h-1-1.jsonl",
          [rec(n, trace=ids[n % 40]) for n in range(1, 201)]
          + [rec(7, trace=ids[7], name="again")])
    with Store(tmp_path / "db.duckdb") as store:
        first = store.load(tmp_path)
        assert (first.spans_added, first.duplicates) == (200, 1)
        stored = [t for (t,) in store.con.execute(
            "SELECT trace_id FROM spans ORDER BY rowid").fetchall()]
        assert len(stored) == 200 and stored == sorted(stored)
        assert store.con.execute(
            f"SELECT name FROM spans WHERE span_id = '{7:016x}'").fetchall() == [("s7",)]
        write(tmp_path / "spans-h-2-1.jsonl",
              [rec(n, trace=ids[n % 40]) for n in range(201, 261)])
        store.load(tmp_path)
        later = [t for (t,) in store.con.execute(
            "SELECT trace_id FROM spans WHERE rowid >= 200 ORDER BY rowid").fetchall()]
        assert len(later) == 60 and later == sorted(later)
    with Store() as memory:  # (in memory: not held to a limit, so not sorted)
        memory.load(tmp_path)
        kept = [t for (t,) in memory.con.execute(
            "SELECT trace_id FROM spans ORDER BY rowid").fetchall()]
        assert len(kept) == 260 and kept != sorted(kept)


def _memory_limit(store):
    return store.con.execute("SELECT current_setting('memory_limit')").fetchone()[0]


def test_a_store_in_a_file_is_capped_while_it_loads_and_saves(tmp_path, monkeypatch):
    """DuckDB is held to Store.capped's limit while a store in a file loads and saves an
    analysis (its sort by trace id spills rather than take the machine), and is given its
    own limit back after, even when the load fails; a nested cap keeps the outer one, and
    release_cache inside a cap restores it. A store in memory is never capped (its data is
    in memory)."""
    from agentscope.store import loading

    write(tmp_path / "spans-h-1-1.jsonl", [rec(i) for i in range(1, 6)])
    real_cap = Store.capped
    with Store(tmp_path / "db.duckdb") as store:
        default = _memory_limit(store)
        with store.capped("500MB"):
            capped = _memory_limit(store)
            with store.capped("1GB"):  # (the outer limit holds)
                assert _memory_limit(store) == capped
            store.release_cache()
            assert _memory_limit(store) == capped
        assert capped != default and _memory_limit(store) == default
        limits = []
        real_x = store._x

        def watched(statement, *args, **kwargs):
            if statement.lstrip().startswith("INSERT INTO"):
                limits.append((statement.split()[2], _memory_limit(store)))
            elif statement.strip() == "CHECKPOINT":
                limits.append(("CHECKPOINT", _memory_limit(store)))
            return real_x(statement, *args, **kwargs)

        monkeypatch.setattr(store, "_x", watched)
        monkeypatch.setattr(Store, "capped", lambda self, limit="500MB": real_cap(self, limit))
        store.load(tmp_path)
        assert {table for table, _ in limits} >= {"spans"}
        assert {limit for _, limit in limits} == {capped}
        # the save under its own limit, its checkpoint too (not at close, without one)
        monkeypatch.setattr(duckdb_store, "SAVE_MEMORY_LIMIT", "300MB")
        limits.clear()
        store.save_analysis({"trace_id": []}, {}, ())
        with store.capped("300MB"):
            saved = _memory_limit(store)
        assert saved != capped
        assert [table for table, _ in limits][-2:] == ["analysis_state", "CHECKPOINT"]
        assert {limit for _, limit in limits} == {saved}
        assert _memory_limit(store) == default

        def broken(*args, **kwargs):
            raise RuntimeError("broken")

        monkeypatch.setattr(loading.Loader, "load", broken)
        with pytest.raises(RuntimeError):
            store.load(tmp_path)
        assert _memory_limit(store) == default
    memory = Store()
    before = _memory_limit(memory)
    with memory.capped("64MB"):
        assert _memory_limit(memory) == before
    memory.close()


def test_a_load_out_of_memory_is_an_error_not_a_bad_file(tmp_path, monkeypatch):
    """DuckDB out of memory while a store loads (it is held to a limit: Store.capped) is not
    the file's fault: the load stops with a StoreError that says so, the file is neither
    named as a problem nor marked as read, and the next load reads it whole."""
    import duckdb

    from agentscope.errors import StoreError
    from agentscope.store import loading

    write(tmp_path / "spans-h-1-1.jsonl", [rec(i) for i in range(1, 6)])
    real = loading.Loader._insert_spans

    def out_of_memory(self, *args, **kwargs):
        raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block")

    with Store(tmp_path / "db.duckdb") as store:
        monkeypatch.setattr(loading.Loader, "_insert_spans", out_of_memory)
        with pytest.raises(StoreError, match="ran out of memory"):
            store.load(tmp_path)
        assert not store.problems()
        monkeypatch.setattr(loading.Loader, "_insert_spans", real)
        again = store.load(tmp_path)
        assert again.spans_added == 5 and not again.problems
