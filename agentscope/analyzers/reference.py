"""The reference implementations the fleet engine is checked against (tests only).

They apply the same rules (:mod:`.evidence`, :mod:`.verdict`, :mod:`.counters`) organised the
plain way, so that a test can compare two computations of one definition:

* :func:`walk` / :func:`walk_arrays`: the critical path of one trace at a time, in Python
  (Jaeger's walk as :mod:`.critical_path` describes it), against :func:`~.critical_path.walk_many`;
* :func:`analyze_trace`: one trace's verdict from that walk, summed span by span, against the
  engine's arrays (without counters);
* :func:`section_means_sql`: the counters' means over sections computed in DuckDB
  (store/sql/section_counters.sql) against :func:`~.counters.section_means` in numpy.

Nothing in the analysis path imports this module.
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple, Optional

import numpy as np

from .counters import MAX_HOLD_NS, METRICS
from .critical_path import _descend_flat, _over_roots, unique_spans
from .evidence import (BASES, CLASSES, GAP_CLASS, GAP_CONFIDENCE, GAP_REASON, GAP_SHARES,
                       MEASURED_BASIS, SELF_TIME_STAGES, UNTRACED_BASIS, Facts, classify)
from .results import ReadOnlyDict, Segment, TaskResult
from .verdict import (NO_CLASS, assumed_parts, bottlenecks, evidence_kept, evidence_line,
                      span_label, task_confidence)


class Walk(NamedTuple):
    """The walk over one trace. ``sections`` are (index or -1 for a gap, start, end),
    ascending and merged; indices are positions in the arrays given to :func:`walk_arrays`
    (for :func:`walk`, in ``spans``, the unique spans in input order)."""

    spans: list
    sections: list
    start: int
    end: int
    roots: list
    off_path: int
    duplicates: int


def walk(spans: Iterable, root_id: Optional[str] = None) -> Walk:
    """The critical path over span-like objects (``span_id``, ``parent_id``, ``start``,
    ``end``, ``kind``), by index; from ``root_id`` only, when given and present.
    :func:`~.critical_path.critical_path` is the fleet walk's form of it."""
    uniq, index, parent, duplicates = unique_spans(spans)
    roots = [index[root_id]] if root_id in index else None
    w = walk_arrays(parent, [s.start for s in uniq], [s.end for s in uniq],
                    [s.kind for s in uniq], 0, len(uniq), roots=roots)
    return w._replace(spans=uniq, duplicates=duplicates)


class Buffers:
    """Scratch lists indexed by span row, for walking many traces of one set of arrays.

    Each trace uses only its own rows, so nothing needs clearing between traces (a set of
    buffers serves one pass over the arrays: do not walk the same rows twice with it)."""

    __slots__ = ("kids", "cs", "ce", "reached", "off", "cnt", "parent_of", "cursor")

    def __init__(self, n: int) -> None:
        self.kids: list = [None] * n
        self.cs: list = [0] * n
        self.ce: list = [0] * n
        self.reached: list = [False] * n
        self.off: list = [0] * n  # children of p: order[off[p]:off[p] + cnt[p]]
        self.cnt: list = [0] * n
        self.parent_of: list = [-1] * n
        self.cursor: list = [0] * n


def walk_arrays(parent: list, starts: list, ends: list, kinds: list, lo: int, hi: int,
                roots: Optional[list] = None, buf: Optional[Buffers] = None) -> Walk:
    """The walk over the spans ``lo..hi-1`` of flat arrays (one trace, unique spans).

    ``parent[i]`` is the index of i's parent, or -1 (a parent outside ``lo..hi`` counts as
    missing). ``roots`` overrides which spans are walked as roots. ``buf`` (sized for the
    arrays) is required when walking a trace inside larger arrays (``lo > 0``): one set of
    buffers serves every trace of a pass.
    """
    n = hi - lo
    if n <= 0:
        return Walk([], [], 0, 0, [], 0, 0)
    if buf is None:
        if lo:
            raise ValueError("walk_arrays over part of larger arrays needs buf=Buffers(len)")
        buf = Buffers(hi)
    kids, cs, ce, reached = buf.kids, buf.cs, buf.ce, buf.reached
    off, cnt, parent_of = buf.off, buf.cnt, buf.parent_of
    flat: list = []  # this trace's children, grouped by parent (see Buffers.off)
    found_roots = []
    for i in range(lo, hi):
        p = parent[i]
        if p < lo or p >= hi or p == i:
            found_roots.append(i)
        else:
            k = kids[p]
            if k is None:
                kids[p] = [i]
            else:
                k.append(i)
    if roots is None:
        roots = found_roots
    order = []
    for r in roots:
        s, e = starts[r], ends[r]
        cs[r], ce[r] = s, (e if e > s else s)
        reached[r] = True
        order.append(r)
    i = 0
    while i < len(order):
        p = order[i]
        i += 1
        ks = kids[p]
        if ks is None:
            continue
        p_start, p_end = cs[p], ce[p]
        producer = kinds[p] == "producer"
        kept = []
        for c in ks:
            if reached[c]:  # reached twice: a cycle
                continue
            if producer and kinds[c] == "consumer":
                continue
            c_start = starts[c]
            c_end = ends[c] if ends[c] > c_start else c_start
            point = c_start == c_end
            if c_start >= p_end and not (point and c_start == p_end):
                continue
            if c_end <= p_start and not (point and c_end == p_start):
                continue
            cs[c] = c_start if c_start > p_start else p_start
            ce[c] = c_end if c_end < p_end else p_end
            reached[c] = True
            parent_of[c] = p
            kept.append(c)
            order.append(c)
        if kept:
            # last finishing child first; ties to the earlier start, then input order
            kept.sort(key=lambda k: (-ce[k], cs[k]))
            off[p], cnt[p] = len(flat), len(kept)
            flat.extend(kept)
    off_path = n - len(order)
    start = min(cs[r] for r in roots)
    end = max(ce[r] for r in roots)
    sections: list = []
    cursor = buf.cursor
    _over_roots(roots, cs, ce, start, end, sections,
                lambda top, t: _descend_flat(top, t, cs, ce, flat, off, cnt, parent_of, cursor,
                                             sections))
    sections.reverse()
    merged: list = []
    for sec in sections:
        if merged and merged[-1][0] == sec[0] and merged[-1][2] == sec[1]:
            merged[-1] = (sec[0], merged[-1][1], sec[2])
        else:
            merged.append(sec)
    return Walk([], merged, start, end, roots, off_path, 0)


