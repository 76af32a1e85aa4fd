"""The Jaeger JSON and TraceLab round-trace importers, read directly (IMPORTER.read).

Real inputs come from tests/corpus (jaeger-ui's GenAI trace and critical-path test inputs,
TraceLab's 19 sanitized rounds); the small hand-made samples in tests/data/importers cover what
the corpus does not (the /api/traces wrapper, typed tags, logs, FOLLOWS_FROM, status tags).
"""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path

import pytest

from agentscope.formats import spanfile
from agentscope.formats.importers import HEAD_BYTES, _common, jaeger, tracelab

from .tracelab_shares import tool_share

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "corpus"
DATA = REPO / "tests" / "data" / "importers"
GENAI = CORPUS / "agent_traces" / "jaeger_ui_genai" / "genaiTestTrace.json"
CRITICAL = CORPUS / "jaeger_critical_path"
ROUNDS = CORPUS / "tracelab" / "round_trace.jsonl"
API_ANSWER = DATA / "jaeger_api_answer.json"
SAMPLE = DATA / "tracelab_sample.jsonl"


def load(importer, data: bytes, path="in-memory"):
    errors: list = []
    records = list(importer.IMPORTER.read(data, str(path), errors))
    return records, errors


def by_id(records):
    out = {r.span_id: r for r in records}
    assert len(out) == len(records), "span ids are unique"
    return out


def sid(raw):
    return _common.hex_id(raw, 8)


# --- Jaeger: the corpus ----------------------------------------------------------------------

JAEGER_CORPUS = [(GENAI, 57)] + [
    (CRITICAL / "raw_jaeger_input" / f"test{i}.trace.json", n)
    for i, n in zip(range(1, 10), (3, 3, 2, 3, 3, 3, 3, 2, 2))]


@pytest.mark.parametrize("path,spans", JAEGER_CORPUS, ids=lambda v: getattr(v, "name", v))
def test_jaeger_corpus_files_load_whole(path, spans):
    data = path.read_bytes()
    assert jaeger.sniff(data[:HEAD_BYTES], path.name)
    records, errors = load(jaeger, data, path)
    assert errors == []
    assert len(records) == spans
    assert len({r.trace_id for r in records}) == 1
    assert all(len(r.trace_id) == 32 and len(r.span_id) == 16 for r in records)
    assert all(r.stage is None and r.thread_cpu_ns is None for r in records)


@pytest.mark.parametrize("case", range(1, 10))
def test_jaeger_critical_path_inputs_match_the_neutral_copies(case):
    """The raw upstream inputs (no data wrapper; ids like "span-C"; µs counted from 1) give the
    spans, parents and times the neutral test{N}.json files hold for the same traces."""
    neutral = json.loads((CRITICAL / f"test{case}.json").read_text())
    records, errors = load(jaeger, (CRITICAL / "raw_jaeger_input" /
                                    f"test{case}.trace.json").read_bytes())
    assert errors == []
    got = by_id(records)
    assert set(got) == {sid(s["span_id"]) for s in neutral["spans"]}
    for s in neutral["spans"]:
        r = got[sid(s["span_id"])]
        assert r.parent_span_id == (sid(s["parent_id"]) if s["parent_id"] else None)
        assert (r.start_ns, r.end_ns - r.start_ns) == (s["start_us"] * 1000,
                                                       s["duration_us"] * 1000)
        assert (r.name, r.service, r.kind) == (s["name"], s["service"],
                                               s["span_kind"] or "internal")
        assert r.links == ()  # one reference each: the parent


