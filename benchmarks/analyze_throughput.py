"""Throughput of the store and the analysis on generated agent traces.

Generates ``--tasks`` tasks (about 100 spans each, 4 parallel agent branches) as our span
files and a slice as OTLP/JSON lines, then measures, in one run:

  load (span files)     Store.load of the span files into a DuckDB file
  load (OTLP lines)     Store.load of the OTLP/JSON file
  fetch                 the analysis input query (self usage, parent indices) and its columns
                        out of DuckDB
  critical path         the walk alone, over every trace: the per-trace reference walk, and
                        the fleet walk the engine uses (walk_many, numpy lockstep)
  critical path + classification
                        the whole engine: walks, classification, shares, evidence
  counter series        the store's fetch of 10 Hz host counters (4 metrics) as series
  counter join          their means over every critical-path section (what the verdicts use
                        when samples exist)
  networkx baseline     HTA's approach, a longest path over an event DAG (networkx), on a
                        sample of traces; the ratio compares spans per second
  agentscope analyze    the CLI end to end, as a user runs it (`python -m agentscope.cli
                        analyze DIR --format table|json > file`, a fresh store, run first,
                        before this process holds any memory): wall time and peak RSS, on our
                        span files and on the OTLP/JSON lines file; with --baseline, the same
                        rows for an earlier source tree, interleaved in the same run
                        "again": the same command a second time over the store the first
                        made (not timed), with nothing new, or after 1 % more tasks were
                        written (what a user re-running it pays)
  scale                 with --scale 5,20: generated span files of 5M and 20M spans, analysed
                        by the CLI (table and json), wall time and peak RSS (and the baseline's
                        up to --scale-baseline-max millions)

Usage: python benchmarks/analyze_throughput.py [--tasks 10000] [--otlp-tasks 2000]
       [--sample 1000] [--repeat 3] [--baseline DIR] [--scale 5,20]
       (needs networkx for the baseline: pip install networkx)
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))


import numpy as np  # noqa: E402

from agentscope._gc import gc_paused  # noqa: E402
from agentscope.analyzers import engine  # noqa: E402
from agentscope.analyzers.counters import (CORES, METRICS, PSI_CPU, PSI_MEMORY,  # noqa: E402
                                           RUN_QUEUE, section_means)
from agentscope.analyzers.critical_path import walk_many  # noqa: E402
from agentscope.analyzers.reference import Buffers, walk_arrays  # noqa: E402
from agentscope.store.duckdb_store import Store  # noqa: E402


def networkx_longest_path(facts):
    """The critical path as the longest path of an event graph (HTA's model, simplified):
    nodes are span starts and ends; edges parent.start -> child.start, child.end ->
    parent.end, and each span's start -> end, weighted by the time between the events."""
    import networkx as nx

    g = nx.DiGraph()
    for f in facts:
        g.add_edge(("s", f.span_id), ("e", f.span_id), weight=f.end - f.start)
        if f.parent_id is not None:
            g.add_edge(("s", f.parent_id), ("s", f.span_id), weight=0)
            g.add_edge(("e", f.span_id), ("e", f.parent_id), weight=0)
    return nx.dag_longest_path(g, weight="weight")


REPO = Path(__file__).resolve().parents[1]


def measure_cli(source: Path, fmt: str, work: Path, tree: Path = REPO,
                extra: tuple = (), again: str = "") -> tuple:
    """`agentscope analyze SOURCE --format FMT > file` of the source tree ``tree`` in a child
    process (a fresh store, a working directory outside the tree): (wall seconds, its peak
    RSS in MB, bytes written). ``again``: "unchanged": the second run over the same store
    (the first not timed); "appended:N": the second run after N more tasks were written to
    SOURCE/appended/ (removed after)."""
    db, out = work / "cli.duckdb", work / "cli.out"
    for p in (db, Path(str(db) + ".wal")):
        p.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=str(tree))
    # as installed: pip writes each module's bytecode, the CLI does not compile its source at
    # every start (a shell with PYTHONDONTWRITEBYTECODE=1 added 0.1-0.3 s to every run here)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "agentscope")],
                   check=True, stdout=subprocess.DEVNULL)
    command = [sys.executable, "-m", "agentscope.cli", "analyze", str(source), "--db", str(db),
               "--format", fmt, *extra]
    added = source / "appended"
    if again:
        subprocess.run(command, stdout=subprocess.DEVNULL, cwd=work, env=env, check=True)
        if again.startswith("appended:"):
            from gen_traces import write_spanfiles

            write_spanfiles(added, int(again.split(":")[1]), spans_per_task=104, seed=4242)
    try:
        with open(out, "wb") as f:
            # started by a small launcher, not by this process: a child's peak RSS (ru_maxrss)
            # starts at its parent's RSS when forked (the kernel keeps it across exec)
            proc = subprocess.run([sys.executable, "-c", _LAUNCHER, *command], stdout=f,
                                  stderr=subprocess.PIPE, cwd=work, env=env)
    finally:
        shutil.rmtree(added, ignore_errors=True)
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, err[-2000:]
    wall, rss = (float(x) for x in err.strip().splitlines()[-1].split())
    size = out.stat().st_size
    out.unlink()
    db.unlink(missing_ok=True)
    return wall, rss, size



