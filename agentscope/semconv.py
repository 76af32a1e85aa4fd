"""Attribute names on the wire.

Keyword arguments given to ``agentscope.task``/``agentscope.stage`` are written under
OpenTelemetry semantic-convention names where one exists (GenAI, server, database, HTTP),
and under ``agentscope.<name>`` otherwise. A keyword that already contains a dot is taken
as a full attribute name.
"""

from __future__ import annotations

import enum
from typing import Any, Mapping

# agentscope's own attribute names ------------------------------------------------------
STAGE = "agentscope.stage"
LANE = "agentscope.lane"
TASK_NAME = "agentscope.task.name"
CPU_SCOPE = "agentscope.cpu.scope"  # "loop" when the span ran on an asyncio event loop
# the thread's kernel-mode CPU time over the span, recorded only when the span took major page
# faults: most of it is then the kernel paging in (memory work, not the program's computing)
SYSTEM_CPU = "agentscope.cpu.thread_system_ns"
# context switches of the child processes a span waited for (theirs and their waited-for
# descendants'), recorded where it had children: preempted more than blocked = they were
# runnable, not waiting on I/O
CHILD_IVCSW = "agentscope.children.ctx_switches.involuntary"
CHILD_VCSW = "agentscope.children.ctx_switches.voluntary"

# The resource-accounting attributes. In our own span files these are columns (see
# agentscope.formats.spanfile); on the OpenTelemetry wire (SDK mode, OTLP) they are attributes.
ACCOUNTING_ATTRIBUTES: Mapping[str, str] = {
    "thread_cpu_ns": "agentscope.cpu.thread_ns",
    "child_cpu_ns": "agentscope.cpu.children_ns",
    "children": "agentscope.children.count",
    "vcsw": "agentscope.ctx_switches.voluntary",
    "ivcsw": "agentscope.ctx_switches.involuntary",
    "minflt": "agentscope.page_faults.minor",
    "majflt": "agentscope.page_faults.major",
    "child_majflt": "agentscope.children.page_faults.major",
    "tid": "thread.id",
}

# keyword -> attribute name ---------------------------------------------------------------
KEYWORDS: Mapping[str, str] = {
    # GenAI semantic conventions
    "model": "gen_ai.request.model",
    "request_model": "gen_ai.request.model",
    "response_model": "gen_ai.response.model",
    "provider": "gen_ai.provider.name",
    "system": "gen_ai.system",
    "operation": "gen_ai.operation.name",
    "input_tokens": "gen_ai.usage.input_tokens",
    "output_tokens": "gen_ai.usage.output_tokens",
    "max_tokens": "gen_ai.request.max_tokens",
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "finish_reasons": "gen_ai.response.finish_reasons",
    "response_id": "gen_ai.response.id",
    "tool": "gen_ai.tool.name",
    "tool_name": "gen_ai.tool.name",
    "tool_type": "gen_ai.tool.type",
    "tool_call_id": "gen_ai.tool.call.id",
    "agent": "gen_ai.agent.name",
    "agent_name": "gen_ai.agent.name",
    "agent_id": "gen_ai.agent.id",
    "conversation_id": "gen_ai.conversation.id",
    "data_source_id": "gen_ai.data_source.id",
    # vLLM request-span latency breakdown (seconds)
    "time_in_queue": "gen_ai.latency.time_in_queue",
    "time_to_first_token": "gen_ai.latency.time_to_first_token",
    "time_in_model_prefill": "gen_ai.latency.time_in_model_prefill",
    "time_in_model_decode": "gen_ai.latency.time_in_model_decode",
    # where a call went
    "server_address": "server.address",
    "server_port": "server.port",
    "url": "url.full",
    "http_method": "http.request.method",
    "http_status": "http.response.status_code",
    "db_system": "db.system",
    "db_operation": "db.operation.name",
    "db_statement": "db.query.text",
    "command": "process.command_line",
    # agentscope
    "lane": LANE,
}

# the operation name implied by a stage, set when the caller gave none
OPERATION_BY_STAGE: Mapping[str, str] = {
    "tool": "execute_tool",
    "agent": "invoke_agent",
}

_PRIMITIVES = (str, bool, int, float)


def attribute_name(keyword: str) -> str:
    """The attribute name a keyword argument is written under."""
    name = KEYWORDS.get(keyword)
    if name is not None:
        return name
    if "." in keyword:
        return keyword
    return "agentscope." + keyword


def attribute_value(value: Any) -> Any:
    """Coerce a value to what OpenTelemetry attributes allow (primitives and their sequences).

    Anything else becomes its ``str()``; ``None`` stays ``None`` (the caller drops it).
    Never raises.
    """
    if value is None or type(value) in _PRIMITIVES:
        return value
    if isinstance(value, enum.Enum):
        return attribute_value(value.value)
    for base in _PRIMITIVES:  # subclasses of the primitives (numpy.float64 is a float)
        if isinstance(value, base):
            return base(value)
    if isinstance(value, (list, tuple)):
        items = [attribute_value(v) for v in value]
        kinds = {type(v) for v in items if v is not None}
        if len(kinds) <= 1 and all(v is not None for v in items):
            return tuple(items)
        return tuple(_safe_str(v) for v in items)
    return _safe_str(value)


def _safe_str(value: Any) -> str:
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"


def normalize(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments -> attribute dict (names mapped, values coerced, ``None`` dropped)."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        value = attribute_value(value)
        if value is not None:
            out[attribute_name(key)] = value
    return out
