"""The OTLP/JSON-lines file exporter (capture/otlp_file.py) under a real OpenTelemetry SDK
TracerProvider: what it writes is the Collector file exporter's format, and agentscope loads
from it the same spans (ids, parents, attributes, resource) as from the same spans POSTed
live with the SDK's OTLP/HTTP exporter to ``agentscope receive``."""

from __future__ import annotations

import json
import threading

import pytest

from agentscope.analysis import analyze
from agentscope.capture.otlp_file import OTLPJsonFileExporter
from agentscope.exporters import otlp_file

RESOURCE = {"service.name": "fw-agent", "host.name": "build-7", "process.pid": 4242}


def _provider(*exporters):
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create(RESOURCE))
    provider.add_span_processor(BatchSpanProcessor(memory, schedule_delay_millis=50))
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50,
                                                       max_export_batch_size=7))
    return provider, memory


def _agent(tracer, tasks: int) -> None:
    """``tasks`` agent runs as the GenAI conventions draw them: invoke_agent > chat,
    execute_tool, chat; a link and an event on the way."""
    from opentelemetry.trace import Link, SpanKind

    for t in range(tasks):
        with tracer.start_as_current_span("invoke_agent helper", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper",
                "task": t}) as root:
            for turn in range(2):
                with tracer.start_as_current_span("chat fake-sleep-0", kind=SpanKind.CLIENT,
                                                  attributes={
                        "gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                        "server.address": "127.0.0.1", "server.port": 8000,
                        "gen_ai.usage.input_tokens": 12 + turn, "temperature": 0.5,
                        "stop": ["a", "b"], "ok": True}) as chat:
                    chat.add_event("gen_ai.choice", {"index": 0})
                if turn == 0:
                    with tracer.start_as_current_span(
                            "execute_tool lookup", links=[Link(root.get_span_context())],
                            attributes={"gen_ai.operation.name": "execute_tool",
                                        "gen_ai.tool.name": "lookup"}):
                        sum(range(1000))


def _record(tmp_path, *exporters, tasks=3, threads=2):
    provider, memory = _provider(*exporters)
    tracer = provider.get_tracer("scenario.agent", "1.0")
    workers = [threading.Thread(target=_agent, args=(tracer, tasks)) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    provider.shutdown()
    return memory.get_finished_spans()


def _loaded(directory) -> dict:
    """{(trace, span): (parent, name, kind, start, end, service, host, pid, attrs)} of every
    span agentscope loads from ``directory``."""
    with analyze(directory, db=":memory:") as a:
        assert not a.problems, [str(p) for p in a.problems]
        _, rows = a.query_rows("SELECT trace_id, span_id, parent_span_id, name, kind, start_ns, "
                               "end_ns, service, host, pid, attrs FROM spans")
    return {(r[0], r[1]): (*r[2:10], json.loads(r[10])) for r in rows}


def _expected(spans) -> dict:
    kinds = {0: "internal", 1: "server", 2: "client", 3: "producer", 4: "consumer"}
    return {(f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}"): (
        None if s.parent is None else f"{s.parent.span_id:016x}", s.name, kinds[s.kind.value],
        s.start_time, s.end_time) for s in spans}


def test_it_writes_the_collector_file_format(tmp_path):
    path = tmp_path / "otlp.jsonl"
    spans = _record(tmp_path, OTLPJsonFileExporter(path), tasks=2, threads=1)
    lines = path.read_text().splitlines()
    assert len(lines) >= 2  # batches of at most 7 spans: one request per line
    requests = [json.loads(line) for line in lines]
    got = [sp for r in requests for rs in r["resourceSpans"] for ss in rs["scopeSpans"]
           for sp in ss["spans"]]
    assert len(got) == len(spans)
    first = requests[0]["resourceSpans"][0]
    resource = {a["key"]: a["value"] for a in first["resource"]["attributes"]}
    assert resource["service.name"] == {"stringValue": "fw-agent"}
    assert resource["process.pid"] == {"intValue": "4242"}  # int64 as a string
    assert first["scopeSpans"][0]["scope"] == {"name": "scenario.agent", "version": "1.0"}
    for sp in got:
        assert len(sp["traceId"]) == 32 and int(sp["traceId"], 16)  # hex, not base64
        assert len(sp["spanId"]) == 16 and int(sp["spanId"], 16)
        assert "parentSpanId" not in sp or len(sp["parentSpanId"]) == 16
        assert isinstance(sp["kind"], int)  # enums as integers
        assert isinstance(sp["startTimeUnixNano"], str)
        for link in sp.get("links", ()):
            assert len(link["traceId"]) == 32 and len(link["spanId"]) == 16
    tool = next(sp for sp in got if sp["name"] == "execute_tool lookup")
    root_ids = {sp["spanId"] for sp in got if sp["name"] == "invoke_agent helper"}
    assert tool["links"][0]["spanId"] in root_ids
    chat = next(sp for sp in got if sp["name"].startswith("chat"))
    assert chat["kind"] == 3 and chat["events"][0]["name"] == "gen_ai.choice"


def test_agentscope_loads_the_same_spans_from_the_file(tmp_path):
    out = tmp_path / "traces"
    out.mkdir()
    spans = _record(tmp_path, OTLPJsonFileExporter(out / "otlp-1.jsonl"))
    loaded = _loaded(out)
    want = _expected(spans)
    assert {k: v[:5] for k, v in loaded.items()} == want
    for *_, service, host, pid, _attrs in loaded.values():
        assert (service, host, pid) == ("fw-agent", "build-7", 4242)
    chat = next(v for v in loaded.values() if v[1].startswith("chat"))
    assert chat[-1]["server.address"] == "127.0.0.1" and chat[-1]["server.port"] == 8000
    assert chat[-1]["stop"] == ["a", "b"] and chat[-1]["ok"] is True
    assert chat[-1]["temperature"] == 0.5


def test_the_file_and_a_live_receiver_load_identically(tmp_path):
    http = pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    from agentscope.collectors.receiver import serve

    received, written = tmp_path / "received", tmp_path / "written"
    written.mkdir()
    ready, stop = threading.Event(), threading.Event()
    where: list = []

    def started(receiver) -> None:
        where.append(receiver.url)
        ready.set()

    server = threading.Thread(target=serve, args=(received,),
                              kwargs={"port": 0, "ready": started, "stop": stop})
    server.start()
    try:
        assert ready.wait(30)
        _record(tmp_path, OTLPJsonFileExporter(written / "otlp.jsonl"),
                http.OTLPSpanExporter(endpoint=where[0], timeout=30))
    finally:
        stop.set()
        server.join(30)
    from_file, from_receiver = _loaded(written), _loaded(received)
    assert len(from_file) == 3 * 2 * 4
    assert from_file == from_receiver


def test_a_shut_down_exporter_fails_its_exports_and_never_raises(tmp_path):
    from opentelemetry.sdk.trace.export import SpanExportResult

    exporter = OTLPJsonFileExporter(tmp_path / "no-such-dir" / "otlp.jsonl")
    spans = _record(tmp_path, tasks=1, threads=1)
    assert exporter.export(spans) == SpanExportResult.FAILURE  # cannot open: dropped
    assert exporter.dropped == len(spans)
    ok = OTLPJsonFileExporter(tmp_path / "otlp.jsonl")
    assert ok.export(spans) == SpanExportResult.SUCCESS
    ok.shutdown()
    assert ok.export(spans) == SpanExportResult.FAILURE
    assert len((tmp_path / "otlp.jsonl").read_text().splitlines()) == 1
    assert otlp_file.OTLPJsonFileExporter is OTLPJsonFileExporter
