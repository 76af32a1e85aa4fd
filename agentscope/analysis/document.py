"""The JSON report, schema ``agentscope.analysis/v1`` (ARCHITECTURE §7): what
``agentscope analyze --format json`` prints and :meth:`Analysis.to_dict` returns."""

from __future__ import annotations

import datetime
import json
import math
from typing import Any, Optional

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
    if not np.isfinite(cols["confidence"]).all():
        cols["confidence"] = finite(cols["confidence"].tolist())
    path = [dict(zip(_SEGMENT, row)) for row in zip(*(
        cols[c] if isinstance(cols[c], list) else cols[c].tolist() for c in _SEGMENT))]
    tasks = analysis.task_results
    cuts = np.searchsorted(np.asarray(analysis.sections.task, dtype=np.int64),
                           np.arange(len(tasks) + 1)).tolist()
    return {
        "schema": SCHEMA,
        "tasks": [_task(t, path[cuts[i]:cuts[i + 1]]) for i, t in enumerate(tasks)],
        "summary": finite(analysis.summary.to_dict()),
        "problems": [{"file": p.path, "line": p.line, "span_id": p.span_id, "reason": p.reason,
                      "torn": p.torn} for p in analysis.problems],
        "warnings": list(analysis.warnings),
    }


# a critical-path segment of the document: these section columns, under the same names
_SEGMENT = ("span_id", "name", "stage", "start_s", "end_s", "class", "confidence", "basis",
            "evidence")


def _task(t: Any, critical_path: list) -> dict:
    doc = {
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
    # its floats, summed in C: the sum is finite exactly when all of them are (a share is at
    # most 1, so no sum of finite ones overflows)
    total = t.confidence + t.measured_share + sum(t.shares.values()) + sum(t.assumed.values())
    return doc if total - total == 0 else finite(doc)


def finite(value: Any) -> Any:
    """``value`` with each float that is not finite (NaN, ±infinity) replaced by None, in
    dicts, lists and tuples at any depth (tuples become lists): JSON has no NaN, and
    ``json.dumps`` writes ``NaN``/``Infinity`` that strict parsers (JavaScript's, jq,
    Go's) refuse. Other values are returned as they are."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def strict_json(value: Any, indent: Optional[int] = None, **kwargs: Any) -> str:
    """``json.dumps(value)`` that every JSON parser takes: a float that is not finite is
    written as null (:func:`finite`), never as ``NaN``/``Infinity``. The value is dumped
    strictly first, so a document without such a float costs one dump as before; only one
    that holds one is walked. ``kwargs`` go to ``json.dumps`` (``default=``, ...)."""
    try:
        return json.dumps(value, indent=indent, allow_nan=False, **kwargs)
    except ValueError as e:
        if "not JSON compliant" not in str(e):  # e.g. a circular reference
            raise
        return json.dumps(finite(value), indent=indent, allow_nan=False, **kwargs)
