"""What-if: re-timing traces with faster work (the path moving to another branch), the replay
on other cores and server slots, selectors, the CLI and the JSON document."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import numpy as np
import pytest
from click.testing import CliRunner

import agentscope
from agentscope.analyzers.evidence import CLASSES
from agentscope.analyzers.replay import Capacity
from agentscope.analyzers.timing import JOIN, PARENT, SIBLING, retime
from agentscope.analyzers.whatif import SCHEMA, Speedup, Spans, predict
from agentscope.cli import main

from .conftest import PYTHON, REPO, child_env

S = 1_000_000_000


def _spans(rows: list, tasks: list, **cols) -> Spans:
    """A Spans table from rows (parent, start_s, end_s, name, stage) with tasks' bounds."""
    n = len(rows)
    shares = cols.pop("shares", np.tile([0, 0, 0, 1.0, 0, 0], (n, 1))[:, :len(CLASSES)])
    T = len(tasks)
    return Spans(
        tasks, np.asarray([r[0] for r in rows], dtype=np.int64),
        np.asarray([int(r[1] * S) for r in rows], dtype=np.int64),
        np.asarray([int(r[2] * S) for r in rows], dtype=np.int64),
        np.full(n, None, dtype=object), np.asarray([r[3] for r in rows], dtype=object),
        np.asarray([r[4] for r in rows], dtype=object),
        cols.pop("service", np.full(n, "agent", dtype=object)), shares,
        cols.pop("cpu_ns", np.full(n, -1.0)), cols.pop("queue_ns", np.zeros(n)),
        np.full(n, None, dtype=object), np.full(n, None, dtype=object),
        [f"t{t}" for t in range(T)], ["task"] * T, cols.pop("lanes", [None] * T),
        ["agent"] * T)


PARALLEL = [(-1, 0.0, 1.1, "agent", "agent"), (0, 0.05, 1.05, "fetch-a", "tool"),
            (0, 0.05, 0.75, "fetch-b", "tool")]


def test_a_faster_branch_hands_the_path_to_the_other_one():
    """Two parallel tools of 1.0 s and 0.7 s: making the first twice as fast saves 0.3 s
    (the other branch now holds the path), where subtracting the saved time says 0.5 s."""
    p = predict(_spans(PARALLEL, [(0, 3)]), [Speedup.parse("name:fetch-a=2")])
    t = p.tasks[0]
    assert t.baseline_s == pytest.approx(1.1)
    assert t.predicted_s == pytest.approx(0.8)
    assert t.naive_s == pytest.approx(0.6)
    assert p.selected_spans == 1


def test_sequential_steps_save_what_they_save():
    rows = [(-1, 0.0, 2.1, "agent", "agent"), (0, 0.0, 1.0, "a", "tool"),
            (0, 1.0, 2.0, "b", "tool")]
    p = predict(_spans(rows, [(0, 3)]), ["stage:tool=2"])
    assert p.tasks[0].predicted_s == pytest.approx(2.1 - 1.0)
    # the parent's own time (0.1 s after the last tool) is its own: an agent speedup
    p = predict(_spans(rows, [(0, 3)]), ["name:agent=2"])
    assert p.tasks[0].predicted_s == pytest.approx(2.05)


def test_anchors_join_siblings_and_follow_running_ones():
    # c starts after a and b ended (a join on both); d starts while c runs, 0.1 s into it
    rows = [(-1, 0.0, 3.0, "p", "agent"), (0, 0.0, 1.0, "a", "tool"), (0, 0.0, 0.5, "b", "tool"),
            (0, 1.2, 2.0, "c", "tool"), (0, 1.3, 2.5, "d", "tool")]
    s = _spans(rows, [(0, 5)])
    d = s.deps
    assert (d.s_kind[3], d.s_gap[3]) == (JOIN, int(0.2 * S))
    assert (d.s_kind[4], d.s_ref[4], d.s_gap[4]) == (SIBLING, 3, int(0.1 * S))
    # a and b started together: b (ending first) from the parent's start, a with b
    assert d.s_kind[2] == PARENT and (d.s_kind[1], d.s_ref[1], d.s_gap[1]) == (SIBLING, 2, 0)
    # a twice as fast: b (0.5 s) now ends last, so c starts at 0.5 + 0.2
    new_s, new_e = retime(d, np.asarray([1, 0.5, 1, 1, 1]))
    assert new_s[3] == int(0.7 * S) and new_s[4] == int(0.8 * S)
    assert new_e[0] == int((0.8 + 1.2 + 0.5) * S)  # d ends 2.0; then the parent's 0.5 s


