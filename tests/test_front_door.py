"""The front door, ``agentscope.analyze()``: the same analysis as the CLI, DataFrames with the
documented columns, read-only SQL, problems and warnings, and the verdicts on sample_traces/
pinned across the refactoring that introduced it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import agentscope
from agentscope.analysis import iso_time
from agentscope.cli import main
from agentscope.errors import QueryError

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
DOCS = REPO / "docs" / "analysis.md"
GOLDEN = Path(__file__).parent / "golden" / "sample_traces_verdicts.json"


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """The analysis of sample_traces/ through the API and the CLI's JSON, each into a fresh
    store of its own."""
    d = tmp_path_factory.mktemp("front")
    analysis = agentscope.analyze(SAMPLES, db=d / "api.duckdb")
    result = CliRunner().invoke(main, ["analyze", str(SAMPLES), "--format", "json", "--db",
                                       str(d / "cli.duckdb")])
    assert result.exit_code == 0, result.output
    return analysis, json.loads(result.stdout)


def test_api_and_cli_give_the_same_document(both):
    analysis, cli = both
    assert analysis.to_dict() == cli
    assert json.loads(analysis.to_json()) == cli
    assert analysis.summary.to_dict() == cli["summary"]
    assert len(analysis.task_results) == cli["summary"]["tasks"] == 50


def test_the_task_level_document_is_the_document_without_sections(both, tmp_path):
    """``--detail tasks`` (``to_dict(detail="tasks")``): every task as in the full
    document, without its critical_path; the rest the same. Not with another format."""
    analysis, cli = both
    tasks_only = analysis.to_dict(detail="tasks")
    full = {**cli, "tasks": [{k: v for k, v in t.items() if k != "critical_path"}
                             for t in cli["tasks"]]}
    assert tasks_only == full and all("critical_path" in t for t in cli["tasks"])
    assert json.loads(analysis.to_json(detail="tasks")) == full
    result = CliRunner().invoke(main, ["analyze", str(SAMPLES), "--format", "json",
                                       "--detail", "tasks", "--db", str(tmp_path / "t.duckdb")])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == full
    result = CliRunner().invoke(main, ["analyze", str(SAMPLES), "--detail", "tasks", "--db",
                                       str(tmp_path / "t.duckdb")])
    assert result.exit_code == 2 and "--format json" in result.output
    with pytest.raises(ValueError, match="detail"):
        analysis.to_dict(detail="spans")
    import io

    out = io.StringIO()
    with pytest.raises(ValueError, match="detail"):  # refused before anything is written
        analysis.write_json(out, detail="spans")
    assert out.getvalue() == ""


@pytest.mark.parametrize("fast", [True, False], ids=["orjson", "json"])
def test_the_written_document_is_the_document(both, monkeypatch, fast):
    """write_json (what the CLI does into a pipe) writes to_json's document a chunk of
    tasks at a time: the same text where orjson writes it, the same JSON where json does;
    both levels of detail; chunks that split the tasks anywhere."""
    import io

    from agentscope.analysis import document

    analysis, cli = both
    if not fast:
        monkeypatch.setattr(document, "_orjson", lambda value, indent: None)
    for chunk in (1, 7, 50, 1000):
        monkeypatch.setattr(document, "CHUNK_TASKS", chunk)
        for detail in ("sections", "tasks"):
            out = io.StringIO()
            analysis.write_json(out, detail=detail)
            whole = analysis.to_json(detail=detail)
            assert json.loads(out.getvalue()) == json.loads(whole)
            if fast:
                assert out.getvalue() == whole
    assert json.loads(out.getvalue())["summary"] == cli["summary"]


def test_tasks_frame_holds_the_documents_tasks(both):
    analysis, cli = both
    tasks = analysis.tasks
    assert isinstance(tasks, pd.DataFrame) and len(tasks) == len(cli["tasks"])
    assert str(tasks["start"].dtype) == "datetime64[ns, UTC]"
    for row, t in zip(tasks.to_dict("records"), cli["tasks"]):
        assert iso_time(row["start"].value) == t["start"]
        for k in ("trace_id", "name", "lane", "service", "duration_s", "bottleneck",
                  "confidence", "evidence", "spans"):
            assert row[k] == t[k], k
        assert {c: row[f"share_{c}"] for c in t["shares"]} == t["shares"]


def test_critical_path_frame_holds_the_documents_sections(both):
    analysis, cli = both
    cp = analysis.critical_path
    sections = [dict(s, trace_id=t["trace_id"], seq=i) for t in cli["tasks"]
                for i, s in enumerate(t["critical_path"])]
    assert len(cp) == len(sections)
    for row, s in zip(cp.to_dict("records"), sections):
        for k in ("trace_id", "seq", "span_id", "name", "stage", "start_s", "end_s", "class",
                  "confidence", "evidence"):
            assert row[k] == s[k], (k, row, s)
        shares = [row[f"share_{c}"] for c in ("gpu", "cpu", "memory", "io", "queue")]
        assert abs(sum(shares) - 1) < 1e-9
    # the same sections as the store's critical_path view
    view = analysis.query("SELECT trace_id, seq, span_id, class FROM critical_path "
                          "ORDER BY trace_id, seq")
    mine = cp.sort_values(["trace_id", "seq"])[["trace_id", "seq", "span_id", "class"]]
    assert view.values.tolist() == mine.values.tolist()


def _documented_columns(heading: str) -> list:
    """The column names listed in docs/analysis.md under ``heading`` (a table of them)."""
    text = DOCS.read_text()
    part = text[text.index(heading):]
    rows = re.findall(r"^\| `([a-z_]+)` \|", part.split("\n\n", 2)[1], flags=re.M)
    assert rows, heading
    return rows


def test_frames_have_the_documented_columns(both):
    analysis, _ = both
    assert list(analysis.tasks.columns) == _documented_columns("Columns of `a.tasks`")
    assert list(analysis.critical_path.columns) == \
        _documented_columns("Columns of `a.critical_path`")


def test_verdicts_on_sample_traces_are_pinned(both):
    """Each task's bottleneck, shares, evidence sentences and critical-path classes, and the
    scorer's figures, as they were before the front door (recorded from commit 7a89655, not
    from this code): the refactoring moved no verdict."""
    analysis, _ = both
    golden = json.loads(GOLDEN.read_text())
    got = {t.trace_id: t for t in analysis.task_results}
    assert set(got) == set(golden["tasks"])
    for trace_id, want in golden["tasks"].items():
        t = got[trace_id]
        assert (t.name, t.bottleneck) == (want["name"], want["bottleneck"]), trace_id
        for c, v in want["shares"].items():
            assert t.shares[c] == pytest.approx(v, abs=6e-5), (trace_id, c)
        assert list(t.evidence) == want["evidence"], trace_id
        assert [s.cls for s in t.segments] == want["path"], trace_id
    from agentscope.scenarios import score

    s = score(SAMPLES)
    want = golden["score"]
    assert (len(s.tasks), s.task_accuracy, s.untruthed) == \
        (want["tasks"], want["task_accuracy"], want["untruthed"])
    assert s.time_accuracy == pytest.approx(want["time_accuracy"], abs=1e-6)
    assert {k: [r, n] for k, (r, n, _) in s.by_scenario().items()} == want["scenarios"]


def test_query_is_read_only_sql_returning_a_dataframe(both):
    analysis, _ = both
    df = analysis.query("SELECT bottleneck, count(*) AS n FROM tasks GROUP BY ALL ORDER BY n DESC")
    assert isinstance(df, pd.DataFrame) and df["n"].sum() == 50
    columns, rows = analysis.query_rows("SELECT count(*) FROM spans")
    assert rows == [(263,)]
    with pytest.raises(QueryError, match="read-only"):
        analysis.query("DELETE FROM spans")
    with pytest.raises(QueryError):
        analysis.query("SELECT nonsense FROM nowhere")
    assert analysis.query_rows("SELECT count(*) FROM spans")[1] == [(263,)]


def test_breakdown_adds_up_to_the_critical_path(both):
    analysis, _ = both
    for by in ("stage", "lane"):
        seconds = sum(sum(row.values()) for row in analysis.breakdown(by).values())
        assert seconds == pytest.approx(analysis.summary.critical_path_s, rel=1e-6)
    assert set(analysis.breakdown("lane")) == {"online", "batch"}
    with pytest.raises(ValueError):
        analysis.breakdown("colour")


def test_stage_labels_name_gaps_and_missing_stages_once():
    """A section's stage label: ``(gap)`` between roots, ``(none)`` for a span with no stage
    (None or empty: one label, so the metrics by stage add them up together), else the
    stage; the codes and the labels agree, and breakdown sums by label."""
    import types

    import numpy as np

    from agentscope.analysis import Analysis
    from agentscope.analyzers.verdict import breakdown

    stage = np.asarray([None, "", "tool", None, "model", "tool", ""], dtype=object)
    span = np.asarray([None, "a", "b", "c", "d", "e", "f"], dtype=object)
    fake = types.SimpleNamespace(sections=types.SimpleNamespace(stage=stage, span_id=span))
    codes, labels = Analysis.stage_codes(fake)
    assert len(set(labels)) == len(labels)
    expected = ["(gap)", "(none)", "tool", "(none)", "model", "tool", "(none)"]
    assert [labels[c] for c in codes] == expected
    assert Analysis.section_labels(types.SimpleNamespace(
        sections=fake.sections, stage_codes=lambda: (codes, labels)), "stage") == expected
    class Sections(types.SimpleNamespace):
        def __len__(self):
            return len(self.start_ns)

    sections = Sections(start_ns=np.zeros(7, dtype=np.int64), end_ns=np.arange(1, 8) * 10 ** 9,
                        shares=np.eye(6)[[0, 1, 2, 3, 4, 5, 0]], assumed=None)
    by_label = breakdown(sections, expected)
    assert list(by_label) == ["(gap)", "(none)", "model", "tool"]
    assert sum(by_label["(none)"].values()) == 2 + 4 + 7
    assert breakdown(sections, codes) == {k: by_label[labels[k]] for k in sorted(set(codes))}


def test_problems_are_named_and_the_rest_is_analysed(tmp_path):
    d = tmp_path / "t"
    shutil.copytree(SAMPLES / "io", d)
    (d / "spans-bad-1-1.jsonl").write_text('{"trace_id": "zz"}\n')
    with agentscope.analyze(d, db=":memory:") as analysis:
        (p,) = analysis.problems
        assert p.path.endswith("spans-bad-1-1.jsonl") and p.line == 1
        assert analysis.summary.input_problems == 1
        assert len(analysis.task_results) == len(agentscope.analyze(
            SAMPLES / "io", db=":memory:").task_results) > 0


def test_nothing_to_analyse_says_why(tmp_path):
    with agentscope.analyze(tmp_path, db=":memory:") as analysis:
        assert analysis.task_results == () and analysis.tasks.empty
        assert list(analysis.tasks.columns) == _documented_columns("Columns of `a.tasks`")
        assert analysis.critical_path.empty
        (warning,) = analysis.warnings
        assert "no trace files" in warning
    with pytest.raises(FileNotFoundError):
        agentscope.analyze(tmp_path / "missing")


def test_an_in_memory_store_is_closed_with_the_analysis():
    analysis = agentscope.analyze(SAMPLES / "cpu", db=":memory:")
    assert analysis.query_rows("SELECT count(*) > 0 FROM spans")[1] == [(True,)]
    analysis.close()
    with pytest.raises(ValueError, match="closed"):
        analysis.query("SELECT 1")


@pytest.mark.parametrize("doc,heading", [("docs/analysis.md", "## Python API"),
                                         ("docs/reports.md", "### From Python"),
                                         ("docs/whatif.md", "From Python:"),
                                         ("docs/api.md", "## Analysing from Python")])
def test_the_documented_examples_run(tmp_path, monkeypatch, capsys, doc, heading):
    """The Python examples of the docs, as written, on a copy of sample_traces/; what a
    ``print(...)  # <output>`` line's comment says it prints (up to a ``...``) is printed."""
    text = (REPO / doc).read_text()
    part = text[text.index(heading):]
    code = re.search(r"```python\n(.*?)```", part, flags=re.S).group(1)
    shutil.copytree(SAMPLES, tmp_path / "sample_traces")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, doc, "exec"), {})
    assert (tmp_path / "sample_traces" / ".agentscope" / "agentscope.duckdb").exists()
    printed = capsys.readouterr().out
    for said in re.findall(r"^print\(.*\)\s+# ([{<].*)$", code, flags=re.M):
        assert said.split("...")[0].rstrip(", ") in printed, said
