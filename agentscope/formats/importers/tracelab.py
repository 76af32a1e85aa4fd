"""TraceLab round traces: one LLM round of a Claude Code or Codex session per JSON line.

TraceLab (uw-syfi/TraceLab) normalises coding-agent session logs into rows that each describe
one model invocation ("round"): the round's input events and model output events with their
times (``timing_events``), the tool calls the model asked for (``tools``, with ``emitted_at``
and ``result_at``), and token accounting. This module rebuilds what happened in time as spans,
one trace per session (docs/file-formats.md, "TraceLab round traces")::

    session                      invoke_agent, service = provider, all the session's rounds
      round N                    when its input was complete -> its last tool result or event
        chat <model>             latest input event -> last model output (TraceLab's
                                 "observable generation time")
        execute_tool <name>      emitted_at -> result_at, one per tool call

The share of each agent's critical path in tools and in the model is the analysis' to say
(docs/file-formats.md compares it with the TraceLab paper's figures).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from ...errors import TraceFormatError
from ...records import SpanEvent, SpanRecord
from . import Importer
from ._common import hex_id, iso_ns, span

INPUT_EVENTS = frozenset({"user_message", "tool_result"})
OUTPUT_EVENTS = frozenset({"reasoning", "text", "tool_call"})
# row fields that become span structure rather than round attributes
_STRUCTURE = ("timing_events", "tools", "session_id", "project", "provider")
_TOOL_MAPPED = ("tool_name", "tool_call_id", "emitted_at", "result_at")


def sniff(head: bytes, name: str) -> bool:
    """JSON lines whose first object has ``round_index`` and ``timing_events`` (or
    ``session_id`` and ``tools``)."""
    first = head.lstrip(b"\xef\xbb\xbf \t\r\n").split(b"\n", 1)[0]
    if not first.startswith(b"{"):
        return False
    try:
        row = json.loads(first)
    except (ValueError, RecursionError):  # a first line longer than the head: its key names
        return (b'"round_index"' in first and b'"timing_events"' in first) or (
            b'"session_id"' in first and b'"tools"' in first)
    return isinstance(row, dict) and (("round_index" in row and "timing_events" in row)
                                      or ("session_id" in row and "tools" in row))


class _Row(NamedTuple):
    line: int
    row: dict


class _Round(NamedTuple):
    """One row placed in time (epoch ns); ``model`` is None when the row has no model output."""

    row: _Row
    start: int
    end: int
    model: tuple[int, int] | None
    tools: list  # (tool dict, start, end)
    events: list  # (event type, time, event dict)


def read(data: bytes, path: str, errors: list) -> Iterator[SpanRecord]:
    """The spans of a TraceLab round-trace file: one trace per session."""
    sessions: dict[str, dict[int, _Row]] = {}
    for row in _rows(data, path, errors):
        sid = row.row.get("session_id")
        if not isinstance(sid, str) or not sid:
            errors.append(TraceFormatError(path, row.line, f"session_id missing ({sid!r})"))
            continue
        index = row.row.get("round_index")
        if isinstance(index, bool) or not isinstance(index, int):
            errors.append(TraceFormatError(path, row.line,
                                           f"round_index missing or not an integer ({index!r})"))
            continue
        rounds = sessions.setdefault(sid, {})
        if index in rounds:
            errors.append(TraceFormatError(path, row.line, (
                f"round {index} of session {sid!r} repeats line {rounds[index].line}; skipped")))
            continue
        rounds[index] = row
    for sid, rounds in sessions.items():
        rows = [rounds[i] for i in sorted(rounds)]
        try:
            spans = list(_session(sid, rows, path, errors))
        except Exception as e:  # noqa: BLE001 - unforeseen shape: report, load the rest
            errors.append(TraceFormatError(path, rows[0].line, (
                f"session {sid!r} could not be read ({e!r}); its spans are skipped")))
            continue
        yield from spans


def _rows(data: bytes, path: str, errors: list) -> Iterator[_Row]:
    lines = data.decode("utf-8", errors="replace").split("\n")
    terminated = data.endswith(b"\n")
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except (ValueError, RecursionError) as e:
            torn = number == len(lines) and not terminated
            reason = (f"not valid JSON ({e.msg}, column {e.colno})"
                      if isinstance(e, json.JSONDecodeError) else "not valid JSON")
            errors.append(TraceFormatError(path, number, ("torn last line; skipped: " + reason)
                                           if torn else reason, torn=torn))
            continue
        if not isinstance(row, dict):
            errors.append(TraceFormatError(path, number, "expected a round object"))
            continue
        yield _Row(number, row)


def _session(sid: str, rows: list[_Row], path: str, errors: list) -> Iterator[SpanRecord]:
    trace_id = hex_id(sid, 16)
    first = rows[0].row
    provider = _text(first.get("provider"))
    root_id = hex_id(f"{sid}/session", 8)
    results: dict[str, int] = {}  # tool_call_id -> when its result came back (any round)
    calls: dict[str, int] = {}  # tool_call_id -> when the model emitted the call
    timed_events = []
    for row in rows:
        events = _events(row, path, errors)
        timed_events.append(events)
        for kind, ts, ev in events:
            call = ev.get("tool_call_id")
            if isinstance(call, str) and kind in ("tool_result", "tool_call"):
                (results if kind == "tool_result" else calls).setdefault(call, ts)
    rounds: list[_Round] = []
    previous_result = None
    for row, events in zip(rows, timed_events):
        placed = _place(row, events, previous_result, results, calls, path, errors)
        if placed is None:
            continue
        rounds.append(placed)
        ends = [end for _, _, end in placed.tools]
        previous_result = max(ends) if ends else None
    if not rounds:
        return
    yield span(trace_id, root_id, None, "session", min(r.start for r in rounds),
               max(r.end for r in rounds), _clean({
                   "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": provider,
                   "gen_ai.conversation.id": sid, "tracelab.session_id": sid,
                   "tracelab.project": first.get("project"), "tracelab.rounds": len(rounds)}),
               service=provider)
    for placed in rounds:
        yield from _round_spans(placed, sid, trace_id, root_id, provider)


def _events(row: _Row, path: str, errors: list) -> list:
    out = []
    items = row.row.get("timing_events")
    if items is not None and not isinstance(items, list):
        errors.append(TraceFormatError(path, row.line, "timing_events is not a list"))
        items = None
    for j, ev in enumerate(items or ()):
        if not isinstance(ev, dict):
            errors.append(TraceFormatError(path, row.line, f"timing_events[{j}] is not an object"))
            continue
        ts = iso_ns(ev.get("timestamp"))
        if ts is None:
            errors.append(TraceFormatError(path, row.line, (
                f"timing_events[{j}] ({ev.get('event_type')!r}): timestamp "
                f"{ev.get('timestamp')!r} is missing or not an ISO-8601 time; event skipped")))
            continue
        out.append((str(ev.get("event_type")), ts, ev))
    return out


def _place(row: _Row, events: list, previous_result: int | None, results: dict, calls: dict,
           path: str, errors: list) -> _Round | None:
    """The round's model interval, tool intervals and extent; None if nothing has a time."""
    outputs = [ts for kind, ts, _ in events if kind in OUTPUT_EVENTS]
    first_output = min(outputs) if outputs else None
    inputs = [ts for kind, ts, _ in events
              if kind in INPUT_EVENTS and (first_output is None or ts <= first_output)]
    model = None
    if outputs:
        if inputs:
            start = max(inputs)
        elif (previous_result is not None and previous_result <= first_output
              and row.row.get("first_input_event_type") != "user_message"):
            start = previous_result  # its input events were unreadable: the last tool result
        else:
            start = first_output
        model = (start, max(outputs))
    tools = []
    items = row.row.get("tools")
    for k, tool in enumerate(items if isinstance(items, list) else ()):
        placed = _tool(row, k, tool, results, calls, path, errors)
        if placed is not None:
            tools.append(placed)
    began = [model[0]] if model else ([max(inputs)] if inputs else [])
    after = [ts for _, ts, _ in events if not began or ts >= began[0]]
    starts = began + [t[1] for t in tools] + after
    if not starts:
        errors.append(TraceFormatError(path, row.line, (
            f"round {row.row.get('round_index')} has no usable time; no spans for it")))
        return None
    ends = [t[2] for t in tools] + [ts for _, ts, _ in events] + ([model[1]] if model else [])
    return _Round(row, min(starts), max(ends), model, tools, events)


