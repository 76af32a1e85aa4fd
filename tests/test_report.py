"""Reports people read: the HTML report (data, escaping, a real browser), the terminal's and
Markdown's text timelines, colour only where the terminal takes it."""

from __future__ import annotations

import base64
import collections
import json
import os
import re
import select
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentscope.cli import main
from agentscope.exporters import html_report
from agentscope.exporters.views import bar, path_rows, typical_tasks
from agentscope.formats import spanfile
from agentscope.records import SpanRecord

from .conftest import SCREENSHOTS

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
T0 = 1_700_000_000_000_000_000
MS = 1_000_000

HOSTILE_NAME = "</script><script>console.error('xss-script')</script>"
HOSTILE_IMG = "<img src=x onerror=\"console.error('xss-img')\"> & 'quotes' \u2028"
TASK_NAME = HOSTILE_NAME + HOSTILE_IMG  # the task's name is in the table, the charts, the title


def _data_of(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
    assert m, "no data block"
    return json.loads(m.group(1))


def _span(trace, span_id, parent, name, stage, start_ms, end_ms, attrs=None, cpu_ms=None):
    cpu = None if cpu_ms is None else cpu_ms * MS
    return SpanRecord(trace, span_id, parent, name, stage, "internal", T0 + start_ms * MS,
                      T0 + end_ms * MS, "unset", None, "svc", "h", 1, 1, cpu, 0, 0, 0, 0, 0, 0, 0,
                      attrs or {})


def _hostile_dir(tmp_path: Path) -> Path:
    d = tmp_path / "traces"
    d.mkdir()
    trace = "b" * 32
    records = [
        _span(trace, "1" * 16, None, TASK_NAME, "task", 0, 100,
              {"agentscope.lane": "<b>lane</b>", "gen_ai.agent.name": '"><svg onload=alert(1)>'}),
        _span(trace, "2" * 16, "1" * 16, HOSTILE_IMG, "tool", 5, 95, cpu_ms=80),
    ]
    (d / "spans-h-1-1.jsonl").write_text("".join(spanfile.encode(r) for r in records))
    return d


# ---- the HTML report ----------------------------------------------------------------------------
def test_report_of_the_sample_traces(tmp_path):
    out = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", str(SAMPLES), "--html", str(out),
                                       "--db", str(tmp_path / "db.duckdb")])
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")  # nothing fetched
    assert "https://" not in html
    data = _data_of(html)
    assert data["schema"] == "agentscope.report/v1"
    analysed = json.loads(CliRunner().invoke(main, [
        "analyze", str(SAMPLES), "--format", "json", "--db", str(tmp_path / "db.duckdb")]).output)
    assert len(data["tasks"]) == len(analysed["tasks"]) == data["summary"]["tasks"]
    assert len(data["timelines"]) == len(data["tasks"])  # 50 tasks <= 100: every one
    by_trace = {t["trace_id"]: t for t in analysed["tasks"]}
    col = {c: i for i, c in enumerate(data["task_columns"])}
    for i, row in enumerate(data["tasks"]):
        task = by_trace[row[col["trace_id"]]]
        assert row[col["bottleneck"]] == task["bottleneck"]
        tl = data["timelines"][str(i)]
        assert len(tl["spans"]) == task["spans"]
        # the critical path covers the task from start to end, in order, in our classes
        assert tl["path"][0][0] == pytest.approx(0, abs=1e-6)
        assert tl["path"][-1][1] == pytest.approx(row[col["duration_s"]], abs=1e-6)
        for a, b in zip(tl["path"], tl["path"][1:]):
            assert a[1] == pytest.approx(b[0], abs=1e-6)
        assert {p[2] for p in tl["path"]} <= set(data["classes"])
        assert all(p[3] < len(tl["spans"]) for p in tl["path"])
    # fleet views: per stage and lane, seconds that add up to the critical paths' total
    total = sum(sum(v.values()) for v in data["by_stage"].values())
    assert total == pytest.approx(data["summary"]["critical_path_s"], rel=1e-3)
    assert sum(sum(v.values()) for v in data["by_lane"].values()) == pytest.approx(total, rel=1e-6)
    assert set(data["by_lane"]) == {"online", "batch"}
    # the sample traces were recorded with counters: timelines carry the host's
    assert any(tl.get("counters") for tl in data["timelines"].values())


