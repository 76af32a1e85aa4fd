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
from ..records import SpanEvent, SpanLink, SpanRecord
from .lines import iter_lines
from .naming import stem

FORMAT_VERSION = 1
FILE_PREFIX = "spans-"
FILE_SUFFIX = ".jsonl"
FIELDS = SpanRecord._fields


def file_name(host: str, pid: int, ms: int, part: int = 0) -> str:
    """``spans-<host>-<pid>-<ms>[-<part>].jsonl``: process ``pid``'s span file on ``host``,
    started at ``ms`` (Unix ms); ``part`` > 0 for the files after the first (size limit)."""
    return f"{FILE_PREFIX}{stem(host, pid, ms)}{f'-{part}' if part else ''}{FILE_SUFFIX}"

KINDS = ("internal", "server", "client", "producer", "consumer")
STATUSES = ("unset", "ok", "error")
_HEX32 = re.compile(r"[0-9a-f]{32}\Z")
_HEX16 = re.compile(r"[0-9a-f]{16}\Z")
_INT_FIELDS = ("pid", "tid", "thread_cpu_ns", "child_cpu_ns", "children", "vcsw", "ivcsw",
               "minflt", "majflt", "child_majflt")

# Epoch nanoseconds before this (1973-03-03) are almost surely another unit given as ns
MIN_EPOCH_NS = 10**17


def unit_problem(ns: int) -> "str | None":
    """Why a timestamp that should be Unix epoch nanoseconds is not (None if it looks fine)."""
    if ns >= MIN_EPOCH_NS or ns == 0:
        return None
    unit = "seconds" if ns < 10**11 else "milliseconds" if ns < 10**14 else "microseconds"
    return f"timestamp {ns} looks like {unit} since the epoch, not nanoseconds"


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
    """Parse and validate one line; raise :class:`TraceFormatError` naming file, line and span."""
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise TraceFormatError(path, line, f"not valid JSON ({e.msg}, column {e.colno})") from None
    if not isinstance(obj, dict):
        raise TraceFormatError(path, line, f"expected a JSON object, found {type(obj).__name__}")
    span_id = obj.get("span_id")
    sid = span_id if isinstance(span_id, str) else None

    def bad(reason: str) -> TraceFormatError:
        return TraceFormatError(path, line, reason, span_id=sid)

    trace_id = obj.get("trace_id")
    if not isinstance(trace_id, str) or not _HEX32.match(trace_id) or trace_id == "0" * 32:
        raise bad(f"trace_id must be 32 lowercase hex digits, not all zero; got {trace_id!r}")
    if not isinstance(span_id, str) or not _HEX16.match(span_id) or span_id == "0" * 16:
        raise bad(f"span_id must be 16 lowercase hex digits, not all zero; got {span_id!r}")
    parent = obj.get("parent_span_id")
    if parent is not None and (not isinstance(parent, str) or not _HEX16.match(parent)):
        raise bad(f"parent_span_id must be null or 16 lowercase hex digits; got {parent!r}")
    name = obj.get("name")
    if not isinstance(name, str):
        raise bad(f"name must be a string; got {name!r}")
    start, end = obj.get("start_ns"), obj.get("end_ns")
    for key, value in (("start_ns", start), ("end_ns", end)):
        if type(value) is not int or value < 0:
            raise bad(f"{key} must be a non-negative integer (Unix epoch ns); got {value!r}")
    if end < start:
        raise bad(f"end_ns {end} is before start_ns {start}")
    units = unit_problem(start)
    if units:
        raise bad(f"start_ns: {units}")
    kind = obj.get("kind", "internal")
    if kind not in KINDS:
        raise bad(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    status = obj.get("status", "unset")
    if status not in STATUSES:
        raise bad(f"status must be one of {', '.join(STATUSES)}; got {status!r}")
    ints = {}
    for key in _INT_FIELDS:
        value = obj.get(key)
        if value is not None and type(value) is not int:
            raise bad(f"{key} must be an integer or null; got {value!r}")
        ints[key] = value
    attrs = obj.get("attrs")
    if attrs is None:
        attrs = {}
    elif not isinstance(attrs, dict):
        raise bad("attrs must be a JSON object")
    events = tuple(SpanEvent(str(e.get("name", "")), int(e.get("time_ns", 0)), e.get("attrs") or {})
                   for e in (obj.get("events") or ()) if isinstance(e, dict))
    links = tuple(SpanLink(str(k.get("trace_id", "")), str(k.get("span_id", "")),
                           k.get("attrs") or {})
                  for k in (obj.get("links") or ()) if isinstance(k, dict))
    stage = obj.get("stage")
    return SpanRecord(
        trace_id=trace_id, span_id=span_id, parent_span_id=parent, name=name,
        stage=stage if isinstance(stage, str) else None, kind=kind,
        start_ns=start, end_ns=end, status=status,
        status_message=_opt_str(obj.get("status_message")),
        service=_opt_str(obj.get("service")), host=_opt_str(obj.get("host")),
        attrs=attrs, events=events, links=links, **ints,
    )


def _opt_str(value: Any) -> "str | None":
    return None if value is None else str(value)


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
