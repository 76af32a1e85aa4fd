"""Hard attribution cases: CPU time that a span's own counters do not show where it belongs.
An event loop blocked by another task's synchronous work, a library computing in its own
threads, contention recorded without counters, a step waiting for the interpreter lock."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import threading
import time
import urllib.parse
import zlib
from concurrent.futures import ThreadPoolExecutor

import agentscope

from ..services import Service
from .cpu_bound import _cpus
from .ctx import Ctx
from .hard_cases import BURN
from .registry import scenario
from .work import burn_python


async def _get_wait(host: str, port: int, seconds: float) -> None:
    """``GET /wait?s=SECONDS`` from the slow API over the event loop's own sockets (asyncio
    streams, no thread): the answer comes when the loop is free to read it."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(f"GET /wait?s={seconds} HTTP/1.1\r\nHost: {host}\r\n"
                     "Connection: close\r\n\r\n".encode())
        await writer.drain()
        response = await reader.read()  # the server closes after its answer
    finally:
        writer.close()
        await writer.wait_closed()
    if response.split(b" ", 2)[1:2] != [b"200"]:
        raise RuntimeError(f"slow-api answered {response[:40]!r}")


@scenario("loop-blocked", "cpu", "an asyncio agent: a model call awaiting a 0.2 s answer is "
          "held up while another task embeds documents synchronously (0.5 s of CPU) on the "
          "same event loop")
