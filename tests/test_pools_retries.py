"""Pools, timeouts and retries: a thread pool's jobs that waited for a worker are recorded as
``queue`` spans (capture/propagation.py), and the critical-path time lost to timeouts and to
retried failures (analyzers/reliability.py).

Times are asserted as lower bounds derived from the sleeps the workloads make (a loaded
machine only makes waits longer), never as upper bounds."""

from __future__ import annotations

import concurrent.futures
import json
import time
import types

import numpy as np
import pytest

import agentscope
from agentscope.analyzers.reliability import failed_attempts, lost_time, timeout_origins
from agentscope.capture import propagation
from agentscope.store.duckdb_store import Store

SLEEP = 0.2  # each blocking tool's sleep (s)
NS = 1_000_000_000
EPS = 1_000_000  # 1 ms of slack between timestamps taken by different threads


def _pool_task(workers: int, jobs: int, sleep: float = SLEEP, prefix: str = "") -> None:
    def tool(i: int) -> None:
        with agentscope.stage("tool", name=f"tool-{i}"):
            time.sleep(sleep)

    with agentscope.task(name="fan-out"):
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers,
                                                   thread_name_prefix=prefix) as pool:
            for f in [pool.submit(tool, i) for i in range(jobs)]:
                f.result()


def _spans(analysis) -> list:
    """Every span of the store with what these tests read of it."""
    frame = analysis.query(
        "SELECT span_id, parent_span_id, name, stage, start_ns, end_ns, tid, thread_cpu_ns, "
        "vcsw, attrs, status FROM spans ORDER BY start_ns")
    rows = frame.to_dict("records")
    for r in rows:
        r["attrs"] = json.loads(r["attrs"] or "{}")
        for k in ("tid", "thread_cpu_ns", "vcsw"):  # pandas gives NaN for NULL
            v = r[k]
            r[k] = None if v is None or v != v else int(v)
    return rows


# ---- pool waits ---------------------------------------------------------------------------------
def test_an_exhausted_pool_records_its_jobs_waits_as_queue_spans(tmp_path):
    d = tmp_path / "traces"
    agentscope.init(d, service="pool", flush_interval_s=0.1)
    _pool_task(workers=2, jobs=6)
    agentscope.shutdown()

    with agentscope.analyze(d, db=":memory:") as analysis:
        spans = _spans(analysis)
        task = next(s for s in spans if s["name"] == "fan-out")
        tools = [s for s in spans if s["stage"] == "tool"]
        waits = [s for s in spans if s["name"] == "pool.wait"]
        (trace_id,) = {t.trace_id for t in analysis.task_results}
        assert {s.span_id for s in analysis.spans_of([trace_id])[trace_id]} == \
            {s["span_id"] for s in spans}
        assert len(tools) == 6
        # jobs 3..6 waited for one of the 2 workers to free up; jobs 1 and 2 found a worker
        # free (one that started slowly is not waited for in a queue)
        assert len(waits) == 4, [(w["end_ns"] - w["start_ns"]) / NS for w in waits]
        first = min(t["start_ns"] for t in tools)
        for k, w in enumerate(sorted(waits, key=lambda w: w["start_ns"])):  # submit order
            assert w["stage"] == "queue"
            assert w["parent_span_id"] == task["span_id"]
            a = w["attrs"]
            assert a[propagation.POOL_SIZE] == 2
            # ahead of it: the k + 2 jobs submitted before it, none finished yet: the two
            # first running (or being taken by their worker), the k others queued
            assert 0 <= a[propagation.POOL_BUSY] <= 2
            assert k <= a[propagation.POOL_QUEUED] <= k + 2, a
            assert a[propagation.POOL_BUSY] + a[propagation.POOL_QUEUED] == k + 2, a
            # no accounting of its own that could read as CPU: zero on-CPU, no thread
            assert w["thread_cpu_ns"] == 0 and w["tid"] is None and w["vcsw"] is None
            # it ended when a worker took the job: with 2 workers, job k + 3 starts once k + 1
            # jobs have finished, so one worker had run 1 (jobs 3, 4) or 2 (jobs 5, 6) tools
            # one after the other, each at least SLEEP, since the first started
            rounds = 1 if k < 2 else 2
            assert w["end_ns"] >= first + rounds * SLEEP * NS - EPS
        # so the last two waited two sleeps, less how long after the first tool started they
        # were submitted (microseconds, unless the machine stalled the submitting loop)
        for w in sorted(waits, key=lambda w: w["end_ns"])[2:]:
            assert w["end_ns"] - w["start_ns"] >= \
                2 * SLEEP * NS - max(w["start_ns"] - first, 0) - EPS
        # each job ran after its wait, as a child of the submitting span as before
        starts = sorted(t["start_ns"] for t in tools)
        for w in waits:
            assert any(s >= w["end_ns"] for s in starts)
        assert {t["parent_span_id"] for t in tools} == {task["span_id"]}

        # the task's analysis: part of its critical path queued for the pool
        row = analysis.tasks.iloc[0]
        assert row["share_queue"] > 0, row.to_dict()
        path = analysis.critical_path
        held = path[path["name"] == "pool.wait"]
        assert len(held) and set(held["class"]) == {"queue"}, path[["name", "class"]]


