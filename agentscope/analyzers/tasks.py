"""Per-task analysis: the critical path of every trace, each section classified by evidence,
and the task's shares, bottleneck, confidence and evidence in words.

Returns data (:class:`TaskResult`, :class:`Analysis`); presenting it is the exporters' job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from collections.abc import Sequence
from typing import Any, Callable, Iterator, NamedTuple, Optional

from .critical_path import walk
from .evidence import CLASSES, IO, SpanFacts, classify, dominant

SELF_TIME_STAGES = ("task", "agent")  # their self time is orchestration


class Segment:
    """One critical-path section with its class. ``shares`` and ``evidence`` may be given as
    zero-argument callables: they are then computed when first read (the words are only
    needed for reports, and cost more than the numbers)."""

    __slots__ = ("span_id", "name", "stage", "start_ns", "end_ns", "cls", "confidence",
                 "_shares", "_evidence")

    def __init__(self, span_id: Optional[str], name: str, stage: Optional[str], start_ns: int,
                 end_ns: int, cls: str, shares: Any, confidence: float, evidence: Any) -> None:
        self.span_id, self.name, self.stage = span_id, name, stage
        self.start_ns, self.end_ns, self.cls, self.confidence = start_ns, end_ns, cls, confidence
        self._shares, self._evidence = shares, evidence

    @property
    def shares(self) -> dict:
        if callable(self._shares):
            self._shares = self._shares()
        return self._shares

    @property
    def evidence(self) -> str:
        if callable(self._evidence):
            self._evidence = self._evidence()
        return self._evidence

    def __repr__(self) -> str:
        return (f"Segment({self.span_id!r}, {self.name!r}, {self.stage!r}, {self.start_ns}, "
                f"{self.end_ns}, {self.cls!r})")


class LazySegments(Sequence):
    """A task's segments, built on first use from the analysis's section arrays."""

    __slots__ = ("_build", "_items")

    def __init__(self, build: Callable[[], list]) -> None:
        self._build, self._items = build, None

    def _list(self) -> list:
        if self._items is None:
            self._items = self._build()
        return self._items

    def __getitem__(self, i):  # type: ignore[override]
        return self._list()[i]

    def __len__(self) -> int:
        return len(self._list())

    def __iter__(self):  # type: ignore[override]
        return iter(self._list())


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
    sections: Any = None  # the engine's section arrays (for saving), when it made them
    columns: Any = None  # the input columns they index into
    # called by exporters before reading every task's segments (lets the engine build their
    # evidence in bulk); None when there is nothing to prepare
    prepare: Optional[Callable[[], None]] = None


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
