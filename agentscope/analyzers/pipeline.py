"""From a loaded store to an :class:`~agentscope.analyzers.tasks.Analysis`, saved back into the
store's ``tasks`` and ``critical_path`` views."""

from __future__ import annotations

import json

from ..store.duckdb_store import Store, sql
from .evidence import CLASSES
from .tasks import Analysis, analyze_rows


def analyze_store(store: Store, save: bool = True) -> Analysis:
    cursor = store.con.execute(sql("analysis_input.sql"))
    analysis = analyze_rows(_iter_rows(cursor))
    if save:
        store.save_analysis(_task_rows(analysis), _section_rows(analysis))
    return analysis


def _iter_rows(cursor, batch: int = 65536):
    while True:
        rows = cursor.fetchmany(batch)
        if not rows:
            return
        yield from rows


def _task_rows(analysis: Analysis) -> list:
    return [(t.trace_id, t.name, t.lane, t.service, t.start_ns, t.duration_ns, t.bottleneck,
             t.confidence, *(t.shares.get(c, 0.0) for c in CLASSES), t.orchestration_ns,
             t.spans, json.dumps(t.evidence)) for t in analysis.tasks]


def _section_rows(analysis: Analysis) -> list:
    return [(t.trace_id, i, s.span_id, s.name, s.stage, s.start_ns, s.end_ns, s.cls,
             s.confidence, *(s.shares.get(c, 0.0) for c in CLASSES), s.evidence)
            for t in analysis.tasks for i, s in enumerate(t.segments)]
