"""The terminal and Markdown views of an analysis: the fleet summary, the slowest and the most
typical task's critical path as a text timeline, then the slowest tasks. A class that rests on
a stage label or an assumption rather than on measurement is marked (``gpu*``, ``34.6%*``; its
bars in lower case), with a legend line wherever something is marked.

Names come from the traces, so they are never given to Rich as a string (Rich would read
markup, emoji codes and highlight them): every line the terminal view prints is a
:class:`rich.text.Text` assembled from our own words and :func:`.views.inert_text` of the
input, and the Markdown view escapes input with :func:`.views.md_text` (code blocks with
:func:`.views.md_code`)."""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..analyzers.evidence import CLASSES
from ..analyzers.results import plain_segments
from ..analyzers.verdict import (ASSUMED_LEGEND, ASSUMED_MARK, basis_words, bottleneck_assumed,
                                 guess_warning, partial_words, section_assumed)
from ..analysis import Analysis
from .views import (assumed_shares, assumed_words, bar, bottleneck_counts, help_lines, inert,
                    inert_text, lost_words, marked, md_code, md_text, path_rows,
                    typical_tasks)

COLOURS = {"gpu": "magenta", "cpu": "red", "memory": "yellow", "io": "cyan", "queue": "blue",
           "untraced": "bright_black"}


def _bar(shares: dict, width: int = 20, assumed: Any = None) -> str:
    """A task's shares as a row of ``width`` class initials (largest remainders get the
    letters rounding leaves over, so the row is always ``width`` long); the part of a class
    that rests on a stage label or an assumption (``assumed``) in lower case."""
    exact = {c: max(shares.get(c, 0.0), 0.0) * width for c in CLASSES}
    counts = {c: int(v) for c, v in exact.items()}
    if sum(exact.values()) > 0:
        left = width - sum(counts.values())
        for c in sorted(CLASSES, key=lambda c: -(exact[c] - counts[c]))[:max(left, 0)]:
            counts[c] += 1
    out = []
    for c in CLASSES:
        n = counts[c]
        if n:
            k = min(round((assumed or {}).get(c, 0.0) * width), n)
            out.append(f"[{COLOURS[c]}]{c[0].upper() * (n - k)}{c[0].lower() * k}[/]")
    return "".join(out)


def fleet_cells(summary: Any) -> list:
    """The fleet's share per class, as text; a class part of whose time rests on a stage label
    or an assumption is marked."""
    assumed = summary.assumed_share_of_critical_path or {}
    return [marked(f"{summary.share_of_critical_path[c]:.1%}", assumed.get(c, 0.0) > 0)
            for c in CLASSES]


def assumed_legend(summary: Any) -> str:
    """The legend of the mark, with the fleet's assumed shares when there are any."""
    words = assumed_words(summary)
    return f"{ASSUMED_MARK} {ASSUMED_LEGEND}" + (f" ({words})" if words else "")


def terminal_console(width: "int | None" = None, **kwargs: Any) -> Console:
    """The Rich console the command line prints these views on: no markup, no emoji codes, no
    highlighting (the views print Text, which Rich takes as it is; a string that slipped in
    would be printed as written too). Into a pipe or a file it is 120 columns wide rather
    than squeezed to 80, unless ``width`` says otherwise; ``kwargs`` go to Console (a
    ``file``, a forced ``color_system`` in tests)."""
    settings = dict(markup=False, emoji=False, highlight=False, **kwargs)
    out = Console(width=width, **settings)
    if width is None and not out.is_terminal:
        out = Console(width=120, **settings)
    return out


