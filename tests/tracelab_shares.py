"""The TraceLab paper's own breakdown of response time (per user request: model generation
and tool execution), computed from the spans the TraceLab importer builds. A check that the
importer's spans carry TraceLab's definitions (tests/test_import_jaeger_tracelab.py); the
analysis' own figure is the critical path's (tests/test_corpus.py)."""

from __future__ import annotations

from collections.abc import Iterable

from agentscope.formats.importers.tracelab import OUTPUT_EVENTS
from agentscope.records import SpanRecord

_TOTALS = ("sessions", "requests", "wall_s", "response_s", "model_s", "tool_s", "model_sum_s",
           "tool_effective_s")


def tool_share(records: Iterable[SpanRecord]) -> dict[str, dict[str, float]]:
    """Per provider (the spans' service): where the response time of TraceLab spans went.

    A *request* is TraceLab's user turn: it starts at a round's triggering ``user_message``
    (the latest one at or before the round's first model output) and ends at the last model
    output before the next request. Per provider, summed over requests (seconds):

    * ``response_s``: the requests' response time; ``wall_s``: the sessions' wall time;
    * ``model_s`` / ``tool_s``: the union of chat / tool span intervals inside requests;
    * ``model_share`` / ``tool_share``: those over ``response_s`` (the two overlap where tools
      run while the model still streams, so they can add up to more than 1);
    * ``model_sum_share`` / ``tool_effective_share``: the TraceLab paper's way, sums instead of
      unions, tools by effective latency (internal latency, else wall), over ``response_s``;
    * ``model_wall_share`` / ``tool_wall_share``: the unions over the session wall time.

    With more than one provider, ``"all"`` holds the totals over every provider.
    """
    traces: dict[str, list[SpanRecord]] = {}
    for record in records:
        traces.setdefault(record.trace_id, []).append(record)
    totals: dict[str, dict[str, float]] = {}
    for spans in traces.values():
        roots = [s for s in spans if s.parent_span_id is None]
        if not roots:
            continue
        t = totals.setdefault(roots[0].service or "", dict.fromkeys(_TOTALS, 0.0))
        t["sessions"] += 1
        t["wall_s"] += sum(r.end_ns - r.start_ns for r in roots) / 1e9
        requests = _requests(s for s in spans if "tracelab.round_index" in s.attrs)
        t["requests"] += len(requests)
        t["response_s"] += sum(end - start for start, end in requests) / 1e9
        ops = [(s.attrs.get("gen_ai.operation.name"), s) for s in spans]
        chats = [s for op, s in ops if op == "chat"]
        tools = [s for op, s in ops if op == "execute_tool"]
        t["model_s"] += _covered([(s.start_ns, s.end_ns) for s in chats], requests) / 1e9
        t["tool_s"] += _covered([(s.start_ns, s.end_ns) for s in tools], requests) / 1e9
        t["model_sum_s"] += sum(s.end_ns - s.start_ns for s in chats
                                if _inside(s.start_ns, requests)) / 1e9
        t["tool_effective_s"] += sum(_effective_s(s) for s in tools
                                     if _inside(s.start_ns, requests))
    if len(totals) > 1:
        totals["all"] = {key: sum(t[key] for t in list(totals.values())) for key in _TOTALS}
    for t in totals.values():
        response, wall = t["response_s"] or float("nan"), t["wall_s"] or float("nan")
        t.update(model_share=t["model_s"] / response, tool_share=t["tool_s"] / response,
                 model_sum_share=t["model_sum_s"] / response,
                 tool_effective_share=t["tool_effective_s"] / response,
                 model_wall_share=t["model_s"] / wall, tool_wall_share=t["tool_s"] / wall)
    return totals


def _requests(rounds: Iterable[SpanRecord]) -> list[tuple[int, int]]:
    """(start, end) of each user request among a session's round spans."""
    out: list[list[int]] = []
    for rnd in sorted(rounds, key=lambda s: s.start_ns):
        outputs = [e.time_ns for e in rnd.events if e.name in OUTPUT_EVENTS]
        if not outputs:
            continue
        users = [e.time_ns for e in rnd.events
                 if e.name == "user_message" and e.time_ns <= min(outputs)]
        if users:
            out.append([max(users), max(outputs)])
        elif out:
            out[-1][1] = max(out[-1][1], max(outputs))
    return [(start, end) for start, end in out if end > start]


def _covered(intervals: list, windows: list) -> int:
    """Nanoseconds of ``windows`` covered by the union of ``intervals``."""
    total = 0
    for lo, hi in windows:
        clipped = sorted((max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi)
        reach = lo
        for a, b in clipped:
            if b > reach:
                total += b - max(a, reach)
                reach = b
    return total


def _inside(ts: int, windows: list) -> bool:
    return any(lo <= ts <= hi for lo, hi in windows)


def _effective_s(tool: SpanRecord) -> float:
    internal = tool.attrs.get("tracelab.tool_internal_latency_ms")
    wall = tool.attrs.get("tracelab.tool_wall_latency_ms")
    value = internal if isinstance(internal, (int, float)) else wall
    return value / 1000 if isinstance(value, (int, float)) and value > 0 else 0.0


