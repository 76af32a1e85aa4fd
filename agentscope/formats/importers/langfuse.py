"""Langfuse trace exports: ``{"trace": {...}, "observations": [...]}`` (docs/file-formats.md).

What the Langfuse UI's trace download and ``GET /api/public/traces/{id}`` give: one trace object
(ids, name, session, user, tags, environment; no timing of its own beyond ``timestamp`` and
``latency``) and its observations (SPAN, GENERATION, TOOL, AGENT, CHAIN, EVENT, ...), each with
ISO-8601 times, a ``parentObservationId``, usage and cost, and ``metadata`` that holds the
OpenTelemetry attributes, resource attributes and scope the framework emitted (as an object or
as a JSON string). A bare trace object whose ``observations`` are embedded loads the same.

Each observation becomes one span, keeping the framework's attributes under their own names,
plus ``langfuse.observation.type`` (the stage table in :mod:`agentscope.semconv` maps it) and
``gen_ai.*`` model and token attributes taken from Langfuse's own fields where the attributes
lack them. EVENT observations (points in time) become events of their parent span, or
zero-length spans when the parent is not in the file. The trace object becomes a span only when
no single observation can be the root: several top-level observations get it as their parent
(``langfuse.trace.synthesized``), and a trace with no observations is its own span.

A file cut short still loads the observations that were complete before the cut.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from ...errors import TraceFormatError
from ...records import SpanEvent, SpanRecord
from . import Importer
from ._common import TOO_DEEP, hex_id, iso_ns, json_problem, span

_OBSERVATIONS = re.compile(rb'(?<!\\)"observations"\s*:\s*\[')
_TRACE = re.compile(rb'(?<!\\)"trace"\s*:\s*\{')
_PROJECT = re.compile(rb'(?<!\\)"projectId"\s*:')
_PARENT_OBS = re.compile(rb'(?<!\\)"parentObservationId"\s*:')
_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")
_SMALL = 256  # longest metadata value kept as langfuse.metadata.<key> (JSON characters)
_META_SKIPPED = ("attributes", "resourceAttributes", "scope")
_TOKENS = (("gen_ai.usage.input_tokens", "input", "inputUsage", "promptTokens"),
           ("gen_ai.usage.output_tokens", "output", "outputUsage", "completionTokens"))


def sniff(head: bytes, name: str) -> bool:
    """A JSON object with a ``trace`` object and ``observations`` list (either may lie past a
    cut head: a ``trace`` with Langfuse's ``projectId``, or observations with
    ``parentObservationId``, will do)."""
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] != b"{":
        return False
    if _TRACE.search(head):
        return bool(_OBSERVATIONS.search(head) or _PROJECT.search(head))
    return bool(_OBSERVATIONS.search(head) and _PARENT_OBS.search(head))


def read(data: bytes, path: str, errors: list) -> Iterator[SpanRecord]:
    """The spans of one Langfuse trace export; bad observations go to ``errors``."""
    text = data.decode("utf-8", errors="replace").lstrip("\ufeff")
    top, items, problem = _walk(text)
    if problem is not None:
        offset, msg = problem
        errors.append(TraceFormatError(path, _line(text, offset), (
            f"not valid JSON ({msg}); the file may be cut short: {len(items)} complete "
            "observations before that point are loaded")))
    trace = top.get("trace") if isinstance(top.get("trace"), dict) else None
    if trace is None and "id" in top and "trace" not in top:
        trace = top  # a bare trace object with its observations embedded
    trace = trace or {}
    if not items and isinstance(trace.get("observations"), list) and "observations" not in top:
        items = [(None, o) for o in trace["observations"]]
    if not items and not trace:
        if problem is None:
            errors.append(TraceFormatError(path, None, "no Langfuse trace or observations"))
        return
    yield from _Trace(trace, path, text, errors).spans(items)


class _Trace:
    """One Langfuse trace being turned into records."""

    def __init__(self, trace: dict, path: str, text: str, errors: list) -> None:
        self.trace, self.path, self.text, self.errors = trace, path, text, errors
        self.trace_id = hex_id(trace.get("id"), 16)

    def spans(self, items: list) -> Iterator[SpanRecord]:
        fields: list[dict] = []
        points: list[tuple] = []  # (parent span id, SpanEvent, fields if it stays a span)
        for i, (offset, obs) in enumerate(items):
            try:
                one = self._observation(obs, f"observations[{i}]", offset)
            except RecursionError:
                self.errors.append(TraceFormatError(self.path, _line(self.text, offset),
                                                    f"observations[{i}]: {TOO_DEEP}"))
                continue
            if one is None:
                continue
            if one["attrs"]["langfuse.observation.type"] == "EVENT":
                points.append((one["parent_span_id"], SpanEvent(
                    one["name"], one["start_ns"], one["attrs"]), one))
            else:
                fields.append(one)
        by_id = {f["span_id"]: f for f in fields}
        for parent, event, one in points:
            if parent is not None and parent in by_id:
                by_id[parent]["events"].append(event)
            else:
                fields.append(one)
        fields = self._rooted(fields)
        ids = {f["span_id"] for f in fields}
        for f in fields:
            if f["parent_span_id"] is None or f["parent_span_id"] not in ids:
                self._trace_attrs(f["attrs"])
            f["events"] = tuple(f["events"])
            yield span(**f)

    def _observation(self, obs: Any, where: str, offset: int | None) -> dict | None:
        if not isinstance(obs, dict):  # lines are counted only for a problem: files are big
            self.errors.append(TraceFormatError(self.path, _line(self.text, offset),
                                                f"{where}: not an object"))
            return None
        span_id = hex_id(obs.get("id"), 8)
        name = obs.get("name")
        label = f"{where} ({name!r})" if isinstance(name, str) else where

        def bad(reason: str) -> None:
            self.errors.append(TraceFormatError(self.path, _line(self.text, offset),
                                                f"{label}: {reason}", span_id=span_id))

        if span_id is None:
            bad(f"id missing or empty ({obs.get('id')!r})")
            return None
        trace_id = self.trace_id or hex_id(obs.get("traceId"), 16)
        if trace_id is None:
            bad("no trace id (neither trace.id nor traceId)")
            return None
        start = iso_ns(obs.get("startTime"))
        if start is None:
            bad(f"startTime missing or not an ISO-8601 time ({obs.get('startTime')!r})")
            return None
        attrs, service, host, pid = _metadata(obs.get("metadata"))
        kind = str(obs.get("type") or "SPAN").upper()
        attrs["langfuse.observation.type"] = kind
        end = iso_ns(obs.get("endTime"))
        if obs.get("endTime") is not None and end is None:
            bad(f"endTime is not an ISO-8601 time ({obs.get('endTime')!r})")
            return None
        if end is None:  # still open when exported, or a point: zero-length at its last time
            end = max(start, iso_ns(obs.get("completionStartTime")) or start)
            if kind != "EVENT":
                attrs["langfuse.end_time.missing"] = True
        if end < start:
            bad(f"endTime {obs.get('endTime')!r} is before startTime {obs.get('startTime')!r}")
            return None
        _generation_attrs(obs, attrs)
        level = obs.get("level")
        if isinstance(level, str) and level and level != "DEFAULT":
            attrs["langfuse.level"] = level
        message = obs.get("statusMessage")
        error = level == "ERROR"
        if message and not error:
            attrs["langfuse.status_message"] = str(message)
        return _fields(trace_id, span_id, hex_id(obs.get("parentObservationId"), 8),
                       str(name) if name is not None else kind, start, end, attrs,
                       status="error" if error else "unset",
                       status_message=str(message) if error and message else None,
                       service=service, host=host, pid=pid)

    def _rooted(self, fields: list) -> list:
        """The observations, under a span made of the trace object when they have no single
        root (several top-level observations), or that span alone when there are none."""
        tops = [f for f in fields if f["parent_span_id"] is None]
        if (fields and len(tops) < 2) or self.trace_id is None:
            return fields
        start = iso_ns(self.trace.get("timestamp"))
        starts = [f["start_ns"] for f in fields] + ([start] if start is not None else [])
        if not starts:
            self.errors.append(TraceFormatError(self.path, None, "trace: no timestamp and no "
                                                "observations to time it by"))
            return fields
        begin = min(starts)
        latency = self.trace.get("latency")
        ends = [f["end_ns"] for f in fields] + [begin]
        if start is not None and isinstance(latency, (int, float)) \
                and not isinstance(latency, bool) and 0 <= latency < 1e9:  # (s: 31 years)
            ends.append(start + int(latency * 1e9))
        root_id = hex_id(f"langfuse-trace:{self.trace_id}", 8)
        for f in tops:
            f["parent_span_id"] = root_id
        name = self.trace.get("name")
        first = fields[0] if fields else {}
        root = _fields(self.trace_id, root_id, None, str(name) if name else "trace", begin,
                       max(ends), {"langfuse.trace.synthesized": True},
                       service=first.get("service"), host=first.get("host"),
                       pid=first.get("pid"))
        return [root, *fields]

    def _trace_attrs(self, attrs: dict) -> None:
        """What the trace object says about the task, on its root span(s)."""
        t = self.trace
        for key, value in (("langfuse.trace.name", t.get("name")),
                           ("session.id", t.get("sessionId")), ("user.id", t.get("userId")),
                           ("langfuse.environment", t.get("environment")),
                           ("langfuse.release", t.get("release"))):
            if isinstance(value, str) and value and key not in attrs:
                attrs[key] = value
        tags = t.get("tags")
        if isinstance(tags, list) and tags and all(isinstance(x, str) for x in tags):
            attrs.setdefault("langfuse.trace.tags", tuple(tags))


def _fields(trace_id: str, span_id: str, parent: str | None, name: str, start: int, end: int,
            attrs: dict, **more: Any) -> dict:
    """The keyword arguments of :func:`._common.span` for one span, events still a list."""
    return {"trace_id": trace_id, "span_id": span_id, "parent_span_id": parent, "name": name,
            "start_ns": start, "end_ns": end, "attrs": attrs, "events": [], **more}


def _metadata(raw: Any) -> tuple:
    """(attributes, service, host, pid) from an observation's ``metadata``."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            return ({"langfuse.metadata": raw} if len(raw) <= _SMALL else {}), None, None, None
    if not isinstance(raw, dict):
        return {}, None, None, None
    attrs: dict = {}
    for key, value in (raw.get("attributes") or {}).items() if isinstance(
            raw.get("attributes"), dict) else ():
        value = _value(value)
        if value is not None:
            attrs[str(key)] = value
    for key, value in raw.items():
        if key in _META_SKIPPED or value is None:
            continue
        value = _value(value)
        if value is not None and len(json.dumps(value, default=str)) <= _SMALL:
            attrs.setdefault(f"langfuse.metadata.{key}", value)
    scope = raw.get("scope")
    if isinstance(scope, dict) and isinstance(scope.get("name"), str) and scope["name"]:
        attrs.setdefault("otel.scope.name", scope["name"])
    resource = raw.get("resourceAttributes")
    resource = resource if isinstance(resource, dict) else {}
    service, host, pid = (resource.get(k) for k in ("service.name", "host.name", "process.pid"))
    pid = _int(pid)
    host = host or attrs.get("host.name")  # some SDKs put the host on every span instead
    return (attrs, str(service) if service else None, str(host) if host else None,
            pid if pid and pid > 0 else None)


