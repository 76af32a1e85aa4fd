"""Spans without accounting of their own, judged by the counters of the sampled process tree
that emitted them (analyzers/process_share.py): which tree a span joins, how the tree's CPU is
shared among the spans whose own time it was (never more than was measured), and what the
classifier makes of it (evidence.classify)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from agentscope.analyzers.evidence import (BY_PROCESS, BY_PROCESS_SHARED, BY_PROCESS_SHORT,
                                           CLASSES, classify)
from agentscope.analyzers.process_share import process_share
from agentscope.store.schema import ProcessTrees

S = 1_000_000_000
T0 = 1_800_000_000 * S
HZ = 10


def _tree(cores_at, start_s=-1.0, end_s=12.0, host="h", root=100, members=(100,)):
    """A tree sampled HZ times a second from start_s to end_s; ``cores_at(t)``: the cores it
    used over the interval ending at t (seconds from T0)."""
    ts = np.arange(int(start_s * HZ), int(end_s * HZ) + 1) / HZ
    values = np.asarray([cores_at(t - 0.5 / HZ) for t in ts], dtype=np.float64)
    ts_ns = (T0 + np.round(ts * S)).astype(np.int64)
    return ts_ns, values, host, root, frozenset(members) | {root}


def _trees(*trees, wait=None):
    """ProcessTrees of ``trees``; ``wait(t)``: the threads waiting runnable (all trees)."""
    offsets = np.concatenate([[0], np.cumsum([len(t[0]) for t in trees])]).astype(np.int64)
    ts = np.concatenate([t[0] for t in trees])
    waits = None if wait is None else np.asarray(
        [wait((x - T0) / S - 0.5 / HZ) for x in ts.tolist()], dtype=np.float64)
    return ProcessTrees(tuple(t[2] for t in trees), np.asarray([t[3] for t in trees]),
                        np.asarray([t[0][0] for t in trees]),
                        np.asarray([t[0][-1] for t in trees]), tuple(t[4] for t in trees),
                        offsets, ts, np.concatenate([t[1] for t in trees]), waits)


def _input(spans, host="h", pid=100):
    """spans: (trace, parent index or -1, start s, end s[, own_cpu ns, service, pid])."""
    rows = [dict(trace=s[0], parent=s[1], start=s[2], end=s[3],
                 own_cpu=s[4] if len(s) > 4 else -1.0,
                 service=s[5] if len(s) > 5 else "agent", pid=s[6] if len(s) > 6 else pid)
            for s in spans]
    n = len(rows)
    trace_no = np.asarray([r["trace"] for r in rows], dtype=np.int64)
    assert (np.diff(trace_no) >= 0).all(), "rows in trace order"
    start = np.asarray([T0 + round(r["start"] * S) for r in rows], dtype=np.int64)
    end = np.asarray([T0 + round(r["end"] * S) for r in rows], dtype=np.int64)
    return types.SimpleNamespace(
        trace_no=trace_no, start_ns=start, end_ns=end,
        own_cpu=np.asarray([r["own_cpu"] for r in rows], dtype=np.float64),
        own_wall=(end - start).astype(np.float64),
        parent_idx=np.asarray([r["parent"] for r in rows], dtype=np.int64),
        pid=np.asarray([r["pid"] for r in rows], dtype=np.int64),
        host=np.asarray([host] * n, dtype=object),
        service=np.asarray([r["service"] if r["parent"] < 0 else None for r in rows],
                           dtype=object),
        name=np.asarray([f"span{i}" for i in range(n)], dtype=object),
        stage_code=np.full(n, 6), queue_s=np.zeros(n), model_s=np.zeros(n),
        own_faults=np.zeros(n), child_cpu_ns=np.zeros(n), server_local=np.zeros(n, bool),
        loop=np.zeros(n, bool), sys_cpu=np.zeros(n), endpoint=np.full(n, None, object))


def _on(*windows):
    """cores: 1.0 inside any of the (start, end) windows (seconds), else 0."""
    return lambda t: float(any(a <= t < b for a, b in windows))


# ---- one span alone ----------------------------------------------------------------------------
def test_a_span_alone_in_a_busy_tree_is_cpu_measured():
    inp = _input([(0, -1, 0.0, 2.0), (0, 0, 0.2, 1.7)])  # agent, its tool computing 1.5 s
    p = process_share(inp, _trees(_tree(_on((0.2, 1.7)))))
    assert p.tree.tolist() == [0, 0]
    assert p.cpu_ns[1] == pytest.approx(1.5 * S, rel=0.02)
    assert p.own_ns[1] == pytest.approx(1.5 * S) and p.sharers[1] == pytest.approx(1.0)
    assert p.cpu_ns[0] == pytest.approx(0.0, abs=0.02 * S)  # the agent's own time: idle
    assert p.own_ns[0] == pytest.approx(0.5 * S)
    c = classify(inp, proc=p)
    v = c.verdict(1)
    assert v.cls == "cpu" and v.confidence == BY_PROCESS and c.basis[1] == 0  # measured
    assert "no accounting of its own: its process tree (pid 100) used 1.5 s of CPU" in v.reason
    assert "shared" not in v.reason


def test_an_idle_tree_means_waiting_outside_it():
    inp = _input([(0, -1, 0.0, 2.0)])
    p = process_share(inp, _trees(_tree(lambda t: 0.01)))
    v = classify(inp, proc=p).verdict(0)
    assert v.cls == "io" and v.confidence == BY_PROCESS
    assert "its process tree idle otherwise: waiting on something outside it" in v.reason


def test_a_short_span_says_so_with_a_low_confidence():
    inp = _input([(0, -1, 1.0, 1.2)])  # 0.2 s: two samples at 10 Hz
    p = process_share(inp, _trees(_tree(_on((1.0, 1.2)))))
    assert p.short[0]
    v = classify(inp, proc=p).verdict(0)
    assert v.cls == "cpu" and v.confidence == BY_PROCESS_SHORT
    assert "fewer than 3 samples of its tree: low confidence" in v.reason


# ---- spans that share a tree -------------------------------------------------------------------
def test_two_tasks_at_once_the_computing_one_keeps_the_cpu():
    """Task A computes 0.3-1.8 s; task B waits on a socket 0.8-2.3 s: they overlap 1 s. The
    stretches each ran alone tell their rates apart: A keeps the core it used, B gets little;
    and the claims add up to what the tree used, no more."""
    inp = _input([(0, -1, 0.0, 2.1), (0, 0, 0.3, 1.8),
                  (1, -1, 0.5, 2.6), (1, 2, 0.8, 2.3)])
    trees = _trees(_tree(_on((0.3, 1.8))))
    p = process_share(inp, trees)
    assert p.cpu_ns[1] == pytest.approx(1.5 * S, rel=0.05)
    assert p.cpu_ns[3] < 0.05 * S
    assert p.sharers[1] > 1.3 and p.sharers[3] > 1.3
    total = p.cpu_ns[p.cpu_ns >= 0].sum()
    assert total <= 1.5 * S * 1.001
    c = classify(inp, proc=p)
    a, b = c.verdict(1), c.verdict(3)
    assert a.cls == "cpu" and b.cls == "io"
    assert a.confidence == BY_PROCESS_SHARED and b.confidence == BY_PROCESS_SHARED
    assert "shared with the other spans of its tree open meanwhile" in a.reason


def test_spans_that_always_overlapped_alike_split_evenly():
    """Two spans over exactly the same time in a tree on one core: nothing tells them apart,
    each is given half, and both say they shared."""
    inp = _input([(0, -1, 0.0, 2.0), (1, -1, 0.0, 2.0)])
    p = process_share(inp, _trees(_tree(_on((0.0, 2.0)))))
    assert p.cpu_ns[0] == pytest.approx(p.cpu_ns[1]) == pytest.approx(1.0 * S, rel=0.02)
    assert p.sharers.tolist() == pytest.approx([2.0, 2.0])


def test_claims_never_exceed_what_was_measured():
    rng = np.random.default_rng(3)
    spans = []
    for t in range(12):
        a = rng.uniform(0, 8)
        spans.append((t, -1, a, a + rng.uniform(0.2, 3)))
    spans.sort(key=lambda s: s[0])
    inp = _input(spans)
    busy = [(rng.uniform(0, 9), 0) for _ in range(5)]
    windows = [(a, a + rng.uniform(0.1, 2)) for a, _ in busy]
    tree = _tree(lambda t: sum(a <= t < b for a, b in windows) * 0.7)
    p = process_share(inp, _trees(tree))
    lo, hi = inp.start_ns.min(), inp.end_ns.max()
    from agentscope.analyzers.counters import integrate

    used, _ = integrate(tree[0], tree[1], [lo], [hi])
    assert p.cpu_ns[p.cpu_ns >= 0].sum() <= used[0] * 1.0001
    assert (p.cpu_ns[p.cpu_ns >= 0] <= p.own_ns[p.cpu_ns >= 0] * 5).all()


def test_a_span_with_its_own_accounting_keeps_its_cpu():
    """Our own instrumented span (accounting: 1 s of CPU over 1 s) beside a framework span in
    the same tree: the tree's core was the measured span's, not the other's."""
    inp = _input([(0, -1, 0.0, 1.0, 1.0 * S), (1, -1, 0.0, 1.0)])
    p = process_share(inp, _trees(_tree(_on((0.0, 1.0)))))
    assert p.cpu_ns[0] == -1  # judged by its own accounting
    assert p.cpu_ns[1] == pytest.approx(0.0, abs=0.02 * S)


