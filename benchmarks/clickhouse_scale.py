"""`agentscope analyze chdb://...` against `agentscope analyze DIR` (DuckDB), the same spans.

Generated span files of N million spans (gen_traces.py, 97 spans a task) are written into an
`otel_traces` table in chdb by `agentscope export clickhouse` (its time reported too), then
each CLI runs in a child process with a fresh store, interleaved: wall time and peak RSS of the
process (the launcher of analyze_throughput.py). The chdb path selects the spans in
ClickHouse and analyses them in the embedded store; with ``&input=clickhouse`` the
classifier's input is computed in ClickHouse and analysed a part at a time
(docs/clickhouse.md). The issue's target: chdb at least as fast as DuckDB at 5M spans, below
1.5 GB at 20M. Beside them,
the part that runs in ClickHouse today: every trace's critical path walked there
(`clickhouse.critical_paths`, store/sql/clickhouse/critical_path.sql), from the start of a
Python process to its per-trace rows in Python. With ``--samples HZ`` a collector's samples
lie beside the spans (in the directory and in a samples table), every CLI reads them, and the
walk runs a second time with the counters' means over each section joined in ClickHouse too
(section_counters.sql): the walk alone is that row's baseline. "over ClickHouse's input" is
`analyze chdb://...&input=clickhouse`, with the classifier's input computed in ClickHouse
(store/sql/clickhouse/analysis_input.sql): the two `analyze` rows above it are its
baselines.

    python benchmarks/clickhouse_scale.py --millions 1 --runs 3 [--baseline ../other-tree]
    python benchmarks/clickhouse_scale.py --millions 1 --runs 3 --samples 1
    python benchmarks/clickhouse_scale.py --millions 20 --runs 1 --analyze-only
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from analyze_throughput import _LAUNCHER

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def cli(args: list, work: Path, tree: Path = REPO) -> tuple:
    """(wall s, peak RSS MB) of `agentscope ARGS` of ``tree`` in a child process, its output
    discarded."""
    return launched([sys.executable, "-m", "agentscope.cli", *args], work, tree)


def walk_in_clickhouse(url: str, work: Path, counters: bool = False,
                       tree: Path = REPO) -> tuple:
    """(wall s, peak RSS MB) of a Python process that walks every trace of ``url`` in
    ClickHouse and holds the paths (``counters``: with the counters' means over each
    section, joined there too)."""
    join = ", counters=COUNTER_JOIN" if counters else ""  # (a baseline may predate the join)
    return launched([sys.executable, "-c", "import sys; from agentscope.store import clickhouse; "
                     "from agentscope.analyzers.counters import COUNTER_JOIN; "
                     f"paths = clickhouse.critical_paths(sys.argv[1]{join}); assert paths",
                     url], work, tree)


# the counters a collector beside the agents samples (--samples): host CPU, pressure, run
# queue, and a GPU's utilization
SAMPLED = (("system.cpu.utilization", "host.cpu", None), ("system.pressure.cpu.some",
           "host.pressure", None), ("system.cpu.run_queue", "host.cpu", None),
           ("system.cpu.logical.count", "host.cpu", None),
           ("hw.gpu.utilization", "gpu.nvidia", "0"))


def write_samples(directory: Path, hz: float) -> int:
    """A collector's samples over the time of the spans in ``directory`` (host "h", where
    gen_traces.py puts them), ``hz`` times a second for each of :data:`SAMPLED`: samples
    written."""
    import json
    import random

    first, last = None, None
    for path in directory.glob("spans-*.jsonl"):
        with open(path, "rb") as f:
            for line in f:
                row = json.loads(line)
                a, b = row["start_ns"], row["end_ns"]
                first = a if first is None else min(first, a)
                last = b if last is None else max(last, b)
    rng = random.Random(7)
    step = int(1e9 / hz)
    n = 0
    with open(directory / "samples-h-1-1-collector.jsonl", "w") as out:
        for ts in range(first - step, last + 2 * step, step):
            for metric, source, device in SAMPLED:
                value = 2.0 if metric.endswith("count") else round(rng.random(), 4)
                out.write(json.dumps({"ts_ns": ts, "host": "h", "pid": None, "source": source,
                                      "device": device, "metric": metric, "value": value})
                          + "\n")
                n += 1
    return n


def launched(command: list, work: Path, tree: Path = REPO) -> tuple:
    env = dict(os.environ, PYTHONPATH=str(tree))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed (analyze_throughput.py)
    proc = subprocess.run([sys.executable, "-c", _LAUNCHER, *command],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=work, env=env)
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, err[-2000:]
    wall, rss = (float(x) for x in err.strip().splitlines()[-1].split())
    return wall, rss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--millions", default="1", help="sizes, comma-separated [1]")
    ap.add_argument("--runs", type=int, default=3, help="runs of each CLI (median reported)")
    ap.add_argument("--baseline", metavar="TREE",
                    help="another checkout (a git worktree) whose `analyze chdb://` runs too, "
                         "interleaved: the same spans, the same run")
    ap.add_argument("--samples", type=float, default=0.0, metavar="HZ",
                    help="also a collector's samples beside the spans, HZ a second for 5 "
                         "counters, and the walk joins them in ClickHouse [0: none]")
    ap.add_argument("--analyze-only", action="store_true",
                    help="only the analyze rows (no walk in ClickHouse): for the largest sizes")
    args = ap.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "agentscope")],
                   check=True, stdout=subprocess.DEVNULL)
    work = Path(tempfile.mkdtemp(prefix="agentscope-clickhouse-bench-"))
    print(f"clickhouse_scale: Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print(f"{'spans':>10} {'path':<34} {'median s':>9} {'runs':>22} {'peak MB':>9}")
    try:
        for millions in [float(x) for x in args.millions.split(",") if x]:
            directory, ch = work / f"spans-{millions:g}M", work / f"ch-{millions:g}M"
            subprocess.run([sys.executable, "gen_traces.py", str(directory), "--tasks",
                            str(int(millions * 1e6 / 97))], cwd=HERE, check=True,
                           stdout=subprocess.DEVNULL)
            if args.samples:
                print(f"{write_samples(directory, args.samples):>10} samples "
                      f"({args.samples:g} a second)")
            ch.mkdir()
            url = f"chdb://{ch}?table=otel_traces"
            wall, rss = cli(["export", "clickhouse", str(directory), "--to", url, "--db",
                             str(work / "export.duckdb"), "-q"], work)
            (work / "export.duckdb").unlink(missing_ok=True)
            spans = _count(directory)
            print(f"{spans:>10} {'export clickhouse (files to chdb)':<34} {wall:>9.2f} "
                  f"{'':>22} {rss:>9.0f}")
            got: dict = {"duckdb": [], "chdb": [], "input": [], "walk": [], "counters": [],
                         "baseline": [], "baseline walk": []}
            for _ in range(args.runs):
                db = work / "run.duckdb"
                for p in (db, Path(str(db) + ".wal")):
                    p.unlink(missing_ok=True)
                got["duckdb"].append(cli(["analyze", str(directory), "--db", str(db), "-q"],
                                         work))
                got["chdb"].append(cli(["analyze", url, "-q"], work))
                got["input"].append(cli(["analyze", url + "&input=clickhouse", "-q"], work))
                if args.baseline:
                    got["baseline"].append(cli(["analyze", url, "-q"], work,
                                               Path(args.baseline).resolve()))
                if args.analyze_only:
                    continue
                got["walk"].append(walk_in_clickhouse(url, work))
                if args.baseline:
                    got["baseline walk"].append(walk_in_clickhouse(
                        url, work, tree=Path(args.baseline).resolve()))
                if args.samples:
                    got["counters"].append(walk_in_clickhouse(url, work, counters=True))
            for name, label in (("duckdb", "analyze DIR (DuckDB)"),
                                ("chdb", "analyze chdb://... (read, DuckDB)"),
                                ("baseline", "  the same, --baseline's"),
                                ("input", "  the same, over ClickHouse's input"),
                                ("walk", "critical paths in ClickHouse"),
                                ("baseline walk", "  the same, --baseline's"),
                                ("counters", "  the same + the counter join")):
                if not got[name]:
                    continue
                walls = sorted(w for w, _ in got[name])
                runs = ", ".join(f"{w:.2f}" for w in walls)
                print(f"{spans:>10} {label:<34} {statistics.median(walls):>9.2f} {runs:>22} "
                      f"{max(r for _, r in got[name]):>9.0f}")
            shutil.rmtree(directory, ignore_errors=True)
            shutil.rmtree(ch, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _count(directory: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in directory.glob("spans-*.jsonl"))


if __name__ == "__main__":
    sys.exit(main())
