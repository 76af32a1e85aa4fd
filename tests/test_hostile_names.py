"""Hostile names stay inert in every output (issue 18, item 3).

Span names, stage values, services, lanes, attribute values, status messages and file names
come from programs we do not control. Whatever they hold, every output must survive them and
show them as text:

* for people (the terminal views of ``analyze``, ``--task``, ``plan``, ``whatif``, the
  ``query`` table, ``check``, the lines on stderr): no exception, no control, format or bidi
  character reaches the output (ESC would start colours, cursor moves, window titles and
  hyperlinks), no Rich markup, emoji code or highlighting is applied (the name, as
  :func:`~agentscope.exporters.views.inert` documents it, is there as written and in one
  piece);
* Markdown (``--format markdown``, the ``--task`` Markdown, plan and what-if Markdown): the
  same, and rendered as CommonMark with GitHub's tables (markdown-it, which Rich brings) a name
  makes no tag, link, image, emphasis, heading or extra table cell, and reads as its text;
* data (the JSON documents, ``query`` csv and json, the HTML report's JSON block, the
  Prometheus exposition): valid for its format and the values kept.

One property test draws names from the kinds below and their mixtures (hypothesis, a bounded
number of examples, derandomized: ``AGENTSCOPE_HOSTILE_EXAMPLES`` raises the count and
``AGENTSCOPE_HOSTILE_RANDOM=1`` lets it explore); the command-line tests run every command
once over a trace holding every kind.
"""

from __future__ import annotations

import csv
import html
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unicodedata
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rich.console import Console

import agentscope
from agentscope.cli import _json, main
from agentscope.exporters import html_report, plan_view, whatif_view
from agentscope.exporters.table import markdown, markdown_task, render, render_task
from agentscope.exporters.views import inert, inert_text, md_code, md_text
from agentscope.formats import spanfile
from agentscope.records import SpanRecord

T0 = 1_700_000_000_000_000_000
MS = 1_000_000

# ---- the kinds of hostile name ------------------------------------------------------------------
HOSTILE = {
    "rich closing tag": "invoke_agent [/tool]",
    "rich style": "[bold]B[/bold] [red]R[/] [/]",
    "rich link": "[link=https://evil.example]click[/link]",
    "rich escaped bracket": "\\[bold]x\\\\[i]y",
    "trailing backslash": "name ends in a backslash\\",
    "emoji code": ":smile: :thumbs_up: :cross_mark:",
    "highlighter bait": "1.2.3.4 0xdeadbeef True None 'quoted' https://x.example/p?q=1 3.14",
    "ansi csi": "x\x1b[2Jy\x1b[31mred\x1b[0m\x1b[1A",
    "ansi osc title": "\x1b]0;pwned\x07title\x1b]2;t\x1b\\",
    "ansi osc hyperlink": "\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\",
    "c0 controls": "a\x00b\x07c\x08d\x7fe\x1cf",
    "c1 controls": "a\x85b\x9b2Jc\x9d0;t\x9c",
    "line breaks": "line1\nline2\r\nline3\u2028line4\u2029",
    "tabs and feeds": "a\tb\x0bc\x0cd",
    "bidi override": "abc\u202edcba\u202c.exe",
    "bidi isolate and marks": "\u2066x\u2069\u200f\u200e\u061cy",
    "zero width": "a\u200bb\u200cc\u200dd\ufeffe\u2060f\u00adg",
    "tag characters": "x\U000e0041\U000e0042\U000e007f",
    "lone surrogate": "n\udc80\ud800m",
    "html img": "<img src=x onerror=alert(1)>",
    "html script": "</script><script>alert('x')</script>",
    "html entity": "&lt;b&gt; &amp; &#60;img&#62; &#x3C;",
    "javascript link": "[x](javascript:alert(1))",
    "markdown image": "![i](https://evil.example/p.png)",
    "autolink": "<http://evil.example> <javascript:alert(1)> <a@b.example>",
    "bare url": "https://evil.example www.evil.example",
    "pipes": "a | b || c |",
    "backticks": "``` code ` x ``",
    "heading": "# heading",
    "quote": "> quote",
    "list item": "- item",
    "ordered list": "1. one",
    "emphasis": "*a* _b_ ~~c~~ **d** ==e==",
    "math": "$x^2$ $$y$$",
    "backslashes": "\\\\ \\* \\` \\",
    "format strings": "{0} {name!r} %s %(x)d {{}} %n",
    "sql quotes": "'; DROP TABLE spans; -- \" `x`",
    "path traversal": "../../etc/passwd /abs/path",
    "very long": "long-" * 600,
}
assert len(HOSTILE) >= 36

