"""The fleet-scale analysis: every trace's critical path, classified and aggregated with numpy.

The same rules as :func:`agentscope.analyzers.tasks.analyze_trace` (the per-trace reference,
checked against this in the tests), organised for a million spans:

1. walk every trace's critical path (``walk_many``: clipping and child order in numpy, the
   descent in Python) into flat section arrays (task number, span index, start, end);
2. classify every span at once (``classify_columns``);
3. sum section lengths times their spans' shares per task with ``np.bincount``;
4. build per task only what is read per task: shares, bottleneck, confidence, the evidence of
   its three longest-held spans; segments are built when a report asks for them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .counters import adjust
from .critical_path import walk_many
from .evidence import CLASSES, IO, OFF_CPU_UNEXPLAINED, SpanFacts, classify, classify_columns
from .tasks import SELF_TIME_STAGES, Analysis, LazySegments, Segment, TaskResult, gc_paused
from .tasks import summarize

# SpanFacts fields, from these columns (None: not fetched; the classifier does not need it)
_FACT_COLUMNS = ("span_id", None, "name", "stage", "kind", "start_ns", "end_ns",
                 "own_cpu", "own_wall", "own_faults", "child_cpu_ns", "queue_s", "model_s",
                 "server_local", "loop", "sys_cpu")
_IO = CLASSES.index(IO)


class Sections(NamedTuple):
    """All critical-path sections of an analysis, as parallel arrays."""

    task: np.ndarray  # index into Analysis.tasks
    span: np.ndarray  # row index into the input columns, -1 for a gap
    start: np.ndarray
    end: np.ndarray
    cls: np.ndarray  # index into CLASSES
    confidence: np.ndarray
    shares: np.ndarray  # (n, 5)
    seq: np.ndarray  # position within its task
    notes: Any = None  # per section: what the counters said (str) or None; None: no counters


def analyze_columns(cols: dict, counters: Any = None) -> Analysis:
    """Analyse the columns of ``store/sql/analysis_input.sql`` (lists, ordered by trace).
    ``counters(hosts, start, end, pids)``, if given, returns the counters' means over sections
    ({metric: array}, see analyzers/counters.py) and the verdicts take them into account."""
    with gc_paused():
        return _analyze(cols, counters)


def _analyze(cols: dict, counters: Any = None) -> Analysis:
    stages = _as_list(cols["stage"])
    span_ids, names = cols["span_id"], cols["name"]
    trace_no = np.asarray(cols["trace_no"])
    n = len(trace_no)
    cuts = (np.flatnonzero(np.diff(trace_no)) + 1).tolist() if n else []
    bounds = list(zip([0] + cuts, cuts + [n])) if n else []

    # 1. the walks (clipping and ordering in numpy, the descent along each path in Python)
    w = walk_many(cols["parent_idx"], cols["start_ns"], cols["end_ns"], cols["kind"], bounds)
    # a task per trace that has a root (a trace of nothing but a parent cycle has none)
    heads = []  # per task: (lo, hi, start, end, first section, roots, off_path)
    task_of_trace = np.full(len(bounds), -1, dtype=np.int64)
    for t, (lo, hi) in enumerate(bounds):
        if w.roots[t]:
            task_of_trace[t] = len(heads)
            heads.append((lo, hi, w.starts[t], w.ends[t], w.first[t], w.roots[t],
                          w.off_path[t]))
    if not heads:
        return Analysis([], summarize([]), None, cols)

    # 2. every span classified at once
    shares, confidence, cls = classify_columns(
        cols.get("stage_code", cols["stage"]), cols["start_ns"], cols["end_ns"],
        cols["own_cpu"], cols["own_wall"], cols["own_faults"], cols["queue_s"],
        cols["model_s"], cols["server_local"], cols["loop"], cols.get("sys_cpu"))
    # ... and gathered per section; a gap (span -1) is classified as classify(None) says
    task = task_of_trace[np.asarray(w.trace, dtype=np.int64)]  # sections exist under roots only
    span = np.asarray(w.span, dtype=np.int64)
    is_gap = span < 0
    row = np.where(is_gap, 0, span)
    gap = classify(None)
    sec_shares = shares[row] if n else np.zeros((len(span), len(CLASSES)))
    sec_shares[is_gap] = [gap.shares.get(c, 0.0) for c in CLASSES]
    sec_conf = np.where(is_gap, gap.confidence, confidence[row] if n else 0.0)
    sec_cls = np.where(is_gap, _IO, cls[row] if n else _IO)
    orchestrates = np.isin(np.asarray(stages, dtype=object), SELF_TIME_STAGES)
    sec_orch = ~is_gap & (orchestrates[row] if n else False)
    start = np.asarray(w.start, dtype=np.int64)
    end = np.asarray(w.end, dtype=np.int64)

    # 2b. the counters over each section (host, GPU, model server), where there are any
    notes = None
    if counters is not None and len(span) and "host" in cols:
        hosts = np.asarray(cols["host"], dtype=object)[row]
        hosts[is_gap] = None
        pids = np.where(is_gap, -1, np.asarray(cols["pid"])[row]) if "pid" in cols else None
        ev = counters(hosts, start, end, pids)
        if ev:
            def col(name: str) -> np.ndarray:
                return np.asarray(cols[name])[row] if name in cols else np.zeros(len(row))

            inference = ~is_gap & (np.asarray(stages, dtype=object)[row] == "inference")
            span_ns = np.maximum(col("end_ns") - col("start_ns"), 1).astype(np.float64)
            sec_shares, sec_conf, notes = adjust(
                sec_shares, sec_conf, ev, inference, np.where(is_gap, 0, col("ivcsw")),
                np.where(is_gap, 0, col("vcsw")), np.where(is_gap, 0, col("child_cpu_ns")),
                server_local=~is_gap & col("server_local").astype(bool),
                children=(np.where(is_gap, 0, col("child_ivcsw")),
                          np.where(is_gap, 0, col("child_vcsw")),
                          np.where(is_gap, 0.0, col("child_cpu_ns") / span_ns)),
                orchestration=sec_orch, length_ns=end - start,
                model_s=np.where(is_gap, 0.0, col("model_s")),
                faults=np.where(is_gap, 0.0, col("own_faults")))
            sec_cls = np.where(is_gap, _IO, np.argmax(sec_shares, axis=1))

    # 3. per-task sums
    length = (end - start).astype(np.float64)
    n_tasks = len(heads)
    totals = np.stack([np.bincount(task, length * sec_shares[:, c], n_tasks)
                       for c in range(len(CLASSES))], axis=1)
    weight = np.bincount(task, length, n_tasks)
    quality = np.divide(np.bincount(task, length * sec_conf, n_tasks), weight,
                        out=np.zeros(n_tasks), where=weight > 0)
    orchestration = np.bincount(task, length * sec_orch, n_tasks)
    duration = np.array([max(h[3] - h[2], 0) for h in heads], dtype=np.float64)
    task_shares = np.divide(totals, duration[:, None], out=np.zeros_like(totals),
                            where=duration[:, None] > 0)
    ranked = np.sort(task_shares, axis=1)
    margin = ranked[:, -1] - ranked[:, -2]
    task_conf = np.round(quality * (0.5 + 0.5 * np.minimum(margin / 0.3, 1.0)), 2)
    task_conf[weight <= 0] = 0.0
    bottleneck = np.argmax(task_shares, axis=1)
    firsts = np.asarray([h[4] for h in heads], dtype=np.int64)
    first_cls = sec_cls[np.minimum(firsts, len(task) - 1)] if len(task) else \
        np.full(n_tasks, _IO)
    first_cls = np.where(firsts < len(task), first_cls, _IO)
    bottleneck = np.where(duration > 0, bottleneck, first_cls)
    seq = np.arange(len(task)) - firsts[task] if len(task) else task
    sections = Sections(task, span, start, end, sec_cls, sec_conf, sec_shares, seq, notes)

    # 4. per-task results
    verdicts = _Verdicts(cols)
    sec_bounds = [h[4] for h in heads] + [len(task)]
    # the three spans holding each task's path longest; their facts gathered in one go
    tops = _longest_held(task, span, end - start, n_tasks)
    verdicts.fill(sorted({i for top in tops for i, _ in top if i >= 0}))
    verdict = verdicts.get

    share_rows = task_shares.tolist()
    durations, conf_l = duration.astype(np.int64).tolist(), task_conf.tolist()
    bottleneck_l, orch_l = [CLASSES[k] for k in bottleneck.tolist()], orchestration.tolist()
    tasks = []
    for t, (lo, hi, t_start, _end, _first, roots, off_path) in enumerate(heads):
        a, b = sec_bounds[t], sec_bounds[t + 1]
        root = next((r for r in roots if stages[r] == "task"), roots[0])
        trace_id, lane, service = _root_strings(cols, lo, hi, root)
        dur = durations[t]
        evidence = []
        for i, h in tops[t]:
            v = verdict(i)
            label = "(gap)" if i < 0 else (f"{names[i]} ({stages[i]})" if stages[i] else names[i])
            cls, reason = v.cls, v.reason
            if notes is not None:  # the counters may have changed its class: its longest section
                k = max((k for k in range(a, b) if span[k] == i),
                        key=lambda k: end[k] - start[k], default=None)
                if k is not None:
                    cls = CLASSES[sec_cls[k]]
                    reason = _with_note(reason, notes[k])
            evidence.append(f"{label}: {h / 1e9:.3g} s on the critical path "
                            f"({h / dur if dur else 0.0:.0%}), {cls}: {reason}")
        tasks.append(TaskResult(
            trace_id, _py(names[root]), lane, service, t_start, dur, bottleneck_l[t],
            conf_l[t], dict(zip(CLASSES, share_rows[t])), evidence,
            LazySegments(_segment_builder(sections, a, b, span_ids, names, stages, verdicts)),
            hi - lo, int(orch_l[t]), 0, off_path))
    analysis = Analysis(tasks, summarize(tasks), sections, cols)
    # a report that reads every task's segments classifies all their spans in one go first
    analysis.prepare = lambda: verdicts.fill(np.unique(span[span >= 0]).tolist())
    return analysis


class _Verdicts:
    """classify() of spans by input row, computed on demand and kept; many rows at once
    gather their facts column by column (building them one span at a time from numpy
    scalars cost more than classifying them)."""

    def __init__(self, cols: dict) -> None:
        self.fields = [cols.get(c, np.zeros(len(cols["span_id"]))) if c else None
                       for c in _FACT_COLUMNS]
        self.done: dict = {-1: classify(None)}

    def fill(self, rows: list) -> None:
        rows = [i for i in rows if i not in self.done]
        if not rows:
            return
        picked = [[None] * len(rows) if f is None else np.asarray(f)[rows].tolist()
                  for f in self.fields]
        make = SpanFacts._make
        for i, facts in zip(rows, zip(*picked)):
            self.done[i] = classify(make(facts))

    def get(self, i: int) -> Any:
        v = self.done.get(i)
        if v is None:
            self.fill([i])
            v = self.done[i]
        return v


def _longest_held(task: np.ndarray, span: np.ndarray, length: np.ndarray, n_tasks: int) -> list:
    """Per task, the (span, time held) of the three spans holding its path longest; ties in
    order of first appearance on the path (as sorting a dict built along the path does)."""
    tops: list = [[] for _ in range(n_tasks)]
    if not len(task):
        return tops
    key = task * (int(span.max()) + 2) + (span + 1)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    held = np.bincount(inverse, weights=length.astype(np.float64))  # exact below 2**53 ns
    held_int = held.astype(np.int64)
    u_task = task[first]
    u_span = span[first]
    order = np.lexsort((first, -held, u_task))
    ranked_task = u_task[order]
    group_start = np.searchsorted(ranked_task, ranked_task, side="left")
    rank = np.arange(len(order)) - group_start
    for j in np.flatnonzero(rank < 3).tolist():
        k = order[j]
        tops[int(u_task[k])].append((int(u_span[k]), int(held_int[k])))
    return tops


def _as_list(values: Any) -> list:
    return values.tolist() if hasattr(values, "tolist") else list(values)


def _py(value: Any) -> Any:
    """A numpy scalar as the Python value (so records and reports hold plain types)."""
    return value.item() if hasattr(value, "item") else value


def _root_strings(cols: dict, lo: int, hi: int, root: int) -> tuple:
    """trace_id, lane and service (sent by the query for roots and task spans only)."""
    trace_ids = cols["trace_id"]
    trace_id = trace_ids[root]
    if trace_id is None:
        trace_id = next((x for x in trace_ids[lo:hi] if x is not None), "")
    return trace_id, cols["lane"][root], cols["service"][root]


def _with_note(reason: str, note: Any) -> str:
    """The span's evidence followed by what the counters said; where they explained the
    waiting (contention, memory pressure, the GPU), the span's own 'waiting on something
    outside the process' is dropped."""
    if not note:
        return reason
    if not note.startswith("host not saturated"):
        reason = reason.replace(", " + OFF_CPU_UNEXPLAINED, "").replace(OFF_CPU_UNEXPLAINED, "")
    return f"{reason}; {note}" if reason else note


def _segment_builder(sections: Sections, a: int, b: int, span_ids: Any, names: Any,
                     stages: list, verdicts: _Verdicts) -> Any:
    def build() -> list:
        rows = sections.span[a:b].tolist()
        verdicts.fill(rows)
        done = verdicts.done
        starts, ends = sections.start[a:b].tolist(), sections.end[a:b].tolist()
        conf = sections.confidence[a:b].tolist()
        cls = sections.cls[a:b].tolist()
        notes = sections.notes[a:b] if sections.notes is not None else [None] * (b - a)
        out = []
        for j, (i, s0, e0, k, c, note) in enumerate(zip(rows, starts, ends, cls, conf, notes)):
            v = done[i]
            shares, reason = v.shares, v.reason
            if sections.notes is not None:  # counters: the section's own shares
                shares = {x: float(y) for x, y in zip(CLASSES, sections.shares[a + j]) if y}
                reason = _with_note(reason, note)
            out.append(Segment(
                span_ids[i] if i >= 0 else None, names[i] if i >= 0 else "(gap)",
                stages[i] if i >= 0 else None, s0, e0, CLASSES[k], shares, c, reason))
        return out
    return build
