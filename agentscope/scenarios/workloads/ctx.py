"""What a scenario runs with: its tasks and their steps, timed by the workload's own stopwatch,
each with the truth it writes beside the trace (the truth module's Recorder)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path
from typing import Callable, Iterator

import agentscope

from ..truth import Recorder


@dataclasses.dataclass
class Ctx:
    name: str
    tasks: int
    load: int
    rec: Recorder
    work: Path  # scratch space on the trace directory's file system

    def together(self, fn: Callable[[int], None], n: int, width: int) -> None:
        """fn(0..n-1), ``width`` at a time, each in its own thread; re-raises a failure."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, width),
                                thread_name_prefix=f"{self.name}-task") as pool:
            for f in [pool.submit(fn, i) for i in range(n)]:
                f.result()

    @contextlib.contextmanager
    def task(self, name: str, lane: str = "online") -> Iterator[tuple]:
        """A task (root span) and its ledger: seconds per class on its longest chain of
        steps, filled by :meth:`step`. The rest of the task's time is the agent's own
        (orchestration, and its threads waiting for the interpreter lock): Python, ``cpu``."""
        with agentscope.task(name, lane=lane) as root:
            ledger: dict = {}
            self.rec.span(root, "cpu")
            t0 = time.perf_counter()
            yield root, ledger
            rest = time.perf_counter() - t0 - sum(ledger.values())
            if rest > 0:
                ledger["cpu"] = ledger.get("cpu", 0.0) + rest
            self.rec.task(root, ledger)

    @contextlib.contextmanager
    def step(self, ledger: "dict | None", truth: str, stage: str, name: str,
             **attrs: object) -> Iterator[object]:
        """A span whose own time the workload knows was spent on ``truth``; its duration
        goes to ``ledger[truth]`` (None: not on the task's longest chain)."""
        with agentscope.stage(stage, name=name, **attrs) as span:
            t0 = time.perf_counter()
            try:
                yield span
            finally:
                if ledger is not None:
                    ledger[truth] = ledger.get(truth, 0.0) + time.perf_counter() - t0
        self.rec.span(span, truth)
