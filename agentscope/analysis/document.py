"""The JSON report, schema ``agentscope.analysis/v1`` (ARCHITECTURE §7): what
``agentscope analyze --format json`` prints and :meth:`Analysis.to_dict` returns."""

from __future__ import annotations

import datetime
from typing import Any

from ..analyzers.evidence import CLASSES

SCHEMA = "agentscope.analysis/v1"


def iso_time(ns: int) -> str:
    """ns since the epoch as ISO 8601 UTC, to the millisecond (e.g. 2026-12-02T10:00:00.000Z)."""
    t = datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.timezone.utc)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def task_dict(t: Any) -> dict:
    """One task of the document, with its critical path."""
    start = t.start_ns
    return {
        "trace_id": t.trace_id,
        "name": t.name,
        "lane": t.lane,
        "service": t.service,
        "start": iso_time(t.start_ns),
        "duration_s": round(t.duration_ns / 1e9, 9),
        "bottleneck": t.bottleneck,
        "confidence": t.confidence,
        "shares": {c: round(t.shares.get(c, 0.0), 6) for c in CLASSES},
        "evidence": list(t.evidence),
        "spans": t.spans,
        "critical_path": [
            {"span_id": s.span_id, "name": s.name, "stage": s.stage,
             "start_s": round((s.start_ns - start) / 1e9, 9),
             "end_s": round((s.end_ns - start) / 1e9, 9),
             "class": s.cls, "confidence": s.confidence, "evidence": s.evidence}
            for s in t.segments],
    }


def document(analysis: Any) -> dict:
    """The whole document of an :class:`~agentscope.analysis.Analysis`."""
    analysis.sections.evidence.all()  # every section's words in one go (then read per task)
    return {
        "schema": SCHEMA,
        "tasks": [task_dict(t) for t in analysis.task_results],
        "summary": analysis.summary.to_dict(),
        "problems": [{"file": p.path, "line": p.line, "span_id": p.span_id, "reason": p.reason,
                      "torn": p.torn} for p in analysis.problems],
    }
