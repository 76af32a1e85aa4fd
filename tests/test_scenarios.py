"""The labelled scenarios: every scenario's tasks get the verdict their workload says is true
(short runs; benchmarks/attribution_accuracy.py runs the long ones at two load levels), and the
scorer that compares the two."""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentscope.cli import main
from agentscope.scenarios import UNAVAILABLE, ScenarioFailed, catalogue, describe, run, score
from agentscope.scenarios.truth import Recorder, _score, read_truth

REPO = Path(__file__).resolve().parents[1]

# scenarios whose stage labels mislead: the labels alone name some of their tasks wrong
MISLEADING = {"cpu-model", "queue-behind-batch", "mislabeled", "memory-pagein", "loop-blocked",
              "cpu-library-threads", "contention-spans-only", "gil-bound"}


@pytest.fixture(scope="module")
def runs():
    # on the checkout's file system rather than /tmp (which may be in memory: the memory
    # scenarios page from disk)
    base = Path(tempfile.mkdtemp(prefix=".scenario-test-", dir=REPO))
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("name", list(catalogue()))
def test_scenario_tasks_get_their_true_verdict(runs, name):
    out = runs / name
    code = run(name, out, tasks=2, load=1, quiet=True)
    if code == UNAVAILABLE:
        pytest.skip(f"{name} cannot be produced on this machine (the run said why)")
    assert code == 0
    meta = json.loads((out / "scenario.json").read_text())["runs"][-1]
    assert meta["scenario"] == name and meta["exit_code"] == 0 and meta["machine"]["cpus"] > 0
    got = score(out)
    assert got.missing == 0 and got.untruthed == 0
    assert len(got.tasks) >= 2
    # a task whose truth is a near tie (its ledger's two classes within 10 %) may be named
    # either; its time is still scored below
    wrong = [t for t in got.tasks if not t.ok and t.verdict != t.near_tie]
    assert not wrong, describe(got)
    assert got.time_accuracy >= 0.8, describe(got)
    if name == "loop-blocked":  # the victim's evidence names the span that held its loop
        import agentscope

        with agentscope.analyze(out) as analysis:
            answers = [t for t in analysis.task_results if t.name == "answer"]
        assert answers and all("blocked by `embed` in task `index-docs`" in t.evidence[0]
                               for t in answers), [t.evidence for t in answers]
    if name in MISLEADING:
        base = score(out, labels_only=True)
        assert base.task_accuracy < 1 or base.time_accuracy < 0.8, describe(base)


# ---- the scorer -------------------------------------------------------------------------------

def _sections(*rows):
    """(trace, span, name, stage, seconds, {class: share}) -> the scorer's section rows."""
    from agentscope.analyzers.evidence import CLASSES

    return [(t, s, n, st, d, *[sh.get(c, 0.0) for c in CLASSES]) for t, s, n, st, d, sh in rows]


def test_scorer_counts_verdicts_and_time_against_the_truth():
    truths = {"t1": {"truth": "io", "scenario": "a", "ledger": {"io": 1.0}},
              "t2": {"truth": "queue", "scenario": "b", "ledger": {"queue": 2.0}},
              "t3": {"truth": "cpu", "scenario": "b"}}  # recorded, never analysed
    span_truth = {("t1", "root"): {"cpu": 1.0}, ("t1", "call"): {"io": 1.0},
                  ("t2", "srv"): {"queue": 0.75, "cpu": 0.25}}
    parents = {("t1", "call"): "root", ("t1", "inner"): "call", ("t2", "srv"): None}
    tasks = [("t1", "research", 1, "io", 0.8, {"io": 0.9}),
             ("t2", "chat", 2, "cpu", 0.5, {"cpu": 0.6}),
             ("t9", "other", 3, "io", 0.5, {"io": 1.0})]  # no truth: not scored
    sections = _sections(
        ("t1", "root", "research", "task", 0.1, {"cpu": 1.0}),
        ("t1", "inner", "parse", "tool", 0.9, {"io": 0.5, "cpu": 0.5}),  # inherits "call": io
        ("t2", "srv", "llm_request", "inference", 2.0, {"cpu": 0.5, "queue": 0.5}),
        ("t2", None, "(gap)", None, 0.5, {"io": 1.0}))  # no truth: counted apart
    s = _score(tasks, truths, span_truth, parents, sections)
    assert [t.ok for t in s.tasks] == [True, False]
    assert s.missing == 1 and s.untruthed == 1
    assert s.task_accuracy == pytest.approx(1 / 3)  # the lost task counts as wrong
    # t1: 0.1 + 0.9 * 0.5; t2: 2.0 * (min(.75, .5) + min(.25, .5))
    assert s.path_right_s == pytest.approx(0.1 + 0.45 + 1.5)
    assert s.path_s == pytest.approx(3.0) and s.path_unknown_s == pytest.approx(0.5)
    assert s.confusion()["queue"]["cpu"] == 1 and s.recall() == {"io": 1.0, "queue": 0.0}
    assert s.by_scenario() == {"a": (1, 1, pytest.approx(0.55)), "b": (0, 1, 0.75)}
    assert s.lost_time()[0][:2] == ("b", "llm_request")
    text = describe(s)
    assert "tasks named right: 1/3" in text and "truth queue" in text
    # what the lost time of a span was taken for, beside what it was
    assert s.classes_by_span[("b", "llm_request")] == (
        {"queue": pytest.approx(1.5), "cpu": pytest.approx(0.5)},
        {"cpu": pytest.approx(1.0), "queue": pytest.approx(1.0)})
    assert ("b/llm_request: 0.500 s of 2.000 s (truth: queue 1.500 s, cpu 0.500 s; "
            "analysis: cpu 1.000 s, queue 1.000 s)") in text


