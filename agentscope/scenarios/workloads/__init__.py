"""The scenario agents: small instrumented agents that really do what their ground truth says.

Each scenario runs several tasks. Every step is a real piece of work or a real wait: a C
compiler, a numpy forward pass, an HTTP server that answers late, a SQLite lock held by
another process, a one-slot model server with a queue, pages evicted from memory and faulted
back in. The workload times each step with its own stopwatch and writes, beside the trace,
which resource the step used (truth.py): that is the ground truth the analysis is scored
against. Nothing here reads agentscope's analysis.

``python -m agentscope.scenarios.workloads NAME --tasks N --load L`` runs one (normally under
``agentscope scenarios run``, which samples the counters); ``--load 2`` runs twice as many
tasks at once.

registry.py holds what a scenario is and the registry its ``@scenario`` fills; ctx.py what a
scenario runs with (its tasks and steps, timed, with their truth); work.py the CPU work the
steps share; one module per class its workloads are bound by (cpu_bound, io_bound,
queue_bound, memory_bound), the hard cases (hard_cases.py) and the hard attribution cases
(attribution_cases.py: CPU time a span's own counters do not show), agents on real
frameworks traced by the frameworks' own instrumentation (framework_cases.py, with
framework_agents.py and framework_telemetry.py); __main__.py runs one.
"""

from __future__ import annotations

from .ctx import Ctx
from .registry import SCENARIOS, Scenario, Unavailable, scenario

# importing a module registers its scenarios: this order is the catalogue's, not to be sorted
# isort: off
from . import cpu_bound, io_bound, queue_bound, memory_bound, hard_cases  # noqa: F401
from . import attribution_cases, framework_cases  # noqa: F401
from . import whatif_cases  # noqa: F401
# isort: on

__all__ = ["SCENARIOS", "Ctx", "Scenario", "Unavailable", "scenario"]
