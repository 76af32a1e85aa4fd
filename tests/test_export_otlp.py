"""`agentscope export otlp`: every span of a store written as OTLP/JSON traces, with the analysis
as agentscope.analysis.* attributes. Loading the file again gives the same `spans` table and the
same analysis (import -> export -> import is lossless)."""

from __future__ import annotations

import gzip
import http.server
import json
import shutil
import socket
import threading

import pytest
from click.testing import CliRunner

from agentscope.analysis import analyze
from agentscope.analyzers.evidence import CLASSES
from agentscope.cli import main
from agentscope.exporters import otlp_traces
from agentscope.exporters.otlp_traces import PREFIX, traces_url

from .conftest import CORPUS, REPO

SAMPLES = REPO / "sample_traces"
DERIVED = CORPUS / "agent_traces" / "derived_otlp"
JSON_COLUMNS = ("attrs", "events", "links")


def _copy(src, dst):
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".agentscope"))
    return dst


def _export(trace_dir, out, *extra, db=None):
    db = db or str(trace_dir.parent / (trace_dir.name + ".duckdb"))
    result = CliRunner().invoke(main, ["export", "otlp", str(trace_dir), "--out", str(out),
                                       "--db", db, *extra])
    assert result.exit_code == 0, result.output
    return result


def _spans(analysis):
    """The spans table, every column but file_id, JSON columns parsed, in key order."""
    columns, rows = analysis.query_rows(
        "SELECT * EXCLUDE (file_id) FROM spans ORDER BY trace_id, span_id")
    out = []
    for row in rows:
        d = dict(zip(columns, row))
        for c in JSON_COLUMNS:
            d[c] = json.loads(d[c]) if d[c] is not None else None
        out.append(d)
    return out


def _report(analysis):
    """The analysis as the JSON report has it, less what the load itself did."""
    doc = analysis.to_dict()
    doc["summary"].pop("load")
    return doc


def _reimport(exported, fresh, counters_from=None):
    """A fresh trace directory holding the exported file (and the counter samples of
    ``counters_from``: spans are what OTLP traces carry), analysed in memory."""
    fresh.mkdir()
    shutil.copy(exported, fresh / "exported.otlp.jsonl")
    if counters_from is not None:
        for f in counters_from.rglob("samples-*.jsonl"):
            target = fresh / "counters" / f.relative_to(counters_from)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, target)
    return analyze(fresh, db=":memory:")


