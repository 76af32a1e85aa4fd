"""The analysis' input computed in ClickHouse (store/sql/clickhouse/analysis_input.sql,
``clickhouse.analysis_inputs``) against the embedded store's (store/sql/analysis_input.sql)
of the same window: every column of every row equal, on sample_traces/, on random trees (the
walk's: orphans, cycles, repeated ids, rows the store refuses) and on random spans with the
attributes the classifier reads (accounting, errors and timeouts, server-reported latencies,
endpoints, stages from the conventions); and the analysis over it
(``agentscope.analyze(URL&input=clickhouse)``) equal to its analysis over the spans read
into the store, whole and in parts."""

from __future__ import annotations

import dataclasses
import json
import random
import re
from pathlib import Path

import numpy as np
import pytest

import agentscope
from agentscope.analysis import core
from agentscope.exporters import clickhouse as clickhouse_out
from agentscope.store import clickhouse

from .test_clickhouse_paths import _random_rows, _table

REPO = Path(__file__).resolve().parents[1]
T0 = 1_800_000_000_000_000_000


def _assert_same_inputs(url: str) -> int:
    """The input ClickHouse computes for ``url`` (one part) equals the embedded store's
    (the window read and loaded); host_hash only as a grouping (the two hash differently).
    Returns the rows."""
    store, _, _ = core._load(url, None, None, False)
    try:
        want = store.analysis_input(with_counters=True)
    finally:
        store.close()
    got = list(clickhouse.analysis_inputs(url, with_counters=True, parts=1))
    if not len(want):
        assert not got
        return 0
    assert len(got) == 1
    got = got[0]
    for field in dataclasses.fields(want):
        a = np.asarray(getattr(want, field.name))
        b = np.asarray(getattr(got, field.name))
        assert a.dtype == b.dtype or a.dtype == object or b.dtype == object, field.name
        if field.name == "host_hash":  # the same grouping of the spans
            assert len(set(zip(a.tolist(), b.tolist()))) == len(set(a.tolist())) \
                == len(set(b.tolist()))
            continue
        assert a.tolist() == b.tolist(), field.name
    return len(want)


def _results(analysis) -> tuple:
    """What an analysis found and said: its task and section columns, the evidence in words,
    the summary, problems, warnings and the load's counts."""
    fleet = core.Fleet(analysis.task_results, analysis.sections, analysis.summary, ())
    load = analysis.load
    return (core._task_columns(fleet),
            {k: np.asarray(v).tolist() for k, v in core._section_columns(fleet).items()},
            [s.evidence for t in analysis.task_results for s in t.segments],
            # (a refused row is named by its number in what was read: over ClickHouse's
            # input, only the refused rows are read)
            analysis.summary, sorted(re.sub(r"\(span rows\):\d+", "(span rows)", str(p))
                                     for p in analysis.problems), analysis.warnings,
            (load.files_seen, load.files_loaded, load.spans_added, load.samples_added,
             load.duplicates, len(load.problems)))


def _assert_same_analysis(url: str, monkeypatch, part_spans: "int | None" = None) -> int:
    """agentscope.analyze of ``url`` over ClickHouse's input (``&input=clickhouse``; parts
    of ``part_spans``) finds and says what it does over the spans read into the store, and
    its store reads the spans when asked."""
    with agentscope.analyze(url) as direct:
        want = _results(direct)
        spans = direct.query_rows("SELECT count(*), count(DISTINCT trace_id) FROM spans")[1]
    if part_spans is not None:
        monkeypatch.setattr(core, "INPUT_PART_SPANS", part_spans)
    with agentscope.analyze(url + "&input=clickhouse") as over_input:
        # what reads samples only does not read the spans
        over_input.latest_samples(["system.cpu.utilization"])
        assert over_input._store._fill is not None
        assert over_input.query_rows("SELECT count(*) FROM task_results")[1][0][0] == \
            len(want[0]["trace_id"])
        got = _results(over_input)
        assert got == want
        # the spans, read when first asked for (the saved results are kept)
        assert over_input.query_rows(
            "SELECT count(*), count(DISTINCT trace_id) FROM spans")[1] == spans
        assert over_input.whatif("stage:tool=2").to_dict()["tasks"]
        assert _results(over_input) == want
    return len(want[0]["trace_id"])


@pytest.fixture(scope="module")
def sample_url(tmp_path_factory):
    url = f"chdb://{tmp_path_factory.mktemp('ch') / 'ch'}?table=otel_traces"
    with agentscope.analyze(REPO / "sample_traces", db=":memory:") as direct:
        clickhouse_out.export(direct, url)
    return url


