"""The example agent really does what its stages claim, and its traces say so."""

from __future__ import annotations

import subprocess
from collections import Counter, defaultdict

from agentscope.store.tracedir import scan

from .conftest import PYTHON, REPO, child_env


def test_example_agent_writes_truthful_traces(tmp_path):
    out = subprocess.run([PYTHON, str(REPO / "examples" / "agent.py"), "--trace-dir",
                          str(tmp_path), "--scale", "0.3"], check=True, capture_output=True,
                         text=True, env=child_env(), timeout=120)
    assert "ran 4 tasks" in out.stdout
    result = scan(tmp_path)
    assert not result.problems
    spans = result.spans
    tasks = {s.name: s for s in spans if s.stage == "task"}
    assert set(tasks) == {"fix-bug", "research", "multi-agent-review", "async-triage"}
    assert tasks["multi-agent-review"].attrs["agentscope.lane"] == "batch"
    by_trace = defaultdict(list)
    for s in spans:
        by_trace[s.trace_id].append(s)
    assert len(by_trace) == 4  # the model server's spans joined the callers' traces
    ids = {s.span_id: s for s in spans}
    for s in spans:
        if s.stage != "task":
            assert s.parent_span_id in ids, f"{s.name} lost its parent"

    # compile-and-test ran real child processes (the compiler, then the test binary)
    for tool in (s for s in spans if s.name == "compile-and-test"):
        assert tool.children >= 1 and tool.child_cpu_ns > 5 * tool.thread_cpu_ns
    # web-search waited on a socket: off-CPU
    for tool in (s for s in spans if s.name == "web-search"):
        assert tool.end_ns - tool.start_ns >= 50e6
        assert tool.thread_cpu_ns < 0.3 * (tool.end_ns - tool.start_ns)
    # context assembly is CPU in-process
    for ctx in (s for s in spans if s.name == "build-prompt"):
        assert ctx.thread_cpu_ns > 0 and ctx.children == 0
    # the model server, in its own process, decoded on its CPU under the caller's span
    generates = [s for s in spans if s.name == "model-server.generate"]
    assert generates and {s.service for s in generates} == {"model-server"}
    for g in generates:
        caller = ids[g.parent_span_id]  # the client's inference span, across the process boundary
        assert caller.stage == "inference" and caller.service == "example-agent"
        assert "gen_ai.latency.time_in_queue" in g.attrs

    def on_cpu(spans):
        return sum(s.thread_cpu_ns for s in spans) / sum(s.end_ns - s.start_ns for s in spans)

    # decoding is CPU work, searching is waiting (relative, so a busy machine does not matter)
    searches = [s for s in spans if s.name == "web-search"]
    assert on_cpu(generates) > 0.3 and on_cpu(generates) > 5 * on_cpu(searches)
    # a fan-out on threads and a gather on asyncio, each with three agents under its task
    agents = Counter(ids[s.parent_span_id].name for s in spans if s.stage == "agent")
    assert agents == {"multi-agent-review": 3, "async-triage": 3}
