"""The what-if cases: scenarios recorded twice, as they are and with one change applied for
real, to check what ``Analysis.whatif`` predicted the change would buy
(``benchmarks/whatif_accuracy.py``).

The change is read from the environment, ``AGENTSCOPE_WHATIF_CHANGE=KEY=VALUE`` (unset: the
baseline); each scenario reads only its own key:

* ``whatif-tool`` (``tool=F``): plan (a little CPU), a ``tool`` step of pure-Python work
  (0.3 s of CPU, F times less with the change), a fetch from a slow API (0.15 s). Predicted
  with ``stage:tool=F``.
* ``whatif-inference`` (``inference=F``): a model call labelled ``inference`` that waits on
  the slow API (0.4 s, F times less) between two short CPU steps. ``stage:inference=F``.
* ``whatif-branches`` (``branch=F``): two tools in parallel threads waiting on the slow API,
  ``fetch-a`` 0.6 s (F times less) and ``fetch-b`` 0.45 s, then a short step: at F = 2 the
  path moves to ``fetch-b`` (0.15 s saved, not the 0.3 s a subtraction says).
  ``name:fetch-a=F``.
* ``whatif-cores`` (``cpus=N``): four tasks at once, each a tool that runs a CPU-bound child
  process (0.3 s of CPU; a process, so that the interpreter lock plays no part). The change
  is fewer cores: the benchmark records under ``taskset -c 0``, and the agent pins itself
  (and so its children) to its first N CPUs as well. ``cpus=N``.
* ``whatif-slots`` (``slots=N``): online tasks arriving in a burst at the model server
  (services.py), each request about 0.18 s of compute; the server has N slots (1 without
  the change). ``slots={"model-server": N}``.

Each runs one task after another (or two, or four, at a time, per its own width times the
load level), with its steps timed and their truth written as every scenario's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from ..services import Service, get_json
from .ctx import Ctx
from .queue_bound import _model_call
from .registry import scenario
from .work import assemble_context, burn_python

CHANGE_VARIABLE = "AGENTSCOPE_WHATIF_CHANGE"

# a child process's CPU-bound loop: this much of its own CPU time, whatever the cores
BURN = ("import time\nend = time.process_time() + {s}\nx = 0\n"
        "while time.process_time() < end:\n    x = (x * 31 + 7) % 1000003\n")


def change(key: str, default: float) -> float:
    """The value the change sets for ``key`` (``AGENTSCOPE_WHATIF_CHANGE=KEY=VALUE``), or
    ``default`` when it is unset or changes something else. Raises ValueError for a
    malformed one."""
    text = os.environ.get(CHANGE_VARIABLE, "").strip()
    if not text:
        return default
    name, sep, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not sep or not number > 0:
        raise ValueError(f"{CHANGE_VARIABLE}={text!r}: expected KEY=VALUE with a positive "
                         "number, e.g. tool=2")
    return number if name.strip() == key else default


@scenario("whatif-tool", "cpu", "what-if: plan, a tool of pure-Python work (0.3 s of CPU; "
          f"{CHANGE_VARIABLE}=tool=2 halves it), a fetch from a slow API (0.15 s)")
def whatif_tool(ctx: Ctx) -> None:
    work_s = 0.3 / change("tool", 1.0)
    with Service("slow-api") as api:
        def one(i: int) -> None:
            with ctx.task("analyse-repo") as (_, ledger):
                with ctx.step(ledger, "cpu", "context", "plan"):
                    assemble_context(i, 20)
                with ctx.step(ledger, "cpu", "tool", "static-analysis", tool="python"):
                    burn_python(work_s)
                with ctx.step(ledger, "io", "context", "fetch-docs",
                              **{"server.address": "127.0.0.1"}):
                    get_json(f"{api.url}/wait?s=0.15")

        ctx.together(one, ctx.tasks, ctx.load)


@scenario("whatif-inference", "io", "what-if: a model call labelled inference that waits on a "
          f"remote endpoint (0.4 s; {CHANGE_VARIABLE}=inference=2 halves it) between two "
          "short CPU steps")
def whatif_inference(ctx: Ctx) -> None:
    wait_s = 0.4 / change("inference", 1.0)
    with Service("slow-api") as api:
        def one(i: int) -> None:
            with ctx.task("answer-question") as (_, ledger):
                with ctx.step(ledger, "cpu", "context", "build-prompt"):
                    assemble_context(i, 20)
                with ctx.step(ledger, "io", "inference", "chat", model="remote-llm",
                              **{"server.address": "127.0.0.1"}):
                    get_json(f"{api.url}/wait?s={wait_s:.4f}")
                with ctx.step(ledger, "cpu", "context", "parse-answer"):
                    assemble_context(i + 1, 20)

        ctx.together(one, ctx.tasks, 2 * ctx.load)


@scenario("whatif-branches", "io", "what-if: two tools in parallel threads (fetch-a waits "
          f"0.6 s, fetch-b 0.45 s; {CHANGE_VARIABLE}=branch=2 halves fetch-a), then a short "
          "step: made faster, fetch-a hands the path to fetch-b")
def whatif_branches(ctx: Ctx) -> None:
    from concurrent.futures import ThreadPoolExecutor

    waits = {"fetch-a": 0.6 / change("branch", 1.0), "fetch-b": 0.45}
    with Service("slow-api") as api:
        def one(i: int) -> None:
            branches: dict = {}

            def fetch(name: str) -> None:
                ledger: dict = {}
                t0 = time.perf_counter()
                with ctx.step(ledger, "io", "tool", name, **{"server.address": "127.0.0.1"}):
                    get_json(f"{api.url}/wait?s={waits[name]:.4f}")
                branches[name] = (time.perf_counter() - t0, ledger)

            with ctx.task("gather-sources") as (_, ledger):
                with ctx.step(ledger, "cpu", "context", "plan"):
                    assemble_context(i, 20)
                with ThreadPoolExecutor(2, thread_name_prefix=f"{ctx.name}-{i}") as pool:
                    list(pool.map(fetch, list(waits)))
                for k, v in max(branches.values(), key=lambda b: b[0])[1].items():
                    ledger[k] = ledger.get(k, 0.0) + v  # the longest branch is on the chain
                with ctx.step(ledger, "cpu", "context", "merge"):
                    assemble_context(i + 1, 20)

        ctx.together(one, ctx.tasks, ctx.load)


def _pin(cpus: int) -> None:
    """Run this process (and the children it starts from now on) on its first ``cpus``
    CPUs."""
    if not hasattr(os, "sched_setaffinity"):
        raise ValueError(f"{CHANGE_VARIABLE}=cpus=...: this system cannot pin a process")
    mine = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, set(mine[:max(1, cpus)]))


@scenario("whatif-cores", "cpu", "what-if: four tasks at once, each a tool that runs a "
          "CPU-bound child process (0.3 s of CPU); the change is fewer cores "
          f"({CHANGE_VARIABLE}=cpus=1, and the recording under taskset -c 0)")
def whatif_cores(ctx: Ctx) -> None:
    cpus = change("cpus", 0)
    if cpus:
        _pin(int(cpus))

    def one(i: int) -> None:
        with ctx.task("run-checks") as (_, ledger):
            with ctx.step(ledger, "cpu", "context", "plan"):
                assemble_context(i, 20)
            with ctx.step(ledger, "cpu", "tool", "checker", tool="python"):
                subprocess.run([sys.executable, "-c", BURN.format(s=0.3)], check=True)

    ctx.together(one, ctx.tasks, 4 * ctx.load)


# decode steps per request of whatif-slots, of a wider model than the other scenarios' (its
# matrix products outweigh the interpreter's share of each step, as a GPU server's kernels do:
# two requests served at once by one server process do not wait for each other's Python)
SLOT_TOKENS = 800
SLOT_HIDDEN = 1536


@scenario("whatif-slots", "queue", "what-if: online requests arriving in a burst (40 ms apart) "
          f"at a model server with one slot (each {SLOT_TOKENS} decode steps, about 0.15 s "
          "of compute here); "
          f"{CHANGE_VARIABLE}=slots=2 gives it two")
def whatif_slots(ctx: Ctx) -> None:
    slots = int(change("slots", 1))
    with Service("model-server", str(slots), str(SLOT_HIDDEN),
                 env={"OPENBLAS_NUM_THREADS": "1", "AGENTSCOPE_SCENARIO": ctx.name}) as server:
        url = f"{server.url}/v1/completions"
        # a fixed amount of work per request (about 0.15 s here), the same in the baseline and
        # in the re-run: the server's own calibration varies by 20 % from start to start
        tokens = SLOT_TOKENS

        def one(i: int) -> None:
            # a burst, in a known order: first come, first served at the server
            time.sleep(0.04 * i)
            with ctx.task("user-chat") as (_, ledger):
                with ctx.step(ledger, "cpu", "context", "build-prompt"):
                    assemble_context(i, 20)
                _model_call(ctx, ledger, url, tokens)

        n = ctx.tasks * ctx.load
        ctx.together(one, n, n)
