"""The recipes (docs/recipes/): each example under examples/recipes/ run as its recipe runs it
(under ``agentscope run``, its spans exported by the framework's own OpenTelemetry set-up to
``agentscope receive``, to a file, or through a Collector stand-in), and the verdicts
agentscope gives on it checked against what the example does: its model calls wait on the
(fake) endpoint, asleep (``io``), its tool computes a fixed amount of CPU time in a child
process (``cpu``, measured through the process tree, or by agentscope's own accounting where
agentscope's stage wraps it).

The margins rest on what the workloads are, not on the clock: the tool computes 1.5 s of
CPU time (``time.process_time``), so a busy machine makes it longer and no less CPU-bound;
each model call sleeps 0.5 s at the endpoint, in another process tree, whatever the load."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "recipes"
RECIPES = ROOT / "docs" / "recipes"
TOOL_CPU_S = 1.5
MODEL_WAIT_S = 0.5
TIMEOUT_S = 300

# each recipe's example, and the page that shows it
PAGES = {
    "openai_sdk.py": "openai-sdk.md",
    "langchain_openinference.py": "langchain-openinference.md",
    "existing_otel_sdk.py": "existing-otel-sdk.md",
    "otel_collector.py": "otel-collector.md",
    "openai_agents_sdk.py": "openai-agents-sdk.md",
    "anthropic_sdk.py": "anthropic-sdk.md",
}
HELPERS = {"fake_llm.py", "fake_anthropic.py", "workload.py"}  # endpoints, the shared tool


# ---- the pages and the examples ---------------------------------------------------------------
def _bash_blocks(page: Path) -> list:
    return re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S)


def test_every_example_has_its_page_and_every_page_runs_examples_that_exist():
    examples = {p.name for p in EXAMPLES.glob("*.py")} - HELPERS
    assert examples == set(PAGES)
    index = (RECIPES / "README.md").read_text()
    for example, page in PAGES.items():
        assert (RECIPES / page).is_file(), page
        assert f"({page})" in index, f"the index does not link {page}"
        blocks = _bash_blocks(RECIPES / page)
        assert blocks, f"{page} has no command to run"
        named = set(re.findall(r"examples/recipes/[\w.]+\.py", "".join(blocks)))
        assert f"examples/recipes/{example}" in named, page
        for path in named:
            assert (ROOT / path).is_file(), f"{page} runs {path}, which is not there"
        for block in blocks:  # a background process is stopped in the block that started it
            assert block.count(" &\n") <= block.count("kill %"), (page, block)


# ---- running them ---------------------------------------------------------------------------
_URL = re.compile(r"(http://127\.0\.0\.1:\d+)/v1/traces")


@contextlib.contextmanager
def _server(command: list) -> Iterator[str]:
    """A server (``agentscope receive``, the Collector stand-in) on a free port, outside the
    agent's process tree; yields its base URL (OTEL_EXPORTER_OTLP_ENDPOINT's form). Stopped
    with SIGTERM, and waited for: its files are complete when the block ends."""
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True, cwd=ROOT)
    try:
        said = ""
        while True:
            line = proc.stderr.readline()
            said += line
            match = _URL.search(line)
            if match or not line:
                break
        assert match, f"{command[2:4]} did not start: {said}"
        yield match.group(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=60)[1]
    assert proc.returncode == 0, rest


def _receiver(out: Path) -> "contextlib.AbstractContextManager[str]":
    return _server([sys.executable, "-m", "agentscope.cli", "receive", "--out", str(out),
                    "--port", "0"])


def _run(example: str, trace_dir: Path, endpoint: "str | None" = None) -> str:
    """``agentscope run --trace-dir DIR -- python examples/recipes/EXAMPLE``, with the OTLP
    endpoint set where the recipe sets it; returns what the agent printed."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "AGENTSCOPE_", "OPENAI_", "ANTHROPIC_"))}
    if endpoint is not None:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    # what it says goes to files, not pipes: a process it leaves behind (the fake endpoint
    # outside its tree) could hold a pipe open after the agent is done
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        done = subprocess.run(
            [sys.executable, "-m", "agentscope.cli", "run", "--trace-dir", str(trace_dir), "--",
             sys.executable, str(EXAMPLES / example), "--tasks", "2",
             "--tool-cpu", str(TOOL_CPU_S), "--model", f"fake-sleep-{MODEL_WAIT_S}"],
            stdout=out, stderr=err, env=env, cwd=ROOT, timeout=TIMEOUT_S)
        out.seek(0)
        err.seek(0)
        said, complaint = out.read(), err.read()
    assert done.returncode == 0, said + complaint
    assert said.count("42 passed") == 2, said  # both tasks ran the tool
    return said