# ---- which tree --------------------------------------------------------------------------------
def test_spans_join_the_tree_of_their_pid_and_host_only():
    inp = _input([(0, -1, 0.0, 1.0, -1.0, "a", 100), (1, -1, 0.0, 1.0, -1.0, "b", 200),
                  (2, -1, 0.0, 1.0, -1.0, "c", 300)])
    t1 = _tree(_on((0.0, 1.0)), root=100, members=(100, 101))
    t2 = _tree(lambda t: 0.0, root=200, host="other")
    p = process_share(inp, _trees(t1, t2))
    assert p.tree.tolist() == [0, -1, -1]  # pid 200 is on another host; 300 in no tree
    inp.host[:] = None  # no host.name on the spans: the pid alone, where one tree has it
    p = process_share(inp, _trees(t1, t2))
    assert p.tree.tolist() == [0, 1, -1]
    assert p.host.tolist() == ["h", "other", None]  # the tree's host, for the counters


def test_a_member_process_joins_its_tree():
    inp = _input([(0, -1, 0.0, 1.0, -1.0, "a", 101)])
    p = process_share(inp, _trees(_tree(_on((0.0, 1.0)), root=100, members=(100, 101))))
    assert p.tree.tolist() == [0] and p.root.tolist() == [100]


def test_spans_without_a_pid_join_by_service_where_one_tree_overlaps():
    inp = _input([(0, -1, 0.0, 1.0, -1.0, "agent", -1), (0, 0, 0.1, 0.9, -1.0, "agent", -1)])
    p = process_share(inp, _trees(_tree(_on((0.1, 0.9)))))
    assert p.tree.tolist() == [0, 0] and not p.warnings
    two = _trees(_tree(_on((0.1, 0.9))), _tree(_on((0.1, 0.9)), root=200))
    p = process_share(inp, two)
    assert p.tree.tolist() == [-1, -1]
    assert len(p.warnings) == 1 and "of service 'agent'" in p.warnings[0]
    assert "overlap 2 sampled process trees" in p.warnings[0]