def render(analysis: Analysis, console: Console, limit: int = 20) -> None:
    """Print the analysis to a rich console."""
    s = analysis.summary
    console.print(Text.assemble((f"{s.tasks} tasks", "bold"),
                                f", {s.spans} spans, {s.critical_path_s:.3f} s on critical "
                                f"paths; orchestration {s.orchestration_share:.1%} of it"))
    _basis(console, s)
    fleet = Table(title=inert_text("Where the critical-path time went; the classes: "
                                   f"{basis_words(s)}"), title_justify="left")
    for c in CLASSES:
        fleet.add_column(c, justify="right", style=COLOURS[c])
    fleet.add_column("bottleneck of", justify="left")
    fleet.add_row(*(inert_text(cell) for cell in fleet_cells(s)),
                  inert_text(bottleneck_counts(s) or "-"))
    console.print(fleet)
    if assumed_shares(s) or s.assumed_bottlenecks:
        console.print(inert_text(assumed_legend(s)))
    marks = False  # whether a task's class below is marked (the legend again, under them)
    for line in gpu_lines(s):
        console.print(inert_text(line))
    if lost_words(s):
        console.print(inert_text(lost_words(s)))
    for label, t in featured(analysis.task_results):
        marks = _timeline(console, label, t) or marks
    tasks = sorted(analysis.task_results, key=lambda t: -t.duration_ns)
    if limit > 0:
        marks = _task_table(console, tasks, limit) or marks
    if marks:
        console.print(Text(f"{ASSUMED_MARK} {ASSUMED_LEGEND}"))
    helps = help_lines(analysis)
    if helps:
        console.print(Text.assemble(("What would help", "bold"), " (predicted from the "
                                    "critical paths: agentscope whatif, docs/whatif.md)"))
        for line in helps:
            console.print(inert_text(f"  {line}"))
    _problems(list(analysis.problems), console)


def _task_table(console: Console, tasks: list, limit: int) -> bool:
    """The slowest ``limit`` tasks, a row each; whether a class in it is marked assumed."""
    marks = False
    table = Table(title=f"Tasks (slowest {min(limit, len(tasks))} of {len(tasks)})",
                  title_justify="left")
    for col, kw in (("task", {"overflow": "fold"}), ("trace", {"no_wrap": True}), ("lane", {}),
                    ("duration", {"justify": "right", "no_wrap": True}), ("bottleneck", {}),
                    ("conf.", {"justify": "right"}), ("shares", {"no_wrap": True, "min_width": 20}),
                    ("held longest by", {"overflow": "fold"})):
        table.add_column(col, **kw)
    lower = False
    for t in tasks[:limit]:
        guessed = bottleneck_assumed(t)
        longest, held_assumed = _longest(t)
        shares = _bar(t.shares, assumed=t.assumed)
        lower = lower or any(ch.islower() for ch in re.sub(r"\[[^]]*\]", "", shares))
        marks = marks or guessed or held_assumed
        table.add_row(inert_text(t.name), inert_text(short_id(t.trace_id)),
                      inert_text(t.lane or "-"), Text(f"{t.duration_ns / 1e9:.3f} s"),
                      Text(marked(t.bottleneck, guessed), style=COLOURS[t.bottleneck]),
                      Text(f"{t.confidence:.2f}"), Text.from_markup(shares),  # our letters
                      inert_text(longest))
    console.print(table)
    legend = Text("shares:")
    for c in CLASSES:
        legend.append(" ").append(c[0].upper(), style=COLOURS[c]).append(f"={c}")
    console.print(legend.append(f" (lower case: {ASSUMED_LEGEND})" if lower else ""))
    return marks


def _basis(console: Console, s: Any) -> None:
    """Partial traces (the warning when most verdicts rest on no measurement is one of the
    analysis' warnings, which the CLI prints to stderr)."""
    partial = partial_words(s)
    if partial:
        console.print(inert_text(partial))


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
    class's initial, so it reads without colour too. A section whose class rests on a stage
    label or an assumption has its class marked ('gpu*') and its fill in lower case."""
    total = t.duration_ns / 1e9
    out = []
    for name, stage, cls, a, b, guessed in path_rows(t, max_rows, assumed=True):
        if a is None:
            out.append(("", name, "", ""))
            continue
        what = inert(f"{name} [{stage}]" if stage else name)
        fill = cls[0].lower() if guessed else cls[0].upper()
        out.append((f"{a:8.3f}–{b:.3f} s", what, marked(cls, guessed),
                    bar(a, b, total, width, fill)))
    return out


def _timeline(console: Console, label: str, t: Any) -> bool:
    """Print a task's timeline; returns whether anything in it was marked as assumed."""
    guessed = bottleneck_assumed(t)
    console.print(Text.assemble(inert_text(label, "bold"), ": ", inert_text(t.name), " (",
                                inert_text(t.lane or "no lane"),
                                f", {t.duration_ns / 1e9:.3f} s, ",
                                (marked(t.bottleneck, guessed), COLOURS[t.bottleneck]),
                                f", confidence {t.confidence:.2f})"))
    rows = timeline_lines(t)
    wide = min(max((len(r[1]) for r in rows), default=0), 36)
    for when, what, cls, fill in rows:
        if not cls:  # the line that sums up the shorter sections: whole
            console.print(inert_text(f"  {'':18} {what}"))
            continue
        what = what if len(what) <= wide else what[:wide - 1] + "…"
        colour = COLOURS[cls.rstrip(ASSUMED_MARK)]
        console.print(Text.assemble(f"  {when:>18} ", inert_text(f"{what:<{wide}}"), " ",
                                    (f"{cls:<9}|{fill}|", colour)))
    if t.evidence:
        console.print(inert_text(f"  evidence: {t.evidence[0]}"))
    return guessed or any(r[2].endswith(ASSUMED_MARK) for r in rows)


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