# single characters a terminal or a renderer acts on, to mix into drawn names
ACTIVE_CHARS = ("\x1b", "\x07", "\x00", "\x85", "\x9b", "\x9d", "\u202e", "\u2066", "\u200b",
                "\u200d", "\ufeff", "\u2028", "\ud800", "\udcff", "\n", "\r", "\t", "[", "]",
                "/", "\\", ":", "<", ">", "&", "|", "`", "*", "_", "#", "!", "~", "$", "(", ")",
                "=", "-", "+", "1.", '"', "'", "%", "{", "}")
_SHORT = [v for k, v in HOSTILE.items() if k != "very long"]
hostile_names = st.one_of(
    st.sampled_from(list(HOSTILE.values())),
    st.lists(st.one_of(st.sampled_from(_SHORT), st.sampled_from(ACTIVE_CHARS),
                       st.text(st.characters(exclude_categories=()), max_size=4),
                       st.text(st.characters(max_codepoint=0xA0), max_size=4)),
             min_size=1, max_size=5).map("".join),
)


# ---- a small trace holding the names ------------------------------------------------------------
def _span(trace, span_id, parent, name, stage, start_ms, end_ms, *, service="svc", attrs=None,
          cpu_ms=None, status="unset", message=None):
    return SpanRecord(trace, span_id, parent, name, stage, "internal", T0 + start_ms * MS,
                      T0 + end_ms * MS, status, message, service, "h", 1, 1,
                      None if cpu_ms is None else cpu_ms * MS, 0, 0, 0, 0, 0, 0, 0, attrs or {})


def _task_spans(trace: str, task: str, tool: str, other: str, t0_ms: int = 0) -> list:
    """One task: the root named ``task`` (lane and service ``other``), a tool span named
    ``tool`` that holds most of the path and carries ``other`` in the attributes the evidence
    reads, and a short span whose stage is ``other`` (no stage agentscope knows)."""
    attrs = {"server.address": other, "gen_ai.request.model": other, "db.system": other,
             "tool": other, "error.type": other}
    return [_span(trace, "1" * 16, None, task, "task", t0_ms, t0_ms + 100, service=other,
                  attrs={"agentscope.lane": other, "gen_ai.agent.name": other}),
            _span(trace, "2" * 16, "1" * 16, tool, "tool", t0_ms + 5, t0_ms + 90, service=other,
                  attrs=attrs, cpu_ms=80, status="error", message=other),
            _span(trace, "3" * 16, "1" * 16, other, other, t0_ms + 90, t0_ms + 95,
                  service=other)]


def _write(directory: Path, records: list, file_name: str = "") -> None:
    """The span file, and a file that is not a trace, named ``file_name`` as far as a file
    system allows (no '/' or NUL; its bytes as the name encodes, cut to 200)."""
    directory.mkdir(parents=True, exist_ok=True)
    if records:
        with open(directory / "spans-h-1-1.jsonl", "w", encoding="utf-8") as f:
            f.write("".join(spanfile.encode(r) for r in records))
    if file_name:
        raw = ("f-" + file_name.replace("/", "_").replace("\x00", "_"))
        try:
            name = os.fsencode(raw)
        except UnicodeEncodeError:
            name = raw.encode("utf-8", "surrogatepass")
        with open(os.path.join(os.fsencode(directory), name[:200]), "wb") as f:
            f.write(b"not a trace\n")


# ---- what an output for people may hold -----------------------------------------------------
_SGR = re.compile(r"\x1b\[[0-9;]*m")  # the colours our own views set


def _acted_on(text: str) -> list:
    """The characters of ``text`` a terminal or renderer would act on (line breaks aside)."""
    return sorted({f"U+{ord(c):04X}" for c in text if c != "\n" and not c.isprintable()
                   and unicodedata.category(c) not in ("Zs", "Co", "Cn")})


