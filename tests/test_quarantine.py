"""Bad input is quarantined: named with its file and line, never stored, never raised
(issue 18, docs/bad-input.md). The cases the reliability probe found, one test each; the
fuzzed ones are in test_fuzz_inputs.py."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import agentscope
from agentscope.analysis import check
from agentscope.cli import main
from agentscope.errors import TraceFormatError
from agentscope.formats import spanfile
from agentscope.records import SpanEvent, SpanRecord, span_problem
from agentscope.store.duckdb_store import Store

T0 = 1_800_000_000_000_000_000
GOOD = "c0ffee00c0ffee00c0ffee00c0ffee00"
REPO = Path(__file__).resolve().parents[1]


def line(trace: str = GOOD, span: str = "1" * 16, **change) -> str:
    """One span line as our writer writes it, with ``change`` applied to its JSON."""
    record = SpanRecord(trace, span, None, "task-" + span[:4], "task", "internal", T0,
                        T0 + 10**9, "unset", None, "svc", "h", 7, 7, 5000, None, None, 1, 0,
                        3, 0, None, {"gen_ai.request.model": "m"})
    obj = json.loads(spanfile.encode(record))
    obj.update(change)
    return json.dumps(obj)


def other(n: int) -> str:
    return f"{n:032x}"


def write(path: Path, *lines: str) -> Path:
    path.write_text("".join(x + "\n" for x in lines))
    return path


def analyse(d: Path, db=":memory:"):
    return agentscope.analyze(d, db=db)


def traces(a) -> set:
    return set(a.tasks["trace_id"]) if len(a.tasks) else set()


# ---- values that used to crash the load or the analysis ----------------------------------
@pytest.mark.parametrize("change,reason", [
    ({"thread_cpu_ns": 2**70}, "thread_cpu_ns must be null or an integer"),
    ({"vcsw": 2**63}, "vcsw must be null or an integer"),
    ({"majflt": 2**62}, "majflt must be null or an integer"),
    ({"pid": 2**40}, "pid must be null or an integer"),
    ({"attrs": "{bad"}, "attrs must be a JSON object"),
    ({"attrs": '{"a": 1}'}, "attrs must be a JSON object"),
    ({"events": "x"}, "events must be a JSON array"),
    ({"events": [{"name": "e", "time_ns": "abc"}]}, "an event must have"),
    ({"events": [5]}, "an event must be a JSON object"),
    ({"links": {"a": 1}}, "links must be a JSON array"),
    ({"start_ns": 2**63 - 10, "end_ns": 2**63 - 1}, "past 2116"),
    ({"end_ns": 2**64}, "past 2116"),
    ({"name": None}, "name must be a string"),
])
def test_a_bad_value_is_named_and_the_other_lines_load(tmp_path, change, reason):
    """In a file of good lines (the fast path reads them), one bad value: that line is a
    problem with its file, line and reason, and everything else is analysed."""
    f = write(tmp_path / "spans-h-1-1.jsonl", line(other(1)), line(other(2), "2" * 16, **change),
              line(other(3), "3" * 16))
    a = analyse(tmp_path)
    assert traces(a) == {other(1), other(3)}
    (p,) = a.problems
    assert (p.path, p.line, p.span_id) == (str(f), 2, "2" * 16) and reason in p.reason
    (c,) = check(tmp_path).problems  # check names the same line, for the same reason
    assert (c.line, c.reason) == (p.line, p.reason)


def test_a_span_with_no_start_time_is_a_named_problem(tmp_path):
    """start_ns = 0 (a span the SDK never started) is not loaded as a span of 57 years."""
    write(tmp_path / "spans-h-1-1.jsonl", line(other(1)), line(other(2), "2" * 16, start_ns=0))
    otlp = {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": other(3), "spanId": "3" * 16, "name": "x", "startTimeUnixNano": "0",
         "endTimeUnixNano": str(T0)}]}]}]}
    (tmp_path / "otlp.json").write_text(json.dumps(otlp))
    from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

    pb = TracesData()
    span = pb.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = bytes.fromhex(other(4)), b"\x04" * 8, "x"
    span.end_time_unix_nano = T0
    (tmp_path / "otlp.pb").write_bytes(pb.SerializeToString())
    a = analyse(tmp_path)
    assert traces(a) == {other(1)}
    reasons = sorted(p.reason for p in a.problems)
    assert len(reasons) == 3 and all("no start time" in r for r in reasons), reasons
    joined = " | ".join(reasons)
    assert "resource_spans[0].scope_spans[0].spans[0]: start_time_unix_nano" in joined
    assert "resourceSpans[0].scopeSpans[0].spans[0] ('x'): startTimeUnixNano is 0" in joined
    assert span_problem(spanfile.decode(line()) ._replace(start_ns=0)) == \
        "start_ns is 0: the span has no start time"


def test_what_our_writer_writes_always_loads_lone_surrogates_included(tmp_path):
    """A string attribute holding a lone surrogate (os.fsdecode of a file name that is not
    UTF-8) is written as a JSON escape; it loads, as U+FFFD, with no problem: through the
    fast path and through the per-line reader (a file that also has a bad line)."""
    name = os.fsdecode(b"report-\xff.txt")
    record = spanfile.decode(line())._replace(name="open " + name, attrs={"file.path": name},
                                              events=(SpanEvent("e", T0, {name: 1}),))
    text = spanfile.encode(record)
    assert "\\udcff" in text
    (tmp_path / "spans-h-1-1.jsonl").write_text(text)
    (tmp_path / "spans-h-2-1.jsonl").write_text(text.replace(GOOD, other(9)) + "oops\n")
    a = analyse(tmp_path)
    assert traces(a) == {GOOD, other(9)}
    assert [p.line for p in a.problems] == [2]
    names, attrs = zip(*a.query_rows("SELECT name, attrs FROM spans")[1])
    assert set(names) == {"open report-\ufffd.txt"}
    assert all(json.loads(x) == {"file.path": "report-\ufffd.txt"} for x in attrs)
    assert not check(tmp_path / "spans-h-1-1.jsonl").problems


def test_a_file_whose_name_is_not_utf8_loads_and_is_named(tmp_path):
    root = os.fsencode(tmp_path)
    with open(root + b"/spans-\xff-1-1.jsonl", "w") as f:
        f.write(line() + "\nbad\n")
    a = analyse(tmp_path)
    assert traces(a) == {GOOD}
    (p,) = a.problems
    assert p.path.endswith("spans-\\xff-1-1.jsonl") and p.line == 2
    result = CliRunner().invoke(main, ["analyze", str(tmp_path), "--db", ":memory:"])
    assert result.exit_code == 1 and "spans-\\xff-1-1.jsonl:2" in result.output


def test_nan_and_deep_nesting_are_normalised_at_load(tmp_path):
    """NaN (which Python's json takes and DuckDB's JSON refuses) becomes "NaN"; values nested
    deeper than the store keeps become their JSON text; the analysis reads both."""
    deep = "[" * 200 + "]" * 200
    (tmp_path / "otlp.jsonl").write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": GOOD, "spanId": "1" * 16, "name": "x", "startTimeUnixNano": str(T0),
         "endTimeUnixNano": str(T0 + 10), "attributes": [
             {"key": "nan", "value": {"doubleValue": float("nan")}},
             {"key": "deep", "value": {"stringValue": "ok"}}]}]}]}]}) + "\n")
    write(tmp_path / "spans-h-1-1.jsonl",
          json.dumps({**json.loads(line(other(2), "2" * 16)), "unknown": [[[1]]]}),
          line(other(3), "3" * 16).replace('"attrs": {', f'"attrs": {{"deep": {deep}, ', 1))
    a = analyse(tmp_path)
    assert traces(a) == {GOOD, other(2), other(3)} and not a.problems
    rows = dict(a.query_rows("SELECT trace_id, attrs FROM spans")[1])
    assert json.loads(rows[GOOD])["nan"] == "NaN"
    kept = json.loads(rows[other(3)])["deep"]
    depth, value = 0, kept
    while isinstance(value, list) and value:
        depth, value = depth + 1, value[0]
    assert depth < 70 and isinstance(value, str)  # the rest kept as text


# ---- OTLP: wrong types at any node, named by their path -----------------------------------
def _request(span: dict) -> dict:
    return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [
        {"scope": {"name": "s"}, "spans": []},
        {"scope": {"name": "s"}, "spans": [
            {"traceId": other(i), "spanId": f"{i:016x}", "name": f"s{i}",
             "startTimeUnixNano": str(T0), "endTimeUnixNano": str(T0 + 10)} for i in (1, 2, 3)]
            + [span]}]}]}


@pytest.mark.parametrize("span,where", [
    ({"traceId": other(4), "spanId": "4" * 16, "startTimeUnixNano": None,
      "endTimeUnixNano": str(T0)}, "resourceSpans[0].scopeSpans[1].spans[3]: startTimeUnixNano"),
    ({"traceId": other(4), "spanId": "4" * 16, "startTimeUnixNano": [1],
      "endTimeUnixNano": str(T0)}, "resourceSpans[0].scopeSpans[1].spans[3]: startTimeUnixNano"),
    ({"traceId": other(4), "spanId": "4" * 16, "startTimeUnixNano": str(T0),
      "endTimeUnixNano": str(T0), "attributes": "x"},
     "resourceSpans[0].scopeSpans[1].spans[3].attributes: expected a list"),
    ({"traceId": other(4), "spanId": "4" * 16, "startTimeUnixNano": str(T0),
      "endTimeUnixNano": str(T0), "events": {"a": 1}},
     "resourceSpans[0].scopeSpans[1].spans[3].events: expected a list"),
    ({"traceId": other(4), "spanId": "4" * 16, "startTimeUnixNano": str(T0),
      "endTimeUnixNano": str(T0), "status": "x"},
     "resourceSpans[0].scopeSpans[1].spans[3].status: expected an object"),
    ({"traceId": other(4), "spanId": "4" * 16, "startTimeUnixNano": str(T0),
      "endTimeUnixNano": str(T0), "name": {"a": 1}},
     "resourceSpans[0].scopeSpans[1].spans[3]: name: expected a string"),
    ("a string", "resourceSpans[0].scopeSpans[1].spans[3]: expected a span object"),
    (None, "resourceSpans[0].scopeSpans[1].spans[3]: expected a span object, found null"),
])
def test_a_wrongly_typed_otlp_node_is_named_by_its_path(tmp_path, span, where):
    for name, data in (("one.json", json.dumps(_request(span))),
                       ("lines.jsonl", json.dumps(_request(span)) + "\n")):
        d = tmp_path / name.split(".")[0]
        d.mkdir()
        (d / name).write_text(data)
        a = analyse(d)
        assert traces(a) >= {other(1), other(2), other(3)}, name
        assert any(where in p.reason for p in a.problems), (name, a.problems)


def test_wrongly_typed_otlp_containers_lose_only_what_they_hold(tmp_path):
    request = _request({"traceId": other(4), "spanId": "4" * 16, "startTimeUnixNano": str(T0),
                        "endTimeUnixNano": str(T0 + 1)})
    request["resourceSpans"].append({"scopeSpans": "x"})
    request["resourceSpans"].append(None)
    request["resourceSpans"][0]["resource"] = []
    (tmp_path / "r.json").write_text(json.dumps(request))
    a = analyse(tmp_path)
    assert traces(a) == {other(i) for i in (1, 2, 3, 4)}
    reasons = " | ".join(p.reason for p in a.problems)
    for where in ("resourceSpans[0].resource: expected an object",
                  "resourceSpans[1].scopeSpans: expected a list", "resourceSpans[2]: expected"):
        assert where in reasons


def test_an_otlp_lines_file_whose_first_line_is_null_loads_its_other_lines(tmp_path):
    """pyarrow (26) dies with a segmentation fault on such a file: the fast path must not
    be handed it. Run in a child process, so that a crash fails this test, not the run."""
    good = _request({"traceId": other(4), "spanId": "4" * 16, "startTimeUnixNano": str(T0),
                     "endTimeUnixNano": str(T0 + 1)})
    (tmp_path / "c.jsonl").write_text("null\n" + json.dumps(good) + "\n")
    code = ("import agentscope, sys; a = agentscope.analyze(sys.argv[1], db=':memory:'); "
            "print(len(a.tasks), [(p.line, p.reason) for p in a.problems])")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("4 [(1, 'expected an OTLP request object, found null')]")


# ---- a bad file never poisons the store ---------------------------------------------------
POISON = (line(other(2), "2" * 16, attrs="{bad"), line(other(3), "3" * 16, thread_cpu_ns=2**70),
          line(other(4), "4" * 16, events="x"))


def test_a_bad_file_does_not_poison_a_store_on_disk(tmp_path):
    """Load a bad file into a store in a file, delete it, analyse again: no traceback at any
    step, and once the file is gone its problems are gone (exit 0)."""
    write(tmp_path / "spans-good-1-1.jsonl", line())
    bad = write(tmp_path / "spans-bad-2-1.jsonl", line(other(1), "5" * 16), *POISON)
    runner = CliRunner()
    first = runner.invoke(main, ["analyze", str(tmp_path), "--format", "json"])
    assert first.exit_code == 1, first.output
    assert first.exception is None or isinstance(first.exception, SystemExit)
    doc = json.loads(first.stdout)
    assert {t["trace_id"] for t in doc["tasks"]} == {GOOD, other(1)}
    assert (tmp_path / ".agentscope" / "agentscope.duckdb").exists()
    bad.unlink()
    again = runner.invoke(main, ["analyze", str(tmp_path), "--format", "json"])
    assert again.exit_code == 0, again.stderr
    assert {t["trace_id"] for t in json.loads(again.stdout)["tasks"]} == {GOOD, other(1)}
    with Store.for_trace_dir(tmp_path, read_only=True) as store:
        assert not store.problems()


def test_a_fixed_file_is_read_again_from_its_start(tmp_path):
    """A bad line fixed by hand (the file rewritten, not appended to): the store forgets what
    the file gave and reads it again, so the fixed span is analysed and its problem gone."""
    f = write(tmp_path / "spans-h-1-1.jsonl", line(), *POISON)
    a = analyse(tmp_path, db=None)
    assert len(a.problems) == 3 and traces(a) == {GOOD}
    a.close()
    write(f, line(), line(other(2), "2" * 16), line(other(3), "3" * 16),
          line(other(4), "4" * 16))
    b = analyse(tmp_path, db=None)
    assert not b.problems and traces(b) == {GOOD, other(2), other(3), other(4)}
    assert b.load.spans_added == 4 and b.summary.spans == 4
    b.close()
    with open(f, "a") as out:  # appended to: read on from where it stopped
        out.write(line(other(5), "6" * 16) + "\n")
    c = analyse(tmp_path, db=None)
    assert c.load.spans_added == 1 and traces(c) == {GOOD} | {other(i) for i in (2, 3, 4, 5)}
    c.close()


def test_a_file_the_store_refuses_is_rolled_back_and_named(tmp_path, monkeypatch):
    """Each file's load is one transaction: when the store fails part way through one (here:
    after its spans are inserted), none of its spans stay, it is named with the error (whose
    message, like DuckDB's, may hold bytes that are not UTF-8), and the others load."""
    from agentscope.store import loading

    write(tmp_path / "spans-a-1-1.jsonl", line(), "bad line")  # per-file path
    write(tmp_path / "spans-b-1-1.jsonl", line(other(1), "2" * 16), "bad line")
    real = loading.Loader._account

    class Odd(Exception):
        def __str__(self) -> str:
            return "Invalid Input Error: \udcff\udcfe in the input"

    def failing(self, report, src, file_id, added, *args):
        if src.rel == "spans-a-1-1.jsonl" and added:  # (not when it is named: added 0)
            raise Odd()
        return real(self, report, src, file_id, added, *args)

    monkeypatch.setattr(loading.Loader, "_account", failing)
    a = analyse(tmp_path)
    assert traces(a) == {other(1)}
    named = {Path(p.path).name: p.reason for p in a.problems}
    assert named["spans-a-1-1.jsonl"].startswith("not loaded: Odd: Invalid Input Error: ")
    named["spans-a-1-1.jsonl"].encode("utf-8")  # text we can store and print
    assert a.query_rows("SELECT count(*) FROM spans")[1][0][0] == 1
    assert a.load.spans_added == 1


# ---- check and the command line -----------------------------------------------------------
@pytest.mark.parametrize("change", [
    {"events": "x"}, {"links": 5}, {"events": [{"name": "e", "time_ns": "soon"}]},
    {"events": [{"name": "e", "time_ns": 1.5}]}, {"links": [{"trace_id": 5}]},
    {"attrs": {"a": json.loads("[" * 900 + "]" * 900)}},
])
def test_check_names_wrong_events_links_and_nesting(tmp_path, change):
    write(tmp_path / "spans-h-1-1.jsonl", line(), line(other(2), "2" * 16, **change))
    result = check(tmp_path)
    assert result.spans == 1 + ("attrs" in change)
    assert all(p.line == 2 for p in result.problems)
    cli = CliRunner().invoke(main, ["check", str(tmp_path)])
    assert cli.exit_code == (0 if "attrs" in change else 1)
    assert "Traceback" not in cli.output


def test_check_names_a_line_nested_past_pythons_recursion(tmp_path):
    deep = '{"a": ' * 5000 + "1" + "}" * 5000
    (tmp_path / "spans-h-1-1.jsonl").write_text(line() + "\n" + deep + "\n")
    (p,) = check(tmp_path).problems
    assert p.line == 2 and "nested too deeply" in p.reason
    a = analyse(tmp_path)
    assert traces(a) == {GOOD} and [q.line for q in a.problems] == [2]


def test_analyze_prints_the_good_tasks_names_the_bad_record_and_exits_1(tmp_path):
    write(tmp_path / "spans-h-1-1.jsonl", line(), line(other(2), "2" * 16, vcsw=2**64))
    (tmp_path / "broken.json.gz").write_bytes(gzip.compress(b'{"resourceSpans": [')[:-4])
    result = CliRunner().invoke(main, ["analyze", str(tmp_path), "--db", ":memory:"])
    assert result.exit_code == 1
    assert "task-1111" in result.stdout
    assert "spans-h-1-1.jsonl:2" in result.output and "vcsw" in result.output
    assert "broken.json.gz" in result.output
    assert "Traceback" not in result.output


def test_problems_are_typed_errors_with_a_file():
    p = TraceFormatError("f.jsonl", 3, "why", "a" * 16)
    assert str(p) == "f.jsonl:3 (span aaaaaaaaaaaaaaaa): why"


def test_a_task_whose_spans_all_last_no_time_is_analysed(tmp_path):
    """Spans of 0 ns are valid (an instant): a task made only of them has no critical-path
    section, and its shares are 0, not a numpy casting error."""
    write(tmp_path / "spans-h-1-1.jsonl", line(end_ns=T0), line(span="2" * 16,
                                                                parent_span_id="1" * 16,
                                                                end_ns=T0))
    a = analyse(tmp_path)
    assert traces(a) == {GOOD} and not a.problems
    assert float(a.tasks["duration_s"][0]) == 0.0
    json.loads(a.to_json())


def test_the_example_of_docs_bad_input_runs_as_written(capsys):
    import re

    text = (REPO / "docs" / "bad-input.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    exec(compile(code, "docs/bad-input.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "['fix-bug']"
    assert out[1].endswith("spans-host-1-1.jsonl:2 (span 2222222222222222): attrs must be a "
                           "JSON object; got '{not an object'")
    assert ":3 (span 3333333333333333): vcsw must be null or an integer" in out[2]


@pytest.mark.parametrize("first", [b"garbage", b"]", b"{" * 100_000, b'{"resourceSpans": '
                                   + b'{"a":' * 3000 + b"1" + b"}" * 3000 + b"}",
                                   b'{"cut": [1, 2'])
def test_a_lines_file_whose_first_line_is_broken_is_still_read(tmp_path, first):
    """Formats are known by content, from a file's first bytes: a Collector or TraceLab file
    whose first line is broken (cut, overwritten, nested past reading, longer than the
    head) is still known by its next lines; that line is one problem, the rest loads."""
    requests = [json.dumps(_request({"traceId": other(4), "spanId": "4" * 16, "name": "s4",
                                     "startTimeUnixNano": str(T0),
                                     "endTimeUnixNano": str(T0 + 1)}))]
    (tmp_path / "collector.jsonl").write_bytes(first + b"\n" + requests[0].encode() + b"\n")
    rounds = (REPO / "tests" / "data" / "importers" / "tracelab_sample.jsonl").read_bytes()
    # (a first line that starts as an OTLP request makes the file one: not a TraceLab case)
    tracelab_first = b"garbage" if first.startswith(b'{"resourceSpans"') else first
    (tmp_path / "rounds.jsonl").write_bytes(tracelab_first + b"\n" + rounds)
    a = analyse(tmp_path)
    assert {other(i) for i in (1, 2, 3, 4)} <= traces(a)
    assert len(traces(a)) == 6  # and the two sessions of the TraceLab sample
    assert sorted((Path(p.path).name, p.line) for p in a.problems) == [
        ("collector.jsonl", 1), ("rounds.jsonl", 1)]


def test_a_duckdb_error_message_that_is_not_utf8_is_no_crash(tmp_path):
    """DuckDB's JSON reader quotes the start of a line it cannot read; cut inside a character
    (here: a line that is a string of 300 "é"), its message is not UTF-8 and the binding
    raises UnicodeDecodeError instead of its own error. The file goes to the per-line reader
    like any other it cannot read: that line is a problem, the rest loads."""
    bad = json.dumps("é" * 300, ensure_ascii=False)
    write(tmp_path / "spans-h-1-1.jsonl", line(), bad)
    (tmp_path / "samples-h-1-1.jsonl").write_text(
        json.dumps({"ts_ns": T0, "host": "h", "pid": 1, "source": "s", "device": None,
                    "metric": "m", "value": 1.0}) + "\n" + bad + "\n")
    a = analyse(tmp_path)
    assert traces(a) == {GOOD}
    assert sorted((Path(p.path).name, p.line) for p in a.problems) == [
        ("samples-h-1-1.jsonl", 2), ("spans-h-1-1.jsonl", 2)]
    assert a.query_rows("SELECT count(*) FROM samples")[1][0][0] == 1


# ---- other tools' formats: hostile numbers and shapes the fuzzer found -------------------
DATA = REPO / "tests" / "data" / "importers"


def _set(path: tuple, value):
    def change(doc):
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return doc
    return change


def _lines(name: str, index: int, change):
    lines = [json.loads(x) for x in (DATA / name).read_text().splitlines() if x.strip()]
    lines[index] = change(lines[index])
    return "".join(json.dumps(x) + "\n" for x in lines)


@pytest.mark.parametrize("name,text", [
    ("lf.trace.json", lambda: json.dumps(_set(("trace", "latency"), 10**400)(
        json.loads((DATA / "langfuse_sdk_v2.trace.json").read_text())))),
    ("lf.trace.json", lambda: json.dumps(_set(("observations", 0, "startTime"),
                                              "0001-01-01T00:00:00+05:00")(
        json.loads((DATA / "langfuse_sdk_v2.trace.json").read_text())))),
    ("lf.trace.json", lambda: json.dumps(_set(("observations", 0, "usage", "input"), "9" * 5000)(
        json.loads((DATA / "langfuse_sdk_v2.trace.json").read_text())))),
    ("aa.json", lambda: json.dumps(_set(("spans", 0, "status", "status_code"), [1])(
        json.loads((DATA / "anyagent_tool_error_trace.json").read_text())))),
    ("aa.json", lambda: json.dumps(_set(("spans", 0, "start_time"), "7" * 5000)(
        json.loads((DATA / "anyagent_tool_error_trace.json").read_text())))),
    ("aa.json", lambda: json.dumps(_set(("spans", 0, "context", "span_id"), "1" * 5000)(
        json.loads((DATA / "anyagent_tool_error_trace.json").read_text())))),
    ("phoenix.jsonl", lambda: _lines("phoenix_spans.jsonl", 0, _set(("end_time",), 10**60))),
    ("jaeger.json", lambda: (DATA / "jaeger_api_answer.json").read_text().replace(
        '"duration": 9000000', '"duration": 1e999', 1)),
    ("jaeger.json", lambda: json.dumps(_set(("data", 0, "spans", 0, "tags", 0),
                                            {"key": "x", "type": "float64", "value": 10**400})(
        json.loads((DATA / "jaeger_api_answer.json").read_text())))),
    ("rounds.jsonl", lambda: _lines("tracelab_sample.jsonl", 0, lambda row: {
        **row, "tools": [dict(t, tool_wall_latency_ms=float("inf")) for t in row["tools"]]})),
    ("otlp.jsonl", lambda: json.dumps(_request({
        "traceId": other(4), "spanId": "4" * 16, "startTimeUnixNano": str(T0),
        "endTimeUnixNano": str(T0), "attributes": [
            {"key": "x", "value": {"intValue": float("inf")}},
            {"key": "agentscope.cpu.thread_ns", "value": {"doubleValue": 1e300}}]})) + "\n"),
])
def test_hostile_numbers_in_other_formats_are_named_not_raised(tmp_path, name, text):
    """Numbers that Python cannot turn into what a reader wanted (an int of 5000 digits, an
    int past a float's range, infinity, a year 1 moved by its zone) and values where a
    hashable one belongs: each reader names the record, or keeps it without the value,
    and never stops reading (a stop would be 'stopped reading after N spans')."""
    write(tmp_path / "spans-good-1-1.jsonl", line())
    (tmp_path / name).write_text(text())
    a = analyse(tmp_path)
    assert GOOD in traces(a) and len(traces(a)) >= 2
    assert not [p for p in a.problems if "stopped reading" in p.reason
                or "unreadable" in p.reason or "not loaded" in p.reason], a.problems
    json.loads(a.to_json())
