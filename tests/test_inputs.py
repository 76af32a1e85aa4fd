"""Inputs by content (store/inputs.py): every format in a directory or as one file, compressed
or not; files in no known format named; a bad file named with its line while the rest loads;
`check` reads what `analyze` reads."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import agentscope
from agentscope.analysis import check
from agentscope.cli import main

CORPUS = Path(__file__).resolve().parent / "corpus"
LANGFUSE = CORPUS / "agent_traces" / "langfuse_framework_traces" / "agno-2025-06-11.trace.json"
ANYAGENT = CORPUS / "agent_traces" / "any_agent" / "head" / "OPENAI_trace.json"
JAEGER = CORPUS / "agent_traces" / "jaeger_ui_genai" / "genaiTestTrace.json"
OTLP = CORPUS / "agent_traces" / "derived_otlp" / "any_agent_head_LANGCHAIN.otlp.json"
TRACELAB = CORPUS / "tracelab" / "round_trace.jsonl"
SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "cpu" / "cpu-compile"


def _mixed(tmp_path: Path) -> Path:
    """One directory with a file of every kind, under names that do not say what they are."""
    d = tmp_path / "mixed"
    d.mkdir()
    shutil.copy(LANGFUSE, d / "export-1")
    shutil.copy(ANYAGENT, d / "run.json")
    (d / "jaeger.json.gz").write_bytes(gzip.compress(JAEGER.read_bytes()))
    shutil.copy(TRACELAB, d / "rounds.jsonl")
    shutil.copy(OTLP, d / "otel.json")
    spans = next(SAMPLE.glob("spans-*.jsonl"))
    (d / (spans.name + ".gz")).write_bytes(gzip.compress(spans.read_bytes()))
    (d / "notes.csv").write_text("a,b\n1,2\n")
    (d / "README.md").write_text("# my traces\n")
    return d


def test_every_format_in_one_directory_detected_by_content(tmp_path):
    d = _mixed(tmp_path)
    with agentscope.analyze(d, db=":memory:") as a:
        assert not a.problems
        assert a.load.formats == {"langfuse": 1, "anyagent": 1, "jaeger": 1, "tracelab": 1,
                                  "otlp": 1, "spans": 1}
        expected = 6 + 6 + 57 + 59 + 7  # the single files' spans (tests/test_corpus.py)
        spans = next(SAMPLE.glob("spans-*.jsonl")).read_text().count("\n")
        assert a.query_rows("SELECT count(*) FROM spans")[1][0][0] == expected + spans
        # the unknown data file is named; the document beside the traces is not warned about
        (warning,) = [w for w in a.warnings if w.startswith("skipped")]
        assert "notes.csv (not a known trace format)" in warning and "README" not in warning
    result = check(d)
    assert result.spans == expected + spans and not result.problems
    assert dict(result.skipped) == {"notes.csv": "not a known trace format",
                                    "README.md": "a document, not traces"}
    assert result.formats["jaeger"] == 1


def test_a_single_file_is_a_source_and_leaves_no_store_beside_it(tmp_path):
    path = tmp_path / "t.json"
    shutil.copy(LANGFUSE, path)
    with agentscope.analyze(path) as a:
        assert len(a.task_results) == 1 and not a.problems
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]  # the store was in memory
    result = CliRunner().invoke(main, ["analyze", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["summary"]["tasks"] == 1 and doc["summary"]["measured_share"] == 0.0
    assert any("rests on measured evidence" in w for w in doc["warnings"])


def test_zstd_compressed_files_read_like_the_rest(tmp_path):
    zstandard = pytest.importorskip("zstandard")  # a test dependency: installed in CI
    (tmp_path / "a.bin").write_bytes(zstandard.ZstdCompressor().compress(TRACELAB.read_bytes()))
    with agentscope.analyze(tmp_path, db=":memory:") as a:
        assert a.load.formats == {"tracelab": 1} and len(a.task_results) == 2


def test_a_truncated_json_document_is_one_problem_naming_the_line(tmp_path):
    pretty = json.dumps(json.loads(OTLP.read_text()), indent=2)
    (tmp_path / "cut.json").write_text(pretty[: len(pretty) // 2])
    shutil.copy(ANYAGENT, tmp_path / "ok.json")
    with agentscope.analyze(tmp_path, db=":memory:") as a:
        (p,) = a.problems
        assert p.path.endswith("cut.json") and p.line and p.reason.startswith("truncated")
        assert len(a.task_results) == 1  # the other file still loads
    result = CliRunner().invoke(main, ["analyze", str(tmp_path)])
    assert result.exit_code == 1 and "cut.json" in result.output


def test_a_broken_compressed_file_is_named_and_the_rest_loads(tmp_path):
    data = gzip.compress(TRACELAB.read_bytes())
    (tmp_path / "cut.jsonl.gz").write_bytes(data[: len(data) // 2])
    shutil.copy(ANYAGENT, tmp_path / "ok.json")
    with agentscope.analyze(tmp_path, db=":memory:") as a:
        bad = [p for p in a.problems if p.path.endswith("cut.jsonl.gz")]
        assert bad and len(a.task_results) >= 1
    assert check(tmp_path).problems


def test_check_counts_a_truncated_file_analyze_fails_on(tmp_path):
    # issue 14: check counted 0 files in a folder whose truncated OTLP file made analyze exit 1
    text = OTLP.read_text()
    (tmp_path / "t.json").write_text(text[: len(text) - 40])
    result = CliRunner().invoke(main, ["check", str(tmp_path)])
    assert result.exit_code == 1
    assert "1 files (by format: otlp: 1)" in result.output and "truncated" in result.output


def test_otlp_metrics_and_logs_are_named_as_not_traces(tmp_path):
    shutil.copy(CORPUS / "otlp_examples" / "opentelemetry-proto" / "metrics.json", tmp_path)
    with agentscope.analyze(tmp_path, db=":memory:") as a:
        assert any("metrics.json (OTLP metrics, not traces)" in w for w in a.warnings)


def test_hostile_file_names_stay_inert(tmp_path):
    name = "[red]x[bold]; rm -rf ~ $(id) \u202eevil\x1b]8;;x\x07.csv"
    (tmp_path / name).write_text("not a trace\n")
    shutil.copy(ANYAGENT, tmp_path / "ok.json")
    for fmt in ("table", "markdown"):
        result = CliRunner().invoke(main, ["analyze", str(tmp_path), "--format", fmt])
        assert result.exit_code == 0
        assert "\x1b" not in result.output and "\u202e" not in result.output
        assert "[red]x[bold]; rm -rf ~ $(id) evil]8;;x.csv" in result.output  # as text
    result = CliRunner().invoke(main, ["check", str(tmp_path)])
    assert "\x1b" not in result.output and "\u202e" not in result.output


def _otlp_with(name: str, value: str) -> dict:
    return {"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "0123456789abcdef0123456789abcdef", "spanId": "0123456789abcdef",
        "name": name, "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000001000000000",
        "attributes": [{"key": "k", "value": {"stringValue": value}},
                       {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}]}]}]}]}


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_a_lone_surrogate_in_a_name_or_attribute_does_not_stop_the_analysis(tmp_path, suffix):
    # JSON allows "\udc80"; DuckDB refused the JSON holding it, and every later analysis of the
    # directory failed (a receiver writes what clients send)
    (tmp_path / f"a{suffix}").write_text(json.dumps(_otlp_with("n\udc80", "v\udc80")) + "\n")
    with agentscope.analyze(tmp_path, db=":memory:") as a:
        assert not a.problems
        ((name, attrs, stage),) = a.query_rows("SELECT name, attrs, stage FROM spans")[1]
        assert name == "n\ufffd" and json.loads(attrs)["k"] == "v\ufffd" and stage == "inference"


def test_json_nested_too_deeply_is_one_problem(tmp_path):
    deep = '{"resourceSpans": ' + "[" * 100_000 + "]" * 100_000 + "}"
    (tmp_path / "deep.json").write_text(deep)
    (tmp_path / "deep.jsonl").write_text(deep + "\n")
    shutil.copy(ANYAGENT, tmp_path / "ok.json")
    with agentscope.analyze(tmp_path, db=":memory:") as a:
        assert sorted(Path(p.path).name for p in a.problems) == ["deep.json", "deep.jsonl"]
        assert all("nested too deeply" in p.reason for p in a.problems)
        assert len(a.task_results) == 1
    assert len(check(tmp_path).problems) == 2


def test_a_pretty_printed_otlp_document_under_any_name_is_one_document(tmp_path):
    pretty = json.dumps(json.loads(OTLP.read_text()), indent=2)
    (tmp_path / "export.otlp").write_text(pretty)
    with agentscope.analyze(tmp_path, db=":memory:") as a:
        assert not a.problems and a.load.formats == {"otlp": 1}
        assert a.query_rows("SELECT count(*) FROM spans")[1][0][0] == 7
    assert not check(tmp_path).problems and check(tmp_path).spans == 7


def test_a_corrupt_compressed_file_is_a_problem_and_exit_1(tmp_path):
    (tmp_path / "x.gz").write_bytes(b"\x1f\x8b" + b"garbage" * 10)
    shutil.copy(ANYAGENT, tmp_path / "ok.json")
    result = CliRunner().invoke(main, ["analyze", str(tmp_path)])
    assert result.exit_code == 1 and "x.gz: cannot read: not a valid gzip file" in result.output
    assert "skipped" not in result.output  # a problem, not a file passed over
    assert CliRunner().invoke(main, ["check", str(tmp_path)]).exit_code == 1


def test_a_foreign_file_that_grew_is_read_again_whole(tmp_path):
    lines = TRACELAB.read_text().splitlines(keepends=True)
    path = tmp_path / "rounds.jsonl"
    path.write_text("".join(lines[:5]))
    with agentscope.analyze(tmp_path) as a:
        (first,) = a.task_results
    path.write_text("".join(lines))
    with agentscope.analyze(tmp_path) as a:  # the same store, loaded again
        sessions = {t.duration_ns for t in a.task_results}
        assert len(a.task_results) == 2 and first.duration_ns not in sessions
        assert not a.problems and a.query_rows("SELECT count(*) FROM spans")[1][0][0] == 59
    with agentscope.analyze(path) as fresh:  # as a fresh load of the whole file gives
        assert {t.duration_ns for t in fresh.task_results} == sessions


def test_a_phoenix_parquet_export_loads_from_a_directory(tmp_path):
    from .test_import_langfuse_anyagent_phoenix import _spans_parquet

    (tmp_path / "spans.parquet").write_bytes(_spans_parquet())
    shutil.copy(Path(__file__).parent / "data" / "importers" / "phoenix_spans.jsonl", tmp_path /
                "spans.jsonl")
    with agentscope.analyze(tmp_path, db=":memory:") as a:
        assert a.load.formats == {"phoenix": 2} and not a.problems
        # the same spans twice: the second file's are duplicates
        assert a.load.duplicates == a.query_rows("SELECT count(*) FROM spans")[1][0][0] == 8


def _otlp_spans(spans) -> dict:
    """An OTLP/JSON request of (span_id, parent_id, name, start_s, end_s, operation)."""
    t0 = 1_700_000_000_000_000_000
    return {"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "ab" * 16, "spanId": sid, "parentSpanId": parent or "", "name": name,
        "startTimeUnixNano": str(t0 + int(a * 1e9)), "endTimeUnixNano": str(t0 + int(b * 1e9)),
        "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": op}}]}
        for sid, parent, name, a, b, op in spans]}]}]}


def test_orphans_are_adopted_by_their_traces_true_root_never_by_each_other(tmp_path):
    missing = "ff" * 8
    a = ("a" * 16, missing, "tool A", 0, 10, "execute_tool")
    b = ("b" * 16, missing, "chat B", 2, 3, "chat")  # beside A under the missing parent
    root = ("c" * 16, None, "agent", 0, 20, "invoke_agent")
    (tmp_path / "partial.json").write_text(json.dumps(_otlp_spans([a, b])))
    with agentscope.analyze(tmp_path / "partial.json") as an:
        (t,) = an.task_results
        assert t.trace_id == "ab" * 16  # a partial trace keeps its identity
        assert [(s.name, s.start_ns - t.start_ns, s.end_ns - t.start_ns)
                for s in t.segments] == [("tool A", 0, 10 * 10**9)]  # B never inside A
        assert (an.summary.orphan_spans, an.summary.orphan_roots) == (2, 2)
    (tmp_path / "whole.json").write_text(json.dumps(_otlp_spans([root, a, b])))
    with agentscope.analyze(tmp_path / "whole.json") as an:
        (t,) = an.task_results
        assert t.name == "agent"
        assert [(s.name, s.cls) for s in t.segments] == [("tool A", "io"),
                                                         ("agent", "untraced")]
        assert (an.summary.orphan_spans, an.summary.orphan_roots) == (2, 0)


def test_long_otlp_lines_and_a_long_compact_document_are_each_read_right(tmp_path):
    # a first line past the 64 KiB head: the Collector's request per line when the file ends
    # with a newline (read incrementally); a compact document json.dump wrote (no newline)
    req = json.loads(OTLP.read_text())
    spans = req["resourceSpans"][0]["scopeSpans"][0]["spans"]
    big = dict(req)
    for s in spans:
        s["attributes"] = s.get("attributes", []) + [
            {"key": "pad", "value": {"stringValue": "x" * 12_000}}]
    text = json.dumps(big)
    assert len(text) > 70_000
    (tmp_path / "lines.jsonl").write_text(text + "\n")
    (tmp_path / "doc.json").write_text(text.replace("ab", "cd"))  # other ids, no newline
    from agentscope.store.inputs import find

    formats = {s.rel: s.format for s in find(tmp_path)[0]}
    assert formats == {"lines.jsonl": "otlp-lines", "doc.json": "otlp"}
    with agentscope.analyze(tmp_path, db=":memory:") as a:
        assert not a.problems and a.load.formats == {"otlp-lines": 1, "otlp": 1}


def test_thousands_of_one_trace_files_load_together_and_once(tmp_path):
    # a Langfuse or any-agent export is one small file per trace: they are inserted in
    # batches, each file still accounted for (a second load finds every one unchanged)
    doc = json.loads(ANYAGENT.read_text())
    for i in range(300):
        for span in doc["spans"]:
            for ctx in (span.get("context") or {}, span.get("parent") or {}):
                if isinstance(ctx.get("trace_id"), int):
                    ctx["trace_id"] = ctx["trace_id"] % 10**12 + i * 10**12 + 1
        (tmp_path / f"trace-{i:04}.json").write_text(json.dumps(doc))
    with agentscope.analyze(tmp_path) as a:
        assert a.load.files_loaded == 300 and not a.problems
        assert len(a.task_results) == 300 and a.summary.spans == 300 * 6
        per_file = a.query_rows("SELECT min(records), max(records), count(*) FROM "
                                "loaded_files")[1][0]
        assert per_file == (6, 6, 300)
    with agentscope.analyze(tmp_path) as again:
        assert again.load.files_unchanged == 300 and again.load.spans_added == 0


def test_an_otlp_file_read_another_way_than_before_is_read_again_from_its_start(tmp_path):
    # its first line (past the 64 KiB head) still being written: one document, not loaded;
    # once the line is complete the file is the Collector's lines, and nothing may be lost
    req = json.loads(OTLP.read_text())
    for s in req["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        s["attributes"] = s.get("attributes", []) + [
            {"key": "pad", "value": {"stringValue": "x" * 12_000}}]
    line = json.dumps(req)
    path = tmp_path / "collector.jsonl"
    path.write_text(line[: len(line) - 100])
    with agentscope.analyze(tmp_path) as a:
        assert a.load.formats == {"otlp": 1} and len(a.problems) == 1
    path.write_text(line + "\n")
    with agentscope.analyze(tmp_path) as a:
        assert a.load.formats == {"otlp-lines": 1}
        assert a.query_rows("SELECT count(*) FROM spans")[1][0][0] == 7
        assert not a.problems  # the old one is gone with what it was about


def test_a_broken_file_that_is_fixed_loses_its_old_problem(tmp_path):
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(b"\x1f\x8b" + b"garbage" * 10)
    with agentscope.analyze(tmp_path) as a:
        assert len(a.problems) == 1
    path.write_bytes(gzip.compress(TRACELAB.read_bytes()))
    with agentscope.analyze(tmp_path) as a:
        assert not a.problems and len(a.task_results) == 2


def test_only_a_request_is_otlp_not_another_export_that_holds_one(tmp_path):
    from agentscope.store.otlp import looks_like_otlp

    assert looks_like_otlp(b'  {\n  "resourceSpans": [') and looks_like_otlp(b'{"resource_spans":')
    assert not looks_like_otlp(b'{"trace": {"metadata": {"resourceSpans": []}}}')
    doc = OTLP.read_bytes()
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + doc)  # a BOM some editors write
    with agentscope.analyze(tmp_path, db=":memory:") as a:
        assert not a.problems and a.load.formats == {"otlp": 1} and a.summary.spans == 7


def test_a_single_file_that_is_not_a_trace_is_an_error_naming_it(tmp_path):
    path = tmp_path / "notes.csv"
    path.write_text("a,b\n1,2\n")
    for command in ("analyze", "check"):
        result = CliRunner().invoke(main, [command, str(path)])
        assert result.exit_code == 1, (command, result.output)
        assert "notes.csv" in result.output and "not a known trace format" in result.output