def test_nothing_joins_without_trees():
    inp = _input([(0, -1, 0.0, 1.0)])
    p = process_share(inp, None)
    assert p.tree.tolist() == [-1] and p.cpu_ns.tolist() == [-1.0]
    v = classify(inp, proc=p).verdict(0)
    assert v.confidence == 0.3 and "no resource accounting on this span" in v.reason
    assert CLASSES[classify(inp).cls[0]] == v.cls


def test_two_spans_computing_in_one_process_wait_for_its_cpu():
    """Two tasks computing Python at once in one process share one interpreter lock: the
    tree ran at one core, half for each. Neither waited on anything outside: each one's
    waiting was for its process's CPU, and the words say so."""
    inp = _input([(0, -1, 0.0, 3.0), (1, -1, 0.0, 3.0)])
    p = process_share(inp, _trees(_tree(_on((0.0, 3.0)))))
    c = classify(inp, proc=p)
    for i in (0, 1):
        v = c.verdict(i)
        assert v.cls == "cpu" and v.shares["cpu"] == pytest.approx(1.0, abs=0.02), v
        assert "its waiting was for its process's CPU" in v.reason
        assert v.confidence == BY_PROCESS_SHARED


def test_spans_of_one_name_are_told_apart_across_tasks():
    """Tasks in pairs, a computing task beside a waiting one, always overlapping by one
    other span: one by one the overlaps cannot say which of two spans computed, but the
    same tool meets different partners across tasks, and its name ties them."""
    spans, windows = [], []
    t, trace = 0.0, 0
    for k in range(6):  # pairs, shifted: compute (2 s) beside wait (1.5 s), then a chat
        a = t
        spans.append((trace, -1, a, a + 2.0))
        spans.append((trace, len(spans) - 1, a, a + 2.0))
        windows.append((a, a + 2.0))
        trace += 1
        spans.append((trace, -1, a + 0.2, a + 2.3))
        spans.append((trace, len(spans) - 1, a + 0.2, a + 1.7))
        spans.append((trace, len(spans) - 2, a + 1.7, a + 2.3))
        trace += 1
        t += 2.5
    inp = _input(spans)
    names = ["agent", "compute", "agent", "wait", "chat"] * 6
    inp.name = np.asarray(names, dtype=object)
    p = process_share(inp, _trees(_tree(lambda x: 0.6 * any(a <= x < b for a, b in windows),
                                        end_s=20.0)))
    c = classify(inp, proc=p)
    got = {}
    for i, name in enumerate(names):
        if name in ("compute", "wait"):
            got.setdefault(name, set()).add(c.verdict(i).cls)
    assert got == {"compute": {"cpu"}, "wait": {"io"}}, got


