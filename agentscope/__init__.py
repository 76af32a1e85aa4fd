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

Analyse what it recorded::

    a = agentscope.analyze("traces/")     # an agentscope.analysis.Analysis
    a.tasks                               # pandas DataFrame, one row per task

See README.md, docs/instrumentation.md and docs/analysis.md.
"""

from ._version import __version__
from .vocab import Lane, Resource, Stage

# (not analyze and Analysis: a star import in an agent would load the analysis with them)
__all__ = [
    "Lane", "Resource", "Runtime", "Stage", "__version__", "annotate", "current_span", "flush",
    "init", "shutdown", "stage", "task", "trace_env", "wrap",
]
_CAPTURE = ("Runtime", "annotate", "current_span", "flush", "init", "shutdown", "stage", "task",
            "trace_env", "wrap")
_ANALYSIS = ("analyze", "Analysis")


def __getattr__(name: str):
    # Each layer is imported on first use: the capture (OpenTelemetry, asyncio) not by the
    # command line, which never records spans; the analysis (DuckDB, numpy) not by an agent
    # that only records them.
    if name in _CAPTURE:
        from . import capture as layer
    elif name in _ANALYSIS:
        from . import analysis as layer
    else:
        raise AttributeError(f"module 'agentscope' has no attribute {name!r}")
    value = getattr(layer, name)
    globals()[name] = value  # (looked up here once)
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_CAPTURE) | set(_ANALYSIS))
