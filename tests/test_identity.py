"""Process identity for spans that are not ours (docs/identity.md): ``agentscope run`` gives
its program ``host.name`` and ``process.pid`` through ``OTEL_RESOURCE_ATTRIBUTES``, as the
sampler names them; an OpenTelemetry SDK puts them on its resource; the store reads the pid
whether it comes as an int or as the string the variable gives; and the spans join the
sampled process tree, whose counters then judge them (the end to end test runs a real SDK
program under ``agentscope run``)."""

from __future__ import annotations

import json
import os
import socket
import sys
import textwrap

import pytest

import agentscope
from agentscope.collectors.sidecar import SamplerOptions, identity_environment, run_command

FAST = SamplerOptions(hz=20, gpus=False)


def _run_and_show(tmp_path, env=None):
    out = tmp_path / "shown"
    program = ("import os\n"
               f"open({str(out)!r}, 'w').write(f\"{{os.getpid()}} "
               "{os.environ.get('OTEL_RESOURCE_ATTRIBUTES')}\")\n")
    old = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        assert run_command([sys.executable, "-c", program], str(tmp_path / "t"), FAST,
                           lambda m: None) == 0
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    pid, attrs = out.read_text().split(" ", 1)
    return int(pid), attrs


def test_run_gives_its_program_its_host_and_pid(tmp_path):
    pid, attrs = _run_and_show(tmp_path)
    pairs = dict(p.split("=", 1) for p in attrs.split(","))
    assert pairs == {"host.name": socket.gethostname(), "process.pid": str(pid)}


def test_run_keeps_the_users_resource_attributes(tmp_path):
    pid, attrs = _run_and_show(tmp_path, {"OTEL_RESOURCE_ATTRIBUTES":
                                          "service.name=mine,host.name=box-7"})
    # the user's host.name stays; the pid is the program's (a later key wins in the SDKs)
    assert attrs == f"service.name=mine,host.name=box-7,process.pid={pid}"
    assert identity_environment({"OTEL_RESOURCE_ATTRIBUTES": "host.name=x"}) == {}


def test_an_sdk_resource_carries_them_and_the_store_reads_the_string_pid(tmp_path,
                                                                        monkeypatch):
    """The OpenTelemetry SDK turns OTEL_RESOURCE_ATTRIBUTES into string attributes; the OTLP
    readers (the pyarrow path and the Python one) take process.pid from a string too."""
    trace_dir = tmp_path / "t"
    program = textwrap.dedent(f"""
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from agentscope.exporters.otlp_file import OTLPJsonFileExporter
        provider = TracerProvider(resource=Resource.create({{"service.name": "svc"}}))
        provider.add_span_processor(SimpleSpanProcessor(
            OTLPJsonFileExporter({str(trace_dir / 'otlp.jsonl')!r})))
        with provider.get_tracer("t").start_as_current_span("execute_tool x"):
            pass
        provider.shutdown()
        """)
    assert run_command([sys.executable, "-c", program], str(trace_dir), FAST,
                       lambda m: None) == 0
    line = json.loads((trace_dir / "otlp.jsonl").read_text().splitlines()[0])
    resource = {a["key"]: a["value"] for a in line["resourceSpans"][0]["resource"]["attributes"]}
    assert resource["host.name"] == {"stringValue": socket.gethostname()}
    pid = int(resource["process.pid"]["stringValue"])
    from agentscope.store import otlp_arrow
    from agentscope.store.duckdb_store import Store

    real = otlp_arrow.stage
    for fast in (True, False):
        staged = []
        monkeypatch.setattr(otlp_arrow, "stage",
                            lambda *a: staged.append(real(*a) if fast else None) or staged[-1])
        with Store(None) as store:
            store.load(trace_dir)
            assert staged and (staged[0] is not None) == fast
            got = store.query("SELECT pid, host FROM spans").fetchall()
        assert got == [(pid, socket.gethostname())], fast


AGENT = textwrap.dedent("""
    import subprocess, sys, threading, time
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from agentscope.exporters.otlp_file import OTLPJsonFileExporter

    provider = TracerProvider(resource=Resource.create({"service.name": "sdk-agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPJsonFileExporter(sys.argv[1])))
    tracer = provider.get_tracer("agent")

    def burn(seconds):
        t = time.process_time()
        while time.process_time() - t < seconds:
            pass

    def task(name, tool, delay=0.0):
        time.sleep(delay)
        with tracer.start_as_current_span("invoke_agent " + name,
                                          attributes={"gen_ai.operation.name": "invoke_agent"}):
            with tracer.start_as_current_span("chat m", attributes={
                    "gen_ai.operation.name": "chat", "server.address": "127.0.0.1",
                    "server.port": 9}):
                time.sleep(0.2)
            with tracer.start_as_current_span("execute_tool " + tool, attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}):
                if tool == "cpu":
                    burn(1.0)
                elif tool == "child":
                    subprocess.run([sys.executable, "-c", "import time\\nt = time.process_time()"
                                    "\\nwhile time.process_time() - t < 1.0: pass"])
                else:
                    time.sleep(1.0)

    task("a", "cpu")
    task("b", "child")
    task("c", "sleep")
    pair = [threading.Thread(target=task, args=("d", "cpu")),
            threading.Thread(target=task, args=("e", "sleep", 0.4))]
    [t.start() for t in pair]
    [t.join() for t in pair]
    provider.shutdown()
    """)


@pytest.mark.slow
def test_sdk_spans_under_run_are_judged_by_the_trees_counters(tmp_path):
    """A real OpenTelemetry SDK program (no accounting of ours on its spans) under `agentscope
    run`: the CPU tool, the tool whose child process computes and the sleeping tool get cpu,
    cpu and io; of two tasks at once, the computing one's tool is cpu and the sleeping one's
    io; the model call waited on its endpoint (io), named."""
    trace_dir = tmp_path / "t"
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    assert run_command([sys.executable, str(script), str(trace_dir / "otlp.jsonl")],
                       str(trace_dir), FAST, lambda m: None) == 0
    with agentscope.analyze(trace_dir, db=":memory:") as a:
        tools = {}
        for t in a.task_results:
            for s in t.segments:
                if s.name.startswith("execute_tool"):
                    tools[t.name] = s
                if s.name == "chat m" and s.end_ns - s.start_ns > 0.1e9:
                    assert s.cls == "io" and "model endpoint 127.0.0.1:9" in s.evidence
        got = {name: s.cls for name, s in tools.items()}
        assert got == {"invoke_agent a": "cpu", "invoke_agent b": "cpu",
                       "invoke_agent c": "io", "invoke_agent d": "cpu",
                       "invoke_agent e": "io"}, {n: s.evidence for n, s in tools.items()}
        assert "its process tree (pid" in tools["invoke_agent a"].evidence
        assert tools["invoke_agent a"].confidence == 0.7
        assert "shared with the other spans" in tools["invoke_agent d"].evidence
        assert a.summary.measured_share > 0.95
