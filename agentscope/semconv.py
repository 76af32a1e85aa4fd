"""Attribute names on the wire.

Keyword arguments given to ``agentscope.task``/``agentscope.stage`` are written under
OpenTelemetry semantic-convention names where one exists (GenAI, server, database, HTTP),
and under ``agentscope.<name>`` otherwise. A keyword that already contains a dot is taken
as a full attribute name.
"""

from __future__ import annotations

import enum
import re
from typing import Any, Mapping, NamedTuple, Optional

# agentscope's own attribute names ------------------------------------------------------
STAGE = "agentscope.stage"
LANE = "agentscope.lane"
TASK_NAME = "agentscope.task.name"
CPU_SCOPE = "agentscope.cpu.scope"  # "loop" when the span ran on an asyncio event loop
# the thread's kernel-mode CPU time over the span, recorded when the span took major page
# faults (most of it is then the kernel paging in: memory work, not the program's computing)
# or when it was at least 1 ms (capture/span.py SYSTEM_CPU_MIN_NS; in a memory stage it is the
# moving of its data between tiers)
SYSTEM_CPU = "agentscope.cpu.thread_system_ns"
# context switches of the child processes a span waited for (theirs and their waited-for
# descendants'), recorded where it had children: preempted more than blocked = they were
# runnable, not waiting on I/O
CHILD_IVCSW = "agentscope.children.ctx_switches.involuntary"
CHILD_VCSW = "agentscope.children.ctx_switches.voluntary"
# how long those child processes waited runnable for a CPU (the kernel's schedstat, read when
# each had exited and before it was reaped): their contention, in time
CHILD_RUN_DELAY = "agentscope.children.run_delay_ns"
# ... and how much CPU they used themselves (schedstat), without the descendants they waited
# for (which wait4's figures include): how much of the children's CPU that time covers
CHILD_OWN_CPU = "agentscope.children.own_cpu_ns"
# CPU time of the span's process's *other* threads while the span ran (process CPU clock less
# its own thread's), recorded where at least OTHER_CPU_MIN_NS: library worker threads (BLAS,
# a pool inside a library) computing for it, or other threads holding Python's interpreter lock
OTHER_THREADS_CPU = "agentscope.process.other_threads_cpu_ns"
# CPU time of the thread-pool jobs and threads started from the span (with agentscope's
# context propagation) that ran while it was open: its workers, credited like child processes
WORKERS_CPU = "agentscope.workers.cpu_ns"
# the analysis written onto exported spans (`agentscope export otlp`): derived, not input, so
# every reader drops attributes under this prefix
ANALYSIS_PREFIX = "agentscope.analysis."
# the attributes of a span whose analysis reads other traces' spans (on an event loop, or with
# its process's other threads' CPU recorded: analyzers/threads.py compares it with the spans
# of other tasks in that process): a store holding one is analysed at once, not in batches
COUPLING_ATTRIBUTES = (CPU_SCOPE, OTHER_THREADS_CPU)

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


# The stage of a span from the conventions its instrumentation follows -----------------------
# Spans that do not carry agentscope.stage (other tools' instrumentation, imported traces) get
# one from STAGE_RULES: checked in order, the first rule that matches gives the stage. The same
# table is run in Python (stage_for) and in the store (stage_sql fills the CASE of
# store/sql/stages_from_conventions.sql), and docs/analysis.md shows it with its sources.
# Values compare case-insensitively. Stage values are agentscope.vocab.Stage values (this floor
# imports nothing of ours; a test checks them).

