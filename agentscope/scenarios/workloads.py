"""The scenario agents: small instrumented agents that really do what their ground truth says.

Each scenario runs several tasks. Every step is a real piece of work or a real wait: a C
compiler, a numpy forward pass, an HTTP server that answers late, a SQLite lock held by
another process, a one-slot model server with a queue, pages evicted from memory and faulted
back in. The workload times each step with its own stopwatch and writes, beside the trace,
which resource the step used (truth.py): that is the ground truth the analysis is scored
against. Nothing here reads agentscope's analysis.

``python -m agentscope.scenarios.workloads NAME --tasks N --load L`` runs one (normally under
``agentscope scenarios run``, which samples the counters); ``--load 2`` runs twice as many
tasks at once.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterator

import agentscope

from .services import Service, get_json, post_json
from .truth import Recorder

SCENARIOS: dict = {}


class Unavailable(Exception):
    """This machine cannot produce the scenario (says why)."""


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    expect: str  # the class its tasks are built to have (per task, the truth is measured)
    about: str
    run: Callable[["Ctx"], None]


def scenario(name: str, expect: str, about: str) -> Callable:
    def register(fn: Callable[["Ctx"], None]) -> Callable[["Ctx"], None]:
        SCENARIOS[name] = Scenario(name, expect, about, fn)
        return fn
    return register


@dataclasses.dataclass
class Ctx:
    name: str
    tasks: int
    load: int
    rec: Recorder
    work: Path  # scratch space on the trace directory's file system

    def together(self, fn: Callable[[int], None], n: int, width: int) -> None:
        """fn(0..n-1), ``width`` at a time, each in its own thread; re-raises a failure."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, width),
                                thread_name_prefix=f"{self.name}-task") as pool:
            for f in [pool.submit(fn, i) for i in range(n)]:
                f.result()

    @contextlib.contextmanager
    def task(self, name: str, lane: str = "online") -> Iterator[tuple]:
        """A task (root span) and its ledger: seconds per class on its longest chain of
        steps, filled by :meth:`step`. The rest of the task's time is the agent's own
        (orchestration, and its threads waiting for the interpreter lock): Python, ``cpu``."""
        with agentscope.task(name, lane=lane) as root:
            ledger: dict = {}
            self.rec.span(root, "cpu")
            t0 = time.perf_counter()
            yield root, ledger
            rest = time.perf_counter() - t0 - sum(ledger.values())
            if rest > 0:
                ledger["cpu"] = ledger.get("cpu", 0.0) + rest
            self.rec.task(root, ledger)

    @contextlib.contextmanager
    def step(self, ledger: "dict | None", truth: str, stage: str, name: str,
             **attrs: object) -> Iterator[object]:
        """A span whose own time the workload knows was spent on ``truth``; its duration
        goes to ``ledger[truth]`` (None: not on the task's longest chain)."""
        with agentscope.stage(stage, name=name, **attrs) as span:
            t0 = time.perf_counter()
            try:
                yield span
            finally:
                if ledger is not None:
                    ledger[truth] = ledger.get(truth, 0.0) + time.perf_counter() - t0
        self.rec.span(span, truth)


# ---- the work itself ------------------------------------------------------------------------

def burn_python(seconds: float) -> int:
    """Pure-Python work for about ``seconds`` of this thread's CPU time."""
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(2000):
            x = (x * 31 + i) % 1000003
    return x