def _lines(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _exported_spans(requests):
    """Every span of the requests: (resource attributes, scope name, span)."""
    for req in requests:
        for rs in req["resourceSpans"]:
            resource = {kv["key"]: kv["value"] for kv in rs["resource"]["attributes"]}
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    yield resource, ss.get("scope", {}).get("name"), span


def _attrs(span):
    return {kv["key"]: next(iter(kv["value"].values()), None) for kv in span["attributes"]}


@pytest.mark.parametrize("source", [SAMPLES, DERIVED], ids=["sample_traces", "derived_otlp"])
def test_import_export_import_is_lossless(source, tmp_path):
    src = _copy(source, tmp_path / "src")
    _export(src, tmp_path / "out.otlp.jsonl")
    with analyze(src, db=":memory:") as before, \
            _reimport(tmp_path / "out.otlp.jsonl", tmp_path / "again", src) as after:
        assert not before.problems and not after.problems, after.problems
        spans = _spans(before)
        assert len(spans) > 30
        # the OTLP readers drop agentscope.analysis.* on import (formats/otlp_common.py;
        # the pyarrow fast path, store/otlp_arrow.py, takes files with no array values)
        assert _spans(after) == spans
        assert _report(after) == _report(before)
        assert len(before.task_results) > 5


def test_the_verdict_is_on_each_task_root_and_the_critical_path_on_its_spans(tmp_path):
    src = _copy(SAMPLES, tmp_path / "src")
    _export(src, tmp_path / "out.jsonl", db=str(tmp_path / "a.duckdb"))
    exported = list(_exported_spans(_lines(tmp_path / "out.jsonl")))
    with analyze(src, db=str(tmp_path / "a.duckdb")) as a:
        n_spans = a.query_rows("SELECT count(*) FROM spans")[1][0][0]
        assert len(exported) == n_spans
        by_key = {(s["traceId"], s["spanId"]): _attrs(s) for _, _, s in exported}
        names = {(s["traceId"], s["spanId"]): s["name"] for _, _, s in exported}
        roots = {k: v for k, v in by_key.items() if PREFIX + "bottleneck" in v}
        assert len(roots) == len(a.task_results)
        for t in a.task_results:
            (key, attrs), = [(k, v) for k, v in roots.items() if k[0] == t.trace_id]
            assert names[key] == t.name
            assert attrs[PREFIX + "bottleneck"] == t.bottleneck
            assert attrs[PREFIX + "confidence"] == pytest.approx(t.confidence)
            for c in CLASSES:
                assert attrs[PREFIX + "share." + c] == pytest.approx(t.shares[c])
            assert attrs[PREFIX + "task_evidence"].split("\n") == list(t.evidence)
        assert {t.bottleneck for t in a.task_results} >= {"cpu", "io", "queue"}

        cp = a.critical_path
        cp = cp[cp.span_id.notna()]
        held = cp.groupby(["trace_id", "span_id"]).duration_s.sum()
        on_path = {k: v for k, v in by_key.items() if PREFIX + "critical_path_s" in v}
        assert set(on_path) == set(held.index)
        for key, seconds in held.items():
            attrs = on_path[key]
            assert attrs[PREFIX + "critical_path_s"] == pytest.approx(seconds, abs=1e-6)
            classes = set(cp[(cp.trace_id == key[0]) & (cp.span_id == key[1])]["class"])
            assert attrs[PREFIX + "class"] in classes
            if len(classes) > 1:
                listed = [v["stringValue"] for v in next(
                    kv["value"]["arrayValue"]["values"] for s in [_span(exported, key)]
                    for kv in s["attributes"] if kv["key"] == PREFIX + "classes")]
                assert set(listed) == classes and listed[0] == attrs[PREFIX + "class"]
            else:
                assert PREFIX + "classes" not in attrs
            bases = set(cp[(cp.trace_id == key[0]) & (cp.span_id == key[1])]["basis"])
            assert attrs[PREFIX + "class_from"] in bases  # the section's own basis
            assert 0 < attrs[PREFIX + "class_confidence"] <= 1
        basis = {v[PREFIX + "class_from"] for v in on_path.values()}
        # every sample span has resource accounting, and an inference at a local model server
        # with no counters waits on its endpoint (io, measured), not an assumed accelerator:
        # nothing here rests on a label (labels: test_classes_from_labels_are_marked)
        assert basis == {"measured"}
        endpoint = [v for v in on_path.values()
                    if "waiting on the model endpoint" in v[PREFIX + "evidence"]]
        assert endpoint and all(v[PREFIX + "class_from"] == "measured" for v in endpoint)
        assert not any(v[PREFIX + "class"] == "gpu" for v in endpoint)
        off = [v for k, v in by_key.items() if k not in on_path]
        assert off and not any(k.startswith(PREFIX + "class") for v in off for k in v)


def _span(exported, key):
    return next(s for _, _, s in exported if (s["traceId"], s["spanId"]) == key)


def test_classes_from_labels_are_marked(tmp_path):
    """Foreign spans have no resource accounting: their classes come from their stage."""
    src = _copy(DERIVED, tmp_path / "src")
    _export(src, tmp_path / "out.jsonl")
    spans = [(scope, s) for _, scope, s in _exported_spans(_lines(tmp_path / "out.jsonl"))]
    on_path = [_attrs(s) for _, s in spans if PREFIX + "class" in _attrs(s)]
    assert on_path and {a[PREFIX + "class_from"] for a in on_path} == {"label", "untraced"}
    assert all("no resource accounting" in a[PREFIX + "evidence"] for a in on_path)
    # an agent's own time between its children, unmeasured: untraced, at confidence 0
    for a in on_path:
        assert (a[PREFIX + "class_from"] == "untraced") == (a[PREFIX + "class"] == "untraced")
    # their stages came from conventions: not frozen into agentscope.stage
    assert not any("agentscope.stage" in _attrs(s) for _, s in spans)
    assert {scope for scope, _ in spans} == {"any_agent"}
    assert not any("otel.scope.name" in _attrs(s) for _, s in spans)


def test_batches_group_spans_by_resource_and_gzip_is_the_same(tmp_path):
    src = _copy(SAMPLES / "mixed-fleet", tmp_path / "src")
    _export(src, tmp_path / "plain.jsonl", "--batch", "7")
    _export(src, tmp_path / "zipped.jsonl.gz", "--batch", "7")
    raw = (tmp_path / "zipped.jsonl.gz").read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    assert gzip.decompress(raw) == (tmp_path / "plain.jsonl").read_bytes()
    requests = _lines(tmp_path / "plain.jsonl")
    counts = [len(list(_exported_spans([r]))) for r in requests]
    assert max(counts) == 7 and all(0 < c <= 7 for c in counts) and counts[-1] <= 7
    for req in requests:
        resources = [json.dumps(rs["resource"], sort_keys=True) for rs in req["resourceSpans"]]
        assert len(resources) == len(set(resources))
        for rs in req["resourceSpans"]:
            keys = {kv["key"] for kv in rs["resource"]["attributes"]}
            assert keys == {"service.name", "host.name", "process.pid"}
            pid = next(kv for kv in rs["resource"]["attributes"] if kv["key"] == "process.pid")
            assert isinstance(pid["value"]["intValue"], str)
    with analyze(src, db=":memory:") as a:
        assert sum(counts) == a.query_rows("SELECT count(*) FROM spans")[1][0][0]
        (tmp_path / "gz").mkdir()
        shutil.copy(tmp_path / "zipped.jsonl.gz", tmp_path / "gz" / "spans.otlp.jsonl.gz")
        with analyze(tmp_path / "gz", db=":memory:") as b:  # the .gz file loads as it is
            assert not b.problems and _spans(b) == _spans(a)


def test_spans_are_read_from_the_store_a_batch_of_traces_at_a_time(tmp_path, monkeypatch):
    """The spans are read in (trace_id, span_id) order a batch of traces per statement (each
    statement sorts its batch alone), not a sorted page of the whole table per statement
    (which read the whole table for each page): the same requests either way."""
    from agentscope.store.duckdb_store import Store

    src = _copy(SAMPLES / "io", tmp_path / "src")
    with analyze(src, db=":memory:") as a:
        whole = list(otlp_traces.requests(a, batch=4))
        monkeypatch.setattr(otlp_traces, "PAGE_SPANS", 10)  # fetched 8 spans at a time
        monkeypatch.setattr(otlp_traces, "TRACE_BATCH_SPANS", 10)
        statements = []
        real = Store._fetched
        monkeypatch.setattr(Store, "_fetched", lambda self, sql, params, page: (
            statements.append((sql, params, page)) or real(self, sql, params, page)))
        paged = list(otlp_traces.requests(a, batch=4))
        batches = a.query_rows("SELECT count(DISTINCT trace_id) FROM spans")[1][0][0]
        with pytest.raises(ValueError, match="only spans"):
            list(a.table_rows("samples", ["ts_ns"], by_trace=10))
    assert paged == whole
    n = sum(1 for _ in _exported_spans(whole))
    keys = [(s["traceId"], s["spanId"]) for _, _, s in _exported_spans(whole)]
    assert len(set(keys)) == len(keys) == n and keys == sorted(keys)
    # (traces of about 10 spans or more: a statement each, every one sorted by trace)
    assert 1 < len(statements) <= batches
    assert all("ORDER BY trace_id, span_id" in sql and page == 8 for sql, _, page in statements)
    bounds = [(p["lo"], p["hi"]) for _, p, _ in statements]
    assert bounds[0][0] is None and bounds[-1][1] is None
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))


