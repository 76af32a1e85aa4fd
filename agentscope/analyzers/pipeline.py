"""From a loaded store to an :class:`~agentscope.analyzers.tasks.Analysis`, saved back into the
store's ``tasks`` and ``critical_path`` views."""

from __future__ import annotations

import json

from ..store.duckdb_store import Store, sql
from .evidence import CLASSES
from .tasks import Analysis, analyze_columns, gc_paused


def analyze_store(store: Store, save: bool = True) -> Analysis:
    with gc_paused():
        analysis = analyze_columns(fetch_columns(store))
        if save:
            store.save_analysis(_task_rows(analysis), _section_rows(analysis))
    return analysis


def fetch_columns(store: Store) -> dict:
    """The analysis input as Python lists, one per column (NULL -> None). Fetched as numpy
    arrays first: many times faster than row tuples for a million spans."""
    import numpy as np

    arrays = store.con.execute(sql("analysis_input.sql")).fetchnumpy()
    cols = {}
    for name, a in arrays.items():
        mask = np.ma.getmaskarray(a) if np.ma.isMaskedArray(a) else None
        data = np.ma.getdata(a)
        if data.dtype.kind == "f":  # NULLs of float columns may come as NaN
            nan = np.isnan(data)
            mask = nan if mask is None else (mask | nan)
        if mask is not None and mask.any():
            values = data.astype(object)
            values[mask] = None
            cols[name] = values.tolist()
        else:
            cols[name] = data.tolist()
    return cols


def _task_rows(analysis: Analysis) -> dict:
    """The task_results table, as columns."""
    tasks = analysis.tasks
    cols = {
        "trace_id": [t.trace_id for t in tasks], "name": [t.name for t in tasks],
        "lane": [t.lane for t in tasks], "service": [t.service for t in tasks],
        "start_ns": [t.start_ns for t in tasks], "duration_ns": [t.duration_ns for t in tasks],
        "bottleneck": [t.bottleneck for t in tasks],
        "confidence": [t.confidence for t in tasks],
    }
    for c in CLASSES:
        cols[f"share_{c}"] = [t.shares.get(c, 0.0) for t in tasks]
    cols["orchestration_ns"] = [t.orchestration_ns for t in tasks]
    cols["spans"] = [t.spans for t in tasks]
    cols["evidence"] = [json.dumps(t.evidence) for t in tasks]
    return cols


def _section_rows(analysis: Analysis) -> dict:
    """The cp_sections table, as columns (built by transposing, not row by row)."""
    trace_ids, seqs, segments = [], [], []
    for t in analysis.tasks:
        n = len(t.segments)
        trace_ids.extend([t.trace_id] * n)
        seqs.extend(range(n))
        segments.extend(t.segments)
    fields = list(zip(*segments)) if segments else [[] for _ in range(9)]
    span_id, name, stage, start, end, cls, shares, confidence, evidence = fields
    cols = {"trace_id": trace_ids, "seq": seqs, "span_id": list(span_id), "name": list(name),
            "stage": list(stage), "start_ns": list(start), "end_ns": list(end),
            "class": list(cls), "confidence": list(confidence)}
    for c in CLASSES:
        cols[f"share_{c}"] = [s.get(c, 0.0) for s in shares]
    cols["evidence"] = list(evidence)
    return cols