def assemble_context(seed: int, functions: int = 300) -> str:
    """Context assembly as agents do it: parse a code base, score its chunks against the
    question (term frequencies, pure Python), keep the best that fit a budget."""
    import ast
    import io
    import tokenize

    src = "\n".join(
        f"def handler_{seed}_{i}(request, cache=None):\n"
        f"    key = request.get('k{i % 17}') or 'default_{i}'\n"
        f"    if cache and key in cache:\n        return cache[key] * {i % 7 + 1}\n"
        f"    total = sum(x * {i % 5 + 1} for x in range({i % 50 + 10}))\n"
        f"    return {{'key': key, 'total': total, 'ok': total % {i % 3 + 2} == 0}}\n"
        for i in range(functions))
    tree = ast.parse(src)
    lines = src.splitlines()
    chunks = ["\n".join(lines[node.lineno - 1:node.end_lineno or node.lineno])
              for node in tree.body]
    words = [tok.string for tok in tokenize.generate_tokens(io.StringIO(src).readline)
             if tok.type == tokenize.NAME]
    df: dict = {}
    for w in words:
        df[w] = df.get(w, 0) + 1
    query = ["cache", "total", "request", f"handler_{seed}_{seed % functions}"]
    scored = []
    for chunk in chunks:
        toks = chunk.replace("(", " ").replace(")", " ").replace(":", " ").split()
        tf: dict = {}
        for t in toks:
            tf[t] = tf.get(t, 0) + 1
        scored.append((sum(tf.get(q, 0) / df.get(q, 1) for q in query), chunk))
    scored.sort(key=lambda s: -s[0])
    prompt, budget = [], 6000
    for _, chunk in scored:
        if len(chunk) > budget:
            break
        prompt.append(chunk)
        budget -= len(chunk)
    return "\n\n".join(prompt)


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
                                    "import agentscope.scenarios.workloads as w; "
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


# ---- I/O --------------------------------------------------------------------------------------

@scenario("io-http", "io", "tools waiting on a slow HTTP API (a local server that answers "
          "after 0.3 s)")
def io_http(ctx: Ctx) -> None:
    with Service("slow-api") as api:
        def one(i: int) -> None:
            with ctx.task("research") as (_, ledger):
                with ctx.step(ledger, "cpu", "context", "plan"):
                    assemble_context(i, 20)
                for q in range(2):
                    with ctx.step(ledger, "io", "tool", "web-search",
                                  **{"server.address": "127.0.0.1"}):
                        get_json(f"{api.url}/wait?s=0.3&q={q}")

        ctx.together(one, ctx.tasks, 2 * ctx.load)


@scenario("io-db", "io", "a database query blocked by a lock another process holds "
          "(SQLite, exclusive transaction held for 0.5 s)")
def io_db(ctx: Ctx) -> None:
    import sqlite3

    path = ctx.work / "app.db"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v INTEGER)")
        con.execute("INSERT OR REPLACE INTO kv VALUES ('migrations', 0), ('users', 42)")

    def one(i: int) -> None:
        locker = subprocess.Popen([sys.executable, "-m", "agentscope.scenarios.services",
                                   "lock-db", str(path), "0.5"], stdout=subprocess.PIPE,
                                  text=True)
        try:
            if (locker.stdout.readline() if locker.stdout else "").strip() != "locked":
                raise RuntimeError("the lock holder did not take the lock")
            with ctx.task("account-lookup") as (_, ledger):
                with ctx.step(ledger, "cpu", "context", "plan"):
                    assemble_context(i, 20)
                with ctx.step(ledger, "io", "tool", "db.query", **{
                        "db.system": "sqlite", "db.operation.name": "SELECT"}):
                    db = sqlite3.connect(path, timeout=30)
                    db.execute("SELECT v FROM kv WHERE k = 'users'").fetchall()
                    db.close()
        finally:
            locker.wait(30)

    ctx.together(one, ctx.tasks, ctx.load)


FETCH = ("import sys, time, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=60)"
         ".read(); print(time.process_time())")


@scenario("io-subprocess", "io", "a tool that runs a command-line client (think git fetch) "
          "which waits 0.6 s on the network stand-in")
def io_subprocess(ctx: Ctx) -> None:
    with Service("slow-api") as api:
        def one(i: int) -> None:
            with ctx.task("sync-repo") as (root, ledger):
                # the client starts (an interpreter: CPU), then waits on the network; it
                # says how much CPU it used (its own stopwatch), for the truth
                with agentscope.stage("tool", name="git-fetch") as span:
                    t0 = time.perf_counter()
                    got = subprocess.run([sys.executable, "-c", FETCH, f"{api.url}/wait?s=0.6"],
                                         check=True, stdout=subprocess.PIPE, text=True)
                    wall, cpu = time.perf_counter() - t0, float(got.stdout.split()[-1])
                ctx.rec.span(span, {"cpu": cpu, "io": max(wall - cpu, 0.0)})
                ledger["cpu"] = ledger.get("cpu", 0.0) + cpu
                ledger["io"] = ledger.get("io", 0.0) + max(wall - cpu, 0.0)
                with ctx.step(ledger, "cpu", "context", "read-changes"):
                    assemble_context(i, 20)

        ctx.together(one, ctx.tasks, 2 * ctx.load)