# where each convention is published: key -> (name, link; "" where none is)
_OTEL = "https://github.com/open-telemetry/semantic-conventions/blob/v1.41.0/docs/"
CONVENTIONS: Mapping[str, tuple] = {
    "otel-genai": ("OpenTelemetry GenAI semantic conventions (v1.41.0)",
                   _OTEL + "registry/attributes/gen-ai.md"),
    "otel-mcp": ("OpenTelemetry MCP semantic conventions (v1.41.0)", _OTEL + "gen-ai/mcp.md"),
    "otel-db": ("OpenTelemetry database semantic conventions (v1.41.0)",
                _OTEL + "registry/attributes/db.md"),
    "otel-messaging": ("OpenTelemetry messaging semantic conventions (v1.41.0)",
                       _OTEL + "registry/attributes/messaging.md"),
    "otel-http": ("OpenTelemetry HTTP semantic conventions (v1.41.0)",
                  _OTEL + "registry/attributes/http.md"),
    "otel-rpc": ("OpenTelemetry RPC semantic conventions (v1.41.0)",
                 _OTEL + "registry/attributes/rpc.md"),
    "any-agent": ("any-agent (mozilla-ai) tracing", "https://github.com/mozilla-ai/any-agent"),
    "agentscope": ("none published: values outside the GenAI registry, kept from agentscope's "
                   "earlier table", ""),
    "vercel-ai": ("Vercel AI SDK telemetry", "https://ai-sdk.dev/docs/ai-sdk-core/telemetry"),
    "openllmetry": ("OpenLLMetry / Traceloop semantic conventions",
                    ("https://github.com/traceloop/openllmetry/blob/main/packages/"
                     "opentelemetry-semantic-conventions-ai/opentelemetry/semconv_ai/__init__.py")),
    "openinference": ("OpenInference semantic conventions (Arize)",
                      ("https://github.com/Arize-ai/openinference/blob/main/spec/"
                       "semantic_conventions.md")),
    "langsmith": ("LangSmith OpenTelemetry attributes (run types)",
                  ("https://docs.smith.langchain.com/observability/how_to_guides/"
                   "trace_with_opentelemetry")),
    "langfuse": ("Langfuse observation types (SDK v3 OTel attribute; our Langfuse importer)",
                 "https://langfuse.com/docs/observability/features/observation-types"),
    "pydantic-ai": ("pydantic-ai instrumentation (logfire), versions 1-2",
                    ("https://github.com/pydantic/pydantic-ai/blob/main/pydantic_ai_slim/"
                     "pydantic_ai/_instrumentation.py")),
}


class StageRule(NamedTuple):
    """One entry of :data:`STAGE_RULES`: a span whose ``attribute`` has one of ``values``
    (compared case-insensitively; ``None``: any value, the attribute is present) and, where
    ``kind`` is given, that span kind, gets ``stage``. ``convention`` is a key of
    :data:`CONVENTIONS`; ``note`` says why, where the mapping is a choice of ours."""

    attribute: str
    values: Optional[tuple]
    stage: str
    convention: str
    kind: Optional[str] = None
    note: str = ""


_R = StageRule
_DO_CALLS = ("ai.generateText.doGenerate", "ai.streamText.doStream", "ai.generateObject.doGenerate",
             "ai.streamObject.doStream", "ai.embed.doEmbed", "ai.embedMany.doEmbed",
             "ai.rerank.doRerank")
_OUTER_CALLS = ("ai.generateText", "ai.streamText", "ai.generateObject", "ai.streamObject",
                "ai.embed", "ai.embedMany", "ai.rerank")
_CHECK = ("a check beside the agent's flow: a moderation or validation call, or scoring code; "
          "a model it asks has its own model span below it")

