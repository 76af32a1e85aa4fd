"""any-agent traces: the JSON of an ``AgentTrace`` (mozilla-ai/any-agent), docs/file-formats.md.

``{"spans": [span, ...], "final_output": ...}`` where each span is an OpenTelemetry span as
any-agent serialises it: ``name``, ``kind`` ("internal" ...), ``context`` and ``parent``
(``{"trace_id", "span_id", ...}`` with the ids as decimal integers; a root's parent has
``"span_id": null``), ``start_time``/``end_time`` (epoch nanoseconds), ``status``
(``{"status_code": "ok"|"error"|"unset", "description"}``), ``attributes`` (GenAI semantic
conventions: ``gen_ai.operation.name`` = invoke_agent / call_llm / execute_tool ...), ``events``
(``{"name", "timestamp", "attributes"}``), ``links`` (``{"context", "attributes"}``) and
``resource`` (``{"attributes": {"service.name", ...}}``).

Spans keep their attributes as they are. A parent that is not in the file (any-agent leaves out
spans of some frameworks) stays as given: the analysis has the span adopted by the trace's root
that encloses it in time, or takes it as a root (docs/analysis.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from ...errors import TraceFormatError
from ...records import SpanEvent, SpanLink, SpanRecord
from ..spanfile import unit_problem
from . import Importer
from ._common import TOO_DEEP, hex_id, json_problem, span

_SPANS = re.compile(rb'(?<!\\)"spans"\s*:\s*\[')
_CONTEXT = re.compile(rb'(?<!\\)"context"\s*:\s*\{')
_SPAN_ID = re.compile(rb'(?<!\\)"span_id"\s*:\s*(?:\d|null)')
_OTLP = re.compile(rb'(?<!\\)"(?:resourceSpans|resource_spans)"\s*:')
_KINDS = ("internal", "server", "client", "producer", "consumer")
_STATUS = {"ok": "ok", "error": "error", "unset": "unset", 0: "unset", 1: "ok", 2: "error"}


def sniff(head: bytes, name: str) -> bool:
    """A JSON object with a ``spans`` list whose spans carry a ``context`` object with a
    numeric ``span_id`` (any-agent writes the ids as decimal integers)."""
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] != b"{" or _OTLP.search(head):
        return False
    return bool(_SPANS.search(head) and _CONTEXT.search(head) and _SPAN_ID.search(head))


def read(data: bytes, path: str, errors: list) -> Iterator[SpanRecord]:
    """The spans of one any-agent trace file; bad spans go to ``errors``."""
    text = data.decode("utf-8", errors="replace").lstrip("\ufeff")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        line, why = json_problem(e)
        errors.append(TraceFormatError(path, line, (
            f"not valid JSON ({why}); the file may be cut short")))
        return
    spans = doc.get("spans") if isinstance(doc, dict) else None
    if not isinstance(spans, list):
        errors.append(TraceFormatError(path, None, "not an any-agent trace: no 'spans' list"))
        return
    for i, raw in enumerate(spans):
        try:
            record = _span(raw, f"spans[{i}]", path, errors)
        except RecursionError:
            errors.append(TraceFormatError(path, None, f"spans[{i}]: {TOO_DEEP}"))
            continue
        if record is not None:
            yield record


def _span(raw: Any, where: str, path: str, errors: list) -> SpanRecord | None:
    if not isinstance(raw, dict):
        errors.append(TraceFormatError(path, None, f"{where}: not an object"))
        return None
    context = raw.get("context") if isinstance(raw.get("context"), dict) else {}
    span_id = hex_id(context.get("span_id"), 8)
    name = raw.get("name")
    label = f"{where} ({name!r})" if isinstance(name, str) else where

    def bad(reason: str) -> None:
        errors.append(TraceFormatError(path, None, f"{label}: {reason}", span_id=span_id))

    if span_id is None:
        bad(f"context.span_id missing or zero ({context.get('span_id')!r})")
        return None
    trace_id = hex_id(context.get("trace_id"), 16)
    if trace_id is None:
        bad(f"context.trace_id missing or zero ({context.get('trace_id')!r})")
        return None
    start, end = _ns(raw.get("start_time")), _ns(raw.get("end_time"))
    if start is None or end is None:
        bad(f"start_time/end_time missing or not integer nanoseconds "
            f"({raw.get('start_time')!r}, {raw.get('end_time')!r})")
        return None
    if end < start:
        bad(f"end_time {end} is before start_time {start}")
        return None
    units = unit_problem(start)
    if units:
        bad(f"start_time: {units}")
        return None
    parent = raw.get("parent")
    parent_id = hex_id(parent.get("span_id"), 8) if isinstance(parent, dict) else None
    status = raw.get("status") if isinstance(raw.get("status"), dict) else {}
    code = _code(status.get("status_code"))
    code = _STATUS.get(code, "unset") if isinstance(code, (str, int)) else "unset"
    resource = raw.get("resource") if isinstance(raw.get("resource"), dict) else {}
    res_attrs = resource.get("attributes") if isinstance(resource.get("attributes"), dict) else {}
    service, host, pid = (res_attrs.get(k) for k in ("service.name", "host.name", "process.pid"))
    kind = str(raw.get("kind") or "internal").lower().rsplit(".", 1)[-1]
    return span(
        trace_id, span_id, parent_id, str(name) if name is not None else "", start, end,
        _attributes(raw.get("attributes")), kind=kind if kind in _KINDS else "internal",
        status=code, status_message=status.get("description") or None,
        service=str(service) if service else None, host=str(host) if host else None,
        pid=pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None,
        events=_events(raw.get("events"), label, path, errors), links=_links(raw.get("links")))


def _code(raw: Any) -> Any:
    """``"ok"``, ``"OK"``, ``"StatusCode.OK"`` -> ``"ok"``; integers as OpenTelemetry's."""
    if isinstance(raw, str):
        return raw.rsplit(".", 1)[-1].lower()
    return raw