def test_sample_traces_input_is_the_same_in_clickhouse(sample_url):
    assert _assert_same_inputs(sample_url) > 200


@pytest.mark.parametrize("part_spans", [None, 40])
def test_sample_traces_analysed_over_clickhouse_input_as_the_embedded(sample_url, part_spans,
                                                                      monkeypatch):
    # (sample_traces has process trees and loops: one part whatever part_spans says)
    assert _assert_same_analysis(sample_url, monkeypatch, part_spans) == 50


@pytest.mark.parametrize("seed", [1, 2])
def test_random_trees_input_is_the_same_in_clickhouse(tmp_path, seed, monkeypatch):
    rows = _random_rows(random.Random(seed), 60, 40)
    _table(tmp_path / "ch", rows)
    url = f"chdb://{tmp_path / 'ch'}?table=otel_traces"
    assert _assert_same_inputs(url) > 500
    # no process, loop or tree couples these traces: parts of a few traces each
    counts: dict = {}
    assert len(list(clickhouse.analysis_inputs(url, part_spans=300, counts=counts))) > 1
    assert counts["parts"] > 1
    assert _assert_same_analysis(url, monkeypatch, part_spans=300) >= 60


def _attributed_spans(rng: random.Random) -> list:
    """Span file rows with what the classifier reads: accounting of threads and children,
    processes and threads (a child on the parent's thread, on another thread, in another
    process), server-reported latencies (with blanks around a number, a decimal where an
    integer belongs), endpoints (server.address[:port], url.full with credentials, local
    addresses), lanes, errors and timeouts (by message, error.type and exception event), and
    stages given and left to the conventions."""
    out = []
    for task in range(30):
        trace = f"{rng.getrandbits(128):032x}"
        root = f"{rng.getrandbits(64):016x}"
        start = T0 + task * 3_000_000_000
        end = start + rng.randrange(1_000_000_000, 2_500_000_000)
        host = rng.choice(["h1", "h2", None])
        pid = rng.choice([10, 11])
        out.append(dict(trace_id=trace, span_id=root, parent_span_id=None, name="task",
                        kind="internal", start_ns=start, end_ns=end, host=host, pid=pid,
                        tid=1, stage="task", thread_cpu_ns=rng.randrange(0, 10**9),
                        attrs={"agentscope.lane": rng.choice(["online", "batch", ""])}))
        parents = [(root, start, end)]
        for k in range(rng.randrange(2, 9)):
            pid_, a0, b0 = rng.choice(parents)
            a = rng.randrange(a0, b0)
            b = min(b0, a + rng.randrange(1, 600_000_000))
            sid = f"{rng.getrandbits(64):016x}"
            attrs: dict = {}
            roll = rng.random()
            stage = None
            if roll < 0.3:
                attrs["gen_ai.operation.name"] = rng.choice(["chat", "execute_tool", "Chat"])
                attrs["gen_ai.latency.time_in_queue"] = rng.choice(["0.05", " 0.2 ", "x",
                                                                     "0.1\n"])
                attrs["gen_ai.latency.time_in_model_prefill"] = "0.01"
                attrs["gen_ai.latency.time_in_model_decode"] = str(rng.random())
                attrs[rng.choice(["server.address", "url.full"])] = rng.choice(
                    ["localhost", "api.example.com", "https://u:p@api.example.com:8443/v1",
                     "http://[::1]:8000/x", "127.0.0.1"])
                if rng.random() < 0.5:
                    attrs["server.port"] = "443"
            elif roll < 0.5:
                stage = rng.choice(["tool", "inference", "env", "memory", "queue"])
                # (decimals where integers belong: halves round away from zero; blanks)
                attrs["agentscope.workers.cpu_ns"] = rng.choice(["1000", "2.6", " 7 ", "2.5",
                                                                 "0.5", "\t9\n"])
                attrs["agentscope.children.ctx_switches.voluntary"] = rng.choice(
                    [str(rng.randrange(50)), "2.5", "1e1"])
                attrs["agentscope.children.ctx_switches.involuntary"] = rng.choice(
                    ["3.4", "4.5", " 2"])
                attrs["agentscope.children.run_delay_ns"] = "1200"
                attrs["agentscope.children.own_cpu_ns"] = "900"
                attrs["agentscope.cpu.thread_system_ns"] = "5000"
            elif roll < 0.6:
                attrs["db.system"] = "postgresql"
            status, message, events = "unset", None, []
            if rng.random() < 0.2:
                status = "error"
                message = rng.choice([None, "read timed out", "boom", "DEADLINE_EXCEEDED"])
                if rng.random() < 0.5:
                    attrs["error.type"] = rng.choice(["TimeoutError", "ValueError"])
                if rng.random() < 0.5:
                    events = [{"name": "exception", "time_ns": a,
                               "attrs": {"exception.type": rng.choice(["ReadTimeout", "E"])}}]
            out.append(dict(
                trace_id=trace, span_id=sid, parent_span_id=pid_, name=f"op{k}",
                kind=rng.choice(["internal", "client", "producer", "consumer"]), start_ns=a,
                end_ns=b, host=host, pid=rng.choice([pid, pid, 99]), tid=rng.choice([1, 1, 2]),
                stage=stage, status=status, status_message=message, events=events,
                thread_cpu_ns=rng.choice([None, rng.randrange(0, 10**8)]),
                child_cpu_ns=rng.choice([None, rng.randrange(0, 10**8)]),
                majflt=rng.choice([None, 3]), child_majflt=rng.choice([None, 2]),
                vcsw=rng.randrange(0, 9), ivcsw=rng.randrange(0, 9), attrs=attrs))
            parents.append((sid, a, b))
    return out


