"""Importers of Langfuse trace exports, any-agent traces and Phoenix/OpenInference span exports.

The real Langfuse and any-agent files in tests/corpus/agent_traces are checked field by field
against the raw JSON and against ``normalized/``, the same traces converted independently (span
ids, parents, names, µs times, usage). Phoenix has no public sample trace: ours
(tests/data/importers/phoenix_spans.jsonl) is in the shape of Phoenix's REST API, and the test
builds the Parquet of a spans dataframe from it, as ``get_spans_dataframe()`` lays it out.
"""

from __future__ import annotations

import io
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from agentscope.formats import spanfile
from agentscope.formats.importers import anyagent, langfuse, phoenix
from agentscope.formats.importers._common import span as make_span

HERE = Path(__file__).parent
TRACES = HERE / "corpus" / "agent_traces"
LANGFUSE_DIR = TRACES / "langfuse_framework_traces"
ANYAGENT_DIR = TRACES / "any_agent"
DATA = HERE / "data" / "importers"
IMPORTERS = (langfuse.IMPORTER, anyagent.IMPORTER, phoenix.IMPORTER)

# file -> (spans, trace id, name of the root, observation types, input tokens of GENERATIONs)
LANGFUSE = {
    "agno-2025-06-11": (6, "080130871f53145aecf7c29d5dfb6e4c", "Agent.run",
                        {"SPAN": 2, "GENERATION": 4}, 2936),
    "autogen-2025-06-06": (2, "1b72c51fabed12ae7df83bfd4a09f545", "autogen-chat-trace",
                           {"SPAN": 1, "GENERATION": 1}, 41),
    "beeai-2025-08-01": (29, "096fc09a30ab90d2431778f9ee2b3936", "beeai-framework-main",
                         {"SPAN": 24, "GENERATION": 5}, 5542),
    "claude-agent-2025-12-22": (7, "097f1d8982fa909b8cffb14a166ec272", "claude.conversation",
                                {"GENERATION": 4, "SPAN": 1, "TOOL": 2}, 34),
    "crewai-2025-07-11": (6, "a287bb31e317433610d8827617471140", "crewai-index-trace",
                          {"GENERATION": 1, "SPAN": 5}, 190),
    "csharp-agent-with-gemini-2026-03-09": (8, "933dba1e9783f89d5d8bb032f041a2de",
                                            "Insights Agent C#",
                                            {"GENERATION": 3, "SPAN": 3, "TOOL": 2}, 8047),
    "google-adk-2025-08-28": (5, "b82a0bdc1994fc5d1c8576ca032543f7", "invocation [hello_app]",
                              {"GENERATION": 2, "CHAIN": 1, "AGENT": 1, "TOOL": 1}, 67),
    "google-gemini-2025-08-01": (1, "9f2f0fe0228fd81a9fe75882934b384a", "GenerateContent",
                                 {"GENERATION": 1}, 6),
    "koog-2025-08-26": (11, "dff173a675b759ce1b70e522b27d6846",
                        "agent.f9f77d1a-437f-4ba6-890e-b592a50cbd21",
                        {"AGENT": 2, "SPAN": 7, "GENERATION": 2}, 215),
    "langgraph-js-2025-10-30": (20, "2c1581dd9cecdafb6ca091b83d7ea99a", "LangGraph",
                                {"GENERATION": 2, "SPAN": 18}, 321),
    "langgraph-python-2025-08-22": (9, "e1fde3efec57ce8a69bafd3fb928a7eb", "LangGraph",
                                    {"SPAN": 7, "GENERATION": 2}, 168),
    "llamaindex-2025-06-05": (2, "12ea412956f99347b0503c1144acd0ec", "llama-index-trace",
                              {"SPAN": 1, "GENERATION": 1}, 13),
    "microsoft-agent-2025-12-17": (4, "8e419d3288419b5d944270505640e183",
                                   "invoke_agent 171105b7-59dd-49c0-9677-0b95395aa46a",
                                   {"AGENT": 1, "GENERATION": 2, "TOOL": 1}, 293),
    "openai-agents-2025-09-30": (5, "fee618f96dc31e0ca38b2f7b26eb8b29", "Agent workflow",
                                 {"AGENT": 2, "GENERATION": 2, "TOOL": 1}, 140),
    "pydantic-ai-2025-06-06": (3, "25f4bdeebaab60e6e1bee7e8469554bc", "pydantic-ai-qa-trace",
                               {"GENERATION": 1, "SPAN": 2}, 31),
    "pydantic-ai-tools-2025-06-06": (3, "25f4bdeebaab60e6e1bee7e8469554bc",
                                     "pydantic-ai-qa-trace", {"SPAN": 2, "GENERATION": 1}, 31),
    "pydantic-ai-tools-2025-12-04": (12, "7a38edd8123db47ad8dcb8aa4c5e3926", "run_joke_generator",
                                     {"SPAN": 5, "GENERATION": 4, "TOOL": 3}, 1315),
    "pydantic-ai-with-gemini-2025-12-24": (1, "f68601af42c4a35e1d5e4699de569c1f",
                                           "chat gemini-2.5-flash", {"GENERATION": 1}, 40),
    "vercel-aisdk-2025-11-17": (3, "df41e597d0a85e0d7a6ae8ebfaa70aa0", "ai.generateText",
                                {"GENERATION": 2, "TOOL": 1}, 76),
    "vertex-ai-2025-08-01": (1, "0298935e31d66d7de9487cac935d7d99", "generate_content",
                             {"GENERATION": 1}, 5),
}
# one generation per framework: (file, span id, parent, name, model, in, out tokens, ms)
GENERATIONS = [
    ("agno-2025-06-11", "b38a82eaa62b551e", "1cffdfa6fe3412e6", "OpenAIChat.invoke",
     "gpt-4o-mini", 1568, 423, 4799),
    ("beeai-2025-08-01", "52df0f7f9dad6b23", "9381f6df60cf8aa3", "backend.openai.chat.start-15",
     "gpt-4o-mini", 1988, None, 13859),
    ("claude-agent-2025-12-22", "371496f71d82baed", "805dc5dff9e33e32", "claude.assistant.turn",
     "claude-sonnet-4-5-20250929", 5, 94, 3733),
    ("crewai-2025-07-11", "231c43964b7e7e63", "a8bf77474d6f9a1d", "completion", "gpt-4o-mini",
     190, 164, 3694),
    ("csharp-agent-with-gemini-2026-03-09", "50d470aa18418652", "f858b986537e9e41",
     "chat gemini-2.5-flash", "gemini-2.5-flash", 3004, 167, 3398),
    ("google-adk-2025-08-28", "bded677884f031ce", "6d8beb2e6a36b133", "call_llm",
     "gemini-2.0-flash", 39, 6, 924),
    ("koog-2025-08-26", "e44e72cf2d221781", "6021df46275ad2d8", "llm.chat", "gpt-4o", 168, 19,
     1942),
    ("langgraph-js-2025-10-30", "0856a1825ccee968", "b6ebcf125bccb1e0", "ChatOpenAI",
     "gpt-5-mini-2025-08-07", 179, 35, 3230),
    ("microsoft-agent-2025-12-17", "2406e8343fd49c0e", "4cd6caa32861956a", "chat gpt-5-mini",
     "gpt-5-mini", 77, 86, 3289),
    ("openai-agents-2025-09-30", "90d94774e8e3724d", "d950b668796240b5", "response",
     "gpt-4.1-2025-04-14", 85, 29, 1150),
    ("pydantic-ai-tools-2025-12-04", "00d2804abb764b1b", "5b5c52d029f28206", "chat gpt-4o-mini",
     "gpt-4o-mini", 417, 53, 1707),
    ("vercel-aisdk-2025-11-17", "1dc6768109615657", None, "ai.generateText", "gpt-5", 14, 43,
     3045),
]
# any-agent file -> (spans, distinct span ids, spans whose parent is not in the file, tokens in)
ANYAGENT = {
    "e61adc4e/AGNO": (6, 6, 0, 1135), "e61adc4e/GOOGLE": (7, 7, 6, 1893),
    "e61adc4e/LANGCHAIN": (7, 7, 0, 910), "e61adc4e/LLAMA_INDEX": (8, 8, 0, 2784),
    "e61adc4e/OPENAI": (7, 6, 0, 1329), "e61adc4e/SMOLAGENTS": (7, 7, 0, 1386),
    "e61adc4e/TINYAGENT": (6, 6, 0, 691), "head/AGNO": (6, 6, 0, 1396),
    "head/GOOGLE": (7, 7, 6, 2251), "head/LANGCHAIN": (7, 7, 0, 1262),
    "head/LLAMA_INDEX": (9, 9, 0, 1308), "head/OPENAI": (6, 6, 0, 1020),
    "head/SMOLAGENTS": (7, 7, 0, 2294), "head/TINYAGENT": (8, 8, 0, 1369),
}


