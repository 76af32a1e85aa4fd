"""The front door: load a trace directory, analyse it, and get the results as data.

::

    import agentscope

    a = agentscope.analyze("traces/")      # an Analysis
    a.tasks                                # pandas DataFrame, one row per task
    a.critical_path                        # pandas DataFrame, one row per critical-path section
    a.summary                              # the fleet figures (.to_dict())
    a.problems                             # input problems, each with its file and line
    a.query("SELECT bottleneck, count(*) FROM tasks GROUP BY ALL")   # DataFrame
    a.to_json()                            # what `agentscope analyze --format json` prints

    s = agentscope.analysis.open_store("traces/")  # SQL only: the saved analysis when current
    s.query("SELECT count(*) FROM tasks")

Every caller goes through here: the CLI, ``agentscope serve``, the scenario scorer, the GPU
device check and the benchmarks' end-to-end figures (their component figures time the store
and the engine apart). See docs/analysis.md.
"""

from .checking import CheckResult, check
from .core import MEMORY, Analysis, Progress, StoredAnalysis, analyze, open_store, source_state
from .document import SCHEMA, iso_time, strict_json
from .plan import parse_price
from .whatif import parse_slots, speedups as parse_speedups

__all__ = ["Analysis", "CheckResult", "MEMORY", "Progress", "SCHEMA", "StoredAnalysis",
           "analyze", "check", "iso_time", "open_store", "parse_price", "parse_slots",
           "parse_speedups", "source_state", "strict_json"]
