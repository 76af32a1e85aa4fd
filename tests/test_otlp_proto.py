"""OTLP protobuf files (formats/importers/otlp_proto.py) and OTLP/JSON in both spellings
(formats/otlp_common.py, store/otlp.py): the same spans, however they were written, read
back as the same records."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToJson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import (
    ResourceSpans,
    ScopeSpans,
    Span,
    Status,
    TracesData,
)

from agentscope.errors import TraceFormatError
from agentscope.formats.importers import HEAD_BYTES, ORDER, detect, otlp_proto
from agentscope.store import otlp
from agentscope.store.duckdb_store import Store

from .conftest import CORPUS, REPO

T0 = 1_765_000_000_000_000_000


# ---- building requests with the real opentelemetry-proto classes ------------------------
def kv(key, value):
    return KeyValue(key=key, value=value)


def s(text):
    return AnyValue(string_value=text)


def i(n):
    return AnyValue(int_value=n)


def span(n, trace=1, parent=None, **kw):
    attrs = kw.pop("attributes", [])
    return Span(trace_id=trace.to_bytes(16, "big"), span_id=n.to_bytes(8, "big"),
                parent_span_id=parent.to_bytes(8, "big") if parent else b"", name=f"s{n}",
                start_time_unix_nano=kw.pop("start", T0 + n), end_time_unix_nano=kw.pop(
                    "end", T0 + 1000 + n), attributes=attrs, **kw)


def request(*spans, service="svc", scope="lib"):
    resource = Resource(attributes=[kv("service.name", s(service)), kv("host.name", s("h1")),
                                    kv("process.pid", i(42))])
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(
        resource=resource, scope_spans=[ScopeSpans(scope=InstrumentationScope(name=scope),
                                                   spans=list(spans))])])


def rich_request():
    """Every AnyValue type, events, links, kinds, a status, our accounting attributes, and an
    ``agentscope.analysis.*`` verdict (dropped on import)."""
    values = AnyValue(array_value=ArrayValue(values=[s("a"), i(2), AnyValue(double_value=0.5)]))
    kvlist = AnyValue(kvlist_value=KeyValueList(values=[kv("x", i(1)), kv("y", AnyValue(
        bool_value=False))]))
    root = span(1, attributes=[
        kv("agentscope.stage", s("task")), kv("agentscope.cpu.thread_ns", i(7000)),
        kv("thread.id", i(99)), kv("agentscope.analysis.bottleneck", s("cpu")),
        kv("str", s('quoted "é"')), kv("neg", i(-7)), kv("dbl", AnyValue(double_value=2.25)),
        kv("yes", AnyValue(bool_value=True)), kv("list", values), kv("map", kvlist),
        kv("raw", AnyValue(bytes_value=b"\x00\xffhi")), kv("empty", AnyValue())],
        kind=Span.SPAN_KIND_SERVER, status=Status(code=Status.STATUS_CODE_ERROR,
                                                  message="boom"),
        events=[Span.Event(time_unix_nano=T0 + 5, name="exception",
                           attributes=[kv("exception.type", s("ValueError"))])])
    child = span(2, parent=1, kind=Span.SPAN_KIND_CLIENT,
                 attributes=[kv("gen_ai.request.model", s("m")),
                             kv("gen_ai.operation.name", s("chat"))],
                 links=[Span.Link(trace_id=(5).to_bytes(16, "big"), span_id=(6).to_bytes(8, "big"),
                                  attributes=[kv("why", s("follows"))])])
    remote = span(3, parent=77, kind=Span.SPAN_KIND_CONSUMER)  # parent not in the data
    return request(root, child, remote)


def read_pb(data: bytes, path="x.pb"):
    errors: list = []
    records = list(otlp_proto.read(data, path, errors))
    return records, errors


def read_json_file(path: Path):
    errors: list = []
    return list(otlp.read(str(path), errors)), errors


# ---- protobuf against OTLP/JSON -----------------------------------------------------------
def test_protobuf_reads_as_its_otlp_json_does(tmp_path):
    req = rich_request()
    records, errors = read_pb(req.SerializeToString())
    assert not errors
    (tmp_path / "camel.json").write_text(MessageToJson(req))
    from_json, json_errors = read_json_file(tmp_path / "camel.json")
    assert not json_errors
    assert len(records) == 3
    for a, b in zip(records, from_json, strict=True):
        for field in a._fields:
            assert getattr(a, field) == getattr(b, field), field
    root, child, remote = records
    assert root.trace_id == "00000000000000000000000000000001"
    assert root.span_id == "0000000000000001" and root.parent_span_id is None
    assert (root.kind, root.status, root.status_message) == ("server", "error", "boom")
    assert (root.stage, root.thread_cpu_ns, root.tid) == ("task", 7000, 99)
    assert (root.service, root.host, root.pid) == ("svc", "h1", 42)
    assert root.attrs == {"str": 'quoted "é"', "neg": -7, "dbl": 2.25, "yes": True,
                          "list": ["a", 2, 0.5], "map": {"x": 1, "y": False},
                          "raw": "AP9oaQ==", "empty": None, "otel.scope.name": "lib"}
    assert root.events[0].name == "exception" and root.events[0].time_ns == T0 + 5
    assert root.events[0].attrs == {"exception.type": "ValueError"}
    assert child.kind == "client" and child.parent_span_id == "0000000000000001"
    assert child.links[0].trace_id.endswith("5") and child.links[0].attrs == {"why": "follows"}
    assert remote.kind == "consumer" and remote.parent_span_id == "000000000000004d"


def test_tracesdata_is_the_same_bytes():
    req = rich_request()
    data = TracesData(resource_spans=req.resource_spans).SerializeToString()
    assert data == req.SerializeToString()
    assert read_pb(data)[0] == read_pb(req.SerializeToString())[0]


def _sdk_spans():
    """Spans made by the OpenTelemetry SDK itself (every attribute type it allows)."""
    from opentelemetry.sdk.resources import Resource as SdkResource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Link, SpanKind, StatusCode
    from opentelemetry.trace import Status as SdkStatus

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=SdkResource.create(
        {"service.name": "agent", "host.name": "box", "process.pid": 4242}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("my.lib", "1.0")
    with tracer.start_as_current_span("task", attributes={
            "agentscope.stage": "task", "agentscope.page_faults.minor": 12,
            "agentscope.analysis.verdict": "dropped", "tags": ["a", "b"], "n": [1, 2],
            "f": 1.5, "ok": True, "blob": b"\x01\x02"}) as root:
        root.add_event("started", {"k": 3})
        with tracer.start_as_current_span("llm", kind=SpanKind.CLIENT,
                                          attributes={"gen_ai.request.model": "m"}) as llm:
            llm.set_status(SdkStatus(StatusCode.ERROR, "rate limited"))
        with tracer.start_as_current_span("tool", kind=SpanKind.INTERNAL,
                                          links=[Link(llm.get_span_context(), {"l": 1})]):
            pass
    provider.shutdown()
    return memory.get_finished_spans()


def test_the_sdk_encoder_and_its_json_give_the_same_records(tmp_path):
    encoder = pytest.importorskip("opentelemetry.exporter.otlp.proto.common.trace_encoder")
    req = encoder.encode_spans(_sdk_spans())
    records, errors = read_pb(req.SerializeToString())
    assert not errors and len(records) == 3
    (tmp_path / "sdk.json").write_text(MessageToJson(req))
    assert read_json_file(tmp_path / "sdk.json") == (records, [])
    task = next(r for r in records if r.name == "task")
    assert task.stage == "task" and task.minflt == 12 and task.pid == 4242
    assert task.attrs == {"tags": ["a", "b"], "n": [1, 2], "f": 1.5, "ok": True,
                          "blob": "AQI=", "otel.scope.name": "my.lib"}
    llm = next(r for r in records if r.name == "llm")
    assert (llm.kind, llm.status, llm.status_message) == ("client", "error", "rate limited")
    tool = next(r for r in records if r.name == "tool")
    assert tool.links[0].span_id == llm.span_id and tool.links[0].attrs == {"l": 1}


# ---- snake_case OTLP/JSON -------------------------------------------------------------------
def test_snake_case_json_reads_as_camel_case(tmp_path):
    req = rich_request()
    (tmp_path / "camel.json").write_text(MessageToJson(req))
    (tmp_path / "snake.json").write_text(MessageToJson(req, preserving_proto_field_name=True))
    snake_text = (tmp_path / "snake.json").read_text()
    assert '"resource_spans"' in snake_text and '"start_time_unix_nano"' in snake_text
    assert '"SPAN_KIND_SERVER"' in snake_text  # enum names, not numbers
    camel, camel_errors = read_json_file(tmp_path / "camel.json")
    snake, snake_errors = read_json_file(tmp_path / "snake.json")
    assert not camel_errors and not snake_errors
    assert snake == camel and len(snake) == 3


def test_snake_case_by_hand_every_field(tmp_path):
    """Hex ids, int64s as strings, dropped counts, every value spelling, in snake_case."""
    def doc(snake: bool):
        k = (lambda camel, sn: sn) if snake else (lambda camel, sn: camel)
        value = {k("arrayValue", "array_value"): {"values": [
            {k("stringValue", "string_value"): "a"}, {k("intValue", "int_value"): "5"},
            {k("kvlistValue", "kvlist_value"): {"values": [
                {"key": "b", "value": {k("boolValue", "bool_value"): True}},
                {"key": "d", "value": {k("doubleValue", "double_value"): 0.5}},
                {"key": "y", "value": {k("bytesValue", "bytes_value"): "AQI="}}]}}]}}
        return {k("resourceSpans", "resource_spans"): [{
            "resource": {"attributes": [{"key": "service.name",
                                         "value": {k("stringValue", "string_value"): "svc"}}],
                         k("droppedAttributesCount", "dropped_attributes_count"): 1},
            k("scopeSpans", "scope_spans"): [{"scope": {"name": "lib"}, "spans": [{
                k("traceId", "trace_id"): "5B8EFFF798038103D269B633813FC60C",
                k("spanId", "span_id"): "EEE19B7EC3C1B174",
                k("parentSpanId", "parent_span_id"): "EEE19B7EC3C1B173",
                k("traceState", "trace_state"): "a=b", "flags": 257, "name": "x",
                "kind": "SPAN_KIND_PRODUCER",
                k("startTimeUnixNano", "start_time_unix_nano"): str(T0),
                k("endTimeUnixNano", "end_time_unix_nano"): str(T0 + 10),
                "attributes": [{"key": "v", "value": value}],
                k("droppedAttributesCount", "dropped_attributes_count"): 2,
                "events": [{k("timeUnixNano", "time_unix_nano"): str(T0 + 1), "name": "e",
                            k("droppedAttributesCount", "dropped_attributes_count"): 0}],
                k("droppedEventsCount", "dropped_events_count"): 3,
                "links": [{k("traceId", "trace_id"): "1" * 32, k("spanId", "span_id"): "2" * 16,
                           k("droppedAttributesCount", "dropped_attributes_count"): 0}],
                k("droppedLinksCount", "dropped_links_count"): 4,
                "status": {"code": "STATUS_CODE_OK", "message": ""}}]}]}]}

    (tmp_path / "camel.json").write_text(json.dumps(doc(False)))
    (tmp_path / "snake.json").write_text(json.dumps(doc(True)))
    camel, _ = read_json_file(tmp_path / "camel.json")
    snake, errors = read_json_file(tmp_path / "snake.json")
    assert not errors and snake == camel and len(snake) == 1
    r = snake[0]
    assert (r.trace_id, r.span_id, r.parent_span_id) == (
        "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174", "eee19b7ec3c1b173")
    assert (r.kind, r.status, r.start_ns, r.end_ns) == ("producer", "ok", T0, T0 + 10)
    assert r.attrs["v"] == ["a", 5, {"b": True, "d": 0.5, "y": "AQI="}]
    assert r.events[0].time_ns == T0 + 1 and r.links[0].span_id == "2" * 16


def test_snake_case_json_loads_through_the_store(tmp_path):
    req = rich_request()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "export.json").write_text(MessageToJson(req))
    (tmp_path / "b" / "export.json").write_text(
        MessageToJson(req, preserving_proto_field_name=True))
    rows = []
    for d in ("a", "b"):
        with Store(None) as store:
            report = store.load(tmp_path / d)
            assert report.spans_added == 3 and not report.problems
            rows.append(store.query("SELECT * EXCLUDE (file_id) FROM spans ORDER BY span_id")
                        .fetchall())
    assert rows[0] == rows[1]


def test_snake_case_json_lines_load_through_the_store(tmp_path):
    pytest.importorskip("pyarrow")
    req = request(span(1), span(2, parent=1, attributes=[
        kv("agentscope.analysis.bottleneck", s("cpu"))]))
    line = json.loads(MessageToJson(req, preserving_proto_field_name=True))
    for sp in line["resource_spans"][0]["scope_spans"][0]["spans"]:  # hex ids, as OTLP says
        for key in ("trace_id", "span_id", "parent_span_id"):
            if key in sp:
                import base64

                sp[key] = base64.b64decode(sp[key]).hex()
    (tmp_path / "export.jsonl").write_text(json.dumps(line) + "\n")
    with Store(None) as store:
        report = store.load(tmp_path)
        attrs = store.query("SELECT attrs FROM spans ORDER BY span_id").fetchall()
    assert report.spans_added == 2
    assert all("agentscope.analysis" not in a for (a,) in attrs)


def test_derived_verdicts_are_dropped_on_import(tmp_path):
    req = request(span(1, attributes=[kv("agentscope.analysis.bottleneck", s("cpu")),
                                      kv("agentscope.analysis.confidence", AnyValue(
                                          double_value=0.9)),
                                      kv("agentscope.analysisx", s("kept")),
                                      kv("app.key", s("kept"))]))
    records, _ = read_pb(req.SerializeToString())
    (tmp_path / "e.json").write_text(MessageToJson(req))
    from_json, _ = read_json_file(tmp_path / "e.json")
    expected = {"agentscope.analysisx": "kept", "app.key": "kept", "otel.scope.name": "lib"}
    assert records[0].attrs == from_json[0].attrs == expected


# ---- bad input: problems, never exceptions -------------------------------------------------
def test_bad_spans_are_named_and_the_rest_loads():
    req = request(
        span(1),
        Span(trace_id=bytes(16), span_id=(2).to_bytes(8, "big"), name="zero trace",
             start_time_unix_nano=T0, end_time_unix_nano=T0 + 1),
        Span(trace_id=(1).to_bytes(16, "big"), span_id=b"\x01\x02", name="short span id",
             start_time_unix_nano=T0, end_time_unix_nano=T0 + 1),
        Span(trace_id=(1).to_bytes(16, "big"), span_id=(4).to_bytes(8, "big"), name="no times"),
        span(5, start=T0 + 10, end=T0),
        span(6, start=1_700_000_000_000, end=1_700_000_000_500))  # ms given as ns
    records, errors = read_pb(req.SerializeToString(), "bad.pb")
    assert [r.span_id for r in records] == ["0000000000000001"]
    assert len(errors) == 5 and all(isinstance(e, TraceFormatError) for e in errors)
    assert all(e.path == "bad.pb" for e in errors)
    reasons = [e.reason for e in errors]
    assert "trace_id missing" in reasons[0] and "'zero trace'" in reasons[0]
    assert "span_id missing" in reasons[1] and errors[1].span_id == "0102"
    assert "missing" in reasons[2] and errors[2].span_id == "0000000000000004"
    assert "before start" in reasons[3]
    assert "milliseconds" in reasons[4]


@pytest.mark.parametrize("data", [b"\x0a\xff\xff\xff\xff\x0f", b"\x0a\x05abc", b"\xff" * 40,
                                  b"\x0a\x02\x12\x10" + b"x" * 20, "é".encode() * 10])
def test_bad_bytes_are_one_problem_naming_the_file(data):
    records, errors = read_pb(data, "traces.pb")
    assert records == []
    assert len(errors) == 1 and errors[0].path == "traces.pb"
    assert errors[0].reason.startswith("not a valid OTLP protobuf message: ")


def test_no_cut_or_flipped_byte_raises():
    data = rich_request().SerializeToString()
    rng = random.Random(7)
    cases = [data[:n] for n in range(0, len(data), 7)]
    for _ in range(200):
        flipped = bytearray(data)
        flipped[rng.randrange(len(data))] = rng.randrange(256)
        cases.append(bytes(flipped))
    for case in cases:
        records, errors = read_pb(case)  # never raises
        assert all(isinstance(e, TraceFormatError) for e in errors)


# ---- the Collector file exporter's framed files ---------------------------------------------
def framed(*requests) -> bytes:
    out = b""
    for req in requests:
        body = req.SerializeToString()
        out += len(body).to_bytes(4, "big") + body
    return out


def test_framed_requests_are_read_in_order():
    data = framed(request(span(1)), request(span(2), service="other"), request())
    assert otlp_proto.sniff(data[:HEAD_BYTES], "traces")
    records, errors = read_pb(data)
    assert not errors
    assert [(r.span_id[-1], r.service) for r in records] == [("1", "svc"), ("2", "other")]


def test_a_torn_last_frame_is_reported_and_the_rest_loads():
    data = framed(request(span(1)), request(span(2)))[:-5]
    records, errors = read_pb(data, "f.binpb")
    assert [r.span_id[-1] for r in records] == ["1"]
    assert len(errors) == 1 and errors[0].torn and errors[0].line == 2
    assert "torn last request" in errors[0].reason


def test_a_bad_frame_names_its_number():
    good = request(span(1)).SerializeToString()
    data = len(good).to_bytes(4, "big") + good + (3).to_bytes(4, "big") + b"\x0a\x05x"
    records, errors = read_pb(data)
    assert len(records) == 1 and len(errors) == 1 and errors[0].line == 2


# ---- detection --------------------------------------------------------------------------
def test_the_importer_is_registered_first():
    assert ORDER[0] == "otlp_proto"
    importer = otlp_proto.IMPORTER
    assert importer.sniff is otlp_proto.sniff and importer.read is otlp_proto.read
    data = rich_request().SerializeToString()
    assert detect(data[:HEAD_BYTES], "whatever.bin") is importer


def test_sniff_takes_requests_whatever_their_name():
    data = rich_request().SerializeToString()
    for name in ("t.pb", "t.binpb", "t.protobuf", "t", "t.bin"):
        assert otlp_proto.sniff(data, name)
    assert otlp_proto.sniff(request().SerializeToString(), "t")  # no spans
    assert otlp_proto.sniff(ExportTraceServiceRequest(resource_spans=[ResourceSpans()])
                            .SerializeToString(), "t")


def test_sniff_takes_the_head_of_a_big_request():
    big = request(*[span(n, attributes=[kv("pad", s("x" * 300))]) for n in range(1, 400)])
    data = big.SerializeToString()
    assert len(data) > 2 * HEAD_BYTES
    assert otlp_proto.sniff(data[:HEAD_BYTES], "t")  # cut inside a span: more follows
    assert otlp_proto.sniff(framed(big)[:HEAD_BYTES], "t")
    # a whole file that is cut short is not a request (its name can still say it is one)
    assert not otlp_proto.sniff(data[:5000], "t")
    assert otlp_proto.sniff(data[:5000], "t.pb")


def test_sniff_refuses_text_and_other_binaries():
    refused = [b"", b"\n", b"\n\n\n\n\n\n\n\n", b"\n" * 70000, b'\n{"resourceSpans": []}',
               b"\n\x0aabc", b"\x00\x00\x00\x00", b"\x89PNG\r\n\x1a\n" + bytes(30),
               gzip.compress(b"x"), bytes(range(256)), b"\x0a\x7f" + bytes(127)]
    for head in refused:
        assert not otlp_proto.sniff(head, "t"), head[:20]
    # a proto of another schema: field 1 holds something that is not a ResourceSpans
    assert not otlp_proto.sniff(b"\x0a\x04\x08\x01\x10\x02", "graph")


def test_sniff_tells_traces_from_otlp_metrics_and_logs():
    """OTLP's metrics and logs requests have the same layout two levels down."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )
    from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
    from opentelemetry.proto.metrics.v1.metrics_pb2 import (
        Gauge,
        Metric,
        NumberDataPoint,
        ResourceMetrics,
        ScopeMetrics,
    )

    resource = Resource(attributes=[kv("service.name", s("svc"))])
    metrics = ExportMetricsServiceRequest(resource_metrics=[ResourceMetrics(
        resource=resource, scope_metrics=[ScopeMetrics(metrics=[Metric(
            name="gen_ai.client.tokens", description="tokens!",
            gauge=Gauge(data_points=[NumberDataPoint(as_int=5)]))])])])
    logs = ExportLogsServiceRequest(resource_logs=[ResourceLogs(
        resource=resource, scope_logs=[ScopeLogs(log_records=[LogRecord(
            time_unix_nano=T0, body=s("hello"))])])])
    for other in (metrics, logs):
        data = other.SerializeToString()
        assert not otlp_proto.sniff(data, "x") and not otlp_proto.sniff(framed(other), "x")
    assert otlp_proto.sniff(request(span(1)).SerializeToString(), "x")