def _tool(row: _Row, k: int, tool: Any, results: dict, calls: dict, path: str,
          errors: list) -> tuple | None:
    """(tool, start, end): emitted_at -> result_at; a missing end is the start plus the wall
    latency (or the matching tool_result event), a missing start the tool_call event."""
    if not isinstance(tool, dict):
        errors.append(TraceFormatError(path, row.line, f"tools[{k}] is not an object"))
        return None
    label = f"tools[{k}] ({tool.get('tool_name')!r})"
    call = tool.get("tool_call_id")
    wall = tool.get("tool_wall_latency_ms")
    wall_ns = (round(wall * 1_000_000) if isinstance(wall, (int, float))
               and not isinstance(wall, bool) and 0 <= wall < 1e15 else None)  # (finite)
    times = {}
    for field in ("emitted_at", "result_at"):
        raw = tool.get(field)
        times[field] = iso_ns(raw)
        if raw is not None and times[field] is None:
            errors.append(TraceFormatError(path, row.line, (
                f"{label}: {field} {raw!r} is not an ISO-8601 time; taken from the other "
                "times of the call where they allow")))
    start, end = times["emitted_at"], times["result_at"]
    if start is None and isinstance(call, str):
        start = calls.get(call)
    if start is None and end is not None and wall_ns is not None:
        start = end - wall_ns
    if end is None and start is not None and wall_ns is not None:
        end = start + wall_ns
    if end is None and isinstance(call, str):
        end = results.get(call)
    if start is None or end is None or end < start:
        errors.append(TraceFormatError(path, row.line, (
            f"{label}: no usable start and end (emitted_at {tool.get('emitted_at')!r}, "
            f"result_at {tool.get('result_at')!r}, wall latency {wall!r}); no span for it")))
        return None
    return tool, start, end


