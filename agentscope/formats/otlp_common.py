"""OTLP spans as :class:`SpanRecord`: the one mapping every OTLP reader shares.

Used by the OTLP/JSON reader (``agentscope.store.otlp``), the protobuf importer
(:mod:`agentscope.formats.importers.otlp_proto`) and the live receiver
(:mod:`agentscope.collectors.receiver`), so a span reads the same whichever way it came:

* kinds and status codes, as the enum's number or its name (``2``, ``"SPAN_KIND_SERVER"``);
* agentscope's accounting attributes (:data:`agentscope.semconv.ACCOUNTING_ATTRIBUTES`) become
  columns again and ``agentscope.stage`` the stage, so our own spans survive a round trip;
* attributes under ``agentscope.analysis.`` are dropped: they are verdicts that
  ``agentscope export otlp`` derived from the spans, not part of them;
* the instrumentation scope's name is kept as the attribute ``otel.scope.name``.

OTLP/JSON requests are read here too (:func:`spans_of_request`), in either spelling of the
field names: lowerCamelCase as the OTLP spec has it (``traceId``) or the proto's own
snake_case (``trace_id``), which protobuf's JSON printers write when asked to keep field names.
Ids are hex (any case) or base64 (protobuf's generic JSON mapping). The ``dropped_*`` counts
and ``trace_state``/``flags`` are accepted and not kept.
"""

from __future__ import annotations

import base64
import binascii
import math
import operator
import re
from typing import Any, Callable, Iterator, Optional

from .. import semconv
from ..errors import TraceFormatError
from ..records import SpanEvent, SpanLink, SpanRecord
from .spanfile import unit_problem

_KIND_NAMES = ("internal", "internal", "server", "client", "producer", "consumer")
_KINDS = {f"SPAN_KIND_{k.upper()}": k for k in _KIND_NAMES[1:]}
_KINDS["SPAN_KIND_UNSPECIFIED"] = "internal"
_STATUS_NAMES = ("unset", "ok", "error")
_STATUS = {f"STATUS_CODE_{s.upper()}": s for s in _STATUS_NAMES}
_COLUMN_BY_ATTR = {attr: col for col, attr in semconv.ACCOUNTING_ATTRIBUTES.items()}
_NO_ACCOUNTING = {col: None for col in semconv.ACCOUNTING_ATTRIBUTES}
# SpanRecord's fields from tid to child_majflt, in order: the accounting columns
_ACCOUNTING_COLUMNS = SpanRecord._fields[SpanRecord._fields.index("tid"):
                                         SpanRecord._fields.index("attrs")]
_NO_ACCOUNTING_ROW = (None,) * len(_ACCOUNTING_COLUMNS)
_HEX = re.compile(r"[0-9a-fA-F]+\Z")
_MAX_INT64 = (1 << 63) - 1

DERIVED_PREFIX = semconv.ANALYSIS_PREFIX  # verdicts written by `export otlp`: dropped on import
_is_derived = operator.methodcaller("startswith", DERIVED_PREFIX)


def kind_of(raw: Any) -> str:
    """Our span kind for an OTLP ``SpanKind``: its number (or a string of one) or its name."""
    return _enum(raw, _KINDS, _KIND_NAMES, "internal")


def status_of(raw: Any) -> str:
    """Our status for an OTLP ``Status.code``: its number (or a string of one) or its name."""
    return _enum(raw, _STATUS, _STATUS_NAMES, "unset")


def _enum(raw: Any, by_name: Any, by_number: Any, default: str) -> str:
    if isinstance(raw, str):
        raw = int(raw) if raw.isascii() and raw.isdigit() else by_name.get(raw, default)
        if isinstance(raw, str):
            return raw
    if isinstance(raw, int) and 0 <= raw < len(by_number):
        return by_number[raw]
    return default


