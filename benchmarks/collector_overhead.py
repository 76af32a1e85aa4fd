"""CPU cost of the counter sampler, with an agent process tree of 8 processes.

Starts an "agent" process with 7 children (a tree of 8), then measures, in one run:

* one sampling round in a tight loop (every source due each time: files warm in the caches),
  and, as the baseline, a naive psutil snapshot of the same counters the same way (the tree
  found with ``children(recursive=True)``, each process's CPU times, memory and context
  switches, host CPU per core, memory, disk and network);
* the sampler running for ``--seconds`` at 10 Hz and at 100 Hz (every source that works on
  this machine, watching that tree): the CPU time of the sampling thread, and two floors:
  the same loop with no source at all (waking up and sleeping: the floor of any sampler at
  that rate), and a loop that only reads, with one ``pread`` each, the files the sampler
  reads every round (``/proc/stat``, PSI cpu, each thread's ``schedstat``), parsing and
  writing nothing (the floor of any sampler of these counters written in Python).

* the whole sidecar as a user runs it and `top` shows it: ``agentscope collect --pid P`` at
  10 Hz in its own process, the CPU of all its threads (``/proc/PID/stat``) over
  ``--seconds`` after a 3 s start-up; the sampler thread's own figure above is its share.

Usage: python benchmarks/collector_overhead.py [--seconds 10]
Targets: <= 0.3 % of one core at 10 Hz, <= 3 % at 100 Hz.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time

from agentscope.collectors import Sampler, default_sources

AGENT = """
import subprocess, sys, time
kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        for _ in range(7)]
print("ready", flush=True)
time.sleep(600)
"""


def run_sampler(root_pid, hz: float, seconds: float, out: str, empty: bool = False) -> tuple:
    sources, absent = ([], []) if empty else default_sources(root_pid)
    sampler = Sampler(out, sources, absent, interval_s=1.0 / hz)
    stop = threading.Event()
    threading.Timer(seconds, stop.set).start()
    c0, t0 = time.thread_time(), time.perf_counter()
    sampler.run(stop)  # in this thread, so that its CPU time is this thread's
    cpu, wall = time.thread_time() - c0, time.perf_counter() - t0
    sampler.stop()
    return cpu, wall, sampler.rounds, sampler.samples, [s.name for s in sources], absent


def run_reads_only(root_pid: int, hz: float, seconds: float) -> tuple:
    """Wake up at ``hz`` and pread the files a round reads, nothing more."""
    import psutil

    pids = [root_pid] + [c.pid for c in psutil.Process(root_pid).children(recursive=True)]
    paths = ["/proc/stat", "/proc/pressure/cpu"]
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            paths.append(f"/proc/{pid}/task/{tid}/schedstat")
    fds = []
    for path in paths:
        try:
            fds.append(os.open(path, os.O_RDONLY))
        except OSError:
            pass
    period, pread, sleep = 1.0 / hz, os.pread, time.sleep
    c0, t0 = time.thread_time(), time.perf_counter()
    end = t0 + seconds
    next_t = time.monotonic()
    while time.perf_counter() < end:
        for fd in fds:
            pread(fd, 4096, 0)
        next_t += period
        sleep(max(next_t - time.monotonic(), 0))
    cpu, wall = time.thread_time() - c0, time.perf_counter() - t0
    for fd in fds:
        os.close(fd)
    return cpu, wall, len(fds)


def warm_round_us(root_pid: int, out: str, n: int = 200) -> float:
    sources, absent = default_sources(root_pid)
    sampler = Sampler(out, sources, absent, interval_s=0.1)
    now = time.time_ns()
    sampler.tick(now)
    c0 = time.thread_time()
    for k in range(1, n + 1):
        sampler.tick(now + k * 1_000_000_000)  # a second apart: every source due
    us = (time.thread_time() - c0) / n * 1e6
    sampler.stop()
    return us


def psutil_snapshot(root) -> None:
    import psutil

    procs = [root] + root.children(recursive=True)
    for p in procs:
        try:
            with p.oneshot():
                p.cpu_times()
                p.memory_info()
                p.num_ctx_switches()
        except psutil.NoSuchProcess:
            pass
    psutil.cpu_percent(percpu=True)
    psutil.cpu_stats()
    psutil.virtual_memory()
    psutil.swap_memory()
    psutil.disk_io_counters()
    psutil.net_io_counters()


def process_cpu_s(pid: int) -> float:
    """CPU time of every thread of ``pid`` (seconds, from each thread's schedstat: ns, where
    /proc/PID/stat counts 10 ms ticks)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:  # the thread ended meanwhile
            pass
    return total / 1e9


