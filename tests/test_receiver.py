"""The live OTLP receiver (collectors/receiver.py, `agentscope receive`): the real
OpenTelemetry exporters send to it, every acknowledged span is on disk, and what it wrote
analyses exactly as the same spans read from an OTLP/JSON file."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from google.protobuf.json_format import MessageToJson
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb

from agentscope.analysis import analyze
from agentscope.cli import main
from agentscope.collectors import receiver as rx
from agentscope.collectors.receiver import Receiver
from agentscope.store.tracedir import scan

from .conftest import child_env

T0 = 1_765_000_000_000_000_000


# ---- helpers ----------------------------------------------------------------------------
def post(url, body: bytes, content_type=rx.PROTOBUF, encoding=None, method="POST"):
    """(status, headers, body) of one request; 4xx/5xx are answers too."""
    headers = {"Content-Type": content_type}
    if encoding:
        headers["Content-Encoding"] = encoding
    req = urllib.request.Request(url, data=body if method == "POST" else None, method=method,
                                 headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def json_request(first: int, n: int, trace: int = 1) -> dict:
    """An OTLP/JSON request of ``n`` spans with ids ``first`` ... (span ids, hex)."""
    spans = [{"traceId": f"{trace:032x}", "spanId": f"{k:016x}", "name": f"s{k}",
              "startTimeUnixNano": str(T0 + k), "endTimeUnixNano": str(T0 + k + 10),
              "attributes": [{"key": "k", "value": {"intValue": str(k)}}]}
             for k in range(first, first + n)]
    return {"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "svc"}}]},
        "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}]}


def proto_request(first: int, n: int, trace: int = 1) -> bytes:
    from google.protobuf.json_format import ParseDict

    doc = json_request(first, n, trace)
    for sp in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]:  # ParseDict wants base64
        import base64

        sp["traceId"] = base64.b64encode(bytes.fromhex(sp["traceId"])).decode()
        sp["spanId"] = base64.b64encode(bytes.fromhex(sp["spanId"])).decode()
    return ParseDict(doc, pb.ExportTraceServiceRequest()).SerializeToString()


def ids_on_disk(directory) -> tuple:
    result = scan(directory)
    return {(s.trace_id, s.span_id) for s in result.spans}, result


@pytest.fixture
def receiver(tmp_path):
    r = Receiver(tmp_path / "rx", port=0).start()
    yield r
    r.stop()


# ---- the real OpenTelemetry SDK exporters ------------------------------------------------
class Recording:
    """A span exporter that remembers which spans the wrapped exporter got acknowledged."""

    def __init__(self, inner) -> None:
        self.inner, self.acked, self.failed = inner, [], 0

    def export(self, spans):
        from opentelemetry.sdk.trace.export import SpanExportResult

        result = self.inner.export(spans)
        if result == SpanExportResult.SUCCESS:
            self.acked.extend(_key(s) for s in spans)
        else:
            self.failed += len(spans)
        return result

    def shutdown(self):
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _key(span) -> tuple:
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def _agent_work(tracer, tasks: int, steps: int, worker: int) -> None:
    """``tasks`` tasks of 1 + 3 * (1 + steps) spans each: a root, three agents, their steps."""
    from opentelemetry.trace import SpanKind

    for t in range(tasks):
        with tracer.start_as_current_span(f"task-{t % 4}", attributes={
                "agentscope.stage": "task", "worker": worker}):
            for a in range(3):
                with tracer.start_as_current_span(f"agent-{a}", attributes={
                        "gen_ai.operation.name": "invoke_agent"}):
                    for k in range(steps):
                        if k % 2:
                            with tracer.start_as_current_span("chat", kind=SpanKind.CLIENT,
                                                              attributes={
                                    "gen_ai.operation.name": "chat",
                                    "gen_ai.request.model": "m", "step": k}):
                                pass
                        else:
                            with tracer.start_as_current_span("tool", attributes={
                                    "gen_ai.operation.name": "execute_tool",
                                    "gen_ai.tool.name": f"t{k}"}):
                                sum(range(200))


def _send_with_the_sdk(exporter, threads: int, tasks: int, steps: int):
    """Spans made in ``threads`` threads, sent through a BatchSpanProcessor to ``exporter``
    and kept by an InMemorySpanExporter; returns (the recording exporter, the spans)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    recording = Recording(exporter)
    provider = TracerProvider(resource=Resource.create({"service.name": "agent-fleet"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(BatchSpanProcessor(recording, max_queue_size=1 << 16,
                                                   max_export_batch_size=512,
                                                   schedule_delay_millis=100))
    tracer = provider.get_tracer("agents", "1.0")
    workers = [threading.Thread(target=_agent_work, args=(tracer, tasks, steps, w))
               for w in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    provider.shutdown()  # flushes the batch processor: every span exported (or failed)
    return recording, memory.get_finished_spans()


def _analysis(directory) -> tuple:
    a = analyze(directory, db=":memory:")
    try:
        doc = a.to_dict()
        tasks = a.tasks.sort_values("trace_id").reset_index(drop=True)
        path = a.critical_path.sort_values(list(a.critical_path.columns[:3])).reset_index(
            drop=True)
        return doc, tasks, path, a.problems
    finally:
        a.close()


def _same_analysis(received: Path, spans, tmp_path: Path) -> None:
    """The analysis of what the receiver wrote equals that of ``spans`` (the same spans, kept
    in memory by the SDK) written to an OTLP/JSON file in another directory."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    baseline = tmp_path / "baseline"
    baseline.mkdir()
    (baseline / "export.json").write_text(MessageToJson(encode_spans(spans)))
    got_doc, got_tasks, got_path, got_problems = _analysis(received)
    want_doc, want_tasks, want_path, want_problems = _analysis(baseline)
    assert not got_problems and not want_problems
    assert got_doc["summary"]["spans"] == len(spans)
    roots = sum(1 for sp in spans if sp.parent is None)
    assert len(got_doc["tasks"]) == roots > 0 and len(got_path) >= roots
    key = lambda t: t["trace_id"]  # noqa: E731
    assert sorted(got_doc["tasks"], key=key) == sorted(want_doc["tasks"], key=key)
    assert got_doc["summary"] == want_doc["summary"]
    assert got_tasks.equals(want_tasks)
    assert got_path.equals(want_path)


def test_the_sdk_http_exporter_sends_10000_spans_and_every_one_is_on_disk(receiver, tmp_path):
    http_exporter = pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    exporter = http_exporter.OTLPSpanExporter(endpoint=receiver.url, timeout=30)
    recording, spans = _send_with_the_sdk(exporter, threads=4, tasks=25, steps=32)
    assert len(spans) == 10_000
    receiver.stop()
    assert recording.failed == 0 and len(recording.acked) == 10_000
    on_disk, result = ids_on_disk(receiver.out_dir)
    assert not result.problems and result.duplicates == 0
    assert set(recording.acked) <= on_disk and len(on_disk) == 10_000
    assert receiver.spans_accepted == 10_000 and receiver.spans_rejected == 0
    assert receiver.requests >= 10_000 // 512 and receiver.bytes_received > 0
    _same_analysis(receiver.out_dir, spans, tmp_path)


def test_the_sdk_grpc_exporter_sends_through_the_grpc_port(tmp_path):
    pytest.importorskip("grpc")
    grpc_exporter = pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc.trace_exporter")
    with Receiver(tmp_path / "rx", port=0, grpc_port=0) as receiver:
        exporter = grpc_exporter.OTLPSpanExporter(
            endpoint=f"127.0.0.1:{receiver.grpc_port}", insecure=True, timeout=30)
        recording, spans = _send_with_the_sdk(exporter, threads=2, tasks=5, steps=32)
    assert len(spans) == 1000 and recording.failed == 0 and len(recording.acked) == 1000
    on_disk, result = ids_on_disk(receiver.out_dir)
    assert set(recording.acked) == on_disk and not result.problems
    _same_analysis(receiver.out_dir, spans, tmp_path)


def test_grpc_bad_bytes_are_invalid_argument(tmp_path):
    grpc = pytest.importorskip("grpc")
    with Receiver(tmp_path / "rx", port=0, grpc_port=0) as receiver:
        with grpc.insecure_channel(f"127.0.0.1:{receiver.grpc_port}") as channel:
            export = channel.unary_unary(f"/{rx.GRPC_SERVICE}/Export")
            with pytest.raises(grpc.RpcError) as bad:
                export(b"\x0a\x05abc", timeout=10)
            assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "not a valid OTLP protobuf message" in bad.value.details()
            answer = pb.ExportTraceServiceResponse.FromString(
                export(proto_request(1, 3), timeout=10))
            assert not answer.HasField("partial_success")
    assert receiver.spans_accepted == 3 and receiver.bad_requests == 1


# ---- curl and the response rules ---------------------------------------------------------
def _curl(url, path: Path, content_type: str, encoding=None) -> tuple:
    """(status, body) of a POST by curl, or by urllib where there is no curl."""
    if shutil.which("curl") is None:
        status, _, body = post(url, path.read_bytes(), content_type, encoding)
        return status, body
    cmd = ["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", "-X", "POST",
           "-H", f"Content-Type: {content_type}", "--data-binary", f"@{path}", url]
    if encoding:
        cmd[-1:-1] = ["-H", f"Content-Encoding: {encoding}"]
    out = subprocess.run(cmd, capture_output=True, check=True, timeout=60).stdout
    body, _, status = out.rpartition(b"\n")
    return int(status), body


def test_curl_posts_json_and_gzipped_protobuf(receiver, tmp_path):
    (tmp_path / "spans.json").write_text(json.dumps(json_request(1, 5)))
    (tmp_path / "spans.pb.gz").write_bytes(gzip.compress(proto_request(6, 5)))
    status, body = _curl(receiver.url, tmp_path / "spans.json", "application/json")
    assert (status, json.loads(body)) == (200, {})
    status, body = _curl(receiver.url, tmp_path / "spans.pb.gz", "application/x-protobuf",
                         "gzip")
    assert status == 200 and body == b""  # an empty ExportTraceServiceResponse
    on_disk, result = ids_on_disk(receiver.out_dir)
    assert len(on_disk) == 10 and not result.problems
    assert receiver.requests == 2 and receiver.spans_accepted == 10


def test_partial_success_counts_and_names_the_rejected_spans(receiver):
    doc = json_request(1, 3)
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[1]["traceId"] = "xyz"
    spans[2]["endTimeUnixNano"] = str(T0)  # before its start
    status, headers, body = post(receiver.url, json.dumps(doc).encode(), rx.JSON)
    assert status == 200 and headers["Content-Type"] == rx.JSON
    partial = json.loads(body)["partialSuccess"]
    assert partial["rejectedSpans"] == "2"
    assert "traceId missing" in partial["errorMessage"] and "before start" in partial[
        "errorMessage"]
    request = pb.ExportTraceServiceRequest()
    request.ParseFromString(proto_request(10, 2))
    request.resource_spans[0].scope_spans[0].spans[0].span_id = b"\x01"
    status, headers, body = post(receiver.url, request.SerializeToString())
    assert status == 200 and headers["Content-Type"] == rx.PROTOBUF
    answer = pb.ExportTraceServiceResponse.FromString(body)
    assert answer.partial_success.rejected_spans == 1
    assert "span_id missing" in answer.partial_success.error_message
    assert (receiver.spans_accepted, receiver.spans_rejected) == (2, 3)


def _status(body: bytes, media: str) -> tuple:
    if media == rx.JSON:
        doc = json.loads(body)
        return doc["code"], doc["message"]
    status_pb2 = pytest.importorskip("google.rpc.status_pb2")
    status = status_pb2.Status.FromString(body)
    return status.code, status.message


@pytest.mark.parametrize("media, body, encoding, reason", [
    (rx.JSON, b"{not json", None, "not valid JSON"),
    (rx.JSON, b"[1, 2]", None, "expected an ExportTraceServiceRequest"),
    (rx.PROTOBUF, b"\x0a\x05abc", None, "not a valid OTLP protobuf message"),
    (rx.PROTOBUF, b"\x1f\x8b\x08 not gzip", "gzip", "not valid gzip data"),
    (rx.JSON, gzip.compress(b"{}")[:-6], "gzip", "truncated gzip body"),
])
def test_bad_bodies_are_400_with_a_reason(receiver, media, body, encoding, reason):
    status, headers, answer = post(receiver.url, body, media, encoding)
    assert status == 400 and headers["Content-Type"] == media
    code, message = _status(answer, media)
    assert code == 3 and reason in message
    assert receiver.bad_requests == 1 and receiver.spans_accepted == 0


def test_oversized_bodies_are_413(tmp_path):
    with Receiver(tmp_path / "rx", port=0, max_body=2000) as receiver:
        status, _, answer = post(receiver.url, b"\x0a" * 2001)
        assert status == 413 and "over the limit of 2000" in _status(answer, rx.PROTOBUF)[1]
        bomb = gzip.compress(json.dumps(json_request(1, 100)).encode())
        assert len(bomb) < 2000
        status, _, answer = post(receiver.url, bomb, rx.JSON, "gzip")
        assert status == 413 and "decompressed" in _status(answer, rx.JSON)[1]
        assert post(receiver.url, json.dumps(json_request(1, 2)).encode(), rx.JSON)[0] == 200
    assert receiver.spans_accepted == 2


def test_wrong_content_type_method_and_path(receiver):
    status, _, body = post(receiver.url, b"{}", "text/plain")
    assert status == 415 and b"application/x-protobuf" in body
    assert post(receiver.url, b"{}", rx.JSON, encoding="br")[0] == 415
    status, headers, _ = post(receiver.url, b"", method="GET")
    assert status == 405 and headers["Allow"] == "POST"
    assert post(receiver.url.replace("/v1/traces", "/v1/metrics"), b"{}", rx.JSON)[0] == 404
    assert post(receiver.url + "/", b"{}", rx.JSON)[0] == 404
    assert receiver.requests == 0


def test_chunked_bodies_and_keep_alive(receiver):
    conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=30)
    body = json.dumps(json_request(1, 4)).encode()
    for _ in range(2):  # the same connection, twice
        conn.request("POST", rx.TRACES_PATH, body=iter([body[:10], body[10:]]),
                     headers={"Content-Type": rx.JSON}, encode_chunked=True)
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read()) == {}
    conn.close()
    assert receiver.requests == 2 and receiver.spans_accepted == 8  # the loader dedups


def test_a_failed_write_is_503_and_nothing_is_acknowledged(receiver, monkeypatch):
    def full(data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(receiver.file, "append", full)
    status, headers, body = post(receiver.url, proto_request(1, 3))
    assert status == 503 and headers["Retry-After"] == "1"
    assert "No space left" in _status(body, rx.PROTOBUF)[1]
    monkeypatch.undo()
    assert post(receiver.url, proto_request(1, 3))[0] == 200
    assert receiver.failed_writes == 1 and receiver.spans_accepted == 3


def test_a_failed_fsync_cuts_the_lines_and_moves_to_the_next_file(tmp_path, monkeypatch):
    span_file = rx.SpanFile(tmp_path)
    span_file.append(b'{"a":1}\n')
    real, calls = os.fsync, []

    def failing(fd):
        calls.append(fd)
        if len(calls) == 1:
            raise OSError(5, "Input/output error")
        return real(fd)

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(OSError):
        span_file.append(b'{"b":2}\n')
    span_file.append(b'{"c":3}\n')
    span_file.close()
    first, second = span_file.paths
    assert first.read_bytes() == b'{"a":1}\n'  # what was acknowledged, and only that
    assert second.read_bytes() == b'{"c":3}\n' and second.name.endswith("-1.jsonl")


def test_concurrent_requests_never_interleave_lines(tmp_path):
    with Receiver(tmp_path / "rx", port=0, max_file_bytes=200_000) as receiver:
        def client(worker: int) -> None:
            for k in range(15):
                first = (worker * 100 + k) * 40 + 1
                if k % 2:
                    body, media = json.dumps(json_request(first, 40)).encode(), rx.JSON
                else:
                    body, media = proto_request(first, 40), rx.PROTOBUF
                assert post(receiver.url, body, media)[0] == 200

        workers = [threading.Thread(target=client, args=(w,)) for w in range(6)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    on_disk, result = ids_on_disk(receiver.out_dir)
    assert len(on_disk) == 6 * 15 * 40 and not result.problems and result.duplicates == 0
    assert len(receiver.file.paths) > 1  # rotated by size
    assert all(p.stat().st_size <= 200_000 for p in receiver.file.paths)
    assert receiver.requests == 90


def test_stop_is_graceful_and_idempotent(tmp_path):
    receiver = Receiver(tmp_path / "rx", port=0).start()
    assert post(receiver.url, proto_request(1, 2))[0] == 200
    receiver.stop()
    receiver.stop()
    with pytest.raises(OSError):
        post(receiver.url, proto_request(3, 2))
    with pytest.raises(rx.Unavailable):
        receiver.export(proto_request(3, 2), rx.PROTOBUF)
    assert len(ids_on_disk(receiver.out_dir)[0]) == 2


# ---- killed or stopped mid-stream: what was acknowledged is on disk -------------------------
def _start_cli(out: Path, *extra: str) -> tuple:
    proc = subprocess.Popen(
        [sys.executable, "-c", "from agentscope.cli import main; main()", "receive", "--out",
         str(out), "--port", "0", *extra],
        env=child_env(), stderr=subprocess.PIPE, text=True)
    lines = []
    while not lines or "receiving OTLP traces on" not in lines[-1]:
        lines.append(proc.stderr.readline())
        assert lines[-1], "".join(lines)  # it exited before listening
    line = lines[-1]
    assert "receiving OTLP traces on http://127.0.0.1:" in line, line
    url = line.split(" on ", 1)[1].split()[0].rstrip(",")
    return proc, url


def _stream_until_gone(url: str, acked: list, lock: threading.Lock, worker: int) -> None:
    """Post requests of 25 spans until the receiver is gone; remember what it acknowledged."""
    for k in range(100_000):
        first = (worker * 100_000 + k) * 25 + 1
        try:
            status = post(url, proto_request(first, 25))[0]
        except (OSError, http.client.HTTPException):  # gone mid-answer (an unread 503 body)
            return
        if status == 200:
            with lock:
                acked.extend(range(first, first + 25))
        elif status != 503:
            raise AssertionError(status)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_whatever_was_acknowledged_survives_a_kill_mid_stream(tmp_path, sig):
    out = tmp_path / "rx"
    proc, url = _start_cli(out)
    acked: list = []
    lock = threading.Lock()
    clients = [threading.Thread(target=_stream_until_gone, args=(url, acked, lock, w))
               for w in range(3)]
    for c in clients:
        c.start()
    deadline = time.monotonic() + 60
    while len(acked) < 1000 and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(sig)  # while the clients are still sending
    code = proc.wait(30)
    for c in clients:
        c.join(60)
    stderr = proc.stderr.read()
    proc.stderr.close()
    assert len(acked) >= 1000
    on_disk, result = ids_on_disk(out)
    got = {int(span_id, 16) for _, span_id in on_disk}
    assert set(acked) <= got
    if sig == signal.SIGTERM:
        assert code == 0 and not result.problems
        assert "spans written" in stderr
    else:
        assert code == -signal.SIGKILL
        assert all(p.torn for p in result.problems) and len(result.problems) <= 1


# ---- the command line -------------------------------------------------------------------
def test_receive_help():
    result = CliRunner().invoke(main, ["receive", "--help"])
    assert result.exit_code == 0
    for option in ("--out", "--address", "--port", "--grpc-port", "--max-body"):
        assert option in result.output


def test_without_grpcio_grpc_port_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "grpc", None)  # `import grpc` fails
    with pytest.raises(ValueError, match="pip install grpcio"):
        Receiver(tmp_path, port=0, grpc_port=0)
    result = CliRunner().invoke(main, ["receive", "--out", str(tmp_path), "--port", "0",
                                       "--grpc-port", "0"])
    assert result.exit_code == 2 and "grpcio" in result.output


def test_a_port_in_use_is_reported(receiver, tmp_path):
    result = CliRunner().invoke(main, ["receive", "--out", str(tmp_path / "x"), "--port",
                                       str(receiver.port)])
    assert result.exit_code == 1 and "cannot receive on 127.0.0.1" in result.output


def test_the_cli_receives_and_exits_0_on_sigterm(tmp_path):
    proc, url = _start_cli(tmp_path / "rx")
    try:
        assert post(url, json.dumps(json_request(1, 7)).encode(), rx.JSON)[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    stderr = proc.stderr.read()
    proc.stderr.close()
    assert code == 0
    assert "1 requests decoded" in stderr and "7 spans written" in stderr and "spans-" in stderr
    files = list((tmp_path / "rx").glob("spans-*.jsonl"))
    assert len(files) == 1 and len(files[0].read_text().splitlines()) == 7


def test_requests_beyond_the_in_flight_bound_are_told_to_retry(tmp_path):
    # bodies read and decoded at once are bounded (memory); the rest get 503 + Retry-After
    with Receiver(tmp_path / "rx", port=0, max_in_flight=2) as r:
        r.slot_wait_s = 0.2  # (10 s by default: a request waits for a slot that long)
        assert r.slots.acquire(blocking=False) and r.slots.acquire(blocking=False)  # both busy
        status, headers, _ = post(r.url, proto_request(1, 3))
        assert status == 503 and headers["Retry-After"] == "1" and r.spans_accepted == 0
        r.slots.release()
        status, _, _ = post(r.url, proto_request(1, 3))
        assert status == 200 and r.spans_accepted == 3
        r.slots.release()
