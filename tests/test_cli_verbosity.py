"""-q/-v on every command, and a source with no task: a reason on stderr and exit 1, not an
empty table and exit 0 (issue 17, item 6)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from agentscope.cli import main

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"


def _commands(group: click.Group, prefix: tuple = ()) -> list:
    out = []
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            out += _commands(cmd, prefix + (name,))
        else:
            out.append(prefix + (name,))
    return out


@pytest.mark.parametrize("path", _commands(main), ids=" ".join)
def test_every_command_takes_quiet_and_verbose(path):
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0
    assert "-q, --quiet" in result.output and "-v, --verbose" in result.output


def test_an_empty_folder_says_why_and_exits_1(tmp_path):
    result = CliRunner().invoke(main, ["analyze", str(tmp_path), "--db", str(tmp_path / "x.db")])
    assert result.exit_code == 1
    assert result.stdout == ""  # no empty table
    assert "no trace files in" in result.stderr and "no tasks in" in result.stderr
    # a folder of documents only, in JSON: the document still comes, the exit code says it
    (tmp_path / "notes.txt").write_text("hello\n")
    result = CliRunner().invoke(main, ["analyze", str(tmp_path), "--format", "json",
                                       "--db", str(tmp_path / "x.db")])
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["tasks"] == [] and any("no trace files" in w for w in doc["warnings"])


def test_counters_without_spans_say_so(tmp_path):
    src = SAMPLES / "io" / "io-db"
    for f in src.glob("samples-*.jsonl"):
        shutil.copy(f, tmp_path / f.name)
    result = CliRunner().invoke(main, ["analyze", str(tmp_path), "--db", str(tmp_path / "x.db")])
    assert result.exit_code == 1
    assert "counter samples but no spans" in result.stderr and "no tasks in" in result.stderr


def test_quiet_prints_the_output_only(tmp_path):
    d = tmp_path / "t"
    shutil.copytree(SAMPLES / "io", d)
    (d / "stray.bin").write_bytes(b"\x00\x01 not a trace")  # a warning without -q
    loud = CliRunner().invoke(main, ["analyze", str(d), "--db", str(tmp_path / "a.db")])
    assert loud.exit_code == 0 and "stray.bin" in loud.stderr
    quiet = CliRunner().invoke(main, ["analyze", "-q", str(d), "--db", str(tmp_path / "b.db")])
    assert quiet.exit_code == 0 and quiet.stderr == ""
    assert quiet.stdout.splitlines()[0] == loud.stdout.splitlines()[0]  # the same report
    html = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", "-q", str(d), "--html", str(html)])
    assert result.exit_code == 0 and result.stderr == "" and html.stat().st_size > 0


def test_verbose_says_what_was_loaded(tmp_path):
    result = CliRunner().invoke(main, ["analyze", "-v", str(SAMPLES / "io"),
                                       "--db", str(tmp_path / "v.db")])
    assert result.exit_code == 0
    err = result.stderr
    assert "trace files (samples 9, spans 3)" in err
    assert "skipped, not traces: 6 (agentscope scenario labels, not traces)" in err
    assert "6 tasks; loaded and analysed in" in err
    again = CliRunner().invoke(main, ["analyze", "-v", str(SAMPLES / "io"),
                                      "--db", str(tmp_path / "v.db")])
    assert "12 unchanged since the last load; 0 spans and 0 samples added" in again.stderr


def test_quiet_and_verbose_together_is_a_usage_error():
    result = CliRunner().invoke(main, ["analyze", "-q", "-v", str(SAMPLES)])
    assert result.exit_code == 2 and "not both" in result.stderr


def test_quiet_run_still_says_why_a_program_could_not_start(tmp_path):
    result = CliRunner().invoke(main, ["run", "-q", "--trace-dir", str(tmp_path), "--",
                                       "no-such-program-here"])
    assert result.exit_code == 127
    assert "cannot start no-such-program-here" in result.stderr
    assert "sampling" not in result.stderr  # the informational lines are gone


def test_limit_0_leaves_the_task_table_out(tmp_path):
    result = CliRunner().invoke(main, ["analyze", str(SAMPLES / "io"), "--limit", "0",
                                       "--db", str(tmp_path / "l.db")])
    assert result.exit_code == 0
    assert "Tasks (slowest" not in result.stdout and "slowest task:" in result.stdout
    assert CliRunner().invoke(main, ["analyze", str(SAMPLES), "--limit", "-1"]).exit_code == 2


def test_verbosity_goes_before_the_command_too(tmp_path):
    result = CliRunner().invoke(main, ["-v", "analyze", str(SAMPLES / "io"),
                                       "--db", str(tmp_path / "v.db")])
    assert result.exit_code == 0 and "tasks; loaded and analysed in" in result.stderr
    result = CliRunner().invoke(main, ["-q", "analyze", str(tmp_path / "none"),
                                       "--db", str(tmp_path / "n.db")])
    assert result.exit_code == 2  # a missing path stays a usage error, said even with -q
    result = CliRunner().invoke(main, ["-q", "analyze", "-v", str(SAMPLES / "io")])
    assert result.exit_code == 2 and "not both" in result.stderr


def test_task_by_any_prefix_of_its_trace_id_and_in_markdown(tmp_path):
    a = CliRunner().invoke(main, ["analyze", str(SAMPLES / "io"), "--format", "json",
                                  "--db", str(tmp_path / "t.db")])
    ids = [t["trace_id"] for t in json.loads(a.stdout)["tasks"]]
    first = ids[0]
    short = next(k for k in range(1, len(first))
                 if sum(i.startswith(first[:k]) for i in ids) == 1)
    r = CliRunner().invoke(main, ["analyze", str(SAMPLES / "io"), "--task", first[:short],
                                  "--format", "markdown", "--db", str(tmp_path / "t.db")])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("## Task ") and f"`{first}`" in r.stdout
    assert "| start | end | span | stage | class | confidence | evidence |" in r.stdout


def test_a_folder_where_the_store_cannot_be_kept_is_analysed_in_memory(tmp_path):
    d = tmp_path / "t"
    shutil.copytree(SAMPLES / "io" / "io-db", d)
    (d / ".agentscope").write_text("not a folder")  # as a read-only folder refuses it
    result = CliRunner().invoke(main, ["analyze", str(d)])
    assert result.exit_code == 0, result.output
    assert "cannot keep the store in" in result.stderr and "--db FILE" in result.stderr
    assert "tasks, " in result.stdout  # the report all the same


def test_a_folder_with_no_traces_gets_no_store(tmp_path):
    (tmp_path / "notes.txt").write_text("hello\n")
    assert CliRunner().invoke(main, ["analyze", str(tmp_path)]).exit_code == 1
    assert not (tmp_path / ".agentscope").exists()