def test_a_near_tie_truth_names_its_second_class():
    from agentscope.scenarios.truth import TaskScore

    def task(truth, ledger, verdict="queue"):
        return TaskScore("s", "t", "n", truth, verdict, 0.8, {}, ledger)

    # whatif-slots' second request under load: 0.095 s computing, 0.092 s queued
    tie = task("cpu", {"cpu": 0.095, "queue": 0.092, "io": 0.001})
    assert tie.near_tie == "queue" and not tie.ok
    assert "truth cpu (cpu 0.10s, queue 0.09s, io 0.00s) (a near tie with queue)" in \
        describe(_score_of([tie]))
    assert task("cpu", {"cpu": 0.15, "queue": 0.11}).near_tie is None  # 27 % apart
    assert task("cpu", {"cpu": 0.15}).near_tie is None
    assert task("cpu", {"cpu": 0.1, "queue": 0.0}).near_tie is None
    assert task("cpu", {"queue": 0.1, "cpu": 0.1}).near_tie == "queue"  # an exact tie
    # a truth that is not the ledger's largest (set apart by its workload) is no tie of it
    assert task("io", {"cpu": 0.1, "queue": 0.095}).near_tie is None


def _score_of(tasks):
    from agentscope.scenarios.truth import Score

    return Score(tasks=tasks, path_s=1.0, path_right_s=1.0, path_unknown_s=0.0,
                 time_by_scenario={})


def _fake_span(name: str) -> object:
    """A span as the Recorder reads it: trace 0xABC, span 0x12."""
    ctx = types.SimpleNamespace(trace_id=0xABC, span_id=0x12)
    return types.SimpleNamespace(name=name, get_span_context=lambda: ctx)


def test_recorder_writes_what_the_workload_timed(tmp_path):
    Span = functools.partial(_fake_span, "x")
    rec = Recorder(tmp_path, "demo")
    rec.span(Span(), {"queue": 3.0, "cpu": 1.0})
    assert rec.task(Span(), {"cpu": 0.2, "io": 0.5}) == "io"
    assert not list(tmp_path.iterdir())  # nothing written while the workload runs
    rec.close()
    rec.close()  # idempotent: the lines are written once
    tasks, spans = read_truth(tmp_path)
    assert len((tmp_path / rec.path.name).read_text().splitlines()) == 2
    assert spans[(f"{0xABC:032x}", f"{0x12:016x}")] == {"queue": 0.75, "cpu": 0.25}
    assert tasks[f"{0xABC:032x}"]["truth"] == "io"
    with pytest.raises(ValueError):
        rec.span(Span(), {"disk": 1.0})