def test_a_child_that_outlives_its_parent_was_not_waited_for():
    rows = [(-1, 0.0, 1.0, "p", "agent"), (0, 0.2, 5.0, "fire-and-forget", "tool")]
    p = predict(_spans(rows, [(0, 2)]), ["name:fire-and-forget=10"])
    assert p.tasks[0].predicted_s == pytest.approx(1.0)


def test_a_task_that_followed_another_follows_it_after_the_change():
    rows = [(-1, 0.0, 1.0, "t1", "task"), (-1, 1.005, 2.0, "t2", "task")]
    p = predict(_spans(rows, [(0, 1), (1, 2)]), ["stage:task=2"])
    assert [t.predicted_s for t in p.tasks] == pytest.approx([0.5, 0.4975])
    assert p.predicted.makespan_s == pytest.approx(0.5 + 0.005 + 0.4975)


def test_class_speedup_changes_only_that_part_of_each_span():
    shares = np.zeros((2, len(CLASSES)))
    shares[0, CLASSES.index("cpu")] = 1.0
    shares[1, CLASSES.index("io")] = 0.5
    shares[1, CLASSES.index("cpu")] = 0.5
    rows = [(-1, 0.0, 1.0, "agent", "agent"), (0, 0.0, 1.0, "tool", "tool")]
    p = predict(_spans(rows, [(0, 2)], shares=shares), ["class:io=2"])
    assert p.tasks[0].predicted_s == pytest.approx(0.75)


@pytest.mark.parametrize("bad", ["tool=2", "stage:tool", "colour:red=2", "stage:tool=0",
                                 "stage:tool=x", "class:network=2", "stage:tool=inf"])
def test_malformed_speedups_say_what_is_wrong(bad):
    with pytest.raises(ValueError, match="--speedup"):
        Speedup.parse(bad)


def test_globs_select_names():
    s = Speedup.parse("name:fetch-*=2")
    assert s.matches(np.asarray(["fetch-a", "fetch-b", "plan", None], dtype=object)).tolist() \
        == [True, True, False, False]


# ---- the replay ---------------------------------------------------------------------------------
def test_replay_on_one_core_shares_it():
    """Two tasks computing 1 s each at once, recorded on two cores: on one core both take
    2 s; on the recorded two, nothing changes."""
    rows = [(-1, 0.0, 1.0, "t1", "tool"), (-1, 0.0, 1.0, "t2", "tool")]
    shares = np.zeros((2, len(CLASSES)))
    shares[:, CLASSES.index("cpu")] = 1.0
    s = _spans(rows, [(0, 1), (1, 2)], shares=shares, cpu_ns=np.full(2, float(S)))
    s = Spans(**{**s.__dict__, "host": np.asarray(["h", "h"], dtype=object)})
    cap = Capacity({"h": 2})
    one = predict(s, (), cpus=1, capacity=cap)
    assert [t.predicted_s for t in one.tasks] == pytest.approx([2.0, 2.0])
    same = predict(s, (), cpus=2, capacity=cap)
    assert [t.predicted_s for t in same.tasks] == pytest.approx([1.0, 1.0])
    assert one.naive.mean_s == pytest.approx(2.0)  # the cpu time scaled by 2 / 1


