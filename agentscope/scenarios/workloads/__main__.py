"""Running one scenario: ``python -m agentscope.scenarios.workloads NAME --tasks N --load L``
(and, with ``--agent``, one of cpu-contention's contending agents). Exits 3 when this machine
cannot produce the scenario."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import agentscope

from ..truth import Recorder
from . import SCENARIOS
from .cpu_bound import _contending_agent
from .ctx import Ctx
from .registry import Unavailable


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agentscope.scenarios.workloads")
    p.add_argument("name", choices=sorted(SCENARIOS))
    p.add_argument("--tasks", type=int, default=4)
    p.add_argument("--load", type=int, default=1)
    p.add_argument("--agent", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    agentscope.init(service=f"scenario-{args.name}")
    try:
        if args.agent is not None:
            _contending_agent(args.agent)
            return 0
        trace_dir = Path(os.environ.get("AGENTSCOPE_TRACE_DIR", "traces"))
        work = Path(tempfile.mkdtemp(prefix=".scenario-", dir=trace_dir))
        try:
            ctx = Ctx(args.name, args.tasks, args.load, Recorder(trace_dir, args.name), work)
            try:
                SCENARIOS[args.name].run(ctx)
            finally:
                ctx.rec.close()
        except Unavailable as e:
            print(f"{args.name}: cannot run here: {e}", file=sys.stderr)
            return 3
        finally:
            shutil.rmtree(work, ignore_errors=True)
    finally:
        agentscope.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
