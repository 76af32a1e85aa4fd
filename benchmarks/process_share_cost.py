"""What judging a framework's spans by their process tree's counters costs, end to end as a user
pays it: ``agentscope analyze DIR --format json`` on an agent's OpenTelemetry spans (no
accounting of ours) recorded under ``agentscope run``, against the same spans and samples whose
tree is another process's (nothing joins: each span keeps its stage label), in the same run.

The directory is made with the real OpenTelemetry SDK and agentscope's OTLPJsonFileExporter
(the Collector file exporter's format): ``--tasks`` agent tasks, ``--width`` at a time in one
process, each ``invoke_agent`` → ``chat`` (0.3 s) → ``execute_tool`` (1.2 s: ``compile``,
computing, in half the tasks; ``search``, waiting, in the others) → ``chat`` (0.3 s), and a
sidecar's samples for that process tree at 10 Hz
(``agentscope.tree.cpu.utilization``, ``agentscope.tree.runqueue_wait``, and the per-process
``process.cpu.utilization`` once a second), the tree's CPU being what the computing tools used.
The baseline's samples are the same with another pid.

Both runs are checked first (the joined run judges every computing tool ``cpu`` and every
other tool ``io``; the baseline judges them all from the label, ``io``), then timed
interleaved, ``--repeat`` times: the CLI as a subprocess with a fresh store, wall time from
start to exit (interpreter start, imports, load, analysis, the JSON report), and its peak RSS.

Usage: python benchmarks/process_share_cost.py [--tasks 10000] [--width 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

S = 1_000_000_000
HZ = 10
PID, OTHER = 4242, 9999
HOST = "bench-host"


def make(directory: Path, tasks: int, width: int, pid: int) -> int:
    """The spans (OTLP/JSON lines) and samples of ``tasks`` tasks; returns the span count."""
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from agentscope.capture.otlp_file import OTLPJsonFileExporter
    from agentscope.formats import samplefile
    from agentscope.records import SampleRecord

    directory.mkdir(parents=True)
    provider = TracerProvider(resource=Resource.create({
        "service.name": "bench-agent", "host.name": HOST, "process.pid": PID}))
    provider.add_span_processor(BatchSpanProcessor(
        OTLPJsonFileExporter(directory / "otlp-1.jsonl"), max_export_batch_size=1000,
        max_queue_size=1 << 20))
    tracer = provider.get_tracer("bench")
    t0 = 1_800_000_000 * S
    task_s = 1.9
    busy = []  # (start, end) of the computing tools
    spans = 0
    for k in range(tasks):
        start = t0 + int((k // width) * (task_s + 0.1) * S) + int((k % width) * 0.25 * S)
        root = tracer.start_span(f"invoke_agent a{k % 7}", start_time=start, attributes={
            "gen_ai.operation.name": "invoke_agent"})
        ctx = trace.set_span_in_context(root)
        at = start
        tool = "execute_tool compile" if k % 2 == 0 else "execute_tool search"
        for name, seconds, attrs in (
                ("chat m", 0.3, {"gen_ai.operation.name": "chat"}),
                (tool, 1.2, {"gen_ai.operation.name": "execute_tool"}),
                ("chat m", 0.3, {"gen_ai.operation.name": "chat"})):
            span = tracer.start_span(name, context=ctx, start_time=at, attributes=attrs)
            span.end(end_time=at + int(seconds * S))
            if name.startswith("execute") and k % 2 == 0:
                busy.append((at, at + int(seconds * S)))
            at += int(seconds * S)
            spans += 1
        root.end(end_time=at + int(0.05 * S))
        spans += 1
    provider.shutdown()
    # the tree's CPU: one core per computing tool open, sampled at 10 Hz
    import numpy as np

    end = max(b for _, b in busy) + 2 * S
    ts = np.arange(t0 - S, end, S // HZ, dtype=np.int64)
    cores = np.zeros(len(ts))
    for a, b in busy:  # the interval ending at ts[i] is (ts[i-1], ts[i]]
        lo, hi = np.searchsorted(ts, a), np.searchsorted(ts, b)
        cores[lo:hi + 1] += 1.0
    with open(directory / f"samples-{HOST}-{pid}-1-collector.jsonl", "w") as f:
        for i, t in enumerate(ts.tolist()):
            f.write(samplefile.encode(SampleRecord(t, HOST, pid, "process.tree", None,
                                                   "agentscope.tree.cpu.utilization",
                                                   float(cores[i]))))
            f.write(samplefile.encode(SampleRecord(t, HOST, pid, "process.tree", None,
                                                   "agentscope.tree.runqueue_wait", 0.0)))
            if i % HZ == 0:
                f.write(samplefile.encode(SampleRecord(
                    t, HOST, pid, "process.tree", None, "process.cpu.utilization",
                    float(cores[max(i - HZ, 0):i + 1].mean()))))
    return spans


def check(directory: Path, joined: bool) -> dict:
    import agentscope

    with agentscope.analyze(directory, db=":memory:") as a:
        tools = [(t.name, s) for t in a.task_results for s in t.segments
                 if s.name.startswith("execute_tool")]
        by = {"cpu": 0, "io": 0}
        for _, s in tools:
            by[s.cls] = by.get(s.cls, 0) + 1
        basis = {s.basis for _, s in tools}
    want = ({"cpu": len(tools) // 2 + len(tools) % 2, "io": len(tools) // 2} if joined
            else {"cpu": 0, "io": len(tools)})
    assert by == want, (joined, by, want)
    assert basis == ({"measured"} if joined else {"label"}), basis
    return by


def timed(directory: Path, db: Path) -> tuple:
    if db.exists():
        db.unlink()
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", (
        "import resource, sys; from agentscope.cli import main\n"
        "try:\n main()\nexcept SystemExit as e:\n code = e.code\nelse:\n code = 0\n"
        "sys.stderr.write('RSS %d\\n' % resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
        "sys.exit(code)"), "analyze", str(directory), "--format", "json", "--db", str(db)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - started
    assert proc.returncode == 0, proc.stderr[-2000:]
    rss = int(proc.stderr.rsplit("RSS ", 1)[1].split()[0]) / 1024
    return wall, rss


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=10000)
    p.add_argument("--width", type=int, default=4, help="tasks at once in the process")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="process-share-", dir=os.getcwd()))
    try:
        joined, other = root / "joined", root / "baseline"
        n = make(joined, args.tasks, args.width, PID)
        make(other, args.tasks, args.width, OTHER)
        check(joined, True)
        check(other, False)
        size = sum(f.stat().st_size for f in joined.iterdir()) / 1e6
        print(f"{args.tasks} tasks, {n} spans, {args.width} at a time in one process; "
              f"{size:.1f} MB (spans and samples); checked: computing tools cpu, the others io")
        walls: dict = {"joined": [], "baseline": []}
        rss: dict = {"joined": [], "baseline": []}
        for r in range(args.repeat):
            order = (("joined", joined), ("baseline", other))
            for name, d in (order if r % 2 == 0 else order[::-1]):
                w, m = timed(d, root / f"{name}.duckdb")
                walls[name].append(w)
                rss[name].append(m)
        print("| run | spans | `agentscope analyze --format json` wall s, median (min–max) | "
              "spans/s | peak RSS MB, median |")
        print("|---|---:|---:|---:|---:|")
        for name in ("joined", "baseline"):
            w = walls[name]
            med = statistics.median(w)
            print(f"| {name} | {n} | {med:.2f} ({min(w):.2f}–{max(w):.2f}) | {n / med:,.0f} | "
                  f"{statistics.median(rss[name]):.0f} |")
        ratio = statistics.median(walls["joined"]) / statistics.median(walls["baseline"])
        print(f"joined / baseline wall: {ratio:.2f}x")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"kept {root}")


if __name__ == "__main__":
    sys.exit(main())