def _analysis(where: Path):
    import agentscope

    a = agentscope.analyze(where, db=":memory:")
    assert not a.problems, [str(p) for p in a.problems]
    assert len(a.tasks) == 2, a.tasks[["name", "bottleneck"]]
    return a


def _sections(a, name: str):
    """The critical-path sections owned by spans called ``name``, the longest per task."""
    cp = a.critical_path
    rows = cp[cp["name"] == name].sort_values("duration_s").groupby("trace_id").tail(1)
    assert len(rows) == 2, (name, sorted(set(cp["name"])))
    return rows


def _check_verdicts(a, tool: str, model_call: str, tool_evidence: str,
                    model_basis: str = "measured") -> None:
    """Each task: cpu-bound, its tool's section cpu on measured evidence, its model calls io
    (waiting on the endpoint), and the classes as much of the path as they should hold."""
    for _, task in a.tasks.iterrows():
        assert task["bottleneck"] == "cpu", task.to_dict()
        # the tool's 1.5 s of CPU outweighs the two 0.5 s waits, more so on a busy machine
        # (where the tool takes longer); the waits are io, whatever the load
        assert task["share_cpu"] > task["share_io"], task.to_dict()
        io_s = task["share_io"] * task["duration_s"]
        assert io_s >= 2 * MODEL_WAIT_S * 0.6, task.to_dict()
        assert task["share_untraced"] < 0.05, task.to_dict()
    for _, row in _sections(a, tool).iterrows():
        assert row["class"] == "cpu" and row["basis"] == "measured", row.to_dict()
        assert row["share_cpu"] >= 0.5, row.to_dict()
        assert row["duration_s"] >= TOOL_CPU_S * 0.9, row.to_dict()  # 1.5 s of CPU in it
        assert tool_evidence in row["evidence"], row["evidence"]
    cp = a.critical_path
    calls = cp[cp["name"] == model_call]
    assert len(calls) == 4, sorted(set(cp["name"]))  # two a task
    for _, row in calls.iterrows():
        assert row["class"] == "io" and row["basis"] == model_basis, row.to_dict()
        # the tree is sampled every 0.1 s: up to an interval of the tool's core can fall into
        # a call beside it (a fifth of 0.5 s), with the client's own Python: io still most
        assert row["share_io"] >= 0.6, row.to_dict()
        assert row["duration_s"] >= MODEL_WAIT_S * 0.9, row.to_dict()


@pytest.mark.slow
def test_openai_sdk_over_otlp_http_to_agentscope_receive(tmp_path):
    with _receiver(tmp_path) as url:
        _run("openai_sdk.py", tmp_path, url)
    assert list(tmp_path.glob("spans-*.jsonl")) and list(tmp_path.glob("samples-*.jsonl"))
    a = _analysis(tmp_path)
    assert set(a.tasks["name"]) == {"invoke_agent test-fixer"}
    _check_verdicts(a, "execute_tool run_tests", f"chat fake-sleep-{MODEL_WAIT_S}",
                    "no accounting of its own: its process tree (pid")
    # the spans are the instrumentation's and the agent loop's, none of agentscope's making
    scopes = a.query("SELECT name, attrs->>'$.\"otel.scope.name\"' AS scope FROM spans")
    for name, scope in zip(scopes["name"], scopes["scope"]):
        assert scope.startswith("opentelemetry." if name.startswith("chat") else
                                "openai-sdk-agent"), (name, scope)


