"""Span files, format version 1: one JSON object per line, one span per object.

File names: ``spans-<host>-<pid>-<unix ms>[-<n>].jsonl`` in the trace directory, one file
per writing process (so several processes can share a directory without interleaving).
Keys are the fields of :class:`agentscope.records.SpanRecord`, always all present, in that
order. See docs/file-formats.md for the full description and an example line.
"""

from __future__ import annotations

import json
import math
import re
from types import MappingProxyType
from json.encoder import encode_basestring_ascii as _q
from typing import Any, Iterator, Mapping

from ..errors import TraceFormatError
from ..records import (INT_FIELDS, KINDS, MAX_EPOCH_NS, MIN_EPOCH_NS, STATUSES, SpanEvent,
                       SpanLink, SpanRecord, span_problem, unit_problem)
from .lines import NotJSON, iter_lines, strict_loads
from .naming import stem

FORMAT_VERSION = 1
FILE_PREFIX = "spans-"
FILE_SUFFIX = ".jsonl"
FIELDS = SpanRecord._fields


def file_name(host: str, pid: int, ms: int, part: int = 0) -> str:
    """``spans-<host>-<pid>-<ms>[-<part>].jsonl``: process ``pid``'s span file on ``host``,
    started at ``ms`` (Unix ms); ``part`` > 0 for the files after the first (size limit)."""
    return f"{FILE_PREFIX}{stem(host, pid, ms)}{f'-{part}' if part else ''}{FILE_SUFFIX}"

_HEX32 = re.compile(r"[0-9a-f]{32}\Z")
_HEX16 = re.compile(r"[0-9a-f]{16}\Z")
# the integer columns and their bounds: records.INT_FIELDS (re-exported names below are kept
# for the importers and the store, which take them from here)
_INT_FIELDS = tuple(field[0] for field in INT_FIELDS)
__all__ = ["FIELDS", "FORMAT_VERSION", "KINDS", "MAX_EPOCH_NS", "MIN_EPOCH_NS", "STATUSES",
           "decode", "encode", "encode_fields", "file_name", "read", "unit_problem"]


_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, allow_nan=False,
                          default=str).encode


def _json(value: Any) -> str:
    """Compact JSON; NaN/Infinity (not JSON) become strings rather than breaking the line."""
    try:
        return _dumps(value)
    except ValueError:
        return _dumps(_finite(value))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


_attrs_cache: dict = {}


def _attrs_json(attrs: Mapping[str, Any]) -> str:
    """JSON of an attribute map; read-only maps (shared by every span of one decorated
    function) are encoded once and remembered."""
    if not attrs:
        return "{}"
    if type(attrs) is MappingProxyType:
        hit = _attrs_cache.get(id(attrs))
        if hit is not None and hit[0] is attrs:
            return hit[1]
        text = _json(dict(attrs))
        if len(_attrs_cache) >= 4096:
            _attrs_cache.clear()
        _attrs_cache[id(attrs)] = (attrs, text)
        return text
    return _json(attrs if isinstance(attrs, dict) else dict(attrs))


