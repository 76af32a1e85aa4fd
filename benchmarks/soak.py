"""A long run: 1,000 asyncio tasks and 8 threads recording spans, its memory over time.

A child process runs the workload for --seconds with tracing on (lean mode, default
settings), then a second child runs the same workload with tracing off (the baseline, for
--baseline-seconds). Each prints its resident memory (RSS) every second. Then the spans on
disk are checked:

* every span line whole (a torn or bad line is counted);
* spans written = the writer's own count = the lines on disk, and drops (should be 0);
* parents right: each task is a root, each stage's parent is its task, in the same trace.

Workload, per thread: a ``batch`` task with a CPU ``tool`` stage and an ``inference`` stage
that sleeps 2 ms; per asyncio task: a task with a ``tool`` stage that awaits a 1-7 ms sleep
and a ``context`` stage.

Usage: python benchmarks/soak.py [--seconds 180] [--baseline-seconds 60]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

WORKER = r"""
import asyncio, json, os, sys, threading, time
import agentscope

mode, seconds, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
if mode == "on":
    rt = agentscope.init(out, service="soak")
    assert rt is not None and rt.mode == "lean"
else:
    os.environ["AGENTSCOPE_DISABLED"] = "1"
    assert agentscope.init(out) is None
PAGE = os.sysconf("SC_PAGE_SIZE")
start = time.monotonic()
stop = start + seconds
produced = [0] * 9


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def monitor():
    while time.monotonic() < stop:
        print(json.dumps({"t": round(time.monotonic() - start, 1), "rss": rss()}), flush=True)
        time.sleep(1.0)


def thread_work(k):
    n = 0
    while time.monotonic() < stop:
        with agentscope.task(name="thread-task", lane="batch"):
            with agentscope.stage("tool", name="thread-tool"):
                sum(range(300))
            with agentscope.stage("inference", name="thread-llm"):
                time.sleep(0.002)
        n += 3
    produced[k] = n


async def async_work(i):
    n = 0
    while time.monotonic() < stop:
        async with agentscope.task(name="async-task"):
            async with agentscope.stage("tool", name="async-tool"):
                await asyncio.sleep(0.001 * (1 + i % 7))
            with agentscope.stage("context", name="async-ctx"):
                pass
        n += 3
    return n


async def main():
    produced[8] = sum(await asyncio.gather(*[async_work(i) for i in range(1000)]))


threading.Thread(target=monitor, daemon=True).start()
threads = [threading.Thread(target=thread_work, args=(k,)) for k in range(8)]
for t in threads:
    t.start()
asyncio.run(main())
for t in threads:
    t.join()
end = {"produced": sum(produced), "rss": rss()}
if mode == "on":
    agentscope.shutdown()
    end["stats"] = {k: v for k, v in rt.writer.stats().items() if k != "files"}
