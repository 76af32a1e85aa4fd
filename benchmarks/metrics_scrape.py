"""What a Prometheus scrape of `agentscope serve` costs.

Generates a trace directory (benchmarks/gen_traces.py), then times, in the same run:

* the baseline: loading and analysing it as `agentscope analyze` does (store + analysis);
* a scrape that finds new data: the collector loads what was appended and analyses again,
  then the exposition text is written (what Prometheus waits for);
* a scrape that finds nothing new (the cached metrics, written again);
* a scrape that finds 1 % new spans (new tasks in a new folder): serve analyses again only
  the traces they touched (``analyze(previous=)``), and, in the same run, the same scrape
  with that turned off (a whole analysis, what serve did before issue 19: no analysis in
  memory and none restored from the store);
* the exposition's size.

    python benchmarks/metrics_scrape.py [--tasks 10000] [--spans-per-task 100]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_traces import write_spanfiles  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=10000)
    p.add_argument("--spans-per-task", type=int, default=100)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    from prometheus_client import CollectorRegistry, generate_latest

    from agentscope.analysis import analyze, core
    from agentscope.exporters.prometheus import TraceDirCollector

    root = Path(tempfile.mkdtemp(prefix="scrape-"))
    try:
        spans = write_spanfiles(root / "traces", args.tasks,
                                spans_per_task=args.spans_per_task)
        base, fresh, cached, more, more_whole = [], [], [], [], []
        saved = core._saved
        size = 0
        for i in range(args.repeat):
            db = root / f"base-{i}.duckdb"
            t = time.perf_counter()
            analyze(root / "traces", db)
            base.append(time.perf_counter() - t)
            collector = TraceDirCollector(str(root / "traces"), str(root / f"serve-{i}.duckdb"),
                                          refresh_s=0.0)
            registry = CollectorRegistry(auto_describe=False)
            registry.register(collector)
            t = time.perf_counter()
            text = generate_latest(registry)  # first scrape: load, analyse, expose
            fresh.append(time.perf_counter() - t)
            collector.refresh_s = 3600.0  # the next scrapes find nothing new
            t = time.perf_counter()
            text = generate_latest(registry)
            cached.append(time.perf_counter() - t)
            size = len(text)
            # 1 % new spans, then a scrape; alternately with the incremental analysis and
            # without it (the collector forgets its last analysis: a whole one)
            for incremental in (True, False):
                write_spanfiles(root / "traces" / f"more-{i}-{incremental}",
                                max(args.tasks // 100, 1), spans_per_task=args.spans_per_task,
                                seed=1000 + 2 * i + incremental)
                collector.refresh_s = 0.0
                if not incremental:  # no analysis in memory, none restored from the store
                    collector._analysis = None
                    core._saved = lambda store, counted: (None, None)
                t = time.perf_counter()
                generate_latest(registry)
                (more if incremental else more_whole).append(time.perf_counter() - t)
                core._saved = saved
        b, f, c = (statistics.median(x) for x in (base, fresh, cached))
        m, w = statistics.median(more), statistics.median(more_whole)
        print(f"metrics scrape of {args.tasks} tasks ({spans} spans), median of {args.repeat}")
        print(f"baseline, load + analyse (as agentscope analyze): {b:6.2f} s")
        print(f"scrape with new data (load, analyse, expose):      {f:6.2f} s  ({f / b:.2f}x the "
              "baseline)")
        print(f"scrape with nothing new (cached, expose):          {c * 1e3:6.1f} ms")
        print(f"scrape with 1% new spans, incremental:             {m:6.2f} s  ({m / b:.1%} of "
              "the baseline; target <= 5%)")
        print(f"scrape with 1% new spans, whole analysis (before):  {w:6.2f} s  ({w / b:.1%})")
        print(f"exposition: {size / 1e3:.0f} kB")
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