def record(*, trace_id: str, span_id: str, parent_span_id: Optional[str], name: str, kind: str,
           start_ns: int, end_ns: int, status: str, status_message: Optional[str],
           resource: dict, scope: Optional[str], attrs: dict, events: tuple, links: tuple,
           bad: Callable[[str], None]) -> Optional[SpanRecord]:
    """The record of one decoded OTLP span, or None (after ``bad(reason)``) if its times are
    not a span's. ``attrs`` (a fresh dict, changed here) and ``resource`` are already plain
    values; ids are already our lowercase hex."""
    if end_ns < start_ns:
        bad(f"end {end_ns} is before start {start_ns}")
        return None
    if end_ns > _MAX_INT64:
        bad(f"end {end_ns} is past what a 64-bit signed count of nanoseconds holds")
        return None
    units = unit_problem(start_ns)
    if units:
        bad(f"startTimeUnixNano: {units}")
        return None
    cols = _NO_ACCOUNTING_ROW
    if not attrs.keys().isdisjoint(_COLUMN_BY_ATTR):
        row = dict(_NO_ACCOUNTING)
        for attr, col in _COLUMN_BY_ATTR.items():
            if attr in attrs:
                value = attrs.pop(attr)
                row[col] = _integer(value, 31 if col == "children" else 63)
        cols = tuple(row[col] for col in _ACCOUNTING_COLUMNS)
    stage = attrs.pop(semconv.STAGE, None)
    if any(map(_is_derived, attrs)):
        for key in [k for k in attrs if k.startswith(DERIVED_PREFIX)]:
            del attrs[key]
    if scope and "otel.scope.name" not in attrs:
        attrs["otel.scope.name"] = scope
    service, host, pid = (resource.get("service.name"), resource.get("host.name"),
                          resource.get("process.pid"))
    return SpanRecord(
        trace_id, span_id, parent_span_id, name, None if stage is None else str(stage), kind,
        start_ns, end_ns, status, status_message or None,
        None if service is None else str(service), None if host is None else str(host),
        _pid(pid), *cols,
        attrs, events, links)


def _pid(value: Any) -> Optional[int]:
    """A resource's ``process.pid``: an int, or a decimal string (what OTEL_RESOURCE_ATTRIBUTES
    gives an SDK); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = value.strip()
        if not value.isdigit() or not value.isascii():
            return None
        value = int(value)
    return _integer(value, 31)


def _integer(value: Any, bits: int) -> Optional[int]:
    """A number as a signed integer of ``bits`` + 1 bits (floats truncated; the store's
    INTEGER/BIGINT columns), None if it is not one."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        value = int(value)
    if isinstance(value, int) and -(1 << bits) <= value < (1 << bits):
        return int(value)
    return None


# ---- OTLP/JSON ----------------------------------------------------------------------------
def _get(obj: dict, camel: str, snake: str) -> Any:
    """A field of an OTLP/JSON object under either spelling of its name."""
    value = obj.get(camel)
    return obj.get(snake) if value is None else value


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


_SCALARS = (("stringValue", "string_value"), ("boolValue", "bool_value"),
            ("doubleValue", "double_value"))


def value_of(v: Any) -> Any:
    """An OTLP/JSON AnyValue as a plain JSON value (int64s, strings in OTLP/JSON, as ints)."""
    if not isinstance(v, dict):
        return v
    for camel, snake in _SCALARS:
        if camel in v:
            return v[camel]
        if snake in v:
            return v[snake]
    raw = _get(v, "intValue", "int_value")
    if raw is not None:
        try:
            return int(raw)
        except (TypeError, ValueError):
            return raw
    raw = _get(v, "arrayValue", "array_value")
    if raw is not None:
        return [value_of(x) for x in _list(_dict(raw).get("values"))]
    raw = _get(v, "kvlistValue", "kvlist_value")
    if raw is not None:
        return {str(kv.get("key")): value_of(kv.get("value"))
                for kv in _list(_dict(raw).get("values")) if isinstance(kv, dict)}
    return _get(v, "bytesValue", "bytes_value")  # base64 text, as the JSON has it


def attributes(items: Any) -> dict:
    """An OTLP/JSON ``KeyValue`` list as a dict; entries without a key are skipped."""
    out = {}
    for kv in _list(items):
        if isinstance(kv, dict) and "key" in kv:
            out[str(kv["key"])] = value_of(kv.get("value"))
    return out