def test_jaeger_genai_trace_matches_the_normalized_copy():
    neutral = json.loads((CORPUS / "agent_traces" / "normalized" /
                          "jaeger_ui__genaiTestTrace.json").read_text())
    records, _ = load(jaeger, GENAI.read_bytes())
    got = by_id(records)
    assert records[0].trace_id == "4a1b2c3d4e5f60718293a4b5c6d7e8f9"
    for s in neutral["spans"]:
        r = got[s["span_id"]]  # already 16 hex digits: kept as they are
        assert r.parent_span_id == s["parent_id"]
        assert (r.start_ns, r.end_ns) == (s["start_us"] * 1000,
                                          (s["start_us"] + s["duration_us"]) * 1000)
        assert (r.name, r.service) == (s["name"], s["service"])
        assert r.attrs.get("gen_ai.request.model") == s["model"]
    roots = [r for r in records if r.parent_span_id is None]
    assert [r.span_id for r in roots] == neutral["jaeger_ui_critical_path"]["roots"]
    # the one error span says so with Jaeger's error tag; the kind tag became the kind
    assert [r.span_id for r in records if r.status == "error"] == ["0000000000000011"]
    assert {r.kind for r in records} == {"server", "client", "internal"}
    assert not any("span.kind" in r.attrs for r in records)


# --- Jaeger: the hand-made /api/traces answer -------------------------------------------------

