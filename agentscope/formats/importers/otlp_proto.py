"""OTLP protobuf trace files: what an OTLP/HTTP or OTLP/gRPC exporter sends, kept in a file.

Two layouts are read, whatever the file is called (``.pb``, ``.binpb``, ``.protobuf`` or
anything else), and gzip/zstd of either:

* one serialized ``ExportTraceServiceRequest`` (or ``TracesData``: the same bytes);
* the OpenTelemetry Collector file exporter's ``format: proto`` files: a sequence of
  requests, each after its length as a 4-byte big-endian unsigned integer.

Streams of varint-length-prefixed messages (protobuf's ``writeDelimitedTo``) are not read:
their first byte is any length, so they cannot be told from other binary files cheaply.

Protobuf has no magic number, so :func:`sniff` walks the first bytes as the wire format of
a request (request -> ResourceSpans -> Resource/ScopeSpans -> the first bytes of each Span),
where every field number and wire type must be the ones the OTLP schema has, and text is
never taken for protobuf. OTLP metrics and logs requests, laid out alike, are told apart by
their records' first fields. A file named ``*.pb``/``*.binpb``/``*.protobuf`` that is not
text and starts like either layout is taken even when the walk fails, so that its problem is
reported.

Messages become records directly (no ``MessageToDict``): the mapping is
:mod:`agentscope.formats.otlp_common`'s, the same as for OTLP/JSON. ``bytes_value``
attributes become base64 text, as OTLP/JSON writes them.
"""

from __future__ import annotations

import base64
from typing import Any, Iterator, Optional

from ...errors import TraceFormatError
from ...records import SpanEvent, SpanLink, SpanRecord
from ..otlp_common import kind_of, record, status_of
from . import HEAD_BYTES, Importer

NAMES = (".pb", ".binpb", ".protobuf")
_FRAME = 4  # the Collector file exporter's length prefix: 4 bytes, big-endian

# The schema the sniffer walks: {tag byte: what is inside a LEN field (a schema, _SPAN, None)}
_SPAN = "span"  # checked by its first bytes: trace_id (16 bytes), then span_id (8)
_SCOPE_SPANS = {0x0A: None, 0x12: _SPAN, 0x1A: None}  # scope, spans, schema_url
_RESOURCE = {0x0A: None, 0x10: None, 0x1A: None}  # attributes, dropped count, entity_refs
_RESOURCE_SPANS = {0x0A: _RESOURCE, 0x12: _SCOPE_SPANS, 0x1A: None}
_REQUEST = {0x0A: _RESOURCE_SPANS}  # resource_spans


# ---- detection ----------------------------------------------------------------------------
def sniff(head: bytes, name: str) -> bool:
    """Whether ``head`` starts an OTLP protobuf traces file (see the module's docstring)."""
    if not head or head[0] not in (0x0A, 0x00) or _is_text(head):
        return False
    whole = len(head) < HEAD_BYTES  # the head is the whole file
    if head[0] == 0x00:
        body = _first_frame(head)
        ok = body is not None and _walk(body[0], _REQUEST, body[1])
    else:
        ok = _walk(head, _REQUEST, not whole)
    return ok or name.lower().endswith(NAMES)


