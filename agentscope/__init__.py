"""agentscope: what really slows each AI agent task down.

Instrument an agent::

    import agentscope

    agentscope.init(trace_dir="traces", service="my-agent")

    @agentscope.task(name="fix-bug", lane="online")
    def fix_bug(issue): ...

    @agentscope.stage("tool", name="pytest")
    def run_tests(): ...

    with agentscope.stage("context"):
        prompt = build_prompt()

See README.md and docs/instrumentation.md.
"""

from ._version import __version__
from .capture import (Runtime, annotate, current_span, flush, init, shutdown, stage, task,
                      trace_env, wrap)
from .vocab import Lane, Resource, Stage

__all__ = [
    "Lane", "Resource", "Runtime", "Stage", "__version__", "annotate", "current_span", "flush",
    "init", "shutdown", "stage", "task", "trace_env", "wrap",
]
