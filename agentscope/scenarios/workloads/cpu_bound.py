"""CPU-bound scenarios: a C compiler and its tests in child processes, pure-Python context
assembly, a numpy model in the agent's process, more runnable agents than cores."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..truth import Recorder
from .ctx import Ctx
from .registry import Unavailable, scenario
from .work import assemble_context, burn_python

C_PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
%(functions)s
static int check(long n) {
    char *sieve = calloc(n + 1, 1); long primes = 0;
    for (long i = 2; i <= n; i++)
        if (!sieve[i]) { primes++; for (long j = i * i; j <= n; j += i) sieve[j] = 1; }
    free(sieve);
    unsigned long h = 1469598103934665603UL;
    for (long r = 0; r < %(rounds)d; r++)
        for (long i = 0; i < 1000000; i++) h = (h ^ (unsigned long)(i + r)) * 1099511628211UL;
    return primes > 0 && h != 0;
}
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000; int ok = check(n);
%(calls)s
    printf("%%s\n", ok ? "all tests passed" : "FAILED"); return ok ? 0 : 1;
}
"""


def c_program(seed: int, functions: int = 160, rounds: int = 180) -> str:
    """A C program big enough that compiling it is real work, with a self-test to run."""
    fns = "\n".join(
        f"static long f{i}(long x) {{ long s = {seed + i}; for (int k = 0; k < {i % 9 + 3}; k++)"
        f" {{ s = (s * {i % 13 + 3} + x) % {1000 + i}; if (s & 1) s ^= x >> {i % 5}; }}"
        f" return s; }}" for i in range(functions))
    calls = "\n".join(f"    ok &= f{i}({i}) >= 0;" for i in range(functions))
    return C_PROGRAM % {"functions": fns, "calls": calls, "rounds": rounds}


def compiler() -> "str | None":
    return shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


# ---- CPU --------------------------------------------------------------------------------------

@scenario("cpu-compile", "cpu", "compile-and-test loops: a real C compiler and the test binary "
          "it builds, in child processes")
def cpu_compile(ctx: Ctx) -> None:
    cc = compiler()

    def one(i: int) -> None:
        d = ctx.work / f"build-{i}"
        d.mkdir(parents=True, exist_ok=True)
        with ctx.task("compile-and-test") as (_, ledger):
            with ctx.step(ledger, "cpu", "context", "read-sources"):
                source = c_program(i)
            if cc:
                (d / "prog.c").write_text(source)
                with ctx.step(ledger, "cpu", "tool", "compile", tool="cc"):
                    subprocess.run([cc, "-O2", "-o", str(d / "prog"), str(d / "prog.c")],
                                   check=True)
                with ctx.step(ledger, "cpu", "tool", "run-tests"):
                    subprocess.run([str(d / "prog"), "2000000"], check=True,
                                   stdout=subprocess.DEVNULL)
            else:  # no C compiler: the same shape with Python's own compiler and a test run
                code = f"compile({assemble_context(i, 900)!r}, 'x', 'exec')"
                with ctx.step(ledger, "cpu", "tool", "compile", tool="python"):
                    subprocess.run([sys.executable, "-c", code], check=True)
                with ctx.step(ledger, "cpu", "tool", "run-tests"):
                    subprocess.run([sys.executable, "-c",
                                    "import agentscope.scenarios.workloads.work as w; "
                                    "w.burn_python(0.4)"], check=True)

    ctx.together(one, ctx.tasks, ctx.load)


@scenario("cpu-parse", "cpu", "pure-Python context assembly: parse a code base, score its "
          "chunks, build the prompt (threads of one process share the interpreter lock)")
def cpu_parse(ctx: Ctx) -> None:
    def one(i: int) -> None:
        with ctx.task("assemble-context") as (_, ledger):
            for part in range(3):
                with ctx.step(ledger, "cpu", "context", f"rank-chunks-{part}"):
                    assemble_context(i * 3 + part, 400)

    ctx.together(one, ctx.tasks, ctx.load)


@scenario("cpu-model", "cpu", "a model run on the CPU: a numpy MLP forward pass labelled "
          "inference, in the agent's process")
def cpu_model(ctx: Ctx) -> None:
    import numpy as np

    rng = np.random.default_rng(3)
    layers = [(rng.standard_normal((1024, 1024)) / 32).astype(np.float32) for _ in range(6)]

    def one(i: int) -> None:
        x = rng.standard_normal((96, 1024)).astype(np.float32)
        with ctx.task("local-model") as (_, ledger):
            with ctx.step(ledger, "cpu", "context", "tokenize"):
                assemble_context(i, 60)
            for step in range(4):
                with ctx.step(ledger, "cpu", "inference", "forward", model="mlp-6x1024"):
                    h = x
                    for _ in range(6):
                        for w in layers:
                            h = np.maximum(h @ w, 0.0)
                    x = h / (np.abs(h).max() + 1e-6)

    ctx.together(one, ctx.tasks, ctx.load)


def _cpus() -> list:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


@scenario("cpu-contention", "cpu", "more runnable agents than cores (each pinned to the same "
          "two CPUs): tools that would take 0.25 s alone wait for a core")
def cpu_contention(ctx: Ctx) -> None:
    cpus = _cpus()[:2]
    if len(_cpus()) > len(cpus) and not os.access("/proc/pressure/cpu", os.R_OK):
        # the run queue is the host's: 6 runnable agents on 2 of 16 CPUs do not show in it
        raise Unavailable(f"contention on {len(cpus)} of {len(_cpus())} CPUs shows only in "
                          "pressure stall information (/proc/pressure/cpu), which this "
                          "kernel does not give")
    agents = max(ctx.tasks, 2 * len(cpus)) * ctx.load
    argv = [sys.executable, "-m", "agentscope.scenarios.workloads", "cpu-contention",
            "--agent", ",".join(map(str, cpus))]
    procs = [subprocess.Popen(argv) for _ in range(agents)]
    if any(p.wait() for p in procs):
        raise RuntimeError("a contending agent failed")


def _contending_agent(cpus: str) -> None:
    os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
    rec = Recorder(os.environ.get("AGENTSCOPE_TRACE_DIR", "."), "cpu-contention")
    ctx = Ctx("cpu-contention", 1, 1, rec, Path("."))
    with ctx.task("lint-and-format") as (_, ledger):
        with ctx.step(ledger, "cpu", "context", "plan"):
            burn_python(0.01)
        # on its own this takes 0.25 s; with more runnable agents than cores it takes longer,
        # and the rest of its time it is runnable, waiting for a core: CPU-bound all along
        with ctx.step(ledger, "cpu", "tool", "lint"):
            burn_python(0.25)
    rec.close()
