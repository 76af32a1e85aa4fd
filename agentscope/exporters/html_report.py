"""The self-contained HTML report (``agentscope report DIR --html FILE``).

One file, no network at view time: the data as JSON in a ``<script type="application/json">``
block, the script and style (``assets/report.js``, ``assets/report.css``) inlined. The page
draws, in SVG:

* fleet views: the share of critical-path time per class, per stage and per lane; the latency
  distribution by bottleneck class; the tasks ranked by the time each class took from them;
* a table of every task that sorts and filters (``#q=text``, ``#class=cpu`` in the address
  select the same), each row linking to the task's timeline (``#task=N``);
* a task's timeline: every span on its row, the critical path drawn over them in its classes'
  colours, the host's counters (CPU, CPU and memory pressure, GPU) under it on the same time
  axis, each value in its unit (``unit``: the metric's UCUM unit from
  :data:`~agentscope.metric_names.UNITS`), and the evidence behind every section in words.

A class that rests on a stage label or an assumption rather than on measurement (e.g. ``gpu``
assumed for an inference at a local server with no timing and no GPU counters) is drawn
hatched wherever it is drawn, and marked ``gpu*`` in text, with a legend entry.

Timelines carry every span of a task, so only some tasks get one (``timelines``: the slowest,
and the most typical task of each bottleneck class); every task is in the table.

Span names and attributes come from untrusted programs. The JSON is escaped so that no
``<``, ``>`` or ``&`` reaches the HTML parser, and the script only ever puts data into the page
as text (``textContent``, attribute values set through the DOM), never as markup.
"""

from __future__ import annotations

import json
import re
import time
from importlib import resources
from typing import Any, Optional

import numpy as np

from .. import metric_names as mn
from ..analysis import Analysis, iso_time
from ..analysis.document import finite
from ..analysis.stored import prefetch_words
from ..analyzers.evidence import CLASSES
from ..analyzers.verdict import (ASSUMED_LEGEND, ASSUMED_MARK, basis_words, bottleneck_assumed,
                                 guess_warning, partial_words, section_assumed)
from .views import help_lines, help_rows, inert, typical_tasks

SCHEMA = "agentscope.report/v1"
COLOURS = {"gpu": "#b04fc8", "cpu": "#d9534f", "memory": "#e0a400", "io": "#2a9fd6",
           "queue": "#4866d4", "untraced": "#9e9e9e"}
# counters drawn under a timeline: (metric, label, how to scale)
COUNTERS = ((mn.SYSTEM_CPU_UTILIZATION, "host CPU busy", "share"),
            (mn.SYSTEM_PRESSURE_CPU_SOME, "PSI cpu (runnable, waiting)", "share"),
            (mn.SYSTEM_PRESSURE_MEMORY_SOME, "PSI memory", "share"),
            (mn.AGENTSCOPE_TREE_RUNQUEUE_WAIT, "agent threads waiting for a CPU", "value"),
            (mn.HW_GPU_UTILIZATION, "GPU busy", "share"))


def _r(x: float, digits: int = 6) -> float:
    return round(float(x), digits)


def pick_timelines(analysis: Analysis, limit: int, typical: dict) -> list:
    """Indexes of the tasks that get a timeline: all of them when there are at most ``limit``;
    else the most typical task of each bottleneck class (``typical``, as
    :func:`views.typical_tasks` gives them), then the slowest."""
    tasks = analysis.task_results
    if len(tasks) <= limit:
        return list(range(len(tasks)))
    chosen = list(typical.values())
    for i in sorted(range(len(tasks)), key=lambda i: -tasks[i].duration_ns):
        if len(chosen) >= limit:
            break
        if i not in chosen:
            chosen.append(i)
    return sorted(chosen[:limit])


