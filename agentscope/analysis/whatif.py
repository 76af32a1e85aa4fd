"""``Analysis.whatif(...)``: the spans of an analysed store, read once more with what a
prediction needs (:class:`~agentscope.analyzers.whatif.Spans`), and the prediction."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from ..analyzers import engine
from ..analyzers.counters import METRICS
from ..analyzers.evidence import CLASSES
from ..analyzers.replay import Capacity
from ..analyzers.whatif import Prediction, Spans, predict, speedups


def spans_for_prediction(store: Any, classified: bool = True) -> tuple:
    """(:class:`Spans` of every task in ``store``, the recorded :class:`Capacity`, the
    store's :meth:`~agentscope.store.duckdb_store.Store.span_roles`). ``classified=False``
    leaves the spans' class shares at zero (for readers that need only their times, CPU and
    roles: the classification is most of the cost)."""
    if classified:
        series = store.counter_series(METRICS)
        trees = store.process_trees()
        inp = store.analysis_input(with_counters=series is not None or trees is not None)
        lags = store.loop_lags() if series is not None else None
        shares = engine.span_shares(inp, series, lags, trees)
    else:
        inp = store.analysis_input()
        shares = np.zeros((len(inp.trace_no), len(CLASSES)))
    roles = store.span_roles()
    n = len(inp.trace_no)
    trace_no = np.asarray(inp.trace_no)
    cuts = (np.flatnonzero(np.diff(trace_no)) + 1).tolist() if n else []
    bounds_all = list(zip([0] + cuts, cuts + [n])) if n else []
    parent = np.asarray(inp.parent_idx, dtype=np.int64)
    rows = np.arange(n)
    is_root = (parent < 0) | (parent == rows)
    bounds, ids, names, lanes, services = [], [], [], [], []
    stage = np.asarray(inp.stage, dtype=object)
    for lo, hi in bounds_all:
        roots = [r for r in range(lo, hi) if is_root[r]]
        if not roots:
            continue  # a parent cycle alone: no task (as the analysis)
        root = next((r for r in roots if stage[r] == "task"), roots[0])
        bounds.append((lo, hi))
        trace_id = inp.trace_id[root]
        if trace_id is None:
            trace_id = next((x for x in inp.trace_id[lo:hi] if x is not None), "")
        ids.append(trace_id)
        names.append(inp.name[root])
        lanes.append(inp.lane[root])
        services.append(roles["service"][root])
    host = np.asarray(inp.host, dtype=object) if inp.with_counters else \
        np.full(n, None, dtype=object)
    own_cpu = np.asarray(inp.own_cpu, dtype=np.float64)
    spans = Spans(
        bounds, np.where(is_root, -1, parent), np.asarray(inp.start_ns, dtype=np.int64),
        np.asarray(inp.end_ns, dtype=np.int64), np.asarray(inp.kind, dtype=object),
        np.asarray(inp.name, dtype=object), stage, roles["service"], shares,
        np.where(own_cpu >= 0, own_cpu, -1.0),
        np.asarray(inp.queue_s, dtype=np.float64) * 1e9, roles["queue_resource"], host,
        ids, names, lanes, services, np.asarray(inp.model_s, dtype=np.float64) * 1e9)
    return spans, Capacity(store.host_cores()), roles


def parse_slots(values: Sequence) -> dict:
    """``SERVER=N`` strings (or a {server: n} dict) as {server: n}; raises ValueError for a
    malformed one, or a server named twice."""
    if isinstance(values, dict):
        values = [f"{k}={v}" for k, v in values.items()]
    out: dict = {}
    for v in values:
        name, sep, n = str(v).rpartition("=")
        try:
            count = int(n)
        except ValueError:
            count = 0
        if not sep or not name or count < 1:
            raise ValueError(f"--slots {v!r}: expected SERVER=N with N a whole number >= 1")
        if name in out:
            raise ValueError(f"--slots: {name!r} given twice")
        out[name] = count
    return out


def whatif(analysis: Any, speedup: Sequence = (), cpus: Optional[int] = None,
           slots: "dict | Sequence | None" = None) -> Prediction:
    """See :meth:`agentscope.analysis.Analysis.whatif`."""
    changes = speedups(speedup)
    if cpus is not None and (not isinstance(cpus, int) or cpus < 1):
        raise ValueError(f"cpus must be a whole number of at least 1, not {cpus!r}")
    slots = parse_slots(slots or {})
    if not analysis.task_results:
        raise ValueError(f"no tasks in {analysis.source} to predict")
    with analysis._store.open() as store:
        spans, capacity, _ = spans_for_prediction(store)
    return predict(spans, changes, cpus, slots, capacity)