def test_otlp_json_encoding(tmp_path):
    """camelCase, lowercase hex ids, int64 as strings, kinds and status codes as integers."""
    src = _copy(SAMPLES / "example", tmp_path / "src")
    _export(src, tmp_path / "out.jsonl")
    spans = [s for _, _, s in _exported_spans(_lines(tmp_path / "out.jsonl"))]
    for s in spans:
        assert len(s["traceId"]) == 32 and len(s["spanId"]) == 16
        assert int(s["traceId"], 16) and s["traceId"] == s["traceId"].lower()
        assert isinstance(s["startTimeUnixNano"], str) and isinstance(s["kind"], int)
        assert int(s["endTimeUnixNano"]) >= int(s["startTimeUnixNano"])
        for kv in s["attributes"]:
            assert set(kv) == {"key", "value"} and len(kv["value"]) == 1
            if "intValue" in kv["value"]:
                assert isinstance(kv["value"]["intValue"], str)
    assert any("parentSpanId" in s for s in spans)
    stages = [_attrs(s).get("agentscope.stage") for s in spans]
    assert all(stages) and "task" in stages  # our own instrumentation's stages
    assert all(_attrs(s).get("agentscope.cpu.thread_ns") is not None for s in spans)


HOSTILE = ['quote " and \' apostrophe', "new\nline\r\n and tab\t", "nul \x00 bell \x07 esc \x1b",
           "</script><script>alert(1)</script>", "\u2028\u2029 line separators", "emoji 🧨 ü",
           "back\\slash \\u0041 {\"json\": 1}"]