# Most specific first: an explicit operation or span kind of a framework before the mere
# presence of a tool name, the framework's own labels before the Langfuse type (which Langfuse
# infers from them), and client calls (db, messaging, HTTP/RPC) before the presence of an agent
# name (which pydantic-ai/logfire can copy onto every span of an agent run, HTTP calls included).
STAGE_RULES: tuple = (
    _R("gen_ai.operation.name", ("chat", "text_completion", "generate_content", "embeddings"),
       "inference", "otel-genai"),
    _R("gen_ai.operation.name", ("call_llm",), "inference", "any-agent"),
    _R("gen_ai.operation.name", ("completion", "embedding"), "inference", "agentscope"),
    _R("gen_ai.operation.name", ("retrieval",), "context", "otel-genai"),
    _R("gen_ai.operation.name", ("execute_tool",), "tool", "otel-genai"),
    _R("gen_ai.operation.name", ("tool",), "tool", "agentscope"),
    _R("gen_ai.operation.name", ("invoke_agent", "create_agent", "invoke_workflow"), "agent",
       "otel-genai"),
    _R("ai.operationId", _DO_CALLS, "inference", "vercel-ai",
       note="the provider call (ai.rerank.* in the SDK source: packages/ai/src/rerank)"),
    _R("ai.operationId", ("ai.toolCall",), "tool", "vercel-ai"),
    _R("ai.operationId", _OUTER_CALLS, "agent", "vercel-ai",
       note="the whole SDK call: its tool loop, retries and batching orchestrate the provider "
            "calls below it (ai.*.do*)"),
    _R("llm.request.type", ("chat", "completion", "embedding", "rerank"), "inference",
       "openllmetry"),
    _R("traceloop.span.kind", ("tool",), "tool", "openllmetry"),
    _R("traceloop.span.kind", ("workflow", "task", "agent"), "agent", "openllmetry",
       note="decorated steps of the application; never the task stage, which marks the one "
            "root of a task"),
    _R("openinference.span.kind", ("LLM", "EMBEDDING"), "inference", "openinference"),
    _R("openinference.span.kind", ("TOOL",), "tool", "openinference"),
    _R("openinference.span.kind", ("GUARDRAIL", "EVALUATOR"), "tool", "openinference",
       note=_CHECK),
    _R("openinference.span.kind", ("AGENT", "CHAIN"), "agent", "openinference",
       note="CHAIN is the glue between steps: orchestration"),
    _R("openinference.span.kind", ("RETRIEVER", "RERANKER", "PROMPT"), "context",
       "openinference", note="assembling the model's context: retrieval, reranking of the "
                             "retrieved documents, prompt building"),
    _R("langsmith.span.kind", ("llm", "embedding"), "inference", "langsmith"),
    _R("langsmith.span.kind", ("tool",), "tool", "langsmith"),
    _R("langsmith.span.kind", ("retriever", "prompt"), "context", "langsmith"),
    _R("langsmith.span.kind", ("chain", "parser"), "agent", "langsmith",
       note="a parser is the agent's own code reading model output"),
    _R("mcp.method.name", ("tools/call",), "tool", "otel-mcp"),
    _R("mcp.method.name", ("resources/read", "prompts/get"), "context", "otel-mcp",
       note="reading a resource or a prompt for the model's context"),
    _R("gen_ai.tool.name", None, "tool", "otel-genai",
       note="a tool span without an operation name (pydantic-ai 'running tool', Koog)"),
    _R("langfuse.observation.type", ("generation", "embedding"), "inference", "langfuse"),
    _R("langfuse.observation.type", ("tool",), "tool", "langfuse"),
    _R("langfuse.observation.type", ("evaluator", "guardrail"), "tool", "langfuse", note=_CHECK),
    _R("langfuse.observation.type", ("agent", "chain"), "agent", "langfuse"),
    _R("langfuse.observation.type", ("retriever",), "context", "langfuse"),
    _R("db.system", None, "tool", "otel-db", note="deprecated name of db.system.name"),
    _R("db.system.name", None, "tool", "otel-db"),
    _R("messaging.system", None, "queue", "otel-messaging", kind="consumer",
       note="a consumer waits for its message"),
    _R("messaging.system", None, "tool", "otel-messaging"),
    _R("http.request.method", None, "tool", "otel-http", kind="client"),
    _R("http.method", None, "tool", "otel-http", kind="client",
       note="deprecated name of http.request.method"),
    _R("rpc.system", None, "tool", "otel-rpc", kind="client",
       note="deprecated name of rpc.system.name"),
    _R("rpc.system.name", None, "tool", "otel-rpc", kind="client"),
    _R("gen_ai.agent.name", None, "agent", "otel-genai",
       note="an agent run without an operation name (pydantic-ai 'agent run')"),
    _R("agent_name", None, "agent", "pydantic-ai", note="'agent run' spans of pydantic-ai"),
)