def _value(value: Any) -> Any:
    """An attribute value as OpenTelemetry allows it: primitives and lists of them stay; an
    object, or a list of objects (JSON that Langfuse parsed), becomes its compact JSON text."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, list) and all(isinstance(v, (str, bool, int, float)) for v in value):
        return tuple(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _generation_attrs(obs: dict, attrs: dict) -> None:
    """Model, tokens and cost from Langfuse's fields, where the attributes lack them."""
    model = obs.get("model")
    if isinstance(model, str) and model:
        attrs.setdefault("gen_ai.request.model", model)
    details = obs.get("usageDetails") if isinstance(obs.get("usageDetails"), dict) else {}
    usage = obs.get("usage") if isinstance(obs.get("usage"), dict) else {}
    for key, short, flat, legacy in _TOKENS:
        given = _int(attrs.get(key))
        if given is not None:  # OTel attributes arrive as strings in Langfuse
            attrs[key] = given
            continue
        for value in (details.get(short), usage.get(short), obs.get(flat), obs.get(legacy)):
            number = _int(value)
            if number:  # Langfuse reports 0 for observations that carry no usage
                attrs[key] = number
                break
    first, start = iso_ns(obs.get("completionStartTime")), iso_ns(obs.get("startTime"))
    if first is not None and start is not None and first >= start:
        attrs.setdefault("gen_ai.latency.time_to_first_token", (first - start) / 1e9)
    cost = obs.get("totalCost") or obs.get("calculatedTotalCost")
    if isinstance(cost, (int, float)) and not isinstance(cost, bool) and 0 < cost < 1e300:
        attrs.setdefault("langfuse.cost.total", float(cost))


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() \
            and value.isascii() and len(value) <= 30:
        return int(value)
    return None


