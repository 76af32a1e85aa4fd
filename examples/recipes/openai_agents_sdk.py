"""An agent on the OpenAI Agents SDK (``Agent``, ``Runner``, ``function_tool``), traced by
OpenInference's ``OpenAIAgentsInstrumentor``: every span is the instrumentation's (``AGENT``
spans for the workflow and the agent, an ``LLM`` span per model call, a ``TOOL`` span per tool
call), sent as OTLP/HTTP to ``OTEL_EXPORTER_OTLP_ENDPOINT``.

Each task: the model asks for the ``run_tests`` tool, the tool runs the test suite (a child
process computing ``--tool-cpu`` seconds of CPU), the model answers. The model endpoint is a
local fake (fake_llm.py; the SDK on its chat completions API) unless ``--base-url`` (or
``OPENAI_BASE_URL``) names a real one. Nothing goes to api.openai.com: the SDK's own trace
upload is turned off (``set_trace_processors([])``).

Recipe (docs/recipes/openai-agents-sdk.md)::

    agentscope receive --out traces/ &
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 \\
        agentscope run --trace-dir traces -- python examples/recipes/openai_agents_sdk.py
    agentscope analyze traces/
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from pathlib import Path

import agents
from openai import AsyncOpenAI
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm import openai_endpoint  # noqa: E402

SUITE = ("import time\nend = time.process_time() + {s}\nx = 0\n"
         "while time.process_time() < end:\n    x = (x * 31 + 7) % 1000003\n"
         "print('42 passed')\n")


def setup_tracing() -> TracerProvider:
    """``Resource.create`` reads ``OTEL_RESOURCE_ATTRIBUTES`` (``agentscope run``'s
    ``host.name`` and ``process.pid``: how the spans find the sampled process tree)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "agents-sdk-agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    agents.set_trace_processors([])  # no upload of the SDK's own traces to OpenAI
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
    return provider


async def run_tasks(url: str, model: str, tasks: int, cpu_s: float) -> None:
    def run_tests() -> str:
        """Run the project's test suite."""
        done = subprocess.run([sys.executable, "-c", SUITE.format(s=cpu_s)],
                              capture_output=True, text=True, check=True)
        return done.stdout.strip()

    async with AsyncOpenAI(base_url=url, max_retries=0,
                           api_key=os.environ.get("OPENAI_API_KEY",
                                                  "not-needed-by-the-fake")) as client:
        agent = agents.Agent(
            name="test-fixer", instructions="Fix the failing test. Run the tests, then answer.",
            model=agents.OpenAIChatCompletionsModel(model=model, openai_client=client),
            tools=[agents.function_tool(run_tests)])
        for i in range(tasks):
            result = await agents.Runner.run(
                agent, "test_parse_dates fails since yesterday.", max_turns=4,
                run_config=agents.RunConfig(workflow_name="fix-failing-test"))
            print(f"task {i + 1}: {result.final_output}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"),
                        help="a real OpenAI-compatible endpoint (default: a local fake)")
    parser.add_argument("--model", default="fake-sleep-0.5",
                        help="the model (the fake waits the seconds its name ends in)")
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--tool-cpu", type=float, default=1.5,
                        help="CPU seconds the test suite computes")
    args = parser.parse_args()

    provider = setup_tracing()
    try:
        with openai_endpoint(args.base_url) as url:
            asyncio.run(run_tasks(url, args.model, args.tasks, args.tool_cpu))
    finally:
        provider.shutdown()  # flushes the spans to the exporter


if __name__ == "__main__":
    main()
