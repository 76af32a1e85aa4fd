"""OTLP/JSON trace files: a single ExportTraceServiceRequest, or the OpenTelemetry Collector
file exporter's one-request-per-line files. Parsed into :class:`SpanRecord`.

The mapping of a request to records (field names in camelCase or snake_case, hex or base64
ids, agentscope's accounting attributes back into columns, ``agentscope.analysis.*`` dropped)
is :mod:`agentscope.formats.otlp_common`'s, shared with the protobuf importer and the live
receiver; this module reads the files.
"""

from __future__ import annotations

import json
from typing import Iterator

from ..errors import TraceFormatError
from ..formats.lines import iter_lines
from ..formats.otlp_common import attributes, spans_of_request, value_of
from ..records import SpanRecord

__all__ = ["attributes", "looks_like_otlp", "read", "spans_of_request", "value_of"]


def looks_like_otlp(head: bytes) -> bool:
    """Whether the first bytes of a file look like an OTLP/JSON traces request."""
    return b'"resourceSpans"' in head or b'"resource_spans"' in head


def read(path: str, errors: list) -> Iterator[SpanRecord]:
    """Spans of an OTLP/JSON file: one request, or one request per line."""
    with open(path, "rb") as f:
        data = f.read()
    text = data.decode("utf-8", errors="replace")
    stripped = text.strip()
    if not stripped:
        return
    try:
        whole = json.loads(stripped)
    except ValueError:
        whole = None
    if whole is not None:
        yield from spans_of_request(whole, path, None, errors)
        return
    for ln in iter_lines(path):
        try:
            request = json.loads(ln.text)
        except ValueError as e:
            reason = f"not valid JSON ({e.msg} at column {e.colno})"
            if not ln.terminated:
                reason = "torn last line; skipped: " + reason
            errors.append(TraceFormatError(path, ln.number, reason, torn=not ln.terminated))
            continue
        yield from spans_of_request(request, path, ln.number, errors)
