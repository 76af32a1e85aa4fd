"""Per-task analysis: the critical path of every trace, each section classified by evidence,
and the task's shares, bottleneck, confidence and evidence in words.

Returns data (:class:`TaskResult`, :class:`Analysis`); presenting it is the exporters' job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from typing import Any, Callable, Iterator, NamedTuple, Optional

from .critical_path import walk, walk_arrays
from .evidence import CLASSES, IO, SpanFacts, classify, dominant

SELF_TIME_STAGES = ("task", "agent")  # their self time is orchestration


class Segment(NamedTuple):
    span_id: Optional[str]
    name: str
    stage: Optional[str]
    start_ns: int
    end_ns: int
    cls: str
    shares: dict
    confidence: float
    evidence: str


class TaskResult(NamedTuple):
    trace_id: str
    name: str
    lane: Optional[str]
    service: Optional[str]
    start_ns: int
    duration_ns: int
    bottleneck: str
    confidence: float
    shares: dict  # class -> fraction of the critical path (sums to 1)
    evidence: list  # sentences, most important first
    segments: list  # of Segment, contiguous, covering the task
    spans: int
    orchestration_ns: int
    duplicates: int
    off_path: int


@dataclasses.dataclass
class Analysis:
    tasks: list
    summary: dict


def analyze_trace(trace_id: str, facts: list, lanes: dict, services: dict) -> Optional[TaskResult]:
    """Analyse one trace given as :class:`SpanFacts` (the reference form, used by tests)."""
    w = walk(facts)
    if not w.roots:
        return None
    spans = w.spans
    return _task(trace_id, w, spans.__getitem__, lanes, services)


def _task(trace_id: str, w: Any, fact: Callable[[int], SpanFacts], lanes: dict,
          services: dict) -> TaskResult:
    """Shares, bottleneck, confidence and evidence from a walk; ``fact(i)`` gives span i."""
    task = None
    for r in w.roots:
        f = fact(r)
        if task is None or f.stage == "task":
            task = f
            if f.stage == "task":
                break
    duration = max(w.end - w.start, 0)
    segments = []
    verdicts: dict = {}
    facts: dict = {}
    totals = dict.fromkeys(CLASSES, 0.0)
    weights: dict = {}
    orchestration = 0
    for idx, start, end in w.sections:
        v = verdicts.get(idx)
        if v is None:
            span = facts[idx] = fact(idx) if idx >= 0 else None
            v = verdicts[idx] = classify(span)
        span = facts[idx]
        length = end - start
        for cls, frac in v.shares.items():
            totals[cls] += frac * length
        weights[idx] = weights.get(idx, 0) + length
        if span is not None and span.stage in SELF_TIME_STAGES:
            orchestration += length
        segments.append(Segment(span.span_id if span else None, span.name if span else "(gap)",
                                span.stage if span else None, start, end,
                                v.cls, v.shares, v.confidence, v.reason))
    if duration > 0:
        shares = {c: totals[c] / duration for c in CLASSES}
        bottleneck = dominant(shares)
    else:
        shares = dict.fromkeys(CLASSES, 0.0)
        bottleneck = next(iter(verdicts.values())).cls if verdicts else IO
    confidence = _confidence(shares, verdicts, weights, duration)
    evidence = _evidence(segments, duration)
    n_spans = len(w.spans) if w.spans else None
    return TaskResult(
        trace_id, task.name, lanes.get(task.span_id), services.get(task.span_id), w.start,
        duration, bottleneck, confidence, shares, evidence, segments, n_spans or 0,
        orchestration, w.duplicates, w.off_path)


def _confidence(shares: dict, verdicts: dict, weights: dict, duration: int) -> float:
    """Evidence quality on the path (time-weighted), lowered when the top two classes are close."""
    if duration <= 0 or not weights:
        return 0.0
    quality = sum(verdicts[k].confidence * w for k, w in weights.items()) / sum(weights.values())
    ranked = sorted(shares.values(), reverse=True)
    margin = ranked[0] - (ranked[1] if len(ranked) > 1 else 0.0)
    return round(quality * (0.5 + 0.5 * min(margin / 0.3, 1.0)), 2)


def _evidence(segments: list, duration: int) -> list:
    """The spans that held the path longest, with what they were doing."""
    per_span: dict = {}
    for s in segments:
        entry = per_span.setdefault(s.span_id, [0, s])
        entry[0] += s.end_ns - s.start_ns
    out = []
    for length, seg in sorted(per_span.values(), key=lambda e: -e[0])[:3]:
        share = length / duration if duration else 0.0
        label = f"{seg.name} ({seg.stage})" if seg.stage else seg.name
        out.append(f"{label}: {length / 1e9:.3g} s on the critical path ({share:.0%}), "
                   f"{seg.cls}: {seg.evidence}")
    return out


FACT_COLUMNS = SpanFacts._fields


def analyze_columns(cols: dict) -> Analysis:
    """Analyse the columns of ``store/sql/analysis_input.sql`` (lists, ordered by trace).

    The walk runs on integer arrays (``parent_idx``, ``start_ns``, ``end_ns``); a
    :class:`SpanFacts` is built only for the spans that own a critical-path section.
    """
    trace_no, parent = cols["trace_no"], cols["parent_idx"]
    starts, ends, kinds = cols["start_ns"], cols["end_ns"], cols["kind"]
    trace_ids, lane_col, service_col = cols["trace_id"], cols["lane"], cols["service"]
    fields = [cols[c] for c in ("span_id", "parent_span_id", "name", "stage", "kind", "start_ns",
                                "end_ns", "own_cpu", "own_wall", "own_faults", "child_cpu_ns",
                                "queue_s", "model_s", "server_local", "loop")]
    make = SpanFacts._make

    def fact(i: int) -> SpanFacts:
        return make([f[i] for f in fields])

    tasks: list = []
    with gc_paused():
        _walk_all(tasks, trace_no, parent, starts, ends, kinds, trace_ids, lane_col,
                  service_col, fields[0], fact)
    return Analysis(tasks, summarize(tasks))


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector. The analysis builds millions of small objects and
    no reference cycles; with a large heap each collection rescans it (0.5 s at 1M spans),
    which made building the results several times slower. Nestable."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _walk_all(tasks: list, trace_no: list, parent: list, starts: list, ends: list, kinds: list,
              trace_ids: list, lane_col: list, service_col: list, span_ids: list,
              fact: Callable[[int], SpanFacts]) -> None:
    n = len(trace_no)
    lo = 0
    while lo < n:
        hi = lo + 1
        current = trace_no[lo]
        while hi < n and trace_no[hi] == current:
            hi += 1
        w = walk_arrays(parent, starts, ends, kinds, lo, hi)
        trace_id, lanes, services = "", {}, {}
        for r in range(lo, hi):
            if trace_ids[r] is not None:
                trace_id = trace_ids[r]
                sid = span_ids[r]
                if lane_col[r] is not None:
                    lanes[sid] = lane_col[r]
                if service_col[r] is not None:
                    services[sid] = service_col[r]
        if w.roots:
            result = _task(trace_id, w, fact, lanes, services)
            tasks.append(result._replace(spans=hi - lo))
        lo = hi


def summarize(tasks: list) -> dict:
    """Fleet figures over all tasks."""
    total = sum(t.duration_ns for t in tasks)
    by_class = dict.fromkeys(CLASSES, 0.0)
    for t in tasks:
        for c in CLASSES:
            by_class[c] += t.shares.get(c, 0.0) * t.duration_ns
    bottlenecks: dict = {}
    lanes: dict = {}
    for t in tasks:
        bottlenecks[t.bottleneck] = bottlenecks.get(t.bottleneck, 0) + 1
        lane = t.lane or "unknown"
        lanes[lane] = lanes.get(lane, 0) + 1
    return {
        "tasks": len(tasks),
        "bottlenecks": dict(sorted(bottlenecks.items(), key=lambda kv: -kv[1])),
        "critical_path_s": round(total / 1e9, 6),
        "share_of_critical_path": {c: round(v / total, 4) if total else 0.0
                                   for c, v in by_class.items()},
        "orchestration_share": round(sum(t.orchestration_ns for t in tasks) / total, 4)
        if total else 0.0,
        "lanes": lanes,
        "spans": sum(t.spans for t in tasks),
    }