def _hostile_otlp():
    def s(v):
        return {"stringValue": v}

    trace = "5" * 32
    spans = [{
        "traceId": trace, "spanId": "a" * 16, "name": HOSTILE[3], "kind": 2,
        "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000002000000000",
        "attributes": [{"key": f"k{i} {v}", "value": s(v)} for i, v in enumerate(HOSTILE)]
        + [{"key": "list", "value": {"arrayValue": {"values": [s(HOSTILE[1]), {"intValue": "3"},
                                                               {"doubleValue": 0.5}]}}},
           {"key": "map", "value": {"kvlistValue": {"values": [
               {"key": HOSTILE[0], "value": {"boolValue": True}}]}}},
           {"key": "gen_ai.operation.name", "value": s("invoke_agent")},
           {"key": "big", "value": {"intValue": "9223372036854775807"}},
           {"key": "agentscope.stage", "value": s("task")}],
        "status": {"code": 2, "message": HOSTILE[2]},
        "events": [{"timeUnixNano": "1700000001000000000", "name": HOSTILE[1],
                    "attributes": [{"key": "exception.message", "value": s(HOSTILE[4])}]}],
    }]
    for i, name in enumerate(HOSTILE):
        spans.append({
            "traceId": trace, "spanId": f"{i + 1:016x}", "parentSpanId": "a" * 16,
            "name": name, "kind": 3, "startTimeUnixNano": str(1700000000000000000 + i * 10**8),
            "endTimeUnixNano": str(1700000000000000000 + (i + 1) * 10**8),
            "attributes": [{"key": "http.request.method", "value": s("GET")},
                           {"key": "url.full", "value": s(name)}],
            "links": [{"traceId": "6" * 32, "spanId": "7" * 16,
                       "attributes": [{"key": "why", "value": s(name)}]}],
            "status": {"code": 1}})
    return {"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": s(HOSTILE[5])},
                                    {"key": "host.name", "value": s(HOSTILE[0])},
                                    {"key": "process.pid", "value": {"intValue": "42"}}]},
        "scopeSpans": [{"scope": {"name": HOSTILE[6]}, "spans": spans}]}]}


