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

import asyncio
import os
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
from workload import arguments, run_test_suite  # noqa: E402


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
        return run_test_suite(cpu_s)

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
    parser = arguments(__doc__)
    args = parser.parse_args()

    provider = setup_tracing()
    try:
        with openai_endpoint(args.base_url) as url:
            asyncio.run(run_tasks(url, args.model, args.tasks, args.tool_cpu))
    finally:
        provider.shutdown()  # flushes the spans to the exporter


if __name__ == "__main__":
    main()