def _line(text: str, offset: int | None) -> int | None:
    return None if offset is None else text.count("\n", 0, offset) + 1


def _walk(text: str) -> tuple:
    """``(top-level keys but observations, [(offset, observation)], problem)`` of a JSON
    object, reading as far as it parses; ``problem`` is ``(offset, message)`` or None. The
    offsets give each observation's line, and a cut file keeps its complete observations."""
    top: dict = {}
    items: list = []
    pos = _SPACE.match(text, 0).end()
    if not text.startswith("{", pos):
        return top, items, (pos, "expected a JSON object")
    pos = _SPACE.match(text, pos + 1).end()
    if text.startswith("}", pos):
        return top, items, None
    try:
        while True:
            key, pos = _DECODER.raw_decode(text, pos)
            pos = _SPACE.match(text, pos).end()
            if not text.startswith(":", pos):
                return top, items, (pos, "expected ':'")
            pos = _SPACE.match(text, pos + 1).end()
            if key == "observations" and text.startswith("[", pos):
                pos = _array(text, pos, items)
                top.setdefault(key, True)
            else:
                top[key], pos = _DECODER.raw_decode(text, pos)
            pos = _SPACE.match(text, pos).end()
            if text.startswith(",", pos):
                pos = _SPACE.match(text, pos + 1).end()
            elif text.startswith("}", pos):
                return top, items, None
            else:
                return top, items, (pos, "expected ',' or '}'")
    except json.JSONDecodeError as e:
        return top, items, (e.pos, f"{e.msg} at line {e.lineno} column {e.colno}")
    except (ValueError, RecursionError) as e:  # nested too deeply, a number too long
        return top, items, (len(text), json_problem(e)[1])


def _array(text: str, pos: int, items: list) -> int:
    """Append ``(offset, value)`` for each element of the array at ``pos``; the end offset."""
    pos = _SPACE.match(text, pos + 1).end()
    if text.startswith("]", pos):
        return pos + 1
    while True:
        start = pos
        value, pos = _DECODER.raw_decode(text, pos)
        items.append((start, value))
        pos = _SPACE.match(text, pos).end()
        if text.startswith(",", pos):
            pos = _SPACE.match(text, pos + 1).end()
        elif text.startswith("]", pos):
            return pos + 1
        else:
            raise json.JSONDecodeError("expected ',' or ']'", text, pos)


IMPORTER = Importer("langfuse", "Langfuse trace export", sniff, read)