def loop_blocked(ctx: Ctx) -> None:
    with Service("slow-api") as api:
        where = urllib.parse.urlsplit(api.url)

        async def pair(blocked: list) -> None:
            calling = asyncio.Event()

            async def answer() -> None:
                with ctx.task("answer") as (_, ledger):
                    with agentscope.stage("inference", name="ask-model") as span:
                        t0 = time.perf_counter()
                        calling.set()
                        await _get_wait(where.hostname or "127.0.0.1", where.port or 80, 0.2)
                        t1 = time.perf_counter()
                    # the loop could not run this task while a synchronous section held it:
                    # that part of the call is the other task's CPU, the rest the wait
                    held = sum(max(0.0, min(t1, b1) - max(t0, b0)) for b0, b1 in blocked)
                    ctx.rec.span(span, {"cpu": held, "io": t1 - t0 - held})
                    ledger["cpu"] = held
                    ledger["io"] = t1 - t0 - held

            async def index_docs() -> None:
                await calling.wait()
                await asyncio.sleep(0.05)  # the call is on the wire by now
                with ctx.task("index-docs") as (_, ledger):
                    with ctx.step(ledger, "cpu", "context", "embed"):
                        b0 = time.perf_counter()
                        burn_python(0.5)  # synchronous, on the loop: nothing else runs
                        blocked.append((b0, time.perf_counter()))

            await asyncio.gather(answer(), index_docs())

        async def main() -> None:
            pairs = max(1, ctx.tasks // 2)
            for first in range(0, pairs, ctx.load):
                blocked: list = []  # (start, end) of every section that held this loop
                await asyncio.gather(*(pair(blocked)
                                       for _ in range(min(ctx.load, pairs - first))))

        asyncio.run(main())


def _corpus(seed: int, words: int) -> bytes:
    """Text with a vocabulary's repetitions, as documents have: compressible, never trivially."""
    rng = random.Random(seed)
    vocabulary = ["".join(rng.choice("etaoinshrdlucmfw") for _ in range(rng.randint(2, 9)))
                  for _ in range(3000)]
    return " ".join(rng.choices(vocabulary, k=words)).encode()


@scenario("cpu-library-threads", "cpu", "a library that computes in its own worker threads "
          "(zlib at level 9, the interpreter lock released): the step's thread only waits "
          "on their futures, and the workers have no spans")
def cpu_library_threads(ctx: Ctx) -> None:
    corpus = _corpus(11, 2_500_000)  # 16 MB of documents, read before the tasks
    workers = min(4, max(2, len(_cpus())))
    with ThreadPoolExecutor(workers, thread_name_prefix="zlib-worker") as pool:
        # a library starts its threads when it is set up, outside every span
        ready = threading.Barrier(workers)
        list(pool.map(lambda _: ready.wait(), range(workers)))

        def one(i: int) -> None:
            with ctx.task("archive-corpus") as (_, ledger):
                with ctx.step(ledger, "cpu", "context", "tokenize"):
                    agentscope.annotate(words=corpus.count(b" ") + 1)
                    cuts = [0, *(corpus.rfind(b" ", 0, len(corpus) * k // workers) + 1
                                 for k in range(1, workers)), len(corpus)]
                    shards = [corpus[a:b] for a, b in zip(cuts, cuts[1:])]
                # at load 2 the tasks share the pool: a task's jobs may wait for a worker
                # another task holds (queue, recorded as pool.wait spans); the truth splits
                # the step at the moment its first job started
                started: list = []

                def job(shard: bytes) -> bytes:
                    started.append(time.perf_counter())
                    return zlib.compress(shard, 9)

                t0 = time.perf_counter()
                with ctx.step(None, "cpu", "tool", "compress-corpus", tool="zlib") as step:
                    ctx.rec.children(step, "zlib-worker.wait", "queue")
                    list(pool.map(job, shards))
                t1 = time.perf_counter()
                waited = max(min(started, default=t0) - t0, 0.0)
                ledger["queue"] = ledger.get("queue", 0.0) + waited
                ledger["cpu"] = ledger.get("cpu", 0.0) + (t1 - t0 - waited)

        ctx.together(one, ctx.tasks, ctx.load)


@scenario("contention-spans-only", "cpu", "four test runs (per load level) at once on two "
          "CPUs, recorded with spans only (no counters): each test process is preempted, "
          "never blocked",
          collect=False)
def contention_spans_only(ctx: Ctx) -> None:
    if hasattr(os, "sched_setaffinity"):  # the children inherit it: 4 runnable per 2 CPUs
        os.sched_setaffinity(0, set(_cpus()[:2]))

    def one(i: int) -> None:
        with ctx.task("run-tests") as (_, ledger):
            with ctx.step(ledger, "cpu", "tool", "pytest", tool="pytest"):
                subprocess.run([sys.executable, "-c", BURN.format(s=0.5)], check=True)

    ctx.together(one, max(ctx.tasks, 4) * ctx.load, 4 * ctx.load)


def _hog(stop: threading.Event) -> None:
    """Pure-Python work until ``stop``: it holds the interpreter lock all along but for the
    switch interval's hand-overs."""
    while not stop.is_set():
        burn_python(0.02)


@scenario("gil-bound", "cpu", "a step that barely computes (it reads 16 small config files, "
          "yielding after each) but waits for the interpreter lock each time it gives it up: "
          "two pure-Python threads of the same process (no spans) hold it")
def gil_bound(ctx: Ctx) -> None:
    files = []
    for k in range(16):
        path = ctx.work / f"config-{k}.json"
        path.write_text(json.dumps({"section": k, "retries": 3, "timeout_s": 30.0}))
        files.append(path)

    def load_config() -> float:
        """Seconds to read and parse the config files, yielding the interpreter lock after each
        as cooperative code does (a read alone may get the lock back before anyone takes it;
        a sleep, however short, lets another thread take it, and each time the step waits a
        switch interval or more to get it back)."""
        t0 = time.perf_counter()
        for path in files:
            json.loads(path.read_bytes())
            time.sleep(0)
        return time.perf_counter() - t0

    load_config()  # the files in the page cache
    alone = load_config()  # what the step costs when nothing holds the lock: its own I/O
    stop = threading.Event()
    hogs = [threading.Thread(target=_hog, args=(stop,), name=f"hog-{k}", daemon=True)
            for k in range(2)]
    for hog in hogs:
        hog.start()
    try:
        def one(i: int) -> None:
            with ctx.task("start-session") as (_, ledger):
                with agentscope.stage("tool", name="load-config") as span:
                    took = load_config()
                # the rest of the step it waited for the lock while the hogs computed
                io = min(alone, took)
                ctx.rec.span(span, {"io": io, "cpu": took - io})
                ledger["io"] = io
                ledger["cpu"] = took - io

        ctx.together(one, ctx.tasks, ctx.load)
    finally:
        stop.set()
        for hog in hogs:
            hog.join()
