"""The critical path walked inside ClickHouse (store/sql/clickhouse/critical_path.sql) against
the walk of the embedded store (DuckDB, then analyzers/critical_path.py): the same traces give
the same sections (span ids and times), the same path bounds and the same spans left off, on
sample_traces/, on every corpus trace that loads, on random trees with what the walk treats
apart, on traces of 20k+ spans; and a table split in two by cityHash64(TraceId) % 2, each half
walked apart, gives the walks of the whole."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import agentscope
from agentscope.exporters import clickhouse as clickhouse_out
from agentscope.store import clickhouse

from .test_corpus import CORPUS, EXPECTED

REPO = Path(__file__).resolve().parents[1]
T0 = 1_800_000_000_000_000_000


def _walks_of(analysis) -> dict:
    """{trace_id: (sections, start, end, off_path)} of an analysis (the embedded store's)."""
    return {t.trace_id: ([(s.span_id, s.start_ns, s.end_ns) for s in t.segments],
                         t.start_ns, t.start_ns + t.duration_ns, t.off_path)
            for t in analysis.task_results}


def _walks_in_clickhouse(url: str) -> dict:
    """The same, walked in ClickHouse; traces without a root have no task there either."""
    return {trace: ([tuple(s) for s in p.sections], p.start, p.end, p.off_path)
            for trace, p in clickhouse.critical_paths(url).items() if p.roots}


def _assert_same(url: str, analysis=None) -> dict:
    """The walks of ``url`` in ClickHouse equal those of ``analysis`` (default: the embedded
    store's analysis of ``url``)."""
    if analysis is None:
        analysis = agentscope.analyze(url)
    want = _walks_of(analysis)
    got = _walks_in_clickhouse(url)
    assert set(got) == set(want)
    for trace in want:
        assert got[trace] == want[trace], trace
    return got


def test_sample_traces_walk_the_same_in_clickhouse(tmp_path):
    url = f"chdb://{tmp_path / 'ch'}?table=otel_traces"
    with agentscope.analyze(REPO / "sample_traces", db=":memory:") as direct:
        clickhouse_out.export(direct, url)
        got = _assert_same(url, direct)
    assert len(got) == 50 and sum(len(w[0]) for w in got.values()) > 200


def _corpus_files() -> list:
    files = sorted(EXPECTED)
    files += sorted(str(p.relative_to(CORPUS)) for p in CORPUS.glob("otlp_examples/**/*.json"))
    files += sorted(str(p.relative_to(CORPUS)) for p in CORPUS.glob(
        "jaeger_critical_path/raw_jaeger_input/*.json"))
    return files


def test_every_corpus_trace_that_loads_walks_the_same_in_clickhouse(tmp_path):
    walked = 0
    for k, rel in enumerate(_corpus_files()):
        try:
            direct = agentscope.analyze(CORPUS / rel)
        except agentscope.errors.AgentscopeError:
            continue  # (a file that does not load: nothing to compare)
        with direct:
            if not direct.task_results:
                continue
            url = f"chdb://{tmp_path / 'ch'}?table=t{k}"
            clickhouse_out.export(direct, url)
            _assert_same(url, direct)
            walked += 1
    assert walked >= len(EXPECTED)


def _hex(rng, digits: int) -> str:
    return f"{rng.getrandbits(4 * digits) | 1:0{digits}x}"


def _random_rows(rng, traces: int, most: int, mixed_case: bool = True) -> list:
    """Rows for otel_traces: random trees with fan-out, overlapping and abutting children,
    children outside their parent, zero-length spans, producers and consumers, orphans,
    several true roots with gaps and overlaps, a span its own parent, parent cycles,
    repeated span ids (at other times, or at the same time under another parent or of another
    kind), ids in upper case (some rows of a trace, or without ``mixed_case``
    whole traces, as one client writes them); and rows the store refuses."""
    rows = []
    for _ in range(traces):
        trace = _hex(rng, 32)
        spans = []  # (id, parent, start, end, kind)
        for i in range(rng.randint(1, most)):
            sid = _hex(rng, 16)
            roll = rng.random()
            if i == 0 or roll < 0.06:  # a (further) root
                parent = None
                start = T0 + rng.randint(0, 200) * 1000
                end = start + rng.choice([0, rng.randint(1, 400) * 1000])
            elif roll < 0.12:  # an orphan
                parent = _hex(rng, 16)
                start = T0 + rng.randint(-50, 300) * 1000
                end = start + rng.randint(0, 100) * 1000
            else:
                p = spans[rng.randrange(len(spans))]
                parent = p[0]
                length = max(p[3] - p[2], 1)
                shape = rng.random()
                if shape < 0.15 and len(spans) > 1:  # abutting the previous span
                    start = spans[-1][3]
                elif shape < 0.25:  # outside or across the parent's edges
                    start = p[2] + rng.randint(-length, 2 * length)
                else:
                    start = p[2] + rng.randint(0, length)
                end = start + rng.choice([0, 1000, rng.randint(1, max(length, 2))])
            kind = rng.choice(["Internal"] * 5 + ["Producer", "Consumer", "Client", "Server"])
            spans.append((sid, parent, start, end, kind))
        if rng.random() < 0.1:  # a span its own parent
            s = spans[-1]
            spans[-1] = (s[0], s[0], *s[2:])
        if rng.random() < 0.1 and len(spans) > 2:  # a parent cycle of two
            a, b = spans[-1], spans[-2]
            spans[-1], spans[-2] = (a[0], b[0], *a[2:]), (b[0], a[0], *b[2:])
        for s in list(spans):
            roll = rng.random()
            if roll < 0.04:  # the same span id again, at another time
                spans.append((s[0], s[1], s[2] + rng.randint(-3, 3) * 1000,
                              s[3] + rng.randint(0, 3) * 1000, s[4]))
            elif roll < 0.07:  # ... at the same time, under another parent or none, or of
                # another kind (which row is kept: the parent, none last, then the kind)
                other = rng.choice([None, spans[rng.randrange(len(spans))][0], s[1]])
                spans.append((s[0], other, s[2], s[3], rng.choice([s[4], "Internal", "Producer",
                                                                   "Consumer"])))
        upper = rng.random() < 0.1
        for sid, parent, start, end, kind in spans:
            if mixed_case:
                upper = rng.random() < 0.1
            rows.append((trace.upper() if upper else trace, sid.upper() if upper else sid,
                         parent or "", start, max(end - start, 0), kind))
    trace = _hex(rng, 32)  # refused by the store, so left out of both walks
    rows.append(("not-hex", _hex(rng, 16), "", T0, 5, "Internal"))
    rows.append((trace, "0000000000000000", "", T0, 5, "Internal"))
    rows.append((trace, _hex(rng, 16), "", 5, 5, "Internal"))
    return rows


def _table(path: Path, rows: list, table: str = "otel_traces") -> None:

    con = clickhouse._Apart(clickhouse.parse(f"chdb://{path}"))
    try:
        con.query(clickhouse._sql("otel_traces.sql").format(table=f"`default`.`{table}`"))
        chunks = [rows[lo:lo + 5000] for lo in range(0, len(rows), 5000)]
        for chunk in chunks:
            con.query(f"INSERT INTO `default`.`{table}` (Timestamp, TraceId, SpanId, "
                      "ParentSpanId, SpanName, SpanKind, ServiceName, ResourceAttributes, "
                      "ScopeName, SpanAttributes, Duration, StatusCode, StatusMessage, "
                      "`Events.Timestamp`, `Events.Name`, `Events.Attributes`, "
                      "`Links.TraceId`, `Links.SpanId`, `Links.TraceState`, "
                      "`Links.Attributes`) VALUES " + ", ".join(
                          f"(fromUnixTimestamp64Nano(toInt64({start})), '{trace}', '{span}', "
                          f"'{parent}', 'op', '{kind}', 'svc', map(), '', map(), {duration}, "
                          "'Unset', '', [], [], [], [], [], [], [])"
                          for trace, span, parent, start, duration, kind in chunk))
    finally:
        con.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_trees_walk_the_same_in_clickhouse(tmp_path, seed):
    rng = random.Random(seed)
    _table(tmp_path / "ch", _random_rows(rng, 150, 40))
    got = _assert_same(f"chdb://{tmp_path / 'ch'}")
    # what the walk treats apart is there: gaps between roots, spans left off, and more
    assert any(s[0] is None for w in got.values() for s in w[0])
    assert sum(w[3] for w in got.values()) > 0
    # (a root repeated under a parent can leave its trace without one: no task, in both)
    assert len(got) >= 145


def test_traces_of_20k_spans_walk_the_same_in_clickhouse(tmp_path):
    rng = random.Random(7)
    rows = _random_rows(rng, 2, 3)[:-3]
    for shape in ("wide", "deep"):
        trace = _hex(rng, 32)
        ids = [_hex(rng, 16) for _ in range(22_000)]
        for i, sid in enumerate(ids):
            if shape == "wide":  # a root over 21,999 overlapping children
                parent = "" if i == 0 else ids[0]
                start = T0 + (0 if i == 0 else rng.randint(0, 10**9))
                duration = 2 * 10**9 if i == 0 else rng.randint(0, 10**7)
            else:  # chains of 100 under a root, each a little inside its parent
                parent = "" if i == 0 else ids[i - 1] if i % 100 else ids[0]
                start = T0 + (i % 100) * 1000 + (i // 100) * 10**6
                duration = 10**9 if i == 0 else 10**6 - 2000 * (i % 100)
            rows.append((trace, sid, parent, start, max(duration, 0), "Internal"))
    _table(tmp_path / "ch", rows)
    got = _assert_same(f"chdb://{tmp_path / 'ch'}")
    assert max(len(w[0]) for w in got.values()) > 100


def test_a_table_split_by_trace_hash_walks_as_the_whole(tmp_path):
    """Two shards (cityHash64(TraceId) % 2, as a Distributed table sharded by trace id puts
    them), each walked apart: their union is the walk of the whole table."""

    # (a trace whose rows spell its id in two cases would be sharded apart: one client
    # writes one spelling)
    _table(tmp_path / "ch", _random_rows(random.Random(5), 120, 30, mixed_case=False))
    con = clickhouse._Apart(clickhouse.parse(f"chdb://{tmp_path / 'ch'}"))
    try:
        for shard in (0, 1):
            con.query(clickhouse._sql("otel_traces.sql").format(
                table=f"`default`.`shard{shard}`"))
            con.query(f"INSERT INTO shard{shard} SELECT * FROM otel_traces "
                      f"WHERE cityHash64(TraceId) % 2 = {shard}")
    finally:
        con.close()
    whole = clickhouse.critical_paths(f"chdb://{tmp_path / 'ch'}")
    halves = [clickhouse.critical_paths(f"chdb://{tmp_path / 'ch'}?table=shard{shard}")
              for shard in (0, 1)]
    assert halves[0] and halves[1] and not set(halves[0]) & set(halves[1])
    assert {**halves[0], **halves[1]} == whole


def test_a_missing_table_or_directory_is_named(tmp_path):
    with pytest.raises(agentscope.errors.StoreError, match="no such chdb data directory"):
        clickhouse.critical_paths(f"chdb://{tmp_path / 'absent'}")
    _table(tmp_path / "ch", _random_rows(random.Random(1), 2, 3))
    with pytest.raises(agentscope.errors.StoreError, match="no table default.nope"):
        clickhouse.critical_paths(f"chdb://{tmp_path / 'ch'}?table=nope")


def test_chdb_leaves_no_open_files_in_this_process(tmp_path):
    """chdb runs in a child process: its engine's threads each hold files of /proc open, and
    a process that ran many queries in-process collected hundreds of descriptors (past
    select()'s 1024, where the sidecar's tests then failed)."""
    import os

    _table(tmp_path / "ch", _random_rows(random.Random(3), 20, 20))
    url = f"chdb://{tmp_path / 'ch'}"
    clickhouse.critical_paths(url)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(4):
        clickhouse.critical_paths(url)
        with agentscope.analyze(url) as a:
            clickhouse_out.export(a, f"{url}?table=copy")
    assert len(os.listdir("/proc/self/fd")) <= before + 2


def test_a_large_window_walked_in_parts_walks_as_the_whole(tmp_path):
    """Past part_spans rows, the traces are walked in parts by the hash of their id (as
    shards would): the same paths, and a trace whose rows spell its id in two cases stays
    whole."""
    _table(tmp_path / "ch", _random_rows(random.Random(9), 100, 30))
    url = f"chdb://{tmp_path / 'ch'}"
    whole = clickhouse.critical_paths(url)
    assert clickhouse.critical_paths(url, part_spans=300) == whole
    assert len(whole) == 100


def test_a_window_walks_the_traces_the_analysis_reads(tmp_path):
    url = f"chdb://{tmp_path / 'ch'}?table=otel_traces"
    with agentscope.analyze(REPO / "sample_traces", db=":memory:") as direct:
        clickhouse_out.export(direct, url)
        starts = sorted(t.start_ns for t in direct.task_results)
    since = starts[len(starts) // 2] // 10**9
    got = _assert_same(f"{url}&since={since}")
    assert 0 < len(got) < len(starts)
