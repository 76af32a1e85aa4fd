"""An OpenTelemetry SDK span exporter that appends OTLP/JSON to a file, one
``ExportTraceServiceRequest`` per line: the OpenTelemetry Collector file exporter's format
(camelCase field names, trace and span ids as lowercase hex, int64 as strings, enums as
integers), which ``agentscope analyze`` loads.

For an agent traced by another instrumentation (an OpenTelemetry SDK ``TracerProvider``)::

    provider.add_span_processor(BatchSpanProcessor(OTLPJsonFileExporter("traces/otlp.jsonl")))

It runs in the agent's process, so it lives with capture (agentscope.exporters.otlp_file
names it too).

Each export is encoded with the OTLP exporters' own protobuf encoder, turned into JSON, and
written as one line under a lock, then flushed: a reader never sees half a request from a
live process, and a crash loses at most the batch being written. Telemetry never breaks
the agent: a batch that cannot be encoded or written is counted in :attr:`dropped` and
reported as a failed export, logged once.
"""

from __future__ import annotations

import base64
import importlib
import json
import os
import threading
from collections.abc import Sequence
from typing import IO, Any, Optional

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from .._log import log_once

_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def request_json(spans: Sequence[ReadableSpan]) -> dict:
    """The OTLP/JSON form of ``spans`` as one ExportTraceServiceRequest (a dict)."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    doc = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource_spans in doc.get("resourceSpans", ()):
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                _hex_ids(span)
                for link in span.get("links", ()):
                    _hex_ids(link)
    return doc


def _hex_ids(item: dict) -> None:
    """protobuf's JSON mapping writes bytes as base64; OTLP/JSON wants ids as hex."""
    for key in _ID_FIELDS:
        value = item.get(key)
        if value:
            item[key] = base64.b64decode(value).hex()


class OTLPJsonFileExporter(SpanExporter):
    """Appends each exported batch to ``path`` as one line of OTLP/JSON (see the module).

    The file is opened on the first export (created if need be, appended to otherwise) and
    closed by :meth:`shutdown`, after which exports fail. Thread-safe."""

    def __init__(self, path: "str | os.PathLike[str]") -> None:
        try:  # a configuration error, raised now rather than dropping every batch later
            importlib.import_module("opentelemetry.exporter.otlp.proto.common.trace_encoder")
        except ImportError as e:
            raise ImportError(f"OTLPJsonFileExporter needs the OTLP exporters' encoder ({e}): "
                              "pip install opentelemetry-exporter-otlp-proto-common") from e
        self.path = os.fspath(path)
        self.dropped = 0  # spans not written: the batch could not be encoded or written
        self._lock = threading.Lock()
        self._file: Optional[IO[str]] = None
        self._closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            line = json.dumps(request_json(spans), separators=(",", ":")) + "\n"
        except Exception as e:  # noqa: BLE001 -- never raise into the SDK's export thread
            return self._drop(len(spans), "encode", e)
        with self._lock:
            if self._closed:
                self.dropped += len(spans)
                return SpanExportResult.FAILURE
            try:
                if self._file is None:
                    self._file = open(self.path, "a", encoding="utf-8")
                self._file.write(line)
                self._file.flush()
            except (OSError, ValueError) as e:
                return self._drop(len(spans), "write", e, locked=True)
        return SpanExportResult.SUCCESS

    def _drop(self, n: int, what: str, error: Any, locked: bool = False) -> SpanExportResult:
        if locked:
            self.dropped += n
        else:
            with self._lock:
                self.dropped += n
        log_once(f"otlp-file-{what}", "agentscope: cannot %s spans for %s (%r); they are "
                 "dropped", what, self.path, error)
        return SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # every export is written and flushed before it returns

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            f, self._file = self._file, None
        if f is not None:
            try:
                f.close()
            except OSError as e:
                log_once("otlp-file-close", "agentscope: error closing %s (%r)", self.path, e)
