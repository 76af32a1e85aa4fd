"""A stand-in for an OpenTelemetry Collector (``otelcol-contrib``) whose traces pipeline has
an ``otlp`` receiver (HTTP) and two exporters, as docs/recipes/otel-collector.md configures
it. It is NOT the Collector (none could be installed where the recipes were written: it is
not on PyPI, Debian or npm); it does what those three components do to traces, so that the
recipe runs end to end:

* the ``otlp`` receiver: ``POST /v1/traces``, protobuf or JSON, gzip'ed or not;
* ``--file PATH``, the ``file`` exporter with its default ``format: json``: each request
  appended as one line of OTLP/JSON (``ExportTraceServiceRequest``, camelCase field names,
  trace and span ids in hex, 64-bit integers as strings, enums as integers), which is what
  ``agentscope analyze`` reads from a real Collector;
* ``--forward URL``, the ``otlphttp`` exporter: each request sent on as protobuf to
  ``URL/v1/traces`` (e.g. ``agentscope receive``).

Resource attributes pass through unchanged, as in a Collector without processors that edit
them (``host.name`` and ``process.pid`` from ``agentscope run`` must survive the hop).

    python examples/recipes/otel_collector.py --port 4318 --file traces/otelcol.jsonl \\
        --forward http://127.0.0.1:4319

It runs until SIGTERM or Ctrl-C; the first line on stderr says where it listens.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import http.server
import json
import signal
import sys
import threading
import urllib.request
import zlib
from pathlib import Path
from typing import Any, Optional

from google.protobuf.json_format import MessageToDict, Parse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

_IDS = ("traceId", "spanId", "parentSpanId")


def _hex_ids(item: dict) -> None:
    for key in _IDS:
        if item.get(key):
            item[key] = base64.b64decode(item[key]).hex()


def file_line(request: ExportTraceServiceRequest) -> str:
    """One request as the Collector's file exporter writes it (format: json)."""
    doc = MessageToDict(request, use_integers_for_enums=True)
    for resource_spans in doc.get("resourceSpans", ()):
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                _hex_ids(span)
                for link in span.get("links", ()):
                    _hex_ids(link)
    return json.dumps(doc, separators=(",", ":")) + "\n"


def decode(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    if content_type.startswith("application/json"):
        doc = json.loads(body)  # OTLP/JSON has hex ids; protobuf's JSON mapping wants base64
        for resource_spans in doc.get("resourceSpans", ()):
            for scope_spans in resource_spans.get("scopeSpans", ()):
                for span in scope_spans.get("spans", ()):
                    for key in _IDS:
                        if span.get(key):
                            span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
        Parse(json.dumps(doc), request, ignore_unknown_fields=True)
    else:
        request.ParseFromString(body)
    return request


class Pipeline:
    """The file exporter and the otlphttp exporter, each optional."""

    def __init__(self, file: Optional[Path], forward: Optional[str]) -> None:
        self.lock = threading.Lock()
        self.out = None
        if file is not None:
            file.parent.mkdir(parents=True, exist_ok=True)
            self.out = open(file, "a", encoding="utf-8")
        self.forward = None if forward is None else forward.rstrip("/") + "/v1/traces"
        self.spans = 0

    def export(self, request: ExportTraceServiceRequest) -> None:
        if self.out is not None:
            line = file_line(request)
            with self.lock:
                self.out.write(line)
                self.out.flush()
        if self.forward is not None:
            req = urllib.request.Request(self.forward, request.SerializeToString(),
                                         {"Content-Type": "application/x-protobuf"})
            with urllib.request.urlopen(req, timeout=30) as reply:
                reply.read()
        with self.lock:
            self.spans += sum(len(ss.spans) for rs in request.resource_spans
                              for ss in rs.scope_spans)

    def close(self) -> None:
        if self.out is not None:
            self.out.close()


def handler(pipeline: Pipeline) -> type:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802
            if self.path.split("?")[0].rstrip("/") != "/v1/traces":
                return self.answer(404, b"only /v1/traces", "text/plain")
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            encoding = (self.headers.get("Content-Encoding") or "").lower()
            content_type = self.headers.get("Content-Type", "application/x-protobuf")
            try:
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                request = decode(body, content_type)
            except Exception as e:  # noqa: BLE001 -- a bad request, answered 400
                return self.answer(400, str(e).encode(), "text/plain")
            try:
                pipeline.export(request)
            except Exception as e:  # noqa: BLE001 -- the exporter retries a 503
                return self.answer(503, str(e).encode(), "text/plain")
            json_in = content_type.startswith("application/json")
            self.answer(200, b"{}" if json_in else b"",
                        "application/json" if json_in else "application/x-protobuf")

        def answer(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4318, help="OTLP/HTTP port (0: a free one)")
    parser.add_argument("--file", type=Path, help="the file exporter's path (OTLP/JSON lines)")
    parser.add_argument("--forward", help="the otlphttp exporter's endpoint (no /v1/traces)")
    args = parser.parse_args()
    if args.file is None and args.forward is None:
        parser.error("give --file, --forward or both")

    pipeline = Pipeline(args.file, args.forward)
    server = http.server.ThreadingHTTPServer((args.address, args.port), handler(pipeline))

    def stop(*_: Any) -> None:
        threading.Thread(target=server.shutdown).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"otel_collector.py (a stand-in for the Collector): OTLP/HTTP on "
          f"http://{args.address}:{server.server_port}/v1/traces", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        pipeline.close()
        print(f"otel_collector.py: {pipeline.spans} spans exported", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
