"""The capacity view (``agentscope plan``): how much of the tasks' critical paths is the
agents' own orchestration and their tools, what that means for the CPU:GPU ratio, how busy the
GPU can be at most, how many cores keep a GPU at a target utilization, and what a completed
task costs in resource-seconds, energy and money.

The rule of thumb is the background articles' (``../shared/seeds``, the CPU:GPU ratio
article, §"how to choose"): where task orchestration takes under 20 % of the time and the
inference is pure tensor work, a GPU-centric design (CPU:GPU around 1:8) fits; where
orchestration and tool calls take over 50 %, move toward a balanced 1:1. It is their rule,
quoted, not a law; the measured figures beside it are what this module adds:

* **the GPU's ceiling** (Amdahl): a task keeps a GPU busy at most the GPU share of its
  critical path; with ``k`` tasks in flight per GPU on average, at most ``k`` times that (and
  never over 100 %). Shown beside the GPU busy share the collectors measured.
* **CPU core-seconds per GPU-busy second**: the CPU the tasks' spans used (their threads and
  the child processes they waited for) over the seconds a GPU was busy (NVML utilization
  integrated over the tasks' time; else the compute time the model server reported per
  request). Keeping a GPU busy ``target`` of the time then takes ``target`` times that many
  cores.
* **per task**: core-seconds, GPU-seconds and GB-seconds of memory *provisioned* (what the
  collectors saw on the hosts, for the time tasks ran, shared among the tasks completed
  meanwhile: what one pays for), the core-seconds *consumed*, and the energy the NVML and
  RAPL counters recorded; with prices, the same in money.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

SCHEMA = "agentscope.plan/v1"
# the articles' rule of thumb (orchestration + tool share of the time)
GPU_CENTRIC_BELOW = 0.20
BALANCED_ABOVE = 0.50
ORCHESTRATION_STAGES = ("task", "agent", "context")
TOOL_STAGES = ("tool", "env")
RULE_SOURCE = ("a rule of thumb from industry writing on CPU:GPU sizing for agents (quoted, "
               "not measured here), on the orchestration and tool share of the critical "
               "paths: under 20 % (with pure tensor inference) keep a GPU-centric ratio such "
               "as 1:8; over 50 %, move toward 1:1")
PRICES = ("gpu", "cpu", "mem")  # USD per GPU-hour, per core-hour, per GB-hour


@dataclasses.dataclass(frozen=True)
class PlanInput:
    """What the plan is computed from (gathered by :mod:`agentscope.analysis.plan`)."""

    tasks: int
    task_seconds: float  # sum of task durations
    busy_s: float  # time at least one task ran
    path_by_stage: dict  # stage -> critical-path seconds (all classes)
    path_by_class: dict  # class -> critical-path seconds
    lanes: dict  # lane -> {"tasks", "task_seconds", "cpu_core_s"}
    cpu_core_s: float  # CPU the spans measured (threads + waited-for children)
    cpu_measured_share: float  # share of span time with CPU accounting
    model_s: float  # server-reported model compute (prefill + decode), all requests
    gpus: int  # GPUs the collectors saw
    gpu_busy_s: Optional[float]  # NVML: busy seconds over the tasks' time (None: no GPU)
    gpu_measured_busy: Optional[float]  # NVML: mean busy share over the tasks' time
    cores: int  # cores the collectors saw (0: not sampled)
    memory_gb: Optional[float]  # memory of the hosts (GB; None: not sampled)
    energy_j: dict  # "gpu"/"cpu" -> joules over the tasks' time (absent: not measured)


def plan(inp: PlanInput, prices: Optional[dict] = None, gpu_target: float = 0.8) -> dict:
    """The ``agentscope.plan/v1`` document."""
    prices = dict(prices or {})
    path = sum(inp.path_by_stage.values())
    orch = sum(inp.path_by_stage.get(s, 0.0) for s in ORCHESTRATION_STAGES)
    tools = sum(inp.path_by_stage.get(s, 0.0) for s in TOOL_STAGES)
    share = (orch + tools) / path if path > 0 else 0.0
    gpu_share = inp.path_by_class.get("gpu", 0.0) / path if path > 0 else 0.0
    needs_gpu = []
    notes = []

    if inp.tasks == 0 or path <= 0:
        advice = "no tasks: nothing to size"
    elif share > BALANCED_ABOVE:
        advice = ("move toward a balanced ratio (1 CPU : 1 GPU): orchestration and tools hold "
                  "most of these tasks' critical paths")
    elif share < GPU_CENTRIC_BELOW:
        advice = ("a GPU-centric ratio (such as 1 CPU : 8 GPU) fits these tasks, where their "
                  "inference is tensor work on the GPU")
    else:
        advice = ("between the two: neither ratio is indicated; size by the measured cores per "
                  "GPU below")

    in_flight = inp.task_seconds / inp.busy_s if inp.busy_s > 0 else 0.0
    # with no GPU seen, the ceiling of one GPU serving these tasks
    per_gpu = in_flight / max(inp.gpus, 1)
    ceiling = min(1.0, gpu_share * per_gpu)
    if inp.gpu_measured_busy is None:
        needs_gpu.append("the GPU busy share (NVML utilization: run the collector on a GPU "
                         "host)")

    # CPU per GPU-busy second: NVML first, the server's reported compute second
    if inp.gpu_busy_s:
        gpu_s, gpu_source = inp.gpu_busy_s, "nvml"
    elif inp.model_s > 0:
        gpu_s, gpu_source = inp.model_s, "model server (reported compute time)"
    else:
        gpu_s, gpu_source = None, None
        needs_gpu.append("CPU core-seconds per GPU-busy second and the cores per GPU for the "
                         "target (no GPU counters, no server-reported model time)")
    ratio = inp.cpu_core_s / gpu_s if gpu_s else None
    cores_per_gpu = gpu_target * ratio if ratio is not None else None
    if inp.cpu_measured_share < 0.5:
        notes.append(f"only {inp.cpu_measured_share:.0%} of span time has CPU accounting: the "
                     "CPU figures count what was measured")

    per_task = _per_task(inp.tasks, inp.busy_s, inp.cores, inp.gpus, inp.memory_gb,
                         inp.cpu_core_s, inp.energy_j)
    if "gpu" not in inp.energy_j:
        needs_gpu.append("GPU energy (NVML's energy counter)")
    if "cpu" not in inp.energy_j:
        notes.append("CPU energy not measured (RAPL, /sys/class/powercap, is absent or "
                     "readable by root only on this host)")
    if inp.gpus == 0:
        needs_gpu.append("GPU-seconds and GPU cost per task (no GPU seen)")
    lanes = {}
    for lane, d in inp.lanes.items():
        share_of_time = d["task_seconds"] / inp.task_seconds if inp.task_seconds > 0 else 0.0
        # provisioned resources are shared by the lanes in proportion to their task time
        lanes[lane] = _per_task(d["tasks"], inp.busy_s * share_of_time, inp.cores, inp.gpus,
                                inp.memory_gb, d["cpu_core_s"],
                                {k: v * share_of_time for k, v in inp.energy_j.items()})
        lanes[lane]["tasks"] = d["tasks"]
    cost = _cost(per_task, prices)
    if cost is not None:
        per_task["cost_usd"] = cost
        for d in lanes.values():
            d["cost_usd"] = _cost(d, prices)
    elif not prices:
        notes.append("no prices given (--price gpu=USD/h, cpu=USD/core-h, mem=USD/GB-h): "
                     "the cost is in resource-seconds only")
    unused = [k for k, key in (("gpu", "gpu_s"), ("cpu", "core_s"), ("mem", "mem_gb_s"))
              if k in prices and per_task["provisioned"][key] is None]
    if unused:
        notes.append("no cost for " + ", ".join(unused) + ": the collectors saw no such "
                     "resource (priced, but not measured)")
    return {
        "schema": SCHEMA, "tasks": inp.tasks,
        "critical_path": {
            "seconds": round(path, 6), "orchestration_share": _r(orch / path if path else 0),
            "tool_share": _r(tools / path if path else 0),
            "orchestration_and_tools_share": _r(share), "gpu_share": _r(gpu_share),
            "by_stage": {k: _r(v / path if path else 0)
                         for k, v in sorted(inp.path_by_stage.items(), key=lambda kv: -kv[1])}},
        "ratio": {"advice": advice, "rule": RULE_SOURCE,
                  "thresholds": {"gpu_centric_below": GPU_CENTRIC_BELOW,
                                 "balanced_above": BALANCED_ABOVE}},
        "gpu": {"ceiling_busy": _r(ceiling), "tasks_in_flight": _r(in_flight),
                "gpus_seen": inp.gpus, "measured_busy": _r(inp.gpu_measured_busy)},
        "cpu_per_gpu": {"cpu_core_s": _r(inp.cpu_core_s), "gpu_busy_s": _r(gpu_s),
                        "gpu_busy_source": gpu_source, "core_s_per_gpu_s": _r(ratio),
                        "target": gpu_target, "cores_per_gpu_for_target": _r(cores_per_gpu),
                        "cores_seen": inp.cores, "gpus_seen": inp.gpus},
        "per_task": per_task, "lanes": lanes, "needs_gpu": needs_gpu, "notes": notes,
        "prices": prices,
    }


def _per_task(tasks: int, busy_s: float, cores: int, gpus: int, memory_gb: Optional[float],
              cpu_core_s: float, energy: dict) -> dict:
    n = max(tasks, 1)
    return {
        "provisioned": {"core_s": _r(cores * busy_s / n) if cores else None,
                        "gpu_s": _r(gpus * busy_s / n) if gpus else None,
                        "mem_gb_s": _r(memory_gb * busy_s / n) if memory_gb else None},
        "consumed": {"core_s": _r(cpu_core_s / n)},
        "energy_j": {k: _r(v / n) for k, v in energy.items()} or None,
    }


def _cost(per_task: dict, prices: dict) -> Optional[dict]:
    """USD per task from the provisioned resource-seconds (None: no price applies)."""
    p = per_task["provisioned"]
    parts = {}
    for key, price in (("core_s", "cpu"), ("gpu_s", "gpu"), ("mem_gb_s", "mem")):
        if price in prices and p.get(key) is not None:
            parts[price] = round(p[key] / 3600.0 * prices[price], 8)
    if not parts:
        return None
    return {"total": round(sum(parts.values()), 8), **parts}


def _r(v: Any) -> Any:
    return None if v is None else round(float(v), 6)


def parse_price(text: str) -> tuple:
    """``gpu=2.5`` -> ("gpu", 2.5); raises ValueError saying what is wrong."""
    key, sep, value = str(text).partition("=")
    key = key.strip().lower()
    if not sep or key not in PRICES:
        raise ValueError(f"--price {text!r}: expected gpu=USD/h, cpu=USD/core-h or "
                         "mem=USD/GB-h")
    try:
        price = float(value)
    except ValueError:
        raise ValueError(f"--price {text!r}: {value!r} is not a number") from None
    if not price >= 0 or price == float("inf"):
        raise ValueError(f"--price {text!r}: a price is a finite number >= 0")
    return key, price