def _longest(t: Any) -> tuple:
    """The span holding most of the path, its share and class, e.g. 'web-search 44% io'
    ('plan 60% gpu*' where its class rests on an assumption), and whether it was marked."""
    held: dict = {}
    for s in plain_segments(t):
        entry = held.setdefault(s.span_id, [0, s])
        entry[0] += s.end_ns - s.start_ns
    if not held or not t.duration_ns:
        return "", False
    length, seg = max(held.values(), key=lambda e: e[0])
    guessed = section_assumed(seg)
    return f"{seg.name} {length / t.duration_ns:.0%} {marked(seg.cls, guessed)}", guessed


def _problems(problems: list, console: Console, limit: int = 10) -> None:
    if not problems:
        return
    console.print(Text.assemble((f"{len(problems)} input problems", "yellow"),
                                " (the rest was analysed):"))
    for p in problems[:limit]:
        console.print(inert_text(f"  {p}"))
    if len(problems) > limit:
        console.print(Text(f"  ... and {len(problems) - limit} more ('agentscope check' lists "
                           "all)"))


def markdown(analysis: Analysis, limit: int = 20) -> str:
    """The analysis as Markdown (e.g. for a CI job's summary)."""
    s = analysis.summary
    problems = analysis.problems
    warning = guess_warning(s)
    star = "\\" + ASSUMED_MARK  # the mark, as Markdown shows it
    lines = [f"## agentscope: {s.tasks} tasks", "",
             f"{s.critical_path_s:.3f} s on critical paths; orchestration "
             f"{s.orchestration_share:.1%}; the classes: {basis_words(s)}.", "",
             *([f"> **Warning:** {md_text(warning)}", ""] if warning else []),
             *([md_text(partial_words(s)), ""] if partial_words(s) else []),
             "| " + " | ".join(CLASSES) + " |", "|" + "---:|" * len(CLASSES),
             "| " + " | ".join(md_text(cell) for cell in fleet_cells(s)) + " |", ""]
    legend_at = len(lines)  # the mark's legend goes here, when anything is marked
    lines += ["Bottlenecks: " + (bottleneck_counts(s, star) or "none"), "",
              *([md_text(lost_words(s)) + ".", ""] if lost_words(s) else []),
              *[f"- {md_text(line)}" for line in gpu_lines(s)], *([""] if s.gpu else []),
              "| task | trace | lane | duration | bottleneck | confidence | main evidence |",
              "|---|---|---|---:|---|---:|---|"]
    marks = bool(assumed_shares(s) or s.assumed_bottlenecks)
    for t in sorted(analysis.task_results, key=lambda t: -t.duration_ns)[:limit]:
        evidence = md_text(t.evidence[0] if t.evidence else "")
        guessed = bottleneck_assumed(t)
        marks = marks or guessed
        trace = md_code(short_id(t.trace_id), in_table=True)
        lines.append(f"| {md_text(t.name)} | `{trace}` | {md_text(t.lane or '-')} | "
                     f"{t.duration_ns / 1e9:.3f} s | "
                     f"**{t.bottleneck}**{star if guessed else ''} | {t.confidence:.2f} | "
                     f"{evidence} |")
    lower = False
    for label, t in featured(analysis.task_results):
        guessed = bottleneck_assumed(t)
        marks = marks or guessed
        lines += ["", f"**{md_text(label)}**: {md_text(t.name)} "
                      f"({md_text(t.lane or 'no lane')}, {t.duration_ns / 1e9:.3f} s, "
                      f"{t.bottleneck}{star if guessed else ''}, "
                      f"confidence {t.confidence:.2f})", "", "```"]
        rows = timeline_lines(t)
        lines += _md_timeline(rows) + ["```"]
        lower = lower or any(cls.endswith(ASSUMED_MARK) for _, _, cls, _ in rows)
        if t.evidence:
            lines.append(f"Evidence: {md_text(t.evidence[0])}")
    if marks or lower:
        words = assumed_words(s)
        lines[legend_at:legend_at] = [
            f"{star} {ASSUMED_LEGEND}" + (f" ({md_text(words)})" if words else "")
            + ("; in the timelines, its bar in lower case" if lower else "") + ".", ""]
    helps = help_lines(analysis)
    if helps:
        lines += ["", "**What would help** (predicted from the critical paths; "
                      "`agentscope whatif`):", ""] + [f"- {md_text(line)}" for line in helps]
    if problems:
        lines += ["", f"{len(problems)} input problems, e.g. {md_text(problems[0])}"]
    return "\n".join(lines) + "\n"


