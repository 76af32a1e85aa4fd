"""What a SIGKILL loses: spans lost per kill, and the age of the oldest one lost.

A child process records spans through ``agentscope.task`` and ``agentscope.stage`` (lean
mode, the default flush interval unless --flush-interval), at 5,000 spans/s on one thread
and at full speed on --threads threads (producers that hold the interpreter lock most of the
time, the case where the writer's thread is starved). It writes its own ground truth beside
the spans: after each span ends, its id and end time go into a shared memory file (one
region per thread; a span whose end is not yet there is not counted as produced). The child
is killed with SIGKILL at a random time, --kills times per load; then the spans on disk are
compared with the ground truth:

* lost: spans that ended (per the ground truth) and are not in the files;
* oldest lost age: the kill time minus the end time of the oldest span lost;
* the bound (docs/capture-safety.md): about one flush interval. A kill "holds" when the
  oldest lost span ended at most one flush interval plus --slack before the kill;
* also checked: at most one torn line per file, no span twice, nothing but the last line bad.

Usage: python benchmarks/crash_loss.py [--kills 20] [--threads 4] [--flush-interval 1.0]
       [--min-s 1.5] [--max-s 4.0] [--slack 0.25] [--seed 1]
"""

from __future__ import annotations

import argparse
import glob
import json
import mmap
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

CAPACITY = 4_000_000  # ground-truth entries per thread (16 bytes each, in a sparse file)
HEADER = 64  # int64 counters: one per thread

CHILD = r"""
import mmap, os, sys, threading, time
import agentscope

out, truth, rate, threads, interval = sys.argv[1], sys.argv[2], float(sys.argv[3]), \
    int(sys.argv[4]), float(sys.argv[5])
CAPACITY, HEADER = int(sys.argv[6]), int(sys.argv[7])
rt = agentscope.init(out, service="crash-loss", flush_interval_s=interval)
assert rt is not None and rt.mode == "lean"
fd = os.open(truth, os.O_RDWR)
mm = mmap.mmap(fd, 0)
q = memoryview(mm).cast("q")
TOP = 1 << 63


def produce(k):
    count = 0
    base = HEADER + k * CAPACITY * 2
    task, stage = agentscope.task, agentscope.stage
    per_batch = 25
    gap = per_batch * 2 / rate if rate else 0.0  # two spans per iteration
    next_t = time.perf_counter()
    while count + 2 <= CAPACITY:
        for _ in range(per_batch):
            with task(name="t") as t:
                with stage("tool", name="s") as s:
                    pass
                i = base + 2 * count
                q[i], q[i + 1] = s.span_id - TOP, s.end_ns
                q[k] = count = count + 1
            i = base + 2 * count
            q[i], q[i + 1] = t.span_id - TOP, t.end_ns
            q[k] = count = count + 1
        if gap:
            next_t += gap
            delay = next_t - time.perf_counter()
            if delay > 0:
                time.sleep(delay)


for k in range(threads):
    threading.Thread(target=produce, args=(k,), daemon=True).start()
print("ready", flush=True)
time.sleep(3600)
"""


