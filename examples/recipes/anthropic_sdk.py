"""An agent on the ``anthropic`` client, traced by OpenInference's ``AnthropicInstrumentor``
(an ``LLM`` span per ``messages.create``), with the agent loop's own spans as the GenAI
semantic conventions name them (``invoke_agent <agent>``, ``execute_tool <tool>``), sent as
OTLP/HTTP to ``OTEL_EXPORTER_OTLP_ENDPOINT``. Nothing of agentscope is imported to trace it.

Each task: the model asks for the ``run_tests`` tool (a ``tool_use`` block), the tool runs the
test suite (a child process computing ``--tool-cpu`` seconds of CPU), the model answers. The
model endpoint is a local fake Messages API that answers after the wait its model name asks
for (``fake-sleep-0.5``: 0.5 s; fake_anthropic.py), unless ``--base-url`` (or
``ANTHROPIC_BASE_URL``) names a real one.

Recipe (docs/recipes/anthropic-sdk.md)::

    agentscope receive --out traces/ &
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 \\
        agentscope run --trace-dir traces -- python examples/recipes/anthropic_sdk.py
    agentscope analyze traces/
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from anthropic import Anthropic
from openinference.instrumentation.anthropic import AnthropicInstrumentor
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm import anthropic_endpoint  # noqa: E402
from workload import arguments, run_test_suite  # noqa: E402

AGENT = "test-fixer"
RUN_TESTS = {"name": "run_tests", "description": "Run the project's test suite.",
             "input_schema": {"type": "object", "properties": {}}}


def setup_tracing() -> TracerProvider:
    """``Resource.create`` reads ``OTEL_RESOURCE_ATTRIBUTES`` (``agentscope run``'s
    ``host.name`` and ``process.pid``: how the spans find the sampled process tree)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "anthropic-agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    AnthropicInstrumentor().instrument(tracer_provider=provider)
    return provider


def run_tests(cpu_s: float) -> str:
    return run_test_suite(cpu_s)


def fix_failing_test(client: Anthropic, model: str, cpu_s: float) -> str:
    """One task: model -> run_tests -> model."""
    tracer = trace.get_tracer("anthropic-agent")
    messages: list = [{"role": "user", "content": "test_parse_dates fails since yesterday."}]
    with tracer.start_as_current_span(f"invoke_agent {AGENT}",
                                      attributes={"gen_ai.operation.name": "invoke_agent",
                                                  "gen_ai.agent.name": AGENT}):
        for _ in range(4):
            reply = client.messages.create(
                model=model, max_tokens=1024, tools=[RUN_TESTS], messages=messages,
                system="Fix the failing test. Run the tests, then answer.")
            calls = [b for b in reply.content if b.type == "tool_use"]
            if not calls:
                return "".join(b.text for b in reply.content if b.type == "text")
            messages.append({"role": "assistant", "content": reply.content})
            results = []
            for call in calls:
                with tracer.start_as_current_span(
                        f"execute_tool {call.name}",
                        attributes={"gen_ai.operation.name": "execute_tool",
                                    "gen_ai.tool.name": call.name,
                                    "gen_ai.tool.call.id": call.id}):
                    output = run_tests(cpu_s)
                results.append({"type": "tool_result", "tool_use_id": call.id,
                                "content": output})
            messages.append({"role": "user", "content": results})
    raise RuntimeError("no answer after 4 model calls")


def main() -> None:
    parser = arguments(__doc__, "ANTHROPIC_BASE_URL", "a real Anthropic endpoint")
    args = parser.parse_args()

    provider = setup_tracing()
    try:
        with anthropic_endpoint(args.base_url) as url:
            client = Anthropic(base_url=url, max_retries=0,
                               api_key=os.environ.get("ANTHROPIC_API_KEY",
                                                      "not-needed-by-the-fake"))
            for i in range(args.tasks):
                print(f"task {i + 1}: {fix_failing_test(client, args.model, args.tool_cpu)}")
            client.close()
    finally:
        provider.shutdown()  # flushes the spans to the exporter


if __name__ == "__main__":
    main()
