"""The terminal and Markdown views of an analysis: the fleet summary, the slowest and the most
typical task's critical path as a text timeline, then the slowest tasks."""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..analyzers.evidence import CLASSES
from ..analyzers.verdict import basis_words, guess_warning, partial_words
from ..analysis import Analysis
from .views import bar, inert, path_rows, typical_tasks

COLOURS = {"gpu": "magenta", "cpu": "red", "memory": "yellow", "io": "cyan", "queue": "blue",
           "untraced": "bright_black"}


def _bar(shares: dict, width: int = 20) -> str:
    out = []
    for c in CLASSES:
        n = round(shares.get(c, 0.0) * width)
        if n:
            out.append(f"[{COLOURS[c]}]{c[0].upper() * n}[/]")
    return "".join(out)


def render(analysis: Analysis, console: Console, limit: int = 20) -> None:
    """Print the analysis to a rich console."""
    s = analysis.summary
    console.print(f"[bold]{s.tasks} tasks[/], {s.spans} spans, "
                  f"{s.critical_path_s:.3f} s on critical paths; "
                  f"orchestration {s.orchestration_share:.1%} of it")
    _basis(console, s)
    fleet = Table(title=f"Where the critical-path time went; the classes: {basis_words(s)}",
                  title_justify="left")
    for c in CLASSES:
        fleet.add_column(c, justify="right", style=COLOURS[c])
    fleet.add_column("bottleneck of", justify="left")
    fleet.add_row(*(f"{s.share_of_critical_path[c]:.1%}" for c in CLASSES),
                  ", ".join(f"{n} {c}" for c, n in s.bottlenecks.items()) or "-")
    console.print(fleet)
    for line in gpu_lines(s):
        console.print(inert(line), markup=False, highlight=False)
    for label, t in featured(analysis.task_results):
        _timeline(console, label, t)
    tasks = sorted(analysis.task_results, key=lambda t: -t.duration_ns)
    table = Table(title=f"Tasks (slowest {min(limit, len(tasks))} of {len(tasks)})",
                  title_justify="left")
    for col, kw in (("task", {"overflow": "fold"}), ("lane", {}),
                    ("duration", {"justify": "right", "no_wrap": True}), ("bottleneck", {}),
                    ("conf.", {"justify": "right"}), ("shares", {"no_wrap": True, "min_width": 20}),
                    ("held longest by", {"overflow": "fold"})):
        table.add_column(col, **kw)
    for t in tasks[:limit]:
        table.add_row(_cell(t.name), _cell(t.lane or "-"), f"{t.duration_ns / 1e9:.3f} s",
                      f"[{COLOURS[t.bottleneck]}]{t.bottleneck}[/]", f"{t.confidence:.2f}",
                      _bar(t.shares), _cell(_longest(t)))
    console.print(table)
    console.print("shares: " + " ".join(f"[{COLOURS[c]}]{c[0].upper()}[/]={c}" for c in CLASSES))
    _problems(list(analysis.problems), console)


def _basis(console: Console, s: Any) -> None:
    """Partial traces (the warning when most verdicts rest on no measurement is one of the
    analysis' warnings, which the CLI prints to stderr)."""
    partial = partial_words(s)
    if partial:
        console.print(partial, highlight=False)


def featured(tasks: list) -> list:
    """[(label, task)]: the slowest task, and the most typical one (of the bottleneck most
    tasks share: the one nearest their median duration) when it is another."""
    if not tasks:
        return []
    slowest = max(tasks, key=lambda t: t.duration_ns)
    out = [("slowest task", slowest)]
    typical = typical_tasks(tasks)
    if typical:
        cls, i = next(iter(typical.items()))
        if tasks[i] is not slowest:
            like = sum(t.bottleneck == cls for t in tasks)
            out.append((f"most typical task ({cls}-bound, like {like} of {len(tasks)})",
                        tasks[i]))
    return out


def timeline_lines(t: Any, width: int = 40, max_rows: int = 10) -> list:
    """The task's critical path as text rows: (when, what, class, bar); the bar's fill is the
    class's initial, so it reads without colour too."""
    total = t.duration_ns / 1e9
    out = []
    for name, stage, cls, a, b in path_rows(t, max_rows):
        if a is None:
            out.append(("", name, "", ""))
            continue
        what = inert(f"{name} [{stage}]" if stage else name)
        out.append((f"{a:8.3f}–{b:.3f} s", what, cls, bar(a, b, total, width, cls[0].upper())))
    return out


