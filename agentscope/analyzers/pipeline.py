"""From a loaded store to an :class:`~agentscope.analyzers.tasks.Analysis`, saved back into the
store's ``tasks`` and ``critical_path`` views."""

from __future__ import annotations

import json

from ..store.duckdb_store import Store, sql
from ..vocab import Stage
from .evidence import CLASSES
from .engine import analyze_columns
from .tasks import Analysis, gc_paused


# for the counters of the span's host: its 1-based position in the list of hosts given as the
# parameter (0: none); its process; the context switches of its thread (not netted) and of the
# child processes it waited for
COUNTER_COLUMNS = """coalesce(list_position(?::VARCHAR[], s.host), 0) AS host_code,
    coalesce(s.vcsw, 0) AS vcsw, coalesce(s.ivcsw, 0) AS ivcsw, coalesce(s.pid, -1) AS pid,
    coalesce(TRY_CAST(s.a[8] AS BIGINT), 0) AS child_ivcsw,
    coalesce(TRY_CAST(s.a[9] AS BIGINT), 0) AS child_vcsw,"""


def analyze_store(store: Store, save: bool = True) -> Analysis:
    """Analyse everything in the store; with ``save``, replace the tasks/critical_path views.
    Counter samples in the store (agentscope.collectors) join each critical-path section."""
    from .counters import gpu_idle, section_counters

    with gc_paused():
        analysis = analyze_columns(
            fetch_columns(store),
            counters=lambda hosts, start, end, pids=None: section_counters(
                store.con, hosts, start, end, pids))
        if save:
            store.save_analysis(_task_rows(analysis), _section_rows(analysis))
            if "host" in analysis.columns:  # there are counters
                gpu = gpu_idle(store.con)
                if gpu:
                    analysis.summary["gpu"] = gpu
    return analysis


def fetch_columns(store: Store) -> dict:
    """The analysis input as numpy arrays in ``idx`` order (each trace one contiguous run),
    one per column: numbers as numeric arrays (the query never returns NULL numbers), strings
    as object arrays with None for NULL. Fetching columns is many times faster than row
    tuples for a million spans."""
    import numpy as np

    from .counters import METRICS

    # the columns the counter join needs, only when there are counters to join
    with_counters = bool(store.con.execute(
        "SELECT 1 FROM samples WHERE metric IN (SELECT unnest(?)) LIMIT 1",
        [list(METRICS)]).fetchall())
    hosts: list = []
    if with_counters:
        hosts = [h for (h,) in store.con.execute(
            "SELECT DISTINCT host FROM spans WHERE host IS NOT NULL ORDER BY host").fetchall()]
    query = sql("analysis_input.sql").replace(
        "{counter_columns}", COUNTER_COLUMNS if with_counters else "")
    arrays = store.con.execute(query, [hosts] if with_counters else []).fetchnumpy()
    idx = np.asarray(arrays.pop("idx"), dtype=np.int64)
    where = np.empty_like(idx)  # row of each position
    where[idx] = np.arange(len(idx))
    cols = {}
    for name, a in arrays.items():
        data = np.ma.getdata(a)[where]
        if np.ma.isMaskedArray(a):
            mask = np.ma.getmaskarray(a)[where]
            if mask.any():
                data = data.astype(object)
                data[mask] = None
        cols[name] = data
    # stages come as codes (1-based positions in Stage order, 0 for none): one shared string
    # object per stage instead of one per span
    names = np.array([None] + [s.value for s in Stage], dtype=object)
    if with_counters:  # hosts likewise: one shared string per host
        cols["host"] = np.array([None] + hosts, dtype=object)[
            np.asarray(cols.pop("host_code"), dtype=np.int64)]
    cols["stage_code"] = np.asarray(cols["stage_code"], dtype=np.int64)
    cols["stage"] = names[cols["stage_code"]]
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
    """The cp_sections table, as columns (numpy arrays), straight from the engine's arrays."""
    sec = analysis.sections
    if sec is None or not len(sec.task):
        return {}
    import numpy as np

    cols = analysis.columns
    gap = sec.span < 0
    rows = np.where(gap, 0, sec.span)

    def pick(name: str, gap_value: object = None) -> np.ndarray:
        values = np.asarray(cols[name], dtype=object)[rows]
        values[gap] = gap_value
        return values

    out = {"trace_id": np.asarray([t.trace_id for t in analysis.tasks], dtype=object)[sec.task],
           "seq": sec.seq, "span_id": pick("span_id"), "name": pick("name", "(gap)"),
           "stage": pick("stage"), "start_ns": sec.start, "end_ns": sec.end,
           "class": np.asarray(CLASSES, dtype=object)[sec.cls], "confidence": sec.confidence}
    for k, c in enumerate(CLASSES):
        out[f"share_{c}"] = np.ascontiguousarray(sec.shares[:, k])
    return out