def test_children_the_workload_cannot_reach_take_the_truth_it_names(tmp_path):
    """A pool.wait span (made by agentscope's pool instrumentation, not the workload) under a
    step whose own truth is cpu is scored as the queue its workload named for it."""
    Span = functools.partial(_fake_span, "compress")
    rec = Recorder(tmp_path, "demo")
    rec.span(Span(), "cpu")
    rec.children(Span(), "pool.wait", "queue")
    rec.task(Span(), {"cpu": 1.0})
    rec.close()
    tasks, spans = read_truth(tmp_path)
    tid, step = f"{0xABC:032x}", f"{0x12:016x}"
    parents = {(tid, "w1"): step, (tid, step): None}
    sections = [(tid, "w1", "pool.wait", "queue", 0.5, 0, 0, 0, 0, 1.0, 0),
                (tid, step, "compress", "tool", 0.5, 0, 1.0, 0, 0, 0, 0)]
    score = _score([(tid, "compress", 0, "queue", 0.8, {"queue": 0.5, "cpu": 0.5})],
                   tasks, spans, parents, sections)
    assert score.time_accuracy == pytest.approx(1.0)


def test_a_bad_truth_line_names_its_file_and_line(tmp_path):
    (tmp_path / "truth-1.jsonl").write_text('{"kind": "task", "trace_id": "a", "truth": "io"}\n'
                                            "not json\n")
    with pytest.raises(ValueError, match=r"truth-1.jsonl:2"):
        read_truth(tmp_path)


def test_cli_lists_runs_and_scores():
    r = CliRunner().invoke(main, ["scenarios", "list"])
    assert r.exit_code == 0
    for name in catalogue():
        assert name in r.output
    assert "gpu:" in r.output  # says GPU-bound tasks are not produced here
    r = CliRunner().invoke(main, ["scenarios", "run", "no-such", "--out", "x"])
    assert r.exit_code == 2 and "no scenario" in r.output


def test_cli_score_without_truth_is_a_usage_error(tmp_path):
    r = CliRunner().invoke(main, ["scenarios", "score", str(tmp_path)])
    assert r.exit_code == 2 and "no truth files" in r.output


def test_the_shipped_sample_traces_get_the_verdicts_their_readme_promises():
    """sample_traces/{cpu,io,queue,memory,mixed-fleet,hard-cases} were recorded by these scenarios, with
    their truth: the analysis of the files as shipped names every task right."""
    got = score(REPO / "sample_traces")
    assert got.missing == 0 and len(got.tasks) == 42
    assert got.untruthed == 8  # sample_traces/example: the example agent, no truth recorded
    assert got.task_accuracy == 1.0, describe(got)
    assert got.time_accuracy >= 0.9, describe(got)
    assert set(got.recall()) == {"cpu", "memory", "io", "queue"}


def test_time_the_workload_could_not_time_is_scored_apart():
    truths = {"t": {"truth": "queue", "scenario": "s"}}
    span_truth = {("t", "root"): {"cpu": 1.0}, ("t", "hop"): {}}
    parents = {("t", "hop"): "root", ("t", "srv"): "hop"}
    span_truth[("t", "srv")] = {"queue": 1.0}
    sections = _sections(("t", "hop", "chat", "inference", 0.2, {"io": 1.0}),
                         ("t", "srv", "llm_request", "inference", 1.0, {"queue": 1.0}))
    s = _score([("t", "chat", 0, "queue", 0.9, {"queue": 1.0})], truths, span_truth, parents,
               sections)
    assert s.path_s == pytest.approx(1.0) and s.path_unknown_s == pytest.approx(0.2)
    assert s.time_accuracy == pytest.approx(1.0)
    assert "0.20 s more with no truth" in describe(s)


def test_a_folder_named_like_the_package_cannot_shadow_it(tmp_path, monkeypatch):
    """Run from a folder holding a checkout (a directory named agentscope), the scenario's
    processes still import the installed package: they start in the trace directory."""
    (tmp_path / "agentscope").mkdir()
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["scenarios", "run", "io-http", "--out", "rec", "--tasks", "1"])
    assert r.exit_code == 0, r.output
    assert read_truth(tmp_path / "rec")[0]
    meta = json.loads((tmp_path / "rec" / "scenario.json").read_text())["runs"][-1]
    assert meta["command"].endswith("--out rec --tasks 1 --load 1")


def test_a_failed_scenario_says_why_in_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTSCOPE_WHATIF_CHANGE", "tool=x")  # the workload refuses it
    out = tmp_path / "rec"
    with pytest.raises(ScenarioFailed, match=r"whatif-tool failed \(exit code 1\): "
                                             r"ValueError: AGENTSCOPE_WHATIF_CHANGE"):
        run("whatif-tool", out, tasks=1, quiet=True)
    assert list(out.iterdir()) == []
    r = CliRunner().invoke(main, ["scenarios", "run", "whatif-tool", "--out", str(out),
                                  "--tasks", "1"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "failed (exit code 1): ValueError" in r.output and list(out.iterdir()) == []
