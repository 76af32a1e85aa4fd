"""The counter join inside ClickHouse (store/sql/clickhouse/section_counters.sql, through
``clickhouse.critical_paths(..., counters=COUNTER_JOIN)``) against the analysis' own
join
(analyzers/counters.section_means over the embedded store's counter series): the same
sections on the same hosts and processes get the same means, on sample_traces/ and on random
fleets with what the join treats apart (holes between collector runs, several series of a
metric, per-process metrics, GPUs a process holds memory on, hosts whose collector found no
GPU, sections the samples barely describe); and a table split in two by trace hash gives the
whole's means."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

import agentscope
from agentscope import metric_names as mn
from agentscope.analyzers.counters import (COUNTER_JOIN, GPU_OF_PROCESS, METRICS, NO_GPU,
                                         section_means)
from agentscope.exporters import clickhouse as clickhouse_out
from agentscope.store import clickhouse

REPO = Path(__file__).resolve().parents[1]
T0 = 1_800_000_000_000_000_000
FLAGS = (GPU_OF_PROCESS, NO_GPU)  # 0/1 per section: absent in ClickHouse's rows means 0


def _embedded(analysis) -> dict:
    """{(trace, section number): {metric: mean}} of the analysis' own join: section_means
    over the embedded store's series, each section on its span's host and pid. (Of a URL's
    analysis: the samples as they travel, one collector run per host, the samples table
    keeping no run.)"""
    secs = [(t.trace_id, k + 1, s.span_id, s.start_ns, s.end_ns)
            for t in analysis.task_results for k, s in enumerate(t.segments)]
    _, rows = analysis.query_rows("SELECT trace_id, span_id, host, pid FROM spans")
    owner = {(trace, span): (host, pid) for trace, span, host, pid in rows}
    hosts = np.asarray([owner.get((t, s), (None, None))[0] if s else None
                        for t, _, s, _, _ in secs], dtype=object)
    pids = np.asarray([owner.get((t, s), (None, None))[1] if s else -1
                       for t, _, s, _, _ in secs], dtype=object)
    pids = np.asarray([-1 if p is None else int(p) for p in pids], dtype=np.int64)
    with analysis._store.open() as store:
        series = store.counter_series(METRICS)
    means = section_means(series, hosts, np.asarray([x[3] for x in secs], dtype=np.int64),
                          np.asarray([x[4] for x in secs], dtype=np.int64), pids)
    out: dict = {}
    for metric, values in means.items():
        for (trace, k, *_), v in zip(secs, values.tolist()):
            if metric in FLAGS and v == 0.0 or metric not in FLAGS and math.isnan(v):
                continue
            out.setdefault((trace, k), {})[metric] = v
    return out


def _in_clickhouse(url: str, **kw) -> dict:
    out: dict = {}
    for trace, path in clickhouse.critical_paths(url, counters=COUNTER_JOIN, **kw).items():
        for metric, values in (path.counters or {}).items():
            for k, v in enumerate(values):
                if v is not None:
                    out.setdefault((trace, k + 1), {})[metric] = v
    return out


def _rows_in_clickhouse(url: str) -> list:
    """What the counter join's query itself gives: (trace, section, metric, mean) of every
    mean of every trace's row."""
    remote = clickhouse.parse(url)
    with clickhouse._reading(remote) as (con, table):
        query = clickhouse.counters_query(remote, COUNTER_JOIN, table, None,
                                          clickhouse._bounds(con, remote, table))
        rows = [json.loads(line) for line in con.text(query, "JSONEachRow").splitlines()]
    return [(row["trace_id"], sec, metric, mean) for row in rows
            for metric, secs, means in row["counters"] for sec, mean in zip(secs, means)]