def test_hostile_names_and_values_round_trip_as_data(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "hostile.json").write_text(json.dumps(_hostile_otlp()))
    _export(src, tmp_path / "out.jsonl", "--batch", "3")
    text = (tmp_path / "out.jsonl").read_text(encoding="utf-8")
    assert text.isascii() and "</script>" in text  # data, escaped as JSON wants
    assert text.count("\n") == len(_lines(tmp_path / "out.jsonl")) == 3  # 8 spans, 3 a line
    with analyze(src, db=":memory:") as before, \
            _reimport(tmp_path / "out.jsonl", tmp_path / "again") as after:
        assert not before.problems and not after.problems, after.problems
        spans = _spans(before)
        assert {s["name"] for s in spans} == set(HOSTILE)
        parent = next(s for s in spans if s["span_id"] == "a" * 16)
        assert parent["events"] and parent["status"] == "error"
        assert parent["status_message"] == HOSTILE[2] and parent["stage_from"] == "agentscope"
        assert all(s["links"] and s["stage_from"] == "convention" for s in spans
                   if s is not parent)
        assert _spans(after) == spans
        assert _report(after) == _report(before)


class _Receiver:
    """A local OTLP/HTTP endpoint that records every POST; ``answer(headers, body)`` gives
    the status and the body of the reply."""

    def __init__(self, status=200, reply=b"{}", answer=None):
        got = self.got = []
        answer = answer or (lambda headers, body: (status, reply))

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                got.append((self.path, dict(self.headers), body))
                code, data = answer(self.headers, body)
                self.send_response(code)
                self.send_header("Content-Type", self.headers["Content-Type"])
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _send(src, tmp_path, endpoint, *extra):
    return CliRunner().invoke(main, ["export", "otlp", str(src), "--endpoint", endpoint,
                                     "--db", str(tmp_path / "db.duckdb"), *extra])


def test_endpoint_gets_the_requests_as_otlp_json(tmp_path):
    src = _copy(SAMPLES / "io", tmp_path / "src")
    with _Receiver() as rx:
        result = _send(src, tmp_path, rx.url, "--batch", "10", "--header", "X-Key = secret")
    assert result.exit_code == 0, result.output
    assert rx.got
    total = 0
    for path, headers, body in rx.got:
        assert path == "/v1/traces"  # appended to a URL with no path
        assert headers["Content-Type"] == "application/json" and headers["X-Key"] == "secret"
        n = len(list(_exported_spans([json.loads(body)])))
        assert 0 < n <= 10
        total += n
    with analyze(src, db=":memory:") as a:
        assert total == a.query_rows("SELECT count(*) FROM spans")[1][0][0]
    assert f"sent {total} spans in {len(rx.got)} requests to {rx.url}/v1/traces" in result.output


def test_an_endpoint_with_a_path_is_used_as_given_and_partial_success_is_reported(tmp_path):
    src = _copy(SAMPLES / "example", tmp_path / "src")
    reply = json.dumps({"partialSuccess": {"rejectedSpans": "2", "errorMessage": "x"}}).encode()
    with _Receiver(reply=reply) as rx:
        result = _send(src, tmp_path, rx.url + "/otlp/v1/traces")
    assert {p for p, _, _ in rx.got} == {"/otlp/v1/traces"}
    assert result.exit_code == 1 and "rejected 2" in result.output


