"""The hard cases: stages whose labels mislead, tasks whose bottleneck changes from step to
step, a multi-agent fan-out whose longest branch decides."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from ..services import Service, get_json
from .ctx import Ctx
from .registry import scenario
from .work import assemble_context, burn_python


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