def test_report_keeps_timelines_for_typical_and_slowest_tasks_only(tmp_path):
    out = tmp_path / "r.html"
    # four classes have tasks here: their most typical four, then the slowest
    result = CliRunner().invoke(main, ["report", str(SAMPLES), "--html", str(out), "--timelines",
                                       "5", "--db", str(tmp_path / "db.duckdb")])
    assert result.exit_code == 0, result.output
    data = _data_of(out.read_text())
    n = len(data["tasks"])
    assert n == 50 and len(data["timelines"]) == 5 and len(data["typical"]) == 4
    assert {str(i) for i in data["typical"].values()} <= set(data["timelines"])
    col = {c: i for i, c in enumerate(data["task_columns"])}
    durations = sorted((r[col["duration_s"]] for r in data["tasks"]), reverse=True)
    slowest = max(range(n), key=lambda i: data["tasks"][i][col["duration_s"]])
    assert str(slowest) in data["timelines"] and durations[0] == data["tasks"][slowest][3]
    # every task's whole evidence is there, timeline or not
    analysed = json.loads(CliRunner().invoke(main, [
        "analyze", str(SAMPLES), "--format", "json", "--db", str(tmp_path / "db.duckdb")]).output)
    evidence = {t["trace_id"]: t["evidence"] for t in analysed["tasks"]}
    for row in data["tasks"]:
        assert [row[col["evidence"]], *row[col["more_evidence"]]] == evidence[row[col["trace_id"]]]
    if CHROMIUM is not None:  # a task without a timeline shows its evidence
        i = next(k for k in range(n) if str(k) not in data["timelines"])
        dom, console = _chromium(tmp_path, out.as_uri() + f"#task={i}", "--dump-dom")
        assert console == [] and "has no timeline for this task" in dom
        assert all(e.replace("&", "&amp;") in dom
                   for e in evidence[data["tasks"][i][col["trace_id"]]])


def test_untrusted_names_and_attributes_are_escaped(tmp_path):
    d = _hostile_dir(tmp_path)
    out = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", str(d), "--html", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text()
    # nothing from the data reaches the HTML parser as markup
    for bad in ("<script>console.error", "<img src=x", "<b>lane", "<svg onload", "\u2028"):
        assert bad not in html
    assert html.count("<script") == 2 and html.count("</script>") == 2  # data + our script
    data = _data_of(html)  # and the JSON gives every character back
    col = {c: i for i, c in enumerate(data["task_columns"])}
    assert data["tasks"][0][col["name"]] == TASK_NAME
    assert data["tasks"][0][col["lane"]] == "<b>lane</b>"
    names = {s[2] for s in data["timelines"]["0"]["spans"]}
    assert names == {TASK_NAME, HOSTILE_IMG}
    # the script puts data in as text only
    js = (REPO / "agentscope" / "exporters" / "assets" / "report.js").read_text()
    assert "innerHTML" not in js and "insertAdjacentHTML" not in js and "document.write" not in js


def test_script_json_round_trips_and_hides_markup():
    value = {"a": "</script><!-- \u2028\u2029 & <>", "b": [1.5, None, "é"]}
    text = html_report.script_json(value)
    assert not set("<>&\u2028\u2029") & set(text)
    assert json.loads(text) == value


# ---- a real browser -----------------------------------------------------------------------------
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(n)), None)


