"""Span and sample line formats: round trips, validation messages, semantic-convention names."""

from __future__ import annotations

import json

import pytest

from agentscope import semconv
from agentscope.errors import TraceFormatError
from agentscope.formats import samplefile, spanfile
from agentscope.records import SampleRecord, SpanEvent, SpanLink, SpanRecord

RECORD = SpanRecord(
    "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", "00f067aa0ba902b7",
    'name with "quotes" and \u00e9 and \n newline', "inference", "client", 1_700_000_000_000_000_000,
    1_700_000_001_000_000_000, "error", "Boom: x", "svc", "host-1", 42, 4242, 123, 456, 1, 2, 3,
    4, 5, 6, {"gen_ai.request.model": "m", "list": ["a", "b"]},
    (SpanEvent("exception", 1_700_000_000_500_000_000, {"exception.type": "Boom"}),),
    (SpanLink("1" * 32, "2" * 16, {}),),
)


def test_span_line_round_trip_and_is_one_ascii_line():
    line = spanfile.encode(RECORD)
    assert line.endswith("\n") and line.count("\n") == 1 and line.isascii()
    back = spanfile.decode(line)
    assert back._replace(attrs=dict(back.attrs)) == RECORD._replace(
        attrs={"gen_ai.request.model": "m", "list": ["a", "b"]},
        events=(SpanEvent("exception", 1_700_000_000_500_000_000, {"exception.type": "Boom"}),))
    assert list(json.loads(line)) == list(SpanRecord._fields)  # every key, in column order


@pytest.mark.parametrize("change,message", [
    ({"trace_id": "0" * 32}, "trace_id must be 32 lowercase hex digits"),
    ({"span_id": "XYZ"}, "span_id must be 16 lowercase hex digits"),
    ({"parent_span_id": 5}, "parent_span_id must be null or 16"),
    ({"start_ns": "1"}, "start_ns must be a non-negative integer"),
    ({"end_ns": 1}, "end_ns 1 is before start_ns"),
    ({"kind": "sideways"}, "kind must be one of"),
    ({"status": "meh"}, "status must be one of"),
    ({"thread_cpu_ns": 1.5}, "thread_cpu_ns must be an integer or null"),
    ({"attrs": []}, "attrs must be a JSON object"),
])
def test_validation_names_file_line_span_and_reason(change, message):
    obj = json.loads(spanfile.encode(RECORD))
    obj.update(change)
    with pytest.raises(TraceFormatError) as info:
        spanfile.decode(json.dumps(obj), "f.jsonl", 7)
    assert message in info.value.reason
    assert str(info.value).startswith("f.jsonl:7")
    assert info.value.line == 7


def test_sample_line_round_trip():
    rec = SampleRecord(5, "h", 1, "agentscope.capture", None, "agentscope.capture.spans_dropped", 3.0)
    assert samplefile.decode(samplefile.encode(rec)) == rec
    with pytest.raises(TraceFormatError, match="metric must be"):
        samplefile.decode('{"ts_ns": 1, "source": "s", "metric": "", "value": 1}')


def test_capture_file_names_are_pinned_and_recognised_by_the_store():
    from agentscope.store.tracedir import capture_kind

    ms = 1_700_000_000_123
    assert spanfile.file_name("h", 42, ms) == "spans-h-42-1700000000123.jsonl"
    assert spanfile.file_name("h", 42, ms, part=2) == "spans-h-42-1700000000123-2.jsonl"
    assert samplefile.file_name("h", 42, ms) == "samples-h-42-1700000000123.jsonl"
    assert samplefile.file_name("h", 42, ms, "collector") == \
        "samples-h-42-1700000000123-collector.jsonl"
    # a hostile host name cannot leave the directory: each run of other characters is one "_"
    hostile = spanfile.file_name("a b/../c", 7, 1)
    assert hostile == "spans-a_b_.._c-7-1.jsonl" and "/" not in hostile
    assert samplefile.file_name("a b/../c", 7, 1, "gil") == "samples-a_b_.._c-7-1-gil.jsonl"
    assert spanfile.file_name("", 1, 1) == "spans-host-1-1.jsonl"  # nothing left: "host"
    assert spanfile.file_name("x" * 100, 1, 1) == f"spans-{'x' * 64}-1-1.jsonl"
    for name in (spanfile.file_name("h", 1, ms), spanfile.file_name("h", 1, ms, 3), hostile):
        assert capture_kind(name) == "spans"
    for name in (samplefile.file_name("h", 1, ms), samplefile.file_name("h", 1, ms, "gil")):
        assert capture_kind(name) == "samples"


def test_keyword_names():
    assert semconv.attribute_name("model") == "gen_ai.request.model"
    assert semconv.attribute_name("input_tokens") == "gen_ai.usage.input_tokens"
    assert semconv.attribute_name("tool") == "gen_ai.tool.name"
    assert semconv.attribute_name("time_in_queue") == "gen_ai.latency.time_in_queue"
    assert semconv.attribute_name("server_address") == "server.address"
    assert semconv.attribute_name("retries") == "agentscope.retries"
    assert semconv.attribute_name("db.system") == "db.system"