def one_kill(rate: float, threads: int, interval: float, after_s: float) -> dict:
    work = tempfile.mkdtemp(prefix="agentscope-crash-")
    out = os.path.join(work, "traces")
    truth = os.path.join(work, "truth.bin")
    size = (HEADER + threads * CAPACITY * 2) * 8
    with open(truth, "wb") as f:
        f.truncate(size)  # sparse: pages are made as the child writes
    proc = subprocess.Popen([sys.executable, "-c", CHILD, out, truth, str(rate), str(threads),
                             str(interval), str(CAPACITY), str(HEADER)],
                            stdout=subprocess.PIPE, text=True)
    try:
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the child did not start")
        time.sleep(after_s)
        kill_ns = time.time_ns()
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    produced = {}
    with open(truth, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        q = memoryview(mm).cast("q")
        for k in range(threads):
            base = HEADER + k * CAPACITY * 2
            for i in range(q[k]):
                produced[(q[base + 2 * i] + (1 << 63)) & ((1 << 64) - 1)] = q[base + 2 * i + 1]
        del q
        mm.close()
    on_disk, torn, bad, duplicates = set(), 0, 0, 0
    for path in glob.glob(os.path.join(out, "spans-*.jsonl")):
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
        last = len(lines) - 1
        for n, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                sid = int(json.loads(line)["span_id"], 16)
            except (ValueError, KeyError):
                if n == last:
                    torn += 1  # the unterminated last line
                else:
                    bad += 1
                continue
            if sid in on_disk:
                duplicates += 1
            on_disk.add(sid)
    lost_ends = [end for sid, end in produced.items() if sid not in on_disk]
    recent = sum(1 for end in produced.values() if kill_ns - end <= interval * 1e9)
    shutil.rmtree(work, ignore_errors=True)
    return {"produced": len(produced), "lost": len(lost_ends), "torn": torn, "bad": bad,
            "duplicates": duplicates, "in_last_interval": recent,
            "oldest_lost_s": (kill_ns - min(lost_ends)) / 1e9 if lost_ends else 0.0,
            "rate": len(produced) / max(after_s, 1e-9)}


def pct(values: list, p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=20, help="kills per load")
    ap.add_argument("--threads", type=int, default=4, help="producer threads at full speed")
    ap.add_argument("--flush-interval", type=float, default=1.0)
    ap.add_argument("--min-s", type=float, default=1.5, help="earliest kill after start")
    ap.add_argument("--max-s", type=float, default=4.0, help="latest kill after start")
    ap.add_argument("--slack", type=float, default=0.25,
                    help="seconds beyond one flush interval a kill may lose and still hold")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    interval = args.flush_interval
    bound = interval + args.slack
    loads = [("5k spans/s, 1 thread", 5000.0, 1),
             (f"full speed, {args.threads} threads", 0.0, args.threads)]
    print(f"crash_loss: {args.kills} SIGKILLs per load at a random {args.min_s}-{args.max_s} s, "
          f"flush interval {interval} s, bound {bound:.2f} s; Python "
          f"{platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}")
    header = (f"{'load':<24}{'spans/s':>10}{'lost/kill med':>15}{'max':>8}"
              f"{'ended last interval':>21}{'oldest lost s med':>19}{'p95':>7}{'max':>7}"
              f"{'torn':>6}{'bad':>5}{'dup':>5}{'held':>8}")
    rows, verdicts = [], []
    for label, rate, threads in loads:
        runs = [one_kill(rate, threads, interval, rng.uniform(args.min_s, args.max_s))
                for _ in range(args.kills)]
        ages = [r["oldest_lost_s"] for r in runs]
        lost = [r["lost"] for r in runs]
        held = sum(1 for r in runs if r["oldest_lost_s"] <= bound)
        damaged = sum(r["bad"] + r["duplicates"] for r in runs) + sum(
            1 for r in runs if r["torn"] > 1)
        rows.append(f"{label:<24}{statistics.median(r['rate'] for r in runs):>10.0f}"
                    f"{statistics.median(lost):>15.0f}{max(lost):>8}"
                    f"{statistics.median(r['in_last_interval'] for r in runs):>21.0f}"
                    f"{statistics.median(ages):>19.3f}{pct(ages, 95):>7.3f}{max(ages):>7.3f}"
                    f"{sum(r['torn'] for r in runs):>6}{sum(r['bad'] for r in runs):>5}"
                    f"{sum(r['duplicates'] for r in runs):>5}{held:>5}/{len(runs):<2}")
        verdicts.append((label, held, len(runs), max(ages), damaged))
    print(header)
    for row in rows:
        print(row)
    ok = True
    for label, held, n, worst, damaged in verdicts:
        if held == n and not damaged:
            print(f"{label}: the bound held in every kill (worst: the oldest span lost had "
                  f"ended {worst:.3f} s before the kill; bound {bound:.2f} s)")
        else:
            ok = False
            print(f"{label}: the bound did NOT hold in {n - held} of {n} kills (worst "
                  f"{worst:.3f} s against {bound:.2f} s); {damaged} kills left damage beyond "
                  f"one torn last line")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