def _chromium(tmp_path: Path, url: str, *args: str) -> tuple:
    """Headless Chromium on ``url``; (stdout, the console messages it logged)."""
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={tmp_path / 'chromium-profile'}", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=10000", *args, url],
        capture_output=True, text=True, timeout=120)
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return proc.stdout, console


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)")
def test_the_report_in_headless_chromium(tmp_path):
    out = tmp_path / "r.html"
    assert CliRunner().invoke(main, ["report", str(SAMPLES), "--html", str(out), "--db",
                                     str(tmp_path / "db.duckdb")]).exit_code == 0
    data = _data_of(out.read_text())
    col = {c: i for i, c in enumerate(data["task_columns"])}
    # the address filters the table: 'research' among the io-bound tasks
    want = sum(1 for t in data["tasks"] if t[col["bottleneck"]] == "io"
               and "research" in " ".join([t[col["name"]], t[col["lane"]], t[col["bottleneck"]],
                                           t[col["evidence"]]]).lower())
    assert 0 < want < len(data["tasks"])
    dom, console = _chromium(tmp_path, out.as_uri() + "#q=research&class=io", "--dump-dom")
    assert console == [], console  # no errors, no messages at all
    assert re.search(r'data-rendered-ms="\d+"', dom), "the script did not finish"
    assert f'data-shown="{want}"' in dom
    shown = re.findall(r'<tr data-task="(\d+)">', dom)
    assert len(shown) == want  # only the matching rows are in the table
    assert all(data["tasks"][int(i)][col["bottleneck"]] == "io" for i in shown)
    # the timeline and the charts are drawn
    gantt = re.search(r'<svg[^>]*id="gantt".*?</svg>', dom, re.S)
    assert gantt and gantt.group(0).count("<rect") >= 5
    assert dom.count('class="latency"') == 1 and dom.count('class="breakdown"') == 2
    assert re.search(r'<svg[^>]*class="latency".*?<rect', dom, re.S)
    # a task picked in the address gets its timeline
    dom, console = _chromium(tmp_path, out.as_uri() + "#task=3", "--dump-dom")
    assert console == []
    name = data["tasks"][3][col["name"]]
    assert f"<h2>Task: {name}</h2>" in dom