def test_a_job_that_starts_at_once_records_no_wait(tmp_path, monkeypatch):
    d = tmp_path / "traces"
    agentscope.init(d, service="pool", flush_interval_s=0.1)
    # with no threshold at all, a job records a wait only where every worker was taken: not
    # in a pool with workers to spare (each of these waits at most for its new thread)
    monkeypatch.setattr(propagation, "POOL_WAIT_MIN_NS", 0)
    with agentscope.task(name="at-once"):
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            assert [f.result() for f in [pool.submit(abs, -i) for i in range(3)]] == [0, 1, 2]
    # ... nor after a job ahead of it was cancelled (it never runs, its worker is free)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        blocker = pool.submit(time.sleep, 0.05)
        cancelled = pool.submit(abs, -1)
        assert cancelled.cancel()
        blocker.result()
        while pool._work_queue.qsize():  # the worker has dropped the cancelled job
            time.sleep(0.001)
        with agentscope.task(name="after-a-cancel"):
            assert pool.submit(abs, -3).result() == 3
    # ... nor outside any span (no span to hang it on), though it waited
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(time.sleep, 0.05)
        pool.submit(abs, -1).result()
    # a job behind a busy worker that started within the threshold records nothing (a
    # threshold far above the blocker's sleep, so that a loaded machine cannot cross it) ...
    monkeypatch.setattr(propagation, "POOL_WAIT_MIN_NS", 2 * NS)
    with agentscope.task(name="short-wait"):
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            pool.submit(time.sleep, 0.02)
            assert pool.submit(abs, -5).result() == 5
    # ... and one that waited longer than it does
    monkeypatch.setattr(propagation, "POOL_WAIT_MIN_NS", 100_000_000)

    def block():
        with agentscope.stage("tool", name="blocker"):
            time.sleep(0.3)

    with agentscope.task(name="behind-one"):
        with concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                   thread_name_prefix="tools") as pool:
            blocker = pool.submit(block)
            late = pool.submit(abs, -7)
            assert late.result() == 7 and blocker.result() is None
    agentscope.shutdown()

    with agentscope.analyze(d, db=":memory:") as analysis:
        spans = _spans(analysis)
    names = [s["name"] for s in spans]
    assert "pool.wait" not in names
    assert names.count("tools.wait") == 1  # a pool with a prefix names its waits after it
    wait = next(s for s in spans if s["name"] == "tools.wait")
    blocker = next(s for s in spans if s["name"] == "blocker")
    # submitted while the blocker ran; its worker took it once the blocker was done
    assert wait["start_ns"] <= blocker["end_ns"] <= wait["end_ns"] + EPS
    assert wait["end_ns"] - wait["start_ns"] >= 0.1 * NS
    assert wait["parent_span_id"] == next(s["span_id"] for s in spans
                                          if s["name"] == "behind-one")
    # ahead of it the blocker: running, or (its new worker had not taken it yet) queued
    a = wait["attrs"]
    assert a[propagation.POOL_SIZE] == 1
    assert a[propagation.POOL_BUSY] + a[propagation.POOL_QUEUED] == 1, a


def test_a_failing_job_and_a_broken_pool_never_raise_into_the_application(tmp_path,
                                                                           monkeypatch):
    d = tmp_path / "traces"
    agentscope.init(d, service="pool", flush_interval_s=0.1)

    def boom(*_a, **_k):
        raise RuntimeError("agentscope bug")

    monkeypatch.setattr(propagation, "LeanSpan", boom)  # recording the wait fails
    with agentscope.task(name="t"):
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            pool.submit(time.sleep, 0.05)
            with pytest.raises(ZeroDivisionError):  # the job's own error still reaches it
                pool.submit(lambda: 1 / 0).result()
            assert pool.submit(abs, -2).result() == 2
    agentscope.shutdown()