def _md_timeline(rows: list) -> list:
    """Timeline rows (``timeline_lines``) as the lines of a Markdown code block (where text is
    shown as written: :func:`.views.md_code` only keeps a backquote from closing it). Each
    line starts with 18 columns of time, so none can be read as the closing fence."""
    return [f"{when:>18} {md_code(what)[:36]:<36} "
            f"{cls:<9}{'|' + fill + '|' if cls else ''}".rstrip()
            for when, what, cls, fill in rows]


SHORT_ID = 8  # hex digits of a trace id shown in tables (`analyze --task` takes any prefix)


def short_id(trace_id: Any) -> str:
    return str(trace_id or "")[:SHORT_ID]


def find_tasks(analysis: Analysis, selector: str) -> list:
    """The tasks a ``--task`` selector names: those of that name, else those whose trace id
    starts with it (any number of characters); slowest first."""
    tasks = analysis.task_results
    got = [t for t in tasks if t.name == selector]
    if not got:
        sel = str(selector).strip().lower()
        got = [t for t in tasks if sel and str(t.trace_id).lower().startswith(sel)]
    return sorted(got, key=lambda t: -t.duration_ns)


def markdown_task(t: Any) -> str:
    """One task in full, in Markdown (``analyze --task ID --format markdown``): its timeline
    and every section of its critical path with its class, confidence and evidence."""
    lines = [f"## Task {md_text(t.name)}", "",
             f"Trace `{md_code(t.trace_id)}`, {md_text(t.lane or 'no lane')}, "
             f"{t.duration_ns / 1e9:.3f} s, bottleneck **{t.bottleneck}**, confidence "
             f"{t.confidence:.2f}.", "", "```"]
    lines += _md_timeline(timeline_lines(t, max_rows=len(t.segments) + 1))
    lines += ["```", "", "| start | end | span | stage | class | confidence | evidence |",
              "|---:|---:|---|---|---|---:|---|"]
    for x in t.segments:
        lines.append(f"| {(x.start_ns - t.start_ns) / 1e9:.3f} s | "
                     f"{(x.end_ns - t.start_ns) / 1e9:.3f} s | {md_text(x.name)} | "
                     f"{md_text(x.stage or '-')} | {x.cls} | {x.confidence:.2f} | "
                     f"{md_text(x.evidence)} |")
    return "\n".join(lines) + "\n"


def render_task(t: Any, console: Console) -> None:
    """One task in full: its timeline, then every section of its critical path with its
    evidence."""
    console.print(inert_text(f"trace {t.trace_id}"))
    _timeline(console, "task", t)
    console.print(Text.assemble(("critical path", "bold"),
                                " (every section, its class and evidence):"))
    for s in t.segments:
        console.print(inert_text(f"  {(s.start_ns - t.start_ns) / 1e9:8.3f}–"
                                 f"{(s.end_ns - t.start_ns) / 1e9:.3f} s "
                                 f"{s.name} [{s.stage or '-'}] {s.cls} "
                                 f"({s.confidence:.2f}): {s.evidence}"))
    for line in t.evidence[1:]:
        console.print(inert_text(f"  also: {line}"))