def test_sniff_is_false_for_every_text_file_of_the_corpus():
    roots = [CORPUS, REPO / "sample_traces", REPO / "tests" / "golden"]
    files = [p for root in roots if root.is_dir() for p in root.rglob("*") if p.is_file()]
    assert len(files) > 20
    for path in files:
        head = path.read_bytes()[:HEAD_BYTES]
        if path.suffix in (".gz", ".zst", ".duckdb", ".wal"):
            continue
        assert not otlp_proto.sniff(head, path.name), path


def test_a_damaged_pb_file_is_reported_not_ignored():
    data = b"\x0a\x10" + bytes(range(1, 8))  # starts like a request, cut short
    assert otlp_proto.sniff(data, "traces.pb")  # the name breaks the tie
    assert not otlp_proto.sniff(data, "traces.dat")
    assert not otlp_proto.sniff(b'{"resourceSpans": []}', "traces.pb")  # text never
    records, errors = read_pb(data, "traces.pb")
    assert records == [] and len(errors) == 1
    assert str(errors[0]).startswith("traces.pb: not a valid OTLP protobuf message")


def test_every_accounting_attribute_becomes_its_column():
    from agentscope import semconv

    values = {col: 1000 + n for n, col in enumerate(semconv.ACCOUNTING_ATTRIBUTES)}
    req = request(span(1, attributes=[kv(semconv.ACCOUNTING_ATTRIBUTES[col], i(v))
                                      for col, v in values.items()]))
    (r,), errors = read_pb(req.SerializeToString())
    assert not errors and r.attrs == {"otel.scope.name": "lib"}
    assert {col: getattr(r, col) for col in values} == values