# runs its arguments as a child (stdout and stderr passed through); its last stderr line: the
# child's wall seconds and peak RSS in MB; its exit code the child's
_LAUNCHER = """
import os, subprocess, sys, time
t0 = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:])
_, status, usage = os.wait4(proc.pid, 0)
wall = time.perf_counter() - t0
print(f"{wall:.3f} {usage.ru_maxrss / 1024:.0f}", file=sys.stderr)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def cli_rows(args, rows: list, work: Path) -> list:
    """Each (label, source, format) run by the CLI of this tree and, with --baseline, of
    the baseline's, interleaved: [(label, tree name, [seconds], peak MB, output bytes)]."""
    trees = [("this tree", REPO)] + ([("baseline", Path(args.baseline))] if args.baseline
                                     else [])
    got: dict = {}
    for _ in range(args.cli_runs):
        for label, source, fmt, extra, *again in rows:
            for name, tree in trees:
                if extra and name == "baseline":  # (an option the baseline may not have)
                    continue
                wall, rss, size = measure_cli(source, fmt, work, tree, extra, *again)
                entry = got.setdefault((label, name), ([], [], size))
                entry[0].append(wall)
                entry[1].append(rss)
    return [(label, name, sorted(w), max(r), size)
            for (label, name), (w, r, size) in got.items()]


def print_cli(results: list) -> None:
    print(f"\n{'agentscope analyze, end to end':<56}{'tree':<11}{'median s':>9}"
          f"{'runs':>22}{'peak MB':>9}{'output MB':>10}")
    for label, name, walls, rss, size in results:
        runs = ", ".join(f"{x:.2f}" for x in walls)
        print(f"{label:<56}{name:<11}{walls[len(walls) // 2]:>9.2f}{runs:>22}{rss:>9.0f}"
              f"{size / 1e6:>10.1f}")


def scale_rows(args, work: Path) -> None:
    """--scale: generated span files of N million spans, analysed by the CLI."""
    for millions in [float(x) for x in args.scale.split(",") if x]:
        directory = work / f"scale-{millions:g}M"
        tasks = int(millions * 1e6 / 97)
        subprocess.run([sys.executable, "gen_traces.py", str(directory), "--tasks", str(tasks)],
                       cwd=Path(__file__).resolve().parent, check=True,
                       stdout=subprocess.DEVNULL)
        trees = [("this tree", REPO)]
        if args.baseline and millions <= args.scale_baseline_max:
            trees.append(("baseline", Path(args.baseline)))
        results = []
        for fmt in ("table", "json"):
            for name, tree in trees:
                wall, rss, size = measure_cli(directory, fmt, work, tree)
                results.append((f"{millions:g}M spans (span files), --format {fmt}", name,
                                [wall], rss, size))
        print_cli(results)
        shutil.rmtree(directory, ignore_errors=True)