def test_on_a_saturated_host_a_computing_span_claims_its_tree_s_waiting_too():
    """Two CPU burners outside the tree: the computing tool ran half the time and waited
    runnable the other half (its tree: 0.5 cores, 0.5 threads waiting); beside it, for part
    of its time, another task's span waited on a socket. What is shared is the tree's demand
    (CPU and waiting for a CPU), which stays the same beside the waiting span: the tool's
    time is cpu (half computing, half runnable), the other span's io."""
    inp = _input([(0, -1, 0.0, 3.0), (1, -1, 0.5, 2.0)])
    busy = _on((0.0, 3.0))
    p = process_share(inp, _trees(_tree(lambda t: 0.5 * busy(t)),
                                  wait=lambda t: 0.5 * busy(t)))
    # (the weak prior toward an even split leaves the waiting span a little)
    assert p.cpu_ns[0] == pytest.approx(1.5 * S, rel=0.1)
    assert p.wait_ns[0] == pytest.approx(1.5 * S, rel=0.1)
    assert p.cpu_ns[1] + p.wait_ns[1] < 0.3 * S
    c = classify(inp, proc=p)
    tool, other = c.verdict(0), c.verdict(1)
    assert tool.cls == "cpu" and tool.shares["cpu"] >= 0.9, tool
    assert "s runnable for a CPU" in tool.reason
    assert other.cls == "io", other
