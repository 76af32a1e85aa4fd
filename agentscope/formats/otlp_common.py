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
import json
import math
import operator
import re
from typing import Any, Callable, Iterator, Optional

from .. import semconv
from ..errors import TraceFormatError
from ..records import (INT64_MAX, INT_FIELDS, MAX_EPOCH_NS, SpanEvent, SpanLink, SpanRecord,
                       span_problem, time_problem)

# the largest OTLP request the receiver takes, in bytes, as sent and as decompressed
# (`agentscope receive --max-body`)
MAX_BODY = 16 << 20

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
_BOUNDS = {name: (smallest, largest) for name, smallest, largest in INT_FIELDS}
_HEX = re.compile(r"[0-9a-fA-F]+\Z")

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
        raw = (int(raw) if raw.isascii() and raw.isdigit() and len(raw) < 10
               else by_name.get(raw, default))
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
    if end_ns > INT64_MAX:
        bad(f"end {end_ns} is past what a 64-bit signed count of nanoseconds holds")
        return None
    if end_ns > MAX_EPOCH_NS:
        bad(f"endTimeUnixNano {end_ns} is past 2116: not epoch nanoseconds")
        return None
    problem = time_problem("startTimeUnixNano", start_ns)
    if problem:
        bad(problem)
        return None
    cols = _NO_ACCOUNTING_ROW
    if not attrs.keys().isdisjoint(_COLUMN_BY_ATTR):
        row = dict(_NO_ACCOUNTING)
        for attr, col in _COLUMN_BY_ATTR.items():
            if attr in attrs:
                value = attrs.pop(attr)
                row[col] = _integer(value, *_BOUNDS[col])
        cols = tuple(row[col] for col in _ACCOUNTING_COLUMNS)
    stage = attrs.pop(semconv.STAGE, None)
    if any(map(_is_derived, attrs)):
        for key in [k for k in attrs if k.startswith(DERIVED_PREFIX)]:
            del attrs[key]
    if scope and "otel.scope.name" not in attrs:
        attrs["otel.scope.name"] = scope
    service, host, pid = (resource.get("service.name"), resource.get("host.name"),
                          resource.get("process.pid"))
    r = SpanRecord(
        trace_id, span_id, parent_span_id, name, _opt_text(stage), kind,
        start_ns, end_ns, status, status_message or None,
        _opt_text(service), _opt_text(host), _pid(pid), *cols,
        attrs, events, links)
    problem = span_problem(r)
    if problem:
        bad(problem)
        return None
    return r


def _opt_text(value: Any) -> Optional[str]:
    """A string column from an attribute of any type (None stays None)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)[:1000]
    return str(value)


def _pid(value: Any) -> Optional[int]:
    """A resource's ``process.pid``: an int, or a decimal string (what OTEL_RESOURCE_ATTRIBUTES
    gives an SDK); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = value.strip()
        if not value.isdigit() or not value.isascii() or len(value) > 12:
            return None
        value = int(value)
    return _integer(value, *_BOUNDS["pid"])


def _integer(value: Any, smallest: int, largest: int) -> Optional[int]:
    """A number as an integer from ``smallest`` to ``largest`` (floats truncated; the bounds
    of the store's columns and of the analysis' arithmetic: records.INT_FIELDS), None if it
    is not one: an accounting attribute out of its range is not a measurement."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        value = int(value)
    if isinstance(value, int) and smallest <= value <= largest:
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
        except (TypeError, ValueError, OverflowError):  # text, more digits than int() reads, inf
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
    that cannot be taken is one problem in ``errors``, naming its place in the request
    (``resourceSpans[0].scopeSpans[1].spans[3].startTimeUnixNano``); so is a node of the
    wrong type (``null``, a string or a list where an object belongs: skipped with what is
    under it) and a request that is not an object."""
    if not isinstance(request, dict):
        errors.append(TraceFormatError(path, line, "expected an OTLP request object, found "
                                       f"{_type(request)}"))
        return
    for i, rs in enumerate(_nodes(_get(request, "resourceSpans", "resource_spans"),
                                  "resourceSpans", path, line, errors)):
        where = f"resourceSpans[{i}]"
        if not isinstance(rs, dict):
            errors.append(TraceFormatError(path, line, f"{where}: expected an object, found "
                                           f"{_type(rs)}"))
            continue
        resource = _attributes_at(_dict_at(rs.get("resource"), f"{where}.resource", path,
                                           line, errors).get("attributes"),
                                  f"{where}.resource.attributes", path, line, errors)
        scopes = (_get(rs, "scopeSpans", "scope_spans")
                  or _get(rs, "instrumentationLibrarySpans", "instrumentation_library_spans"))
        for j, ss in enumerate(_nodes(scopes, f"{where}.scopeSpans", path, line, errors)):
            at = f"{where}.scopeSpans[{j}]"
            if not isinstance(ss, dict):
                errors.append(TraceFormatError(path, line, f"{at}: expected an object, found "
                                               f"{_type(ss)}"))
                continue
            scope = _dict_at(ss.get("scope") or _get(ss, "instrumentationLibrary",
                                                     "instrumentation_library"),
                             f"{at}.scope", path, line, errors).get("name")
            if scope is not None and not isinstance(scope, str):
                errors.append(TraceFormatError(path, line, f"{at}.scope.name: expected a "
                                               f"string, found {_type(scope)}; left out"))
                scope = None
            for k, span in enumerate(_nodes(ss.get("spans"), f"{at}.spans", path, line,
                                            errors)):
                here = f"{at}.spans[{k}]"
                if not isinstance(span, dict):
                    errors.append(TraceFormatError(path, line, f"{here}: expected a span "
                                                   f"object, found {_type(span)}"))
                    continue
                r = _json_span(span, resource, scope, here, path, line, errors)
                if r is not None:
                    yield r


