"""What the reports share: how text from the input is shown (:func:`inert`, and its Rich and
Markdown forms), which tasks to show, and a task's critical path as text."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from rich.text import Text

from ..analyzers.results import plain_segments
from ..analyzers.verdict import ASSUMED_MARK, section_assumed

# What a name from a trace may not do where a person reads it. Names, attribute values, file
# names and the reasons built from them come from programs we do not control (an agent, another
# tool's exporter, a file name os.fsdecode gave us). Shown to a person they must stay text: never
# move the cursor, clear the screen, set the window title, make a hyperlink, reorder the line, hide
# characters or turn into markup. One rule does this for every output made for people
# (:func:`inert`); the Rich and Markdown forms below are built on it, and data outputs (JSON, CSV,
# the HTML report's JSON block, Prometheus labels) keep the value exact and escape it as their
# format requires.

# line and paragraph breaks, tabs and the old record separators: a row stays one row, so each
# becomes one space (NEL, U+0085, is a C1 control that some terminals take for a newline)
_BREAKS = re.compile("[\t\n\x0b\x0c\r\x1c-\x1e\x85\u2028\u2029]+")
REPLACEMENT = "\ufffd"  # what a lone surrogate is shown as (it cannot even be encoded)


def _drop(ch: str) -> str:
    """What one non-printable character becomes: controls (C0, DEL, C1: ESC starts colour,
    cursor, title and hyperlink sequences) and format characters (bidi overrides and isolates,
    zero-width spaces and joiners, the BOM, invisible tag characters that can smuggle text)
    are dropped; a lone surrogate becomes U+FFFD; other spaces, private-use and unassigned
    characters are kept (they show as themselves or as a box)."""
    cat = unicodedata.category(ch)
    if cat in ("Cc", "Cf"):
        return ""
    if cat == "Cs":
        return REPLACEMENT
    return ch


def inert(text: Any) -> str:
    """``text`` as something to show, never to act on: line breaks and tabs become a space,
    control and format characters (C0/C1 controls, DEL, bidi overrides, zero-width
    characters) are dropped, a lone surrogate becomes U+FFFD. Every name, attribute, path and
    reason from the input goes through it before a terminal or a Markdown document gets it;
    it is idempotent, and a printable string comes back unchanged (the fast path)."""
    s = text if type(text) is str else str(text)
    if s.isprintable():
        return s
    s = _BREAKS.sub(" ", s)
    if s.isprintable():
        return s
    return "".join(ch if ch.isprintable() else _drop(ch) for ch in s)


def inert_lines(text: Any) -> str:
    """A block of lines made by a library (a summary, a list of reasons) with each line
    :func:`inert`: its own line breaks kept, nothing else acted on."""
    return "\n".join(inert(line) for line in str(text).split("\n"))


def inert_text(text: Any, style: str = "") -> Text:
    """Input text for a Rich console or table: a :class:`rich.text.Text`, which Rich prints as
    it is. A ``str`` given to Rich is parsed for markup (``[bold]``, ``[link=...]``, and
    ``[/tool]`` raises MarkupError), has ``:smile:`` codes replaced with emoji and gets
    highlighted (numbers, URLs); ``rich.markup.escape`` does not cover all of that (emoji
    codes, highlighting). A Text is never parsed, so names are wrapped in one, always."""
    return Text(inert(text), style=style)


# Markdown (GitHub-flavoured, and the HTML it may contain) acts on these anywhere in a line:
# emphasis, code, links and images, raw HTML and entities, table cells, headings and quotes,
# strikethrough, math; each is written with a backslash, which Markdown shows as the character
_MD_ACTIVE = re.compile(r"[\\`*_\[\]<>|#!~&$]")
# the starts of the autolinks GitHub makes from bare text (http://..., www....): one character
# of each escaped, so the text is not a link (it reads the same)
_MD_AUTOLINK = re.compile(r"(?<=[A-Za-z0-9])(:)(?=//)|(?<![A-Za-z0-9])(www)(\.)", re.I)
# what makes a list item, a setext underline or a thematic break at the start of a line
# ("- x", "+ x", "1. x", "2) x", "===", "---"): escaped there, since the text can start a line
# ('- ' + a name is a list item holding it); "-5%" or "0.0%" are left as they are
_MD_LEAD = re.compile(r"^(\s*)(?:([-+])(?=\s|$)|(\d{1,9})(?=[.)](?:\s|$))|([-=])(?=[-=\s]*$))")


def _md_lead(m: "re.Match[str]") -> str:
    space, bullet, number, rule = m.groups()
    return space + (number + "\\" if number else "\\" + (bullet or rule))


def md_text(text: Any) -> str:
    """Input text as inert Markdown: :func:`inert` (no controls, no line breaks), then every
    character Markdown or its HTML acts on escaped, so it reads as the same literal text in
    GitHub-flavoured Markdown, in a table cell (``|``), a list item or a paragraph: no tag
    (``<img onerror=...>``), no link or image (``[x](javascript:...)``, ``<http://...>``,
    bare ``http://``), no entity, no emphasis, heading, quote or list."""
    s = _MD_ACTIVE.sub(r"\\\g<0>", inert(text))
    s = _MD_AUTOLINK.sub(lambda m: "\\:" if m.group(1) else m.group(2) + "\\.", s)
    return _MD_LEAD.sub(_md_lead, s, count=1)


def md_code(text: Any, in_table: bool = False) -> str:
    """Input text for a Markdown code block or code span, where backslashes are shown, not
    read: :func:`inert`, and a backquote (it would close the code) shown as '. In a table
    cell (``in_table``) a pipe is escaped too: GitHub splits cells at a bare ``|`` even
    inside code, and reads ``\\|`` there as the character."""
    s = inert(text).replace("`", "'")
    return s.replace("|", "\\|") if in_table else s


def typical_tasks(tasks: list) -> dict:
    """For each bottleneck class present, the index of its most typical task: the one whose
    duration is nearest the median duration of the tasks with that bottleneck. Classes come
    most common first."""
    groups: dict = {}
    for i, t in enumerate(tasks):
        groups.setdefault(t.bottleneck, []).append(i)
    out = {}
    for cls, idx in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        durations = sorted(tasks[i].duration_ns for i in idx)
        median = durations[len(durations) // 2]
        out[cls] = min(idx, key=lambda i: (abs(tasks[i].duration_ns - median), i))
    return out


def path_rows(task: Any, max_rows: int = 12, min_share: float = 0.01,
              assumed: bool = False) -> list:
    """The task's critical path as rows: consecutive sections of one span merged, as
    (name, stage, class, start_s, end_s), times from the task's start. Rows shorter than
    ``min_share`` of the task, and beyond the ``max_rows`` longest, are left out, in time order,
    and one last row (times None) says how many and how long. With ``assumed``, each row ends
    with whether its class rests mostly on a stage label or an assumption (not measurement)."""
    rows: list = []
    t0 = task.start_ns
    for s in plain_segments(task):
        guessed = section_assumed(s) if assumed else False
        key = (s.span_id, s.cls, guessed)
        if rows and rows[-1][0] == key and rows[-1][5] == s.start_ns:
            rows[-1][5] = s.end_ns
            continue
        rows.append([key, s.name or "", s.stage or "", s.cls, s.start_ns, s.end_ns])
    floor = task.duration_ns * min_share
    longest = sorted(range(len(rows)), key=lambda i: rows[i][4] - rows[i][5])
    keep = sorted(i for i in longest[:max_rows] if rows[i][5] - rows[i][4] >= floor)
    out = [(rows[i][1], rows[i][2], rows[i][3], (rows[i][4] - t0) / 1e9, (rows[i][5] - t0) / 1e9)
           + ((rows[i][0][2],) if assumed else ()) for i in keep]
    left = len(rows) - len(keep)
    if left:
        kept = set(keep)
        left_ns = sum(r[5] - r[4] for i, r in enumerate(rows) if i not in kept)
        out.append((f"({left} shorter section{'s' if left > 1 else ''}, "
                    f"{duration_words(left_ns)} in all)", "", "", None,
                    None) + ((False,) if assumed else ()))
    return out


def marked(text: str, assumed: bool) -> str:
    """``text`` (a class, a share) with the mark of an assumed class when ``assumed``."""
    return text + ASSUMED_MARK if assumed else text


def bottleneck_counts(summary: Any, mark: str = ASSUMED_MARK) -> str:
    """Tasks per bottleneck, most first, those resting mostly on an assumption marked:
    '16 io, 15 cpu, 3 gpu (2*)' (all of them: '3 gpu*'); '' when there are none."""
    assumed = summary.assumed_bottlenecks or {}
    out = []
    for c, n in summary.bottlenecks.items():
        k = assumed.get(c, 0)
        out.append(f"{n} {c}" + ("" if not k else mark if k == n else f" ({k}{mark})"))
    return ", ".join(out)


def assumed_shares(summary: Any) -> list:
    """[(class, assumed share, whole share)] of the classes part of whose critical-path time
    rests on a stage label or an assumption, in class order."""
    whole = summary.share_of_critical_path
    return [(c, v, whole.get(c, 0.0))
            for c, v in (summary.assumed_share_of_critical_path or {}).items() if v > 0]


def assumed_words(summary: Any) -> "str | None":
    """The assumed part of the fleet's classes in words: 'gpu 0.4% of 0.4%' (None: none)."""
    parts = assumed_shares(summary)
    if not parts:
        return None
    return ", ".join(f"{c} {v:.1%} of {whole:.1%}" for c, v, whole in parts)


def bar(start_s: float, end_s: float, total_s: float, width: int, fill: str) -> str:
    """A row of ``width`` characters with ``fill`` where [start, end) falls on [0, total)."""
    if total_s <= 0:
        return " " * width
    a = int(start_s / total_s * width)
    b = max(int(round(end_s / total_s * width)), a + 1)
    a, b = min(max(a, 0), width - 1), min(b, width)
    return " " * a + fill * (b - a) + " " * (width - b)


def help_rows(analysis: Any) -> list:
    """The analysis' suggestions (:attr:`~agentscope.analysis.Analysis.suggestions`) as rows
    the reports share: {change, gain, mean_s, p95_s, throughput_per_h}, each figure a
    (recorded, predicted) pair."""
    from ..analyzers.whatif import describe

    rows = []
    for p in analysis.suggestions:
        rows.append({"change": describe(p), "gain": round(p.gain, 4),
                     "mean_s": (p.baseline.mean_s, p.predicted.mean_s),
                     "p95_s": (p.baseline.p95_s, p.predicted.p95_s),
                     "throughput_per_h": (p.baseline.throughput_per_h,
                                          p.predicted.throughput_per_h)})
    return rows


def help_lines(analysis: Any) -> list:
    """:func:`help_rows` in words, one line per change."""
    from ..analyzers.whatif import PROPOSE_SKIP_ABOVE, proposals_left_out

    if proposals_left_out(analysis.summary.spans):
        return [f"left out above {PROPOSE_SKIP_ABOVE:,} spans (it would cost as much as the "
                "analysis): agentscope whatif SOURCE --speedup stage:tool=2 predicts one change"]
    return [f"{r['change']}: mean {r['mean_s'][0]:.3f} → {r['mean_s'][1]:.3f} s "
            f"({-r['gain']:+.0%}), p95 {r['p95_s'][0]:.3f} → {r['p95_s'][1]:.3f} s, "
            f"{r['throughput_per_h'][0]:.0f} → {r['throughput_per_h'][1]:.0f} tasks/h"
            for r in help_rows(analysis)]


def lost_words(summary: Any) -> "str | None":
    """The critical-path time lost to timeouts and to retried failures, in words (None: none)."""
    parts = []
    if summary.timeout_share:
        parts.append(f"{summary.timeout_share:.1%} to timeouts")
    if summary.retry_share:
        parts.append(f"{summary.retry_share:.1%} to failed attempts that were retried")
    return ("critical-path time lost: " + ", ".join(parts)) if parts else None


def duration_words(ns: float) -> str:
    """A short duration as people write it: 1.46 s, 0.197 s, 4.2 ms, 208 µs."""
    if ns >= 100_000_000:
        return f"{ns / 1e9:.3g} s"
    if ns >= 1_000_000:
        return f"{ns / 1e6:.3g} ms"
    return f"{ns / 1e3:.3g} µs"