def analyze_trace(trace_id: str, facts: list, lanes: dict, services: dict,
                  threads: Any = None) -> Optional[TaskResult]:
    """Analyse one trace given as :class:`~.evidence.SpanFacts` (no counters): the engine's
    result for it, computed span by span. ``threads``: what the other threads of each span's
    process did meanwhile (:func:`~.threads.thread_facts` of the whole input, its rows for
    this trace: it spans traces, so it comes from outside)."""
    w = walk(facts)
    if not w.roots:
        return None
    spans = w.spans
    classified = classify(Facts.of(spans), threads)
    task = None
    for r in w.roots:
        if task is None or spans[r].stage == "task":
            task = spans[r]
            if task.stage == "task":
                break
    duration = max(w.end - w.start, 0)
    segments = []
    totals = dict.fromkeys(CLASSES, 0.0)
    assumed = dict.fromkeys(CLASSES, 0.0)
    weights: dict = {}
    confidences: dict = {}
    orchestration = 0
    for idx, start, end in w.sections:
        if idx >= 0:
            span = spans[idx]
            v = classified.verdict(idx)
            basis = int(classified.basis[idx])
            part, part_cls = assumed_parts(classified.shares[idx], [basis],
                                           [classified.wait_cls[idx]])
            segments.append(Segment(span.span_id, span.name, span.stage, start, end, v.cls,
                                    v.shares, v.confidence, v.reason, BASES[basis],
                                    {CLASSES[int(part_cls[0])]: float(part[0])}
                                    if part[0] else None))
            if span.stage in SELF_TIME_STAGES and basis == MEASURED_BASIS:
                orchestration += end - start
        else:
            segments.append(Segment(None, "(gap)", None, start, end, GAP_CLASS,
                                    dict(GAP_SHARES), GAP_CONFIDENCE, GAP_REASON,
                                    BASES[UNTRACED_BASIS]))
        seg = segments[-1]
        for cls, frac in seg.shares.items():
            totals[cls] += frac * (end - start)
        for cls, frac in (seg.assumed or {}).items():
            assumed[cls] += frac * (end - start)
        weights[idx] = weights.get(idx, 0) + end - start
        confidences[idx] = seg.confidence
    if duration > 0:
        shares = {c: totals[c] / duration for c in CLASSES}
        assumed = {c: assumed[c] / duration for c in CLASSES}
    else:
        shares = dict.fromkeys(CLASSES, 0.0)
        assumed = dict.fromkeys(CLASSES, 0.0)
    row = np.array([[shares[c] for c in CLASSES]])
    first = CLASSES.index(segments[0].cls) if segments else NO_CLASS
    bottleneck = CLASSES[int(bottlenecks(row, [duration], [first])[0])]
    confidence = 0.0
    if duration > 0 and weights:
        quality = sum(confidences[k] * x for k, x in weights.items()) / sum(weights.values())
        confidence = float(task_confidence([quality], row)[0])
    return TaskResult(
        trace_id, task.name, lanes.get(task.span_id), services.get(task.span_id), w.start,
        duration, bottleneck, confidence, shares, tuple(_evidence(segments, duration)), segments,
        len(spans), orchestration, w.duplicates, w.off_path,
        round(sum(x.end_ns - x.start_ns for x in segments if x.basis == "measured")
              / sum(x.end_ns - x.start_ns for x in segments), 4) if duration > 0 else 0.0,
        0, task.span_id, ReadOnlyDict(assumed))


def _evidence(segments: list, duration: int) -> list:
    """The spans that held the path longest, with what they were doing."""
    per_span: dict = {}
    for s in segments:
        entry = per_span.setdefault(s.span_id, [0, s])
        entry[0] += s.end_ns - s.start_ns
    ranked = sorted(per_span.values(), key=lambda e: -e[0])
    return [evidence_line(span_label(seg.name, seg.stage), held, duration, seg.cls, seg.evidence)
            for rank, (held, seg) in enumerate(ranked) if evidence_kept(rank, held, duration)]


def section_means_sql(store: Any, hosts: Any, start: Any, end: Any,
                      metrics: Iterable[str] = METRICS) -> dict:
    """The counters' means over sections, computed by the store in SQL: {metric: array, NaN =
    none}, as :func:`~.counters.section_means` gives them (its GPU-of-process refinement and
    per-process metrics aside)."""
    n = len(start)
    out: dict = {}
    if not n or not len(np.flatnonzero(np.not_equal(np.asarray(hosts, dtype=object), None))):
        return out
    ids, names, means = store.section_counter_means(hosts, start, end, metrics, MAX_HOLD_NS)
    for m in sorted(set(names.tolist())):
        col = np.full(n, np.nan)
        pick = names == m
        col[ids[pick]] = means[pick]
        out[m] = col
    return out