def _type(value: Any) -> str:
    """What a JSON value is, for a problem's reason."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def _nodes(value: Any, where: str, path: str, line: Optional[int], errors: list) -> list:
    """A repeated field: its list; None or missing is none; anything else is a problem."""
    if value is None or isinstance(value, list):
        return value or []
    errors.append(TraceFormatError(path, line, f"{where}: expected a list, found "
                                   f"{_type(value)}; what it holds is not loaded"))
    return []


def _dict_at(value: Any, where: str, path: str, line: Optional[int], errors: list) -> dict:
    """A message field: its object; None or missing is empty; anything else a problem."""
    if value is None or isinstance(value, dict):
        return value or {}
    errors.append(TraceFormatError(path, line, f"{where}: expected an object, found "
                                   f"{_type(value)}; left out"))
    return {}


def _attributes_at(items: Any, where: str, path: str, line: Optional[int],
                   errors: list) -> dict:
    """``attributes`` of a resource, span or event; a value that is not a KeyValue list is a
    problem and reads as none, as does an entry without a string key."""
    if items is not None and not isinstance(items, list):
        errors.append(TraceFormatError(path, line, f"{where}: expected a list, found "
                                       f"{_type(items)}; left out"))
        return {}
    try:
        return attributes(items)
    except RecursionError:
        errors.append(TraceFormatError(path, line, f"{where}: values nested too deeply; "
                                       "left out"))
        return {}


def _json_span(span: dict, resource: dict, scope: Any, where: str, path: str,
               line: Optional[int], errors: list) -> Optional[SpanRecord]:
    raw_span_id = _get(span, "spanId", "span_id")
    span_id = json_id(raw_span_id, 8)
    raw_trace_id = _get(span, "traceId", "trace_id")
    trace_id = json_id(raw_trace_id, 16)
    name = span.get("name")
    if name is None:
        name = ""
    label = where + (f" ({name!r})" if isinstance(name, str) and name else "")

    def bad(reason: str) -> None:
        errors.append(TraceFormatError(path, line, f"{label}: {reason}", span_id=span_id or (
            raw_span_id[:64] if isinstance(raw_span_id, str) and raw_span_id else None)))

    if not isinstance(name, str):
        bad(f"name: expected a string, found {_type(name)}")
        return None
    if trace_id is None:
        bad(f"traceId missing or not 16 bytes of hex/base64 ({_short(raw_trace_id)})")
        return None
    if span_id is None:
        bad(f"spanId missing or not 8 bytes of hex/base64 ({_short(raw_span_id)})")
        return None
    times = []
    for camel, snake in (("startTimeUnixNano", "start_time_unix_nano"),
                         ("endTimeUnixNano", "end_time_unix_nano")):
        raw = _get(span, camel, snake)
        value = _ns(raw)
        if value is None:
            bad(f"{camel}: missing or not integer nanoseconds ({_short(raw)})")
            return None
        times.append(value)
    start, end = times
    status = _dict_at(span.get("status"), f"{where}.status", path, line, errors)
    events = []
    for i, e in enumerate(_nodes(span.get("events"), f"{where}.events", path, line, errors)):
        if not isinstance(e, dict):
            bad(f"events[{i}]: expected an object, found {_type(e)}; that event is left out")
            continue
        when = _ns(_get(e, "timeUnixNano", "time_unix_nano"))
        event_name = e.get("name")
        events.append(SpanEvent(event_name if isinstance(event_name, str) else "",
                                0 if when is None or when > MAX_EPOCH_NS else when,
                                _attributes_at(e.get("attributes"), f"{where}.events[{i}]"
                                               ".attributes", path, line, errors)))
    links = []
    for i, lk in enumerate(_nodes(span.get("links"), f"{where}.links", path, line, errors)):
        if isinstance(lk, dict):
            lt = json_id(_get(lk, "traceId", "trace_id"), 16)
            ls = json_id(_get(lk, "spanId", "span_id"), 8)
            if lt and ls:
                links.append(SpanLink(lt, ls, _attributes_at(
                    lk.get("attributes"), f"{where}.links[{i}].attributes", path, line,
                    errors)))
    message = status.get("message")
    return record(
        trace_id=trace_id, span_id=span_id,
        parent_span_id=json_id(_get(span, "parentSpanId", "parent_span_id"), 8),
        name=name, kind=kind_of(span.get("kind", 0)), start_ns=start, end_ns=end,
        status=status_of(status.get("code", 0)),
        status_message=None if message is None else _text(message), resource=resource,
        scope=None if scope is None else str(scope),
        attrs=_attributes_at(span.get("attributes"), f"{where}.attributes", path, line, errors),
        events=tuple(events), links=tuple(links), bad=bad)


def _short(value: Any) -> str:
    """A raw value in a reason: short, and never a walk of something nested."""
    if isinstance(value, (dict, list)):
        return _type(value)
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _text(value: Any) -> str:
    """A string field that came as another JSON type: its JSON text (never a repr of
    something nested)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return _type(value)
    return str(value)