def test_replay_with_more_slots_removes_the_queue():
    """Three requests at a one-slot server, each served 0.2 s: they waited 0, 0.2, 0.4 s.
    With three slots, none waits."""
    rows = [(-1, 0.0, 0.2, "req", "inference"), (-1, 0.0, 0.4, "req", "inference"),
            (-1, 0.0, 0.6, "req", "inference")]
    shares = np.zeros((3, len(CLASSES)))
    shares[:, CLASSES.index("cpu")] = [1.0, 0.5, 1 / 3]
    shares[:, CLASSES.index("queue")] = [0.0, 0.5, 2 / 3]
    s = _spans(rows, [(0, 1), (1, 2), (2, 3)], shares=shares,
               queue_ns=np.asarray([0, 0.2 * S, 0.4 * S]),
               service=np.full(3, "model-server", dtype=object))
    p = predict(s, (), slots={"model-server": 3})
    assert [t.predicted_s for t in p.tasks] == pytest.approx([0.2, 0.2, 0.2])
    assert any("1 slot in the recording" in a for a in p.assumptions)
    with pytest.raises(ValueError, match="no requests to 'db'"):
        predict(s, (), slots={"db": 2})


# ---- real workloads -----------------------------------------------------------------------------
def test_real_parallel_branches(trace_dir):
    """Recorded: an agent that runs two tools at once (0.3 s and 0.2 s); the prediction for
    the first twice as fast is what the recorded times give, whatever this machine's speed."""
    with agentscope.task("fan-out"):
        with agentscope.stage("agent", name="planner"):
            threads = [threading.Thread(target=_tool, args=(name, s))
                       for name, s in (("fetch-a", 0.3), ("fetch-b", 0.2))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    agentscope.shutdown()
    a = agentscope.analyze(trace_dir)
    spans = {s.name: s for s in a.spans_of([a.task_results[0].trace_id])[
        a.task_results[0].trace_id]}
    p = a.whatif("name:fetch-a=2")
    fa, fb, task = spans["fetch-a"], spans["fetch-b"], a.task_results[0]
    # the tools ran side by side: the task now ends when the later of the two does, plus the
    # time the planner and the task spent after the last one ended
    tail = task.start_ns + task.duration_ns - max(fa.end_ns, fb.end_ns)
    new_a_end = fa.start_ns + (fa.end_ns - fa.start_ns) / 2
    expect = max(new_a_end, fb.end_ns) + tail - task.start_ns
    assert p.tasks[0].predicted_s == pytest.approx(expect / 1e9, abs=2e-6)
    # the recorded path: fetch-a held it the whole time it ran; the naive figure takes half
    # of that off, and claims too much
    assert p.tasks[0].naive_s == pytest.approx(
        (task.duration_ns - (fa.end_ns - fa.start_ns) / 2) / 1e9, abs=1e-3)
    assert p.tasks[0].predicted_s > p.tasks[0].naive_s + 0.05
    assert p.to_dict()["schema"] == SCHEMA


def _tool(name: str, seconds: float) -> None:
    with agentscope.stage("tool", name=name):
        time.sleep(seconds)


def test_real_replay_on_one_core(tmp_path):
    """Two agents whose tools compute 0.3 s each in child processes, recorded under
    `agentscope run` (the host's cores sampled): on one core, the later of them cannot end
    before both tools' CPU time has been spent; on the recorded cores, nothing changes."""
    out = tmp_path / "traces"
    r = subprocess.run([PYTHON, "-m", "agentscope.cli", "run", "--trace-dir", str(out),
                        "--hz", "20", "--no-per-core", "--", PYTHON,
                        str(REPO / "tests" / "workloads" / "contend.py"), "2", "child"],
                       env=child_env(CONTEND_WORK_S="0.3"), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    a = agentscope.analyze(out)
    assert len(a.task_results) == 2
    cores = a.query("SELECT max(value) AS c FROM samples "
                    "WHERE metric = 'system.cpu.logical.count'")["c"][0]
    tools = a.query("SELECT sum(child_cpu_ns) AS c FROM spans WHERE name = 'crunch'")["c"][0]
    one = a.whatif(cpus=1)
    first = min(t.start_ns for t in a.task_results)
    last_end = max(first + (t.predicted_s * 1e9) for t, r in zip(one.tasks, a.task_results))
    assert one.predicted.mean_s > one.baseline.mean_s
    assert max(t.start_ns + p.predicted_s * 1e9 for t, p in zip(a.task_results, one.tasks)) \
        - first >= tools * 0.95
    assert last_end > 0
    same = a.whatif(cpus=int(cores))
    assert [t.predicted_s for t in same.tasks] == pytest.approx(
        [t.baseline_s for t in same.tasks], abs=1e-6)


def test_cli_whatif_json_and_errors(tmp_path):
    src = REPO / "sample_traces" / "mixed-fleet"
    db = str(tmp_path / "db.duckdb")
    r = CliRunner().invoke(main, ["whatif", str(src), "--db", db, "--speedup",
                                  "stage:tool=2", "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["schema"] == SCHEMA
    for key in ("tasks", "mean_s", "p50_s", "p95_s", "p99_s", "throughput_per_h"):
        assert key in doc["baseline"] and key in doc["predicted"]
    assert doc["predicted"]["mean_s"] < doc["baseline"]["mean_s"]
    assert {"trace_id", "name", "baseline_s", "predicted_s"} <= set(doc["tasks"][0])
    assert doc["assumptions"]
    r = CliRunner().invoke(main, ["whatif", str(src), "--db", db, "--speedup", "stage=2"])
    assert r.exit_code == 2 and "KIND:VALUE=FACTOR" in r.output
    r = CliRunner().invoke(main, ["whatif", str(src), "--db", db, "--slots", "x"])
    assert r.exit_code == 2 and "SERVER=N" in r.output
    r = CliRunner().invoke(main, ["whatif", str(src), "--db", db, "--speedup",
                                  "stage:tool=2", "--format", "markdown"])
    assert r.exit_code == 0 and "| mean |" in r.output


def test_what_would_help_is_the_best_predictions_in_every_report(tmp_path):
    """The reports' suggestions are predictions the user can run again with `whatif`: the same
    figures, best first; hostile names stay inert in them."""
    from agentscope.exporters.html_report import build
    from agentscope.exporters.table import markdown

    a = agentscope.analyze(REPO / "sample_traces" / "cpu", str(tmp_path / "db.duckdb"))
    helps = a.suggestions
    assert 1 <= len(helps) <= 3
    assert [p.gain for p in helps] == sorted((p.gain for p in helps), reverse=True)
    first = helps[0]
    again = a.whatif(first.change["speedups"], cpus=first.change["cpus"],
                     slots=first.change["slots"])
    assert again.predicted.mean_s == pytest.approx(first.predicted.mean_s)
    md = markdown(a)
    assert "What would help" in md and md.count("\n- ") >= len(helps)
    assert len(build(a)["help"]) == len(helps)
    r = CliRunner().invoke(main, ["analyze", str(REPO / "sample_traces" / "cpu"), "--db",
                                  str(tmp_path / "db.duckdb")])
    assert "What would help" in r.output


def _one_tool(trace_dir, task: str, tool: str) -> "agentscope.analysis.Analysis":
    """A task of one 50 ms tool, recorded and analysed."""
    with agentscope.task(task), agentscope.stage("tool", name=tool):
        time.sleep(0.05)
    agentscope.shutdown()
    return agentscope.analyze(trace_dir)


def test_hostile_names_in_suggestions_stay_inert(trace_dir):
    from agentscope.exporters.table import markdown
    from agentscope.exporters.views import help_lines

    a = _one_tool(trace_dir, "t", "[bold]x\x1b[2J<img src=x onerror=alert(1)>")
    lines = help_lines(a)
    assert lines and not any("\x1b" in line for line in lines)
    helped = markdown(a).split("What would help")[1]
    assert "<img" not in helped.replace("\\<img", "") and "\x1b" not in helped


def test_nothing_changed_gives_every_recorded_time_back(tmp_path):
    """Re-timed with nothing sped up, every span of the shipped traces (fan-outs, overlaps,
    abutting and zero-length children, several roots, fire-and-forget) starts and ends when it
    did; the replay at the recorded capacity predicts the recording too."""
    from agentscope.analysis.whatif import spans_for_prediction

    a = agentscope.analyze(REPO / "sample_traces", str(tmp_path / "db.duckdb"))
    with a._store.open() as store:
        spans, capacity, _ = spans_for_prediction(store)
    d = spans.deps
    new_s, new_e = retime(d, np.ones(len(spans)))
    rows = np.concatenate([np.arange(lo, hi) for lo, hi in spans.bounds])
    assert np.array_equal(new_s[rows], np.asarray(d.start)[rows])
    assert np.array_equal(new_e[rows], np.asarray(d.end)[rows])
    cores = max(capacity.cores.values())
    p = predict(spans, (), cpus=cores, capacity=capacity)
    assert [t.predicted_s for t in p.tasks] == pytest.approx([t.baseline_s for t in p.tasks])
    # a sample of the tasks is the same tasks, their spans copied out
    half = spans.every(2)
    assert half.task_id == spans.task_id[::2]
    assert [t.predicted_s for t in predict(half, ["stage:tool=2"]).tasks] == pytest.approx(
        [t.predicted_s for t in predict(spans, ["stage:tool=2"]).tasks][::2])


# ---- what review found (each a reproducer) ------------------------------------------------------
def test_long_chains_of_instant_spans_do_not_overflow_the_replay():
    """200 zero-length markers at one instant (imported traces with ms timestamps), and a
    300-deep nesting with identical ends: the replay runs them from a work list."""
    rows = [(-1, 0.0, 1.0, "p", "agent")] + [(0, 0.5, 0.5, f"mark{k}", "tool")
                                              for k in range(200)]
    p = predict(_spans(rows, [(0, 201)]), (), cpus=2, capacity=Capacity({None: 2}))
    assert p.tasks[0].predicted_s == pytest.approx(1.0)
    deep = [(-1, 0.0, 1.0, "s0", "agent")] + [(k, 0.0, 1.0, f"s{k + 1}", "agent")
                                               for k in range(300)]
    p = predict(_spans(deep, [(0, 301)]), (), cpus=1, capacity=Capacity({None: 2}))
    assert p.tasks[0].predicted_s == pytest.approx(1.0)


def test_empty_names_never_break_the_proposals(trace_dir):
    from agentscope.exporters.views import help_lines

    a = _one_tool(trace_dir, "", "")

    assert all("''" not in line for line in help_lines(a))
    assert a.suggestions  # the stage still is one


def test_a_child_before_its_parent_keeps_its_offset_unscaled():
    """Clock skew: C starts 0.5 s before its parent. Making the parent faster or slower moves
    only the parent's own time; the negative offset never scales, and time never runs back."""
    rows = [(-1, 1.0, 2.0, "P", "agent"), (0, 0.5, 1.2, "C", "tool"),
            (0, 1.3, 1.9, "D", "tool")]
    s = _spans(rows, [(0, 3)])
    faster = predict(s, ["name:P=2"]).tasks[0].predicted_s
    slower = predict(s, ["name:P=0.5"]).tasks[0].predicted_s
    assert faster < 1.0 < slower
    assert predict(s, ["name:C=4"]).tasks[0].predicted_s >= 0
    assert s.deps.own_ns()[0] == pytest.approx(0.2 * S)  # 1.2-1.3 and 1.9-2.0


def test_parallel_time_is_not_the_parents_own():
    """P is covered by A (0-10 s) and B (5-12 s): it has no own time, so speeding it up
    changes nothing."""
    rows = [(-1, 0.0, 12.0, "P", "agent"), (0, 0.0, 10.0, "A", "tool"),
            (0, 5.0, 12.0, "B", "tool")]
    assert predict(_spans(rows, [(0, 3)]), ["name:P=2"]).tasks[0].predicted_s == \
        pytest.approx(12.0)


def test_a_call_back_into_the_same_server_is_part_of_its_request():
    """S -> other service -> S: one request, not two; with one slot it cannot wait for
    itself."""
    rows = [(-1, 0.0, 1.0, "S", "inference"), (0, 0.1, 0.9, "mid", "tool"),
            (1, 0.2, 0.8, "S-inner", "inference")]
    service = np.asarray(["srv", "other", "srv"], dtype=object)
    s = _spans(rows, [(0, 3)], service=service)
    from agentscope.analyzers.replay import requests_to

    assert requests_to(s, "srv").tolist() == [True, False, False]
    for n in (1, 2, 3):
        assert predict(s, (), slots={"srv": n}).tasks[0].predicted_s == pytest.approx(1.0)


def test_following_tasks_are_found_quickly():
    """20k one-span tasks of one service: finding which task followed which is a lookup
    per task, not a scan (this took minutes when it was a scan)."""
    n = 20_000
    rows = [(-1, k * 0.01, k * 0.01 + 0.005, "t", "task") for k in range(n)]
    s = _spans(rows, [(k, k + 1) for k in range(n)])
    t0 = time.process_time()
    d = s.deps
    assert time.process_time() - t0 < 30  # seconds of CPU; ~0.3 s here
    assert d.s_kind[n + 1] == 4  # FOLLOW: it started 5 ms after the first one ended


def _random_fleet(rng, before: bool) -> tuple:
    rows, tasks = [], []
    for _ in range(rng.randint(1, 3)):
        lo, base = len(rows), rng.randint(0, 20) * 0.1
        for i in range(rng.randint(1, 10)):
            if i == 0 or rng.random() < 0.15:  # several roots, now and then
                s = base + rng.randint(0, 10) * 0.1
                rows.append((-1, s, s + rng.randint(0, 10) * 0.1, f"n{rng.randint(0, 3)}",
                             "agent"))
                continue
            p = rng.randint(lo, lo + i - 1)
            ps, pe = rows[p][1], rows[p][2]
            s = ps + rng.randint(-3 if before else 0, int(round((pe - ps) * 10))) * 0.1
            rows.append((p, round(s, 3), round(s + rng.randint(0, 8) * 0.1, 3),
                         f"n{rng.randint(0, 3)}", rng.choice(["tool", "agent"])))
        tasks.append((lo, len(rows)))
    return rows, tasks


def test_random_trees_retime_and_replay_agree():
    """Random fleets (overlaps, zero-length spans, identical starts, children past their
    parent, several roots): at scale 1 every recorded time comes back; with random speedups
    the re-timing and the replay without capacity limits agree to the ns; with children
    that start before their parent (clock skew), no span ends before it starts."""
    import random

    from agentscope.analyzers.replay import _Sim

    rng = random.Random(16)
    for _ in range(300):
        rows, tasks = _random_fleet(rng, before=False)
        s = _spans(rows, tasks)
        n = len(s)
        same_s, same_e = retime(s.deps, np.ones(n))
        assert np.array_equal(same_e[:n], np.maximum(s.end, s.start))
        assert np.array_equal(same_s[:n], s.start)
        scale = np.asarray([rng.choice([1, 0.5, 2, 0.25]) for _ in range(n)])
        new_s, new_e = retime(s.deps, scale)
        sim_s, sim_e = _Sim(s, scale, None, {}).run()
        assert np.allclose(sim_s, new_s, atol=2) and np.allclose(sim_e, new_e, atol=2)
    for _ in range(300):
        rows, tasks = _random_fleet(rng, before=True)
        s = _spans(rows, tasks)
        new_s, new_e = retime(s.deps, [rng.choice([1, 0.5, 2, 0.25, 4]) for _ in rows])
        assert np.all(new_e >= new_s)


def test_a_slot_handed_over_is_one_slot():
    """A request's span ends a few ms after it gave the slot back (its reply is written
    after): the next one's service overlapping it by 3 ms is still one slot; by 100 ms, two."""
    from agentscope.analyzers.replay import recorded_slots

    rows = [(-1, 0.0, 0.2, "req", "inference"), (-1, 0.05, 0.4, "req", "inference")]
    handed = _spans(rows, [(0, 1), (1, 2)], queue_ns=np.asarray([0.0, 0.147 * S]))
    assert recorded_slots(handed, np.arange(2)) == 1
    both = _spans(rows, [(0, 1), (1, 2)], queue_ns=np.asarray([0.0, 0.05 * S]))
    assert recorded_slots(both, np.arange(2)) == 2