def test_an_endpoint_that_takes_protobuf_only_gets_protobuf(tmp_path):
    """Phoenix answers 415 to OTLP/JSON: the same requests go again as protobuf."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    def answer(headers, body):
        if headers["Content-Type"] != "application/x-protobuf":
            return 415, b"Unsupported content type"
        reply = ExportTraceServiceResponse()
        reply.partial_success.rejected_spans = 0
        return 200, reply.SerializeToString()

    src = _copy(SAMPLES / "example", tmp_path / "src")
    _export(src, tmp_path / "out.jsonl", "--batch", "4", db=str(tmp_path / "db.duckdb"))
    with _Receiver(answer=answer) as rx:
        result = _send(src, tmp_path, rx.url, "--batch", "4")
    assert result.exit_code == 0, result.output
    types = [h["Content-Type"] for _, h, _ in rx.got]
    assert types[0] == "application/json" and set(types[1:]) == {"application/x-protobuf"}
    from google.protobuf.json_format import MessageToDict

    expected = _lines(tmp_path / "out.jsonl")
    got = [ExportTraceServiceRequest.FromString(b) for _, h, b in rx.got[1:]]
    assert len(got) == len(expected)
    for req, want in zip(got, expected):
        spans = [s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
        wanted = [s for _, _, s in _exported_spans([want])]
        assert [(s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.name,
                 s.start_time_unix_nano) for s in spans] == \
            [(w["traceId"], w["spanId"], w.get("parentSpanId", ""), w["name"],
              int(w["startTimeUnixNano"])) for w in wanted]
        assert [MessageToDict(s)["attributes"] for s in spans] == \
            [w["attributes"] for w in wanted]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_refused_endpoint_fails_clearly(tmp_path):
    src = _copy(SAMPLES / "example", tmp_path / "src")
    url = f"http://127.0.0.1:{_free_port()}"
    result = _send(src, tmp_path, url)
    assert result.exit_code == 1
    assert f"could not send to {url}/v1/traces" in result.output
    assert "Traceback" not in result.output


def test_an_http_error_fails_clearly(tmp_path):
    src = _copy(SAMPLES / "example", tmp_path / "src")
    with _Receiver(status=503, reply=b"overloaded") as rx:
        result = _send(src, tmp_path, rx.url)
    assert result.exit_code == 1 and "HTTP 503" in result.output and len(rx.got) == 1


@pytest.mark.parametrize("args, message", [
    ([], "one of --out FILE or --endpoint URL"),
    (["--out", "x.jsonl", "--endpoint", "http://h:4318"], "one of --out FILE or --endpoint"),
    (["--out", "x.jsonl", "--header", "A=b"], "--header goes with --endpoint"),
    (["--endpoint", "http://h:4318", "--header", "nokey"], "KEY=VALUE"),
    (["--out", "x.jsonl", "--batch", "0"], "--batch"),
])
def test_usage_errors(args, message, tmp_path):
    result = CliRunner().invoke(main, ["export", "otlp", str(tmp_path), *args])
    assert result.exit_code == 2 and message in result.output


def test_an_unwritable_file_fails_clearly(tmp_path):
    src = _copy(SAMPLES / "example", tmp_path / "src")
    result = CliRunner().invoke(main, ["export", "otlp", str(src), "--out",
                                       str(tmp_path / "missing" / "out.jsonl"),
                                       "--db", str(tmp_path / "db.duckdb")])
    assert result.exit_code == 1 and "could not write" in result.output


def test_traces_url():
    assert traces_url("http://localhost:4318") == "http://localhost:4318/v1/traces"
    assert traces_url("http://localhost:4318/") == "http://localhost:4318/v1/traces"
    assert traces_url("https://h/otlp/v1/traces") == "https://h/otlp/v1/traces"
    assert traces_url("http://h:4318?x=1") == "http://h:4318/v1/traces?x=1"


def test_any_value():
    av = otlp_traces.any_value
    assert av(True) == {"boolValue": True} and av(3) == {"intValue": "3"}
    assert av(0.5) == {"doubleValue": 0.5} and av(None) == {}
    assert av(float("nan")) == {"doubleValue": "NaN"}
    assert av(float("-inf")) == {"doubleValue": "-Infinity"}
    assert av([1, "a"]) == {"arrayValue": {"values": [{"intValue": "1"},
                                                      {"stringValue": "a"}]}}
    assert av({"k": False}) == {"kvlistValue": {"values": [{"key": "k",
                                                            "value": {"boolValue": False}}]}}
