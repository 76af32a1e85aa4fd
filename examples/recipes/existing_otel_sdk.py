"""An application that already set up OpenTelemetry: its own SDK ``TracerProvider``, its own
exporter (OTLP/HTTP to ``OTEL_EXPORTER_OTLP_ENDPOINT``: its tracing backend), its own spans
(``handle_ticket``) and an instrumentation (``opentelemetry-instrumentation-openai-v2``'s
``chat`` spans). agentscope is added with two lines: ``agentscope.init(tracer_provider=...)``
after the app's set-up, and ``agentscope.stage`` where the app does work worth measuring.

In this "sdk mode" agentscope's spans are made by the app's provider: they are children of
the app's spans in the app's traces and reach the app's exporter, with their resource
accounting (thread and child-process CPU, context switches, page faults) as ``agentscope.*``
attributes; and agentscope adds a processor that writes every span of the provider (the
app's, the instrumentation's, its own) into its trace directory.

Each task (a support ticket): a ``context`` stage builds the prompt, the model is asked
(it answers after the wait its name asks for: a local fake endpoint unless ``--base-url`` or
``OPENAI_BASE_URL`` names a real one), a ``tool`` stage runs the test suite (a child process
computing ``--tool-cpu`` seconds of CPU), the model answers.

Recipe (docs/recipes/existing-otel-sdk.md)::

    agentscope receive --out backend/ &          # stands in for the app's tracing backend
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 \\
        agentscope run --trace-dir traces -- python examples/recipes/existing_otel_sdk.py
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

import agentscope

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm import openai_endpoint  # noqa: E402
from workload import arguments, run_test_suite  # noqa: E402


def app_tracing() -> TracerProvider:
    """The app's own OpenTelemetry set-up, as it was before agentscope."""
    provider = TracerProvider(resource=Resource.create({"service.name": "support-app"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    return provider


def handle_ticket(client: OpenAI, model: str, cpu_s: float, ticket: str) -> str:
    tracer = trace.get_tracer("support-app")
    with tracer.start_as_current_span("handle_ticket", kind=SpanKind.SERVER,
                                      attributes={"app.ticket": ticket}):
        with agentscope.stage("context", name="build_prompt"):
            messages: list = [{"role": "system", "content": "Fix it. Run the tests, then answer."},
                              {"role": "user", "content": f"{ticket}: test_parse_dates fails."}]
        plan = client.chat.completions.create(model=model, messages=messages)
        with agentscope.stage("tool", name="run_tests"):  # its child's CPU is measured exactly
            done = run_test_suite(cpu_s)
        messages += [{"role": "assistant", "content": plan.choices[0].message.content or ""},
                     {"role": "user", "content": f"The tests say: {done}"}]
        answer = client.chat.completions.create(model=model, messages=messages)
        return f"{answer.choices[0].message.content} (tests: {done})"


def main() -> None:
    parser = arguments(__doc__)
    args = parser.parse_args()

    provider = app_tracing()
    # after the app's set-up: agentscope's spans are the app's provider's ("sdk mode"); the
    # trace directory is AGENTSCOPE_TRACE_DIR (agentscope run sets it), else ./traces
    agentscope.init(tracer_provider=provider, service="support-app")
    try:
        with openai_endpoint(args.base_url) as url:
            client = OpenAI(base_url=url, max_retries=0,
                            api_key=os.environ.get("OPENAI_API_KEY", "not-needed-by-the-fake"))
            for i in range(args.tasks):
                answer = handle_ticket(client, args.model, args.tool_cpu, f"T-{i + 1}")
                print(f"ticket T-{i + 1}: {answer}")
            client.close()
    finally:
        agentscope.shutdown()
        provider.shutdown()  # flushes the app's exporter


if __name__ == "__main__":
    main()