class _Page:
    """Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
    it reads commands on fd 3 and answers on fd 4, each a JSON message ending in NUL): values
    from the page, what it logged, and screenshots of one element each (``--screenshot`` draws
    a scrolled page blank)."""

    LOGGED = ("Runtime.consoleAPICalled", "Runtime.exceptionThrown", "Log.entryAdded")

    def __init__(self, tmp_path: Path, width: int = 1400, height: int = 2000):
        to_it, self._w = os.pipe()  # commands: Chromium reads them on its fd 3
        self._r, from_it = os.pipe()  # answers and events: it writes them on its fd 4

        def fds():  # in the child: its ends on 3 and 4, inheritable (through fds above both)
            os.dup2(to_it, 1000), os.dup2(from_it, 1001), os.dup2(1000, 3), os.dup2(1001, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--hide-scrollbars", "--remote-debugging-pipe",
             f"--user-data-dir={tmp_path / 'chromium-cdp'}", "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_it), os.close(from_it)
        self._n, self._buf, self._loads, self._session, self.logged = 0, b"", 0, None, []
        try:
            target = self.send("Target.createTarget", url="about:blank")["targetId"]
            self._session = self.send("Target.attachToTarget", targetId=target,
                                      flatten=True)["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                self.send(domain + ".enable")
            self.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                      deviceScaleFactor=1, mobile=False)
        except BaseException:
            self.close()
            raise

    def _message(self) -> dict:
        while b"\0" not in self._buf:
            ready, _, _ = select.select([self._r], [], [], 60)
            chunk = os.read(self._r, 1 << 20) if ready else b""
            assert chunk, "Chromium stopped answering"
            self._buf += chunk
        text, self._buf = self._buf.split(b"\0", 1)
        msg = json.loads(text)
        if msg.get("method") in self.LOGGED:
            self.logged.append(msg["params"])
        self._loads += msg.get("method") == "Page.loadEventFired"
        return msg

    def send(self, method: str, **params) -> dict:
        self._n += 1
        msg = {"id": self._n, "method": method, "params": params}
        if self._session:
            msg["sessionId"] = self._session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        while True:
            answer = self._message()
            if answer.get("id") == self._n:
                assert "error" not in answer, answer
                return answer["result"]

    def open(self, url: str) -> None:
        for u in ("about:blank", url):  # a fresh document, even when only the hash differs
            loads = self._loads
            self.send("Page.navigate", url=u)
            while self._loads == loads:
                self._message()

    def value(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def screenshot(self, selector: str, path: Path) -> Path:
        """The element (and 8 pixels round it) as a PNG, wherever the page is scrolled."""
        x, y, w, h = self.value(
            f"(function () {{ var r = document.querySelector({json.dumps(selector)})"
            ".getBoundingClientRect(); return [r.left + scrollX, r.top + scrollY, r.width, "
            "r.height]; })()")
        shot = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                         clip={"x": max(x - 8, 0), "y": max(y - 8, 0), "width": w + 16,
                               "height": min(h + 16, 4000), "scale": 1})
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (AssertionError, OSError):
            self.proc.kill()
        self.proc.wait(30)
        os.close(self._w), os.close(self._r)


# texts in the page's charts that overlap another text of the same chart
_OVERLAPS = """(function () {
  var out = [];
  document.querySelectorAll("svg").forEach(function (svg) {
    var boxes = Array.prototype.map.call(svg.querySelectorAll("text"), function (t) {
      return [t.textContent, t.getBoundingClientRect()]; });
    boxes.forEach(function (a, i) { boxes.slice(i + 1).forEach(function (b) {
      var p = a[1], q = b[1];
      if (p.width && q.width && p.left < q.right - 1 && q.left < p.right - 1 &&
          p.top < q.bottom - 1 && q.top < p.bottom - 1) out.push(a[0] + " / " + b[0]);
    }); });
  });
  return out;
})()"""


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)")
def test_the_reports_views_look_right_in_chromium(tmp_path):
    """The fleet view, a task and the table in a 1400 x 2000 window: what a person would
    check by eye, checked in the DOM, and a screenshot of each saved for them to look at
    (SCREENSHOTS; the paths are printed at the end of the run)."""
    out = tmp_path / "r.html"
    assert CliRunner().invoke(main, ["report", str(SAMPLES), "--html", str(out), "--db",
                                     str(tmp_path / "db.duckdb")]).exit_code == 0
    data = _data_of(out.read_text())
    col = {c: i for i, c in enumerate(data["task_columns"])}
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    (SCREENSHOTS.parent / ".gitignore").write_text("*\n")
    page = _Page(tmp_path)
    try:
        # (a) the fleet: the bar as wide as its section; the latency strip with one axis title
        page.open(out.as_uri())
        bar, fleet = page.value("[document.getElementById('fleet-bar').getBoundingClientRect()"
                               ".width, document.getElementById('fleet').clientWidth]")
        assert bar == pytest.approx(fleet, abs=1)
        texts = page.value("Array.prototype.map.call(document.querySelectorAll("
                           "'svg.latency text'), function (t) { return t.textContent; })")
        assert [t for t in texts if "log scale" in t] == ["task duration (log scale)"]
        assert {"100 ms", "200 ms", "500 ms", "1 s"} <= set(texts)  # ticks, not the ends
        assert page.value("document.querySelectorAll('#help table.help tbody tr').length") == \
            len(data["help_rows"]) == 3
        assert page.value(_OVERLAPS) == []
        shots = [page.screenshot("#fleet", SCREENSHOTS / "fleet.png")]

        # (b) a task: its time axis from "0" in one unit, each counter's values in its unit
        page.open(out.as_uri() + "#task=3")
        ticks = page.value("Array.prototype.map.call(document.querySelectorAll("
                           "'#gantt text.tick'), function (t) { return t.textContent; })")
        assert ticks[0] == "0" and len(ticks) >= 4
        assert len({re.fullmatch(r"[\d.]+ (s|ms|µs)", t).group(1) for t in ticks[1:]}) == 1
        lanes = page.value("Array.prototype.map.call(document.querySelectorAll("
                           "'#gantt text.lane-stats, #gantt text.scale'), "
                           "function (t) { return t.textContent; })")
        counters = data["timelines"]["3"]["counters"]
        assert len(lanes) == 3 * len(counters) >= 12  # mean and peak, the scale's top and 0
        for text in lanes:  # every value with its unit
            assert text == "0" or re.fullmatch(r"(mean \S+ \S* ?· peak \S+ ?\S*|[\d.]+ ?\S+)",
                                               text), text
            assert text == "0" or re.search(r"\d(%| threads?\b)", text), text
        assert page.value(_OVERLAPS) == []
        shots.append(page.screenshot("#timeline", SCREENSHOTS / "task-3.png"))

        # (c) the table, opened from a link to it: one line of evidence per row, "+N more"
        page.open(out.as_uri() + "#table")
        top, scrolled = page.value("[document.getElementById('table').getBoundingClientRect()"
                                   ".top, scrollY]")
        assert scrolled > 0 and 0 <= top < 2000 - 200  # scrolled to it (as far as it goes)
        rows = page.value("""Array.prototype.map.call(document.querySelectorAll('#tasks tbody tr'),
          function (tr) {
            var ev = tr.querySelectorAll('td.ev .ev1'), more = tr.querySelector('td.ev .evmore');
            return [+tr.dataset.task, ev.length, ev[0].getClientRects().length,
                    ev[0].getBoundingClientRect().height, more ? more.textContent : null];
          })""")
        assert len(rows) == len(data["tasks"])
        for i, lines, boxes, height, more in rows:
            rest = data["tasks"][i][col["more_evidence"]]
            assert lines == boxes == 1 and height < 24  # one line, however long the evidence
            assert more == (f"+{len(rest)} more" if rest else None)
        shots.append(page.screenshot("#table", SCREENSHOTS / "table.png"))
        assert page.logged == []  # no errors, no messages at all
    finally:
        page.close()
    for shot in shots:
        assert shot.stat().st_size > 10_000


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)")
def test_hostile_names_stay_text_in_the_browser(tmp_path):
    out = tmp_path / "r.html"
    assert CliRunner().invoke(main, ["report", str(_hostile_dir(tmp_path)), "--html",
                                     str(out)]).exit_code == 0
    dom, console = _chromium(tmp_path, out.as_uri(), "--dump-dom")
    assert not [c for c in console if "xss" in c], console  # neither payload ran
    assert console == []
    assert "&lt;/script&gt;&lt;script&gt;console.error('xss-script')" in dom  # shown as text
    assert "<img" not in dom and "<script>console" not in dom


