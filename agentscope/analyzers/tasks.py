"""Per-task analysis: the critical path of every trace, each section classified by evidence,
and the task's shares, bottleneck, confidence and evidence in words.

Returns data (:class:`TaskResult`, :class:`Analysis`); presenting it is the exporters' job.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, NamedTuple, Optional

from .critical_path import walk
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
    """Analyse one trace (its spans as :class:`SpanFacts`)."""
    w = walk(facts)
    if not w.roots:
        return None
    spans = w.spans
    task = next((spans[r] for r in w.roots if spans[r].stage == "task"), spans[w.roots[0]])
    duration = max(w.end - w.start, 0)

    segments = []
    verdicts: dict = {}
    totals = dict.fromkeys(CLASSES, 0.0)
    weights: dict = {}
    orchestration = 0
    for idx, start, end in w.sections:
        v = verdicts.get(idx)
        span = spans[idx] if idx >= 0 else None
        if v is None:
            v = verdicts[idx] = classify(span)
        length = end - start
        for cls, frac in v.shares.items():
            totals[cls] += frac * length
        weights[idx] = weights.get(idx, 0) + length
        if span is not None and span.stage in SELF_TIME_STAGES:
            orchestration += length
        segments.append(Segment(span.span_id if span else None, span.name if span else "(gap)",
                                span.stage if span else None, start, end,
                                dominant(v.shares), v.shares, v.confidence, v.reason))
    if duration > 0:
        shares = {c: totals[c] / duration for c in CLASSES}
        bottleneck = dominant(shares)
    else:
        shares = dict.fromkeys(CLASSES, 0.0)
        bottleneck = dominant(next(iter(verdicts.values())).shares) if verdicts else IO
    confidence = _confidence(shares, verdicts, weights, duration)
    evidence = _evidence(segments, duration)
    return TaskResult(
        trace_id, task.name, lanes.get(task.span_id), services.get(task.span_id), w.start,
        duration, bottleneck, confidence, shares, evidence, segments, len(spans), orchestration,
        w.duplicates, w.off_path)


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


def analyze_rows(rows: Iterable[tuple]) -> Analysis:
    """Analyse rows of ``analysis_input.sql`` (ordered by trace)."""
    tasks = []
    current: Optional[str] = None
    facts: list = []
    lanes: dict = {}
    services: dict = {}

    def flush() -> None:
        if current is not None and facts:
            result = analyze_trace(current, facts, lanes, services)
            if result is not None:
                tasks.append(result)

    for row in rows:
        (trace_id, span_id, parent, name, stage, kind, start, end, own_cpu, own_wall, faults,
         child_cpu, queue_s, model_s, server, loop, lane, service) = row
        if trace_id != current:
            flush()
            current, facts, lanes, services = trace_id, [], {}, {}
        facts.append(SpanFacts(span_id, parent, name, stage, kind, start, end, own_cpu, own_wall,
                               faults, child_cpu, queue_s, model_s, server, bool(loop)))
        if lane:
            lanes[span_id] = lane
        if service:
            services[span_id] = service
    flush()
    return Analysis(tasks, summarize(tasks))


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