# ---- queue ------------------------------------------------------------------------------------

@scenario("queue-pool", "queue", "tasks waiting for a bounded worker pool (one worker per load "
          "level) that another tenant's 0.5 s job holds first")
def queue_pool(ctx: Ctx) -> None:
    pool = threading.Semaphore(ctx.load)
    held = threading.Event()

    def tenant() -> None:  # not traced: someone else's job
        for _ in range(ctx.load):
            pool.acquire()
        held.set()
        time.sleep(0.5)
        for _ in range(ctx.load):
            pool.release()

    with Service("slow-api") as api:
        threading.Thread(target=tenant, daemon=True).start()
        held.wait()

        def one(i: int) -> None:
            with ctx.task("enrich-record") as (_, ledger):
                with ctx.step(ledger, "queue", "queue", "wait-for-worker"):
                    pool.acquire()
                try:
                    with ctx.step(ledger, "io", "tool", "fetch-profile"):
                        get_json(f"{api.url}/wait?s=0.1")
                finally:
                    pool.release()

        ctx.together(one, ctx.tasks * ctx.load, ctx.tasks * ctx.load)


def _model_call(ctx: Ctx, ledger: dict, url: str, tokens: int) -> None:
    """A model call to the scenario's model server: the server's spans (in its process) carry
    their own truth; what it reports (its queue and compute time) goes to the ledger."""
    # the client's own time around the server's span is the HTTP hop: sending, the server's
    # handler reading and replying, waiting for the interpreter lock on either side; the
    # workload does not know how it splits, and says so
    with agentscope.stage("inference", name="chat", model="cpu-mlp-768",
                          **{"server.address": "127.0.0.1"}) as span:
        got = post_json(url, {"prompt_tokens": 300, "max_tokens": tokens})
    ctx.rec.span(span, None)
    ledger["queue"] = ledger.get("queue", 0.0) + got["queue_s"]
    ledger["cpu"] = ledger.get("cpu", 0.0) + got["compute_s"]


@scenario("queue-behind-batch", "queue", "online requests stuck behind batch requests at a "
          "one-slot model server that reports queue time the way vLLM does (its span is "
          "labelled inference)")
def queue_behind_batch(ctx: Ctx) -> None:
    with Service("model-server", "1", env={"OPENBLAS_NUM_THREADS": "1",
                                           "AGENTSCOPE_SCENARIO": ctx.name}) as server:
        url = f"{server.url}/v1/completions"
        per_token = _token_cost(url)

        def batch(i: int) -> None:
            with ctx.task("nightly-eval", lane="batch") as (_, ledger):
                _model_call(ctx, ledger, url, max(1, int(0.6 / (i + 1) / per_token)))

        def online(i: int) -> None:
            time.sleep(0.05)  # arrive just after the batch requests
            with ctx.task("user-chat") as (_, ledger):
                with ctx.step(ledger, "cpu", "context", "build-prompt"):
                    assemble_context(i, 20)
                _model_call(ctx, ledger, url, max(1, int(0.03 / per_token)))

        def one(i: int) -> None:
            (batch if i < ctx.load else online)(i if i < ctx.load else i - ctx.load)

        n = ctx.load + ctx.tasks * ctx.load
        ctx.together(one, n, n)


def _token_cost(url: str) -> float:
    """Seconds per token of the model server (it measures itself when it starts)."""
    with urllib.request.urlopen(url.rsplit("/v1/", 1)[0] + "/info", timeout=30) as r:
        return max(json.load(r)["per_token_s"], 1e-5)


# ---- memory -----------------------------------------------------------------------------------

def _evictable(path: Path, size: int) -> None:
    """Write ``path`` (``size`` bytes) to disk, so that its pages can be dropped from memory;
    raise Unavailable where they cannot (a file system in memory, e.g. tmpfs)."""
    with open(path, "wb") as f:
        chunk = os.urandom(1 << 20)
        for _ in range(size >> 20):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        m = mmap.mmap(fd, 64 * mmap.PAGESIZE, prot=mmap.PROT_READ)
        try:
            m.madvise(mmap.MADV_RANDOM)
            _evict(m, fd)
            before = _major_faults()
            for off in range(0, 64 * mmap.PAGESIZE, mmap.PAGESIZE):
                m[off]
            if _major_faults() - before < 32:
                raise Unavailable(f"{path.parent} keeps file pages in memory after they are "
                                  "dropped (a file system in memory?): no page-in to measure")
        finally:
            m.close()
    finally:
        os.close(fd)