print(json.dumps({"end": end}), flush=True)
"""

TASKS = {"thread-task", "async-task"}


def run(mode: str, seconds: float, out: str) -> tuple:
    proc = subprocess.run([sys.executable, "-c", WORKER, mode, str(seconds), out],
                          capture_output=True, text=True, timeout=seconds * 3 + 120)
    if proc.returncode:
        raise RuntimeError(f"the {mode} worker failed:\n{proc.stderr[-2000:]}")
    samples, end = [], None
    for line in proc.stdout.splitlines():
        doc = json.loads(line)
        if "end" in doc:
            end = doc["end"]
        else:
            samples.append((doc["t"], doc["rss"]))
    return samples, end


def check_files(directory: str) -> dict:
    """Whole lines, and parents: each task a root, each stage a child of a task of its trace."""
    tasks, children = {}, []
    lines = torn = bad = task_with_parent = 0
    for path in glob.glob(os.path.join(directory, "spans-*.jsonl")):
        with open(path, "rb") as f:
            data = f.read()
        if data and not data.endswith(b"\n"):
            torn += 1
        for raw in data.split(b"\n"):
            if not raw.strip():
                continue
            lines += 1
            try:
                span = json.loads(raw)
            except ValueError:
                bad += 1
                continue
            trace = int(span["trace_id"][:16], 16)
            if span["name"] in TASKS:
                tasks[int(span["span_id"], 16)] = trace
                task_with_parent += span["parent_span_id"] is not None
            else:
                parent = span["parent_span_id"]
                children.append((None if parent is None else int(parent, 16), trace))
    wrong = sum(1 for parent, trace in children if tasks.get(parent) != trace)
    return {"lines": lines, "torn": torn, "bad": bad, "tasks": len(tasks),
            "stages": len(children), "wrong_parents": wrong + task_with_parent}


def mib(n: float) -> str:
    return f"{n / 2**20:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=180.0)
    ap.add_argument("--baseline-seconds", type=float, default=60.0,
                    help="how long the tracing-off baseline runs (at most --seconds)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="agentscope-soak-")
    try:
        out = os.path.join(work, "traces")
        t0 = time.perf_counter()
        on, end_on = run("on", args.seconds, out)
        wall_on = time.perf_counter() - t0
        files = check_files(out)
        off, end_off = run("off", min(args.seconds, args.baseline_seconds),
                           os.path.join(work, "off"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    stats = end_on["stats"]
    rss_on, rss_off = [r for _, r in on], [r for _, r in off]
    # after the first 10 % (start-up), does memory still grow? the slope of the rest, MiB/min
    steady = [(t, r) for t, r in on if t >= args.seconds * 0.1] or on
    slope = 0.0
    if len(steady) > 2:
        ts, rs = [t for t, _ in steady], [r for _, r in steady]
        tm, rm = statistics.fmean(ts), statistics.fmean(rs)
        slope = sum((t - tm) * (r - rm) for t, r in steady) / max(
            sum((t - tm) ** 2 for t in ts), 1e-9) * 60 / 2**20
    print(f"soak: 1000 asyncio tasks + 8 threads, {args.seconds:g} s traced, "
          f"{min(args.seconds, args.baseline_seconds):g} s baseline; Python "
          f"{platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}")
    print(f"{'':<26}{'tracing on':>16}{'tracing off':>16}")
    print(f"{'RSS MiB min':<26}{mib(min(rss_on)):>16}{mib(min(rss_off)):>16}")
    print(f"{'RSS MiB max':<26}{mib(max(rss_on)):>16}{mib(max(rss_off)):>16}")
    print(f"{'RSS MiB at the end':<26}{mib(end_on['rss']):>16}{mib(end_off['rss']):>16}")
    print(f"{'spans (off: the same work)':<26}{end_on['produced']:>16}{end_off['produced']:>16}")
    print(f"{'spans/s':<26}{end_on['produced'] / args.seconds:>16.0f}"
          f"{end_off['produced'] / min(args.seconds, args.baseline_seconds):>16.0f}")
    marks = [on[int(i * (len(on) - 1) / 9)] for i in range(10)] if on else []
    print("RSS over time (s: MiB): " + ", ".join(f"{t:g}: {mib(r)}" for t, r in marks))
    print(f"RSS growth after start-up: {slope:+.2f} MiB/min")
    print(f"written {stats['written']} (lines on disk {files['lines']}), dropped "
          f"{stats['dropped']}, write errors {stats['write_errors']}, producer catch-ups "
          f"{stats['caught_up']}; torn {files['torn']}, bad lines {files['bad']}")
    print(f"parents: {files['tasks']} tasks, {files['stages']} stages, "
          f"{files['wrong_parents']} wrong")
    problems = []
    if stats["dropped"] or stats["write_errors"]:
        problems.append(f"{stats['dropped']} dropped, {stats['write_errors']} write errors")
    if files["lines"] != stats["written"] or files["lines"] != end_on["produced"]:
        problems.append(f"{end_on['produced']} produced, {stats['written']} counted written, "
                        f"{files['lines']} on disk")
    if files["wrong_parents"] or files["torn"] or files["bad"]:
        problems.append(f"{files['wrong_parents']} wrong parents, {files['torn']} torn, "
                        f"{files['bad']} bad lines")
    print(f"wall {wall_on:.0f} s for the traced run")
    if problems:
        print("verdict: NOT clean: " + "; ".join(problems))
        return 1
    print(f"verdict: clean: every span produced is on disk once, with the right parent; RSS "
          f"{mib(min(rss_on))}-{mib(max(rss_on))} MiB traced against "
          f"{mib(min(rss_off))}-{mib(max(rss_off))} MiB untraced")
    return 0


if __name__ == "__main__":
    sys.exit(main())
