"""The command line: `agentscope check`, help and version, exit codes of ARCHITECTURE §6."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

import agentscope
from agentscope.cli import main
from agentscope.formats import spanfile
from agentscope.records import SpanRecord

REPO = Path(__file__).resolve().parents[1]
T0 = 1_700_000_000_000_000_000


def _record(span_id, stage="tool"):
    return SpanRecord("a" * 32, span_id, None, "n", stage, "internal", T0 + 10, T0 + 20, "unset", None,
                      "svc", "h", 1, 1, 5, 0, 0, 0, 0, 0, 0, 0, {})


def test_check_a_clean_directory(tmp_path):
    agentscope.init(tmp_path, flush_interval_s=0.1)
    with agentscope.task(name="t"):
        with agentscope.stage("tool"):
            pass
    agentscope.shutdown()
    result = CliRunner().invoke(main, ["check", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "2 spans in 1 traces" in result.output
    assert re.search(r"tool\s+1 spans", result.output)


def test_check_reports_bad_lines_and_exits_1(tmp_path):
    (tmp_path / "spans-h-1-1.jsonl").write_text(
        spanfile.encode(_record("1" * 16)) + '{"trace_id": "zz"}\n' + spanfile.encode(_record("1" * 16)))
    result = CliRunner().invoke(main, ["check", str(tmp_path), "--format", "json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["spans"] == 1 and report["duplicates"] == 1
    (problem,) = report["problems"]
    assert problem["line"] == 2 and problem["file"].endswith("spans-h-1-1.jsonl")
    assert "trace_id must be 32 lowercase hex digits" in problem["reason"]
    table = CliRunner().invoke(main, ["check", str(tmp_path)])
    assert table.exit_code == 1
    assert "spans-h-1-1.jsonl:2:" in table.output


def test_usage_errors_exit_2(tmp_path):
    result = CliRunner().invoke(main, ["check", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "no such trace directory" in result.output
    assert CliRunner().invoke(main, ["nonsense"]).exit_code == 2


def test_help_and_version():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0 and "check" in result.output
    assert agentscope.__version__ in CliRunner().invoke(main, ["--version"]).output


def test_every_command_is_documented():
    """docs/cli.md has a row for every command and subcommand, and the README names each
    top-level command (its link to the reference)."""
    import click

    reference = (REPO / "docs" / "cli.md").read_text()
    readme = " ".join((REPO / "README.md").read_text().split())
    for name, cmd in main.commands.items():
        assert f"`{name}`" in readme or f"agentscope {name}" in readme, name
        subs = cmd.commands if isinstance(cmd, click.Group) else {None: cmd}
        for sub in subs:
            full = f"agentscope {name}" + (f" {sub}" if sub else "")
            assert f"| `{full}" in reference, f"docs/cli.md does not document `{full}`"


SAMPLES = REPO / "sample_traces" / "example"


def _copy_samples(tmp_path):
    import shutil

    shutil.copytree(SAMPLES, tmp_path / "t", ignore=shutil.ignore_patterns(".agentscope"))
    return tmp_path / "t"


def test_analyze_sample_traces_in_every_format(tmp_path):
    d = _copy_samples(tmp_path)
    table = CliRunner().invoke(main, ["analyze", str(d)])
    assert table.exit_code == 0, table.output
    assert "Where the critical-path time went" in table.output and "fix-bug" in table.output
    doc = json.loads(CliRunner().invoke(main, ["analyze", str(d), "--format", "json"]).stdout)
    assert doc["schema"] == "agentscope.analysis/v1"
    assert doc["summary"]["tasks"] == 8
    verdicts = {t["name"]: t["bottleneck"] for t in doc["tasks"]}
    assert verdicts["fix-bug"] == "cpu" and verdicts["research"] == "io"
    md = CliRunner().invoke(main, ["analyze", str(d), "--format", "markdown"]).stdout
    assert md.startswith("## agentscope: 8 tasks") and "| research |" in md
    assert (d / ".agentscope" / "agentscope.duckdb").exists()


def test_analyze_reports_bad_input_and_exits_1(tmp_path):
    d = _copy_samples(tmp_path)
    (d / "spans-broken-1-1.jsonl").write_text('{"trace_id": 1}\n')
    result = CliRunner().invoke(main, ["analyze", str(d), "--format", "json"])
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["summary"]["tasks"] == 8  # the rest was analysed
    assert doc["problems"][0]["file"].endswith("spans-broken-1-1.jsonl")
    assert doc["problems"][0]["line"] == 1


def test_query_is_read_only_sql_over_the_store(tmp_path):
    d = _copy_samples(tmp_path)
    db = tmp_path / "store.duckdb"
    result = CliRunner().invoke(main, ["query", str(d), "--db", str(db), "--format", "json",
                                       "SELECT bottleneck, count(*) AS n FROM tasks "
                                       "GROUP BY ALL ORDER BY n DESC"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert sum(r["n"] for r in rows) == 8
    bad = CliRunner().invoke(main, ["query", str(d), "--db", str(db), "DELETE FROM spans"])
    assert bad.exit_code == 2 and "read-only" in bad.output.lower()
    csv_out = CliRunner().invoke(main, ["query", str(d), "--db", str(db), "--format", "csv",
                                        "SELECT count(*) AS n FROM critical_path"])
    assert csv_out.stdout.splitlines()[0] == "n"


def test_the_trace_generator_has_a_command_line(tmp_path):
    """benchmarks/gen_traces.py: --help says how to use it; a run writes what analyze reads."""
    import subprocess
    import sys

    gen = str(REPO / "benchmarks" / "gen_traces.py")
    r = subprocess.run([sys.executable, gen, "--help"], capture_output=True, text=True,
                       check=True)
    assert "usage:" in r.stdout and "--tasks" in r.stdout
    subprocess.run([sys.executable, gen, str(tmp_path / "t"), "--tasks", "3"], check=True,
                   capture_output=True)
    a = agentscope.analyze(tmp_path / "t")
    assert a.summary.tasks == 3


def test_the_readmes_queries_and_task_view_run_as_written(tmp_path):
    """Every `agentscope query traces/ "..."` of the README and docs/cli.md, as written, on a copy of the shipped
    traces; and `analyze --task` by a trace id's first characters, by a name, and not found."""
    import re
    import shutil

    readme = (REPO / "README.md").read_text() + (REPO / "docs" / "cli.md").read_text()
    queries = re.findall(r'agentscope query traces/ "(.*?)"', readme, flags=re.S)
    assert len(queries) >= 4
    traces = tmp_path / "traces"
    shutil.copytree(REPO / "sample_traces", traces,
                    ignore=shutil.ignore_patterns(".agentscope"))
    for sql in queries:
        r = CliRunner().invoke(main, ["query", str(traces), sql])
        assert r.exit_code == 0, (sql, r.output)
        assert len(r.output.splitlines()) >= 3, r.output
    a = agentscope.analyze(traces)
    slowest = max(a.task_results, key=lambda t: t.duration_ns)
    r = CliRunner().invoke(main, ["analyze", str(traces), "--task", slowest.trace_id[:8]])
    assert r.exit_code == 0 and slowest.trace_id in r.output and "critical path" in r.output
    r = CliRunner().invoke(main, ["analyze", str(traces), "--task", slowest.name])
    assert r.exit_code == 0 and slowest.trace_id in r.output
    r = CliRunner().invoke(main, ["analyze", str(traces), "--task", slowest.trace_id[:8],
                                  "--format", "json"])
    assert json.loads(r.output)["trace_id"] == slowest.trace_id
    r = CliRunner().invoke(main, ["analyze", str(traces), "--task", "no-such-task"])
    assert r.exit_code == 1 and "no task" in r.output