def _evict(m: mmap.mmap, fd: int) -> None:
    """Drop the pages of a clean file mapping from memory: unmap them here, then drop the
    whole file from the page cache (a range would leave the large folios it cuts through).
    The next touch of each page takes a major fault (a read from disk)."""
    m.madvise(mmap.MADV_DONTNEED)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def _major_faults() -> int:
    import resource

    return resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)).ru_majflt


@scenario("memory-pagein", "memory", "a working set (an embeddings index in a mapped file) "
          "pushed out of memory and paged back in: every page a major fault")
def memory_pagein(ctx: Ctx) -> None:
    size = 24 << 20

    def one(i: int) -> None:
        path = ctx.work / f"index-{i}.bin"
        _evictable(path, size)
        fd = os.open(path, os.O_RDONLY)
        m = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        try:
            m.madvise(mmap.MADV_RANDOM)  # no read-ahead: the index is read at random
            _evict(m, fd)  # meanwhile, the rest of the host needed the memory
            with ctx.task("answer-from-index") as (_, ledger):
                with ctx.step(ledger, "cpu", "context", "embed-question"):
                    assemble_context(i, 20)
                # labelled context assembly, as the agent sees it; really waiting for its
                # working set to come back from disk
                with ctx.step(ledger, "memory", "context", "search-index"):
                    total = 0
                    for off in range(0, size, mmap.PAGESIZE):
                        total += m[off]
        finally:
            m.close()
            os.close(fd)
            path.unlink()

    ctx.together(one, ctx.tasks, ctx.load)


@scenario("memory-kv-offload", "memory", "a KV-cache style offload to a disk tier and reload "
          "(direct I/O) between two decode steps on the CPU")
def memory_kv_offload(ctx: Ctx) -> None:
    import numpy as np

    size = 96 << 20
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((768, 768)) / 28).astype(np.float32)
    probe = ctx.work / "probe.bin"
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600))
    except OSError as e:
        raise Unavailable(f"{ctx.work} does not support direct I/O ({e.strerror}): no disk "
                          "tier to offload to") from e
    finally:
        probe.unlink(missing_ok=True)

    def decode(state: "np.ndarray", tokens: int) -> "np.ndarray":
        for _ in range(tokens):
            state = np.tanh(w @ state)
        return state

    def one(i: int) -> None:
        buf = mmap.mmap(-1, size)  # page-aligned: what direct I/O needs
        kv = np.frombuffer(buf, dtype=np.float32)
        kv[:] = 0.5  # the KV blocks of this sequence
        path = ctx.work / f"kv-{i}.bin"
        fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o600)
        try:
            state = np.ones(768, dtype=np.float32)
            with ctx.task("long-context-chat") as (_, ledger):
                with ctx.step(ledger, "cpu", "inference", "decode", model="cpu-mlp-768"):
                    state = decode(state, 60)
                with ctx.step(ledger, "memory", "memory", "kv-offload", tier="disk"):
                    os.pwritev(fd, [buf], 0)
                    os.fsync(fd)
                with ctx.step(ledger, "memory", "memory", "kv-reload", tier="disk"):
                    os.preadv(fd, [buf], 0)
                with ctx.step(ledger, "cpu", "inference", "decode", model="cpu-mlp-768"):
                    decode(state, 60)
        finally:
            os.close(fd)
            path.unlink()
            del kv
            buf.close()

    ctx.together(one, ctx.tasks, ctx.load)


# ---- hard cases -------------------------------------------------------------------------------

@scenario("mislabeled", "io", "stages whose labels mislead: a tool labelled compute that waits "
          "on a remote job, a retrieval (context) that waits on a vector database")