def _counters_of(analysis: Analysis, windows: list) -> dict:
    """For each (key, host, start_ns, end_ns): {metric: {device: [[t_ns, value], ...]}} of the
    timeline counters on that host over the window (a sample just before included)."""
    if not windows:
        return {}
    rows = analysis.counters_in_windows(windows, [m for m, _, _ in COUNTERS])
    starts = {w[0]: w[2] for w in windows}
    out: dict = {}
    for r in rows:
        points = out.setdefault(r.key, {}).setdefault(r.metric, {}).setdefault(r.device, [])
        if points and points[-1][0] <= starts[r.key] and r.ts_ns <= starts[r.key]:
            points[-1] = (r.ts_ns, r.value)  # of the samples before the task, the last counts
        else:
            points.append((r.ts_ns, r.value))
    return out


def build(analysis: Analysis, *, timelines: int = 100, title: str = "agentscope report",
          source: Optional[str] = None) -> dict:
    """The report's data (what the page draws), as plain JSON-able values."""
    # the report reads the sections (and their words) of its timeline tasks only
    tasks = analysis.task_results
    summary = analysis.summary.to_dict()
    problems = analysis.problems
    by_stage, by_lane = analysis.breakdown("stage"), analysis.breakdown("lane")
    # the part of them whose class rests on a stage label or an assumption: drawn hatched
    assumed_by_stage = analysis.breakdown("stage", assumed=True)
    assumed_by_lane = analysis.breakdown("lane", assumed=True)
    typical = typical_tasks(tasks)
    chosen = pick_timelines(analysis, timelines, typical)
    rows = []
    for i, t in enumerate(tasks):
        rows.append([t.name, t.lane or "", iso_time(t.start_ns), _r(t.duration_ns / 1e9),
                     t.bottleneck, t.confidence, [_r(t.shares.get(c, 0.0), 4) for c in CLASSES],
                     t.evidence[0] if t.evidence else "", t.trace_id, list(t.evidence[1:]),
                     [_r(t.assumed.get(c, 0.0), 4) for c in CLASSES], bottleneck_assumed(t)])
    spans = analysis.spans_of([tasks[i].trace_id for i in chosen])
    # the chosen tasks' words in a few analyses where they are made again from the store
    # (an analysis restored from it), not one each
    bounds = np.searchsorted(np.asarray(analysis.sections.task, dtype=np.int64),
                             [k for i in chosen for k in (i, i + 1)]).tolist()
    prefetch_words(analysis.sections.evidence, list(zip(bounds[::2], bounds[1::2])))
    lines: dict = {}
    windows = []
    for i in chosen:
        t = tasks[i]
        t0 = t.start_ns
        own = spans.get(t.trace_id, [])
        index = {row.span_id: k for k, row in enumerate(own)}
        # the page's span rows: id, parent's row, name, stage, start, end, host
        span_rows = [[row.span_id, index.get(row.parent_span_id, -1), row.name or "",
                      row.stage or "", _r((row.start_ns - t0) / 1e9), _r((row.end_ns - t0) / 1e9),
                      row.host or ""] for row in own]
        path = [[_r((g.start_ns - t0) / 1e9), _r((g.end_ns - t0) / 1e9), g.cls,
                 index.get(g.span_id, -1), g.name or "", g.stage or "", g.evidence or "",
                 _r(g.confidence, 2), section_assumed(g)] for g in t.segments]
        lines[str(i)] = {"spans": span_rows, "path": path, "evidence": list(t.evidence)}
        # the task's host: where its critical path spent the most time (a task may span
        # several: an agent and its model server)
        on_path: dict = {}
        for g in path:
            host = own[g[3]].host if g[3] >= 0 else None
            if host:
                on_path[host] = on_path.get(host, 0.0) + g[1] - g[0]
        if not on_path:
            on_path = {row.host: 0.0 for row in own if row.host}
        if on_path:
            h = max(sorted(on_path), key=lambda k: on_path[k])
            windows.append((i, h, t.start_ns, t.start_ns + t.duration_ns))
            lines[str(i)]["host"] = h
    counters = _counters_of(analysis, windows)
    for k, series in counters.items():
        t0 = tasks[k].start_ns
        lines[str(k)]["counters"] = [
            {"metric": m, "label": label + (f" {dev}" if dev else ""), "scale": scale,
             "unit": mn.UNITS.get(m, ""),
             "points": [[_r((ts - t0) / 1e9), _r(v, 4)] for ts, v in pts]}
            for m, label, scale in COUNTERS for dev, pts in sorted(series.get(m, {}).items())]
    return {
        "schema": SCHEMA,
        "title": title,
        "source": source,
        "generated": iso_time(time.time_ns()),
        "classes": list(CLASSES),
        "colours": COLOURS,
        "summary": {k: summary[k] for k in ("tasks", "spans", "critical_path_s",
                                            "share_of_critical_path", "bottlenecks",
                                            "orchestration_share", "lanes",
                                            "measured_share", "evidence_basis",
                                            "assumed_share_of_critical_path",
                                            "assumed_bottlenecks")},
        # how a class that rests on a stage label or an assumption is drawn apart: hatched
        # (and, in text, marked)
        "assumed": {"legend": ASSUMED_LEGEND, "mark": ASSUMED_MARK,
                    "any": any(v > 0 for t in tasks for v in t.assumed.values())},
        "basis": basis_words(analysis.summary),
        "warning": guess_warning(analysis.summary),
        "partial": partial_words(analysis.summary),
        "gpu": summary.get("gpu") or {},
        # the changes with the largest predicted gain (agentscope whatif)
        "help": help_lines(analysis),
        "help_rows": help_rows(analysis),
        "by_stage": by_stage,
        "by_lane": by_lane,
        "assumed_by_stage": assumed_by_stage,
        "assumed_by_lane": assumed_by_lane,
        "task_columns": ["name", "lane", "start", "duration_s", "bottleneck", "confidence",
                         "shares", "evidence", "trace_id", "more_evidence",
                         "assumed_shares", "bottleneck_assumed"],
        "tasks": rows,
        "typical": typical,
        "timelines": lines,
        "timelines_limit": timelines,
        "problems": [str(p) for p in list(problems)[:50]],
        "problem_count": len(problems),
    }


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath("assets", name).read_text(encoding="utf-8")


