"""``Analysis.plan(...)``: the figures of the capacity plan gathered from an analysed store
(:class:`~agentscope.analyzers.plan.PlanInput`), and the plan."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..analyzers.lanes import head_of_line
from ..analyzers.plan import PlanInput, parse_price, plan
from ..analyzers.timing import covered_ns
from ..analyzers.whatif import Stats
from .document import finite
from .whatif import spans_for_prediction


def capacity_plan(analysis: Any, prices: Any = None, gpu_target: float = 0.8) -> dict:
    """See :meth:`agentscope.analysis.Analysis.plan`."""
    if isinstance(prices, dict):
        prices = {k: parse_price(f"{k}={v}")[1] for k, v in prices.items()}
    else:
        prices = dict(parse_price(p) for p in (prices or ()))
    if not 0 < gpu_target <= 1:
        raise ValueError(f"gpu_target {gpu_target!r}: a share of the time, over 0 and at most 1")
    tasks = analysis.task_results
    with analysis._store.open() as store:
        # the plan reads the spans' times, CPU and roles, not their classes
        spans, capacity, roles = spans_for_prediction(store, classified=False)
        resources = store.plan_resources()
    starts = np.asarray([t.start_ns for t in tasks], dtype=np.int64)
    ends = starts + np.asarray([t.duration_ns for t in tasks], dtype=np.int64)
    busy_s = covered_ns(starts, ends) / 1e9 if len(tasks) else 0.0
    by_stage: dict = {}
    for stage, classes in analysis.breakdown("stage").items():
        by_stage[stage] = by_stage.get(stage, 0.0) + sum(classes.values())
    s = analysis.summary
    by_class = {c: v * s.critical_path_s for c, v in s.share_of_critical_path.items()}

    # CPU the spans measured, per task; the server-reported model time
    cpu = np.maximum(np.asarray(spans.cpu_ns, dtype=np.float64), 0.0)
    span_s = (np.asarray(spans.end) - np.asarray(spans.start)).astype(np.float64)
    measured = np.asarray(spans.cpu_ns) >= 0
    cpu_of = {tid: cpu[lo:hi].sum() / 1e9 for tid, (lo, hi) in zip(spans.task_id,
                                                                    spans.bounds)}
    task_cpu = np.asarray([cpu_of.get(t.trace_id, 0.0) for t in tasks], dtype=np.float64)
    model_s = float(np.sum(spans.model_ns)) / 1e9 if spans.model_ns is not None else 0.0
    lanes: dict = {}
    for t, task in enumerate(tasks):
        lane = task.lane or "(none)"
        d = lanes.setdefault(lane, {"tasks": 0, "task_seconds": 0.0, "cpu_core_s": 0.0})
        d["tasks"] += 1
        d["task_seconds"] += task.duration_ns / 1e9
        d["cpu_core_s"] += float(task_cpu[t])

    gpu = s.gpu or {}
    measured_s = sum(g["measured_s"] for g in gpu.values())
    gpu_busy = sum(g["busy"] * g["measured_s"] for g in gpu.values())
    memory = sum(v for what, _, _, v in resources if what == "memory")
    energy: dict = {}
    for what, _, _, v in resources:
        if what.endswith("_energy"):
            key = what.split("_")[0]
            energy[key] = energy.get(key, 0.0) + float(v)
    inp = PlanInput(
        tasks=len(tasks), task_seconds=sum(t.duration_ns for t in tasks) / 1e9, busy_s=busy_s,
        path_by_stage=by_stage, path_by_class=by_class, lanes=lanes,
        cpu_core_s=float(task_cpu.sum()),
        cpu_measured_share=float(span_s[measured].sum() / span_s.sum()) if span_s.sum() else 0.0,
        model_s=model_s, gpus=len(gpu), gpu_busy_s=gpu_busy if gpu else None,
        gpu_measured_busy=gpu_busy / measured_s if measured_s else None,
        cores=sum(capacity.cores.values()), memory_gb=memory / 1e9 if memory else None,
        energy_j=energy)
    doc = plan(inp, prices, gpu_target)
    doc["lanes_latency"] = {
        lane: Stats.of([t.duration_ns for t in tasks if (t.lane or "(none)") == lane],
                       [t.start_ns for t in tasks if (t.lane or "(none)") == lane],
                       [t.start_ns + t.duration_ns for t in tasks
                        if (t.lane or "(none)") == lane]).to_dict()
        for lane in sorted({t.lane or "(none)" for t in tasks})}
    doc["head_of_line"] = head_of_line(spans, roles.get("held_by"))
    return finite(doc)  # a figure over nothing measured is null, never NaN (strict JSON)
