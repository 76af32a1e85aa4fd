"""An agent on LangChain (``langchain-openai``'s ``ChatOpenAI`` with a tool bound), traced by
OpenInference's ``LangChainInstrumentor``: every span is the instrumentation's (a ``CHAIN``
span for the agent, an ``LLM`` span per model call, a ``TOOL`` span per tool call). The spans
are written as OTLP/JSON lines, the OpenTelemetry Collector file exporter's format, into the
trace directory (``AGENTSCOPE_TRACE_DIR``, which ``agentscope run`` sets), beside the counters
``agentscope run`` samples: no receiver needed.

Each task: the model asks for the ``run_tests`` tool, the tool runs the test suite (a child
process computing ``--tool-cpu`` seconds of CPU), the model answers. The model endpoint is a
local fake (fake_llm.py) unless ``--base-url`` (or ``OPENAI_BASE_URL``) names a real one.

Recipe (docs/recipes/langchain-openinference.md)::

    agentscope run --trace-dir traces -- python examples/recipes/langchain_openinference.py
    agentscope analyze traces/
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import chain
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from agentscope.exporters.otlp_file import OTLPJsonFileExporter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm import openai_endpoint  # noqa: E402
from workload import arguments, run_test_suite  # noqa: E402

TOOL_CPU_S = [1.5]  # --tool-cpu


@tool
def run_tests() -> str:
    """Run the project's test suite."""
    return run_test_suite(TOOL_CPU_S[0])


def setup_tracing(trace_dir: Path) -> TracerProvider:
    """``Resource.create`` reads ``OTEL_RESOURCE_ATTRIBUTES`` (``agentscope run``'s
    ``host.name`` and ``process.pid``: how the spans find the sampled process tree)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "langchain-agent"}))
    provider.add_span_processor(BatchSpanProcessor(
        OTLPJsonFileExporter(trace_dir / f"otlp-{os.getpid()}.jsonl")))
    LangChainInstrumentor().instrument(tracer_provider=provider)
    return provider


def make_agent(llm: ChatOpenAI):
    model = llm.bind_tools([run_tests])

    @chain
    def fix_failing_test(question: str) -> str:
        """One task (the CHAIN span at the root of its trace): model -> tool -> model."""
        messages: list = [SystemMessage("Fix the failing test. Run the tests, then answer."),
                          HumanMessage(question)]
        for _ in range(4):
            reply = model.invoke(messages)
            messages.append(reply)
            if not reply.tool_calls:
                return str(reply.content)
            for call in reply.tool_calls:
                messages.append(run_tests.invoke(call))  # a ToolMessage
        raise RuntimeError("no answer after 4 model calls")

    return fix_failing_test


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--trace-dir", type=Path,
                        default=Path(os.environ.get("AGENTSCOPE_TRACE_DIR", "traces")))
    args = parser.parse_args()
    TOOL_CPU_S[0] = args.tool_cpu
    args.trace_dir.mkdir(parents=True, exist_ok=True)

    provider = setup_tracing(args.trace_dir)
    try:
        with openai_endpoint(args.base_url) as url:
            llm = ChatOpenAI(model=args.model, base_url=url, max_retries=0,
                             api_key=os.environ.get("OPENAI_API_KEY", "not-needed-by-the-fake"))
            agent = make_agent(llm)
            for i in range(args.tasks):
                print(f"task {i + 1}: {agent.invoke('test_parse_dates fails since yesterday.')}")
    finally:
        provider.shutdown()  # flushes the spans to the file


if __name__ == "__main__":
    main()