def trace_ranges(trace_no):
    lo, n, out = 0, len(trace_no), []
    while lo < n:
        hi = lo + 1
        while hi < n and trace_no[hi] == trace_no[lo]:
            hi += 1
        out.append((lo, hi))
        lo = hi
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=10_000)
    ap.add_argument("--otlp-tasks", type=int, default=2_000)
    ap.add_argument("--sample", type=int, default=1000, help="traces for the networkx baseline")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of the engine and of the baseline (medians reported)")
    ap.add_argument("--cli-runs", type=int, default=3,
                    help="runs of each `agentscope analyze` row (median reported)")
    ap.add_argument("--baseline", default=None, metavar="DIR",
                    help="a source tree of an earlier version (e.g. a git worktree): its CLI "
                         "rows are measured too, interleaved with this tree's")
    ap.add_argument("--scale", default="", metavar="M[,M...]",
                    help="also analyse generated span files of these millions of spans")
    ap.add_argument("--scale-baseline-max", type=float, default=5,
                    help="the largest --scale (millions) the baseline is run on [5]")
    ap.add_argument("--scale-only", action="store_true", help="run the --scale rows alone")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="agentscope-analyze-bench-"))
    try:
        if args.scale_only:
            scale_rows(args, work)
            return 0
        return run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args, work: Path) -> int:
    figures = {}
    spans_dir, otlp_dir = work / "spans", work / "otlp"
    # generated in a child process, so that this one stays small while the CLI is measured
    gen = subprocess.run(
        [sys.executable, "-c", "import sys; from gen_traces import write_spanfiles, "
         "write_otlp_lines; from pathlib import Path; "
         f"print(write_spanfiles(Path({str(spans_dir)!r}), {args.tasks}, spans_per_task=104)); "
         f"print(write_otlp_lines(Path({str(otlp_dir / 'traces.jsonl')!r}), {args.otlp_tasks}, "
         "spans_per_task=104))"],
        cwd=Path(__file__).resolve().parent, stdout=subprocess.PIPE, text=True, check=True)
    n_spans, n_otlp = (int(x) for x in gen.stdout.split())

    # the CLI first, while this process holds no memory (on this VM a process that touches
    # memory another one just released pays for the page faults); a fresh store each run
    cli = cli_rows(args, [
        (f"span files ({n_spans} spans), table", spans_dir, "table", ()),
        (f"span files ({n_spans} spans), json", spans_dir, "json", ()),
        (f"OTLP/JSON lines ({n_otlp} spans), table", otlp_dir, "table", ()),
        (f"OTLP/JSON lines ({n_otlp} spans), json", otlp_dir, "json", ()),
        (f"OTLP/JSON lines ({n_otlp} spans), json --detail tasks", otlp_dir, "json",
         ("--detail", "tasks")),
        ("span files, again, nothing new, table", spans_dir, "table", (), "unchanged"),
        ("span files, again, nothing new, json", spans_dir, "json", (), "unchanged"),
        ("span files, again, 1% more tasks, table", spans_dir, "table", (),
         f"appended:{max(args.tasks // 100, 1)}"),
        ("span files, again, 1% more tasks, json", spans_dir, "json", (),
         f"appended:{max(args.tasks // 100, 1)}")], work)

    store = Store(work / "bench.duckdb")
    t0 = time.perf_counter()
    report = store.load(spans_dir)
    figures["load (span files)"] = (n_spans, time.perf_counter() - t0)
    assert report.spans_added == n_spans and not report.problems

    otlp_store = Store(work / "otlp.duckdb")
    t0 = time.perf_counter()
    report = otlp_store.load(otlp_dir)
    figures["load (OTLP lines)"] = (n_otlp, time.perf_counter() - t0)
    assert report.spans_added == n_otlp and not report.problems, report.problems[:3]
    otlp_store.close()

    # the ceilings under the two loads, in the same run: DuckDB's JSON reader alone over the
    # span files (into memory, no validation or on-disk insert), pyarrow's parse alone of the
    # OTLP file (no flattening, no insert)
    import duckdb

    from agentscope.store.loading import _struct
    from agentscope.store.schema import SPAN_COLUMNS

    con = duckdb.connect()
    files = sorted(str(p) for p in spans_dir.glob("spans-*.jsonl"))
    t0 = time.perf_counter()
    con.execute("CREATE TEMP TABLE r AS SELECT * FROM read_json(?, format = "
                "'newline_delimited', columns = " + _struct(SPAN_COLUMNS) + ")", [files])
    figures["ceiling: DuckDB read_json alone"] = (n_spans, time.perf_counter() - t0)
    con.close()
    try:
        import pyarrow.json as pj

        from agentscope.store.otlp_arrow import _schema

        t0 = time.perf_counter()
        pj.read_json(otlp_dir / "traces.jsonl", parse_options=pj.ParseOptions(
            explicit_schema=_schema(), unexpected_field_behavior="ignore"))
        figures["ceiling: pyarrow OTLP parse alone"] = (n_otlp, time.perf_counter() - t0)
    except ImportError:
        pass

    t0 = time.perf_counter()
    with gc_paused():  # as the front door does
        inp = store.analysis_input()
    figures["fetch"] = (n_spans, time.perf_counter() - t0)

    ranges = trace_ranges(inp.trace_no.tolist())
    lists = {c: getattr(inp, c).tolist() for c in ("parent_idx", "start_ns", "end_ns", "kind")}
    t0 = time.perf_counter()
    buf = Buffers(len(lists["parent_idx"]))
    for lo, hi in ranges:
        walk_arrays(lists["parent_idx"], lists["start_ns"], lists["end_ns"], lists["kind"], lo, hi,
                    buf=buf)
    figures["critical path (per-trace walk)"] = (n_spans, time.perf_counter() - t0)
    t0 = time.perf_counter()
    walk_many(inp.parent_idx, inp.start_ns, inp.end_ns, inp.kind, ranges)
    figures["critical path (fleet walk)"] = (n_spans, time.perf_counter() - t0)
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        fleet = engine.analyze(inp)
        times.append(time.perf_counter() - t0)
        assert len(fleet.tasks) == args.tasks
        del fleet
    figures["critical path + classification"] = (n_spans, sorted(times)[len(times) // 2])

    # counters: 10 Hz samples of the four host metrics the CPU/memory rules read, over the
    # whole time the traces span, joined to every critical-path section (the means over each)
    lo_ns, hi_ns = int(inp.start_ns.min()), int(inp.end_ns.max())
    ticks = (hi_ns - lo_ns) // 100_000_000 + 2
    for metric, expr in ((PSI_CPU, "random()"), (RUN_QUEUE, "random() * 4"),
                         (CORES, "2.0"), (PSI_MEMORY, "random() * 0.1")):
        store.con.execute(
            f"INSERT INTO samples SELECT {lo_ns} + i * 100000000, 'h', NULL, 'bench', NULL, "
            f"'{metric}', {expr}, 0 FROM range(0, {ticks}) t(i)")
    t0 = time.perf_counter()
    series = store.counter_series(METRICS)
    figures[f"counter series ({4 * ticks} samples)"] = (n_spans, time.perf_counter() - t0)
    with gc_paused():  # with samples in the store, the input carries the counter columns
        fleet = engine.analyze(store.analysis_input(with_counters=True))
    sec = fleet.sections
    t0 = time.perf_counter()  # the join alone (the engine runs it inside with these)
    section_means(series, np.full(len(sec), "h", dtype=object), sec.start_ns, sec.end_ns)
    join_s = time.perf_counter() - t0
    figures[f"counter join ({len(sec)} sections, {4 * ticks} samples)"] = (n_spans, join_s)
    del fleet, sec
    store.close()

    parents = inp.parent_idx
    sample = [[SimpleNamespace(span_id=inp.span_id[i],
                               parent_id=inp.span_id[parents[i]] if parents[i] >= 0 else None,
                               start=inp.start_ns[i], end=inp.end_ns[i])
               for i in range(lo, hi)] for lo, hi in ranges[: args.sample]]
    sample_spans = sum(len(f) for f in sample)
    try:
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            for facts in sample:
                networkx_longest_path(facts)
            times.append(time.perf_counter() - t0)
        figures["networkx baseline"] = (sample_spans, sorted(times)[len(times) // 2])
    except ImportError:
        print("networkx is not installed: no baseline (pip install networkx)")

    print(f"analyze throughput: {args.tasks} tasks, {n_spans} spans; OTLP {n_otlp} spans; "
          f"Python {platform.python_version()}, {os.cpu_count()} CPUs")
    print(f"{'step':<34}{'spans':>10}{'seconds':>10}{'spans/s':>12}")
    for name, (n, s) in figures.items():
        print(f"{name:<34}{n:>10}{s:>10.3f}{n / s:>12,.0f}")
    walk = figures["critical path + classification"]
    if "networkx baseline" in figures:
        nx_n, nx_s = figures["networkx baseline"]
        print(f"\ncritical path + classification vs networkx longest path: "
              f"{(walk[0] / walk[1]) / (nx_n / nx_s):.1f}x (target >= 30x)")
    print_cli(cli)
    print("targets (issue 19): OTLP json <= 6 s and <= 2 GB at 1M spans; span files <= 4 s; "
          "5M spans <= 30 s and <= 3 GB")
    if args.scale:
        scale_rows(args, work)
    load = figures["load (span files)"]
    print(f"targets: span files {load[0] / load[1]:,.0f}/s (>= 1.5M/s); OTLP "
          f"{figures['load (OTLP lines)'][0] / figures['load (OTLP lines)'][1]:,.0f}/s "
          f"(>= 0.5M/s); critical path + classification {walk[0] / walk[1]:,.0f}/s (>= 1M/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
