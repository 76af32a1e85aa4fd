"""Framework scenarios: agents built on real frameworks and traced by the frameworks' own
OpenTelemetry instrumentation, run as a user runs them under ``agentscope run``: the spans
go out through an OpenTelemetry SDK exporter (an OTLP/JSON file in the trace directory, or
OTLP/HTTP to ``agentscope receive`` with ``AGENTSCOPE_SCENARIO_EXPORT=receive``: see
framework_telemetry.py), never through agentscope's own capture.

Two frameworks (framework_agents.py): ``fw-openai-*``, the ``openai`` client instrumented by
opentelemetry-instrumentation-openai-v2 with the agent loop the user's (GenAI conventions);
``fw-agents-*``, the OpenAI Agents SDK instrumented by OpenInference. The model is a local
scripted OpenAI-compatible endpoint (llm_server.py, a sleep per call: no GPU, so ``io``).
Each task: model call, tool, model call, answer. The cases, per framework:

* ``model``: the model calls wait 0.75 s each at the endpoint; the tool is trivial (io);
* ``cpu-tool``: the tool computes 1.5 s of CPU in the agent's process, pure Python (cpu);
* ``child-tool``: the tool runs a child process that computes 1.5 s of CPU (cpu);
* ``http-tool``: the tool waits 1.5 s on an HTTP API (io);
* ``concurrent``: a CPU-tool task and an HTTP-tool task at once in two threads of one
  process, the HTTP one starting 1 s later and waiting 1 s: its first model call falls in
  the CPU tool, its tool overlaps the CPU tool's last half second or so (mixed: each task
  its own class);
* ``burners``: CPU-tool and HTTP-tool tasks in turn while two processes outside the agent's
  process tree spin on the CPU (mixed: the CPU tool is cpu, its wait for a core too; the
  HTTP tool io).

Elsewhere the model calls wait 0.25 s. ``--load L`` runs L tasks (L pairs) at once.
"""

from __future__ import annotations

import contextlib
import functools
import subprocess
import sys
import time
import urllib.request
from typing import Iterator

from ..services import Service
from .ctx import Ctx
from .framework_agents import AgentsSDKAgent, OpenAIClientAgent, Tool, require
from .framework_telemetry import CURRENT, TaskRun, burners, export_mode, tracer_provider
from .hard_cases import BURN
from .registry import scenario
from .work import burn_python

MODEL_S = 0.25  # the endpoint's wait per model call, where the model is not the point
MODEL_CASE_S = 0.75  # ... and where it is: two calls a task, 1.5 s
LONG_S = 1.5  # the tool's long step
LATE_S, CONCURRENT_HTTP_S = 1.0, 1.0  # concurrent: the HTTP task starts later, waits less
QUESTION = "Please look into this for me and tell me what you find."
AGENTS = {"openai": OpenAIClientAgent, "agents": AgentsSDKAgent}
ABOUT = {"openai": "openai client + opentelemetry-instrumentation-openai-v2, own agent loop",
         "agents": "OpenAI Agents SDK + OpenInference instrumentation"}


def _http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.read().decode()


def _child_burn(seconds: float) -> str:
    subprocess.run([sys.executable, "-c", BURN.format(s=seconds)], check=True)
    return f"tests passed after {seconds:.1f} s of CPU"


def _tools(url: str) -> dict:
    """The scenarios' tools by case, each with the class of its own time."""
    return {
        "trivial": Tool("get_weather", "Today's weather.", "cpu", 0.0, lambda: "sunny, 21 C"),
        "cpu": Tool("rank_documents", "Rank the documents against the question.", "cpu", 0.0,
                    lambda: f"best: doc {burn_python(LONG_S) % 100}"),
        "child": Tool("run_tests", "Run the project's test suite.", "cpu", 0.0,
                      lambda: _child_burn(LONG_S)),
        "http": Tool("search_web", "Search the web.", "io", LONG_S,
                     lambda: _http_get(f"{url}/wait?s={LONG_S}")),
        "http-short": Tool("search_news", "Search the news.", "io", CONCURRENT_HTTP_S,
                           lambda: _http_get(f"{url}/wait?s={CONCURRENT_HTTP_S}")),
    }