def encode_fields(trace_id: str, span_id: str, parent_span_id: "str | None", name: str,
                  stage: "str | None", kind: str, start_ns: int, end_ns: int, status: str,
                  status_message: "str | None", service: "str | None", host: "str | None",
                  pid: "int | None", tid: "int | None", thread_cpu_ns: "int | None",
                  child_cpu_ns: "int | None", children: "int | None", vcsw: "int | None",
                  ivcsw: "int | None", minflt: "int | None", majflt: "int | None",
                  child_majflt: "int | None", attrs: Mapping[str, Any], events: Any = (),
                  links: Any = ()) -> str:
    """One span as one line (with its trailing newline); arguments in SpanRecord order.

    The writer calls this directly for its own spans, skipping the SpanRecord; everything
    else goes through :func:`encode`. Integer fields must be ``int`` (or None): they are
    written as they are.
    """
    ev = "[]" if not events else _json(
        [{"name": e.name, "time_ns": e.time_ns, "attrs": dict(e.attrs)} for e in events])
    ln = "[]" if not links else _json(
        [{"trace_id": k.trace_id, "span_id": k.span_id, "attrs": dict(k.attrs)} for k in links])
    n = "null"
    return (
        f'{{"trace_id":"{trace_id}","span_id":"{span_id}","parent_span_id":'
        f'{n if parent_span_id is None else _q(parent_span_id)},"name":{_q(name)},'
        f'"stage":{n if stage is None else _q(stage)},"kind":"{kind}",'
        f'"start_ns":{start_ns:d},"end_ns":{end_ns:d},"status":"{status}","status_message":'
        f'{n if status_message is None else _q(status_message)},'
        f'"service":{n if service is None else _q(service)},'
        f'"host":{n if host is None else _q(host)},"pid":{n if pid is None else pid},'
        f'"tid":{n if tid is None else tid},'
        f'"thread_cpu_ns":{n if thread_cpu_ns is None else thread_cpu_ns},'
        f'"child_cpu_ns":{n if child_cpu_ns is None else child_cpu_ns},'
        f'"children":{n if children is None else children},'
        f'"vcsw":{n if vcsw is None else vcsw},"ivcsw":{n if ivcsw is None else ivcsw},'
        f'"minflt":{n if minflt is None else minflt},'
        f'"majflt":{n if majflt is None else majflt},'
        f'"child_majflt":{n if child_majflt is None else child_majflt},'
        f'"attrs":{_attrs_json(attrs)},"events":{ev},"links":{ln}}}\n'
    )


def encode(r: SpanRecord) -> str:
    """One span as one line (with its trailing newline)."""
    return encode_fields(*r)


def decode(text: str, path: str = "<string>", line: "int | None" = None) -> SpanRecord:
    """Parse and validate one line; raise :class:`TraceFormatError` naming file, line and span.

    Everything the store could not take, or the analysis could not compute with, is refused
    here with its reason (records.span_problem): a value of the wrong type at any key, an
    integer past its column, a time that is not epoch ns, a span with no start time. Lone
    surrogates in strings (what ``os.fsdecode`` gives for a file name that is not UTF-8) are
    taken: the store keeps them as U+FFFD."""
    try:
        obj = strict_loads(text)
    except NotJSON as e:
        raise TraceFormatError(path, line, f"not valid JSON ({e})") from None
    if not isinstance(obj, dict):
        raise TraceFormatError(path, line, f"expected a JSON object, found {type(obj).__name__}")
    span_id = obj.get("span_id")
    sid = span_id if isinstance(span_id, str) and _HEX16.match(span_id) else None

    def bad(reason: str) -> TraceFormatError:
        return TraceFormatError(path, line, reason, span_id=sid)

    trace_id = obj.get("trace_id")
    if not isinstance(trace_id, str) or not _HEX32.match(trace_id) or trace_id == "0" * 32:
        raise bad(f"trace_id must be 32 lowercase hex digits, not all zero; got {_show(trace_id)}")
    if not isinstance(span_id, str) or not _HEX16.match(span_id) or span_id == "0" * 16:
        raise bad(f"span_id must be 16 lowercase hex digits, not all zero; got {_show(span_id)}")
    parent = obj.get("parent_span_id")
    if parent is not None and (not isinstance(parent, str) or not _HEX16.match(parent)):
        raise bad(f"parent_span_id must be null or 16 lowercase hex digits; got {_show(parent)}")
    name = obj.get("name")
    if name is None:
        raise bad("name must be a string; got None")
    start, end = obj.get("start_ns"), obj.get("end_ns")
    for key, value in (("start_ns", start), ("end_ns", end)):
        if type(value) is not int or value < 0:
            raise bad(f"{key} must be a non-negative integer (Unix epoch ns); got {_show(value)}")
    if end < start:
        raise bad(f"end_ns {end} is before start_ns {start}")
    kind = obj.get("kind", "internal")
    if kind not in KINDS:
        raise bad(f"kind must be one of {', '.join(KINDS)}; got {_show(kind)}")
    status = obj.get("status", "unset")
    if status not in STATUSES:
        raise bad(f"status must be one of {', '.join(STATUSES)}; got {_show(status)}")
    ints = {}
    for key in _INT_FIELDS:
        value = obj.get(key)
        if value is not None and type(value) is not int:
            raise bad(f"{key} must be an integer or null; got {_show(value)}")
        ints[key] = value
    attrs = obj.get("attrs")
    if attrs is None:
        attrs = {}
    elif not isinstance(attrs, dict):
        raise bad(f"attrs must be a JSON object; got {_show(attrs)}")
    texts = {}
    for key in ("name", "stage", "status_message", "service", "host"):
        value = obj.get(key)
        if value is None or isinstance(value, str):
            texts[key] = value
            continue
        try:
            texts[key] = _json_text(value)
        except RecursionError:
            raise bad(f"{key} is nested too deeply to read") from None
    try:
        events = tuple(_event(e) for e in _array(obj.get("events"), "events"))
        links = tuple(_link(k) for k in _array(obj.get("links"), "links"))
    except ValueError as e:
        raise bad(str(e)) from None
    record = SpanRecord(
        trace_id=trace_id, span_id=span_id, parent_span_id=parent, kind=kind,
        start_ns=start, end_ns=end, status=status, attrs=attrs, events=events, links=links,
        **texts, **ints)
    problem = span_problem(record)  # the bounds: times, integer columns
    if problem:
        raise bad(problem)
    return record