def _is_text(head: bytes) -> bool:
    """UTF-8 text without control characters other than tab, newline, CR and form feed."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 3:  # not merely a character cut at the end of the head
            return False
        text = head[:e.start].decode("utf-8")
    return not any(ord(c) < 0x20 and c not in "\t\n\r\f" for c in text)


def _first_frame(head: bytes) -> Optional[tuple]:
    """(the start of the first framed request, whether it runs past ``head``), or None."""
    if len(head) < _FRAME + 1 or head[_FRAME] != 0x0A:
        return None
    size = int.from_bytes(head[:_FRAME], "big")
    if size == 0:
        return None
    end = _FRAME + size
    return head[_FRAME:end], end > len(head)


def _varint(buf: bytes, pos: int) -> Optional[tuple]:
    """(value, position after it), or None if it is cut off or longer than 10 bytes."""
    value = shift = 0
    for i in range(pos, min(pos + 10, len(buf))):
        b = buf[i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i + 1
        shift += 7
    return None


def _walk(buf: bytes, schema: dict, partial: bool) -> bool:
    """Whether ``buf`` is a message of ``schema``, its fields walked down to the spans' first
    bytes; ``partial``: ``buf`` is cut off, so its last field may run past its end."""
    pos, n = 0, len(buf)
    while pos < n:
        tag = buf[pos]
        if tag not in schema:
            return False
        got = _varint(buf, pos + 1)
        if got is None:  # cut off in its length
            return partial
        value, pos = got
        if tag & 7 == 0:  # a varint field: its value was the varint
            continue
        end = pos + value
        inner, cut = schema[tag], end > n
        if inner is _SPAN:
            if not _span_start(buf[pos:min(end, pos + 20)]):
                return False
        elif inner is not None and not _walk(buf[pos:end], inner, cut):
            return False
        if cut:
            return partial
        pos = end
    return True


def _span_start(head: bytes) -> bool:
    """Whether a Span starts with ``head``: every OTLP encoder writes the fields in number
    order, so a trace_id of 16 bytes and a span_id of 8 come first (telling spans from the
    metrics and log records that OTLP's other requests hold in the same places)."""
    ids = head[:2], head[18:20]
    return ids[0] == b"\x0a\x10"[:len(ids[0])] and ids[1] == b"\x12\x08"[:len(ids[1])]


# ---- reading ------------------------------------------------------------------------------
def read(data: bytes, path: str, errors: list) -> Iterator[SpanRecord]:
    """The spans of a whole protobuf file: one request, or the Collector's framed requests
    (each problem names the file and, for framed files, the request's number)."""
    if not data:
        return
    if data[0] != 0x00:
        yield from _read_message(data, path, None, errors)
        return
    pos, number = 0, 0
    while pos < len(data):
        number += 1
        size = int.from_bytes(data[pos:pos + _FRAME], "big")
        start, end = pos + _FRAME, pos + _FRAME + size
        if end > len(data):
            errors.append(TraceFormatError(
                path, number, f"torn last request: {size} bytes announced, "
                f"{max(0, len(data) - start)} present; skipped", torn=True))
            return
        yield from _read_message(data[start:end], path, number, errors)
        pos = end


def _read_message(data: bytes, path: str, number: Optional[int],
                  errors: list) -> Iterator[SpanRecord]:
    try:
        request = parse(data)
    except ValueError as e:
        errors.append(TraceFormatError(path, number, str(e)))
        return
    yield from spans_of_message(request, path, number, errors)


def parse(data: bytes) -> Any:
    """One serialized ExportTraceServiceRequest (or TracesData) as its message; raises
    ValueError("not a valid OTLP protobuf message: ...") for bytes that are not one."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    try:
        return ExportTraceServiceRequest.FromString(data)
    except (DecodeError, ValueError, RecursionError) as e:
        raise ValueError(f"not a valid OTLP protobuf message: {e or 'cannot parse'}") from None


def spans_of_message(request: Any, path: str, number: Optional[int],
                     errors: list) -> Iterator[SpanRecord]:
    """The spans of a parsed ExportTraceServiceRequest (or TracesData); each span that cannot
    be taken is one problem in ``errors``."""
    for i, rs in enumerate(request.resource_spans):
        resource = attributes(rs.resource.attributes)
        for j, ss in enumerate(rs.scope_spans):
            scope = ss.scope.name or None
            for k, span in enumerate(ss.spans):
                where = f"resource_spans[{i}].scope_spans[{j}].spans[{k}]"
                r = _span(span, resource, scope, where, path, number, errors)
                if r is not None:
                    yield r


def _span(span: Any, resource: dict, scope: Optional[str], where: str, path: str,
          number: Optional[int], errors: list) -> Optional[SpanRecord]:
    raw_trace, raw_span, name = span.trace_id, span.span_id, span.name
    span_id = _id(raw_span, 8)

    def bad(reason: str) -> None:
        errors.append(TraceFormatError(path, number, f"{where}: {reason}",
                                       span_id=span_id or (raw_span.hex()[:64] or None)))

    trace_id = _id(raw_trace, 16)
    if trace_id is None:
        bad(f"span {name!r}: trace_id missing or not 16 bytes, not all zero "
            f"({raw_trace.hex()!r})")
        return None
    if span_id is None:
        bad(f"span {name!r}: span_id missing or not 8 bytes, not all zero ({raw_span.hex()!r})")
        return None
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    if not start:
        bad("start_time_unix_nano missing (0): the span has no start time")
        return None
    if not end:
        bad("end_time_unix_nano missing (0)")
        return None
    events = tuple(SpanEvent(e.name, e.time_unix_nano, attributes(e.attributes))
                   for e in span.events)
    links = []
    for lk in span.links:
        lt, ls = _id(lk.trace_id, 16), _id(lk.span_id, 8)
        if lt and ls:
            links.append(SpanLink(lt, ls, attributes(lk.attributes)))
    status = span.status
    return record(
        trace_id=trace_id, span_id=span_id, parent_span_id=_id(span.parent_span_id, 8),
        name=name, kind=kind_of(span.kind), start_ns=start, end_ns=end,
        status=status_of(status.code), status_message=status.message or None,
        resource=resource, scope=scope, attrs=attributes(span.attributes), events=events,
        links=tuple(links), bad=bad)


def _id(raw: bytes, nbytes: int) -> Optional[str]:
    """Lowercase hex of an id of ``nbytes`` bytes; None if empty, all zero or another size."""
    if len(raw) != nbytes or not any(raw):
        return None
    return raw.hex()


def attributes(items: Any) -> dict:
    """A repeated ``KeyValue`` as a dict of plain values."""
    return {kv.key: value(kv.value) for kv in items}


def value(v: Any) -> Any:
    """An ``AnyValue`` as a plain value (None when empty; bytes as base64 text)."""
    which = v.WhichOneof("value")
    if which in _SCALARS:
        return getattr(v, which)
    if which is None:
        return None
    if which == "array_value":
        return [value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(v.bytes_value).decode("ascii")
    return getattr(v, which)


_SCALARS = frozenset(("string_value", "int_value", "double_value", "bool_value"))


IMPORTER = Importer("otlp-protobuf", "OTLP protobuf (ExportTraceServiceRequest)", sniff, read)
