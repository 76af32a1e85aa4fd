"""The stage table (agentscope.semconv.STAGE_RULES): which stage a span from a real
instrumentation gets, the same in Python (stage_for) and in the store (the SQL generated into
stages_from_conventions.sql), over spans shaped like each instrumentation's and over the corpus.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from agentscope import semconv
from agentscope.analysis import analyze
from agentscope.semconv import STAGE_RULES, StageRule, stage_for, stage_rule, stage_sql
from agentscope.store.schema import sql
from agentscope.vocab import Stage

REPO = Path(__file__).resolve().parents[1]
AGENT_TRACES = REPO / "tests" / "corpus" / "agent_traces"
LANGFUSE = AGENT_TRACES / "langfuse_framework_traces"
needs_corpus = pytest.mark.skipif(not AGENT_TRACES.is_dir(), reason="corpus not present")

T0 = 1_750_000_000_000_000_000
JAEGER = "jaeger_ui_genai/genaiTestTrace.json"
LF = "langfuse_framework_traces/"
ANY_AGENT = "derived_otlp/any_agent_head_AGNO.otlp.json"


def _index(attribute: str, value=None, kind=None) -> int:
    """The position in STAGE_RULES of the rule for this attribute (and value / kind)."""
    for i, r in enumerate(STAGE_RULES):
        if r.attribute == attribute and r.kind == kind and (
                value is None and r.values is None
                or r.values is not None and value in r.values):
            return i
    raise AssertionError(f"no rule for {attribute}={value} kind={kind}")


# (name, kind, attributes, expected stage, rule expected to decide, where the shape is from).
# Shapes: attribute names, values and span kinds as the instrumentation sets them; "corpus: F"
# is a file under tests/corpus/agent_traces/, otherwise the published doc of the convention.
CASES = [
    # OTel GenAI gen_ai.operation.name
    ("chat model-a", "client", {"gen_ai.operation.name": "chat",
                                "gen_ai.request.model": "model-a"},
     "inference", _index("gen_ai.operation.name", "chat"), "corpus: " + JAEGER),
    ("generate_content", "internal", {"gen_ai.operation.name": "generate_content",
                                      "gen_ai.system": "gemini"},
     "inference", _index("gen_ai.operation.name", "chat"), "GenAI spans: inference span"),
    ("embeddings text-embedding-3-small", "client", {"gen_ai.operation.name": "embeddings"},
     "inference", _index("gen_ai.operation.name", "embeddings"), "GenAI spans: embeddings"),
    ("Chat in capitals", "client", {"gen_ai.operation.name": "Chat"},
     "inference", _index("gen_ai.operation.name", "chat"), "values compare case-insensitively"),
    ("call_llm mistral/mistral-small-latest", "internal",
     {"gen_ai.operation.name": "call_llm", "gen_ai.request.model": "mistral/mistral-small-latest"},
     "inference", _index("gen_ai.operation.name", "call_llm"), "corpus: " + ANY_AGENT),
    ("completion", "client", {"gen_ai.operation.name": "completion"},
     "inference", _index("gen_ai.operation.name", "completion"), "earlier agentscope table"),
    ("retrieval vector-search", "client", {"gen_ai.operation.name": "retrieval"},
     "context", _index("gen_ai.operation.name", "retrieval"), "corpus: " + JAEGER),
    ("execute_tool list_dashboards", "internal",
     {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "list_dashboards",
      "gen_ai.tool.call.id": "call_list_dashboards"},
     "tool", _index("gen_ai.operation.name", "execute_tool"), "corpus: " + JAEGER),
    ("tool", "internal", {"gen_ai.operation.name": "tool"},
     "tool", _index("gen_ai.operation.name", "tool"), "earlier agentscope table"),
    ("invoke_agent triage-agent", "server",
     {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "triage-agent"},
     "agent", _index("gen_ai.operation.name", "invoke_agent"), "corpus: " + JAEGER),
    ("agent.f9f77d1a", "internal",  # Koog: its root span, typed AGENT by Langfuse
     {"gen_ai.operation.name": "create_agent", "langfuse.observation.type": "AGENT"},
     "agent", _index("gen_ai.operation.name", "create_agent"), "corpus: " + LF + "koog"),
    ("invoke_workflow", "internal", {"gen_ai.operation.name": "invoke_workflow"},
     "agent", _index("gen_ai.operation.name", "invoke_workflow"), "GenAI registry v1.41"),
    ("mcp__weather__get_weather", "internal",  # an operation name before LangSmith's kind
     {"gen_ai.operation.name": "execute_tool", "langsmith.span.kind": "tool",
      "langfuse.observation.type": "TOOL"},
     "tool", _index("gen_ai.operation.name", "execute_tool"), "corpus: " + LF + "claude-agent"),
    # Vercel AI SDK ai.operationId (the outer call orchestrates; Langfuse types it GENERATION)
    ("ai.generateText", "internal",
     {"ai.operationId": "ai.generateText", "operation.name": "ai.generateText",
      "ai.model.id": "gpt-4o", "langfuse.observation.type": "GENERATION"},
     "agent", _index("ai.operationId", "ai.generateText"), "corpus: " + LF + "vercel-aisdk"),
    ("ai.generateText.doGenerate", "internal",
     {"ai.operationId": "ai.generateText.doGenerate", "gen_ai.system": "openai.chat",
      "langfuse.observation.type": "GENERATION"},
     "inference", _index("ai.operationId", "ai.generateText.doGenerate"),
     "corpus: " + LF + "vercel-aisdk"),
    ("ai.streamText.doStream", "internal", {"ai.operationId": "ai.streamText.doStream"},
     "inference", _index("ai.operationId", "ai.streamText.doStream"), "AI SDK telemetry doc"),
    ("ai.embedMany", "internal", {"ai.operationId": "ai.embedMany", "ai.usage.tokens": 12},
     "agent", _index("ai.operationId", "ai.embedMany"), "AI SDK telemetry doc"),
    ("ai.embedMany.doEmbed", "internal", {"ai.operationId": "ai.embedMany.doEmbed"},
     "inference", _index("ai.operationId", "ai.embedMany.doEmbed"), "AI SDK telemetry doc"),
    ("getWeather", "internal",
     {"ai.operationId": "ai.toolCall", "ai.toolCall.name": "getWeather",
      "langfuse.observation.type": "TOOL"},
     "tool", _index("ai.operationId", "ai.toolCall"), "corpus: " + LF + "vercel-aisdk"),
    # OpenLLMetry / Traceloop
    ("openai.chat", "client",
     {"llm.request.type": "chat", "gen_ai.system": "openai", "llm.is_streaming": False},
     "inference", _index("llm.request.type", "chat"), "OpenLLMetry semconv_ai"),
    ("cohere.rerank", "client", {"llm.request.type": "rerank", "gen_ai.system": "Cohere"},
     "inference", _index("llm.request.type", "rerank"), "OpenLLMetry semconv_ai"),
    ("get_weather.tool", "internal",
     {"traceloop.span.kind": "tool", "traceloop.entity.name": "get_weather"},
     "tool", _index("traceloop.span.kind", "tool"), "OpenLLMetry @tool"),
    ("joke_generator.workflow", "internal",
     {"traceloop.span.kind": "workflow", "traceloop.workflow.name": "joke_generator"},
     "agent", _index("traceloop.span.kind", "workflow"), "OpenLLMetry @workflow"),
    ("create_joke.task", "internal", {"traceloop.span.kind": "task"},
     "agent", _index("traceloop.span.kind", "task"), "OpenLLMetry @task"),
    # OpenInference
    ("OpenAIChat.invoke", "internal",
     {"openinference.span.kind": "LLM", "input.mime_type": "application/json",
      "langfuse.observation.type": "GENERATION"},
     "inference", _index("openinference.span.kind", "LLM"), "corpus: " + LF + "agno"),
    ("lower-case kind", "internal", {"openinference.span.kind": "llm"},
     "inference", _index("openinference.span.kind", "LLM"), "case-insensitive"),
    ("duckduckgo_search", "internal",
     {"openinference.span.kind": "TOOL", "tool.name": "duckduckgo_search",
      "output.mime_type": "text/plain", "langfuse.observation.type": "SPAN"},
     "tool", _index("openinference.span.kind", "TOOL"), "corpus: " + LF + "agno"),
    ("guard", "internal", {"openinference.span.kind": "GUARDRAIL"},
     "tool", _index("openinference.span.kind", "GUARDRAIL"), "OpenInference span kinds"),
    ("relevance eval", "internal", {"openinference.span.kind": "EVALUATOR"},
     "tool", _index("openinference.span.kind", "EVALUATOR"), "OpenInference span kinds"),
    ("agent.react.update-12", "internal",  # an AGENT span naming the tool it chose
     {"openinference.span.kind": "AGENT", "tool.name": "Wikipedia",
      "langfuse.observation.type": "SPAN"},
     "agent", _index("openinference.span.kind", "AGENT"), "corpus: " + LF + "beeai"),
    ("Crew.kickoff", "internal",
     {"openinference.span.kind": "CHAIN", "crew_key": "4d5b2186",
      "langfuse.observation.type": "SPAN"},
     "agent", _index("openinference.span.kind", "CHAIN"), "corpus: " + LF + "crewai"),
    ("VectorIndexRetriever.retrieve", "internal", {"openinference.span.kind": "RETRIEVER"},
     "context", _index("openinference.span.kind", "RETRIEVER"), "OpenInference span kinds"),
    ("CohereRerank.postprocess_nodes", "internal", {"openinference.span.kind": "RERANKER"},
     "context", _index("openinference.span.kind", "RERANKER"), "OpenInference span kinds"),
    ("ChatPromptTemplate", "internal", {"openinference.span.kind": "PROMPT"},
     "context", _index("openinference.span.kind", "PROMPT"), "OpenInference span kinds"),
    # LangSmith
    ("ChatOpenAI", "internal", {"langsmith.span.kind": "llm"},
     "inference", _index("langsmith.span.kind", "llm"), "LangSmith OTel guide"),
    ("get_current_weather", "internal", {"langsmith.span.kind": "tool"},
     "tool", _index("langsmith.span.kind", "tool"), "LangSmith run types"),
    ("VectorStoreRetriever", "internal", {"langsmith.span.kind": "retriever"},
     "context", _index("langsmith.span.kind", "retriever"), "LangSmith run types"),
    ("claude.conversation", "internal",  # a custom operation name, then LangSmith's kind
     {"gen_ai.operation.name": "chain", "langsmith.span.kind": "chain",
      "langfuse.observation.type": "SPAN"},
     "agent", _index("langsmith.span.kind", "chain"), "corpus: " + LF + "claude-agent"),
    ("StrOutputParser", "internal", {"langsmith.span.kind": "parser"},
     "agent", _index("langsmith.span.kind", "parser"), "LangSmith run types"),
    # MCP
    ("tools/call get_weather", "client",
     {"mcp.method.name": "tools/call", "gen_ai.tool.name": "get_weather"},
     "tool", _index("mcp.method.name", "tools/call"), "OTel MCP conventions"),
    ("resources/read", "client", {"mcp.method.name": "resources/read"},
     "context", _index("mcp.method.name", "resources/read"), "OTel MCP conventions"),
    # a tool name without an operation name
    ("running tool: get_pun_suggestion", "internal",
     {"gen_ai.tool.name": "get_pun_suggestion", "logfire.msg": "running tool: get_pun_suggestion",
      "langfuse.observation.type": "TOOL"},
     "tool", _index("gen_ai.tool.name"), "corpus: " + LF + "pydantic-ai-tools-2025-12-04"),
    ("tool.HelloTool", "internal",
     {"gen_ai.tool.name": "HelloTool", "langfuse.observation.type": "SPAN"},
     "tool", _index("gen_ai.tool.name"), "corpus: " + LF + "koog"),
    # Langfuse observation types (our importer's attribute; Langfuse SDK v3 sets lower case)
    ("ChatOpenAI", "internal", {"langfuse.observation.type": "GENERATION"},
     "inference", _index("langfuse.observation.type", "generation"),
     "corpus: " + LF + "langgraph-python"),
    ("embed-query", "internal", {"langfuse.observation.type": "embedding"},
     "inference", _index("langfuse.observation.type", "embedding"), "Langfuse SDK v3"),
    ("search-tool", "internal", {"langfuse.observation.type": "tool"},
     "tool", _index("langfuse.observation.type", "tool"), "Langfuse SDK v3 as_type='tool'"),
    ("toxicity-check", "internal", {"langfuse.observation.type": "GUARDRAIL"},
     "tool", _index("langfuse.observation.type", "guardrail"), "Langfuse observation types"),
    ("judge", "internal", {"langfuse.observation.type": "evaluator"},
     "tool", _index("langfuse.observation.type", "evaluator"), "Langfuse observation types"),
    ("planner", "internal", {"langfuse.observation.type": "agent"},
     "agent", _index("langfuse.observation.type", "agent"), "Langfuse SDK v3 as_type='agent'"),
    ("rag-pipeline", "internal", {"langfuse.observation.type": "CHAIN"},
     "agent", _index("langfuse.observation.type", "chain"), "Langfuse observation types"),
    ("vector-lookup", "internal", {"langfuse.observation.type": "RETRIEVER"},
     "context", _index("langfuse.observation.type", "retriever"), "Langfuse observation types"),
    # databases, messaging, HTTP and RPC clients
    ("SELECT shop", "client", {"db.system": "postgresql", "db.statement": "SELECT 1"},
     "tool", _index("db.system"), "OTel db (old name)"),
    ("present as a boolean", "client", {"db.system": True},
     "tool", _index("db.system"), "a value of any type counts as present"),
    ("SELECT series", "client",
     {"db.system.name": "clickhouse", "db.namespace": "metrics"},
     "tool", _index("db.system.name"), "corpus: " + JAEGER),
    ("SEARCH docs", "server", {"db.system.name": "qdrant", "db.namespace": "docs"},
     "tool", _index("db.system.name"), "corpus: " + JAEGER),
    ("orders process", "consumer",
     {"messaging.system": "kafka", "messaging.operation.type": "process"},
     "queue", _index("messaging.system", kind="consumer"), "OTel messaging spans"),
    ("orders send", "producer", {"messaging.system": "kafka"},
     "tool", _index("messaging.system"), "OTel messaging spans"),
    ("POST /v1/messages", "client",
     {"http.request.method": "POST", "url.full": "https://api.example-ai.test/v1/messages"},
     "tool", _index("http.request.method", kind="client"), "corpus: " + JAEGER),
    ("HTTP GET", "client", {"http.method": "GET", "http.url": "https://example.test/"},
     "tool", _index("http.method", kind="client"), "OTel HTTP (old name)"),
    ("grpc.Search/Query", "client", {"rpc.system": "grpc", "rpc.service": "Search"},
     "tool", _index("rpc.system", kind="client"), "OTel RPC (old name)"),
    ("Search/Query", "client", {"rpc.system.name": "grpc"},
     "tool", _index("rpc.system.name", kind="client"), "OTel RPC v1.41"),
    ("POST api.openai.com", "client",  # logfire copies the agent's name onto its HTTP calls
     {"http.request.method": "POST", "gen_ai.agent.name": "joke_agent"},
     "tool", _index("http.request.method", kind="client"), "client call before agent name"),
    # agent runs without an operation name
    ("joke_agent run", "internal",
     {"agent_name": "joke_agent", "gen_ai.agent.name": "joke_agent",
      "logfire.msg": "joke_agent run", "langfuse.observation.type": "SPAN"},
     "agent", _index("gen_ai.agent.name"), "corpus: " + LF + "pydantic-ai-tools-2025-12-04"),
    ("qa_agent run", "internal",
     {"agent_name": "qa_agent", "model_name": "gpt-4o", "logfire.msg": "qa_agent run",
      "langfuse.observation.type": "SPAN"},
     "agent", _index("agent_name"), "corpus: " + LF + "pydantic-ai-2025-06-06"),
    # no stage: wrappers, server spans, events, values that are not the convention's
    ("GET /validate", "server", {"http.request.method": "GET", "http.route": "/validate"},
     None, None, "corpus: " + JAEGER + " (the served side of a call)"),
    ("graphql.execution", "internal", {}, None, None, "corpus: " + JAEGER),
    ("RunnableSequence", "internal", {"langfuse.observation.type": "SPAN"},
     None, None, "corpus: " + LF + "langgraph-js"),
    ("running 3 tools", "internal",
     {"logfire.msg": "running 3 tools", "langfuse.observation.type": "SPAN"},
     None, None, "corpus: " + LF + "pydantic-ai-tools-2025-12-04"),
    ("Insights Agent C#", "internal", {"langfuse.observation.type": "span"},
     None, None, "corpus: " + LF + "csharp-agent-with-gemini"),
    ("an event", "internal", {"langfuse.observation.type": "EVENT"}, None, None, "Langfuse"),
    ("traceloop unknown", "internal", {"traceloop.span.kind": "unknown"}, None, None,
     "OpenLLMetry"),
    ("a number", "internal", {"gen_ai.operation.name": 3}, None, None, "not a string value"),
    ("a quote", "internal", {"gen_ai.operation.name": "chat' OR '1'='1"}, None, None,
     "hostile strings stay data"),
    ("db.system null", "client", {"db.system": None}, None, None, "a null counts as absent"),
]


def test_every_rule_is_sound():
    stages = {s.value for s in Stage}
    for name, url in semconv.CONVENTIONS.values():
        assert name and (url == "" or url.startswith("https://")), name
    for rule in STAGE_RULES:
        assert rule.stage in stages, rule
        assert rule.convention in semconv.CONVENTIONS, rule
        assert rule.values is None or (rule.values and all(
            isinstance(v, str) and v for v in rule.values)), rule
        assert rule.kind in (None, "internal", "server", "client", "producer", "consumer")
        for value in rule.values or ():  # the store compares a JSON number's or true's text:
            with pytest.raises(ValueError):  # no value may look like one
                json.loads(value)
    # no rule is shadowed entirely by an earlier one
    for i, rule in enumerate(STAGE_RULES):
        for earlier in STAGE_RULES[:i]:
            if earlier.attribute == rule.attribute and earlier.kind in (None, rule.kind):
                assert earlier.values is not None, (earlier, rule)
                if rule.values is not None:
                    assert not {v.lower() for v in rule.values} <= {
                        v.lower() for v in earlier.values}, (earlier, rule)


@pytest.mark.parametrize("name,kind,attrs,stage,rule,source", CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_stage_for(name, kind, attrs, stage, rule, source):
    assert stage_for(attrs, kind) == stage
    found = stage_rule(attrs, kind)
    assert (None if found is None else STAGE_RULES.index(found)) == rule


def test_every_rule_has_a_case():
    decided = {c[4] for c in CASES}
    missing = [r for i, r in enumerate(STAGE_RULES) if i not in decided]
    assert not missing


def _otlp_value(value):
    if value is None:
        return {}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    return {"stringValue": value}


_KINDS = {"internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}


def _otlp_request(cases) -> dict:
    spans = [{
        "traceId": f"{i + 1:032x}", "spanId": f"{i + 1:016x}", "name": name,
        "kind": _KINDS[kind], "startTimeUnixNano": str(T0 + i * 1000),
        "endTimeUnixNano": str(T0 + i * 1000 + 500),
        "attributes": [{"key": k, "value": _otlp_value(v)} for k, v in attrs.items()],
    } for i, (name, kind, attrs, *_rest) in enumerate(cases)]
    return {"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "shapes"}}]},
        "scopeSpans": [{"spans": spans}]}]}


def test_the_store_agrees_with_stage_for(tmp_path):
    """Every case, loaded from OTLP/JSON, gets the same stage from the generated SQL."""
    (tmp_path / "shapes.json").write_text(json.dumps(_otlp_request(CASES)))
    a = analyze(tmp_path, db=":memory:")
    try:
        _, rows = a.query_rows("SELECT span_id, name, stage, stage_from FROM spans")
    finally:
        a.close()
    got = {int(span_id, 16) - 1: (name, stage, src) for span_id, name, stage, src in rows}
    assert len(got) == len(CASES)
    for i, (name, kind, attrs, stage, *_rest) in enumerate(CASES):
        assert got[i] == (name, stage, None if stage is None else "convention"), (name, kind)


def test_generated_sql_quotes_its_constants():
    rules = (StageRule("x.name", ("o'brien", "it''s"), "tool", "agentscope"),
             StageRule("x.kind", None, "queue", "agentscope", kind="consumer"))
    template = ("SELECT n, {stage_case} FROM (SELECT n, kind, {stage_attributes} FROM ("
                "SELECT n, kind, json_extract_string(attrs, {stage_paths}) AS v FROM t)) "
                "ORDER BY n")
    con = duckdb.connect()
    con.execute("CREATE TABLE t (n INTEGER, kind VARCHAR, attrs VARCHAR)")
    rows = [(1, "client", {"x.name": "O'Brien"}), (2, "client", {"x.name": "it''s"}),
            (3, "consumer", {"x.kind": "kafka"}), (4, "producer", {"x.kind": "kafka"}),
            (5, "client", {"x.name": "obrien"})]
    for n, kind, attrs in rows:
        con.execute("INSERT INTO t VALUES (?, ?, ?)", [n, kind, json.dumps(attrs)])
    got = [stage for _, stage in con.execute(stage_sql(template, rules)).fetchall()]
    python = [getattr(stage_rule(attrs, kind, rules), "stage", None) for _, kind, attrs in rows]
    assert got == python == ["tool", "tool", "queue", None, None]


def test_generated_sql_refuses_what_it_cannot_quote():
    template = sql("stages_from_conventions.sql")
    with pytest.raises(ValueError, match="plain dotted name"):
        stage_sql(template, (StageRule('a"b', None, "tool", "agentscope"),))
    with pytest.raises(ValueError, match="plain dotted name"):
        stage_sql(template, (StageRule("kind", None, "tool", "agentscope"),))
    with pytest.raises(ValueError, match="once"):
        stage_sql("UPDATE spans SET stage = {stage_case}")


def _observations(path: Path):
    """(type, name, attributes + the Langfuse type) of each observation of a Langfuse export:
    the framework's OTel attributes are under metadata.attributes, metadata being an object
    or its JSON text."""
    for obs in json.loads(path.read_text())["observations"]:
        meta = obs.get("metadata")
        if isinstance(meta, str):
            try:
                meta = json.loads(meta)
            except ValueError:
                meta = {}
        attrs = meta.get("attributes") if isinstance(meta, dict) else None
        attrs = dict(attrs) if isinstance(attrs, dict) else {}
        attrs["langfuse.observation.type"] = obs["type"]
        yield obs["type"], obs["name"], attrs


# observations per export: (all, with a stage). The table before this one (gen_ai operation
# names, four OpenInference kinds, db/messaging/HTTP) gave 70 of 138 a stage; now 96.
LANGFUSE_SHARES = {
    "agno-2025-06-11": (6, 6), "autogen-2025-06-06": (2, 1), "beeai-2025-08-01": (29, 29),
    "claude-agent-2025-12-22": (7, 7), "crewai-2025-07-11": (6, 3),
    "csharp-agent-with-gemini-2026-03-09": (8, 5), "google-adk-2025-08-28": (5, 5),
    "google-gemini-2025-08-01": (1, 1), "koog-2025-08-26": (11, 6),
    "langgraph-js-2025-10-30": (20, 2), "langgraph-python-2025-08-22": (9, 2),
    "llamaindex-2025-06-05": (2, 1), "microsoft-agent-2025-12-17": (4, 4),
    "openai-agents-2025-09-30": (5, 5), "pydantic-ai-2025-06-06": (3, 2),
    "pydantic-ai-tools-2025-06-06": (3, 2), "pydantic-ai-tools-2025-12-04": (12, 10),
    "pydantic-ai-with-gemini-2025-12-24": (1, 1), "vercel-aisdk-2025-11-17": (3, 3),
    "vertex-ai-2025-08-01": (1, 1),
}


@needs_corpus
def test_langfuse_exports_share_with_a_stage():
    shares, unstaged = {}, set()
    for path in sorted(LANGFUSE.glob("*.trace.json")):
        found = [(kind, name, stage_for(attrs, "internal"))
                 for kind, name, attrs in _observations(path)]
        shares[path.name[:-len(".trace.json")]] = (len(found), sum(s is not None
                                                                   for *_, s in found))
        unstaged |= {kind for kind, _, s in found if s is None}
    assert shares == LANGFUSE_SHARES
    assert sum(n for _, n in shares.values()) == 96
    # what is left without a stage is Langfuse's plain SPAN: wrappers, graph nodes, roots
    assert unstaged == {"SPAN"}


@needs_corpus
def test_the_store_agrees_with_stage_for_over_the_corpus(tmp_path):
    """Every span of every agent trace in the corpus (OTLP, Jaeger, Langfuse, any-agent, as
    the importers read them) gets the same stage from the store as from stage_for."""
    shutil.copytree(AGENT_TRACES, tmp_path / "agent_traces")
    a = analyze(tmp_path, db=":memory:")
    try:
        _, rows = a.query_rows("SELECT name, kind, attrs, stage, stage_from FROM spans")
    finally:
        a.close()
    # 289 spans today: any-agent, Jaeger and Langfuse files (derived_otlp repeats any-agent's
    # spans: skipped as duplicates); the importers may grow, the floor guards the loading
    assert len(rows) > 250
    for name, kind, attrs, stage, stage_from in rows:
        assert stage_from in (None, "convention"), name
        assert stage == stage_for(json.loads(attrs) if attrs else {}, kind), (name, kind, attrs)
    staged = sum(stage is not None for *_, stage, _ in rows)
    assert staged > len(rows) / 2


def _markdown_table() -> str:
    """STAGE_RULES as the Markdown table docs/analysis.md shows."""
    lines = ["| # | attribute | values | span kind | stage | convention | why |",
             "|---|---|---|---|---|---|---|"]
    for i, r in enumerate(STAGE_RULES, 1):
        values = "(present)" if r.values is None else ", ".join(f"`{v}`" for v in r.values)
        name, url = semconv.CONVENTIONS[r.convention]
        ref = f"[{name}]({url})" if url else name
        lines.append(f"| {i} | `{r.attribute}` | {values} | {r.kind or 'any'} | {r.stage} "
                     f"| {ref} | {r.note} |")
    return "\n".join(lines) + "\n"


def test_the_docs_show_the_table():
    table = _markdown_table()
    docs = [REPO / "docs" / "analysis.md"]
    assert any(p.is_file() and table in p.read_text() for p in docs), (
        "docs/analysis.md does not show STAGE_RULES as it is; the table:\n" + table)