def test_sdk_mode_records_the_wait_through_the_applications_provider(tmp_path):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    d = tmp_path / "traces"
    rt = agentscope.init(d, tracer_provider=provider, flush_interval_s=0.1)
    assert rt.mode == "sdk"
    _pool_task(workers=1, jobs=2, sleep=0.15, prefix="tools")
    agentscope.shutdown()

    finished = exporter.get_finished_spans()
    exported = {s.name: s for s in finished if s.name != "tools.wait"}
    assert set(exported) == {"fan-out", "tool-0", "tool-1"}
    (wait,) = [s for s in finished if s.name == "tools.wait"]  # tool-1's, behind tool-0
    assert wait.parent.span_id == exported["fan-out"].context.span_id
    # submitted while tool-0 ran; its worker took it once tool-0 was done
    tool0 = exported["tool-0"]
    assert wait.start_time <= tool0.end_time
    assert tool0.end_time <= wait.end_time + EPS and wait.end_time <= exported["tool-1"].start_time
    assert wait.attributes[propagation.POOL_SIZE] == 1
    with agentscope.analyze(d, db=":memory:") as analysis:
        (row,) = [s for s in _spans(analysis) if s["name"] == "tools.wait"]
        assert row["span_id"] == f"{wait.context.span_id:016x}"
        assert row["stage"] == "queue" and row["thread_cpu_ns"] == 0 and row["tid"] is None
        assert row["attrs"][propagation.POOL_SIZE] == 1
        assert analysis.tasks.iloc[0]["share_queue"] > 0


# ---- timeouts and retries -----------------------------------------------------------------------
def _inp(rows):
    """An AnalysisInput-like object: rows of (name, parent row, start, end, error, timeout),
    one trace."""
    name, parent, start, end, error, timeout = (list(c) for c in zip(*rows))
    return types.SimpleNamespace(
        name=np.asarray(name, dtype=object), parent_idx=np.asarray(parent, dtype=np.int64),
        start_ns=np.asarray(start, dtype=np.int64), end_ns=np.asarray(end, dtype=np.int64),
        error=np.asarray(error, dtype=bool), timeout=np.asarray(timeout, dtype=bool),
        trace_no=np.zeros(len(rows), dtype=np.int64))


def _sections(*secs):
    """(task, row, start, end) per section -> the four arrays lost_time takes."""
    return tuple(np.asarray(c, dtype=np.int64) for c in zip(*secs))


def test_a_timed_out_tool_retried_and_an_error_not_retried():
    inp = _inp([
        ("task", -1, 0, 100, False, False),          # 0
        ("fetch", 0, 0, 40, True, True),              # 1: timed out ... (propagated from 4)
        ("fetch", 0, 40, 70, False, False),           # 2: ... and made again: 1 was retried
        ("llm", 0, 70, 100, True, False),             # 3: failed, nothing made it again
        ("http", 1, 5, 40, True, True),               # 4: where the timeout was spent
    ])
    assert failed_attempts(inp).tolist() == [False, True, False, False, False]
    assert timeout_origins(inp).tolist() == [False, False, False, False, True]
    timeout_ns, retry_ns = lost_time(inp, *_sections(
        (0, 1, 0, 5), (0, 4, 5, 40), (0, 2, 40, 70), (0, 3, 70, 100)), n_tasks=1)
    assert timeout_ns.tolist() == [35]  # the http call, not the tool's own 5 ns before it
    assert retry_ns.tolist() == [40]  # the whole failed attempt, the call inside included
    assert timeout_ns.dtype == retry_ns.dtype == np.int64


def test_what_is_not_a_retry():
    inp = _inp([
        ("task", -1, 0, 100, False, False),          # 0
        ("search", 0, 0, 50, True, False),            # 1: failed while 2 ran: not retried
        ("search", 0, 10, 60, False, False),          # 2
        ("plan", 0, 60, 80, True, False),             # 3: failed; the next is another name
        ("act", 0, 80, 100, False, False),            # 4
        ("plan", 4, 85, 95, False, False),            # 5: same name, but not a sibling of 3
    ])
    assert not failed_attempts(inp).any()
    timeout_ns, retry_ns = lost_time(inp, *_sections(
        (0, 1, 0, 10), (0, 2, 10, 60), (0, 3, 60, 80), (0, 4, 80, 85), (0, 5, 85, 95),
        (0, 4, 95, 100)), n_tasks=1)
    assert timeout_ns.tolist() == retry_ns.tolist() == [0]


