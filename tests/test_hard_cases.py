"""The hard attribution cases (issue 15), rule by rule on spans built by hand: waiting that
was computing elsewhere, judged from the span's own figures (no counters). The real workloads
of each case are the labelled scenarios (tests/test_scenarios.py: loop-blocked,
cpu-library-threads, contention-spans-only, gil-bound) and tests/test_counters.py."""

from __future__ import annotations

import types

import numpy as np
import pytest

from agentscope.analyzers.evidence import CLASSES, Facts, SpanFacts, classify
from agentscope.analyzers.threads import ThreadFacts, thread_facts

S = 1_000_000_000
CPU, IO = CLASSES.index("cpu"), CLASSES.index("io")


def span(**kw):
    base = dict(span_id="a", parent_id=None, name="n", stage="tool", kind="internal", start=0,
                end=S, own_cpu=0.0, own_wall=float(S), own_faults=0.0, child_cpu=0,
                queue_s=0.0, model_s=0.0, server_local=False, loop=False)
    base.update(kw)
    return SpanFacts(**base)


def one(threads=None, **kw):
    c = classify(Facts.of([span(**kw)]), threads)
    return c.shares[0], c.reason(0)


def test_child_processes_preempted_more_than_blocked_were_runnable():
    # 0.5 s of child CPU in a 1 s span, preempted 300 times, blocked twice
    shares, words = one(own_cpu=0.5e9, child_cpu=int(0.5e9), child_ivcsw=300, child_vcsw=2)
    assert shares[CPU] == pytest.approx(0.5 + 0.5 * 300 / 302)
    assert "its child processes were runnable, waiting for a CPU (preempted 300x, " \
           "blocked 2x" in words
    # the same child that blocked more than it was preempted waited on something: io
    shares, _ = one(own_cpu=0.5e9, child_cpu=int(0.5e9), child_ivcsw=2, child_vcsw=300)
    assert shares[IO] == pytest.approx(0.5)
    # a child that barely computed says nothing of the span's waiting
    shares, _ = one(own_cpu=0.1e9, child_cpu=int(0.1e9), child_ivcsw=30, child_vcsw=0)
    assert shares[IO] == pytest.approx(0.9)


def test_a_thread_preempted_more_than_blocked_was_runnable():
    shares, words = one(own_cpu=0.3e9, ivcsw=90, vcsw=10)
    assert shares[CPU] == pytest.approx(0.3 + 0.7 * 0.9)
    assert "its thread was runnable, waiting for a CPU (preempted 90x, blocked 10x" in words
    # a thread that barely ran (an HTTP wait, preempted in its few ms of work): io
    shares, _ = one(own_cpu=0.01e9, ivcsw=3, vcsw=1)
    assert shares[IO] == pytest.approx(0.99)
    # ... also where the child process it waited for computed (its CPU is not the thread's)
    shares, _ = one(own_cpu=0.11e9, child_cpu=int(0.1e9), ivcsw=4, vcsw=3)
    assert shares[IO] == pytest.approx(0.89)


def test_waiting_for_library_worker_threads_is_cpu():
    threads = ThreadFacts(np.zeros(1), np.zeros(1), np.array([-1]), np.array([0.9e9]))
    shares, words = one(threads, own_cpu=0.2e9, other_cpu=0.9e9)
    assert shares[CPU] == pytest.approx(1.0)
    assert "threads of its process with no span of their own" in words and "0.9 s" in words
    # the same workers beside a span that did not compute itself (waiting on a socket): io
    shares, _ = one(threads, own_cpu=0.001e9, other_cpu=0.9e9)
    assert shares[IO] == pytest.approx(0.999)


