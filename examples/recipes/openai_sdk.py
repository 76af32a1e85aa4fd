"""An agent on the ``openai`` client, traced by ``opentelemetry-instrumentation-openai-v2``
(its ``chat <model>`` spans), with the agent loop's own spans as the GenAI semantic
conventions name them (``invoke_agent <agent>``, ``execute_tool <tool>``), sent as OTLP/HTTP
to ``OTEL_EXPORTER_OTLP_ENDPOINT``. Nothing of agentscope is imported to trace it.

Each task: the model asks for the ``run_tests`` tool, the tool runs the test suite (a child
process that computes ``--tool-cpu`` seconds of CPU), the model answers. The model endpoint
is a local fake that answers after the wait its model name asks for (``fake-sleep-0.5``:
0.5 s, see fake_llm.py), unless ``--base-url`` (or ``OPENAI_BASE_URL``) names a real one.

Recipe (docs/recipes/openai-sdk.md)::

    agentscope receive --out traces/ &
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 \\
        agentscope run --trace-dir traces -- python examples/recipes/openai_sdk.py
    agentscope analyze traces/
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from openai import OpenAI
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm import openai_endpoint  # noqa: E402
from workload import arguments, run_test_suite  # noqa: E402

AGENT = "test-fixer"
RUN_TESTS = {"type": "function", "function": {
    "name": "run_tests", "description": "Run the project's test suite.",
    "parameters": {"type": "object", "properties": {}}}}


def setup_tracing() -> TracerProvider:
    """The OpenTelemetry set-up of any instrumented app: ``Resource.create`` reads
    ``OTEL_RESOURCE_ATTRIBUTES``, where ``agentscope run`` puts ``host.name`` and
    ``process.pid`` (that is how the spans find the process tree it samples); the exporter
    reads ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
    provider = TracerProvider(resource=Resource.create({"service.name": "openai-sdk-agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    return provider


def run_tests(cpu_s: float) -> str:
    return run_test_suite(cpu_s)


def fix_failing_test(client: OpenAI, model: str, cpu_s: float) -> str:
    """One task: model -> run_tests -> model."""
    tracer = trace.get_tracer("openai-sdk-agent")
    messages: list = [
        {"role": "system", "content": "Fix the failing test. Run the tests, then answer."},
        {"role": "user", "content": "test_parse_dates fails since yesterday."}]
    with tracer.start_as_current_span(f"invoke_agent {AGENT}", kind=SpanKind.INTERNAL,
                                      attributes={"gen_ai.operation.name": "invoke_agent",
                                                  "gen_ai.agent.name": AGENT}):
        for _ in range(4):
            reply = client.chat.completions.create(model=model, messages=messages,
                                                   tools=[RUN_TESTS])
            message = reply.choices[0].message
            if not message.tool_calls:
                return message.content or ""
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                with tracer.start_as_current_span(
                        f"execute_tool {call.function.name}",
                        attributes={"gen_ai.operation.name": "execute_tool",
                                    "gen_ai.tool.name": call.function.name,
                                    "gen_ai.tool.call.id": call.id}):
                    output = run_tests(cpu_s)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    raise RuntimeError("no answer after 4 model calls")


def main() -> None:
    parser = arguments(__doc__)
    args = parser.parse_args()

    provider = setup_tracing()
    try:
        with openai_endpoint(args.base_url) as url:
            client = OpenAI(base_url=url, max_retries=0,
                            api_key=os.environ.get("OPENAI_API_KEY", "not-needed-by-the-fake"))
            for i in range(args.tasks):
                print(f"task {i + 1}: {fix_failing_test(client, args.model, args.tool_cpu)}")
            client.close()
    finally:
        provider.shutdown()  # flushes the spans to the exporter


if __name__ == "__main__":
    main()