# ---- terminal and Markdown ----------------------------------------------------------------------
def test_terminal_shows_the_slowest_and_the_typical_task_as_timelines(tmp_path):
    result = CliRunner().invoke(main, ["analyze", str(SAMPLES), "--db",
                                       str(tmp_path / "db.duckdb")])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "\x1b" not in out  # not a terminal: plain
    tasks = json.loads(CliRunner().invoke(main, [
        "analyze", str(SAMPLES), "--format", "json", "--db", str(tmp_path / "db.duckdb")]).output
    )["tasks"]
    slowest = max(tasks, key=lambda t: t["duration_s"])
    assert re.search(rf"slowest task: {slowest['name']} \({slowest['lane']}, "
                     rf"{slowest['duration_s']:.3f} s, {slowest['bottleneck']}", out)
    counts = collections.Counter(t["bottleneck"] for t in tasks)
    common, k = counts.most_common(1)[0]
    assert f"most typical task ({common}-bound, like {k} of {len(tasks)})" in out
    first = slowest["critical_path"][1]  # its first step after the task's own start
    assert re.search(rf"{re.escape(first['name'])} \[{first['stage']}\]\s+{first['class']}\s+"
                     rf"\|[CIQMG ]*{first['class'][0].upper()}+", out)
    assert out.index("slowest task:") < out.index("Tasks (slowest")


def test_colour_only_where_the_terminal_takes_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM")}
    db = str(tmp_path / "db.duckdb")

    def run(**extra):
        return subprocess.run([sys.executable, "-m", "agentscope.cli", "analyze", str(SAMPLES),
                               "--db", db],
                              capture_output=True, text=True, env={**env, **extra}, timeout=120)

    plain = run()  # a pipe
    assert plain.returncode == 0 and "\x1b[" not in plain.stdout
    forced = run(FORCE_COLOR="1", TERM="xterm-256color")
    assert re.search(r"\x1b\[[0-9;]*3[0-9]m|\x1b\[38;", forced.stdout)  # colours
    no_color = run(FORCE_COLOR="1", TERM="xterm-256color", NO_COLOR="1")
    assert not re.search(r"\x1b\[[0-9;]*3[0-9]m|\x1b\[38;", no_color.stdout)
    assert re.search(r"[\w-]+ \[(context|tool|inference|queue|memory)\]", no_color.stdout)