@contextlib.contextmanager
def _agent(ctx: Ctx, framework: str) -> Iterator[tuple]:
    """(the framework's agent, the tools) with the model endpoint up and the user's
    TracerProvider exporting; everything flushed and stopped on exit."""
    require(AGENTS[framework], receive=export_mode() == "receive")
    with Service("llm-server") as llm:
        tools = _tools(llm.url)
        truths = {t.name: (t.truth, t.wait_s) for t in tools.values()}
        with tracer_provider(f"scenario-{ctx.name}", ctx.rec, truths,
                             ctx.rec.path.parent) as provider:
            agent = AGENTS[framework](provider, llm.url)
            try:
                yield agent, tools
            finally:
                agent.close()


def _task(ctx: Ctx, agent: object, tool: Tool, model_s: float) -> None:
    """One task: the agent's run, its root span (the framework's) bound to it, and its
    truth from the workload's stopwatch."""
    run = TaskRun(f"ask-{tool.name}", model_wait_s=model_s, tool_wait_s=tool.wait_s)
    token = CURRENT.set(run)
    t0 = time.perf_counter()
    try:
        agent.run(run, QUESTION, tool, f"fake-sleep-{model_s}")  # type: ignore[attr-defined]
    finally:
        CURRENT.reset(token)
    total = time.perf_counter() - t0
    if run.root is None:
        raise RuntimeError(f"{ctx.name}: the framework made no root span for the task")
    ctx.rec.task(run.root, run.ledger(total),
                 why=f"{run.model_calls} model calls {run.model_s:.2f} s (scripted wait "
                     f"{model_s} s each), {tool.name} {run.tool_s:.2f} s ({tool.truth}, "
                     f"scripted wait {tool.wait_s} s), of {total:.2f} s")


def _single(ctx: Ctx, framework: str, case: str) -> None:
    with _agent(ctx, framework) as (agent, tools):
        tool = tools[{"model": "trivial", "cpu-tool": "cpu", "child-tool": "child",
                      "http-tool": "http"}[case]]
        model_s = MODEL_CASE_S if case == "model" else MODEL_S
        ctx.together(lambda i: _task(ctx, agent, tool, model_s), ctx.tasks, ctx.load)


def _concurrent(ctx: Ctx, framework: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with _agent(ctx, framework) as (agent, tools):
        def late_http() -> None:
            time.sleep(LATE_S)
            _task(ctx, agent, tools["http-short"], MODEL_S)

        def pair(i: int) -> None:  # two tasks at once, in two threads of this process
            with ThreadPoolExecutor(2, thread_name_prefix=f"{ctx.name}-pair{i}") as pool:
                done = [pool.submit(_task, ctx, agent, tools["cpu"], MODEL_S),
                        pool.submit(late_http)]
                for f in done:
                    f.result()

        ctx.together(pair, max(1, ctx.tasks // 2), ctx.load)


def _burners(ctx: Ctx, framework: str) -> None:
    with _agent(ctx, framework) as (agent, tools), burners(2):
        time.sleep(0.3)  # the other tenant's jobs are on the CPUs before the tasks start
        ctx.together(lambda i: _task(ctx, agent, tools["cpu" if i % 2 == 0 else "http"],
                                     MODEL_S), ctx.tasks, ctx.load)


CASES = {  # case: (expected class, what it does)
    "model": ("io", (f"the model calls wait {MODEL_CASE_S} s each at the endpoint, the tool "
                     "is trivial")),
    "cpu-tool": ("cpu", (f"the tool computes {LONG_S} s of CPU in the agent's process (pure "
                         "Python)")),
    "child-tool": ("cpu", f"the tool runs a child process computing {LONG_S} s of CPU"),
    "http-tool": ("io", f"the tool waits {LONG_S} s on an HTTP API"),
    "concurrent": ("mixed", ("a CPU-tool task and an HTTP-tool task at once in two threads "
                             "of one process, their tools overlapping in part")),
    "burners": ("mixed", ("CPU-tool and HTTP-tool tasks in turn while two processes outside "
                          "the agent's tree spin on the CPUs")),
}


def _runner(framework: str, case: str):
    if case == "concurrent":
        return functools.partial(_concurrent, framework=framework)
    if case == "burners":
        return functools.partial(_burners, framework=framework)
    return functools.partial(_single, framework=framework, case=case)


for _framework in AGENTS:
    for _case, (_expect, _about) in CASES.items():
        scenario(f"fw-{_framework}-{_case}", _expect,
                 f"{ABOUT[_framework]}: {_about}")(_runner(_framework, _case))
