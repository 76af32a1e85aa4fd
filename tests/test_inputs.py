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
    assert "1 files (1 otlp)" in result.output and "truncated" in result.output


def test_otlp_metrics_and_logs_are_named_as_not_traces(tmp_path):
    shutil.copy(CORPUS / "otlp_examples" / "opentelemetry-proto" / "metrics.json", tmp_path)
    with agentscope.analyze(tmp_path, db=":memory:") as a:
        assert any("metrics.json (OTLP metrics, not traces)" in w for w in a.warnings)


def test_hostile_file_names_stay_data(tmp_path):
    name = "[red]x[bold]; rm -rf ~ $(id) \u202e.csv"
    (tmp_path / name).write_text("not a trace\n")
    result = CliRunner().invoke(main, ["analyze", str(tmp_path), "--format", "markdown"])
    assert result.exit_code == 0
    assert name in result.output  # printed as it is, not interpreted as markup


def test_a_phoenix_parquet_export_loads_from_a_directory(tmp_path):
    from .test_import_langfuse_anyagent_phoenix import _spans_parquet

    (tmp_path / "spans.parquet").write_bytes(_spans_parquet())
    shutil.copy(Path(__file__).parent / "data" / "importers" / "phoenix_spans.jsonl", tmp_path /
                "spans.jsonl")
    with agentscope.analyze(tmp_path, db=":memory:") as a:
        assert a.load.formats == {"phoenix": 2} and not a.problems
        # the same spans twice: the second file's are duplicates
        assert a.load.duplicates == a.query_rows("SELECT count(*) FROM spans")[1][0][0] == 8
