"""``check()``: validate every capture file of a trace directory without building a store."""

from __future__ import annotations

import dataclasses
import os
from collections import Counter

from .. import metric_names as mn
from ..store.tracedir import scan


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """What a trace directory holds, and every line that could not be read."""

    trace_dir: str
    files: int
    spans: int
    traces: int
    samples: int
    stages: dict  # stage (or "(none)") -> spans, most first
    duplicates: int  # spans seen again with the same (trace_id, span_id); the first is kept
    spans_dropped_by_writers: float  # what the writers counted as dropped (queue full, errors)
    problems: tuple  # of agentscope.errors.TraceFormatError

    def to_dict(self) -> dict:
        return {"trace_dir": self.trace_dir, "files": self.files, "spans": self.spans,
                "traces": self.traces, "samples": self.samples, "stages": dict(self.stages),
                "duplicates": self.duplicates,
                "spans_dropped_by_writers": self.spans_dropped_by_writers,
                "problems": [{"file": p.path, "line": p.line, "span_id": p.span_id,
                              "reason": p.reason, "torn": p.torn} for p in self.problems]}


def check(source: "str | os.PathLike[str]") -> CheckResult:
    """Read and validate every capture file below ``source``. Raises FileNotFoundError if it
    is not a directory."""
    result = scan(source)
    stages = Counter(s.stage or "(none)" for s in result.spans)
    return CheckResult(
        str(source), len(result.files), len(result.spans),
        len({s.trace_id for s in result.spans}), len(result.samples),
        dict(sorted(stages.items(), key=lambda kv: -kv[1])), result.duplicates,
        _latest(result.samples, mn.AGENTSCOPE_CAPTURE_SPANS_DROPPED), tuple(result.problems))


def _latest(samples: list, metric: str) -> float:
    """Sum over writer processes of each one's latest cumulative value of ``metric``."""
    latest: dict = {}
    for s in samples:
        if s.metric == metric:
            key = (s.host, s.pid)
            if key not in latest or s.ts_ns >= latest[key][0]:
                latest[key] = (s.ts_ns, s.value)
    return sum(v for _, v in latest.values())