@pytest.mark.slow
def test_langchain_with_openinference_into_an_otlp_file(tmp_path):
    pytest.importorskip("langchain_openai")
    pytest.importorskip("openinference.instrumentation.langchain")
    _run("langchain_openinference.py", tmp_path)
    (otlp,) = tmp_path.glob("otlp-*.jsonl")  # the exporter's file; no receiver, no span file
    assert not list(tmp_path.glob("spans-*.jsonl"))
    a = _analysis(tmp_path)
    assert set(a.tasks["name"]) == {"fix_failing_test"}
    spans = a.query("SELECT name, stage, attrs->>'$.\"openinference.span.kind\"' AS kind, "
                    "attrs->>'$.\"otel.scope.name\"' AS scope FROM spans")
    assert set(spans["scope"]) == {"openinference.instrumentation.langchain"}
    assert sorted(zip(spans["name"], spans["kind"])) == sorted(
        [("fix_failing_test", "CHAIN")] * 2 + [("ChatOpenAI", "LLM")] * 4
        + [("run_tests", "TOOL")] * 2)
    _check_verdicts(a, "run_tests", "ChatOpenAI",
                    "no accounting of its own: its process tree (pid")


@pytest.mark.slow
def test_openai_agents_sdk_with_openinference(tmp_path):
    pytest.importorskip("agents")
    pytest.importorskip("openinference.instrumentation.openai_agents")
    with _receiver(tmp_path) as url:
        _run("openai_agents_sdk.py", tmp_path, url)
    a = _analysis(tmp_path)
    assert set(a.tasks["name"]) == {"fix-failing-test"}
    _check_verdicts(a, "run_tests", "generation",
                    "no accounting of its own: its process tree (pid")


@pytest.mark.slow
def test_anthropic_sdk_with_openinference_and_its_own_spans(tmp_path):
    pytest.importorskip("anthropic")
    pytest.importorskip("openinference.instrumentation.anthropic")
    with _receiver(tmp_path) as url:
        _run("anthropic_sdk.py", tmp_path, url)
    a = _analysis(tmp_path)
    assert set(a.tasks["name"]) == {"invoke_agent test-fixer"}
    # OpenInference's LLM span around each call, the SDK's own CLIENT span inside it
    shape = a.query("SELECT s.name, p.name AS parent FROM spans s JOIN spans p "
                    "ON p.trace_id = s.trace_id AND p.span_id = s.parent_span_id "
                    "WHERE s.stage = 'inference'")
    assert sorted(zip(shape["name"], shape["parent"])) == sorted(
        [("messages.create", "invoke_agent test-fixer")] * 4
        + [("anthropic.messages.create", "messages.create")] * 4)
    _check_verdicts(a, "execute_tool run_tests", "anthropic.messages.create",
                    "no accounting of its own: its process tree (pid")
    cp = a.critical_path
    for evidence in cp[cp["name"] == "anthropic.messages.create"]["evidence"]:
        assert "waiting on the model endpoint 127.0.0.1:" in evidence, evidence


@pytest.mark.slow
def test_an_app_with_its_own_otel_sdk_gets_agentscope_stages_in_its_traces(tmp_path):
    """sdk mode: agentscope's stages are the app's provider's spans. agentscope's directory
    has every span (the app's, the instrumentation's, its own) with the counters; the app's
    own exporter (here to a receiver standing in for its backend) gets agentscope's stages
    too, in the app's traces, with their accounting as attributes."""
    traces, backend = tmp_path / "traces", tmp_path / "backend"
    with _receiver(backend) as url:
        _run("existing_otel_sdk.py", traces, url)
    a = _analysis(traces)
    assert set(a.tasks["name"]) == {"handle_ticket"}
    # the tool's CPU from agentscope's own accounting (its child process, reaped by it)
    _check_verdicts(a, "run_tests", f"chat fake-sleep-{MODEL_WAIT_S}", "child processes")
    tool = _sections(a, "run_tests")
    assert not tool["evidence"].str.contains("no accounting").any()
    shape = a.query("SELECT s.name, s.stage, p.name AS parent FROM spans s "
                    "LEFT JOIN spans p ON p.trace_id = s.trace_id AND p.span_id = s.parent_span_id")
    assert sorted(zip(shape["name"], shape["parent"].fillna("-"))) == sorted(
        [("handle_ticket", "-")] * 2 + [("build_prompt", "handle_ticket")] * 2
        + [(f"chat fake-sleep-{MODEL_WAIT_S}", "handle_ticket")] * 4
        + [("run_tests", "handle_ticket")] * 2)

    b = _analysis(backend)  # what the app's exporter sent: the same traces, our accounting on
    got = b.query("SELECT trace_id, span_id, name, child_cpu_ns FROM spans")
    assert len(got) == 10 and set(got["trace_id"]) == set(a.tasks["trace_id"])
    for _, sp in got[got["name"] == "run_tests"].iterrows():
        assert sp["child_cpu_ns"] >= TOOL_CPU_S * 0.95e9, sp.to_dict()
    for _, row in _sections(b, "run_tests").iterrows():
        assert row["class"] == "cpu" and row["basis"] == "measured", row.to_dict()
    # without the samples the app's backend does not have, the model calls rest on a label
    cp = b.critical_path
    assert set(cp[cp["name"].str.startswith("chat")]["basis"]) == {"label"}


