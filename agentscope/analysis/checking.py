"""``check()``: validate every trace file of a directory (or one file), in every format the
store reads, without building a store."""

from __future__ import annotations

import dataclasses
import os
from collections import Counter

from .. import metric_names as mn
from .. import semconv
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
    formats: dict = dataclasses.field(default_factory=dict)  # format -> files read
    skipped: tuple = ()  # (file, why) of the files in no format agentscope reads

    def to_dict(self) -> dict:
        return {"trace_dir": self.trace_dir, "files": self.files, "formats": dict(self.formats),
                "skipped": [{"file": f, "reason": r} for f, r in self.skipped],
                "spans": self.spans,
                "traces": self.traces, "samples": self.samples, "stages": dict(self.stages),
                "duplicates": self.duplicates,
                "spans_dropped_by_writers": self.spans_dropped_by_writers,
                "problems": [{"file": p.path, "line": p.line, "span_id": p.span_id,
                              "reason": p.reason, "torn": p.torn} for p in self.problems]}


def check(source: "str | os.PathLike[str]") -> CheckResult:
    """Read and validate every trace file below ``source`` (or the file ``source``). Raises
    FileNotFoundError if it does not exist. Foreign spans are counted under the stage their
    conventions give them (agentscope.semconv), as the store would."""
    result = scan(source)
    stages = Counter(s.stage or _convention_stage(s) or "(none)" for s in result.spans)
    return CheckResult(
        str(source), len(result.files), len(result.spans),
        len({s.trace_id for s in result.spans}), len(result.samples),
        dict(sorted(stages.items(), key=lambda kv: -kv[1])), result.duplicates,
        _latest(result.samples, mn.AGENTSCOPE_CAPTURE_SPANS_DROPPED), tuple(result.problems),
        dict(Counter(f.kind for f in result.files)),
        tuple((s.rel, s.reason) for s in result.skipped if not s.broken))


def _convention_stage(span) -> "str | None":
    return semconv.stage_for(span.attrs, span.kind)


def _latest(samples: list, metric: str) -> float:
    """Sum over writer processes of each one's latest cumulative value of ``metric``."""
    latest: dict = {}
    for s in samples:
        if s.metric == metric:
            key = (s.host, s.pid)
            if key not in latest or s.ts_ns >= latest[key][0]:
                latest[key] = (s.ts_ns, s.value)
    return sum(v for _, v in latest.values())