def _read(importer, path: Path, data: bytes | None = None):
    errors: list = []
    records = list(importer.read(path.read_bytes() if data is None else data, str(path), errors))
    return records, errors


def _normalized(name: str) -> list:
    return json.loads((TRACES / "normalized" / f"{name}.json").read_text())["spans"]


def test_every_corpus_file_is_pinned():
    assert sorted(p.name.split(".")[0] for p in LANGFUSE_DIR.glob("*.json")) == sorted(LANGFUSE)
    assert sorted(f"{p.parent.name}/{p.stem[:-6]}" for p in ANYAGENT_DIR.glob("*/*_trace.json")
                  ) == sorted(ANYAGENT)


@pytest.mark.parametrize("stem", sorted(LANGFUSE))
def test_langfuse_corpus(stem):
    path = LANGFUSE_DIR / f"{stem}.trace.json"
    n, trace_id, root_name, types, tokens_in = LANGFUSE[stem]
    records, errors = _read(langfuse.IMPORTER, path)
    assert errors == []
    assert len(records) == n
    assert {r.trace_id for r in records} == {trace_id}
    raw = {o["id"]: o for o in json.loads(path.read_text())["observations"]}
    assert [r.span_id for r in records] == list(raw)  # one span per observation, file order
    ids = {r.span_id for r in records}
    roots = [r for r in records if r.parent_span_id not in ids]
    assert [r.name for r in roots] == [root_name]
    assert roots[0].attrs["langfuse.trace.name"]  # what the trace object says, on the root
    assert Counter(r.attrs["langfuse.observation.type"] for r in records) == types
    for r in records:
        o = raw[r.span_id]
        assert r.attrs["langfuse.observation.type"] == o["type"]
        assert r.parent_span_id == o["parentObservationId"]
        assert r.name == o["name"] and r.start_ns <= r.end_ns and r.stage is None
    generations = [r for r in records if r.attrs["langfuse.observation.type"] == "GENERATION"]
    assert sum(r.attrs.get("gen_ai.usage.input_tokens", 0) for r in generations) == tokens_in
    assert all("gen_ai.request.model" in r.attrs for r in generations)
    # against the independently converted copy: ids, parents, µs times, usage
    want = _normalized(f"langfuse__{stem}")
    assert [(r.span_id, r.parent_span_id, r.name, r.start_ns // 1000,
             r.end_ns // 1000 - r.start_ns // 1000) for r in records] == [
        (s["span_id"], s["parent_id"], s["name"], s["start_us"], s["duration_us"]) for s in want]
    for r, s in zip(records, want):
        if s["usage"] and s["usage"].get("inputUsage"):
            assert r.attrs["gen_ai.usage.input_tokens"] == s["usage"]["inputUsage"]


def test_langfuse_partial_trace_keeps_its_orphan():
    """csharp-agent-with-gemini: the top span's parent was not exported; it stays as given."""
    records, _ = _read(langfuse.IMPORTER,
                       LANGFUSE_DIR / "csharp-agent-with-gemini-2026-03-09.trace.json")
    ids = {r.span_id for r in records}
    orphans = [r for r in records if r.parent_span_id not in ids]
    assert [(r.span_id, r.parent_span_id) for r in orphans] == [
        ("5b9ba1e61e2e10fc", "1db8118c6ecfd744")]
    assert not any(r.parent_span_id is None for r in records)
    assert {r.service for r in records} == {"agentic-clientinsights"}
    assert orphans[0].attrs["langfuse.observation.type"] == "SPAN"  # not the SDK's "span"
    assert orphans[0].host == "kube-worker0277.kubes10.da1.preprod.crto.in"


@pytest.mark.parametrize("stem,span_id,parent,name,model,tokens_in,tokens_out,ms", GENERATIONS)
def test_langfuse_generation_fields(stem, span_id, parent, name, model, tokens_in, tokens_out,
                                    ms):
    records, _ = _read(langfuse.IMPORTER, LANGFUSE_DIR / f"{stem}.trace.json")
    r = next(r for r in records if r.span_id == span_id)
    assert (r.parent_span_id, r.name, r.attrs["gen_ai.request.model"]) == (parent, name, model)
    assert r.attrs.get("gen_ai.usage.input_tokens") == tokens_in
    assert r.attrs.get("gen_ai.usage.output_tokens") == tokens_out
    assert r.duration_ns == ms * 1_000_000
    assert r.kind == "internal" and r.status == "unset"


def test_langfuse_keeps_the_frameworks_attributes():
    records, _ = _read(langfuse.IMPORTER, LANGFUSE_DIR / "google-adk-2025-08-28.trace.json")
    tool = next(r for r in records if r.span_id == "04290e4d82aba1bc")
    assert tool.attrs["gen_ai.tool.name"] == "say_hello"
    assert tool.attrs["openinference.span.kind"] == "TOOL"
    assert tool.attrs["otel.scope.name"] == "openinference.instrumentation.google_adk"
    records, _ = _read(langfuse.IMPORTER, LANGFUSE_DIR / "pydantic-ai-tools-2025-12-04.trace.json")
    call = next(r for r in records if r.span_id == "02d7769b76595f0b")
    assert json.loads(call.attrs["tool_arguments"]) == {"topic": "programming"}  # parsed JSON
    records, _ = _read(langfuse.IMPORTER, LANGFUSE_DIR / "langgraph-python-2025-08-22.trace.json")
    agent = next(r for r in records if r.span_id == "3b239b11cbb2ac0b")
    assert agent.attrs["langfuse.metadata.langgraph_node"] == "agent"
    assert agent.attrs["langfuse.metadata.langgraph_step"] == 3


def test_langfuse_sample_events_roots_and_errors():
    """SDK v2 style: UUID ids, no root observation, EVENTs, an ERROR, an unfinished span."""
    records, errors = _read(langfuse.IMPORTER, DATA / "langfuse_sdk_v2.trace.json")
    assert errors == []
    by_name = {r.name: r for r in records}
    assert len(records) == 6 and {r.trace_id for r in records} == {
        "3f0c1a527d4e4b8a9f216c5d2e8a1b47"}
    root = by_name["support-ticket"]  # the trace object, made the parent of the two tops
    assert root.parent_span_id is None and root.attrs["langfuse.trace.synthesized"] is True
    assert root.duration_ns == 4_250_000_000  # latency 4.25 s
    assert root.attrs["session.id"] == "sess-42" and root.attrs["user.id"] == "user-118"
    assert by_name["retrieve-account"].parent_span_id == root.span_id
    assert by_name["draft-reply"].parent_span_id == root.span_id
    (event,) = by_name["retrieve-account"].events  # an EVENT on its parent
    assert (event.name, event.attrs["langfuse.level"]) == ("cache-miss", "DEBUG")
    orphan = by_name["webhook-received"]  # an EVENT whose parent is not here: a point span
    assert orphan.duration_ns == 0 and orphan.attrs["langfuse.observation.type"] == "EVENT"
    failed = by_name["moderation"]
    assert failed.status == "error"
    assert failed.status_message == "RateLimitError: 429 Too Many Requests"
    assert failed.attrs["gen_ai.usage.input_tokens"] == 176
    assert "gen_ai.usage.output_tokens" not in failed.attrs
    open_span = by_name["send-email"]
    assert open_span.duration_ns == 0 and open_span.attrs["langfuse.end_time.missing"] is True
    assert open_span.status == "unset" and open_span.attrs["langfuse.level"] == "WARNING"
    draft = by_name["draft-reply"]
    assert (draft.attrs["gen_ai.usage.input_tokens"], draft.attrs["gen_ai.usage.output_tokens"]
            ) == (812, 164)
    assert draft.attrs["gen_ai.latency.time_to_first_token"] == pytest.approx(0.375)
    assert draft.attrs["langfuse.cost.total"] == pytest.approx(0.00022)


@pytest.mark.parametrize("key", sorted(ANYAGENT))
def test_anyagent_corpus(key):
    run, framework = key.split("/")
    path = ANYAGENT_DIR / run / f"{framework}_trace.json"
    n, distinct, orphans, tokens_in = ANYAGENT[key]
    records, errors = _read(anyagent.IMPORTER, path)
    assert errors == []
    raw = json.loads(path.read_text())["spans"]
    assert len(records) == n and len({r.span_id for r in records}) == distinct
    assert len({r.trace_id for r in records}) == 1
    assert records[0].trace_id == f"{raw[0]['context']['trace_id']:032x}"
    ids = {r.span_id for r in records}
    assert sum(r.parent_span_id is not None and r.parent_span_id not in ids
               for r in records) == orphans
    for r, s in zip(records, raw):
        assert r.span_id == f"{s['context']['span_id']:016x}"
        parent = s["parent"]["span_id"]
        assert r.parent_span_id == (None if parent is None else f"{parent:016x}")
        assert (r.name, r.start_ns, r.end_ns) == (s["name"], s["start_time"], s["end_time"])
        assert r.status == s["status"]["status_code"] and r.service == "unknown_service"
        assert r.attrs["gen_ai.operation.name"] in ("invoke_agent", "call_llm", "execute_tool")
    roots = [r for r in records if r.parent_span_id is None]
    assert [r.attrs["gen_ai.operation.name"] for r in roots] == ["invoke_agent"]
    assert sum(r.attrs.get("gen_ai.usage.input_tokens", 0) for r in records
               if r.attrs["gen_ai.operation.name"] == "call_llm") == tokens_in
    want = _normalized(f"any_agent__{run}__{framework}")
    assert [(r.span_id, r.parent_span_id, r.start_ns // 1000, r.end_ns // 1000 - r.start_ns //
             1000) for r in records] == [
        (s["span_id"], s["parent_id"], s["start_us"], s["duration_us"]) for s in want]


def test_anyagent_sample_with_error_event_and_link():
    records, errors = _read(anyagent.IMPORTER, DATA / "anyagent_tool_error_trace.json")
    assert errors == [] and len(records) == 4
    tool = next(r for r in records if r.attrs["gen_ai.operation.name"] == "execute_tool")
    assert (tool.status, tool.status_message) == (
        "error", "TimeoutError: weather service did not answer in 3 s")
    (event,) = tool.events
    assert event.name == "exception" and event.attrs["exception.type"] == "TimeoutError"
    (link,) = tool.links
    assert (link.trace_id, link.span_id) == ("0af7651916cd43dd8448eb211c80319c",
                                             "1122334455667788")
    assert {(r.service, r.host, r.pid) for r in records} == {("weather-agent", "worker-7", 4242)}


def _phoenix_lines() -> list:
    return [json.loads(ln) for ln in (DATA / "phoenix_spans.jsonl").read_text().splitlines()]


def test_phoenix_jsonl_sample():
    records, errors = _read(phoenix.IMPORTER, DATA / "phoenix_spans.jsonl")
    assert errors == []
    assert len(records) == 8 and len({r.trace_id for r in records}) == 2
    kinds = [r.attrs["openinference.span.kind"] for r in records]  # from span_kind
    assert kinds == ["AGENT", "RETRIEVER", "LLM", "TOOL", "TOOL", "LLM", "CHAIN", "LLM"]
    agent = records[0]
    assert agent.parent_span_id is None and agent.duration_ns == 4_204_512_000
    assert all(r.parent_span_id == agent.span_id for r in records[1:6])
    llm = records[2]
    assert llm.attrs["llm.model_name"] == "gpt-4o-mini-2024-07-18"
    assert llm.attrs["llm.token_count.prompt"] == 412
    assert llm.attrs["llm.output_messages.0.message.tool_calls.0.tool_call.function.name"] == (
        "get_weather")
    failed = records[3]
    assert (failed.status, failed.status_message) == (
        "error", "TimeoutError: upstream weather API took longer than 1 s")
    assert [e.name for e in failed.events] == ["exception"]
    assert records[4].status == "ok" and records[4].status_message is None
    assert records[1].attrs["retrieval.documents.1.document.score"] == 0.64


def _unflatten(flat: dict) -> dict:
    """Phoenix stores attributes nested, a number in a name being a list index."""
    nested: dict = {}
    for key, value in flat.items():
        node, parts = nested, key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value

    def lists(node):
        if not isinstance(node, dict):
            return node
        if node and all(k.isdigit() for k in node):
            return [lists(node[k]) for k in sorted(node, key=int)]
        return {k: lists(v) for k, v in node.items()}
    return lists(nested)


def _dataframe_columns(node: dict, prefix: str, row: dict) -> None:
    """``get_spans_dataframe`` flattens nested objects but leaves lists (of objects) whole."""
    for key, value in node.items():
        name = f"{prefix}.{key}"
        if isinstance(value, dict):
            _dataframe_columns(value, name, row)
        else:
            row[name] = value


def _spans_parquet() -> bytes:
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    rows = []
    for s in _phoenix_lines():
        row = {"name": s["name"], "span_kind": s["span_kind"], "parent_id": s["parent_id"],
               "start_time": pd.Timestamp(s["start_time"]),
               "end_time": pd.Timestamp(s["end_time"]), "status_code": s["status_code"],
               "status_message": s["status_message"], "events": s["events"],
               "context.span_id": s["context"]["span_id"],
               "context.trace_id": s["context"]["trace_id"]}
        attributes = dict(s["attributes"], **{"openinference.span.kind": s["span_kind"]})
        _dataframe_columns(_unflatten(attributes), "attributes", row)
        rows.append(row)
    frame = pd.DataFrame(rows).set_index("context.span_id")
    buffer = io.BytesIO()
    frame.to_parquet(buffer)
    return buffer.getvalue()


def test_phoenix_parquet_gives_the_same_records_as_jsonl():
    data = _spans_parquet()
    assert data.startswith(b"PAR1") and phoenix.sniff(data[:65536], "spans.parquet")
    from_parquet, errors = _read(phoenix.IMPORTER, Path("spans.parquet"), data)
    assert errors == []
    from_jsonl, _ = _read(phoenix.IMPORTER, DATA / "phoenix_spans.jsonl")
    assert from_parquet == from_jsonl


def test_phoenix_parquet_without_pyarrow(monkeypatch):
    data = _spans_parquet()
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    records, errors = _read(phoenix.IMPORTER, Path("spans.parquet"), data)
    assert records == []
    assert [(e.path, e.reason) for e in errors] == [
        ("spans.parquet", phoenix.PARQUET_NEEDS_PYARROW)]


def test_phoenix_other_json_shapes_give_the_same_records():
    want, _ = _read(phoenix.IMPORTER, DATA / "phoenix_spans.jsonl")
    spans = _phoenix_lines()
    page = json.dumps({"data": spans, "next_cursor": None}).encode()
    as_list = json.dumps(spans, indent=2).encode()
    nested = [dict(s, attributes=_unflatten(dict(
        s["attributes"], **{"openinference.span.kind": s["span_kind"]}))) for s in spans]
    flat_columns = []  # a spans dataframe written with to_json(orient="records", lines=True)
    for s in spans:
        row = {"context.span_id": s["context"]["span_id"], **{
            k: v for k, v in s.items() if k not in ("context", "attributes", "id")}}
        row["context.trace_id"] = s["context"]["trace_id"]
        row.update({f"attributes.{k}": v for k, v in s["attributes"].items()})
        flat_columns.append(row)
    for data in (page, as_list, "\n".join(json.dumps(s) for s in nested).encode(),
                 "\n".join(json.dumps(s) for s in flat_columns).encode()):
        assert phoenix.sniff(data[:65536], "export.json")
        records, errors = _read(phoenix.IMPORTER, Path("export.json"), data)
        assert errors == [] and records == want


def test_phoenix_epoch_times_and_hostile_strings():
    line = {"context.span_id": "00000000000000aa", "context.trace_id": "ab" * 16,
            "name": "'); DROP TABLE spans; --\u0000", "span_kind": "TOOL",
            "start_time": 1741083302123, "end_time": 1741083302.5, "status_code": "UNSET",
            "attributes.tool.name": "rm -rf /", "attributes.tool.parameters": None}
    (r,), errors = _read(phoenix.IMPORTER, Path("x.jsonl"), json.dumps(line).encode())
    assert errors == []
    assert (r.start_ns, r.end_ns) == (1741083302123000000, 1741083302500000000)  # ms, s
    assert r.name == line["name"] and r.attrs == {"tool.name": "rm -rf /",
                                                  "openinference.span.kind": "TOOL"}


# --- bad input: named problems, the rest still loads -------------------------------------------


def test_langfuse_cut_short_loads_the_complete_observations():
    path = LANGFUSE_DIR / "beeai-2025-08-01.trace.json"
    data = path.read_bytes()
    cut = data[: len(data) * 2 // 3]
    records, errors = _read(langfuse.IMPORTER, path, cut)
    assert len(errors) == 1 and errors[0].path == str(path)
    assert 1 < errors[0].line <= cut.count(b"\n") + 1 and "cut short" in errors[0].reason
    whole, _ = _read(langfuse.IMPORTER, path)
    assert 0 < len(records) < len(whole)
    assert [(r.span_id, r.parent_span_id, r.start_ns, r.end_ns) for r in records] == [
        (r.span_id, r.parent_span_id, r.start_ns, r.end_ns) for r in whole[: len(records)]]


def test_langfuse_bad_observations_are_named_and_the_rest_loads():
    path = LANGFUSE_DIR / "langgraph-python-2025-08-22.trace.json"
    doc = json.loads(path.read_text())
    del doc["observations"][1]["id"]
    del doc["observations"][4]["startTime"]
    doc["observations"][6]["endTime"] = "half past nine"
    data = json.dumps(doc, indent=2).encode()
    records, errors = _read(langfuse.IMPORTER, path, data)
    assert len(records) == 9 - 3
    reasons = [e.reason for e in errors]
    assert [r.split(" ", 1)[0] for r in reasons] == [
        "observations[1]", "observations[4]", "observations[6]"]
    assert "id missing" in reasons[0] and "startTime" in reasons[1]
    assert "'half past nine'" in reasons[2]
    assert all(e.path == str(path) and e.line and e.line > 1 for e in errors)
    lines = data.decode().splitlines()
    assert lines[errors[0].line - 1].strip() == "{"  # the line where that observation opens


def test_anyagent_bad_spans_are_named_and_the_rest_loads():
    path = ANYAGENT_DIR / "head" / "OPENAI_trace.json"
    doc = json.loads(path.read_text())
    doc["spans"][0]["context"]["span_id"] = None
    doc["spans"][2]["start_time"] = "soon"
    doc["spans"][3]["end_time"] = doc["spans"][3]["start_time"] - 1
    records, errors = _read(anyagent.IMPORTER, path, json.dumps(doc).encode())
    assert len(records) == 6 - 3
    assert [e.reason.split(" ", 1)[0] for e in errors] == ["spans[0]", "spans[2]", "spans[3]"]
    assert "'soon'" in errors[1].reason and "before" in errors[2].reason
    records, errors = _read(anyagent.IMPORTER, path, path.read_bytes()[:5000])
    assert records == [] and len(errors) == 1 and errors[0].line > 1


def test_phoenix_bad_lines_are_named_and_the_rest_loads():
    lines = (DATA / "phoenix_spans.jsonl").read_text().splitlines()
    bad = json.loads(lines[2])
    bad["start_time"] = "yesterday"
    no_id = json.loads(lines[3])
    del no_id["context"]["span_id"]
    text = "\n".join([lines[0], "{not json", json.dumps(bad), json.dumps(no_id), lines[4],
                      lines[5][:40]])  # the last line torn: no newline, cut mid-write
    records, errors = _read(phoenix.IMPORTER, Path("spans.jsonl"), text.encode())
    assert [r.name for r in records] == ["weather_agent", "get_weather"]
    assert [(e.line, e.torn) for e in errors] == [(2, False), (3, False), (4, False), (6, True)]
    assert "'yesterday'" in errors[1].reason and "span_id" in errors[2].reason


# --- sniffing: by content, each format only its own --------------------------------------------


def test_each_sniffer_takes_only_its_own_format():
    samples = {
        "langfuse": [LANGFUSE_DIR / "agno-2025-06-11.trace.json",
                     DATA / "langfuse_sdk_v2.trace.json"],
        "anyagent": [ANYAGENT_DIR / "head" / "LANGCHAIN_trace.json",
                     DATA / "anyagent_tool_error_trace.json"],
        "phoenix": [DATA / "phoenix_spans.jsonl"],
    }
    for owner, paths in samples.items():
        for path in paths:
            head = path.read_bytes()[:65536]
            assert [i.name for i in IMPORTERS if i.sniff(head, path.name)] == [owner], path


def test_sniffers_refuse_other_trace_files():
    record = make_span("ab" * 16, "cd" * 8, None, "task", 1_700_000_000_000_000_000,
                       1_700_000_001_000_000_000, {"gen_ai.operation.name": "chat"})
    ours = (spanfile.encode(record) + "\n").encode()
    otlp = json.dumps({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{
        "spans": [{"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "x", "kind": 1,
                   "startTimeUnixNano": "1", "endTimeUnixNano": "2"}]}]}]}).encode()
    jaeger = json.dumps({"data": [{"traceID": "ab" * 8, "spans": [{
        "traceID": "ab" * 8, "spanID": "cd" * 8, "operationName": "x", "references": [],
        "startTime": 1, "duration": 1, "tags": [], "processID": "p1"}],
        "processes": {"p1": {"serviceName": "s", "tags": []}}}]}).encode()
    others = [ours, otlp, jaeger, b"", b"PAR1", b"\x00\x01 binary"]
    others += [p.read_bytes()[:65536] for p in sorted((HERE / "corpus").rglob("*"))
               if p.suffix in (".json", ".jsonl") and "langfuse_framework" not in str(p)
               and "/any_agent/" not in str(p)]
    for head in others:
        assert [i.name for i in IMPORTERS if i.sniff(head, "trace.json")] == []


def test_langfuse_sniff_survives_a_cut_head_and_key_order():
    doc = json.loads((LANGFUSE_DIR / "autogen-2025-06-06.trace.json").read_text())
    doc["trace"]["input"] = "x" * 70000  # the observations start past the 64 KiB head
    long_trace = json.dumps(doc).encode()
    assert long_trace.index(b'"observations": [{') > 65536
    assert langfuse.sniff(long_trace[:65536], "t.json")
    reordered = json.dumps({"observations": doc["observations"], "trace": doc["trace"]})
    assert langfuse.sniff(reordered.encode()[:65536], "t.json")
    records, errors = _read(langfuse.IMPORTER, Path("t.json"), reordered.encode())
    assert errors == [] and len(records) == 2