def test_short_blocks_while_other_threads_computed_are_gil_waits():
    # 200 blocks of ~5 ms while the other threads computed 0.9 s: the interpreter lock
    shares, words = one(own_cpu=0.01e9, vcsw=200, other_cpu=0.9e9)
    assert shares[CPU] == pytest.approx(1.0)
    assert "it waited for Python's interpreter lock: it blocked 200x" in words
    # one long block (a reply awaited) with the same busy neighbours: io
    shares, _ = one(own_cpu=0.01e9, vcsw=2, other_cpu=0.9e9)
    assert shares[IO] == pytest.approx(0.99)
    # blocks longer than a switch interval on average (replies read in pieces) with the same
    # neighbours: io
    shares, _ = one(own_cpu=0.01e9, vcsw=100, other_cpu=0.9e9)
    assert shares[IO] == pytest.approx(0.99)
    # the same short blocks in a process whose other threads were idle: io
    shares, _ = one(own_cpu=0.01e9, vcsw=200, other_cpu=0.0)
    assert shares[IO] == pytest.approx(0.99)
    # ... or that were page-ins (each major fault blocks): memory, not the lock
    shares, _ = one(own_cpu=0.01e9, vcsw=200, other_cpu=0.9e9, own_faults=200.0)
    assert shares[CLASSES.index("memory")] == pytest.approx(0.99)


def _loop_spans(rows):
    """An AnalysisInput-like object of spans on one loop thread: rows of (name, parent row,
    start s, end s, thread CPU s)."""
    n = len(rows)
    col = lambda k: np.asarray([r[k] for r in rows])  # noqa: E731
    return types.SimpleNamespace(
        name=np.asarray([r[0] for r in rows], dtype=object), parent_idx=col(1).astype(np.int64),
        start_ns=(col(2) * S).astype(np.int64), end_ns=(col(3) * S).astype(np.int64),
        thread_cpu=col(4) * S, loop=np.ones(n, bool), pid=np.ones(n, np.int64),
        tid=np.ones(n, np.int64), host_hash=np.zeros(n, np.int64), other_cpu=np.zeros(n))


def test_a_blocked_loop_names_the_span_that_held_it():
    # task answer (0) awaits a 0.2 s reply in ask-model (1) from 0.0 to 0.56 s; task
    # index-docs (2) runs embed (3) on the loop from 0.05 to 0.55 s without yielding
    inp = _loop_spans([("answer", -1, 0.0, 0.56, 0.51), ("ask-model", 0, 0.0, 0.56, 0.505),
                       ("index-docs", -1, 0.04, 0.55, 0.5), ("embed", 2, 0.05, 0.55, 0.5)])
    tf = thread_facts(inp)
    # held from 0.04 s (index-docs, on-CPU 98 % of its time) to 0.55 s; named: the innermost
    assert tf.blocker[1] == 3 and tf.blocked_ns[1] == pytest.approx(0.51 * S, rel=1e-6)
    assert tf.blocker_label[1] == "`embed` in task `index-docs`"
    assert tf.blocker[3] == -1 and tf.blocker[2] == -1  # the blocker is nobody's victim
    # ask-model is busy over its interval (embed's CPU) but index-docs started inside it:
    # it was suspended, so it held nothing
    assert 1 not in tf.blocker.tolist()
    f = Facts.of([span(name=n, start=int(inp.start_ns[i]), end=int(inp.end_ns[i]),
                       own_cpu=float(c), own_wall=float(inp.end_ns[i] - inp.start_ns[i]),
                       loop=True, stage="inference" if n == "ask-model" else "tool")
                  for i, (n, c) in enumerate([("answer", 0.005e9), ("ask-model", 0.505e9),
                                              ("index-docs", 0.0), ("embed", 0.5e9)])])
    c = classify(f, tf)
    assert c.shares[1][CPU] == pytest.approx(0.51 / 0.56 + 0.005 / 0.56, abs=0.01)
    assert c.shares[1][IO] == pytest.approx(0.045 / 0.56, abs=0.01)
    words = c.reason(1)
    assert words.startswith("delayed by its event loop being blocked by `embed` in task "
                            "`index-docs` for 0.51 s")