def _ns(raw: Any) -> int | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw if raw >= 0 else None
    if isinstance(raw, str) and raw.strip().isascii() and raw.strip().isdigit() \
            and len(raw.strip()) <= 30:  # (more digits: no time, and past what int() reads)
        return int(raw)
    return None


def _attributes(raw: Any) -> dict:
    """Attributes as they are; an object or a list of objects becomes its JSON text."""
    out: dict = {}
    if not isinstance(raw, dict):
        return out
    for key, value in raw.items():
        if value is None:
            continue
        if isinstance(value, list) and all(isinstance(v, (str, bool, int, float))
                                           for v in value):
            value = tuple(value)
        elif not isinstance(value, (str, bool, int, float)):
            value = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
        out[str(key)] = value
    return out


def _events(raw: Any, label: str, path: str, errors: list) -> tuple:
    out = []
    for i, event in enumerate(raw if isinstance(raw, list) else ()):
        time_ns = _ns(event.get("timestamp")) if isinstance(event, dict) else None
        if time_ns is None:
            errors.append(TraceFormatError(path, None, (
                f"{label}: events[{i}] has no integer timestamp; the event is left out")))
            continue
        out.append(SpanEvent(str(event.get("name") or ""), time_ns,
                             _attributes(event.get("attributes"))))
    return tuple(out)


def _links(raw: Any) -> tuple:
    out = []
    for link in raw if isinstance(raw, list) else ():
        context = link.get("context") if isinstance(link, dict) else None
        if not isinstance(context, dict):
            continue
        trace_id, span_id = hex_id(context.get("trace_id"), 16), hex_id(context.get("span_id"), 8)
        if trace_id and span_id:
            out.append(SpanLink(trace_id, span_id, _attributes(link.get("attributes"))))
    return tuple(out)


IMPORTER = Importer("anyagent", "any-agent trace", sniff, read)
