"""Jaeger JSON traces: the UI's "Download JSON" file and the query service's answers.

Shapes read (see docs/file-formats.md, "Jaeger JSON"):

* ``/api/traces`` and ``/api/traces/{id}`` answers: ``{"data": [trace, ...], "total", "limit",
  "offset", "errors"}``;
* one trace object ``{"traceID", "spans": [...], "processes": {"p1": {...}}, "warnings"}``, or a
  list of them (some downloads and test inputs have no ``data`` wrapper);
* spans on their own (a list of spans, one span, or one span per line), where each span embeds
  its ``process`` instead of naming a ``processID`` (Jaeger's Elasticsearch/Kafka documents).

Times are microseconds since the epoch; tags are typed ``{key, type, value}`` pairs whose keys
become the span's attributes as they are. Jaeger's own conventions for what OpenTelemetry has
fields for (``span.kind``, ``otel.status_code``, ``otel.status_description``, ``error``) are
mapped onto the record's fields.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from ...errors import TraceFormatError
from ...records import SpanEvent, SpanLink, SpanRecord
from . import Importer
from ._common import TOO_DEEP, hex_id, json_problem, span

_KINDS = ("internal", "server", "client", "producer", "consumer")
_STATUS = {"ok": "ok", "error": "error", "unset": "unset"}
_MAX_US = (2**63 - 1) // 1000  # beyond this the nanoseconds overflow int64 (year 2262)
_SNIFF_KEYS = (re.compile(rb'"traceID"\s*:'), re.compile(rb'"spanID"\s*:'),
               re.compile(rb'"operationName"\s*:'))
_SPANS_ARRAY = re.compile(r'"spans"\s*:\s*\[')


def sniff(head: bytes, name: str) -> bool:
    """Jaeger JSON: a JSON document (or JSON lines) with ``traceID``, ``spanID`` and
    ``operationName`` keys."""
    stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if stripped[:1] not in (b"{", b"["):
        return False
    return all(key.search(head) for key in _SNIFF_KEYS)


def read(data: bytes, path: str, errors: list) -> Iterator[SpanRecord]:
    """The spans of a Jaeger JSON file; bad spans and lines go to ``errors``."""
    text = data.decode("utf-8", errors="replace").lstrip("\ufeff")
    if not text.strip():
        return
    try:
        whole = json.loads(text)
    except (ValueError, RecursionError) as e:
        where, why = json_problem(e)
    else:
        yield from _document(whole, path, None, errors)
        return
    lines = [ln for ln in enumerate(text.splitlines(), 1) if ln[1].strip()]
    if len(lines) > 1 and _parses(lines[0][1]):
        yield from _json_lines(lines, text.endswith("\n"), path, errors)
        return
    errors.append(TraceFormatError(path, where, (
        f"not valid JSON ({why}); the whole spans before that point are loaded")))
    yield from _salvage(text, path, errors)


def _parses(line: str) -> bool:
    try:
        return isinstance(json.loads(line), (dict, list))
    except (ValueError, RecursionError):
        return False


def _json_lines(lines: list, terminated: bool, path: str, errors: list) -> Iterator[SpanRecord]:
    """One trace, one answer or one span per line."""
    for i, (number, line) in enumerate(lines):
        try:
            value = json.loads(line)
        except (ValueError, RecursionError) as e:
            torn = i == len(lines) - 1 and not terminated
            reason = (f"not valid JSON ({e.msg}, column {e.colno})"
                      if isinstance(e, json.JSONDecodeError) else "not valid JSON")
            errors.append(TraceFormatError(path, number, ("torn last line; skipped: " + reason)
                                           if torn else reason, torn=torn))
            continue
        yield from _document(value, path, number, errors)


def _document(value: Any, path: str, line: int | None, errors: list) -> Iterator[SpanRecord]:
    """Every trace in one parsed JSON value, whatever its wrapper."""
    if isinstance(value, dict) and "data" in value and "spans" not in value:
        traces = value["data"]
        if traces is not None and not isinstance(traces, list):
            errors.append(TraceFormatError(path, line, "'data' is not a list of traces"))
        for i, trace in enumerate(traces if isinstance(traces, list) else ()):
            yield from _trace(trace, f"data[{i}]", path, line, errors)
        problems = value.get("errors")
        for problem in problems if isinstance(problems, list) else [problems] * bool(problems):
            errors.append(TraceFormatError(path, line, f"the query service reported: {problem}"))
    elif isinstance(value, dict) and "spans" in value:
        yield from _trace(value, "trace", path, line, errors)
    elif isinstance(value, dict) and "spanID" in value:
        yield from _spans([("span", value)], {}, None, path, line, errors)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, dict) and "spans" in item:
                yield from _trace(item, f"[{i}]", path, line, errors)
            else:
                yield from _spans([(f"[{i}]", item)], {}, None, path, line, errors)
    else:
        errors.append(TraceFormatError(path, line, "not a Jaeger trace, trace list or span"))


def _trace(trace: Any, where: str, path: str, line: int | None,
           errors: list) -> Iterator[SpanRecord]:
    if not isinstance(trace, dict):
        errors.append(TraceFormatError(path, line, f"{where}: expected a trace object"))
        return
    spans = trace.get("spans")
    if not isinstance(spans, list):
        errors.append(TraceFormatError(path, line, f"{where}: 'spans' is not a list"))
        return
    processes = trace.get("processes")
    yield from _spans([(f"{where}.spans[{i}]", raw) for i, raw in enumerate(spans)],
                      processes if isinstance(processes, dict) else {}, trace.get("traceID"),
                      path, line, errors)


def _spans(spans: list, processes: dict, trace_raw: Any, path: str, line: int | None,
           errors: list) -> Iterator[SpanRecord]:
    """Records of ``(where, raw span)`` pairs; ``where`` names the record in errors."""
    for where, raw in spans:
        try:
            record = _span(raw, processes, trace_raw, where, path, line, errors)
        except RecursionError:
            errors.append(TraceFormatError(path, line, f"{where}: {TOO_DEEP}"))
            continue
        except Exception as e:  # noqa: BLE001 - unforeseen shape: report, load the rest
            errors.append(TraceFormatError(path, line, f"{where}: unreadable span ({e!r})"))
            continue
        if record is not None:
            yield record


def _span(raw: Any, processes: dict, trace_raw: Any, where: str, path: str,
          line: int | None, errors: list) -> SpanRecord | None:
    if not isinstance(raw, dict):
        errors.append(TraceFormatError(path, line, f"{where}: expected a span object"))
        return None
    span_id = hex_id(raw.get("spanID"), 8)
    name = raw.get("operationName")
    label = f"{where} ({name!r})" if isinstance(name, str) else where

    def bad(reason: str) -> None:
        errors.append(TraceFormatError(path, line, f"{label}: {reason}", span_id=span_id))

    if span_id is None:
        bad(f"spanID missing or empty ({raw.get('spanID')!r})")
        return None
    trace_id = hex_id(raw.get("traceID") or trace_raw, 16)
    if trace_id is None:
        bad("traceID missing (neither on the span nor on its trace)")
        return None
    start = _micros(raw.get("startTime"))
    duration = _micros(raw.get("duration"))
    if isinstance(start, str) or isinstance(duration, str):
        bad("; ".join(f"{field} {problem}" for field, problem in
                      (("startTime", start), ("duration", duration)) if isinstance(problem, str)))
        return None
    parent, links = _references(raw, trace_id, span_id)
    attrs = _tags(raw.get("tags"))
    kind = attrs.pop("span.kind", None)
    if isinstance(kind, str) and kind.lower() in _KINDS:
        kind = kind.lower()
    else:
        if kind is not None:
            attrs["span.kind"] = kind  # not an OpenTelemetry kind: kept as data
        kind = "internal"
    status = _STATUS.get(str(attrs.pop("otel.status_code", "")).lower(), "unset")
    if status == "unset" and attrs.get("error") in (True, "true"):
        status = "error"
    message = attrs.pop("otel.status_description", None)
    warnings = raw.get("warnings")
    if isinstance(warnings, list) and warnings:
        attrs["jaeger.warnings"] = tuple(str(w) for w in warnings)
    process = raw.get("process")
    if not isinstance(process, dict) and isinstance(raw.get("processID"), str):
        process = processes.get(raw["processID"])
    service, host, pid = _process(process if isinstance(process, dict) else {})
    events = []
    for j, log in enumerate(_list(raw.get("logs"))):
        event = _event(log)
        if isinstance(event, str):
            bad(f"logs[{j}]: {event}; that log is skipped")
        else:
            events.append(event)
    return span(trace_id, span_id, parent, str(name) if name is not None else "",
                start * 1000, (start + duration) * 1000, attrs, kind=kind, status=status,
                status_message=None if message is None else str(message), service=service,
                host=host, pid=pid, events=tuple(events), links=tuple(links))


def _micros(raw: Any) -> int | str:
    """Whole microseconds, or why the value is not."""
    if isinstance(raw, bool) or raw is None:
        return "is missing" if raw is None else f"is {raw!r}, not microseconds"
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if not isinstance(raw, int):
        return f"is {raw!r} ({type(raw).__name__}), expected whole microseconds"
    if raw < 0:
        return f"is negative ({raw})"
    if raw > _MAX_US:
        return f"{raw} is too large for microseconds (nanoseconds given as microseconds?)"
    return raw


def _references(raw: dict, trace_id: str, span_id: str) -> tuple[str | None, list]:
    """The parent (the CHILD_OF reference in this trace, else the first FOLLOWS_FROM) and the
    other references as links; a reference to the span itself is dropped."""
    refs = []
    for ref in _list(raw.get("references")):
        if not isinstance(ref, dict):
            continue
        sid = hex_id(ref.get("spanID"), 8)
        tid = hex_id(ref.get("traceID"), 16) or trace_id
        if sid is not None and (tid, sid) != (trace_id, span_id):
            refs.append((str(ref.get("refType") or "CHILD_OF").upper(), tid, sid))
    legacy = hex_id(raw.get("parentSpanID"), 8)  # thrift-era field some exporters still write
    if legacy not in (None, span_id) and not any(sid == legacy for _, _, sid in refs):
        refs.insert(0, ("CHILD_OF", trace_id, legacy))
    parent_ref = next((r for r in refs if r[0] == "CHILD_OF" and r[1] == trace_id), None)
    if parent_ref is None:
        parent_ref = next((r for r in refs if r[0] == "FOLLOWS_FROM" and r[1] == trace_id), None)
    links = [SpanLink(tid, sid, {"opentracing.ref_type": ref_type.lower()})
             for ref_type, tid, sid in refs if (ref_type, tid, sid) != parent_ref]
    return (parent_ref[2] if parent_ref else None), links


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _tags(items: Any) -> dict:
    out: dict = {}
    for tag in _list(items):
        if isinstance(tag, dict) and isinstance(tag.get("key"), str):
            out[tag["key"]] = _value(tag.get("type"), tag.get("value"))
    return out


def _value(kind: Any, value: Any) -> Any:
    """A tag's value as its declared type (bool, int64, float64, string; binary stays the
    base64 text Jaeger writes); a value that does not fit its type is kept as it came."""
    try:
        if kind == "bool" and isinstance(value, str):
            return {"true": True, "false": False}.get(value.lower(), value)
        if kind == "int64" and isinstance(value, (str, float)) and not isinstance(value, bool):
            return int(value)
        if kind == "float64" and isinstance(value, (str, int)) and not isinstance(value, bool):
            return float(value)
    except (TypeError, ValueError, OverflowError):
        return value
    if kind == "string" and not isinstance(value, str) and value is not None:
        return str(value)
    if isinstance(value, (dict, list)):  # not an attribute value: keep it readable
        return json.dumps(value, sort_keys=True)
    return value


def _process(process: dict) -> tuple[str | None, str | None, int | None]:
    tags = _tags(process.get("tags"))
    service = process.get("serviceName")
    host = tags.get("host.name", tags.get("hostname"))
    pid = tags.get("process.pid", tags.get("pid"))
    try:
        pid = int(pid) if pid is not None and not isinstance(pid, bool) else None
    except (TypeError, ValueError, OverflowError):
        pid = None
    return (None if service in (None, "") else str(service),
            None if host in (None, "") else str(host), pid)


def _event(log: Any) -> SpanEvent | str:
    if not isinstance(log, dict):
        return "expected a log object"
    when = _micros(log.get("timestamp"))
    if isinstance(when, str):
        return f"timestamp {when}"
    fields = _tags(log.get("fields"))
    name = fields.pop("event", None)
    return SpanEvent("log" if name in (None, "") else str(name), when * 1000, fields)


def _salvage(text: str, path: str, errors: list) -> Iterator[SpanRecord]:
    """The whole spans of a JSON document that breaks off (a truncated download): each
    ``"spans": [`` array is read element by element up to the break, the trace's ``traceID``
    and ``processes`` used where they are still readable; a document that is a bare list of
    spans is read the same way."""
    decoder = json.JSONDecoder()
    arrays = list(_SPANS_ARRAY.finditer(text))
    for match in arrays:
        found = re.findall(r'"traceID"\s*:\s*"([^"]*)"',
                           text[max(0, match.start() - 400):match.start()])
        processes = _processes_after(text, match.end(), decoder)
        for index, (line, value) in enumerate(_elements(text, match.end(), decoder)):
            record = _span(value, processes, found[-1] if found else None, f"spans[{index}]",
                           path, line, errors)
            if record is not None:
                yield record
    if not arrays and text.lstrip().startswith("["):
        for line, value in _elements(text, text.index("[") + 1, decoder):
            yield from _document([value], path, line, errors)


def _elements(text: str, pos: int, decoder: json.JSONDecoder) -> Iterator[tuple[int, Any]]:
    """(line, value) of the elements of the JSON array starting at ``pos``, up to its end or
    to the first element that does not parse."""
    line, counted = text.count("\n", 0, pos) + 1, pos
    while True:
        pos = _skip(text, pos, " \t\r\n,")
        if pos >= len(text) or text[pos] == "]":
            return
        line, counted = line + text.count("\n", counted, pos), pos
        try:
            value, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return
        yield line, value


def _processes_after(text: str, start: int, decoder: json.JSONDecoder) -> dict:
    match = re.compile(r'"processes"\s*:\s*(?=\{)').search(text, start)
    nxt = _SPANS_ARRAY.search(text, start)
    if match is None or (nxt is not None and nxt.start() < match.start()):
        return {}
    try:
        value, _ = decoder.raw_decode(text, match.end())
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _skip(text: str, pos: int, chars: str) -> int:
    while pos < len(text) and text[pos] in chars:
        pos += 1
    return pos


IMPORTER = Importer("jaeger", "Jaeger JSON", sniff, read)