# lower-cased values of each rule, for stage_rule
_LOWERED = tuple(None if r.values is None else frozenset(v.lower() for v in r.values)
                 for r in STAGE_RULES)


def stage_rule(attrs: Mapping[str, Any], kind: Optional[str],
               rules: Optional[tuple] = None) -> Optional[StageRule]:
    """The first rule of ``rules`` (default :data:`STAGE_RULES`) that a span with these
    attributes and span kind matches, or None. A value matches only as a string; an attribute
    whose value is None counts as absent (as a JSON null does in the store)."""
    lowered = _LOWERED if rules is None else tuple(
        None if r.values is None else frozenset(v.lower() for v in r.values) for r in rules)
    kind = kind.lower() if isinstance(kind, str) else None
    for rule, values in zip(STAGE_RULES if rules is None else rules, lowered):
        value = attrs.get(rule.attribute)
        if value is None or (rule.kind is not None and rule.kind != kind):
            continue
        if values is None or (isinstance(value, str) and value.lower() in values):
            return rule
    return None


def stage_for(attrs: Mapping[str, Any], kind: Optional[str]) -> Optional[str]:
    """The stage (an agentscope.vocab.Stage value) that a span with these attributes and span
    kind (``client``, ``internal``, ...) gets from its conventions, or None: the Python twin
    of the store's ``stages_from_conventions.sql``."""
    rule = stage_rule(attrs, kind)
    return None if rule is None else rule.stage


_SAFE_NAME = re.compile(r"[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*")


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def stage_sql(template: str, rules: Optional[tuple] = None) -> str:
    """``template`` (store/sql/stages_from_conventions.sql) with its placeholders filled from
    ``rules`` (default :data:`STAGE_RULES`): ``{stage_paths}`` the JSON paths of the attributes
    the rules read, as a list for one ``json_extract_string(attrs, ...)`` into ``v`` (or,
    in a template that holds ``{stage_names}`` instead, their names, as a list: ClickHouse's
    store/sql/clickhouse/analysis_input.sql reads them from a map);
    ``{stage_attributes}`` those values lower-cased, one column each, named by the attribute;
    ``{stage_case}`` the CASE over them and the ``kind`` column that gives the stage.

    Raises ValueError for an attribute name that is not a plain dotted name or a template
    that does not hold each placeholder once (programmer errors)."""
    rules = STAGE_RULES if rules is None else rules
    names = list(dict.fromkeys(r.attribute for r in rules))
    for name in names:
        if not _SAFE_NAME.fullmatch(name) or name.lower() in ("trace_id", "span_id", "kind", "v"):
            raise ValueError(f"stage rule attribute {name!r} is not a plain dotted name")
    by_name = "{stage_names}" in template
    paths = "[" + ", ".join(_sql_text(n if by_name else f'$."{n}"') for n in names) + "]"
    columns = ", ".join(f'lower(v[{i}]) AS "{n}"' for i, n in enumerate(names, 1))
    whens = []
    for rule in rules:
        cond = f'"{rule.attribute}" IS NOT NULL' if rule.values is None else (
            f'"{rule.attribute}" IN ('
            + ", ".join(_sql_text(v.lower()) for v in dict.fromkeys(rule.values)) + ")")
        if rule.kind is not None:
            cond = f"kind = {_sql_text(rule.kind)} AND {cond}"
        whens.append(f"WHEN {cond} THEN {_sql_text(rule.stage)}")
    case = "CASE\n            " + "\n            ".join(whens) + "\n        END"
    filled = template
    for key, text in (("{stage_names}" if by_name else "{stage_paths}", paths),
                      ("{stage_attributes}", columns),
                      ("{stage_case}", case)):
        if filled.count(key) != 1:
            raise ValueError(f"stage SQL template must hold {key} once")
        filled = filled.replace(key, text)
    return filled