def _exported(tmp_path: Path, rows: list) -> str:
    """The URL of a chdb table that ``agentscope export clickhouse`` made of span file
    ``rows`` (loaded without a problem)."""
    (tmp_path / "spans").mkdir()
    (tmp_path / "spans" / "spans-a-1-1.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows))
    url = f"chdb://{tmp_path / 'ch'}?table=otel_traces"
    with agentscope.analyze(tmp_path / "spans", db=":memory:") as direct:
        assert not direct.problems
        clickhouse_out.export(direct, url)
    return url


@pytest.mark.parametrize("seed", [1, 2])
def test_spans_with_attributes_input_is_the_same_in_clickhouse(tmp_path, seed, monkeypatch):
    rows = _attributed_spans(random.Random(seed))
    url = _exported(tmp_path, rows)
    assert _assert_same_inputs(url) == len(rows)
    assert _assert_same_analysis(url, monkeypatch, part_spans=50) == 30


def test_an_event_loop_couples_the_traces(tmp_path, monkeypatch):
    rows = [dict(trace_id=f"{k + 1:032x}", span_id=f"{k + 1:016x}", parent_span_id=None,
                 name="t", kind="internal", start_ns=T0, end_ns=T0 + 10, stage="task",
                 attrs={"agentscope.cpu.scope": "loop"} if k == 1 else {}) for k in range(3)]
    url = _exported(tmp_path, rows)
    counts: dict = {}
    assert len(list(clickhouse.analysis_inputs(url, part_spans=1, parts=3,
                                               counts=counts))) == 1
    assert counts == {"rows": 3, "parts": 1, "spans": 3}
    assert _assert_same_analysis(url, monkeypatch, part_spans=1) == 3


def test_an_empty_window_gives_no_input_and_no_task(tmp_path):
    rows = [dict(trace_id=f"{1:032x}", span_id=f"{1:016x}", parent_span_id=None, name="t",
                 kind="internal", start_ns=T0, end_ns=T0 + 10)]
    url = _exported(tmp_path, rows) + "&service=nobody"
    assert list(clickhouse.analysis_inputs(url)) == []
    with agentscope.analyze(url + "&input=clickhouse") as empty:
        assert empty.task_results == () and not empty.problems


def test_an_orphan_is_adopted_by_the_innermost_enclosing_root(tmp_path):
    # two true roots from the same start (the shorter is the innermost) and one starting
    # later; an orphan inside all three (the later start adopts it) and one inside the first
    # two only (the earlier end adopts it)
    trace = f"{7:032x}"
    rows = [dict(trace_id=trace, span_id=f"{k:016x}", parent_span_id=None, name=f"r{k}",
                 kind="internal", start_ns=T0 + a, end_ns=T0 + b)
            for k, a, b in ((1, 0, 100), (2, 0, 60), (3, 5, 95))]
    rows.append(dict(trace_id=trace, span_id=f"{9:016x}", parent_span_id=f"{8:016x}",
                     name="orphan", kind="internal", start_ns=T0 + 10, end_ns=T0 + 50))
    rows.append(dict(trace_id=trace, span_id=f"{10:016x}", parent_span_id=f"{8:016x}",
                     name="orphan", kind="internal", start_ns=T0 + 1, end_ns=T0 + 4))
    url = _exported(tmp_path, rows)
    assert _assert_same_inputs(url) == 5
    (inp,) = clickhouse.analysis_inputs(url, parts=1)
    rows_of = {s: k for k, s in enumerate(inp.span_id.tolist())}
    assert inp.parent_idx[rows_of[f"{9:016x}"]] == rows_of[f"{3:016x}"]
    assert inp.parent_idx[rows_of[f"{10:016x}"]] == rows_of[f"{2:016x}"]


def test_the_input_option_of_a_url():
    assert clickhouse.parse("chdb:///x?table=t").input == "store"
    assert clickhouse.parse("chdb:///x?table=t&input=clickhouse").input == "clickhouse"
    with pytest.raises(agentscope.errors.StoreError, match="store or clickhouse, not 'duckdb'"):
        clickhouse.parse("chdb:///x?input=duckdb")


def test_text_that_is_not_utf8_reads_as_a_full_read_reads_it(tmp_path, monkeypatch):
    # ClickHouse strings are bytes: a service, host and server address with a bad byte
    path = tmp_path / "ch"
    con = clickhouse._Apart(clickhouse.parse(f"chdb://{path}"))
    try:
        con.query(clickhouse._sql("otel_traces.sql").format(table="`default`.`otel_traces`"))
        con.query(
            "INSERT INTO `default`.`otel_traces` (Timestamp, TraceId, SpanId, ParentSpanId, "
            "SpanName, SpanKind, ServiceName, ResourceAttributes, ScopeName, SpanAttributes, "
            "Duration, StatusCode, StatusMessage, `Events.Timestamp`, `Events.Name`, "
            "`Events.Attributes`, `Links.TraceId`, `Links.SpanId`, `Links.TraceState`, "
            "`Links.Attributes`) VALUES "
            f"(fromUnixTimestamp64Nano(toInt64({T0})), '{1:032x}', '{1:016x}', '', "
            "concat('task', unhex('ff')), 'Internal', concat('svc', unhex('fe')), "
            "map('host.name', concat('h', unhex('ff'))), '', "
            "map('agentscope.stage', 'task', 'agentscope.lane', concat('l', unhex('c3'))), "
            "1000, 'Unset', '', [], [], [], [], [], [], []), "
            f"(fromUnixTimestamp64Nano(toInt64({T0 + 10})), '{1:032x}', '{2:016x}', "
            f"'{1:016x}', 'llm', 'Client', concat('svc', unhex('fe')), map(), '', "
            "map('gen_ai.operation.name', 'chat', 'server.address', "
            "concat('api', unhex('ff'))), 500, 'Unset', '', [], [], [], [], [], [], [])")
    finally:
        con.close()
    url = f"chdb://{path}?table=otel_traces"
    assert _assert_same_inputs(url) == 2
    assert _assert_same_analysis(url, monkeypatch) == 1


def test_closing_an_analysis_waits_for_a_fill_under_way(tmp_path):
    """close() removes a temporary store only once a fill of its spans (another thread's
    query, reading them in) is done: not under the fill's feet."""
    import tempfile
    import threading

    from agentscope.store.duckdb_store import Store

    temporary = tempfile.TemporaryDirectory(dir=tmp_path)
    store = Store(Path(temporary.name) / "analysis.duckdb")
    store.temporary = temporary
    started, release, order = threading.Event(), threading.Event(), []

    def fill(store):
        started.set()
        release.wait(30)
        order.append("filled")

    ref = core._StoreRef(store, fill)
    store.close()
    cleanup = temporary.cleanup
    temporary.cleanup = lambda: (order.append("removed"), cleanup())
    reader = threading.Thread(target=ref._filled)
    reader.start()
    assert started.wait(30)
    closer = threading.Thread(target=ref.close)
    closer.start()
    closer.join(0.5)
    release.set()
    closer.join(30)
    reader.join(30)
    assert order == ["filled", "removed"]
    assert not Path(temporary.name).exists()
    with pytest.raises(ValueError, match="closed"):
        ref.read("SELECT 1", False)


@pytest.mark.parametrize("parts", [1, 2, 3, 7, 40])
def test_hash_ranges_cover_every_hash_once(parts):
    ranges = clickhouse.hash_ranges(parts)
    assert len(ranges) == parts and ranges[0][0] == 0 and ranges[-1][1] == 2 ** 64 - 1
    assert all(lo <= hi for lo, hi in ranges)
    assert all(b[0] == a[1] + 1 for a, b in zip(ranges, ranges[1:]))
    sizes = [hi - lo + 1 for lo, hi in ranges]
    assert max(sizes) - min(sizes) <= 1
