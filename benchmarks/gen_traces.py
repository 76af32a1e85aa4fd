"""Generate synthetic agent traces for benchmarks: tasks with parallel agent branches.

Each task: a root ``task`` span, ``branches`` parallel ``agent`` spans, each a sequence of
context -> inference -> tool steps; roughly ``spans_per_task`` spans per task. Resource
accounting is filled in with plausible values so classification has work to do. Written as
our span files (``spans-*.jsonl``) or as OTLP/JSON (one request per line).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from agentscope.formats import spanfile
from agentscope.records import SpanRecord

STAGES = ("context", "inference", "tool")


def generate(tasks: int, spans_per_task: int = 100, branches: int = 4, seed: int = 1):
    """Yield SpanRecords, trace by trace."""
    rng = random.Random(seed)
    t0 = 1_800_000_000_000_000_000
    steps = max(1, (spans_per_task - 1 - branches) // branches)
    for n in range(tasks):
        trace = f"{rng.getrandbits(128) | 1:032x}"
        root = f"{rng.getrandbits(64) | 1:016x}"
        start = t0 + n * 10_000_000_000
        records = []
        end_root = start
        for b in range(branches):
            agent = f"{rng.getrandbits(64) | 1:016x}"
            t = start + rng.randint(0, 5_000_000)
            a_start = t
            for k in range(steps):
                stage = STAGES[k % 3]
                dur = rng.randint(1_000_000, 60_000_000)
                cpu = int(dur * (rng.random() if stage != "tool" else rng.random() * 0.2))
                child = int(dur * 0.9) if stage == "tool" and rng.random() < 0.3 else 0
                attrs = {"gen_ai.request.model": "m"} if stage == "inference" else {}
                records.append(SpanRecord(trace, f"{rng.getrandbits(64) | 1:016x}", agent,
                                          f"{stage}-{k}", stage, "internal", t, t + dur, "unset",
                                          None, "bench", "h", 1, 1, cpu, child, 1 if child else 0,
                                          3, 1, 10, 0, 0, attrs))
                t += dur + (0 if rng.random() < 0.5 else rng.randint(0, 2_000_000))
            records.append(SpanRecord(trace, agent, root, f"agent-{b}", "agent", "internal",
                                      a_start, t, "unset", None, "bench", "h", 1, 1, 100_000, 0,
                                      0, 1, 0, 0, 0, 0, {}))
            end_root = max(end_root, t)
        records.append(SpanRecord(trace, root, None, f"task-{n % 50}", "task", "internal", start,
                                  end_root + 1_000_000, "unset", None, "bench", "h", 1, 1,
                                  200_000, 0, 0, 1, 0, 0, 0, 0,
                                  {"agentscope.lane": "online" if n % 3 else "batch"}))
        yield from records


def write_spanfiles(directory: Path, tasks: int, files: int = 4, **kw) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    outs = [open(directory / spanfile.file_name("bench", i, 1), "w") for i in range(files)]
    n = 0
    current, i = None, 0
    for r in generate(tasks, **kw):
        if r.trace_id != current:  # keep a trace in one file
            current, i = r.trace_id, (i + 1) % files
        outs[i].write(spanfile.encode(r))
        n += 1
    for f in outs:
        f.close()
    return n


def _kv(attrs):
    out = []
    for k, v in attrs.items():
        if isinstance(v, bool):
            out.append({"key": k, "value": {"boolValue": v}})
        elif isinstance(v, int):
            out.append({"key": k, "value": {"intValue": str(v)}})
        else:
            out.append({"key": k, "value": {"stringValue": str(v)}})
    return out


def otlp_span(r: SpanRecord, extra: dict) -> dict:
    """An OTLP/JSON span of a generated record: its attributes, its stage and ``extra``."""
    attrs = dict(r.attrs)
    attrs["agentscope.stage"] = r.stage
    attrs.update(extra)
    span = {"traceId": r.trace_id, "spanId": r.span_id, "name": r.name, "kind": 1,
            "startTimeUnixNano": str(r.start_ns), "endTimeUnixNano": str(r.end_ns),
            "attributes": _kv(attrs)}
    if r.parent_span_id:
        span["parentSpanId"] = r.parent_span_id
    return span


def write_otlp_lines(path: Path, tasks: int, spans_per_request: int = 500, **kw) -> int:
    """OTLP/JSON, one ExportTraceServiceRequest per line (the Collector file exporter)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    batch = []
    with open(path, "w") as f:
        def flush():
            request = {"resourceSpans": [{"resource": {"attributes": _kv({"service.name": "bench"})},
                                          "scopeSpans": [{"scope": {"name": "bench"},
                                                          "spans": batch}]}]}
            f.write(json.dumps(request, separators=(",", ":")) + "\n")
        for r in generate(tasks, **kw):
            batch.append(otlp_span(r, {"agentscope.cpu.thread_ns": r.thread_cpu_ns}))
            n += 1
            if len(batch) >= spans_per_request:
                flush()
                batch = []
        if batch:
            flush()
    return n


def main(argv: "list | None" = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(
        description="Generate synthetic agent traces (tasks of parallel agent branches of "
                    "context -> inference -> tool steps) for benchmarks: our span files or "
                    "OTLP/JSON lines (the Collector file exporter's format).",
        epilog="example: python benchmarks/gen_traces.py /tmp/traces --tasks 1000 && "
               "agentscope analyze /tmp/traces")
    ap.add_argument("out", type=Path, help="directory to write into (created)")
    ap.add_argument("--tasks", type=int, default=1000, help="tasks (traces) [1000]")
    ap.add_argument("--spans-per-task", type=int, default=100, help="about this many [100]")
    ap.add_argument("--branches", type=int, default=4, help="parallel agents per task [4]")
    ap.add_argument("--seed", type=int, default=1, help="random seed [1]")
    ap.add_argument("--format", choices=("spans", "otlp"), default="spans",
                    help="our span files (4 of them) or one OTLP/JSON lines file [spans]")
    args = ap.parse_args(argv)
    kw = {"spans_per_task": args.spans_per_task, "branches": args.branches, "seed": args.seed}
    if args.format == "otlp":
        n = write_otlp_lines(args.out / "otlp-bench.jsonl", args.tasks, **kw)
    else:
        n = write_spanfiles(args.out, args.tasks, **kw)
    print(f"{n} spans in {args.tasks} tasks -> {args.out}")


if __name__ == "__main__":
    main()
