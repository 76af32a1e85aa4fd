"""The JSON report, schema ``agentscope.analysis/v1`` (ARCHITECTURE §7): what
``agentscope analyze --format json`` prints and :meth:`Analysis.to_dict` returns."""

from __future__ import annotations

import datetime
from typing import Any

import numpy as np

from ..analyzers.evidence import CLASSES
from ..analyzers.verdict import bottleneck_assumed
from .frames import section_columns

SCHEMA = "agentscope.analysis/v1"


def iso_time(ns: int) -> str:
    """ns since the epoch as ISO 8601 UTC, to the millisecond (e.g. 2026-12-02T10:00:00.000Z)."""
    t = datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.timezone.utc)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def document(analysis: Any) -> dict:
    """The whole document of an :class:`~agentscope.analysis.Analysis`."""
    cols = section_columns(analysis)  # every section at once, then cut per task
    path = [dict(zip(_SEGMENT, row)) for row in zip(*(
        cols[c] if isinstance(cols[c], list) else cols[c].tolist() for c in _SEGMENT))]
    tasks = analysis.task_results
    cuts = np.searchsorted(np.asarray(analysis.sections.task, dtype=np.int64),
                           np.arange(len(tasks) + 1)).tolist()
    return {
        "schema": SCHEMA,
        "tasks": [_task(t, path[cuts[i]:cuts[i + 1]]) for i, t in enumerate(tasks)],
        "summary": analysis.summary.to_dict(),
        "problems": [{"file": p.path, "line": p.line, "span_id": p.span_id, "reason": p.reason,
                      "torn": p.torn} for p in analysis.problems],
        "warnings": list(analysis.warnings),
    }


# a critical-path segment of the document: these section columns, under the same names
_SEGMENT = ("span_id", "name", "stage", "start_s", "end_s", "class", "confidence", "basis",
            "evidence")


def _task(t: Any, critical_path: list) -> dict:
    return {
        "trace_id": t.trace_id,
        "name": t.name,
        "lane": t.lane,
        "service": t.service,
        "start": iso_time(t.start_ns),
        "duration_s": round(t.duration_ns / 1e9, 9),
        "bottleneck": t.bottleneck,
        "confidence": t.confidence,
        "measured_share": t.measured_share,
        "shares": {c: round(t.shares.get(c, 0.0), 6) for c in CLASSES},
        # the part of each share that rests on a stage label or an assumption, not measurement
        "assumed_shares": {c: round(t.assumed.get(c, 0.0), 6) for c in CLASSES},
        "bottleneck_assumed": bottleneck_assumed(t),
        "evidence": list(t.evidence),
        "spans": t.spans,
        # critical-path seconds lost to timeouts and to retried failures
        "timeout_s": round(t.timeout_ns / 1e9, 9),
        "retry_s": round(t.retry_ns / 1e9, 9),
        "critical_path": critical_path,
    }