def _timeline(console: Console, label: str, t: Any) -> None:
    console.print(f"[bold]{_cell(label)}[/]: {_cell(t.name)} ({_cell(t.lane or 'no lane')}, "
                  f"{t.duration_ns / 1e9:.3f} s, [{COLOURS[t.bottleneck]}]{t.bottleneck}[/], "
                  f"confidence {t.confidence:.2f})", highlight=False)
    rows = timeline_lines(t)
    wide = min(max((len(r[1]) for r in rows), default=0), 36)
    for when, what, cls, fill in rows:
        if not cls:  # the line that sums up the shorter sections: whole
            console.print(f"  {'':18} {_cell(what)}", highlight=False)
            continue
        what = what if len(what) <= wide else what[:wide - 1] + "…"
        console.print(f"  {when:>18} {_cell(f'{what:<{wide}}')} "
                      f"[{COLOURS[cls]}]{cls:<9}|{fill}|[/]", highlight=False)
    if t.evidence:
        console.print(f"  evidence: {inert(t.evidence[0])}", markup=False, highlight=False)


def gpu_lines(summary: Any) -> list:
    """One line per GPU with counters: busy and idle share over the tasks' time, and what the
    critical paths were doing while it was idle."""
    out = []
    for name, g in (summary.gpu or {}).items():
        idle_while = ", ".join(f"{k} {v:.0%}" for k, v in list(g["idle_while"].items())[:4])
        out.append(f"GPU {name}: busy {g['busy']:.0%}, idle {g['idle']:.0%} of "
                   f"{g['measured_s']:.1f} s" + (f"; while it was idle the critical paths "
                                                 f"were in: {idle_while}" if idle_while else ""))
    return out


def _longest(t: Any) -> str:
    """The span holding most of the path, its share and class, e.g. 'web-search 44% io'."""
    held: dict = {}
    for s in t.segments:
        entry = held.setdefault(s.span_id, [0, s])
        entry[0] += s.end_ns - s.start_ns
    if not held or not t.duration_ns:
        return ""
    length, seg = max(held.values(), key=lambda e: e[0])
    return f"{seg.name} {length / t.duration_ns:.0%} {seg.cls}"


def _problems(problems: list, console: Console, limit: int = 10) -> None:
    if not problems:
        return
    console.print(f"[yellow]{len(problems)} input problems[/] (the rest was analysed):")
    for p in problems[:limit]:
        console.print(f"  {inert(p)}", markup=False, highlight=False)
    if len(problems) > limit:
        console.print(f"  ... and {len(problems) - limit} more ('agentscope check' lists all)")


def markdown(analysis: Analysis, limit: int = 20) -> str:
    """The analysis as Markdown (e.g. for a CI job's summary)."""
    s = analysis.summary
    problems = analysis.problems
    warning = guess_warning(s)
    lines = [f"## agentscope: {s.tasks} tasks", "",
             f"{s.critical_path_s:.3f} s on critical paths; orchestration "
             f"{s.orchestration_share:.1%}; the classes: {basis_words(s)}.", "",
             *([f"> **Warning:** {_md(warning)}", ""] if warning else []),
             *([_md(partial_words(s)), ""] if partial_words(s) else []),
             "| " + " | ".join(CLASSES) + " |", "|" + "---:|" * len(CLASSES),
             "| " + " | ".join(f"{s.share_of_critical_path[c]:.1%}" for c in CLASSES) + " |",
             "", "Bottlenecks: " + (", ".join(f"{n} {c}" for c, n in s.bottlenecks.items())
                                    or "none"), "",
             *[f"- {_md(line)}" for line in gpu_lines(s)], *([""] if s.gpu else []),
             "| task | lane | duration | bottleneck | confidence | main evidence |",
             "|---|---|---:|---|---:|---|"]
    for t in sorted(analysis.task_results, key=lambda t: -t.duration_ns)[:limit]:
        evidence = _md(t.evidence[0] if t.evidence else "")
        lines.append(f"| {_md(t.name)} | {_md(t.lane or '-')} | {t.duration_ns / 1e9:.3f} s | "
                     f"**{t.bottleneck}** | {t.confidence:.2f} | {evidence} |")
    for label, t in featured(analysis.task_results):
        lines += ["", f"**{_md(label)}**: {_md(t.name)} ({_md(t.lane or 'no lane')}, "
                      f"{t.duration_ns / 1e9:.3f} s, {t.bottleneck}, confidence "
                      f"{t.confidence:.2f})", "", "```"]
        for when, what, cls, fill in timeline_lines(t):
            what = what.replace("`", "'")  # cannot close the code block
            row = f"{when:>18} {what[:36]:<36} {cls:<9}{'|' + fill + '|' if cls else ''}"
            lines.append(row.rstrip())
        lines.append("```")
        if t.evidence:
            lines.append(f"Evidence: {_md(t.evidence[0])}")
    if problems:
        lines += ["", f"{len(problems)} input problems, e.g. {_md(problems[0])}"]
    return "\n".join(lines) + "\n"


def _md(text: Any) -> str:
    """Input text as inert Markdown: no controls, no line breaks, and the characters Markdown
    (and the HTML it may contain) acts on escaped."""
    return _MD_ACTIVE.sub(r"\\\g<0>", inert(text))


_MD_ACTIVE = re.compile(r"[\\`*_\[\]<>|#!~]")


def _cell(text: Any) -> str:
    """Input text for a rich cell or line: inert, and its square brackets not markup."""
    return escape(inert(text))