def _assert_same(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for key in want:
        assert set(got[key]) == set(want[key]), key
        for metric, v in want[key].items():
            assert got[key][metric] == pytest.approx(v, rel=1e-9, abs=1e-9), (key, metric)


def test_sample_traces_get_the_same_counters_in_clickhouse(tmp_path):
    url = f"chdb://{tmp_path / 'ch'}?table=otel_traces"
    with agentscope.analyze(REPO / "sample_traces", db=":memory:") as direct:
        clickhouse_out.export(direct, url)
    with agentscope.analyze(url) as read:  # (the samples as the window's read loads them)
        want = _embedded(read)
    got = _in_clickhouse(url)
    _assert_same(got, want)
    metrics = {m for means in want.values() for m in means}
    # what sample_traces exercises: host counters, per-process ones, the run without a GPU
    assert {mn.SYSTEM_PRESSURE_CPU_SOME, mn.AGENTSCOPE_PYTHON_GIL_WAIT, NO_GPU} <= metrics
    assert len(want) > 200


def _fleet(rng: random.Random, directory: Path) -> None:
    """A random fleet as trace files: tasks on three hosts and several processes, and the
    counter samples the join reads (host series with a hole longer than MAX_HOLD_NS between
    two collector runs, GPUs per device and the processes holding memory on them, a
    per-process metric, a host whose collector found no GPU, series ending mid-task)."""
    directory.mkdir(parents=True)
    hosts = ["node-a", "node-b", "gpu-1"]
    spans, samples = [], []
    t = T0
    for task in range(40):
        host = rng.choice(hosts)
        pid = rng.choice([100, 200, 300])
        trace = f"{rng.getrandbits(128):032x}"
        root = f"{rng.getrandbits(64):016x}"
        start = t + rng.randrange(0, 2_000_000_000)
        length = rng.randrange(500_000_000, 8_000_000_000)
        t = start + rng.randrange(0, length)
        spans.append(dict(trace_id=trace, span_id=root, parent_span_id=None, name="task",
                          kind="internal", start_ns=start, end_ns=start + length, host=host,
                          pid=pid, stage="task"))
        at = start
        for _ in range(rng.randrange(1, 6)):
            a = at + rng.randrange(0, 300_000_000)
            b = min(a + rng.randrange(1, 3_000_000_000), start + length)
            if b <= a:
                break
            spans.append(dict(trace_id=trace, span_id=f"{rng.getrandbits(64):016x}",
                              parent_span_id=root, name=rng.choice(["llm", "tool"]),
                              kind="client", start_ns=a, end_ns=b,
                              host=rng.choice([host, host, None]), pid=pid,
                              stage=rng.choice(["inference", "tool"])))
            at = b
    end = t + 10_000_000_000

    def series(host, metric, first, last, every, pid=None, device=None, source="host.cpu"):
        ts = first
        while ts <= last:
            samples.append(dict(ts_ns=ts, host=host, pid=pid, source=source, device=device,
                                metric=metric, value=round(rng.random() * 2, 6)))
            ts += every + rng.randrange(0, every // 3)

    for host in hosts:
        # (node-a's collector starts 20 s late and stops 25 s early: its first and last
        # tasks are outside every series)
        t0 = T0 + (20_000_000_000 if host == "node-a" else 0)
        t1 = end - (25_000_000_000 if host == "node-a" else 0)
        # two collector runs with a hole of more than MAX_HOLD_NS (60 s) between them
        series(host, mn.SYSTEM_PRESSURE_CPU_SOME, t0 - 5_000_000_000, T0 + 30_000_000_000,
               700_000_000)
        series(host, mn.SYSTEM_PRESSURE_CPU_SOME, T0 + 95_000_000_000, t1, 700_000_000)
        series(host, mn.SYSTEM_CPU_RUN_QUEUE, t0, end - 40_000_000_000, 1_100_000_000)
        for pid in (100, 300):
            series(host, mn.AGENTSCOPE_PYTHON_GIL_WAIT, t0, t1, 900_000_000, pid=pid,
                   source="python")
    for device in ("0", "1"):
        series("gpu-1", mn.HW_GPU_UTILIZATION, T0, end, 500_000_000, device=device,
               source="gpu.nvidia")
    for device in ("0", "1"):  # (a process on two GPUs: the busier one's)
        series("gpu-1", mn.PROCESS_GPU_MEMORY_USAGE, T0, T0 + 2_000_000_000, 1_000_000_000,
               pid=200, device=device, source="gpu.nvidia")
    series("gpu-1", mn.PROCESS_GPU_MEMORY_USAGE, T0, T0 + 2_000_000_000, 1_000_000_000,
           pid=300, device="7", source="gpu.nvidia")  # a GPU with no utilization series
    for host in ("node-a",):  # its collector found no GPU
        for ts in (T0 + 15_000_000_000, end - 25_000_000_000):
            samples.append(dict(ts_ns=ts, host=host, pid=None, source="gpu.nvidia",
                                device=None, metric=mn.AGENTSCOPE_COLLECTOR_UP, value=0.0))
    for ts in (T0, end):
        samples.append(dict(ts_ns=ts, host="node-b", pid=None, source="gpu.nvidia",
                            device=None, metric=mn.AGENTSCOPE_COLLECTOR_UP, value=1.0))
    (directory / "spans-fleet-1-1.jsonl").write_text(
        "".join(json.dumps(s) + "\n" for s in spans))
    (directory / "samples-fleet-1-1-collector.jsonl").write_text(
        "".join(json.dumps(s) + "\n" for s in samples))


@pytest.mark.parametrize("seed", [1, 2])
def test_random_fleets_get_the_same_counters_in_clickhouse(tmp_path, seed):
    _fleet(random.Random(seed), tmp_path / "fleet")
    url = f"chdb://{tmp_path / 'ch'}?table=otel_traces"
    with agentscope.analyze(tmp_path / "fleet", db=":memory:") as direct:
        assert not direct.problems
        clickhouse_out.export(direct, url)
    with agentscope.analyze(url) as read:
        want = _embedded(read)
        spans = read.query_rows("SELECT count(*) FROM spans")[1][0][0]
    got = _in_clickhouse(url)
    _assert_same(got, want)
    metrics = {m for means in want.values() for m in means}
    assert {mn.SYSTEM_PRESSURE_CPU_SOME, mn.SYSTEM_CPU_RUN_QUEUE, mn.AGENTSCOPE_PYTHON_GIL_WAIT,
            mn.HW_GPU_UTILIZATION, GPU_OF_PROCESS, NO_GPU} <= metrics
    # one row a section and metric (a process's own GPUs replace the host's busiest)
    rows = _rows_in_clickhouse(url)
    assert len({row[:3] for row in rows}) == len(rows) > 0
    # a host without a GPU: only its sections within its collector's time are marked
    assert any(NO_GPU not in m and mn.SYSTEM_CPU_RUN_QUEUE not in m for m in want.values())
    # sections in the hole between two collector runs have the other series' means only
    assert any(mn.SYSTEM_CPU_RUN_QUEUE in m and mn.SYSTEM_PRESSURE_CPU_SOME not in m
               for m in want.values())
    # walked and joined in two parts split by trace hash, as shards would be: the whole's
    _assert_same(_in_clickhouse(url, part_spans=spans // 2 + 1), want)


def test_without_a_samples_table_paths_have_no_counters(tmp_path):
    url = f"chdb://{tmp_path / 'ch'}?table=otel_traces"
    with agentscope.analyze(REPO / "sample_traces" / "io", db=":memory:") as direct:
        clickhouse_out.export(direct, url)
    paths = clickhouse.critical_paths(url + "&samples=none_here", counters=COUNTER_JOIN)
    assert paths and all(p.counters == {} for p in paths.values())
    assert all(p.counters is None for p in clickhouse.critical_paths(url).values())


def test_paths_walked_with_their_counters_are_the_paths_walked_alone(tmp_path):
    """The counter join carries each path's row through it (the walk runs once): random
    trees with gaps, orphans, repeated ids and parent cycles (traces without a section) walk
    the same with counters as without."""
    from .test_clickhouse_paths import _random_rows, _table

    rows = _random_rows(random.Random(5), 120, 30)
    _table(tmp_path / "ch", rows)
    con = clickhouse._Apart(clickhouse.parse(f"chdb://{tmp_path / 'ch'}"))
    try:
        con.query(clickhouse._sql("agentscope_samples.sql").format(
            table="`default`.`agentscope_samples`"))
        first = min(start for _, _, _, start, _, _ in rows)
        con.query("INSERT INTO `default`.`agentscope_samples` VALUES " + ", ".join(
            f"(fromUnixTimestamp64Nano(toInt64({first + k * 10**9})), 'h', NULL, 'host.cpu', "
            f"NULL, 'system.pressure.cpu.some', 0.5)" for k in range(3)))
    finally:
        con.close()
    url = f"chdb://{tmp_path / 'ch'}"
    alone = clickhouse.critical_paths(url)
    joined = clickhouse.critical_paths(url, counters=COUNTER_JOIN)
    assert set(joined) == set(alone) and any(not p.sections for p in alone.values())
    for trace, path in alone.items():
        assert joined[trace][:6] == path[:6], trace
        assert joined[trace].counters == {}  # (no span names host h)


def test_a_host_without_a_gpu_and_no_counters_gets_no_mark(tmp_path):
    """section_means gives nothing where no section is on a host with a series of the
    metrics; a collector that found no GPU (and sampled nothing else the join reads) marks
    nothing in ClickHouse either."""
    rng = random.Random(3)
    _fleet(rng, tmp_path / "fleet")
    samples = tmp_path / "fleet" / "samples-fleet-1-1-collector.jsonl"
    kept = [line for line in samples.read_text().splitlines()
            if json.loads(line)["metric"] == mn.AGENTSCOPE_COLLECTOR_UP]
    samples.write_text("\n".join(kept) + "\n")
    url = f"chdb://{tmp_path / 'ch'}?table=otel_traces"
    with agentscope.analyze(tmp_path / "fleet", db=":memory:") as direct:
        clickhouse_out.export(direct, url)
    with agentscope.analyze(url) as read:
        assert _embedded(read) == {}
    assert _in_clickhouse(url) == {} and _rows_in_clickhouse(url) == []
