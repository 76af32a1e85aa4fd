"""The OpenTelemetry side of the framework scenarios: a user's SDK ``TracerProvider`` whose
spans the frameworks' own instrumentations make, exported as OTLP/JSON lines into the trace
directory or sent live to ``agentscope receive``, and the truth of every span, written as
it ends.

``AGENTSCOPE_SCENARIO_EXPORT`` chooses the way out: ``file`` (the default:
``otlp-<pid>.jsonl`` in the trace directory, the Collector file exporter's format) or
``receive`` (OTLP/HTTP to an ``agentscope receive --out <trace dir>`` started for the run,
outside the agent's process tree, as a collector would be).

The instrumentations make the spans, so the truth is taken as they end (:class:`Truth`, a
span processor): a model call waited on the model endpoint as long as the workload scripted
it (``io``: a remote server with no GPU here), the rest of it is the client's Python
(``cpu``); a tool span likewise, or its tool's class where it computes; the agent's own
spans (``invoke_agent``, OpenInference ``AGENT``/``CHAIN``) are the framework's Python
between the calls (``cpu``). A task's root span is bound to the task the workload is running
in that context (:data:`CURRENT`), for its task truth (see :meth:`TaskRun.ledger`).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Optional

from opentelemetry.sdk.trace import SpanProcessor

from ..llm_server import latency_of
from ..truth import Recorder

EXPORT_ENV = "AGENTSCOPE_SCENARIO_EXPORT"
EXPORTS = ("file", "receive")
OTLP_FILE = "otlp-{pid}.jsonl"


@dataclasses.dataclass
class TaskRun:
    """One task as the workload arranged and timed it: its root span (bound as it starts),
    the waits it scripted (the model endpoint's per call, the tool's on its HTTP API per
    call: 0 for a tool that computes), and its model and tool calls (counted and timed on
    the workload's own stopwatch)."""

    name: str
    model_wait_s: float
    tool_wait_s: float
    root: Any = None
    model_calls: int = 0
    tool_calls: int = 0
    model_s: float = 0.0
    tool_s: float = 0.0

    def ledger(self, total_s: float) -> dict:
        """Seconds per class on the task's chain (its steps run one after the other): the
        scripted waits on the endpoint and the HTTP API are ``io``; the rest of the task
        (the tool's computing, the agent's Python, and their waits for a core or for the
        interpreter lock) is ``cpu``."""
        io = self.model_calls * self.model_wait_s + self.tool_calls * self.tool_wait_s
        return {"io": io, "cpu": max(0.0, total_s - io)}


# the task the workload is running in this context (a thread, or an asyncio task of it)
CURRENT: "contextvars.ContextVar[Optional[TaskRun]]" = contextvars.ContextVar(
    "agentscope_scenario_task", default=None)

LLM_OPERATIONS = {"chat", "text_completion", "generate_content", "embeddings"}


def span_truth(span: Any, tools: dict) -> "str | dict | None":
    """What ``span``'s own time was spent on, from what the workload arranged (``tools``:
    {tool name: (class, seconds each call waits on an HTTP API)}):

    * a model call: the endpoint's scripted wait (its model name says it) is ``io``, the
      rest of the span (the client's Python, its waits for a core or the interpreter lock)
      ``cpu``;
    * a tool: its wait on the HTTP API likewise, or its class where it computes; None for
      a tool the workload does not know;
    * any other span (the agent, its turns) is the framework's Python: ``cpu``."""
    attrs = span.attributes or {}
    operation = attrs.get("gen_ai.operation.name")
    kind = attrs.get("openinference.span.kind")
    if operation in LLM_OPERATIONS or kind in ("LLM", "EMBEDDING"):
        model = attrs.get("gen_ai.request.model") or attrs.get("llm.model_name") or ""
        return _waited(span, latency_of(str(model)))
    if operation == "execute_tool" or kind == "TOOL":
        name = attrs.get("gen_ai.tool.name") if operation == "execute_tool" else span.name
        if name not in tools:
            return None
        truth, wait_s = tools[name]
        return _waited(span, wait_s) if wait_s > 0 else truth
    return "cpu"


def _waited(span: Any, wait_s: float) -> "str | dict":
    """A span that waited ``wait_s`` on a remote server (``io``), the rest ``cpu``."""
    start, end = getattr(span, "start_time", None), getattr(span, "end_time", None)
    if not wait_s or start is None or end is None or end <= start:
        return "io"
    seconds = (end - start) / 1e9
    io = min(wait_s, seconds)
    return {"io": io, "cpu": seconds - io} if seconds > io else "io"


class Truth(SpanProcessor):
    """A span processor beside the exporter: binds each root span to the task running
    where it starts, and records each span's truth as it ends."""

    def __init__(self, rec: Recorder, tools: dict) -> None:
        self.rec = rec
        self.tools = tools

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        run = CURRENT.get()
        if run is not None and span.parent is None and run.root is None:
            run.root = span

    def on_end(self, span: Any) -> None:
        self.rec.span(span, span_truth(span, self.tools))


def export_mode() -> str:
    mode = os.environ.get(EXPORT_ENV, "file").strip().lower() or "file"
    if mode not in EXPORTS:
        raise ValueError(f"{EXPORT_ENV}={mode!r}: expected one of {', '.join(EXPORTS)}")
    return mode


@contextlib.contextmanager
def tracer_provider(service: str, rec: Recorder, tools: dict,
                    trace_dir: Path) -> Iterator[Any]:
    """A TracerProvider as a user sets one up (its resource from ``OTEL_RESOURCE_ATTRIBUTES``,
    which ``agentscope run`` fills with the host and the pid), with :class:`Truth` and a
    batch exporter into ``trace_dir`` (see the module); flushed and shut down on exit."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    with contextlib.ExitStack() as stack:
        if export_mode() == "receive":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            url = stack.enter_context(receiver(trace_dir))
            exporter: Any = OTLPSpanExporter(endpoint=url, timeout=30)
        else:
            from ...capture.otlp_file import OTLPJsonFileExporter

            exporter = OTLPJsonFileExporter(trace_dir / OTLP_FILE.format(pid=os.getpid()))
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(Truth(rec, tools))
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=1000))
        try:
            yield provider
        finally:
            provider.force_flush()
            provider.shutdown()


# ---- processes outside the agent's tree ---------------------------------------------------
# a short-lived intermediate starts the program in its own session and exits: the program's
# parent is then no longer the agent (it is adopted), so the agent's process tree, as the
# sampler reads it from /proc, does not hold it
_DETACH = ("import subprocess, sys\n"
           "p = subprocess.Popen(sys.argv[1:], start_new_session=True, stdin=subprocess.DEVNULL,"
           " stdout=subprocess.DEVNULL)\n"
           "print(p.pid, flush=True)\n")


def detached(command: list, stderr: Any = subprocess.DEVNULL) -> tuple:
    """Start ``command`` outside this process's tree; (its pid, the intermediate's Popen,
    whose ``stderr`` pipe, with ``stderr=subprocess.PIPE``, is the program's)."""
    via = subprocess.Popen([sys.executable, "-c", _DETACH, *command], stdout=subprocess.PIPE,
                           stderr=stderr, stdin=subprocess.DEVNULL, text=True)
    line = via.stdout.readline() if via.stdout else ""
    if via.stdout:
        via.stdout.close()
    via.wait(30)
    if not line.strip().isdigit():
        raise RuntimeError(f"could not start {command[0]} outside the agent's tree")
    return int(line), via


_URL = re.compile(r"receiving OTLP traces on (http://[^\s,]+)")


@contextlib.contextmanager
def receiver(trace_dir: Path, timeout_s: float = 30.0) -> Iterator[str]:
    """``agentscope receive --out trace_dir`` on a free port, outside the agent's tree;
    yields its OTLP/HTTP traces URL. On exit it is stopped (SIGTERM) and waited for: its
    files are complete then."""
    pid, via = detached([sys.executable, "-m", "agentscope.cli", "receive", "--out",
                         str(trace_dir), "--port", "0"], stderr=subprocess.PIPE)
    err = via.stderr
    try:
        said = _read_until(err, _URL, timeout_s)
        match = _URL.search(said)
        if match is None:
            raise RuntimeError(f"agentscope receive did not start: {said.strip()[-400:]}")
        yield match.group(1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        _read_until(err, None, timeout_s)  # to the end: the receiver has exited
        err.close()


def _read_until(stream: Any, pattern: "re.Pattern | None", timeout_s: float) -> str:
    """What ``stream`` says until ``pattern`` matches a line (None: until it closes) or
    ``timeout_s`` passes."""
    said = ""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        ready, _, _ = select.select([stream], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            break
        line = stream.readline()
        if not line:
            break
        said += line
        if pattern is not None and pattern.search(line):
            break
    return said


@contextlib.contextmanager
def burners(n: int, seconds_at_most: float = 300.0) -> Iterator[list]:
    """``n`` processes spinning on the CPU outside the agent's tree (another tenant's jobs)
    until the block ends (killed; each also stops by itself after ``seconds_at_most``)."""
    spin = ("import time\nend = time.monotonic() + {s}\nx = 0\n"
            "while time.monotonic() < end:\n"
            "    for i in range(20000):\n        x = (x * 31 + i) % 1000003\n")
    pids = []
    try:
        for _ in range(n):
            pid, _via = detached([sys.executable, "-c", spin.format(s=seconds_at_most)])
            pids.append(pid)
        yield pids
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
