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


def _record(span_id, stage="tool"):
    return SpanRecord("a" * 32, span_id, None, "n", stage, "internal", 10, 20, "unset", None,
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


def test_every_command_is_documented_in_the_readme():
    readme = (REPO / "README.md").read_text()
    for name in main.commands:
        assert f"agentscope {name}" in readme, f"README does not document `agentscope {name}`"
