"""An analysis as pandas DataFrames: :attr:`Analysis.tasks` and :attr:`Analysis.critical_path`.

Their values are the JSON report's (the same rounding), with the shares as one column per
class; the columns are listed in docs/analysis.md and pinned by the tests.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..analyzers.evidence import BASES, CLASSES
from ..analyzers.verdict import bottleneck_assumed

TASK_COLUMNS = ("trace_id", "name", "lane", "service", "start", "duration_s", "bottleneck",
                "confidence", "measured_share", *(f"share_{c}" for c in CLASSES),
                "orchestration_s", "spans", "evidence", "bottleneck_assumed",
                *(f"assumed_{c}" for c in CLASSES), "timeout_s", "retry_s")
SECTION_COLUMNS = ("trace_id", "seq", "span_id", "name", "stage", "start_s", "end_s",
                   "duration_s", "class", "confidence", "basis",
                   *(f"share_{c}" for c in CLASSES), "evidence")
STRINGS = ("trace_id", "name", "lane", "service", "bottleneck", "span_id", "stage", "class",
           "basis", "evidence")


def tasks_frame(analysis: Any) -> Any:
    """One row per task, in the analysis' order. ``start`` is a UTC timestamp (to the
    nanosecond; the JSON report gives it to the millisecond); ``evidence`` a list of
    sentences, most important first."""
    import pandas as pd

    tasks = analysis.task_results
    cols: dict = {
        "trace_id": [t.trace_id for t in tasks], "name": [t.name for t in tasks],
        "lane": [t.lane for t in tasks], "service": [t.service for t in tasks],
        "start": pd.to_datetime(np.asarray([t.start_ns for t in tasks], dtype=np.int64),
                                utc=True),
        "duration_s": [round(t.duration_ns / 1e9, 9) for t in tasks],
        "bottleneck": [t.bottleneck for t in tasks],
        "confidence": [t.confidence for t in tasks],
        "measured_share": [t.measured_share for t in tasks],
    }
    for c in CLASSES:
        cols[f"share_{c}"] = [round(t.shares.get(c, 0.0), 6) for t in tasks]
    cols["orchestration_s"] = [t.orchestration_ns / 1e9 for t in tasks]
    cols["spans"] = [t.spans for t in tasks]
    cols["evidence"] = [list(t.evidence) for t in tasks]
    cols["bottleneck_assumed"] = [bottleneck_assumed(t) for t in tasks]
    cols["timeout_s"] = [t.timeout_ns / 1e9 for t in tasks]
    cols["retry_s"] = [t.retry_ns / 1e9 for t in tasks]
    for c in CLASSES:
        cols[f"assumed_{c}"] = [round(t.assumed.get(c, 0.0), 6) for t in tasks]
    return _frame(cols, TASK_COLUMNS, STRINGS)


def section_columns(analysis: Any, lo: int = 0, hi: "int | None" = None) -> dict:
    """The critical path's sections (those from ``lo`` to ``hi`` - 1; default all) as
    columns (lists and arrays, in the order of SECTION_COLUMNS): what
    :func:`critical_path_frame` and the JSON report are made of."""
    sec = analysis.sections
    hi = len(sec) if hi is None else hi
    tasks = analysis.task_results
    task = np.asarray(sec.task, dtype=np.int64)[lo:hi]
    trace_ids = np.asarray([t.trace_id for t in tasks], dtype=object)
    t0 = np.asarray([t.start_ns for t in tasks], dtype=np.int64)
    base = t0[task] if len(tasks) else np.zeros(0, dtype=np.int64)
    start = np.asarray(sec.start_ns, dtype=np.int64)[lo:hi]
    end = np.asarray(sec.end_ns, dtype=np.int64)[lo:hi]
    cols: dict = {
        "trace_id": trace_ids[task] if len(tasks) else np.zeros(0, dtype=object),
        "seq": np.asarray(sec.seq, dtype=np.int64)[lo:hi],
        "span_id": np.asarray(sec.span_id[lo:hi], dtype=object),
        "name": sec.name[lo:hi], "stage": sec.stage[lo:hi],
        # rounded as the JSON report rounds them (Python's round, correctly rounded)
        "start_s": seconds(start - base), "end_s": seconds(end - base),
        "duration_s": seconds(end - start),
        "class": np.asarray(CLASSES, dtype=object)[np.asarray(sec.cls[lo:hi], dtype=np.int64)],
        "confidence": np.asarray(sec.confidence, dtype=np.float64)[lo:hi],
        "basis": np.asarray(BASES, dtype=object)[np.asarray(sec.basis[lo:hi],
                                                           dtype=np.int64)],
    }
    shares = sec.shares[lo:hi]
    for k, c in enumerate(CLASSES):
        cols[f"share_{c}"] = shares.column(k)
    cols["evidence"] = sec.evidence.all() if (lo, hi) == (0, len(sec)) else \
        sec.evidence.texts(lo, hi)
    return cols


# below 2**52 ns (52 days), n / 1e9 (correctly rounded) is the double nearest to n's decimal
# in seconds and an ulp of it is under 1e-9, so rounding it to 9 places gives it back; half
# that, for a margin (tests/test_analysis_api.py checks this against round())
EXACT_NS = 2 ** 51


def seconds(ns: Any) -> list:
    """Integer ns as seconds rounded to the ns, ``[round(n / 1e9, 9) for n in ns]``, in one
    numpy division where that is the same (every value under :data:`EXACT_NS`, 26 days)."""
    ns = np.asarray(ns, dtype=np.int64)
    values = (ns / 1e9).tolist()
    if not len(ns) or int(np.abs(ns).max()) < EXACT_NS:
        return values
    return [round(x, 9) for x in values]


def critical_path_frame(analysis: Any) -> Any:
    """One row per critical-path section, tasks in the analysis' order and each task's in time
    order. Times are seconds from the task's start; ``span_id`` is None for a gap between
    root spans; ``evidence`` is the section's evidence in words."""
    return _frame(section_columns(analysis), SECTION_COLUMNS, STRINGS)


def _frame(cols: dict, columns: tuple, strings: tuple) -> Any:
    """A DataFrame of ``cols``; the ``strings`` columns kept as Python objects, so that what
    is missing is None (pandas 3 would infer its string dtype, where it is NaN)."""
    import pandas as pd

    return pd.DataFrame({c: pd.Series(cols[c], dtype=object) if c in strings else cols[c]
                         for c in columns}, columns=list(columns))