def test_markdown_has_the_summary_and_the_timelines(tmp_path):
    result = CliRunner().invoke(main, ["analyze", str(SAMPLES), "--format", "markdown", "--db",
                                       str(tmp_path / "db.duckdb")])
    assert result.exit_code == 0
    md = result.output
    assert md.startswith("## agentscope: 50 tasks")
    assert "**slowest task**: " in md and md.count("```") == 4
    assert re.search(r"[\w-]+ \[(context|tool|inference|queue|memory)\]\s+(cpu|io|queue|memory)"
                     r"\s+\|[CIQMG ]*[CIQM]+", md)


def test_text_timeline_rows():
    class Seg:
        def __init__(self, sid, name, stage, a, b, cls):
            self.span_id, self.name, self.stage = sid, name, stage
            self.start_ns, self.end_ns, self.cls = a, b, cls

    class Task:
        start_ns, duration_ns = 0, 1000
        segments = [Seg("t", "task", "task", 0, 5, "cpu"), Seg("a", "tool", "tool", 5, 400, "io"),
                    Seg("a", "tool", "tool", 400, 600, "io"),
                    Seg("b", "llm", "inference", 600, 990, "gpu"),
                    Seg("t", "task", "task", 990, 1000, "cpu")]

    rows = path_rows(Task())
    # the tool's two sections merged; the task's last 1 % kept, its first 0.5 % left out
    assert rows[0] == ("tool", "tool", "io", 5e-9, 6e-7)
    assert [r[2] for r in rows] == ["io", "gpu", "cpu", ""]
    assert rows[-1][0] == "(1 shorter section, 0.005 µs in all)" and rows[-1][3] is None
    rows = path_rows(Task(), max_rows=2)
    assert [r[0] for r in rows] == ["tool", "llm", "(2 shorter sections, 0.015 µs in all)"]
    assert bar(0.25, 0.5, 1.0, 8, "C") == "  CC    "
    assert bar(0.0, 0.0001, 1.0, 8, "C") == "C       "  # at least one cell


def test_typical_task_is_nearest_the_median_of_the_commonest_class():
    class T:
        def __init__(self, b, d):
            self.bottleneck, self.duration_ns = b, d

    tasks = [T("cpu", 10), T("cpu", 50), T("cpu", 90), T("io", 5), T("cpu", 48)]
    assert typical_tasks(tasks) == {"cpu": 1, "io": 3}


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)")
def test_a_large_table_shows_a_page_of_the_slowest_first(tmp_path):
    d = tmp_path / "traces"
    d.mkdir()
    records = []
    for n in range(300):
        trace, root = f"{n + 1:032x}", f"{n + 1:016x}"
        records.append(_span(trace, root, None, f"task-{n}", "task", n * 1000, n * 1000 + 10 + n))
        records.append(_span(trace, f"{n + 1:08x}{1:08x}", root, "tool", "tool", n * 1000 + 1,
                             n * 1000 + 5 + n, cpu_ms=1))
    (d / "spans-h-1-1.jsonl").write_text("".join(spanfile.encode(r) for r in records))
    out = tmp_path / "r.html"
    assert CliRunner().invoke(main, ["report", str(d), "--html", str(out)]).exit_code == 0
    dom, console = _chromium(tmp_path, out.as_uri(), "--dump-dom")
    assert console == []
    rows = re.findall(r'<tr data-task="(\d+)">', dom)
    assert len(rows) == 200  # a page; the rest behind "show more"
    data = _data_of(out.read_text())
    names = [data["tasks"][int(i)][0] for i in rows]
    assert names[:3] == ["task-299", "task-298", "task-297"]  # slowest first
    assert "300 of 300 tasks (showing 200)" in dom and 'id="more"' in dom


def test_report_of_an_empty_directory_says_why(tmp_path):
    out = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", str(tmp_path), "--html", str(out)])
    assert result.exit_code == 1  # no task: exit 1 with the reason, the file written all the same
    assert "no trace files" in result.output  # stderr, mixed in by CliRunner
    assert f"no tasks in {tmp_path}" in result.output
    data = _data_of(out.read_text())
    assert data["tasks"] == [] and data["timelines"] == {}


def test_script_json_writes_non_finite_numbers_as_null():
    assert json.loads(html_report.script_json({"a": [1.0, float("nan")], "b": float("inf")})) \
        == {"a": [1.0, None], "b": None}


