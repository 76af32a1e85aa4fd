"""Classes taken from a stage label or an assumption are shown apart from measured ones, in
every output (the issue: "assumed classes shown as measured").

A span that reported no resource accounting (a foreign tracer's, or one with ``cpu_ms`` left
out) takes its class from its stage label: a ``reload-kv`` span of stage ``memory`` is
*assumed* to be ``memory``, with the basis ``label`` ("no resource accounting on this span;
memory assumed from its stage 'memory'"). Every output must mark that memory share (and a
bottleneck resting mostly on it) as assumed, count it apart, and leave the measured shares
unmarked; an analysis measured throughout marks nothing.

(An inference at a local model server that reported no timing, with no GPU or model-server
counters, is no longer an assumed ``gpu``: it waits on its model endpoint, ``io``, measured
where the span has accounting; GPU counters busy meanwhile make it ``gpu``, measured.)"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

import agentscope
from agentscope.cli import main
from agentscope.exporters import grafana, html_report, otlp_traces, prometheus
from agentscope.exporters.table import markdown
from agentscope.formats import spanfile
from agentscope.records import SpanRecord

T0 = 1_700_000_000_000_000_000
MS = 1_000_000
CLASSES = ("gpu", "cpu", "memory", "io", "queue", "untraced")
LEGEND = "assumed from a stage label, not measured"
CHAT, BUILD = "a" * 32, "c" * 32  # the task with the assumed memory section, a measured one
# the fleet's shares of the two tasks (1 s each): memory (reload-kv, all assumed) 0.7 / 2; cpu
# (plan 0.297 + compile 0.594 + ask-api 0.004) / 2
MEM_FLEET, CPU_FLEET = 0.35, 0.4475


def _span(trace, span_id, parent, name, stage, start_ms, end_ms, attrs=None, cpu_ms=None):
    cpu = None if cpu_ms is None else cpu_ms * MS
    return SpanRecord(trace, span_id, parent, name, stage, "internal", T0 + start_ms * MS,
                      T0 + end_ms * MS, "unset", None, "svc", "h", 1, 1, cpu, 0, 0, 0, 0, 0, 0, 0,
                      attrs or {})


def _write(d: Path, records: list) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "spans-h-1-1.jsonl").write_text("".join(spanfile.encode(r) for r in records))
    return d


def _measured_task(trace=BUILD, name="build-task"):
    """A task measured throughout: a compile on-CPU, then a remote model API call (io)."""
    return [_span(trace, "4" * 16, None, name, "task", 0, 1000, {"agentscope.lane": "batch"},
                  cpu_ms=0),
            _span(trace, "5" * 16, "4" * 16, "compile", "tool", 0, 600, cpu_ms=594),
            _span(trace, "6" * 16, "4" * 16, "ask-api", "inference", 600, 1000,
                  {"server.address": "api.example.com"}, cpu_ms=4)]


def _assumed_dir(d: Path, name: str = "chat-task", tool: str = "plan") -> Path:
    """chat-task: 0.3 s of measured CPU (plan: 297 ms on-CPU, 3 ms off-CPU: io), then 0.7 s
    of reload-kv, a memory stage with no resource accounting (all of it assumed memory)."""
    return _write(d, [
        _span(CHAT, "1" * 16, None, name, "task", 0, 1000, {"agentscope.lane": "online"},
              cpu_ms=0),
        _span(CHAT, "2" * 16, "1" * 16, tool, "context", 0, 300, cpu_ms=297),
        _span(CHAT, "3" * 16, "1" * 16, "reload-kv", "memory", 300, 1000),
        *_measured_task()])


def _inference_dir(d: Path) -> Path:
    """chat-task as it was: plan, then generate, a measured inference (7 ms on-CPU) at a
    local model server with no timing and no counters."""
    return _write(d, [
        _span(CHAT, "1" * 16, None, "chat-task", "task", 0, 1000, {"agentscope.lane": "online"},
              cpu_ms=0),
        _span(CHAT, "2" * 16, "1" * 16, "plan", "context", 0, 300, cpu_ms=297),
        _span(CHAT, "3" * 16, "1" * 16, "generate", "inference", 300, 1000,
              {"server.address": "localhost"}, cpu_ms=7),
        *_measured_task()])


@pytest.fixture(scope="module")
def assumed(tmp_path_factory):
    d = _assumed_dir(tmp_path_factory.mktemp("assumed") / "traces")
    with agentscope.analyze(d, db=":memory:") as a:
        yield a


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    d = _write(tmp_path_factory.mktemp("measured") / "traces", _measured_task())
    with agentscope.analyze(d, db=":memory:") as a:
        yield a


def _task(analysis, trace_id):
    return next(t for t in analysis.task_results if t.trace_id == trace_id)


# ---- the analysis ------------------------------------------------------------------------------
def test_the_assumed_memory_is_counted_apart_from_the_measured_share(assumed):
    chat, build = _task(assumed, CHAT), _task(assumed, BUILD)
    assert chat.bottleneck == "memory"
    # reload-kv (0.7 s of 1 s) is memory only by its stage label; plan's CPU (297 ms) and
    # its 3 ms off-CPU (io) were measured
    assert chat.shares["memory"] == pytest.approx(0.7, abs=1e-6)
    assert chat.assumed["memory"] == pytest.approx(chat.shares["memory"], abs=1e-12)
    assert all(chat.assumed[c] == 0 for c in CLASSES if c != "memory")
    assert chat.shares["cpu"] == pytest.approx(0.297, abs=1e-6)
    assert chat.shares["io"] == pytest.approx(0.003, abs=1e-6)
    reload_kv = next(s for s in chat.segments if s.name == "reload-kv")
    assert reload_kv.cls == "memory" and reload_kv.basis == "label"
    assert reload_kv.evidence == ("no resource accounting on this span; memory assumed from "
                                  "its stage 'memory'")
    assert set(chat.assumed) == set(chat.shares)
    assert all(v == 0 for v in build.assumed.values())
    from agentscope.analyzers.verdict import bottleneck_assumed, section_assumed

    assert bottleneck_assumed(chat) and not bottleneck_assumed(build)
    marked = {s.name: section_assumed(s) for s in chat.segments}
    assert marked["reload-kv"] and not marked["plan"]
    s = assumed.summary
    assert s.assumed_share_of_critical_path["memory"] == pytest.approx(MEM_FLEET, abs=1e-4)
    assert s.share_of_critical_path["memory"] == s.assumed_share_of_critical_path["memory"]
    assert all(s.assumed_share_of_critical_path[c] == 0 for c in CLASSES if c != "memory")
    assert s.share_of_critical_path["cpu"] == pytest.approx(CPU_FLEET, abs=1e-6)
    assert s.assumed_bottlenecks == {"memory": 1} and s.bottlenecks == {"memory": 1, "cpu": 1}
    # the measured share leaves the label-based section out (as before)
    assert s.measured_share == pytest.approx(0.65, abs=1e-4)
    # the seconds by stage: the assumed ones are the memory stage's
    by_stage = assumed.breakdown("stage", assumed=True)
    assert by_stage["memory"]["memory"] == pytest.approx(0.7, abs=1e-6)
    assert by_stage["context"]["cpu"] == 0
    assert not any(by_stage["inference"].values())  # ask-api: measured io


def test_a_span_without_accounting_is_all_assumed(tmp_path):
    d = _write(tmp_path / "t", [
        _span(CHAT, "1" * 16, None, "chat-task", "task", 0, 1000),
        _span(CHAT, "3" * 16, "1" * 16, "reload-kv", "memory", 0, 1000)])
    with agentscope.analyze(d, db=":memory:") as a:
        t = a.task_results[0]
        assert t.bottleneck == "memory" and t.shares["memory"] == pytest.approx(1.0)
        assert t.assumed["memory"] == pytest.approx(1.0)
        assert a.summary.assumed_bottlenecks == {"memory": 1}
        assert a.tasks.loc[0, "bottleneck_assumed"] and a.tasks.loc[0, "assumed_memory"] == 1.0


def test_an_inference_at_a_local_server_waits_on_its_endpoint_not_an_assumed_gpu(tmp_path):
    """No server timing, GPU or model-server counters: a local model server is waited on
    like any other endpoint (io); measured where the span has accounting, else by label."""
    with agentscope.analyze(_inference_dir(tmp_path / "measured"), db=":memory:") as a:
        chat = _task(a, CHAT)
        generate = next(s for s in chat.segments if s.name == "generate")
        assert generate.cls == "io" and generate.basis == "measured"
        assert "waiting on the model endpoint localhost" in generate.evidence
        assert chat.bottleneck == "io" and chat.shares["io"] == pytest.approx(0.696, abs=1e-6)
        assert chat.shares["gpu"] == 0 and not any(chat.assumed.values())
        assert a.summary.assumed_bottlenecks == {}
    d = _write(tmp_path / "label", [
        _span(CHAT, "1" * 16, None, "chat-task", "task", 0, 1000),
        _span(CHAT, "3" * 16, "1" * 16, "generate", "inference", 0, 1000,
              {"server.address": "localhost"})])
    with agentscope.analyze(d, db=":memory:") as a:
        t = a.task_results[0]
        generate = next(s for s in t.segments if s.name == "generate")
        assert generate.cls == "io" and generate.basis == "label"
        assert ("waiting on the model endpoint localhost assumed from its stage 'inference'"
                in generate.evidence)
        assert t.bottleneck == "io" and t.assumed["io"] == pytest.approx(1.0)
        assert t.shares["gpu"] == 0 and all(t.assumed[c] == 0 for c in CLASSES if c != "io")
        assert a.summary.assumed_bottlenecks == {"io": 1}


def test_a_measured_analysis_assumes_nothing(measured):
    t = measured.task_results[0]
    assert t.bottleneck == "cpu" and set(t.assumed) == set(CLASSES)
    assert all(v == 0 for v in t.assumed.values())
    assert all(v == 0 for v in measured.summary.assumed_share_of_critical_path.values())
    assert measured.summary.assumed_bottlenecks == {}
    assert not measured.tasks["bottleneck_assumed"].any()


def test_gpu_counters_make_the_gpu_measured(tmp_path):
    """A measured inference at a local model server: without counters it waits on its
    endpoint (io); with GPU counters busy during it, the counters make it gpu, measured, and
    nothing is assumed."""
    from agentscope.formats import samplefile
    from agentscope.records import SampleRecord

    d = _inference_dir(tmp_path / "t")
    with agentscope.analyze(d, db=":memory:") as a:
        generate = next(s for s in _task(a, CHAT).segments if s.name == "generate")
        assert generate.cls == "io" and generate.basis == "measured"
    util = [0.0, 0.0, 0.0, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]  # every 0.1 s
    (d / "samples-h-2-1-collector.jsonl").write_text("".join(
        samplefile.encode(SampleRecord(T0 + k * 100 * MS, "h", None, "gpu.nvidia", "gpu0",
                                       "hw.gpu.utilization", v)) for k, v in enumerate(util)))
    with agentscope.analyze(d, db=":memory:") as a:
        chat = _task(a, CHAT)
        generate = next(s for s in chat.segments if s.name == "generate")
        assert generate.cls == "gpu" and generate.basis == "measured"
        assert "GPU busy 90%" in generate.evidence
        assert chat.bottleneck == "gpu" and chat.shares["gpu"] == pytest.approx(0.7, abs=1e-6)
        assert not any(chat.assumed.values())
        assert a.summary.assumed_bottlenecks == {}
        assert "*" not in markdown(a).replace("**", "")


# ---- the JSON report ---------------------------------------------------------------------------
def test_json_report_gives_the_assumed_shares_apart(assumed, measured):
    doc = json.loads(assumed.to_json())
    tasks = {t["trace_id"]: t for t in doc["tasks"]}
    chat, build = tasks[CHAT], tasks[BUILD]
    for t in (chat, build):  # every key of before, unchanged in meaning
        assert {"trace_id", "name", "lane", "service", "start", "duration_s", "bottleneck",
                "confidence", "measured_share", "shares", "evidence", "spans",
                "critical_path"} <= set(t)
        assert set(t["assumed_shares"]) == set(t["shares"]) == set(CLASSES)
        assert abs(sum(t["shares"].values()) - 1) < 1e-5
    assert chat["bottleneck"] == "memory" and chat["bottleneck_assumed"] is True
    assert chat["assumed_shares"]["memory"] == chat["shares"]["memory"] == pytest.approx(0.7)
    assert chat["assumed_shares"]["cpu"] == 0 and chat["shares"]["cpu"] > 0
    assert build["bottleneck_assumed"] is False
    assert not any(build["assumed_shares"].values())
    basis = {s["name"]: s["basis"] for s in chat["critical_path"]}
    assert basis["reload-kv"] == "label" and basis["plan"] == "measured"
    s = doc["summary"]
    assert s["assumed_share_of_critical_path"]["memory"] == pytest.approx(MEM_FLEET, abs=1e-4)
    assert s["assumed_bottlenecks"] == {"memory": 1}
    assert {"share_of_critical_path", "measured_share", "evidence_basis", "bottlenecks"} <= set(s)
    plain = json.loads(measured.to_json())
    assert plain["summary"]["assumed_bottlenecks"] == {}
    assert not any(plain["summary"]["assumed_share_of_critical_path"].values())
    assert plain["tasks"][0]["bottleneck_assumed"] is False


# ---- terminal and Markdown ---------------------------------------------------------------------
def _terminal(directory: Path) -> str:
    result = CliRunner().invoke(main, ["analyze", str(directory), "--db", ":memory:"])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_terminal_marks_the_assumed_memory_and_nothing_measured(tmp_path):
    out = _terminal(_assumed_dir(tmp_path / "t"))
    assert "\x1b" not in out
    fleet = next(line for line in out.splitlines() if "memory*, 1 cpu" in line)
    cells = [c.strip() for c in fleet.split("│")[1:-1]]
    gpu, cpu, memory, io = cells[0], cells[1], cells[2], cells[3]
    assert memory == f"{MEM_FLEET:.1%}*"  # assumed: marked
    assert cpu == f"{CPU_FLEET:.1%}" and io.endswith("%") and io != "0.0%"  # measured: not
    assert gpu == "0.0%"
    assert cells[-1] == "1 memory*, 1 cpu"  # the bottleneck counts, the assumed one marked
    assert f"* {LEGEND} (memory {MEM_FLEET:.1%} of {MEM_FLEET:.1%})" in out
    # the timeline: the memory section's class marked, its bar in lower case; plan's not
    assert re.search(r"reload-kv \[memory\]\s+memory\*\s+\|\s*m+\|", out)
    assert re.search(r"plan \[context\]\s+cpu\s+\|C+\s*\|", out)
    assert re.search(r"chat-task \(online, 1\.000 s, memory\*, confidence", out)
    # the task table: its bottleneck marked, the assumed part of its bar in lower case
    row = next(line for line in out.splitlines() if line.startswith("│ chat-task"))
    assert "memory*" in row and re.search(r"C{6}m{13,14}", row)
    assert "reload-kv 70% memory*" in row
    row = next(line for line in out.splitlines() if line.startswith("│ build-task"))
    assert "*" not in row and re.search(r"\bcpu\b", row) and not re.search(r"[a-z]{2}[CI]", row)
    assert f"(lower case: {LEGEND})" in out


def test_terminal_marks_nothing_when_all_is_measured(tmp_path):
    out = _terminal(_write(tmp_path / "t", _measured_task()))
    assert "*" not in out and LEGEND not in out and "lower case" not in out


def test_markdown_marks_the_assumed_memory_and_nothing_measured(assumed, measured):
    md = markdown(assumed)
    lines = md.splitlines()
    fleet = lines[lines.index("| " + " | ".join(CLASSES) + " |") + 2]
    # escaped: shown as a star, not taken for emphasis
    assert fleet.startswith(f"| 0.0% | {CPU_FLEET:.1%} | {MEM_FLEET:.1%}\\* |")
    assert (f"\\* {LEGEND} (memory {MEM_FLEET:.1%} of {MEM_FLEET:.1%}); in the timelines, "
            "its bar in lower case.") in md
    assert "Bottlenecks: 1 memory\\*, 1 cpu" in md
    row = next(line for line in lines if line.startswith("| chat-task"))
    assert "| **memory**\\* |" in row
    row = next(line for line in lines if line.startswith("| build-task"))
    assert "| **cpu** |" in row and "\\*" not in row
    code = md.split("```")[1]
    assert re.search(r"reload-kv \[memory\]\s+memory\*\s+\|\s*m+\|", code)
    assert re.search(r"plan \[context\]\s+cpu\s+\|C+\s*\|", code)
    plain = markdown(measured)
    assert "*" not in plain.replace("**", "") and LEGEND not in plain


def test_hostile_names_stay_inert_beside_the_mark(tmp_path):
    bad = "x\n# heading ``` <img src=x onerror=alert(1)> \x1b[31mred\u202e|*"
    d = _assumed_dir(tmp_path / "t", name=bad, tool=bad + " tool")
    with agentscope.analyze(d, db=":memory:") as a:
        md = markdown(a)
    assert "\x1b" not in md and "\u202e" not in md
    assert not any(line.startswith("# heading") for line in md.splitlines())
    assert md.count("```") == 4  # two timelines, each fenced once
    row = next(line for line in md.splitlines() if line.startswith("| x \\# heading"))
    assert "| **memory**\\* |" in row and "red\\|\\*" in row  # the name's star escaped too
    term = _terminal(d)
    assert "\x1b" not in term and "\u202e" not in term and "memory*" in term


# ---- HTML --------------------------------------------------------------------------------------
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(n)), None)


def test_html_data_carries_the_assumed_parts(assumed, measured):
    data = html_report.build(assumed)
    col = {c: i for i, c in enumerate(data["task_columns"])}
    rows = {r[col["trace_id"]]: r for r in data["tasks"]}
    chat, build = rows[CHAT], rows[BUILD]
    memory = CLASSES.index("memory")
    assert chat[col["assumed_shares"]][memory] == chat[col["shares"]][memory] > 0
    assert chat[col["bottleneck_assumed"]] is True and build[col["bottleneck_assumed"]] is False
    assert not any(build[col["assumed_shares"]])
    i = data["tasks"].index(chat)
    marks = {p[4]: p[8] for p in data["timelines"][str(i)]["path"]}
    assert marks["reload-kv"] is True and marks["plan"] is False
    assert data["assumed"] == {"legend": LEGEND, "mark": "*", "any": True}
    assert data["summary"]["assumed_share_of_critical_path"]["memory"] > 0
    assert data["assumed_by_stage"]["memory"]["memory"] == pytest.approx(0.7, abs=1e-6)
    assert data["assumed_by_stage"]["context"]["cpu"] == 0
    plain = html_report.build(measured)
    assert plain["assumed"]["any"] is False
    assert not any(p[8] for tl in plain["timelines"].values() for p in tl["path"])


def _dom(tmp_path: Path, directory: Path, address: str = "") -> str:
    out = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", str(directory), "--html", str(out), "--db",
                                       ":memory:"])
    assert result.exit_code == 0, result.output
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={tmp_path / 'chromium-profile'}", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=10000", "--dump-dom", out.as_uri() + address],
        check=False, capture_output=True, text=True, timeout=120)
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console
    assert re.search(r'data-rendered-ms="\d+"', proc.stdout), "the script did not finish"
    # what the page shows: without our script, style and data
    return re.sub(r"<(script|style)\b.*?</\1>", "", proc.stdout, flags=re.DOTALL)


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)")
def test_html_hatches_the_assumed_parts_in_headless_chromium(tmp_path):
    d = _assumed_dir(tmp_path / "t")
    with agentscope.analyze(d, db=":memory:") as a:
        chat = next(i for i, t in enumerate(a.task_results) if t.trace_id == CHAT)
    dom = _dom(tmp_path, d, f"#task={chat}")
    hatched = re.findall(r'<rect[^>]*fill="url\(#as-hatch\)"[^>]*class="assumed"', dom)
    # the fleet bar, by stage, by lane, the task's row in the table, its timeline (the path's
    # own row and the span's row): at least one each
    assert len(hatched) >= 6
    assert 'id="as-hatch"' in dom  # the pattern they fill with
    assert f"hatched, *: {LEGEND}" in dom  # the legend
    assert f"* and hatched: {LEGEND}." in dom
    assert f"memory {MEM_FLEET:.1%}* ({MEM_FLEET:.1%} assumed)" in dom
    assert re.search(r'<td class="cls assumed"[^>]*>memory\*</td>', dom)  # the table's bottleneck
    assert re.search(r"bottleneck memory\* \(" + LEGEND, dom)  # the timeline's heading
    assert re.search(r'<td class="cls"[^>]*>cpu</td>', dom)  # the measured task: unmarked
    assert re.search(r'class="cls assumed"[^>]*>memory\*</span>.*?reload-kv', dom)  # its section


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)")
def test_html_hatches_nothing_when_all_is_measured(tmp_path):
    dom = _dom(tmp_path, _write(tmp_path / "t", _measured_task()))
    assert 'class="assumed"' not in dom and 'cls assumed' not in dom and LEGEND not in dom
    assert not re.search(r"(gpu|cpu|memory|io)\*", dom)


# ---- metrics and traces ------------------------------------------------------------------------
def _families(analysis) -> dict:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    text = generate_latest(prometheus.registry_for(analysis)).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_prometheus_exposes_the_assumed_part_as_its_own_series(assumed, measured):
    families = _families(assumed)
    names = {s.name for f in families.values() for s in f.samples}
    assert names <= prometheus.exported_names()
    ratio = {s.labels["class"]: s.value
             for s in families["agentscope_critical_path_assumed_ratio"].samples}
    assert set(ratio) == set(CLASSES)
    assert ratio["memory"] == pytest.approx(MEM_FLEET, abs=1e-4)
    assert all(v == 0 for c, v in ratio.items() if c != "memory")
    seconds = {(s.labels["class"], s.labels["task"]): s.value
               for s in families["agentscope_critical_path_assumed_seconds"].samples
               if s.name.endswith("_total")}
    assert seconds[("memory", "chat-task")] == pytest.approx(0.7, abs=1e-6)
    assert seconds[("cpu", "chat-task")] == 0 and seconds[("memory", "build-task")] == 0
    whole = {(s.labels["class"], s.labels["task"]): s.value
             for s in families["agentscope_critical_path_seconds"].samples
             if s.name.endswith("_total")}
    assert all(v <= whole[k] + 1e-12 for k, v in seconds.items())
    plain = _families(measured)
    assert not any(s.value for s in plain["agentscope_critical_path_assumed_ratio"].samples)
    assert not any(s.value for s in plain["agentscope_critical_path_assumed_seconds"].samples
                   if s.name.endswith("_total"))


def test_otlp_metrics_and_grafana_name_the_assumed_series(assumed):
    from agentscope.exporters import otlp_metrics

    req = otlp_metrics.request(assumed)
    metrics = {m.name: m for m in req.resource_metrics[0].scope_metrics[0].metrics}
    assert metrics["agentscope.critical_path.assumed"].unit == "s"
    gauge = metrics["agentscope.critical_path.assumed.ratio"].gauge.data_points
    by_class = {p.attributes[0].value.string_value: p.as_double for p in gauge}
    assert by_class["memory"] == pytest.approx(MEM_FLEET, abs=1e-4)
    used = {m for uid in grafana.DASHBOARDS
            for _, expr in grafana.queries(grafana.to_json(grafana.build(uid)))
            for m in grafana.metrics_of(expr)}
    # the share assumed is read as assumed seconds over critical-path seconds, so that the
    # dashboards' service and lane variables filter it (the ratio gauge is of all tasks)
    assert {"agentscope_critical_path_assumed_seconds_total",
            "agentscope_critical_path_seconds_total"} <= used


def test_otlp_traces_carry_the_assumed_bottleneck_on_the_task_root(assumed, measured):
    prefix = otlp_traces.PREFIX
    roots = otlp_traces.task_root_attributes(assumed)
    chat = roots[(CHAT, "1" * 16)]
    assert chat[prefix + "bottleneck"] == "memory"
    assert chat[prefix + "bottleneck_assumed"] is True
    assert chat[prefix + "assumed_share.memory"] == pytest.approx(chat[prefix + "share.memory"])
    assert prefix + "assumed_share.cpu" not in chat
    build = roots[(BUILD, "4" * 16)]
    assert build[prefix + "bottleneck_assumed"] is False
    assert not [k for k in build if "assumed_share" in k]
    on_path = otlp_traces.critical_path_attributes(assumed)
    assert on_path[(CHAT, "3" * 16)][prefix + "class_from"] == "label"
    assert on_path[(CHAT, "2" * 16)][prefix + "class_from"] == "measured"
    plain = otlp_traces.task_root_attributes(measured)
    assert all(a[prefix + "bottleneck_assumed"] is False for a in plain.values())


def test_results_are_held_compactly_and_stay_read_only(tmp_path):
    """A section's class and basis are one byte each; the tasks that assumed nothing share
    one read-only all-zero figure per class (most tasks: about 0.7 KB each), and an analysis
    restored from its store holds the same."""
    import numpy as np

    d = _assumed_dir(tmp_path / "traces")
    with open(d / "spans-h-1-1.jsonl", "a") as f:  # a second task that assumed nothing
        f.write("".join(spanfile.encode(r) for r in _measured_task("d" * 32, "other-task")))
    db = tmp_path / "s.duckdb"
    with agentscope.analyze(d, db=db) as a:
        assert a.sections.cls.dtype == np.int8 and a.sections.basis.dtype == np.int8
        assert a.sections.assumed is not None  # (chat-task's memory section)
        chat, build, other = _task(a, CHAT), _task(a, BUILD), _task(a, "d" * 32)
        assert chat.assumed["memory"] > 0 and chat.assumed is not build.assumed
        assert build.assumed is other.assumed
        assert dict(build.assumed) == dict.fromkeys(CLASSES, 0.0)
        with pytest.raises(TypeError):
            build.assumed["gpu"] = 1.0
        made = a.to_dict()
        del made["summary"]["load"]
    with agentscope.analyze(d, db=db) as b:  # restored from the store
        assert b.traces_analysed == 0
        assert b.sections.cls.dtype == np.int8 and b.sections.basis.dtype == np.int8
        assert _task(b, BUILD).assumed is _task(b, "d" * 32).assumed
        assert _task(b, CHAT).assumed["memory"] > 0
        restored = b.to_dict()
        del restored["summary"]["load"]  # (nothing was loaded this time)
        assert restored == made
    # a fleet that assumed nothing holds no per-section arrays of it, made or restored
    measured = _write(tmp_path / "measured", _measured_task())
    for _ in range(2):
        with agentscope.analyze(measured, db=tmp_path / "m.duckdb") as m:
            assert m.sections.assumed is None and m.sections.assumed_cls is None
            assert all(v == 0 for row in m.breakdown("stage", assumed=True).values()
                       for v in row.values())
            assert m.task_results[0].segments[0].assumed is None