def test_protobuf_files_load_through_the_store_like_their_json(tmp_path):
    """Found by content whatever their names, gzip'ed or not, framed or not."""
    req = rich_request()
    for d in ("pb", "json"):
        (tmp_path / d).mkdir()
    (tmp_path / "pb" / "export.binpb").write_bytes(req.SerializeToString())
    (tmp_path / "pb" / "collector-file-exporter").write_bytes(
        framed(request(span(11, trace=2)), request(span(12, trace=2, parent=11))))
    (tmp_path / "pb" / "more.pb.gz").write_bytes(gzip.compress(
        request(span(21, trace=3)).SerializeToString()))
    (tmp_path / "json" / "export.json").write_text(MessageToJson(req))
    (tmp_path / "json" / "lines.jsonl").write_text("".join(
        MessageToJson(r, indent=None) + "\n" for r in (
            request(span(11, trace=2)), request(span(12, trace=2, parent=11)),
            request(span(21, trace=3)))))
    rows = []
    for d in ("pb", "json"):
        with Store(None) as store:
            report = store.load(tmp_path / d)
            assert report.spans_added == 6 and not report.problems, report.problems
            rows.append(store.query("SELECT * EXCLUDE (file_id) FROM spans ORDER BY span_id")
                        .fetchall())
    assert rows[0] == rows[1]