def test_a_timeline_draws_the_counters_of_the_host_that_held_the_path(tmp_path):
    from agentscope.formats import samplefile
    from agentscope.records import SampleRecord

    d = tmp_path / "traces"
    d.mkdir()
    trace = "c" * 32

    def on(host, *a, **kw):
        return _span(trace, *a, **kw)._replace(host=host)

    records = [on("agent-host", "1" * 16, None, "task", "task", 0, 1000),
               on("agent-host", "2" * 16, "1" * 16, "plan", "context", 0, 100, cpu_ms=90),
               on("gpu-host", "3" * 16, "1" * 16, "generate", "inference", 100, 1000, cpu_ms=5)]
    (d / "spans-h-1-1.jsonl").write_text("".join(spanfile.encode(r) for r in records))
    samples = [SampleRecord(T0 + k * 100 * MS, host, None, "host.cpu", None,
                            "system.cpu.utilization", value)
               for k in range(-3, 12) for host, value in (("agent-host", 0.1), ("gpu-host", 0.9))]
    (d / "samples-h-1-1-collector.jsonl").write_text(
        "".join(samplefile.encode(r) for r in samples))
    out = tmp_path / "r.html"
    assert CliRunner().invoke(main, ["report", str(d), "--html", str(out)]).exit_code == 0
    tl = _data_of(out.read_text())["timelines"]["0"]
    assert tl["host"] == "gpu-host"  # 0.9 s of the path there, 0.1 s on the agent's host
    cpu = next(c for c in tl["counters"] if c["metric"] == "system.cpu.utilization")
    assert {v for _, v in cpu["points"]} == {0.9}
    # of the samples before the task only the last is kept: the value the task started with
    assert cpu["points"][0][0] <= 0 < cpu["points"][1][0]


def test_markdown_and_terminal_keep_hostile_names_inert(tmp_path):
    """Names now come from other tools' traces: none may break out of a table row or a code
    block, start a heading, embed HTML or reach a terminal as an escape sequence."""
    d = tmp_path / "t"
    d.mkdir()
    trace = "c" * 32
    bad = "x\n# heading ``` <img src=x onerror=alert(1)> [a](javascript:1) \x1b[31mred\u202e|"
    records = [_span(trace, "1" * 16, None, bad, "task", 0, 100),
               _span(trace, "2" * 16, "1" * 16, bad + " tool", "tool", 5, 95, cpu_ms=80)]
    (d / "spans-h-1-1.jsonl").write_text("".join(spanfile.encode(r) for r in records))
    md = CliRunner().invoke(main, ["analyze", str(d), "--format", "markdown"]).stdout
    assert "\x1b" not in md and "\u202e" not in md
    assert not any(line.startswith("# heading") for line in md.splitlines())
    assert md.count("```") == 2  # the one timeline's fence, opened and closed: nothing else
    head, code, tail = md.split("```")
    assert "<img" in code  # inside the code block it is shown, not rendered
    for text in (head, tail):  # outside, escaped
        assert not re.search(r"(?<!\\)<img", text) and not re.search(r"(?<!\\)\]\(", text)
    rows = [line for line in md.splitlines() if line.startswith("| ")]
    assert all(line.count(" | ") == rows[0].count(" | ") for line in rows[:2])  # one row each
    term = CliRunner().invoke(main, ["analyze", str(d)]).stdout
    assert "\x1b" not in term and "\u202e" not in term and "# heading" in term  # as text


def test_the_share_bar_is_always_twenty_letters():
    import random

    from agentscope.exporters.table import _bar

    def letters(shares, assumed=None):
        return re.sub(r"\[[^]]*\]", "", _bar(shares, assumed=assumed))

    # each class rounded alone gave 16 + 3 + 0 = 19 letters here
    assert letters({"queue": 0.8247, "io": 0.1674, "cpu": 0.0079}) == "I" * 3 + "Q" * 17
    rng = random.Random(3)
    for _ in range(500):
        w = [rng.random() ** 3 for _ in range(6)]
        shares = dict(zip(("gpu", "cpu", "memory", "io", "queue", "untraced"),
                          (x / sum(w) for x in w)))
        assert len(letters(shares, assumed={"io": shares["io"] / 2})) == 20
    assert letters({c: 0.0 for c in ("gpu", "cpu")}) == ""  # a task of no time: no bar
