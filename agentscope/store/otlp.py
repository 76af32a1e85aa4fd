"""OTLP/JSON trace files: a single ExportTraceServiceRequest, or the OpenTelemetry Collector
file exporter's one-request-per-line files. Parsed into :class:`SpanRecord`.

Ids are hex per the OTLP/JSON spec (any case); base64 ids, which protobuf's generic JSON
mapping produces, are accepted too. agentscope's own accounting attributes
(``agentscope.cpu.thread_ns`` ...) become columns again, so our spans survive a round trip.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any, Iterator, Optional

from .. import semconv
from ..errors import TraceFormatError
from ..formats import spanfile
from ..formats.lines import iter_lines
from ..records import SpanEvent, SpanLink, SpanRecord

_KINDS = {0: "internal", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer",
          "SPAN_KIND_UNSPECIFIED": "internal", "SPAN_KIND_INTERNAL": "internal",
          "SPAN_KIND_SERVER": "server", "SPAN_KIND_CLIENT": "client",
          "SPAN_KIND_PRODUCER": "producer", "SPAN_KIND_CONSUMER": "consumer"}
_STATUS = {0: "unset", 1: "ok", 2: "error", "STATUS_CODE_UNSET": "unset",
           "STATUS_CODE_OK": "ok", "STATUS_CODE_ERROR": "error"}
_HEX = re.compile(r"[0-9a-fA-F]+\Z")
_COLUMN_BY_ATTR = {attr: col for col, attr in semconv.ACCOUNTING_ATTRIBUTES.items()}


def looks_like_otlp(head: bytes) -> bool:
    """Whether the first bytes of a file look like an OTLP/JSON traces request."""
    return b'"resourceSpans"' in head or b'"resource_spans"' in head


def value_of(v: Any) -> Any:
    """An OTLP AnyValue as a plain JSON value."""
    if not isinstance(v, dict):
        return v
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in v:
            return v[key]
    if "intValue" in v:  # int64 is a string in OTLP/JSON
        try:
            return int(v["intValue"])
        except (TypeError, ValueError):
            return v["intValue"]
    if "arrayValue" in v:
        return [value_of(x) for x in (v["arrayValue"] or {}).get("values", [])]
    if "kvlistValue" in v:
        return {kv.get("key"): value_of(kv.get("value")) for kv in
                (v["kvlistValue"] or {}).get("values", [])}
    if "bytesValue" in v:
        return v["bytesValue"]
    return None


def attributes(items: Any) -> dict:
    out = {}
    for kv in items or ():
        if isinstance(kv, dict) and "key" in kv:
            out[str(kv["key"])] = value_of(kv.get("value"))
    return out


def _id(raw: Any, nbytes: int) -> Optional[str]:
    """A hex id of ``nbytes`` bytes, from hex or base64; None if empty or invalid."""
    if not isinstance(raw, str) or not raw:
        return None
    if len(raw) == 2 * nbytes and _HEX.match(raw):
        value = raw.lower()
    else:
        try:
            decoded = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            return None
        if len(decoded) != nbytes:
            return None
        value = decoded.hex()
    return None if value == "0" * (2 * nbytes) else value


def _ns(raw: Any) -> Optional[int]:
    try:
        value = int(raw)
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None


def spans_of_request(request: Any, path: str, line: Optional[int],
                     errors: list) -> Iterator[SpanRecord]:
    """The spans of one ExportTraceServiceRequest object; bad spans go to ``errors``."""
    if not isinstance(request, dict):
        errors.append(TraceFormatError(path, line, "expected an OTLP request object"))
        return
    for rs in request.get("resourceSpans") or request.get("resource_spans") or ():
        resource = attributes((rs.get("resource") or {}).get("attributes"))
        service = resource.get("service.name")
        host = resource.get("host.name")
        pid = resource.get("process.pid")
        for ss in rs.get("scopeSpans") or rs.get("scope_spans") or rs.get(
                "instrumentationLibrarySpans") or ():
            scope = (ss.get("scope") or ss.get("instrumentationLibrary") or {}).get("name")
            for span in ss.get("spans") or ():
                record = _span(span, service, host, pid, scope, path, line, errors)
                if record is not None:
                    yield record


def _span(span: dict, service: Any, host: Any, pid: Any, scope: Any, path: str,
          line: Optional[int], errors: list) -> Optional[SpanRecord]:
    raw_span_id = span.get("spanId")
    span_id = _id(raw_span_id, 8)
    trace_id = _id(span.get("traceId"), 16)

    def bad(reason: str) -> None:
        errors.append(TraceFormatError(path, line, reason, span_id=span_id or (
            raw_span_id if isinstance(raw_span_id, str) and raw_span_id else None)))

    if trace_id is None:
        bad(f"span {span.get('name')!r}: traceId missing or not 16 bytes of hex/base64 "
            f"({span.get('traceId')!r})")
        return None
    if span_id is None:
        bad(f"span {span.get('name')!r}: spanId missing or not 8 bytes of hex/base64 "
            f"({raw_span_id!r})")
        return None
    start, end = _ns(span.get("startTimeUnixNano")), _ns(span.get("endTimeUnixNano"))
    if start is None or end is None:
        bad("startTimeUnixNano/endTimeUnixNano missing or not integer nanoseconds")
        return None
    if end < start:
        bad(f"end {end} is before start {start}")
        return None
    units = spanfile.unit_problem(start)
    if units:
        bad(f"startTimeUnixNano: {units}")
        return None
    attrs = attributes(span.get("attributes"))
    cols: dict = {col: None for col in semconv.ACCOUNTING_ATTRIBUTES}
    for attr, col in _COLUMN_BY_ATTR.items():
        if attr in attrs:
            value = attrs.pop(attr)
            cols[col] = int(value) if isinstance(value, (int, float)) else None
    stage = attrs.pop(semconv.STAGE, None)
    if scope and "otel.scope.name" not in attrs:
        attrs["otel.scope.name"] = scope
    status = span.get("status") or {}
    events = tuple(SpanEvent(str(e.get("name", "")), _ns(e.get("timeUnixNano")) or 0,
                             attributes(e.get("attributes")))
                   for e in span.get("events") or () if isinstance(e, dict))
    links = []
    for lk in span.get("links") or ():
        lt, ls = _id(lk.get("traceId"), 16), _id(lk.get("spanId"), 8)
        if lt and ls:
            links.append(SpanLink(lt, ls, attributes(lk.get("attributes"))))
    parent = _id(span.get("parentSpanId"), 8)
    return SpanRecord(
        trace_id=trace_id, span_id=span_id, parent_span_id=parent, name=str(span.get("name", "")),
        stage=None if stage is None else str(stage),
        kind=_KINDS.get(span.get("kind", 0), "internal"), start_ns=start, end_ns=end,
        status=_STATUS.get(status.get("code", 0), "unset"),
        status_message=status.get("message") or None,
        service=None if service is None else str(service),
        host=None if host is None else str(host),
        pid=pid if isinstance(pid, int) else None,
        attrs=attrs, events=events, links=tuple(links), **cols)


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
