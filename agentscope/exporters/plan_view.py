"""The capacity plan (``agentscope.plan/v1``, :func:`agentscope.analyzers.plan.plan`) as text
for a terminal and as Markdown."""

from __future__ import annotations

from typing import Any

from .views import inert, md_text


def _pct(v: Any) -> str:
    return "not measured" if v is None else f"{v:.1%}"


def _n(v: Any, unit: str = "", digits: int = 3) -> str:
    return "not measured" if v is None else f"{v:.{digits}f}{unit}"


def _lines(doc: dict) -> list:
    """(heading or None, label, value) rows shared by both renderings."""
    cp, ratio, gpu, cg, pt = (doc["critical_path"], doc["ratio"], doc["gpu"],
                              doc["cpu_per_gpu"], doc["per_task"])
    rows = [("critical paths", None, None),
            (None, "agent code (task, agent, context)", _pct(cp["orchestration_share"])),
            (None, "tools (tool, env)", _pct(cp["tool_share"])),
            (None, "agent code + tools", _pct(cp["orchestration_and_tools_share"])),
            (None, "gpu", _pct(cp["gpu_share"])),
            (None, "CPU:GPU", ratio["advice"]),
            (None, "rule", ratio["rule"]),
            ("GPU", None, None),
            (None, "busiest it can be (Amdahl)",
             f"{_pct(gpu['ceiling_busy'])} (GPU share of the paths x "
             f"{gpu['tasks_in_flight']:.2f} tasks in flight / "
             + (f"{gpu['gpus_seen']} GPUs)" if gpu["gpus_seen"] else "1 GPU, had they one)")),
            (None, "measured busy", _pct(gpu["measured_busy"])),
            (None, "GPUs seen", str(gpu["gpus_seen"])),
            ("CPU per GPU", None, None),
            (None, "CPU core-seconds (spans)", _n(cg["cpu_core_s"], " s")),
            (None, "GPU-busy seconds", _n(cg["gpu_busy_s"], " s") + (
                f" ({cg['gpu_busy_source']})" if cg["gpu_busy_source"] else "")),
            (None, "core-s per GPU-busy s", _n(cg["core_s_per_gpu_s"], "", 2)),
            (None, f"cores per GPU at {cg['target']:.0%} busy",
             _n(cg["cores_per_gpu_for_target"], "", 1)),
            (None, "seen", f"{cg['cores_seen']} cores, {cg['gpus_seen']} GPUs"),
            ("per task", None, None)]
    prov = pt["provisioned"]
    rows += [(None, "provisioned core-s", _n(prov["core_s"])),
             (None, "provisioned GPU-s", _n(prov["gpu_s"])),
             (None, "provisioned memory GB-s", _n(prov["mem_gb_s"], "", 2)),
             (None, "consumed core-s", _n(pt["consumed"]["core_s"])),
             (None, "energy", "not measured" if not pt["energy_j"] else ", ".join(
                 f"{k} {v:.1f} J" for k, v in pt["energy_j"].items()))]
    if "cost_usd" in pt:
        rows.append((None, "cost", ", ".join(f"{k} ${v:.6f}" for k, v in
                                             pt["cost_usd"].items())))
    if doc.get("lanes_latency"):
        rows.append(("lanes", None, None))
        for lane, st in doc["lanes_latency"].items():
            cost = doc["lanes"].get(lane, {}).get("cost_usd")
            rows.append((None, lane, f"{st['tasks']} tasks, mean {st['mean_s']:.3f} s, p95 "
                         f"{st['p95_s']:.3f} s, {st['throughput_per_h']:.1f} tasks/h" + (
                             f", ${cost['total']:.6f}/task" if cost else "")))
    for lane, d in (doc.get("head_of_line") or {}).items():
        servers = ", ".join(f"{k} {v:.3f} s" for k, v in d["by_server"].items())
        rows.append((None, f"{lane}: behind batch",
                     f"{d['behind_batch_s']:.3f} s of {d['queued_s']:.3f} s queued, "
                     f"{d['tasks_behind_batch']} tasks" + (f" ({servers})" if servers else "")))
    return rows


def text(doc: dict) -> str:
    out = [f"capacity plan: {doc['tasks']} tasks"]
    for head, label, value in _lines(doc):
        if head:
            out += ["", head]
        else:
            out.append(f"  {inert(label):<38} {inert(value)}")
    if doc["needs_gpu"]:
        out += ["", "needs a GPU (not measured here):"]
        out += [f"  - {inert(x)}" for x in doc["needs_gpu"]]
    if doc["notes"]:
        out += ["", "notes:"] + [f"  - {inert(x)}" for x in doc["notes"]]
    return "\n".join(out) + "\n"


def markdown(doc: dict) -> str:
    out = [f"### Capacity plan ({doc['tasks']} tasks)"]
    for head, label, value in _lines(doc):
        if head:
            out += ["", f"**{md_text(head)}**", "", "| | |", "|---|---|"]
        else:
            out.append(f"| {md_text(label)} | {md_text(value)} |")
    if doc["needs_gpu"]:
        out += ["", "Needs a GPU (not measured here):", ""]
        out += [f"- {md_text(x)}" for x in doc["needs_gpu"]]
    if doc["notes"]:
        out += ["", "Notes:", ""] + [f"- {md_text(x)}" for x in doc["notes"]]
    return "\n".join(out) + "\n"