def json_id(raw: Any, nbytes: int) -> Optional[str]:
    """A hex id of ``nbytes`` bytes, from hex or base64; None if empty, all zero or invalid."""
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
    if isinstance(raw, bool):
        return None
    try:
        value = int(raw)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if value >= 0 else None


def spans_of_request(request: Any, path: str, line: Optional[int],
                     errors: list) -> Iterator[SpanRecord]:
    """The spans of one OTLP/JSON ExportTraceServiceRequest (or TracesData) object. Each span
    that cannot be taken is one problem in ``errors``; so is a request that is not an object."""
    if not isinstance(request, dict):
        errors.append(TraceFormatError(path, line, "expected an OTLP request object"))
        return
    for rs in _list(_get(request, "resourceSpans", "resource_spans")):
        if not isinstance(rs, dict):
            errors.append(TraceFormatError(path, line, "a resourceSpans entry is not an object"))
            continue
        resource = attributes(_dict(rs.get("resource")).get("attributes"))
        scopes = (_get(rs, "scopeSpans", "scope_spans")
                  or _get(rs, "instrumentationLibrarySpans", "instrumentation_library_spans"))
        for ss in _list(scopes):
            if not isinstance(ss, dict):
                errors.append(TraceFormatError(path, line, "a scopeSpans entry is not an object"))
                continue
            scope = _dict(ss.get("scope") or _get(ss, "instrumentationLibrary",
                                                   "instrumentation_library")).get("name")
            for span in _list(ss.get("spans")):
                if not isinstance(span, dict):
                    errors.append(TraceFormatError(path, line, "a span is not an object"))
                    continue
                r = _json_span(span, resource, scope, path, line, errors)
                if r is not None:
                    yield r


def _json_span(span: dict, resource: dict, scope: Any, path: str, line: Optional[int],
               errors: list) -> Optional[SpanRecord]:
    raw_span_id = _get(span, "spanId", "span_id")
    span_id = json_id(raw_span_id, 8)
    raw_trace_id = _get(span, "traceId", "trace_id")
    trace_id = json_id(raw_trace_id, 16)
    name = span.get("name", "")

    def bad(reason: str) -> None:
        errors.append(TraceFormatError(path, line, reason, span_id=span_id or (
            raw_span_id if isinstance(raw_span_id, str) and raw_span_id else None)))

    if trace_id is None:
        bad(f"span {name!r}: traceId missing or not 16 bytes of hex/base64 ({raw_trace_id!r})")
        return None
    if span_id is None:
        bad(f"span {name!r}: spanId missing or not 8 bytes of hex/base64 ({raw_span_id!r})")
        return None
    start = _ns(_get(span, "startTimeUnixNano", "start_time_unix_nano"))
    end = _ns(_get(span, "endTimeUnixNano", "end_time_unix_nano"))
    if start is None or end is None:
        bad("startTimeUnixNano/endTimeUnixNano missing or not integer nanoseconds")
        return None
    status = _dict(span.get("status"))
    events = tuple(SpanEvent(str(e.get("name", "")),
                             _ns(_get(e, "timeUnixNano", "time_unix_nano")) or 0,
                             attributes(e.get("attributes")))
                   for e in _list(span.get("events")) if isinstance(e, dict))
    links = []
    for lk in _list(span.get("links")):
        if isinstance(lk, dict):
            lt = json_id(_get(lk, "traceId", "trace_id"), 16)
            ls = json_id(_get(lk, "spanId", "span_id"), 8)
            if lt and ls:
                links.append(SpanLink(lt, ls, attributes(lk.get("attributes"))))
    message = status.get("message")
    return record(
        trace_id=trace_id, span_id=span_id,
        parent_span_id=json_id(_get(span, "parentSpanId", "parent_span_id"), 8),
        name=str(name), kind=kind_of(span.get("kind", 0)), start_ns=start, end_ns=end,
        status=status_of(status.get("code", 0)),
        status_message=None if message is None else str(message), resource=resource,
        scope=None if scope is None else str(scope), attrs=attributes(span.get("attributes")),
        events=events, links=tuple(links), bad=bad)