def test_threads_without_spans_are_the_process_cpu_less_the_threads_with_spans():
    # two threads with spans in one process; the first's span saw 1.5 s of other threads'
    # CPU, of which the second thread's span (1 s of CPU over the same interval) is 1 s
    inp = types.SimpleNamespace(
        name=np.asarray(["a", "b"], dtype=object), parent_idx=np.array([-1, -1]),
        start_ns=np.array([0, 0]), end_ns=np.array([S, S]), thread_cpu=np.array([0.2e9, 1e9]),
        loop=np.zeros(2, bool), pid=np.array([7, 7]), tid=np.array([1, 2]),
        host_hash=np.zeros(2, np.int64), other_cpu=np.array([1.5e9, 0.0]))
    tf = thread_facts(inp)
    assert tf.unowned_cpu[0] == pytest.approx(0.5e9) and tf.unowned_cpu[1] == 0
    # another process's threads are not this one's
    inp.pid = np.array([7, 8])
    assert thread_facts(inp).unowned_cpu[0] == pytest.approx(1.5e9)


def _blocked_loop(trace_dir, spanned):
    """One loop: `answer` awaits 0.2 s while `index-docs` computes 0.5 s without yielding,
    in a span of its own (`embed`) or in its task's own code; the in-process sampler runs."""
    import asyncio
    import time

    import agentscope

    agentscope.init(trace_dir, service="loop-agent", collect=True)

    def burn():
        end = time.thread_time() + 0.5
        while time.thread_time() < end:
            pass

    async def blocker():
        with agentscope.task("index-docs"):
            await asyncio.sleep(0.1)
            if spanned:
                with agentscope.stage("tool", name="embed"):
                    burn()
            else:
                burn()
            await asyncio.sleep(0.05)

    async def victim():
        with agentscope.task("answer"):
            with agentscope.stage("inference", name="ask-model"):
                await asyncio.sleep(0.2)

    async def main():
        await asyncio.gather(blocker(), victim())

    try:
        asyncio.run(main())
    finally:
        agentscope.shutdown()
    with agentscope.analyze(trace_dir) as analysis:
        return {t.name: t for t in analysis.task_results}


@pytest.mark.parametrize("spanned", [True, False])
def test_the_sampler_measures_a_held_loop_and_who_held_it(tmp_path, spanned):
    """The in-process sampler's probe ran late on the held loop: its lag is written with the
    span whose task the loop was running, and the delayed call names it, in a span of its
    own or not (issue 15, case 2)."""
    import json

    tasks = _blocked_loop(tmp_path, spanned)
    lags = [json.loads(line) for f in tmp_path.glob("samples-*") for line in open(f)
            if "agentscope.python.loop_lag" in line]
    assert lags and max(x["value"] for x in lags) >= 0.2, lags
    assert any(":" in x["device"] for x in lags)  # the holder was seen
    answer = tasks["answer"]
    assert answer.bottleneck == "cpu", answer.evidence
    who = "`embed` in task `index-docs`" if spanned else "`index-docs`"
    assert answer.evidence[0].startswith(
        "ask-model (inference): ") and f"blocked by {who} (its lag measured: " \
        in answer.evidence[0], answer.evidence
    # the task that held the loop is not anybody's victim
    assert "delayed by its event loop" not in " ".join(tasks["index-docs"].evidence)


def test_measured_child_waits_cover_only_children_that_did_the_computing():
    """schedstat times the child a span reaped, not the descendants that child waited for:
    a compiler driver whose cc1 did the work is not covered, and the counters may still
    judge its contention."""
    from agentscope.analyzers.counters import children_timed

    got = children_timed(run_delay=[0.1e9, 0.1e9, 0.1e9, -1.0], own_cpu=[0.5e9, 0.01e9, 0.3e9, -1],
                         child_cpu=[0.5e9, 0.5e9, 0.5e9, 0.5e9])
    assert got.tolist() == [True, False, True, False]