def script_json(data: Any) -> str:
    """JSON that is safe inside a ``<script>`` element: no ``<``, ``>``, ``&`` or line
    separators reach the HTML parser (each is written as a JSON \\u escape, which JSON.parse
    reads back as the same character)."""
    try:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:  # a NaN or infinity somewhere: null, which JSON.parse reads
        text = json.dumps(finite(data), ensure_ascii=False, separators=(",", ":"),
                          allow_nan=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                    ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    # a lone surrogate (a SOURCE path or file name that was not UTF-8, as os.fsdecode gives
    # it) cannot be written as UTF-8: as its \u escape, JSON.parse gives the same string back
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


_SURROGATE = re.compile("[\ud800-\udfff]")


def render(data: dict) -> str:
    """The whole HTML document."""
    import html

    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
        f"<title>{html.escape(inert(data.get('title', 'agentscope report')))}</title>"
        f"<style>{_asset('report.css')}</style></head>\n<body>\n"
        "<header><h1 id=\"title\"></h1><p id=\"meta\"></p></header>\n"
        "<main><section id=\"fleet\"></section><section id=\"timeline\"></section>"
        "<section id=\"table\"></section></main>\n"
        f"<script type=\"application/json\" id=\"report-data\">{script_json(data)}</script>\n"
        f"<script>{_asset('report.js')}</script>\n</body></html>\n")


def write(path: str, analysis: Analysis, *, timelines: int = 100,
          source: Optional[str] = None) -> dict:
    """Build and write the report to ``path``; returns its data."""
    data = build(analysis, timelines=timelines, source=source,
                 title=f"agentscope: {source}" if source else "agentscope report")
    with open(path, "w", encoding="utf-8") as f:
        f.write(render(data))
    return data
