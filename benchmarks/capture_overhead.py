"""Per-span cost of agentscope.stage, against a bare call and an OpenTelemetry SDK span.

Measured in one run, on one machine, so the ratios are comparable:

  bare                a plain function call (the floor)
  agentscope off      a decorated function before agentscope.init (instrumented, tracing off)
  agentscope          @agentscope.stage(...) with resource accounting, lean mode (hot path:
                      the span is queued; the writer thread is kept idle during the timing)
  agentscope with     `with agentscope.stage(...)` (builds the stage object on every call)
  writer, per span    the writer thread's cost per span (record, encode, write), timed apart
  agentscope + writer the decorated loop with the writer thread running as configured by
                      default (it drains every 1 s or 4096 spans), until all is on disk
  otel sdk            `with tracer.start_as_current_span(...)` on an SDK TracerProvider with a
                      BatchSpanProcessor and an exporter that does nothing
  agentscope sdk-mode @agentscope.stage on that same SDK provider (information only)

Each figure is the median over --repeat runs of --n spans, in microseconds per span.
Usage: python benchmarks/capture_overhead.py [--n 200000] [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import agentscope


class NoOpExporter(SpanExporter):
    def export(self, spans):  # noqa: D102
        return SpanExportResult.SUCCESS

    def shutdown(self):  # noqa: D102
        pass


def per_call_us(fn, n: int, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(n)
        runs.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = ap.parse_args()
    n, repeat = args.n, args.repeat

    def work():
        return None

    def loop_bare(k):
        for _ in range(k):
            work()

    traced_work = agentscope.stage("tool", name="work")(work)

    def loop_traced(k):
        for _ in range(k):
            traced_work()

    def loop_with(k):
        stage = agentscope.stage
        for _ in range(k):
            with stage("tool", name="work"):
                pass

    results = {}
    results["bare"] = per_call_us(loop_bare, n, repeat)
    results["agentscope off"] = per_call_us(loop_traced, n, repeat)

    tmp = tempfile.mkdtemp(prefix="agentscope-bench-")
    # keep the writer idle while timing the hot path: long interval, room for every span
    rt = agentscope.init(tmp, service="bench", flush_interval_s=3600, max_queue=n * 2 + 10)
    assert rt is not None and rt.mode == "lean"
    writer = rt.writer
    writer.wake_at = None  # the thread sleeps: this measures the caller's thread alone
    hot, flush = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        loop_traced(n)
        t1 = time.perf_counter()
        writer.flush()
        t2 = time.perf_counter()
        hot.append((t1 - t0) / n * 1e6)
        flush.append((t2 - t1) / n * 1e6)
    results["agentscope"] = statistics.median(hot)
    results["writer, per span"] = statistics.median(flush)

    with_runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        loop_with(n)
        with_runs.append((time.perf_counter() - t0) / n * 1e6)
        writer.flush()
    results["agentscope with"] = statistics.median(with_runs)
    stats = writer.stats()
    agentscope.shutdown()

    # steady state: default writer settings, its thread draining and writing meanwhile
    rt = agentscope.init(tmp, service="bench", max_queue=n * 2 + 10)
    steady = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        loop_traced(n)
        rt.writer.flush()
        steady.append((time.perf_counter() - t0) / n * 1e6)
    results["agentscope + writer"] = statistics.median(steady)
    agentscope.shutdown()

    provider = TracerProvider()
    processor = BatchSpanProcessor(NoOpExporter(), max_queue_size=2048)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("bench")

    def loop_otel(k):
        for _ in range(k):
            with tracer.start_as_current_span("work"):
                work()

    results["otel sdk"] = per_call_us(loop_otel, n, repeat)

    rt = agentscope.init(tmp, service="bench", flush_interval_s=3600, max_queue=n * 2 + 10,
                         tracer_provider=provider)
    assert rt is not None and rt.mode == "sdk"
    sdk_runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        loop_traced(n)
        sdk_runs.append((time.perf_counter() - t0) / n * 1e6)
        rt.writer.flush()
    results["agentscope sdk-mode"] = statistics.median(sdk_runs)
    agentscope.shutdown()
    processor.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)

    base = results["bare"]
    otel = results["otel sdk"]
    print(f"capture overhead: {n} spans x {repeat} runs, median, Python "
          f"{platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}")
    print(f"{'path':<22}{'us/span':>10}{'minus bare':>12}{'x otel sdk':>12}")
    for name, us in results.items():
        print(f"{name:<22}{us:>10.2f}{us - base:>12.2f}{us / otel:>12.3f}")
    own = results["agentscope"] - base
    ratio = results["agentscope"] / otel
    print(f"\nagentscope.stage hot path: {own:.2f} us/span above a bare call "
          f"(target <= 5 us), {ratio:.3f}x the OpenTelemetry SDK span (target <= 0.25x)")
    print(f"end to end, spans on disk: {results['agentscope + writer'] - base:.2f} us/span "
          f"({results['agentscope + writer'] / otel:.3f}x the SDK span, whose no-op exporter "
          f"writes nothing); hot-path run: spans written {stats['written']}, dropped "
          f"{stats['dropped']}")
    if args.json:
        print(json.dumps(results))
    return 0 if own <= 5 and ratio <= 0.25 else 1


if __name__ == "__main__":
    sys.exit(main())