def test_nested_attempts_count_once_and_per_task():
    inp = _inp([
        ("task", -1, 0, 100, False, False),          # 0 (task 0)
        ("step", 0, 0, 60, True, False),              # 1: failed, retried by 3
        ("call", 1, 0, 30, True, False),              # 2: failed, retried by 4 (nested in 1)
        ("step", 0, 60, 100, False, False),           # 3
        ("call", 1, 30, 60, True, True),              # 4: timed out, not retried
    ])
    inp.trace_no = np.zeros(5, dtype=np.int64)
    sections = _sections((0, 2, 0, 30), (0, 4, 30, 60), (0, 3, 60, 100),
                         (1, -1, 100, 120), (5, 2, 0, 10))  # a gap; a task out of range
    timeout_ns, retry_ns = lost_time(inp, *sections, n_tasks=2)
    assert retry_ns.tolist() == [60, 0]  # 2 and 4 inside the failed step, counted once
    assert timeout_ns.tolist() == [30, 0]
    # nothing failed: nothing lost, whatever the sections
    inp.error = np.zeros(5, dtype=bool)
    inp.timeout = np.zeros(5, dtype=bool)
    assert [a.tolist() for a in lost_time(inp, *sections, n_tasks=2)] == [[0, 0], [0, 0]]


def test_a_recorded_timeout_retried_once(tmp_path):
    d = tmp_path / "traces"
    agentscope.init(d, service="retry", flush_interval_s=0.1)
    attempt_s = 0.1
    with agentscope.task(name="flaky"):
        for attempt in range(2):
            try:
                with agentscope.stage("tool", name="fetch"):
                    time.sleep(attempt_s)
                    if attempt == 0:
                        raise TimeoutError("read timed out")
                break
            except TimeoutError:
                pass
        # failures that name a timeout only by error.type, and one that is no timeout
        with pytest.raises(RuntimeError):
            with agentscope.stage("tool", name="upstream"):
                agentscope.annotate(**{"error.type": "httpx.ReadTimeout"})
                raise RuntimeError("upstream failed")
        with pytest.raises(ConnectionError):
            with agentscope.stage("tool", name="refused"):
                raise ConnectionError("connection refused")
    agentscope.shutdown()

    with agentscope.analyze(d) as analysis:
        sections = analysis.sections
        n_tasks = len(analysis.task_results)
    store = Store(d / ".agentscope" / "agentscope.duckdb", read_only=True)
    try:
        inp = store.analysis_input()
    finally:
        store.close()
    by = {}
    for i, (name, start) in enumerate(zip(inp.name.tolist(), inp.start_ns.tolist())):
        by.setdefault(name, []).append((start, i))
    first, second = (i for _, i in sorted(by["fetch"]))
    upstream, refused = by["upstream"][0][1], by["refused"][0][1]
    assert inp.error[[first, upstream, refused]].all() and not inp.error[second]
    assert inp.timeout[[first, upstream]].all()
    assert not inp.timeout[[second, refused]].any()
    assert not inp.timeout[by["flaky"][0][1]]

    row_of = {sid: i for i, sid in enumerate(inp.span_id.tolist())}
    rows = np.asarray([-1 if s is None else row_of[s] for s in sections.span_id.tolist()])
    timeout_ns, retry_ns = lost_time(inp, sections.task, rows, sections.start_ns,
                                     sections.end_ns, n_tasks)
    first_len = int(inp.end_ns[first] - inp.start_ns[first])
    upstream_len = int(inp.end_ns[upstream] - inp.start_ns[upstream])
    assert first_len >= attempt_s * NS
    # the failed attempt held the path all its time: lost to the timeout, and retried
    assert retry_ns.tolist() == [first_len]
    assert timeout_ns.tolist() == [first_len + upstream_len]


def test_timeouts_and_retries_reach_the_results(tmp_path):
    """A tool that times out and is retried: its time is in the task's timeout_s and retry_s,
    in the summary's shares, the JSON report and the terminal and Markdown reports."""
    from click.testing import CliRunner

    from agentscope.cli import main
    from agentscope.exporters.table import markdown

    d = tmp_path / "t"
    agentscope.init(d, service="retrying", flush_interval_s=0.1)
    with agentscope.task("flaky"):
        for attempt in range(2):
            try:
                with agentscope.stage("tool", name="fetch"):
                    time.sleep(0.1)
                    if attempt == 0:
                        raise TimeoutError("timed out")
                break
            except TimeoutError:
                pass
    agentscope.shutdown()
    a = agentscope.analyze(d)
    t = a.task_results[0]
    assert t.timeout_ns >= 0.1e9 and t.retry_ns == t.timeout_ns
    assert a.summary.timeout_share == pytest.approx(t.timeout_ns / t.duration_ns, abs=1e-4)
    assert a.tasks["timeout_s"][0] == pytest.approx(t.timeout_ns / 1e9)
    doc = json.loads(a.to_json())
    assert doc["tasks"][0]["retry_s"] == pytest.approx(t.retry_ns / 1e9, abs=1e-6)
    assert doc["summary"]["retry_share"] == a.summary.retry_share
    assert "lost: " in markdown(a)
    assert "to timeouts" in CliRunner().invoke(main, ["analyze", str(d)]).output