def run_sidecar(pid: int, seconds: float, out: str) -> tuple:
    """(CPU s, wall s, wakeups/s of its threads) of ``agentscope collect --pid`` at 10 Hz,
    measured after a 3 s start-up (the interpreter's import is not the steady cost)."""
    # run in ``out``, not the checkout: -c puts the working directory first on sys.path
    cli = [sys.executable, "-c", "from agentscope.cli import main; main()"]
    proc = subprocess.Popen(cli + ["collect", "--out", out, "--pid", str(pid), "--hz", "10",
                                   "--no-gpu", "-q"], cwd=out)
    try:
        time.sleep(3.0)
        c0, t0, w0 = process_cpu_s(proc.pid), time.monotonic(), _switches(proc.pid)
        time.sleep(seconds)
        c1, t1, w1 = process_cpu_s(proc.pid), time.monotonic(), _switches(proc.pid)
    finally:
        proc.terminate()
        proc.wait()
    return c1 - c0, t1 - t0, (w1 - w0) / (t1 - t0)


def _switches(pid: int) -> int:
    """Voluntary context switches of all threads of ``pid`` (each one a wake-up after a
    sleep)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        except OSError:  # the thread ended meanwhile
            pass
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    agent = subprocess.Popen([sys.executable, "-c", AGENT], stdout=subprocess.PIPE, text=True)
    try:
        agent.stdout.readline()
        import psutil

        root = psutil.Process(agent.pid)
        assert len(root.children(recursive=True)) == 7
        n = 200
        psutil_snapshot(root)
        c0 = time.thread_time()
        for _ in range(n):
            psutil_snapshot(root)
        naive_ms = (time.thread_time() - c0) / n * 1e3
        results, floor, reads = {}, {}, {}
        with tempfile.TemporaryDirectory() as out:
            warm_us = warm_round_us(agent.pid, out)
            for hz in (10.0, 100.0):
                results[hz] = run_sampler(agent.pid, hz, args.seconds, out)
                floor[hz] = run_sampler(None, hz, min(args.seconds, 5.0), out, empty=True)
                reads[hz] = run_reads_only(agent.pid, hz, min(args.seconds, 5.0))
            side_cpu, side_wall, side_wakes = run_sidecar(agent.pid, args.seconds, out)
    finally:
        # the agent's children first: once it is gone they are no longer ours to find
        for child in psutil.Process().children(recursive=True):
            child.kill()
        agent.kill()
    print(f"collector overhead: process tree of 8, {args.seconds:g} s per rate; Python "
          f"{platform.python_version()}, {os.cpu_count()} CPUs")
    sources, absent = results[10.0][4], results[10.0][5]
    print(f"sources: {', '.join(sources)}; absent: "
          f"{', '.join(f'{a} ({why})' for a, why in absent) or 'none'}")
    print(f"\none round, warm (tight loop, every source due): {warm_us:.0f} us; naive psutil "
          f"snapshot of the same tree and counters: {naive_ms * 1000:.0f} us "
          f"({naive_ms * 1000 / warm_us:.1f}x more)")
    print(f"\n{'rate':>8}{'rounds':>8}{'samples':>9}{'us/round':>10}{'% of a core':>13}"
          f"{'no-source loop':>16}{'reads-only loop':>17}{'ratio':>7}")
    p10_thread = results[10.0][0] / results[10.0][1] * 100
    for hz, (cpu, wall, rounds, samples, _, _) in results.items():
        f_cpu, f_wall = floor[hz][0], floor[hz][1]
        r_cpu, r_wall, _ = reads[hz]
        print(f"{hz:>6g}Hz{rounds:>8}{samples:>9}{cpu / rounds * 1e6:>10.0f}"
              f"{cpu / wall * 100:>12.2f}%{f_cpu / f_wall * 100:>15.2f}%"
              f"{r_cpu / r_wall * 100:>16.2f}%{(cpu / wall) / (r_cpu / r_wall):>6.2f}x")
    print(f"(reads-only loop: {reads[10.0][2]} files a round, one pread each)")
    print(f"\nthe whole sidecar, `agentscope collect --pid P --hz 10` in its own process (all "
          f"threads, as top shows it): {side_cpu / side_wall * 100:.2f}% of a core over "
          f"{side_wall:.0f} s, {side_wakes:.1f} wake-ups/s (the sampler thread alone: "
          f"{p10_thread:.2f}%; target <= 0.4%)")
    p10 = results[10.0][0] / results[10.0][1] * 100
    p100 = results[100.0][0] / results[100.0][1] * 100
    print(f"\ntargets: 10 Hz {p10:.2f}% (<= 0.3%), 100 Hz {p100:.2f}% (<= 3%); at the warm "
          f"round's cost (every source due every round): {warm_us * 10 / 1e4:.2f}% and "
          f"{warm_us * 100 / 1e4:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