@pytest.mark.slow
def test_a_collector_file_export_and_its_otlphttp_export_give_the_same_verdicts(tmp_path):
    """The Collector stand-in (examples/recipes/otel_collector.py) between the agent and
    agentscope: its file exporter's OTLP/JSON lines, analysed beside agentscope run's samples,
    and its otlphttp export into agentscope receive, with the samples copied beside it."""
    filed, received = tmp_path / "collector", tmp_path / "received"
    with _receiver(received) as receiver_url:
        with _server([sys.executable, str(EXAMPLES / "otel_collector.py"), "--port", "0",
                      "--file", str(filed / "otelcol.jsonl"),
                      "--forward", receiver_url]) as collector_url:
            _run("openai_sdk.py", filed, collector_url)
    _check_file_exporter_format(filed / "otelcol.jsonl")
    for samples in filed.glob("samples-*.jsonl"):
        shutil.copy(samples, received / samples.name)
    verdicts = []
    for where in (filed, received):
        a = _analysis(where)
        _check_verdicts(a, "execute_tool run_tests", f"chat fake-sleep-{MODEL_WAIT_S}",
                        "no accounting of its own: its process tree (pid")
        verdicts.append({t.trace_id: (t.bottleneck, [(s.span_id, s.cls) for s in t.segments])
                         for t in a.task_results})
    assert verdicts[0] == verdicts[1]


def _check_file_exporter_format(path: Path) -> None:
    """Each line one ExportTraceServiceRequest as the Collector's file exporter writes it:
    the fields of the spec's own example (tests/corpus/otlp_examples/otel_spec_file_exporter),
    ids in hex, 64-bit integers as strings, span kinds as integers."""
    spec = ROOT / "tests/corpus/otlp_examples/otel_spec_file_exporter/traces.jsonl"
    spec_keys = {k for line in spec.read_text().splitlines()
                 for rs in json.loads(line)["resourceSpans"]
                 for ss in rs["scopeSpans"] for sp in ss["spans"] for k in sp}
    lines = path.read_text().splitlines()
    assert lines
    for line in lines:
        doc = json.loads(line)
        assert set(doc) == {"resourceSpans"}
        for rs in doc["resourceSpans"]:
            resource = {a["key"] for a in rs["resource"]["attributes"]}
            assert {"service.name", "host.name", "process.pid"} <= resource  # agentscope run's
            for ss in rs["scopeSpans"]:
                for sp in ss["spans"]:
                    assert set(sp) <= spec_keys | {"kind", "attributes", "flags"}, set(sp)
                    assert re.fullmatch(r"[0-9a-f]{32}", sp["traceId"])
                    assert re.fullmatch(r"[0-9a-f]{16}", sp["spanId"])
                    assert isinstance(sp["startTimeUnixNano"], str)
                    assert isinstance(sp.get("kind", 0), int)


@pytest.mark.slow
def test_the_fake_endpoint_goes_when_the_agent_is_killed(tmp_path):
    """fake_llm.py: the endpoint runs outside the agent's tree, and its guard stops it once
    the agent is gone, even when the agent could not stop it (SIGKILL)."""
    agent = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; sys.path.insert(0, sys.argv[1])\n"
         "from fake_llm import openai_endpoint\n"
         "with openai_endpoint() as url:\n    print(url, flush=True)\n    time.sleep(300)\n",
         str(EXAMPLES)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    url = agent.stdout.readline().strip()
    assert url.endswith("/v1"), url
    base = url[:-3]
    with urllib.request.urlopen(f"{base}/wait?s=0", timeout=30) as r:
        assert json.load(r) == {"waited_s": 0.0}
    agent.kill()
    agent.wait()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{base}/wait?s=0", timeout=5).close()
        except (urllib.error.URLError, ConnectionError, OSError):
            return
        time.sleep(0.2)
    pytest.fail("the fake endpoint outlived its agent by a minute")