def test_jaeger_api_answer_maps_every_field():
    records, errors = load(jaeger, API_ANSWER.read_bytes(), API_ANSWER)
    assert errors == []
    got = by_id(records)
    assert len(records) == 5
    # a 64-bit trace id with its leading zeros dropped: padded to 32 hex digits
    assert {r.trace_id for r in records} == {"0" * 18 + "6c3cf93508f205",
                                             "4bf92f3577b34da6a3ce929d0e0e4736"}
    root, chat = got["5b8aa5a2d2c872e8"], got["00000000007d3a1f"]
    tool, consumer = got["c0ffee0000000001"], got["c0ffee0000000002"]

    assert (root.kind, root.status, root.parent_span_id) == ("server", "ok", None)
    assert (root.service, root.host, root.pid) == ("agent", "worker-7", 4242)
    assert root.attrs == {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"}
    assert (root.start_ns, root.end_ns) == (1767225600000000000, 1767225609000000000)

    assert chat.parent_span_id == root.span_id  # CHILD_OF, trace id written with a zero more
    assert chat.kind == "client" and chat.status == "unset"
    assert chat.attrs == {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                          "gen_ai.usage.input_tokens": 1200, "gen_ai.request.temperature": 0.2,
                          "llm.streaming": True, "payload.digest": "AAEC"}
    assert [(e.name, e.time_ns, dict(e.attrs)) for e in chat.events] == [
        ("first_token", 1767225600900000000, {"gen_ai.usage.output_tokens": 1}),
        ("log", 1767225601000000000, {"message": "rate limited, retrying"})]

    assert (tool.status, tool.status_message) == ("error", "timeout after 5s")
    assert tool.attrs == {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                          "error": True}
    assert (tool.service, tool.host, tool.pid) == ("tools", "tool-host", 99)
    assert tool.parent_span_id == root.span_id
    assert [(k.trace_id, k.span_id, dict(k.attrs)) for k in tool.links] == [
        (tool.trace_id, chat.span_id, {"opentracing.ref_type": "follows_from"})]

    # only FOLLOWS_FROM: the first (in this trace) is the parent, the other trace's is a link
    assert consumer.parent_span_id == tool.span_id
    assert [(k.trace_id, k.span_id) for k in consumer.links] == [
        ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")]
    assert (consumer.kind, consumer.status) == ("consumer", "error")  # error=true alone
    assert consumer.attrs["jaeger.warnings"] == ("clock skew adjustment disabled",)
    assert consumer.attrs["messaging.batch.message_count"] == 3

    other = got["00f067aa0ba902b7"]
    assert (other.service, other.kind, other.attrs, other.parent_span_id) == (
        "gateway", "internal", {}, None)


def _variants():
    """The API answer in the other shapes Jaeger files come in."""
    answer = json.loads(API_ANSWER.read_text())
    traces = answer["data"]
    embedded = []
    for trace in copy.deepcopy(traces):
        for s in trace["spans"]:
            s["process"] = trace["processes"][s.pop("processID")]
            embedded.append(s)
    return {
        "list of traces": json.dumps(traces),
        "bare traces, one per line": "\n".join(json.dumps(t) for t in traces) + "\n",
        "spans with embedded process": json.dumps(embedded),
        "spans with embedded process, one per line":
            "\n".join(json.dumps(s) for s in embedded) + "\n",
    }


@pytest.mark.parametrize("shape", list(_variants()))
def test_jaeger_wrappers_give_the_same_records(shape):
    expected, _ = load(jaeger, API_ANSWER.read_bytes())
    data = _variants()[shape].encode()
    assert jaeger.sniff(data[:HEAD_BYTES], "x.json")
    records, errors = load(jaeger, data)
    assert errors == []
    assert sorted(records) == sorted(expected)


def test_jaeger_single_bare_trace():
    answer = json.loads(API_ANSWER.read_text())
    expected, _ = load(jaeger, API_ANSWER.read_bytes())
    records, errors = load(jaeger, json.dumps(answer["data"][0]).encode())
    assert errors == []
    assert sorted(records) == sorted(r for r in expected if r.trace_id == records[0].trace_id)
    assert len(records) == 4


# --- Jaeger: bad input ------------------------------------------------------------------------

def test_jaeger_truncated_file_keeps_the_whole_spans_before_the_cut():
    text = API_ANSWER.read_text()
    cut = text.index('"spanID": "c0ffee0000000002"')  # inside the fourth span
    records, errors = load(jaeger, text[:cut].encode(), "t/trunc.json")
    assert len(errors) == 1
    assert errors[0].path == "t/trunc.json"
    assert errors[0].line == text[:cut].count("\n") + 1
    assert "not valid JSON" in errors[0].reason
    full = by_id(load(jaeger, API_ANSWER.read_bytes())[0])
    # the processes come after the spans and are lost with the cut: ids, times, tags are not
    assert [r.span_id for r in records] == ["5b8aa5a2d2c872e8", "00000000007d3a1f",
                                            "c0ffee0000000001"]
    for r in records:
        assert r._replace(service=None, host=None, pid=None) == full[r.span_id]._replace(
            service=None, host=None, pid=None)


def _mutated(change):
    answer = json.loads(API_ANSWER.read_text())
    change(answer["data"][0]["spans"])
    return json.dumps(answer, indent=1).encode()


def test_jaeger_span_without_span_id_is_reported_and_skipped():
    records, errors = load(jaeger, _mutated(lambda spans: spans[1].pop("spanID")), "a.json")
    assert len(records) == 4 and "00000000007d3a1f" not in by_id(records)
    [error] = errors
    assert error.path == "a.json" and "data[0].spans[1]" in error.reason
    assert "spanID" in error.reason and "chat gpt-4o" in error.reason


def test_jaeger_string_microseconds_are_reported_and_skipped():
    def change(spans):
        spans[2]["startTime"] = "1767225602600000"

    records, errors = load(jaeger, _mutated(change), "a.json")
    assert len(records) == 4 and "c0ffee0000000001" not in by_id(records)
    [error] = errors
    assert error.span_id == "c0ffee0000000001" and "data[0].spans[2]" in error.reason
    assert "startTime" in error.reason and "str" in error.reason


def test_jaeger_bad_values_do_not_stop_the_span():
    def change(spans):
        spans[1]["logs"][0]["timestamp"] = "soon"
        spans[0]["duration"] = 10**20  # nanoseconds written as microseconds

    records, errors = load(jaeger, _mutated(change), "a.json")
    got = by_id(records)
    assert "5b8aa5a2d2c872e8" not in got and len(records) == 4
    assert [e.name for e in got["00000000007d3a1f"].events] == ["log"]
    reasons = sorted(e.reason for e in errors)
    assert len(reasons) == 2
    assert "duration" in reasons[0] and "too large" in reasons[0]
    assert "logs[0]" in reasons[1]


@pytest.mark.parametrize("data", [b"", b"   \n", b"null", b'"text"', b"[1, 2]", b"{}"])
def test_jaeger_odd_documents_never_raise(data):
    records, errors = load(jaeger, data)
    assert records == []
    assert (errors == []) == (data.strip() == b"")  # nothing to say about an empty file


def test_jaeger_query_service_errors_are_reported():
    answer = {"data": None, "total": 0, "limit": 0, "offset": 0,
              "errors": [{"code": 404, "msg": "trace not found"}]}
    records, errors = load(jaeger, json.dumps(answer).encode(), "q.json")
    assert records == []
    [error] = errors
    assert error.path == "q.json" and "trace not found" in error.reason


def test_jaeger_legacy_parent_field_and_self_reference():
    raw = {"traceID": "ab", "spanID": "02", "parentSpanID": "01", "operationName": "x",
           "startTime": 5, "duration": 1,
           "references": [{"refType": "CHILD_OF", "traceID": "ab", "spanID": "02"}]}
    [record], errors = load(jaeger, json.dumps(raw).encode())
    assert errors == [] and record.parent_span_id == "0" * 15 + "1" and record.links == ()


# --- sniffing -------------------------------------------------------------------------------

def _our_span_line() -> bytes:
    record = _common.span("0" * 31 + "1", "0" * 15 + "2", None, "work", 10**18, 10**18 + 5,
                          {"agentscope.stage": "tool"}, service="svc")
    return spanfile.encode(record).encode()


OTHERS = {
    "our span file": _our_span_line(),
    "OTLP JSON": (CORPUS / "otlp_examples" / "opentelemetry-proto" / "trace.json").read_bytes(),
    "Langfuse": (CORPUS / "agent_traces" / "langfuse_framework_traces" /
                 "agno-2025-06-11.trace.json").read_bytes(),
    "any-agent": (CORPUS / "agent_traces" / "any_agent" / "head" / "AGNO_trace.json")
    .read_bytes(),
}


@pytest.mark.parametrize("name", list(OTHERS))
def test_sniff_is_false_for_other_formats(name):
    head = OTHERS[name][:HEAD_BYTES]
    assert not jaeger.sniff(head, "x.json")
    assert not tracelab.sniff(head, "x.jsonl")


def test_sniff_tells_jaeger_and_tracelab_apart():
    for path in (GENAI, API_ANSWER):
        head = path.read_bytes()[:HEAD_BYTES]
        assert jaeger.sniff(head, path.name) and not tracelab.sniff(head, path.name)
    for path in (ROUNDS, SAMPLE):
        head = path.read_bytes()[:HEAD_BYTES]
        assert tracelab.sniff(head, path.name) and not jaeger.sniff(head, path.name)
    # a first TraceLab line longer than the head still sniffs by its keys
    assert tracelab.sniff(ROUNDS.read_bytes()[:1000], "x")
    assert not jaeger.sniff(b"\xff\xfe garbage", "x") and not tracelab.sniff(b"\xff\xfe", "x")


# --- TraceLab: the corpus ---------------------------------------------------------------------

def _rows(path=ROUNDS):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _ns(text):
    return _common.iso_ns(text)


def _tracelab(data=None, path=ROUNDS):
    records, errors = load(tracelab, ROUNDS.read_bytes() if data is None else data, path)
    return records, errors


def _sessions(records):
    """{provider: (root, [(round, chat or None, [tools])] in round order)}."""
    kids: dict = {}
    for r in records:
        kids.setdefault(r.parent_span_id, []).append(r)
    out = {}
    for root in kids[None]:
        rounds = []
        for rnd in sorted(kids[root.span_id], key=lambda r: r.attrs["tracelab.round_index"]):
            under = kids.get(rnd.span_id, [])
            chats = [r for r in under if r.attrs["gen_ai.operation.name"] == "chat"]
            assert len(chats) <= 1
            tools = sorted((r for r in under if r.attrs["gen_ai.operation.name"] ==
                            "execute_tool"), key=lambda r: r.attrs["tracelab.tool_index"])
            rounds.append((rnd, chats[0] if chats else None, tools))
        out[root.service] = (root, rounds)
    return out


def test_tracelab_corpus_loads_with_pinned_counts():
    records, errors = _tracelab()
    assert errors == []
    assert len(records) == 59 and len({r.trace_id for r in records}) == 2
    sessions = _sessions(records)
    tools_per_round = {p: [len(tools) for _, _, tools in rounds]
                       for p, (_, rounds) in sessions.items()}
    assert tools_per_round == {"claude": [2, 1, 1, 1, 0, 1, 1, 1, 1, 0],
                               "codex": [3, 1, 1, 2, 0, 2, 0, 1, 0]}
    for provider, (root, rounds) in sessions.items():
        assert root.name == "session" and root.parent_span_id is None
        assert root.trace_id == _common.hex_id(root.attrs["tracelab.session_id"], 16)
        assert root.attrs["gen_ai.operation.name"] == "invoke_agent"
        assert root.attrs["gen_ai.agent.name"] == provider
        assert ("tracelab.project" in root.attrs) == (provider == "claude")  # codex: no project
        assert root.attrs["tracelab.rounds"] == len(rounds)
        assert [rnd.name for rnd, _, _ in rounds] == [f"round {i}" for i in range(len(rounds))]
        assert all(chat is not None for _, chat, _ in rounds)
        assert {r.service for r in records if r.trace_id == root.trace_id} == {provider}


def test_tracelab_spans_sit_where_the_rounds_happened():
    records, _ = _tracelab()
    for root, rounds in _sessions(records).values():
        previous_end = root.start_ns
        for rnd, chat, tools in rounds:
            assert rnd.parent_span_id == root.span_id
            assert root.start_ns <= rnd.start_ns <= rnd.end_ns <= root.end_ns
            assert rnd.start_ns >= previous_end  # rounds follow each other, never overlap
            previous_end = rnd.end_ns
            assert chat.parent_span_id == rnd.span_id and chat.kind == "client"
            assert chat.start_ns == rnd.start_ns  # the round starts when its input is complete
            for tool in tools:
                assert tool.parent_span_id == rnd.span_id
                assert rnd.start_ns <= tool.start_ns <= tool.end_ns <= rnd.end_ns
                # the model asked for the tool: after the request began, by its last output
                assert chat.start_ns <= tool.start_ns <= chat.end_ns
            assert rnd.end_ns == max([chat.end_ns] + [t.end_ns for t in tools]
                                     + [e.time_ns for e in rnd.events])


def test_tracelab_spans_follow_the_upstream_definitions():
    """tool span = emitted_at -> result_at = tool_wall_latency_ms; chat span = TraceLab's
    observable generation time (latest input at or before the first output -> last output);
    token attributes as the row gives them."""
    records, _ = _tracelab()
    sessions = _sessions(records)
    rows = _rows()
    seen = 0
    for row in rows:
        _, rounds = sessions[row["provider"]]
        rnd, chat, tools = rounds[row["round_index"]]
        events = [(e["event_type"], _ns(e["timestamp"])) for e in row["timing_events"]]
        outputs = [t for k, t in events if k in ("reasoning", "text", "tool_call")]
        inputs = [t for k, t in events if k in ("user_message", "tool_result")
                  and t <= min(outputs)]
        assert (chat.start_ns, chat.end_ns) == (max(inputs), max(outputs))
        assert chat.name == f"chat {row['model']}"
        assert chat.attrs["gen_ai.request.model"] == row["model"]
        assert chat.attrs["gen_ai.usage.input_tokens"] == row["input_tokens_total"]
        assert chat.attrs["gen_ai.usage.output_tokens"] == row["output_tokens"]
        assert chat.attrs["gen_ai.usage.cache_read.input_tokens"] == row["prefix_tokens"]
        if row["provider"] == "claude":
            assert row["prefix_tokens"] == row["claude_cache_read_input_tokens"]
            assert chat.attrs["gen_ai.usage.cache_creation.input_tokens"] == row[
                "claude_cache_creation_input_tokens"]
        assert len(tools) == len(row["tools"])
        for tool, raw in zip(tools, row["tools"]):
            assert (tool.start_ns, tool.end_ns) == (_ns(raw["emitted_at"]), _ns(raw["result_at"]))
            assert tool.end_ns - tool.start_ns == raw["tool_wall_latency_ms"] * 1_000_000
            call = [t for k, t in events if k == "tool_call"][raw["tool_index"]]
            assert tool.start_ns == call  # emitted when the model wrote the call
            assert tool.name == f"execute_tool {raw['tool_name']}"
            assert tool.attrs["gen_ai.tool.call.id"] == raw["tool_call_id"]
            assert tool.status == ("error" if raw["is_error"] is True else "unset")
            seen += 1
        assert [e.name for e in rnd.events] == [e["event_type"] for e in row["timing_events"]]
        assert rnd.attrs["tracelab.round_id"] == row["round_id"]
    assert seen == 19  # every tool call of the file checked
    assert [r.name for r in records if r.status == "error"] == ["execute_tool exec_command"]


def test_tracelab_next_round_input_is_the_previous_rounds_last_tool_result():
    records, _ = _tracelab()
    for _, rounds in _sessions(records).values():
        for (_, _, tools), (nxt, chat, _) in itertools.pairwise(rounds):
            if tools:
                assert chat.start_ns == max(t.end_ns for t in tools) == nxt.start_ns


# --- TraceLab: the hand-made sample -----------------------------------------------------------

def test_tracelab_sample_latency_only_tool_and_two_providers():
    records, errors = _tracelab(SAMPLE.read_bytes(), SAMPLE)
    assert errors == []
    sessions = _sessions(records)
    assert set(sessions) == {"codex", "claude"} and len(records) == (3 + 2 + 2) + 3
    root, [(r0, chat0, [a, b]), (r1, chat1, [])] = sessions["codex"]
    t0 = _ns("2026-03-21T10:00:00.000Z")
    s = 1_000_000_000
    assert (chat0.start_ns, chat0.end_ns) == (t0, t0 + 31 * s // 10)
    assert (a.start_ns, a.end_ns, a.status) == (t0 + 3 * s, t0 + 4 * s, "unset")
    # no result_at: emitted_at + tool_wall_latency_ms, and is_error -> error
    assert (b.start_ns, b.end_ns, b.status) == (t0 + 31 * s // 10, t0 + 56 * s // 10, "error")
    assert a.attrs["tracelab.tool_internal_latency_ms"] == 900
    assert "tracelab.tool_internal_latency_ms" not in b.attrs  # null in the row
    assert (r0.start_ns, r0.end_ns) == (t0, t0 + 56 * s // 10)
    assert (chat1.start_ns, chat1.end_ns) == (t0 + 56 * s // 10, t0 + 7 * s)
    assert r1.end_ns == t0 + 7010 * s // 1000  # the usage report closes the round
    assert (root.start_ns, root.end_ns) == (r0.start_ns, r1.end_ns)
    assert chat0.attrs["gen_ai.usage.cache_read.input_tokens"] == 6912
    assert "gen_ai.usage.cache_creation.input_tokens" not in chat0.attrs
    assert r0.attrs["tracelab.turn_id"] == "turn-1" and r0.attrs["tracelab.store"] == ".codex"
    croot, [(_, cchat, [])] = sessions["claude"]
    assert cchat.attrs["gen_ai.usage.cache_creation.input_tokens"] == 2000
    assert croot.attrs["gen_ai.conversation.id"] == "claude:demo-session"


# --- TraceLab: bad input ----------------------------------------------------------------------

def test_tracelab_bad_lines_are_named_and_the_rest_loads():
    lines = ROUNDS.read_text().splitlines()
    row3 = json.loads(lines[2])
    row3["timing_events"][1]["timestamp"] = "yesterday"  # the reasoning event
    row3["tools"][0]["emitted_at"] = 17  # not a time: the tool_call event gives it
    lines[2] = json.dumps(row3)
    lines[4] = lines[4][:100]  # a line cut short
    row7 = json.loads(lines[6])
    for event in row7["timing_events"]:
        event.pop("timestamp")
    lines[6] = json.dumps(row7)
    data = ("\n".join(lines) + "\n" + lines[0][:50]).encode()  # torn last line
    records, errors = _tracelab(data, "x/rounds.jsonl")
    assert all(e.path == "x/rounds.jsonl" for e in errors)
    by_line: dict = {}
    for e in errors:
        by_line.setdefault(e.line, []).append(e.reason)
    assert sorted(by_line) == [3, 5, 7, 20]
    assert "timing_events[1] ('reasoning')" in by_line[3][0] and "'yesterday'" in by_line[3][0]
    assert "emitted_at 17" in by_line[3][1]
    assert "not valid JSON" in by_line[5][0]
    assert len(by_line[7]) == 4  # each of its events
    assert by_line[20][0].startswith("torn last line")
    assert [e.torn for e in errors if e.line == 20] == [True]

    sessions = _sessions(records)
    _, claude = sessions["claude"]
    assert [rnd.attrs["tracelab.round_index"] for rnd, _, _ in claude] == [
        0, 1, 2, 3, 5, 6, 7, 8, 9]  # round 4 (line 5) is lost, the rest loads
    good, _ = _tracelab()
    _, whole = _sessions(good)["claude"]
    _, chat2, tools2 = claude[2]  # line 3: one event and one time unreadable
    assert (chat2.start_ns, chat2.end_ns) == (whole[2][1].start_ns, whole[2][1].end_ns)
    assert [(t.start_ns, t.end_ns) for t in tools2] == [(t.start_ns, t.end_ns)
                                                       for t in whole[2][2]]
    # line 7 (round 6) lost every event time: its tool keeps the round alive, no chat span
    rnd6, chat6, tools6 = claude[5]
    assert chat6 is None and len(tools6) == 1
    assert (rnd6.start_ns, rnd6.end_ns) == (tools6[0].start_ns, tools6[0].end_ns)


def test_tracelab_duplicate_and_unusable_rounds():
    rows = _rows(SAMPLE)
    dup = dict(rows[1])
    empty = dict(rows[2], round_index=1, timing_events=[{"event_type": "text"}], tools=[])
    no_session = dict(rows[2], session_id=None)
    data = "\n".join(json.dumps(r) for r in rows + [dup, empty, no_session, [1]]).encode()
    records, errors = _tracelab(data, "s.jsonl")
    reasons = {e.line: e.reason for e in errors}
    assert "repeats line 2" in reasons[4]
    assert "no usable time" in reasons[5]
    assert "session_id missing" in reasons[6]
    assert "expected a round object" in reasons[7]
    assert len(records) == 10  # the sample's spans, nothing more


# --- tool and model shares (for comparison with the TraceLab paper) ---------------------------

def _paper_way(rows):
    """TraceLab's user_turn_decomposition, written again from its README, over raw rows:
    {provider: (response s, generation s, effective tool s)}."""
    out: dict = {}
    open_turn: dict = {}

    def close(session):
        turn = open_turn.pop(session, None)
        if turn:
            t = out.setdefault(turn["provider"], [0.0, 0.0, 0.0])
            t[0] += (turn["end"] - turn["start"]) / 1e9
            t[1] += turn["gen"]
            t[2] += turn["tool"]

    for row in rows:
        events = [(e["event_type"], _ns(e["timestamp"])) for e in row["timing_events"]]
        outputs = [t for k, t in events if k in ("reasoning", "text", "tool_call")]
        users = [t for k, t in events if k == "user_message" and outputs and t <= min(outputs)]
        if users:
            close(row["session_id"])
            open_turn[row["session_id"]] = {"provider": row["provider"], "start": max(users),
                                            "end": None, "gen": 0.0, "tool": 0.0}
        turn = open_turn.get(row["session_id"])
        if turn is None:
            continue
        inputs = [t for k, t in events if k in ("user_message", "tool_result")
                  and t <= min(outputs)]
        turn["gen"] += max(0, max(outputs) - max(inputs)) / 1e9
        turn["end"] = max(outputs) if turn["end"] is None else max(turn["end"], max(outputs))
        for tool in row["tools"]:
            ms = tool["tool_internal_latency_ms"]
            ms = tool["tool_wall_latency_ms"] if ms is None else ms
            turn["tool"] += ms / 1000 if ms and ms > 0 else 0.0
    for session in list(open_turn):
        close(session)
    return out


def test_tool_share_agrees_with_the_paper_method_and_pins_the_figures():
    records, _ = _tracelab()
    shares = tool_share(records)
    assert set(shares) == {"claude", "codex", "all"}
    for provider, (response, gen, tool) in _paper_way(_rows()).items():
        s = shares[provider]
        assert s["response_s"] == pytest.approx(response, abs=1e-9)
        assert s["model_sum_s"] == pytest.approx(gen, abs=1e-9)
        assert s["tool_effective_s"] == pytest.approx(tool, abs=1e-9)
    got = {p: (s["requests"], round(s["response_s"], 3), round(100 * s["model_share"], 1),
               round(100 * s["tool_share"], 1), round(100 * s["tool_effective_share"], 1),
               round(100 * s["model_wall_share"], 1), round(100 * s["tool_wall_share"], 1))
           for p, s in shares.items()}
    assert got == {"claude": (2, 181.771, 60.1, 40.4, 40.4, 54.2, 36.4),
                   "codex": (3, 36.331, 82.2, 18.1, 16.6, 48.9, 10.8),
                   "all": (5, 218.102, 63.8, 36.7, 36.4, 52.9, 30.4)}


def test_jaeger_truncated_list_of_spans():
    text = _variants()["spans with embedded process"]
    expected = json.loads(text)
    cut = text.index('"c0ffee0000000002"')
    records, errors = load(jaeger, text[:cut].encode(), "l.json")
    assert [e.line for e in errors] == [1] and "not valid JSON" in errors[0].reason
    full = by_id(load(jaeger, text.encode())[0])
    assert [r.span_id for r in records] == [sid(s["spanID"]) for s in expected[:3]]
    assert all(r == full[r.span_id] for r in records)  # embedded processes: nothing lost


def test_tracelab_lost_input_times_fall_back_to_the_previous_tool_results():
    rows = _rows(SAMPLE)
    for event in rows[1]["timing_events"][:2]:  # both tool_result inputs of round 1
        event["timestamp"] = "2026-03-21 ten past ten"
    data = "\n".join(json.dumps(r) for r in rows).encode()
    records, errors = _tracelab(data, "s.jsonl")
    assert [e.line for e in errors] == [2, 2]
    _, [_, (_, chat1, _)] = _sessions(records)["codex"]
    t0 = _ns("2026-03-21T10:00:00.000Z")
    assert (chat1.start_ns, chat1.end_ns) == (t0 + 5_600_000_000, t0 + 7_000_000_000)
