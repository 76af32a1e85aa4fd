"""The two agents of the framework scenarios, as their users write them, traced by the
frameworks' own OpenTelemetry instrumentation (nothing here makes a span by hand that the
framework would make):

* :class:`OpenAIClientAgent`: the ``openai`` client, instrumented by
  ``opentelemetry-instrumentation-openai-v2`` (its ``chat <model>`` spans); the agent loop is
  the user's, traced with the OpenTelemetry API as the GenAI semantic conventions say: an
  ``invoke_agent <name>`` span around the run, an ``execute_tool <tool>`` span per call.
* :class:`AgentsSDKAgent`: the OpenAI Agents SDK (``Agent``, ``Runner``, ``function_tool``)
  on the chat completions API, instrumented by OpenInference's ``OpenAIAgentsInstrumentor``:
  every agent, model and tool span is the instrumentation's.

Each runs one task: a model call that asks for the tool, the tool, a model call that
answers. It counts and times (its own stopwatch) the model calls and the tool calls on the
task's :class:`~.framework_telemetry.TaskRun` (the truth's ledger).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Callable, NamedTuple

from .framework_telemetry import TaskRun
from .registry import Unavailable

AGENT = "assistant"
INSTRUCTIONS = "Answer the user's question. Call the tool you are given once, then answer."
MAX_TURNS = 4
PIP = "pip install 'agentscope[frameworks]'"


class Tool(NamedTuple):
    name: str
    description: str
    truth: str  # the class of its own time, as the workload arranged it
    wait_s: float  # what each call waits on an HTTP API, as scripted (0: it computes)
    fn: Callable[[], str]


def require(agent_class: type, receive: bool) -> None:
    """Raise Unavailable, with the pip command, unless what the agent and the export need
    imports here."""
    import importlib

    needed = [*agent_class.requires, "opentelemetry.exporter.otlp.proto.common.trace_encoder"]
    if receive:
        needed.append("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    for module in needed:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise Unavailable(f"cannot import {module} ({e}): {PIP}") from e


def _timed_tool(run: TaskRun, tool: Tool) -> str:
    t0 = time.perf_counter()
    try:
        return tool.fn()
    finally:
        run.tool_s += time.perf_counter() - t0
        run.tool_calls += 1


class OpenAIClientAgent:
    """The ``openai`` client with opentelemetry-instrumentation-openai-v2; the loop ours."""

    requires = ("openai", "opentelemetry.instrumentation.openai_v2")

    def __init__(self, provider: Any, base_url: str) -> None:
        from openai import OpenAI
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        self.instrumentor = OpenAIInstrumentor()
        self.instrumentor.instrument(tracer_provider=provider)
        self.client = OpenAI(base_url=f"{base_url}/v1", api_key="scenario", max_retries=0)
        self.tracer = provider.get_tracer("scenario-agent-loop")  # the user's own code

    def close(self) -> None:
        self.client.close()
        self.instrumentor.uninstrument()

    def run(self, run: TaskRun, question: str, tool: Tool, model: str) -> str:
        from opentelemetry.trace import SpanKind, Status, StatusCode

        schema = {"type": "function", "function": {
            "name": tool.name, "description": tool.description,
            "parameters": {"type": "object", "properties": {}}}}
        messages: list = [{"role": "system", "content": INSTRUCTIONS},
                          {"role": "user", "content": question}]
        with self.tracer.start_as_current_span(f"invoke_agent {AGENT}", kind=SpanKind.INTERNAL,
                                               attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT,
                "gen_ai.provider.name": "openai", "gen_ai.request.model": model}):
            for _ in range(MAX_TURNS):
                t0 = time.perf_counter()
                reply = self.client.chat.completions.create(model=model, messages=messages,
                                                            tools=[schema])
                run.model_s += time.perf_counter() - t0
                run.model_calls += 1
                message = reply.choices[0].message
                if not message.tool_calls:
                    return message.content or ""
                messages.append(message.model_dump(exclude_none=True))
                for call in message.tool_calls:
                    with self.tracer.start_as_current_span(
                            f"execute_tool {call.function.name}", kind=SpanKind.INTERNAL,
                            attributes={"gen_ai.operation.name": "execute_tool",
                                        "gen_ai.tool.name": call.function.name,
                                        "gen_ai.tool.call.id": call.id,
                                        "gen_ai.tool.type": "function"}) as span:
                        if call.function.name != tool.name:
                            span.set_status(Status(StatusCode.ERROR, "unknown tool"))
                            output = json.dumps({"error": f"no tool {call.function.name}"})
                        else:
                            output = _timed_tool(run, tool)
                    messages.append({"role": "tool", "tool_call_id": call.id,
                                     "content": output})
        raise RuntimeError(f"no answer after {MAX_TURNS} model calls")


class AgentsSDKAgent:
    """The OpenAI Agents SDK with OpenInference's instrumentation: every span is theirs."""

    requires = ("openai", "agents", "openinference.instrumentation.openai_agents")

    def __init__(self, provider: Any, base_url: str) -> None:
        import agents
        from openai import AsyncOpenAI
        from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

        self.agents = agents
        self.base_url = f"{base_url}/v1"
        # nothing may go to api.openai.com: the chat completions API of the local endpoint,
        # and no trace processor but OpenInference's (the SDK's own uploads to OpenAI)
        agents.set_default_openai_api("chat_completions")
        agents.set_default_openai_client(
            AsyncOpenAI(base_url=self.base_url, api_key="scenario", max_retries=0),
            use_for_tracing=False)
        agents.set_trace_processors([])
        self.instrumentor = OpenAIAgentsInstrumentor()
        self.instrumentor.instrument(tracer_provider=provider)

    def close(self) -> None:
        self.instrumentor.uninstrument()

    def run(self, run: TaskRun, question: str, tool: Tool, model: str) -> str:
        return asyncio.run(self._run(run, question, tool, model))

    async def _run(self, run: TaskRun, question: str, tool: Tool, model: str) -> str:
        from openai import AsyncOpenAI

        agents = self.agents

        class Timing(agents.RunHooks):
            """The model calls on the workload's stopwatch."""

            started = 0.0

            async def on_llm_start(self, *args: Any) -> None:
                self.started = time.perf_counter()

            async def on_llm_end(self, *args: Any) -> None:
                run.model_s += time.perf_counter() - self.started
                run.model_calls += 1

        def call() -> str:
            # a sync tool, as users write them: the SDK runs it in a worker thread
            return _timed_tool(run, tool)

        # a client per run: an asyncio client belongs to the event loop it runs on
        async with AsyncOpenAI(base_url=self.base_url, api_key="scenario",
                               max_retries=0) as client:
            agent = agents.Agent(
                name=AGENT, instructions=INSTRUCTIONS,
                model=agents.OpenAIChatCompletionsModel(model=model, openai_client=client),
                tools=[agents.function_tool(call, name_override=tool.name,
                                            description_override=tool.description)])
            result = await agents.Runner.run(
                agent, question, hooks=Timing(), max_turns=MAX_TURNS,
                run_config=agents.RunConfig(workflow_name=run.name))
        return str(result.final_output)