def _round_spans(placed: _Round, sid: str, trace_id: str, root_id: str,
                 provider: str | None) -> Iterator[SpanRecord]:
    row = placed.row.row
    index = row["round_index"]
    round_id = hex_id(f"{sid}/round/{index}", 8)
    attrs = _clean({f"tracelab.{k}": v for k, v in row.items() if k not in _STRUCTURE})
    events = tuple(SpanEvent(kind, ts, _clean({k: v for k, v in ev.items()
                                               if k not in ("event_type", "timestamp")}))
                   for kind, ts, ev in placed.events)
    yield span(trace_id, round_id, root_id, f"round {index}", placed.start, placed.end, attrs,
               service=provider, events=events)
    model = _text(row.get("model"))
    if placed.model is not None:
        cache_read = row.get("claude_cache_read_input_tokens")
        if not isinstance(cache_read, int):
            cache_read = row.get("prefix_tokens")  # TraceLab: the cached prefix, both providers
        usage = _clean({
            "gen_ai.operation.name": "chat", "gen_ai.request.model": model,
            "gen_ai.usage.input_tokens": row.get("input_tokens_total"),
            "gen_ai.usage.output_tokens": row.get("output_tokens"),
            "gen_ai.usage.cache_read.input_tokens": cache_read,
            "gen_ai.usage.cache_creation.input_tokens":
                row.get("claude_cache_creation_input_tokens")})
        yield span(trace_id, hex_id(f"{sid}/round/{index}/chat", 8), round_id,
                   f"chat {model}" if model else "chat", placed.model[0], placed.model[1],
                   usage, kind="client", service=provider)
    for k, (tool, start, end) in enumerate(placed.tools):
        name = _text(tool.get("tool_name"))
        attrs = _clean({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                        "gen_ai.tool.call.id": _text(tool.get("tool_call_id")),
                        **{f"tracelab.{key}": v for key, v in tool.items()
                           if key not in _TOOL_MAPPED}})
        yield span(trace_id, hex_id(f"{sid}/round/{index}/tool/{k}", 8), round_id,
                   f"execute_tool {name}" if name else "execute_tool", start, end, attrs,
                   status="error" if tool.get("is_error") is True else "unset",
                   service=provider)


def _text(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _clean(attrs: Mapping[str, Any]) -> dict:
    """Attributes without the ``None`` values; nested values (not attribute types) as JSON."""
    out = {}
    for key, value in attrs.items():
        if value is None:
            continue
        if isinstance(value, (dict, list)):
            try:
                value = json.dumps(value, sort_keys=True, default=str)
            except (RecursionError, TypeError):  # nested too deeply, keys of mixed types
                value = "(not kept: nested too deeply or not JSON)"
        out[key] = value
    return out


IMPORTER = Importer("tracelab", "TraceLab round trace", sniff, read)
