"""Fuzzed trace inputs: no bad file ever stops an analysis (issue 18, docs/bad-input.md).

Hypothesis builds a trace directory of two files: a known-good span file (its trace must be
analysed whatever happens beside it) and one file of a format agentscope reads, taken from a
valid example (sample_traces/, tests/data/, tests/corpus/ or built here) and then broken: a
wrongly typed value at any node of its JSON, a huge number, NaN, a lone surrogate, deep
nesting, invalid UTF-8, a cut, a flipped byte, a compressed file cut short. The properties:

* neither ``agentscope.analyze`` (load and analysis) nor ``check`` raises;
* the good file's trace is a task; in line-delimited files the traces of the lines that were
  not touched are tasks too;
* every problem names the broken file (and, in our own line formats, its line).

The generators here are also what ``benchmarks/fuzz.py`` runs, with thousands of examples.
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import hashlib
import json
import os
import shutil
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "importers"
CORPUS = REPO / "tests" / "corpus"
T0 = 1_800_000_000_000_000_000  # 2027-01-15, in ns
GOOD_TRACE = "c0ffee00c0ffee00c0ffee00c0ffee00"
GOOD_FILE = "spans-goodhost-1-1800000000000.jsonl"


# ---- valid examples ------------------------------------------------------------------------
def _hex(seed: str, n: int) -> str:
    return hashlib.blake2b(seed.encode(), digest_size=n).hexdigest()


def _span(trace: str, span: str, parent: Optional[str], name: str, stage: Optional[str],
          start: int, end: int, **more: Any) -> dict:
    """One line of our span format (every key, in order)."""
    line = {"trace_id": trace, "span_id": span, "parent_span_id": parent, "name": name,
            "stage": stage, "kind": "internal", "start_ns": start, "end_ns": end,
            "status": "unset", "status_message": None, "service": "fuzz", "host": "h",
            "pid": 7, "tid": 7, "thread_cpu_ns": (end - start) // 2, "child_cpu_ns": None,
            "children": None, "vcsw": 1, "ivcsw": 0, "minflt": 3, "majflt": 0,
            "child_majflt": None, "attrs": {"gen_ai.request.model": "m"}, "events": [],
            "links": []}
    line.update(more)
    return line


def synthetic_traces(n: int = 3) -> list:
    """``n`` small tasks (a root and a child each), as span-line dicts, trace by trace."""
    traces = []
    for i in range(n):
        trace = _hex(f"trace{i}", 16)
        root, child = _hex(f"root{i}", 8), _hex(f"child{i}", 8)
        start = T0 + i * 10**9
        traces.append([
            _span(trace, root, None, f"task-{i}", "task", start, start + 500_000_000,
                  attrs={"agentscope.lane": "online"}),
            _span(trace, child, root, f"tool-{i}", "tool", start + 10**6, start + 400_000_000,
                  status="error", status_message="TimeoutError: x",
                  events=[{"name": "exception", "time_ns": start + 2 * 10**6,
                           "attrs": {"exception.type": "TimeoutError"}}]),
        ])
    return traces


def good_file() -> bytes:
    """The known-good neighbour: one task whose trace must always be analysed."""
    root, child = _hex("good-root", 8), _hex("good-child", 8)
    lines = [_span(GOOD_TRACE, root, None, "good-task", "task", T0, T0 + 10**9),
             _span(GOOD_TRACE, child, root, "good-tool", "tool", T0 + 10**6, T0 + 9 * 10**8)]
    return "".join(json.dumps(x) + "\n" for x in lines).encode()


def _otlp_value(v: Any) -> dict:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    return {"stringValue": str(v)}


def otlp_request(lines: list) -> dict:
    """An OTLP/JSON ExportTraceServiceRequest of span-line dicts (as the spec writes it)."""
    spans = []
    for s in lines:
        attrs = [{"key": k, "value": _otlp_value(v)} for k, v in s["attrs"].items()]
        if s.get("stage"):
            attrs.append({"key": "agentscope.stage", "value": {"stringValue": s["stage"]}})
        if s.get("thread_cpu_ns") is not None:
            attrs.append({"key": "agentscope.cpu.thread_ns",
                          "value": {"intValue": str(s["thread_cpu_ns"])}})
        span = {"traceId": s["trace_id"], "spanId": s["span_id"], "name": s["name"], "kind": 1,
                "startTimeUnixNano": str(s["start_ns"]), "endTimeUnixNano": str(s["end_ns"]),
                "attributes": attrs,
                "status": {"code": 2 if s["status"] == "error" else 0},
                "events": [{"timeUnixNano": str(e["time_ns"]), "name": e["name"],
                            "attributes": [{"key": k, "value": _otlp_value(v)}
                                           for k, v in e["attrs"].items()]}
                           for e in s["events"]]}
        if s["parent_span_id"]:
            span["parentSpanId"] = s["parent_span_id"]
        spans.append(span)
    return {"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "fuzz"}},
                                    {"key": "process.pid", "value": {"intValue": "7"}}]},
        "scopeSpans": [{"scope": {"name": "fuzz"}, "spans": spans}]}]}


def otlp_protobuf(request: dict) -> bytes:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest)

    def ids_as_base64(value: Any) -> Any:  # protobuf's JSON mapping spells bytes in base64
        if isinstance(value, dict):
            return {k: (base64.b64encode(bytes.fromhex(v)).decode()
                        if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str)
                        and len(v) in (16, 32) and _is_hex(v) else ids_as_base64(v))
                    for k, v in value.items()}
        if isinstance(value, list):
            return [ids_as_base64(v) for v in value]
        return value

    return json_format.ParseDict(ids_as_base64(request),
                                 ExportTraceServiceRequest()).SerializeToString()


def _is_hex(text: str) -> bool:
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class Seed:
    """A valid file of one format: its name, its parsed JSON (a list of values when it is
    line-delimited, one per line; None for binary), its bytes, and the trace ids each line
    holds (line-delimited files: a line's traces must survive when another line is broken)."""

    fmt: str
    name: str
    data: bytes
    lines: Optional[tuple] = None  # parsed value of each line (line-delimited JSON)
    doc: Any = None  # the parsed document (one JSON document)
    traces: tuple = ()  # per line: the trace ids it holds, in the store's spelling
    binary: bool = False


def _lines_seed(fmt: str, name: str, values: list, traces: tuple = ()) -> Seed:
    data = "".join(json.dumps(v) + "\n" for v in values).encode()
    return Seed(fmt, name, data, lines=tuple(values), traces=traces)


def _doc_seed(fmt: str, name: str, path: Path) -> Seed:
    data = path.read_bytes()
    return Seed(fmt, name, data, doc=json.loads(data))


_SEEDS: Optional[dict] = None


def seeds() -> dict:
    """format -> [Seed]: the valid examples every mutation starts from."""
    global _SEEDS
    if _SEEDS is not None:
        return _SEEDS
    traces = synthetic_traces()
    ours = [line for trace in traces for line in trace]
    per_line = tuple((line["trace_id"],) for line in ours)
    out: dict = {"spans": [_lines_seed("spans", "spans-fuzz-2-1800000000000.jsonl", ours,
                                       per_line)]}
    example = sorted((REPO / "sample_traces" / "example").glob("spans-*.jsonl"))
    if example:
        real = [json.loads(x) for x in example[0].read_text().splitlines()[:30]]
        out["spans"].append(_lines_seed("spans", "spans-real-3-1800000000000.jsonl", real))
    samples = sorted((REPO / "sample_traces" / "example").glob("samples-*.jsonl"))
    sample_lines = ([json.loads(x) for x in samples[0].read_text().splitlines()[:40]]
                    if samples else [])
    sample_lines.append({"ts_ns": T0, "host": "h", "pid": 7, "source": "host.cpu",
                         "device": None, "metric": "system.cpu.utilization", "value": 0.5})
    out["samples"] = [_lines_seed("samples", "samples-fuzz-4-1800000000000-collector.jsonl",
                                  sample_lines)]
    requests = [otlp_request(trace) for trace in traces]
    out["otlp-lines"] = [_lines_seed("otlp-lines", "otlp.jsonl", requests,
                                     tuple((t[0]["trace_id"],) for t in traces))]
    spec_lines = CORPUS / "otlp_examples" / "otel_spec_file_exporter" / "traces.jsonl"
    collector = [json.loads(x) for x in spec_lines.read_text().splitlines() if x.strip()]
    for n, request in enumerate(collector):  # the spec's example leaves its ids empty
        for rs in request["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for k, span in enumerate(ss["spans"]):
                    span["traceId"] = _hex(f"spec{n}", 16)
                    span["spanId"] = _hex(f"spec{n}.{k}", 8)
                    span.pop("parentSpanId", None)
    out["otlp-lines"].append(_lines_seed("otlp-lines", "collector.jsonl", collector))
    whole = otlp_request(ours)
    out["otlp"] = [Seed("otlp", "request.json", json.dumps(whole, indent=1).encode(),
                        doc=whole),
                   _doc_seed("otlp", "trace.json",
                             CORPUS / "otlp_examples" / "opentelemetry-proto" / "trace.json"),
                   _doc_seed("otlp", "agent.otlp.json", CORPUS / "agent_traces" / "derived_otlp"
                             / "any_agent_head_OPENAI.otlp.json")]
    out["otlp-protobuf"] = [Seed("otlp-protobuf", "request.pb", otlp_protobuf(whole),
                                 doc=whole, binary=True)]
    out["jaeger"] = [_doc_seed("jaeger", "jaeger.json", DATA / "jaeger_api_answer.json"),
                     _doc_seed("jaeger", "genai.json", CORPUS / "agent_traces"
                               / "jaeger_ui_genai" / "genaiTestTrace.json")]
    jaeger_spans = [s for t in out["jaeger"][0].doc["data"] for s in t["spans"]]
    for s in jaeger_spans:
        s.setdefault("process", {"serviceName": "svc", "tags": []})
    out["jaeger"].append(_lines_seed("jaeger", "jaeger-spans.jsonl", jaeger_spans))
    out["langfuse"] = [_doc_seed("langfuse", "lf.trace.json", DATA / "langfuse_sdk_v2.trace.json")]
    out["anyagent"] = [_doc_seed("anyagent", "aa.json", DATA / "anyagent_tool_error_trace.json")]
    phoenix = [json.loads(x) for x in (DATA / "phoenix_spans.jsonl").read_text().splitlines()
               if x.strip()]
    out["phoenix"] = [_lines_seed("phoenix", "phoenix.jsonl", phoenix),
                      Seed("phoenix", "phoenix.json", json.dumps(phoenix).encode(), doc=phoenix)]
    tracelab = [json.loads(x) for x in (DATA / "tracelab_sample.jsonl").read_text().splitlines()
                if x.strip()]
    out["tracelab"] = [_lines_seed("tracelab", "rounds.jsonl", tracelab)]
    _SEEDS = out
    return out


FORMATS = ("spans", "samples", "otlp-lines", "otlp", "otlp-protobuf", "jaeger", "langfuse",
           "anyagent", "phoenix", "tracelab")


# ---- hostile values ------------------------------------------------------------------------
class Deep:
    """A placeholder for nesting ``depth`` levels deep (built as text: json.dumps would
    recurse)."""

    def __init__(self, depth: int, kind: str) -> None:
        self.depth, self.kind = depth, kind
        self.token = f"__deep_{id(self)}__"

    def text(self) -> str:
        if self.kind == "list":
            return "[" * self.depth + "]" * self.depth
        return '{"a":' * self.depth + "1" + "}" * self.depth


HOSTILE = (
    None, True, False, 0, -1, 1, 2**31, 2**31 - 1, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64,
    -(2**63) - 1, 10**30, 10**400, 1.5, -0.0, 1e308, float("nan"), float("inf"),
    float("-inf"), "", "x", "0", "123", "-5", "1e3", "9" * 30, "\udcff", "a\udcffb", "\ud800",
    "\x00", "a\x00b", "\u202e\u0007[bold]x", "é" * 300, "deadbeef", "0" * 32, "f" * 16, [],
    {}, [1, "a", None], [None], [[]], {"": None}, {"a": {"b": [1, {"c": None}]}},
    {"stringValue": 5}, {"intValue": "x"}, {"intValue": "99999999999999999999999"},
    {"doubleValue": "NaN"}, {"arrayValue": {"values": "x"}}, {"kvlistValue": None},
    "2025-13-45T99:99:99Z", "9999-12-31T23:59:59.999999999Z", "0001-01-01T00:00:00Z",
    "1970-01-01T00:00:00Z",
)


def _deep_values():
    return st.sampled_from([("list", 40), ("dict", 40), ("list", 900), ("dict", 3000),
                            ("list", 100_000)]).map(lambda kd: Deep(kd[1], kd[0]))


BIG = (2**63, 2**64, 10**30, -(2**63) - 1, 2**62 + 1, 2**60 + 1, -1, 10**400)
hostile = st.one_of(st.sampled_from(HOSTILE), st.sampled_from(HOSTILE), st.sampled_from(BIG),
                    _deep_values(),
                    st.integers(min_value=-(2**70), max_value=2**70),
                    st.text(max_size=20),
                    st.floats(allow_nan=True, allow_infinity=True))


# hostile values that are plain JSON (no nesting markers): for semantic mutations
hostile_plain = st.one_of(st.sampled_from([v for v in HOSTILE if not isinstance(v, (dict, list))
                                           ]), st.floats(allow_nan=True),
                          st.integers(-(2**70), 2**70))


def _paths(value: Any, prefix: tuple = ()) -> list:
    """Every node of a parsed JSON value, as a path of keys and indexes."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_paths(v, prefix + (k,)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_paths(v, prefix + (i,)))
    return out


def _replace(value: Any, path: tuple, new: Any, op: str) -> Any:
    """A copy of ``value`` with the node at ``path`` replaced by ``new`` (``op`` 'set'),
    deleted ('del'), wrapped in a list ('wrap') or turned into its JSON text ('str')."""
    if not path:
        if op == "wrap":
            return [value]
        if op == "str":
            return dumps(value).decode("utf-8", "surrogatepass")
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        copy = dict(value)
        if op == "del" and not rest:
            copy.pop(head, None)
        else:
            copy[head] = _replace(value[head], rest, new, op)
        return copy
    copy = list(value)
    if op == "del" and not rest:
        del copy[head]
    else:
        copy[head] = _replace(value[head], rest, new, op)
    return copy


def dumps(value: Any, ascii_only: bool = True) -> bytes:
    """JSON bytes of a mutated value, hostile values as they are: NaN and Infinity literals,
    ints of any size, lone surrogates as escapes (or, ``ascii_only`` False, as the invalid
    UTF-8 that 'surrogatepass' makes of them), deep nesting spliced in as text."""
    deep: dict = {}

    def walk(v: Any) -> Any:
        if isinstance(v, Deep):
            deep[v.token] = v.text()
            return v.token
        if isinstance(v, dict):
            return {str(k): walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    text = json.dumps(walk(value), ensure_ascii=ascii_only, allow_nan=True)
    for token, nested in deep.items():
        text = text.replace(json.dumps(token), nested)
    return text.encode("utf-8", "surrogatepass")


@st.composite
def mutated_value(draw, value: Any) -> Any:
    """``value`` with one node changed (or two, sometimes)."""
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(value)
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["set", "set", "set", "del", "wrap", "str"]))
        if op == "del" and not path:
            op = "set"
        value = _replace(value, path, draw(hostile) if op == "set" else None, op)
    return value


MIN_NS, MAX_NS = 10**17, 1 << 62  # records.MIN_EPOCH_NS, MAX_EPOCH_NS: the bounds kept
ANALYSED_ATTRS = (  # the attributes the analysis reads (store/sql/analysis_input.sql)
    "gen_ai.latency.time_in_queue", "gen_ai.latency.time_in_model_prefill",
    "gen_ai.latency.time_in_model_decode", "server.address", "server.port", "url.full",
    "agentscope.cpu.scope", "agentscope.lane", "agentscope.cpu.thread_system_ns",
    "agentscope.children.ctx_switches.involuntary", "agentscope.children.ctx_switches.voluntary",
    "agentscope.process.other_threads_cpu_ns", "agentscope.workers.cpu_ns",
    "agentscope.children.run_delay_ns", "agentscope.children.own_cpu_ns", "error.type",
    "gen_ai.operation.name", "gen_ai.request.model", "db.system", "http.request.method")


@st.composite
def semantic_span(draw, lines: list, i: int) -> dict:
    """Line ``i`` of a span file changed into another *valid* span that is hostile to the
    analysis: a parent that is itself or another span (cycles), times at the bounds or of
    no length, counts at their largest, producer/consumer kinds, odd stages, errors, and the
    attributes the analysis reads holding odd values."""
    span = dict(lines[i])
    others = [x for j, x in enumerate(lines) if j != i] or [span]
    for _ in range(draw(st.integers(1, 4))):
        what = draw(st.sampled_from(["parent", "trace", "times", "counts", "kind", "stage",
                                     "error", "attr", "ids"]))
        if what == "parent":
            span["parent_span_id"] = draw(st.sampled_from(
                [span["span_id"], None] + [x["span_id"] for x in others]))
        elif what == "trace":
            span["trace_id"] = draw(st.sampled_from([x["trace_id"] for x in others]))
        elif what == "times":
            start = draw(st.sampled_from([MIN_NS, span["start_ns"], MAX_NS - 1, T0]))
            span["start_ns"] = start
            span["end_ns"] = draw(st.sampled_from([start, start + 1, MAX_NS, start + 10**9]))
        elif what == "counts":
            for key in ("thread_cpu_ns", "child_cpu_ns", "vcsw", "ivcsw", "minflt", "majflt",
                        "child_majflt"):
                span[key] = draw(st.sampled_from([None, 0, 1, 1 << 60]))
            span["children"] = draw(st.sampled_from([None, 0, 2**31 - 1]))
            span["pid"] = draw(st.sampled_from([None, 0, -1, 2**31 - 1, -(2**31)]))
            span["tid"] = draw(st.sampled_from([None, 0, -1, 2**63 - 1, -(2**63)]))
        elif what == "kind":
            span["kind"] = draw(st.sampled_from(["producer", "consumer", "server", "client"]))
        elif what == "stage":
            span["stage"] = draw(st.sampled_from(["task", "agent", "queue", "context",
                                                  "inference", "tool", "env", "memory", None,
                                                  "", "[bold]x", "\x1b[2J"]))
        elif what == "error":
            span["status"] = "error"
            span["status_message"] = draw(st.sampled_from(["TimeoutError", None, "", "x" * 5000,
                                                           "deadline exceeded \udcff"]))
            span["events"] = [{"name": "exception", "time_ns": span["start_ns"],
                               "attrs": {"exception.type": draw(hostile_plain)}}]
        elif what == "attr":
            span["attrs"] = dict(span.get("attrs") or {})
            span["attrs"][draw(st.sampled_from(ANALYSED_ATTRS))] = draw(hostile_plain)
        else:
            span["span_id"] = draw(st.sampled_from([x["span_id"] for x in others]))
    return span


BYTE_JUNK = (b"\xff", b"\xfe\xfe", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\\udcff", b"\\ud800\"",
             b"[" * 5000, b"{" * 100_000, b"\n", b"\r\n", b"}", b"]", b",", b'"', b"NaN",
             b"-Infinity", b"99999999999999999999999999")


@st.composite
def mutated_bytes(draw, data: bytes) -> bytes:
    """``data`` cut, with bytes flipped, junk inserted or a range deleted."""
    if not data:
        return draw(st.sampled_from(BYTE_JUNK))
    op = draw(st.sampled_from(["cut", "insert", "flip", "delete", "junk-line"]))
    pos = draw(st.integers(0, len(data) - 1))
    if op == "cut":
        return data[:pos]
    if op == "insert":
        return data[:pos] + draw(st.sampled_from(BYTE_JUNK)) + data[pos:]
    if op == "flip":
        return data[:pos] + bytes([data[pos] ^ draw(st.integers(1, 255))]) + data[pos + 1:]
    if op == "delete":
        return data[:pos] + data[pos + draw(st.integers(1, 64)):]
    return data[:pos] + b"\n" + draw(st.sampled_from(BYTE_JUNK)) + b"\n" + data[pos:]


# ---- cases ---------------------------------------------------------------------------------
@dataclasses.dataclass
class Case:
    """A trace directory to analyse: the good neighbour and one broken file."""

    fmt: str
    how: str  # the mutation, for reports
    name: str  # the broken file's name
    data: bytes
    expect: frozenset  # trace ids that must be tasks (the good file's, untouched lines')
    line_based: bool = False  # our own line formats: every problem has a line number

    def files(self) -> dict:
        return {GOOD_FILE: good_file(), self.name: self.data}


@st.composite
def cases(draw, fmt: Optional[str] = None) -> Case:
    """A broken file of format ``fmt`` (any, when None) beside the good one."""
    fmt = fmt or draw(st.sampled_from(FORMATS))
    seed = draw(st.sampled_from(seeds()[fmt]))
    expect = {GOOD_TRACE}
    ascii_only = draw(st.booleans())
    if seed.binary:
        how = draw(st.sampled_from(["value", "bytes"]))
        if how == "value":
            data = _protobuf_mutation(draw, seed.doc)
        else:
            data = draw(mutated_bytes(seed.data))
    elif seed.lines is not None:
        hows = ["line-value", "line-field", "line-field", "line-bytes", "file-bytes"]
        if fmt == "spans":
            hows += ["line-semantic", "line-semantic"]
        how = draw(st.sampled_from(hows))
        lines = list(seed.lines)
        i = draw(st.integers(0, len(lines) - 1))
        encoded = [dumps(v) for v in lines]
        if how == "line-value":
            encoded[i] = dumps(draw(mutated_value(lines[i])), ascii_only)
        elif how == "line-field" and isinstance(lines[i], dict) and lines[i]:
            changed = dict(lines[i])
            for _ in range(draw(st.integers(1, 3))):  # a field of the record itself
                changed[draw(st.sampled_from(sorted(changed)))] = draw(hostile)
            encoded[i] = dumps(changed, ascii_only)
        elif how == "line-semantic":
            encoded[i] = dumps(draw(semantic_span(lines, i)), ascii_only)
        elif how == "line-bytes":
            encoded[i] = draw(mutated_bytes(encoded[i]))
        data = b"".join(x + b"\n" for x in encoded)
        if how == "file-bytes":
            data = draw(mutated_bytes(seed.data))
        elif seed.traces:
            touched = set(seed.traces[i])
            expect |= {t for j, ts in enumerate(seed.traces) if j != i for t in ts
                       if t not in touched}
    else:
        how = draw(st.sampled_from(["value", "value", "bytes"]))
        if how == "value":
            data = dumps(draw(mutated_value(seed.doc)), ascii_only)
        else:
            data = draw(mutated_bytes(seed.data))
    name = seed.name
    compress = draw(st.sampled_from([None, None, None, "gzip", "zstd", "gzip-cut"]))
    if compress and fmt != "otlp-lines":  # compressed lines are read whole: same expectations
        data, name = _compress(data, compress, draw), name + (".zst" if compress == "zstd"
                                                              else ".gz")
        how += f"+{compress}"
        if compress == "gzip-cut":  # what follows the cut is gone: only the neighbour stays
            expect = {GOOD_TRACE}
    return Case(fmt, how, name, data, frozenset(expect),
                line_based=fmt in ("spans", "samples") and not compress)


def _protobuf_mutation(draw, doc: dict) -> bytes:
    """A request changed at one node and serialised, when protobuf takes the change (values
    out of a field's range, wrong types, are refused by json_format: then the bytes are cut
    instead)."""
    for _ in range(5):
        value = draw(mutated_value(doc))
        try:
            return otlp_protobuf(json.loads(dumps(value)))
        except Exception:  # noqa: BLE001 - json_format refuses most hostile values
            continue
    return draw(mutated_bytes(otlp_protobuf(doc)))


def _compress(data: bytes, how: str, draw) -> bytes:
    if how == "zstd":
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    packed = gzip.compress(data, mtime=0)
    if how == "gzip-cut":
        return packed[:draw(st.integers(1, len(packed) - 1))]
    return packed


# ---- running a case ------------------------------------------------------------------------
@dataclasses.dataclass
class Outcome:
    """What analysing a case gave: the exception (with its traceback text) or the tasks and
    problems, and the checks that failed."""

    error: Optional[BaseException] = None
    trace: str = ""
    tasks: frozenset = frozenset()
    problems: tuple = ()
    failures: list = dataclasses.field(default_factory=list)
    reader_stops: list = dataclasses.field(default_factory=list)  # readers that gave up


# what a reader says when it caught its own exception and dropped the rest of a file/trace
# (and the loader, when the store refused a file it had read: "not loaded: <the error>")
READER_STOPPED = ("stopped reading after", "unreadable span", "could not be read (",
                  "not loaded: ")


def write_case(case: Case, root: Path) -> None:
    for name, data in case.files().items():
        (root / name).write_bytes(data)


def run_case(case: Case, root: Path, cli: bool = False,
             analyze: Optional[Callable] = None) -> Outcome:
    """Analyse ``case`` in the empty directory ``root`` (and check it), catching everything:
    the property checks are in :attr:`Outcome.failures`."""
    import agentscope
    from agentscope.analysis import check

    write_case(case, root)
    out = Outcome()
    try:
        if cli:
            _run_cli(root, case, out)
        else:
            a = (analyze or agentscope.analyze)(root, db=":memory:")
            out.tasks = frozenset(a.tasks["trace_id"]) if len(a.tasks) else frozenset()
            out.problems = tuple(a.problems)
            check(root)
    except BaseException as e:  # noqa: BLE001 - the property under test
        if isinstance(e, KeyboardInterrupt):
            raise
        out.error, out.trace = e, traceback.format_exc()
        out.failures.append(f"raised {type(e).__name__}: {_short(e)}")
        return out
    missing = case.expect - out.tasks
    if not cli and missing:
        out.failures.append(f"valid traces not analysed: {sorted(missing)}")
    for p in out.problems:
        if Path(p.path).name != case.name:
            out.failures.append(f"a problem names another file: {p}")
        elif case.line_based and p.line is None:
            out.failures.append(f"a problem without its line: {p}")
        if any(s in p.reason for s in READER_STOPPED):
            out.reader_stops.append(p.reason)
    return out


def _run_cli(root: Path, case: Case, out: Outcome) -> None:
    from click.testing import CliRunner

    from agentscope.cli import main

    fmt = ("table", "json", "markdown")[len(case.data) % 3]
    result = CliRunner().invoke(main, ["analyze", str(root), "--db", ":memory:",
                                       "--format", fmt])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    if result.exit_code not in (0, 1):
        out.failures.append(f"exit code {result.exit_code}")
    if "good-task" not in result.output:
        out.failures.append("the good task is not in the output")
    if "Traceback" in result.output:
        out.failures.append("a traceback in the output")
    if result.exit_code == 1 and case.name not in result.output:
        out.failures.append("exit 1 without naming the broken file")


def _short(e: BaseException) -> str:
    text = str(e).encode("utf-8", "backslashreplace").decode("utf-8")
    return text[:300]


def crash_site(trace: str) -> str:
    """The innermost frame of agentscope's own code in a traceback text, and the exception's
    type: where it broke, and how."""
    frames, exc = [], ""
    for line in trace.splitlines():
        text = line.strip()
        if text.startswith('File "') and "/agentscope/" in text:
            where = text.split('"')[1].split("/agentscope/", 1)[1]
            number = text.split(", line ")[1].split(",")[0]
            frames.append(f"{where}:{number} {text.rsplit(' in ', 1)[-1]}")
            exc = ""
        elif (line[:1].isalpha() or line[:1] == "_") and ":" in line and not exc:
            name = line.split(":")[0]
            if name.replace(".", "").replace("_", "").isalnum() and " " not in name:
                exc = name.rsplit(".", 1)[-1]
    # the innermost two frames: a DuckDB error's innermost is the store's one _x
    site = " < ".join(reversed(frames[-2:])) or "?"
    return f"agentscope/{site} ({exc or '?'})"


# ---- the tests ------------------------------------------------------------------------------
# examples per format in CI (the whole file runs in well under a minute on two busy cores);
# AGENTSCOPE_FUZZ_EXAMPLES=500 for a longer local run, benchmarks/fuzz.py for thousands
EXAMPLES = int(os.environ.get("AGENTSCOPE_FUZZ_EXAMPLES", "16"))
_FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                        HealthCheck.filter_too_much])


@pytest.fixture(scope="module")
def scratch():
    """One directory for every example of a test (emptied between them)."""
    root = Path(tempfile.mkdtemp(prefix="agentscope-fuzz-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _fresh(root: Path) -> Path:
    for p in root.iterdir():
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    return root


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_broken_file_never_stops_the_analysis(fmt, scratch):
    @_FUZZ
    @given(case=cases(fmt))
    def prop(case):
        out = run_case(case, _fresh(scratch))
        assert not out.failures, (case.how, case.name, out.failures, out.trace)
        assert not out.reader_stops, (case.how, out.reader_stops)

    prop()


@settings(max_examples=max(4, EXAMPLES // 2), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=cases())
def test_the_cli_prints_the_good_tasks_and_names_the_broken_file(case):
    root = Path(tempfile.mkdtemp(prefix="agentscope-fuzz-cli-"))
    try:
        out = run_case(case, root, cli=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert not out.failures, (case.how, case.name, out.failures, out.trace)


def test_the_seeds_are_valid(scratch):
    """Each valid example loads without a problem, so what the fuzzer finds is its doing."""
    import agentscope

    for fmt in FORMATS:
        for seed in seeds()[fmt]:
            root = _fresh(scratch)
            (root / seed.name).write_bytes(seed.data)
            a = agentscope.analyze(root, db=":memory:")
            assert not a.problems, (seed.name, a.problems)
            assert len(a.tasks) or fmt == "samples", seed.name
            for ids in seed.traces:
                assert set(ids) <= set(a.tasks["trace_id"]), seed.name