def _shown(name: str) -> str:
    """The name as a person is documented to see it: inert, spaces at its ends trimmed."""
    return inert(name).strip()


def assert_terminal_inert(out: str, *must_show: str) -> None:
    """``out`` printed by a console that colours (our colours allowed, nothing else): no
    control or format character, and each of ``must_show`` in it as written, in one piece
    (Rich applied no markup, emoji code or highlighting to it)."""
    assert "\x1b]" not in out and "\x9d" not in out, "an OSC sequence (title, hyperlink)"
    plain = _SGR.sub("", out)
    assert _acted_on(plain) == [], plain[:500]
    for name in must_show:
        if _shown(name):
            assert _shown(name) in out, (name, out[:2000])


def _md_html(md: str) -> str:
    """Markdown rendered as CommonMark with GitHub's tables and strikethrough, raw HTML on (as
    GitHub's renderer takes it before its sanitizer)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).render(md)


_ALLOWED_TAGS = {"h2", "h3", "p", "table", "thead", "tbody", "tr", "th", "td", "code", "pre",
                 "strong", "ul", "li", "blockquote", "br"}
_BARE_PIPE = re.compile(r"\\.|\|")


def _cells(line: str) -> int:
    return sum(1 for m in _BARE_PIPE.finditer(line) if m.group() == "|")


def assert_markdown_inert(md: str, *must_show: str) -> None:
    """``md`` holds no control character, no raw tag or link from a name outside code, each
    table row has its header's cells, and rendered it makes only our own elements and reads
    each of ``must_show`` as text."""
    assert _acted_on(md) == [], md[:500]
    outside = re.sub(r"```.*?```", "", md, flags=re.S)
    outside = re.sub(r"`[^`\n]*`", "", outside)
    assert not re.search(r"(?<!\\)<[A-Za-z/!?]", outside), outside[:2000]
    assert not re.search(r"(?<!\\)\]\(", outside), outside[:2000]
    assert not re.search(r"(?<!\\)://", outside), outside[:2000]
    header = None
    for line in md.splitlines():
        if not line.startswith("|"):
            header = None
        elif header is None:
            header = _cells(line)
        else:
            assert _cells(line) == header, line
    rendered = _md_html(md)
    tags = set(re.findall(r"<([a-zA-Z][a-zA-Z0-9]*)", rendered))
    assert tags <= _ALLOWED_TAGS, (tags - _ALLOWED_TAGS, rendered[:2000])
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", rendered)).split())
    for name in must_show:
        shown = " ".join(_shown(name).split())
        if shown:
            assert shown in text, (name, text[:2000])


def _colour_console(buf: io.StringIO) -> Console:
    """Rich's default console (markup, emoji codes and highlighting on), forced to colour and
    wide enough that no cell wraps: what the views print must not depend on those settings."""
    return Console(file=buf, force_terminal=True, color_system="truecolor", width=20_000)


# ---- the property -------------------------------------------------------------------------------
_EXAMPLES = int(os.environ.get("AGENTSCOPE_HOSTILE_EXAMPLES", "30"))


@settings(max_examples=_EXAMPLES, deadline=None, database=None,
          derandomize=os.environ.get("AGENTSCOPE_HOSTILE_RANDOM") != "1",
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(task=hostile_names, tool=hostile_names, other=hostile_names, file_name=hostile_names)
@example(task=" ".join(_SHORT[:13]), tool=" ".join(_SHORT[13:26]), other=" ".join(_SHORT[26:]),
         file_name=" ".join(_SHORT[::3]))  # every kind at least once, whatever is drawn
@example(task=" ".join(_SHORT[26:]), tool=" ".join(_SHORT[:13]), other=" ".join(_SHORT[13:26]),
         file_name=HOSTILE["very long"])
def test_hostile_names_stay_inert_in_every_output(task, tool, other, file_name):
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from agentscope.exporters.prometheus import registry_for

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "traces"
        _write(d, _task_spans("c" * 32, task, tool, other), file_name)
        with agentscope.analyze(d, db=":memory:") as a:
            (t,) = a.task_results
            # the terminal: the analysis, one task in full, plan and what-if
            buf = io.StringIO()
            render(a, _colour_console(buf))
            render_task(t, _colour_console(buf))
            assert_terminal_inert(buf.getvalue(), t.name, t.lane or "", tool)
            doc = a.plan([], 0.8)
            prediction = a.whatif(["stage:tool=2"])
            for text in (plan_view.text(doc), whatif_view.text(prediction)):
                assert_terminal_inert(text)
            for line in a.warnings:  # the CLI prints each through inert
                assert_terminal_inert(inert(line))
            # Markdown
            assert_markdown_inert(markdown(a), t.name, t.lane or "")
            assert_markdown_inert(markdown_task(t), t.name, tool)
            assert_markdown_inert(plan_view.markdown(doc))
            assert_markdown_inert(whatif_view.markdown(prediction), t.name)
            # data: strict JSON, the HTML report, the Prometheus exposition
            document = json.loads(a.to_json(), parse_constant=_no_constant)
            assert document["tasks"][0]["name"] == t.name
            for value in (doc, prediction.to_dict()):
                assert json.loads(_json(value), parse_constant=_no_constant) is not None
            _assert_html_inert(html_report.render(html_report.build(a, source=str(d))), t.name)
            exposition = generate_latest(registry_for(a)).decode("utf-8")
            labels = {v for family in text_string_to_metric_families(exposition)
                      for sample in family.samples for v in sample.labels.values()}
            assert t.name in labels
        # check, through the command line (it prints stage names, skipped file names, problems)
        result = CliRunner().invoke(main, ["check", str(d)])
        assert result.exception is None or isinstance(result.exception, SystemExit), \
            result.exception
        assert_terminal_inert(result.output)


def _no_constant(name: str):
    raise AssertionError(f"{name} in JSON")


def _assert_html_inert(page: str, *names: str) -> None:
    """The report: the names only in the JSON block, which holds no '<', '>' or '&' and parses
    back to them; outside it, our markup only (two scripts, one style, no tag from a name)."""
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page,
                  re.S)
    assert m, "no data block"
    island = m.group(1)
    assert not set("<>&") & set(island)
    data = json.loads(island, parse_constant=_no_constant)
    outside = page[:m.start()] + page[m.end():]
    assert outside.count("<script") == 1 and outside.count("</script>") == 1
    assert not re.search(r"<(img|svg|iframe|a|object|embed)\b", outside, re.I)
    for name in names:
        assert name in {row[0] for row in data["tasks"]}
        if "<" in name:
            assert name not in outside


# ---- the command line, every command over every kind -------------------------------------------
@pytest.fixture(scope="module")
def hostile_dir(tmp_path_factory) -> Path:
    """A trace directory with one task per kind (the kind's name as task, tool, stage,
    service, lane and attribute values), and a file named after each kind that is not a
    trace."""
    d = tmp_path_factory.mktemp("hostile") / "traces"
    records = []
    for i, name in enumerate(HOSTILE.values()):
        records += _task_spans(f"{i + 1:032x}", name, name + " tool", name, t0_ms=i * 200)
    _write(d, records)
    for i, name in enumerate(HOSTILE.values()):
        _write(d, [], f"{i}-{name[:60]}")
    return d


def _cli(*args: str):
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        "".join(__import__("traceback").format_exception(result.exception))
    assert "Traceback" not in result.output
    return result


def test_every_command_keeps_hostile_names_inert(hostile_dir, tmp_path):
    db = str(tmp_path / "store.duckdb")
    d = str(hostile_dir)
    terminal = [
        _cli("analyze", d, "--db", db, "-v"),
        _cli("analyze", d, "--db", db, "--limit", "100"),
        _cli("plan", d, "--db", db),
        _cli("whatif", d, "--db", db, "--speedup", "stage:tool=2",
             "--speedup", "name:" + HOSTILE["rich closing tag"] + "=2"),
        _cli("whatif", d, "--db", db, "--speedup", "name:\x1b[2J[bold]nothing=2"),
        _cli("check", d),
        _cli("query", d, "--db", db, "SELECT name, stage, service, status_message, attrs "
             "FROM spans ORDER BY trace_id, span_id"),
        _cli("report", d, "--db", db, "--html", str(tmp_path / "r.html")),
    ]
    stored = [t["name"] for t in json.loads(_cli("analyze", d, "--db", db, "--format",
                                                 "json").stdout)["tasks"]]
    assert len(stored) == len(HOSTILE)
    # --task takes a name as stored (a lone surrogate is U+FFFD there); every task's view is
    # checked in the library below, a few here through the command line
    picked = [n for n in stored if any(k in n for k in ("[/tool]", "\x1b[2J", "<img",
                                                         "\ufffd", ":smile:"))]
    assert len(picked) == 5
    for name in picked:
        terminal.append(_cli("analyze", d, "--db", db, "--task", name))
    for result in terminal:
        assert result.exit_code in (0, 1), result.output
        assert_terminal_inert(result.output)
    # the -v load summary and the warnings name the files that are not traces, as text
    assert "skipped f-0-invoke_agent [_tool]: " in terminal[0].stderr  # '/': '_' in a file
    assert "skipped f-19-<img src=x onerror=alert(1)>: " in terminal[0].stderr
    # the table's cells wrap names at 120 columns: their pieces are there as written
    table = terminal[1].stdout
    for piece in (":smile:", ":thumbs_up:", "[/tool]", "\\[bold]x", "[link=https:", "[red]R[/]",
                  "backslash\\", "{0}", "%s"):
        assert piece in table, piece
    # the query table shows names whole, as text
    assert "invoke_agent [/tool]" in terminal[6].stdout

    markdowns = [_cli("analyze", d, "--db", db, "--format", "markdown", "--limit", "100"),
                 _cli("plan", d, "--db", db, "--format", "markdown"),
                 _cli("whatif", d, "--db", db, "--speedup", "stage:tool=2", "--format",
                      "markdown", "--limit", "100")]
    for result in markdowns:
        assert result.exit_code in (0, 1)
        assert_markdown_inert(result.stdout)
    for kind in ("rich closing tag", "html img", "javascript link", "autolink", "pipes",
                 "heading", "list item", "ordered list", "html entity", "backslashes",
                 "bare url", "math", "emphasis"):
        assert_markdown_inert(markdowns[0].stdout, HOSTILE[kind])
    for name in picked:
        md = _cli("analyze", d, "--db", db, "--task", name, "--format", "markdown")
        assert_markdown_inert(md.stdout, name, name + " tool")

    # data: strict JSON that gives the names back, CSV that gives them back
    for args in (("analyze", d, "--db", db, "--format", "json"),
                 ("plan", d, "--db", db, "--format", "json"),
                 ("whatif", d, "--db", db, "--speedup", "stage:tool=2", "--format", "json"),
                 ("check", d, "--format", "json"),
                 ("analyze", d, "--db", db, "--task", HOSTILE["html img"], "--format", "json")):
        json.loads(_cli(*args).stdout, parse_constant=_no_constant)
    got = json.loads(_cli("query", d, "--db", db, "--format", "json",
                          "SELECT name FROM spans WHERE stage = 'task'").stdout)
    names = {row["name"] for row in got}
    assert HOSTILE["ansi csi"] in names and HOSTILE["html script"] in names  # data, exact
    raw = _cli("query", d, "--db", db, "--format", "csv",
               "SELECT name FROM spans WHERE stage = 'task'").stdout_bytes.decode("utf-8")
    rows = list(csv.reader(io.StringIO(raw, newline="")))  # (Result.stdout folds "\r\n")
    assert {r[0] for r in rows[1:]} == names
    _assert_html_inert((tmp_path / "r.html").read_text(encoding="utf-8"),
                       HOSTILE["html script"], HOSTILE["html img"])


def test_hostile_names_reach_the_terminal_of_the_command_line_inert(hostile_dir, tmp_path):
    """What `analyze` and `analyze --task` print on a colour terminal (the command line's
    console): our colours, nothing from a name; `[/tool]` neither crashes nor vanishes,
    `[link=...]` makes no hyperlink. Each task in full, in the terminal and in Markdown."""
    from agentscope.exporters import table

    def colour(buf):
        return table.terminal_console(width=40_000, file=buf, force_terminal=True,
                             color_system="truecolor")

    with agentscope.analyze(hostile_dir, db=str(tmp_path / "store.duckdb")) as a:
        buf = io.StringIO()
        table.render(a, colour(buf), limit=100)
        assert_terminal_inert(buf.getvalue(), *(t.name for t in a.task_results))
        assert "\x1b]8;" not in buf.getvalue()  # no hyperlink
        for t in a.task_results:
            buf = io.StringIO()
            table.render_task(t, colour(buf))
            assert_terminal_inert(buf.getvalue(), t.name, t.name + " tool")
            assert_markdown_inert(markdown_task(t), t.name, t.name + " tool")


# ---- Rich's own traps, one by one ---------------------------------------------------------------
@pytest.mark.parametrize("name", ["invoke_agent [/tool]", "x\\", "a\\[b]", "\\[bold]c",
                                  "[link=https://e.example]L[/link]", ":smile:", "[/]",
                                  "1.2.3.4 True https://x.example", "[bold", "]["])
def test_a_name_prints_as_written_whatever_the_console(name):
    for markup in (True, False):
        buf = io.StringIO()
        console = Console(file=buf, force_terminal=True, color_system="truecolor", width=200,
                          markup=markup, emoji=True, highlight=True)
        console.print(inert_text(name))
        assert buf.getvalue() == name + "\n"  # not a colour, not an emoji, not a link


def test_inert_is_one_documented_rule():
    assert inert("a\nb\r\n\tc") == "a b c"  # a row stays a row
    assert inert("\x1b[2J\x1b]0;t\x07") == "[2J]0;t"  # ESC and BEL dropped, the rest shown
    assert inert("a\x85b\x9bc") == "a bc"  # NEL is a line break; CSI dropped
    assert inert("ab\u202ec\u2066d\u200be\ufeff\U000e0041") == "abcde"
    assert inert("n\udc80") == "n\ufffd"  # a lone surrogate cannot even be encoded
    plain = "ok [bold] \u00e9 \u4e2d \U0001f600 \u00a0"
    assert inert(plain) == plain
    for name in HOSTILE.values():
        assert inert(inert(name)) == inert(name)
        assert _acted_on(inert(name)) == []
        (inert(name)).encode("utf-8")  # always printable


@pytest.mark.parametrize("kind", ["html img", "javascript link", "markdown image", "autolink",
                                  "bare url", "pipes", "heading", "quote", "list item",
                                  "ordered list", "emphasis", "html entity", "backslashes",
                                  "math", "backticks", "rich closing tag"])
def test_markdown_text_reads_as_written(kind):
    name = HOSTILE[kind]
    for md in (f"| a |\n|---|\n| {md_text(name)} |\n", f"- {md_text(name)}\n",
               f"{md_text(name)}\n", f"**x**: {md_text(name)}\n"):
        assert_markdown_inert(md, name)
    code = md_code(name, in_table=True)
    assert "`" not in code and _cells(f"| `{code}` |") == 2


# ---- JSON the command line writes ---------------------------------------------------------------
def test_query_json_is_strict_and_types_are_plain(tmp_path):
    d = tmp_path / "t"
    _write(d, _task_spans("a" * 32, "t", "tool", "x"))
    result = _cli("query", str(d), "--db", ":memory:", "--format", "json",
                  "SELECT 'nan'::DOUBLE AS nan, 'inf'::DOUBLE AS inf, '-inf'::FLOAT AS ninf, "
                  "1.5::DOUBLE AS f, 12.50::DECIMAL(6, 2) AS dec, 7::DECIMAL(4, 0) AS whole, "
                  "'\\xAA\\x00'::BLOB AS blob, DATE '2026-12-02' AS day, "
                  "TIMESTAMP '2026-12-02 10:00:00.5' AS ts, INTERVAL 90 SECOND AS iv, "
                  "[1.0, 'nan'::DOUBLE] AS list, {'k': 'inf'::DOUBLE} AS struct, "
                  "170141183460469231731687303715884105727::HUGEINT AS huge, "
                  "'6ba7b810-9dad-11d1-80b4-00c04fd430c8'::UUID AS id")
    assert result.exit_code == 0, result.output
    assert not re.search(r"\bNaN\b|Infinity", result.stdout)
    (row,) = json.loads(result.stdout, parse_constant=_no_constant)
    assert row["nan"] is None and row["inf"] is None and row["ninf"] is None
    assert row["f"] == 1.5 and row["dec"] == 12.5 and row["whole"] == 7
    assert row["blob"] == "aa00" and row["day"] == "2026-12-02"
    assert row["ts"] == "2026-12-02T10:00:00.500000" and row["iv"] == 90.0
    assert row["list"] == [1.0, None] and row["struct"] == {"k": None}
    assert row["huge"] == 2 ** 127 - 1 and row["id"] == "6ba7b810-9dad-11d1-80b4-00c04fd430c8"


def test_the_json_helper_never_writes_nan():
    import numpy as np

    doc = {"a": float("nan"), "b": [float("inf"), {"c": -float("inf")}], 1: (2.5,),
           "d": np.float32("nan"), "e": np.int64(3), "f": np.float64("-inf")}
    assert json.loads(_json(doc), parse_constant=_no_constant) == \
        {"a": None, "b": [None, {"c": None}], "1": [2.5], "d": None, "e": 3, "f": None}


# ---- a store another process holds --------------------------------------------------------------
_HOLD = ("import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('held', flush=True); "
         "sys.stdin.read()")


def test_a_locked_store_is_one_line_and_exit_1(tmp_path, monkeypatch):
    """Another process holds the store (here a plain DuckDB connection that waits for its
    stdin to close): `analyze` says which store and what to do, in one line, exit 1."""
    try:  # the store waits a little for the lock; the test need not wait as long
        from agentscope.store import connect as store_connect

        monkeypatch.setattr(store_connect, "LOCK_WAIT_S", 0.2, raising=False)
    except ImportError:
        pass
    shutil.copytree(Path(__file__).resolve().parents[1] / "sample_traces" / "cpu",
                    tmp_path / "t")
    db = tmp_path / "t" / ".agentscope" / "agentscope.duckdb"
    assert _cli("analyze", str(tmp_path / "t"), "-q").exit_code == 0  # the store exists
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(db)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for args in (["analyze", str(tmp_path / "t")], ["plan", str(tmp_path / "t")],
                     ["query", str(tmp_path / "t"), "SELECT 1"]):
            result = CliRunner().invoke(main, args)
            assert result.exit_code == 1, result.output
            assert isinstance(result.exception, SystemExit)
            errors = [line for line in result.stderr.splitlines()
                      if line.startswith("agentscope: ") and "waiting for" not in line]
            assert len(errors) == 1, result.stderr
            (line,) = errors
            assert str(db) in line and "--db" in line and "Traceback" not in result.output
            assert f"pid {holder.pid}" in line
        # the store is free again once the other process is gone
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert _cli("analyze", str(tmp_path / "t"), "-q").exit_code == 0


def test_an_agentscope_error_from_any_command_is_one_line(tmp_path, monkeypatch):
    """A StoreError raised late (the report reading spans from a store that went away) or a
    lock conflict DuckDB raised unwrapped: one line and exit 1 from the top, no traceback."""
    from agentscope.errors import StoreError

    d = tmp_path / "t"
    _write(d, _task_spans("a" * 32, "t", "tool", "x"))

    def gone(*args, **kwargs):
        raise StoreError("cannot open the store /x/store.duckdb: \x1b[2Jgone")

    monkeypatch.setattr(html_report, "write", gone)
    result = CliRunner().invoke(main, ["report", str(d), "--html", str(tmp_path / "r.html")])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.stderr.strip().splitlines()[-1] == \
        "agentscope: cannot open the store /x/store.duckdb: [2Jgone"

    class IOException(Exception):  # as DuckDB's own (module duckdb), not wrapped
        __module__ = "duckdb"

    def locked(*args, **kwargs):
        raise IOException('IO Error: Could not set lock on file "/s/agentscope.duckdb": '
                          "Conflicting lock is held in /usr/bin/python3 (PID 4242). See also "
                          "https://duckdb.org/docs/current/connect/concurrency")

    monkeypatch.setattr(html_report, "write", locked)
    result = CliRunner().invoke(main, ["report", str(d), "--html", str(tmp_path / "r.html")])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("agentscope: the store /s/agentscope.duckdb is in use by another "
                           "process (pid 4242, python3)") and "--db :memory:" in line