def test_hostile_numbers_stay_out_of_the_columns():
    """Values the store's INTEGER/BIGINT columns cannot hold are dropped, not raised on."""
    req = request(span(1, attributes=[
        kv("agentscope.cpu.thread_ns", AnyValue(double_value=float("inf"))),
        kv("agentscope.page_faults.minor", AnyValue(double_value=1e300)),
        kv("agentscope.children.count", i(1 << 40)), kv("thread.id", i(-(1 << 63))),
        kv("agentscope.cpu.children_ns", AnyValue(double_value=2.9))]),
        span(2, end=(1 << 64) - 1))
    req.resource_spans[0].resource.attributes[2].value.int_value = 1 << 40  # process.pid
    (r,), errors = read_pb(req.SerializeToString())
    assert (r.thread_cpu_ns, r.minflt, r.children, r.pid) == (None, None, None, None)
    assert (r.tid, r.child_cpu_ns) == (-(1 << 63), 2)
    assert len(errors) == 1 and "64-bit" in errors[0].reason


def test_our_spans_survive_a_round_trip_with_derived_verdicts(tmp_path):
    """Our records, as `export otlp` writes them (stage and accounting as attributes, verdicts
    under agentscope.analysis.), read back as the same records: JSON and protobuf."""
    import sys

    from google.protobuf.json_format import ParseDict

    from agentscope import semconv

    sys.path.insert(0, str(REPO / "benchmarks"))
    from gen_traces import generate

    originals = list(generate(2, spans_per_task=20))

    def attr(key, value):
        kind = "intValue" if isinstance(value, int) else "stringValue"
        return {"key": key, "value": {kind: str(value) if kind == "intValue" else value}}

    spans = []
    for r in originals:
        attrs = [attr(k, v) for k, v in r.attrs.items()] + [attr(semconv.STAGE, r.stage)]
        attrs += [attr(a, getattr(r, c)) for c, a in semconv.ACCOUNTING_ATTRIBUTES.items()
                  if getattr(r, c) is not None]
        attrs += [attr("agentscope.analysis.bottleneck", "cpu"),
                  attr("agentscope.analysis.critical_path_ns", 5)]
        span = {"traceId": r.trace_id, "spanId": r.span_id, "name": r.name,
                "startTimeUnixNano": str(r.start_ns), "endTimeUnixNano": str(r.end_ns),
                "kind": 1, "attributes": attrs}
        if r.parent_span_id:
            span["parentSpanId"] = r.parent_span_id
        spans.append(span)
    resource = {"attributes": [attr("service.name", "bench"), attr("host.name", "h"),
                               attr("process.pid", 1)]}
    doc = {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": spans}]}]}
    (tmp_path / "export.json").write_text(json.dumps(doc))
    from_json, errors = read_json_file(tmp_path / "export.json")
    assert not errors and from_json == originals
    import base64

    for span in spans:  # protobuf's generic JSON parser wants base64 ids
        for key in ("traceId", "spanId", "parentSpanId"):
            if key in span:
                span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    data = ParseDict(doc, ExportTraceServiceRequest()).SerializeToString()
    assert read_pb(data) == (originals, [])