def _show(value: Any) -> str:
    """A value in a problem's reason, short: a corrupt line can hold megabytes or nesting
    that ``repr`` cannot walk."""
    if isinstance(value, (dict, list)):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _json_text(value: Any) -> str:
    """Another JSON value where a string belongs, as its JSON text: what DuckDB's reader
    makes of it in a text column (the fast path), so both paths store the same."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _array(value: Any, key: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{key} must be a JSON array; got {_show(value)}")
    return value


def _event(e: Any) -> SpanEvent:
    if not isinstance(e, dict):
        raise ValueError(f"an event must be a JSON object; got {_show(e)}")
    name, time_ns, attrs = e.get("name"), e.get("time_ns"), e.get("attrs")
    if not isinstance(name, str) or type(time_ns) is not int:
        raise ValueError("an event must have a string name and an integer time_ns; got "
                         f"{_show(name)}, {_show(time_ns)}")
    if attrs is not None and not isinstance(attrs, dict):
        raise ValueError(f"an event's attrs must be a JSON object; got {_show(attrs)}")
    return SpanEvent(name, time_ns, attrs or {})


def _link(k: Any) -> SpanLink:
    if not isinstance(k, dict):
        raise ValueError(f"a link must be a JSON object; got {_show(k)}")
    trace_id, span_id, attrs = k.get("trace_id"), k.get("span_id"), k.get("attrs")
    if not isinstance(trace_id, str) or not isinstance(span_id, str):
        raise ValueError("a link must have string trace_id and span_id; got "
                         f"{_show(trace_id)}, {_show(span_id)}")
    if attrs is not None and not isinstance(attrs, dict):
        raise ValueError(f"a link's attrs must be a JSON object; got {_show(attrs)}")
    return SpanLink(trace_id, span_id, attrs or {})


def read(path: str, errors: "list[TraceFormatError] | None" = None) -> Iterator[SpanRecord]:
    """Yield the valid spans of one span file.

    A bad line is appended to ``errors`` (or raised, when ``errors`` is None) and reading goes
    on with the next line. An unparsable last line with no newline is a torn write: it is
    reported with ``torn=True``.
    """
    for ln in iter_lines(path):
        try:
            yield decode(ln.text, str(path), ln.number)
        except TraceFormatError as e:
            if not ln.terminated:
                e = TraceFormatError(e.path, e.line, "torn last line (the writer stopped "
                                     "mid-write); skipped: " + e.reason, e.span_id, torn=True)
            if errors is None:
                raise e from None
            errors.append(e)
