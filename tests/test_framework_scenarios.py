"""The framework scenarios (scenarios/workloads/framework_cases.py): agents on real frameworks,
traced by the frameworks' own OpenTelemetry instrumentation, recorded under ``agentscope run``
with their spans exported as an OTLP/JSON file or sent live to ``agentscope receive``. What a
recording holds: the frameworks' spans (not ours), the resource that joins them to the sampled
process tree, and a truth line for every task and span. (Whether the verdicts are right is
test_scenarios.py's business.)"""

from __future__ import annotations

import socket
import urllib.parse
from collections import defaultdict
from pathlib import Path

import pytest

from agentscope.scenarios import UNAVAILABLE, run
from agentscope.scenarios.llm_server import completion, latency_of
from agentscope.scenarios.truth import read_truth
from agentscope.scenarios.workloads.framework_telemetry import EXPORT_ENV, TaskRun, span_truth
from agentscope.store.tracedir import scan

from . import conftest
from .conftest import keep_on_failure

TOOLS = [{"type": "function", "function": {"name": "search_web", "parameters": {}}},
         {"type": "function", "function": {"name": "other", "parameters": {}}}]


# ---- the scripted model endpoint, and the truth of a span ----------------------------------
def test_the_endpoint_calls_the_first_tool_then_answers():
    ask = {"model": "fake-sleep-0.25", "tools": TOOLS,
           "messages": [{"role": "user", "content": "find it"}]}
    first = completion(ask, 1, 0)
    call = first["choices"][0]["message"]["tool_calls"][0]
    assert first["choices"][0]["finish_reason"] == "tool_calls"
    assert call["function"] == {"name": "search_web", "arguments": "{}"}
    assert first["usage"]["total_tokens"] == (first["usage"]["prompt_tokens"]
                                              + first["usage"]["completion_tokens"]) > 0
    ask["messages"] += [first["choices"][0]["message"],
                        {"role": "tool", "tool_call_id": call["id"], "content": "42 hits"}]
    final = completion(ask, 2, 0)["choices"][0]
    assert final["finish_reason"] == "stop" and final["message"]["content"] == "Done: 42 hits"
    scripted = completion({**ask, "messages": ask["messages"][:1],
                           "metadata": {"tool_arguments": '{"q": "x"}'}}, 3, 0)
    assert scripted["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == \
        '{"q": "x"}'
    assert completion({"model": "m", "messages": []}, 4, 0)["choices"][0]["finish_reason"] == \
        "stop"  # no tools offered: an answer
    assert latency_of("fake-sleep-0.25") == 0.25 and latency_of("gpt-4o") == 0.0
    assert latency_of("fake-sleep-1000") == 60.0


def test_a_failed_check_keeps_the_recordings_it_judged(tmp_path, monkeypatch):
    monkeypatch.setattr(conftest, "RECORDINGS", tmp_path / "kept")
    rec = tmp_path / "fw-x-file"
    rec.mkdir()
    (rec / "otlp-1.jsonl").write_text("{}\n")
    with keep_on_failure("fw-x", rec):  # a check that holds keeps nothing
        pass
    assert not (tmp_path / "kept").exists()
    with pytest.raises(AssertionError, match="recordings are kept in") as e:
        with keep_on_failure("fw-x", rec):
            assert 1 == 2, "wrong verdict"
    assert "wrong verdict" in str(e.value)
    (kept,) = (tmp_path / "kept").iterdir()
    assert str(kept) in str(e.value) and kept.name.startswith("fw-x-")
    assert (kept / "fw-x-file" / "otlp-1.jsonl").read_text() == "{}\n"


class _Span:
    def __init__(self, name, seconds=1.0, **attrs):
        self.name, self.attributes = name, attrs
        self.start_time, self.end_time = 10**18, 10**18 + int(seconds * 1e9)


def test_span_truth_follows_the_conventions_of_both_instrumentations():
    tools = {"search_web": ("io", 1.5), "rank_documents": ("cpu", 0.0)}
    chat = _Span("chat fake-sleep-0.25", 0.3, **{"gen_ai.operation.name": "chat",
                                                 "gen_ai.request.model": "fake-sleep-0.25"})
    assert span_truth(chat, tools) == pytest.approx({"io": 0.25, "cpu": 0.05})
    llm = _Span("generation", 0.2, **{"openinference.span.kind": "LLM",
                                      "llm.model_name": "fake-sleep-0.25"})
    assert span_truth(llm, tools) == "io"  # shorter than scripted (clocks): all of it
    assert span_truth(_Span("chat gpt", **{"gen_ai.operation.name": "chat"}), tools) == "io"
    assert span_truth(_Span("execute_tool search_web", 2.0, **{
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_web"}),
        tools) == pytest.approx({"io": 1.5, "cpu": 0.5})
    assert span_truth(_Span("rank_documents", **{"openinference.span.kind": "TOOL"}),
                      tools) == "cpu"
    assert span_truth(_Span("mystery", **{"openinference.span.kind": "TOOL"}), tools) is None
    assert span_truth(_Span("assistant", **{"openinference.span.kind": "AGENT"}),
                      tools) == "cpu"
    assert span_truth(_Span("invoke_agent a", **{"gen_ai.operation.name": "invoke_agent"}),
                      tools) == "cpu"
    run_ = TaskRun("t", model_wait_s=0.25, tool_wait_s=1.5, model_calls=2, tool_calls=1)
    assert run_.ledger(2.1) == pytest.approx({"io": 2.0, "cpu": 0.1})
    assert TaskRun("t", 0.25, 0.0, model_calls=2, tool_calls=1).ledger(2.0) == \
        pytest.approx({"io": 0.5, "cpu": 1.5})


# a model call's truth: the endpoint's fixed wait (io) and the client's own work building and
# parsing the request (cpu); on a machine busy with other work the client's part takes longer
# (0.47 of a 0.25 s call with two CPU burners on two cores) while the wait does not
MODEL_CALL_IO = 0.4


def _mostly(truth: dict, cls: str, share: float = 0.6) -> bool:
    return set(truth) <= {"io", "cpu"} and truth.get(cls, 0.0) >= share


# ---- recorded as a user runs them --------------------------------------------------------
def _record(tmp_path: Path, monkeypatch, name: str, mode: str) -> Path:
    monkeypatch.setenv(EXPORT_ENV, mode)
    out = tmp_path / f"{name}-{mode}"
    code = run(name, out, tasks=2, load=1, quiet=True)
    if code == UNAVAILABLE:
        pytest.skip(f"{name}: the frameworks are not installed here (the run said which)")
    assert code == 0
    return out


def _check_recording(out: Path, name: str, mode: str) -> dict:
    """What every framework recording holds; returns its spans by trace."""
    otlp, received = list(out.glob("otlp-*.jsonl")), list(out.glob("spans-*.jsonl"))
    if mode == "file":  # the exporter's file, and no span file of ours
        assert len(otlp) == 1 and not received, sorted(p.name for p in out.iterdir())
    else:  # only what agentscope receive wrote
        assert received and not otlp, sorted(p.name for p in out.iterdir())
    got = scan(out)
    assert not got.problems, [str(p) for p in got.problems]
    tasks, span_truth_ = read_truth(out)
    assert len(tasks) == 2 and all(t["scenario"] == name for t in tasks.values())
    truth_files = list(out.glob("truth-*.jsonl"))
    assert len(truth_files) == 1
    agent_pid = int(truth_files[0].stem.split("-")[1])
    by_trace = defaultdict(list)
    for sp in got.spans:
        by_trace[sp.trace_id].append(sp)
        # the resource that agentscope run's OTEL_RESOURCE_ATTRIBUTES gave the SDK
        assert sp.service == f"scenario-{name}"
        assert sp.pid == agent_pid
        assert sp.host == urllib.parse.quote(socket.gethostname(), safe="")
        assert (sp.trace_id, sp.span_id) in span_truth_, sp.name  # every span has its truth
    assert set(by_trace) == set(tasks)  # one trace per task, each with its truth
    for trace_id, spans in by_trace.items():
        roots = [sp for sp in spans if sp.parent_span_id is None]
        assert len(roots) == 1 and roots[0].name == tasks[trace_id]["name"]
        assert span_truth_[(trace_id, roots[0].span_id)] == {"cpu": 1.0}
    return by_trace


def _recorded(tmp_path: Path, monkeypatch, name: str, mode: str) -> tuple:
    """A recording of ``name`` checked (_check_recording): its spans by trace, its task and
    span truths."""
    out = _record(tmp_path, monkeypatch, name, mode)
    return (_check_recording(out, name, mode), *read_truth(out))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["file", "receive"])
def test_openai_client_with_the_otel_instrumentation(tmp_path, monkeypatch, mode):
    by_trace, tasks, truth = _recorded(tmp_path, monkeypatch, "fw-openai-cpu-tool", mode)
    for trace_id, spans in by_trace.items():
        names = sorted(sp.name for sp in spans)
        assert names == ["chat fake-sleep-0.25", "chat fake-sleep-0.25",
                         "execute_tool rank_documents", "invoke_agent assistant"]
        root = next(sp for sp in spans if sp.parent_span_id is None)
        assert root.attrs["gen_ai.operation.name"] == "invoke_agent"
        for sp in spans:
            if sp.name.startswith("chat"):  # the instrumentation's, under the agent's span
                assert sp.kind == "client" and sp.parent_span_id == root.span_id
                assert sp.attrs["gen_ai.operation.name"] == "chat"
                assert sp.attrs["gen_ai.request.model"] == "fake-sleep-0.25"
                assert sp.attrs["gen_ai.usage.input_tokens"] > 0
                assert sp.attrs["otel.scope.name"].startswith("opentelemetry.")
                assert _mostly(truth[(trace_id, sp.span_id)], "io", MODEL_CALL_IO)
            elif sp.name.startswith("execute_tool"):
                assert sp.attrs["gen_ai.tool.name"] == "rank_documents"
                assert truth[(trace_id, sp.span_id)] == {"cpu": 1.0}
        ledger = tasks[trace_id]["ledger"]
        assert tasks[trace_id]["truth"] == "cpu" and ledger["cpu"] >= 1.4
        assert ledger["io"] == pytest.approx(0.5)  # two model calls, 0.25 s each


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["file", "receive"])
def test_openai_agents_sdk_with_openinference(tmp_path, monkeypatch, mode):
    by_trace, tasks, truth = _recorded(tmp_path, monkeypatch, "fw-agents-http-tool", mode)
    for trace_id, spans in by_trace.items():
        kinds = defaultdict(list)
        for sp in spans:
            kinds[sp.attrs.get("openinference.span.kind")].append(sp)
            assert sp.attrs["otel.scope.name"] == "openinference.instrumentation.openai_agents"
        assert len(kinds["LLM"]) == 2 and len(kinds["TOOL"]) == 1
        assert {sp.name for sp in kinds["AGENT"]} == {"ask-search_web", "assistant"}
        for sp in kinds["LLM"]:
            assert sp.attrs["llm.model_name"] == "fake-sleep-0.25"
            assert _mostly(truth[(trace_id, sp.span_id)], "io", MODEL_CALL_IO)
        tool = kinds["TOOL"][0]
        assert tool.name == "search_web" and _mostly(truth[(trace_id, tool.span_id)], "io", 0.9)
        assert tool.duration_ns >= 1.5e9
        assert tasks[trace_id]["truth"] == "io"
        assert tasks[trace_id]["ledger"]["io"] == pytest.approx(2.0)  # 2 x 0.25 s + 1.5 s


# ---- both ways in, one verdict --------------------------------------------------------------
def _replay_to_a_receiver(recording: Path, into: Path) -> None:
    """Every request of the recording's OTLP/JSON file POSTed to a live `agentscope receive`
    writing into ``into``, and the recording's samples and truth copied beside them: the same
    spans, the other way in."""
    import shutil
    import threading
    import urllib.request

    from agentscope.collectors.receiver import serve

    ready, stop = threading.Event(), threading.Event()
    where: list = []
    server = threading.Thread(target=serve, args=(into,), kwargs={
        "port": 0, "ready": lambda r: (where.append(r.url), ready.set()), "stop": stop})
    server.start()
    try:
        assert ready.wait(30)
        (otlp,) = recording.glob("otlp-*.jsonl")
        for line in otlp.read_text().splitlines():
            req = urllib.request.Request(where[0], data=line.encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as reply:
                assert reply.status == 200
    finally:
        stop.set()
        server.join(30)
    for p in [*recording.glob("samples-*.jsonl"), *recording.glob("truth-*.jsonl"),
              recording / "scenario.json"]:
        shutil.copy(p, into / p.name)


@pytest.mark.slow
def test_a_file_and_a_receiver_give_the_same_verdicts_and_the_right_ones(tmp_path, monkeypatch):
    """A concurrent pair on the openai client (one task computing in its tool, one waiting on
    HTTP, in one process): recorded as the Collector's file exporter writes it, and the same
    spans sent live to `agentscope receive`. Both give every task its true verdict, with the
    same shares and critical paths; the computing task's cpu share is within 0.2 of the
    share its workload timed on the CPU. (A failure keeps both recordings: conftest's
    keep_on_failure.)"""
    name = "fw-openai-concurrent"
    out = _record(tmp_path, monkeypatch, name, "file")
    live = tmp_path / "live"
    _replay_to_a_receiver(out, live)
    assert list(live.glob("spans-*.jsonl")) and not list(live.glob("otlp-*"))
    got = {}
    with keep_on_failure(name, out, live):
        _judged_alike(out, live, got)
        assert got[out].keys() == got[live].keys()
        for trace_id, (bottleneck, shares, path) in got[out].items():
            other = got[live][trace_id]
            assert (bottleneck, path) == (other[0], other[2])
            assert all(abs(shares[c] - other[1][c]) < 1e-9 for c in shares)


def _judged_alike(out: Path, live: Path, got: dict) -> None:
    """Every task of both recordings given its true verdict (the computing task's cpu share
    within 0.2 of its timed one); each recording's verdicts, shares and paths into ``got``."""
    import agentscope
    from agentscope.scenarios import score

    for where in (out, live):
        s = score(where)
        assert s.missing == 0 and s.untruthed == 0 and len(s.tasks) >= 2
        assert all(t.ok for t in s.tasks), [(t.name, t.truth, t.verdict, t.shares)
                                            for t in s.tasks]
        for t in s.tasks:
            total = sum(t.ledger.values())
            assert abs(t.shares.get("cpu", 0.0) - t.ledger.get("cpu", 0.0) / total) <= 0.2, t
        with agentscope.analyze(where, db=":memory:") as a:
            got[where] = {t.trace_id: (t.bottleneck, t.shares, [(s.span_id, s.cls) for s in
                                                                t.segments])
                          for t in a.task_results}
