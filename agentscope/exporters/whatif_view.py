"""A what-if prediction (:class:`~agentscope.analyzers.whatif.Prediction`) as plain text for
a terminal and as Markdown. Names from the input go through :func:`.views.inert` (and the
Markdown escaping of :func:`.views.md_text`)."""

from __future__ import annotations

from typing import Any

from .views import inert, md_code, md_text

_STATS = (("mean", "mean_s"), ("p50", "p50_s"), ("p95", "p95_s"), ("p99", "p99_s"),
          ("makespan", "makespan_s"), ("tasks/h", "throughput_per_h"))


def _change(p: Any) -> str:
    parts = list(p.change["speedups"])
    if p.change.get("cpus") is not None:
        n = p.change["cpus"]
        parts.append(f"{n} core{'s' if n != 1 else ''} per host")
    parts.extend(f"{k}: {v} slots" for k, v in p.change.get("slots", {}).items())
    return ", ".join(parts) or "nothing (the recording as it is)"


def _pct(before: float, after: float) -> str:
    if before <= 0:
        return ""
    return f"{(after - before) / before:+.1%}"


def _num(v: float, key: str) -> str:
    return f"{v:.1f}" if key == "throughput_per_h" else f"{v:.3f} s"


def _rows(p: Any, limit: int) -> tuple:
    """What both renderings show: (stats rows (label, recorded, predicted, change, naive),
    lane rows (lane, tasks, mean, p95, tasks/h: each "before → after"), the most changed
    tasks)."""
    stats = []
    for label, key in _STATS:
        b, a, n = (getattr(s, key) for s in (p.baseline, p.predicted, p.naive))
        stats.append((label, _num(b, key), _num(a, key), _pct(b, a), _num(n, key)))
    lanes = []
    if len(p.lanes) > 1:
        for lane, d in p.lanes.items():
            b, a = d["baseline"], d["predicted"]
            lanes.append((lane, b.tasks, f"{b.mean_s:.3f} → {a.mean_s:.3f} s",
                          f"{b.p95_s:.3f} → {a.p95_s:.3f} s",
                          f"{b.throughput_per_h:.1f} → {a.throughput_per_h:.1f}"))
    moved = sorted(p.tasks, key=lambda t: -abs(t.predicted_s - t.baseline_s))[:limit]
    return stats, lanes, moved


def text(p: Any, limit: int = 20) -> str:
    """The prediction for a terminal."""
    stats, lanes, moved = _rows(p, limit)
    out = [f"what if: {inert(_change(p))}  ({p.baseline.tasks} tasks, {p.selected_spans} "
           "spans sped up)", ""]
    out.append(f"{'':<12}{'recorded':>14}{'predicted':>14}{'change':>9}{'naive':>14}")
    out += [f"{r[0]:<12}{r[1]:>14}{r[2]:>14}{r[3]:>9}{r[4]:>14}" for r in stats]
    if lanes:
        out += ["", "per lane (recorded → predicted)"]
        out += [f"  {inert(lane):<10} {n:>4} tasks  mean {mean}  p95 {p95}  {tput} tasks/h"
                for lane, n, mean, p95, tput in lanes]
    if moved:
        out += ["", f"tasks (most changed first; {len(p.tasks)} in all)"]
        for t in moved:
            path = "" if t.bottleneck_after in (None, t.bottleneck_before) else \
                f"  path now {t.bottleneck_after}"
            out.append(f"  {inert(t.trace_id)[:16]:<16} {inert(t.name)[:28]:<28} "
                       f"{t.baseline_s:8.3f} → {t.predicted_s:8.3f} s{path}")
    out += ["", "assumptions:"] + [f"  - {inert(a)}" for a in p.assumptions]
    return "\n".join(out) + "\n"


def markdown(p: Any, limit: int = 20) -> str:
    """The prediction as Markdown (a CI step summary, a pull request)."""
    stats, lanes, moved = _rows(p, limit)
    out = [f"### What if: {md_text(_change(p))}", "",
           f"{p.baseline.tasks} tasks, {p.selected_spans} spans sped up.", "",
           "| | recorded | predicted | change | naive |", "|---|---:|---:|---:|---:|"]
    out += ["| " + " | ".join(r) + " |" for r in stats]
    if lanes:
        out += ["", "| lane | tasks | mean | p95 | tasks/h |", "|---|---:|---:|---:|---:|"]
        out += [f"| {md_text(lane)} | {n} | {mean} | {p95} | {tput} |"
                for lane, n, mean, p95, tput in lanes]
    if moved:
        out += ["", "| trace | task | recorded | predicted |", "|---|---|---:|---:|"]
        out += [f"| `{md_code(t.trace_id, in_table=True)}` | {md_text(t.name)} | "
                f"{t.baseline_s:.3f} s | {t.predicted_s:.3f} s |" for t in moved]
    out += ["", "Assumptions:", ""] + [f"- {md_text(a)}" for a in p.assumptions]
    return "\n".join(out) + "\n"