def mislabeled(ctx: Ctx) -> None:
    with Service("slow-api") as api:
        def one(i: int) -> None:
            with ctx.task("run-simulation") as (_, ledger):
                with ctx.step(ledger, "io", "context", "retrieve", retriever="vector-db"):
                    get_json(f"{api.url}/wait?s=0.2")
                with ctx.step(ledger, "io", "tool", "simulate", **{"tool.kind": "compute"}):
                    for _ in range(4):  # submit, then poll the remote job until it is done
                        get_json(f"{api.url}/wait?s=0.1")

        ctx.together(one, ctx.tasks, 2 * ctx.load)


@scenario("mixed-steps", "mixed", "tasks whose bottleneck changes from step to step: parse "
          "(CPU), fetch (I/O), wait for a rate-limited slot (queue); one step dominates each "
          "task, a different one from task to task")
def mixed_steps(ctx: Ctx) -> None:
    with Service("slow-api") as api:
        def one(i: int) -> None:
            long = i % 3
            cpu_s, io_s, queue_s = [0.45 if k == long else 0.1 for k in range(3)]
            slot = threading.Semaphore(1)
            slot.acquire()  # the rate limiter's window: free again after queue_s
            with ctx.task("triage-ticket") as (_, ledger):
                with ctx.step(ledger, "cpu", "context", "parse-ticket"):
                    burn_python(cpu_s)
                with ctx.step(ledger, "io", "tool", "fetch-history"):
                    get_json(f"{api.url}/wait?s={io_s}")
                threading.Timer(queue_s, slot.release).start()
                with ctx.step(ledger, "queue", "queue", "rate-limit"):
                    slot.acquire()

        ctx.together(one, ctx.tasks, ctx.load)


BURN = ("import time\nend = time.process_time() + {s}\nx = 0\n"
        "while time.process_time() < end:\n    x = (x * 31 + 7) % 1000003\n")


@scenario("fan-out", "mixed", "multi-agent fan-out: a coder (CPU, a build in a child process), "
          "a researcher (I/O) and a reviewer run at once; the longest branch decides")
def fan_out(ctx: Ctx) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with Service("slow-api") as api:
        def one(i: int) -> None:
            build_s, search_s = (0.6, 0.25) if i % 2 == 0 else (0.2, 0.6)
            branches: dict = {}

            def agent(role: str) -> None:
                ledger: dict = {}
                t0 = time.perf_counter()
                with ctx.step(None, "cpu", "agent", role) as span:
                    if role == "coder":
                        with ctx.step(ledger, "cpu", "tool", "build"):
                            subprocess.run([sys.executable, "-c", BURN.format(s=build_s)],
                                           check=True)
                    elif role == "researcher":
                        with ctx.step(ledger, "io", "tool", "search"):
                            get_json(f"{api.url}/wait?s={search_s}")
                    else:
                        with ctx.step(ledger, "cpu", "context", "read-diff"):
                            assemble_context(i, 30)
                branches[role] = (time.perf_counter() - t0, ledger, span)

            with ctx.task("review-pr") as (_, ledger):
                with ThreadPoolExecutor(3) as pool:
                    list(pool.map(agent, ["coder", "researcher", "reviewer"]))
                longest = max(branches.values(), key=lambda b: b[0])
                ledger.update(longest[1])

        ctx.together(one, ctx.tasks, ctx.load)


# ---- running one ------------------------------------------------------------------------------

def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agentscope.scenarios.workloads")
    p.add_argument("name", choices=sorted(SCENARIOS))
    p.add_argument("--tasks", type=int, default=4)
    p.add_argument("--load", type=int, default=1)
    p.add_argument("--agent", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    agentscope.init(service=f"scenario-{args.name}")
    try:
        if args.agent is not None:
            _contending_agent(args.agent)
            return 0
        trace_dir = Path(os.environ.get("AGENTSCOPE_TRACE_DIR", "traces"))
        work = Path(tempfile.mkdtemp(prefix=".scenario-", dir=trace_dir))
        try:
            ctx = Ctx(args.name, args.tasks, args.load, Recorder(trace_dir, args.name), work)
            try:
                SCENARIOS[args.name].run(ctx)
            finally:
                ctx.rec.close()
        except Unavailable as e:
            print(f"{args.name}: cannot run here: {e}", file=sys.stderr)
            return 3
        finally:
            shutil.rmtree(work, ignore_errors=True)
    finally:
        agentscope.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
