"""What issue 16's commands cost, end to end as a user pays them: the CLI as a subprocess from
start to exit (interpreter start, imports, load into a fresh store, analysis, output), and its
peak RSS, on a synthetic fleet (``benchmarks/gen_traces.py``: tasks of ~100 spans, four
parallel agent branches of context -> inference -> tool steps).

* ``analyze DIR`` (the terminal report, which now ends with "what would help": the changes
  of largest predicted gain) against the same command at the commit before issue 16
  (``--base``, checked out into a temporary worktree and run with the same interpreter):
  the baseline, in the same run;
* ``analyze DIR --format json`` (no suggestions) beside it;
* ``whatif DIR --speedup stage:tool=2`` (re-timing and walking every trace again),
  ``whatif DIR --cpus 1`` (the discrete-event replay), ``plan DIR``.

Each is timed interleaved ``--repeat`` times (median). Figures go in benchmarks/RESULTS.md.

Usage: python benchmarks/whatif_cost.py [--tasks 400] [--repeat 3] [--base b2872a1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def make(directory: Path, tasks: int) -> int:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from gen_traces import generate

    from agentscope.formats import spanfile

    directory.mkdir(parents=True)
    n = 0
    with open(directory / "spans-bench.jsonl", "w") as f:
        for r in generate(tasks, 100):
            f.write(spanfile.encode(r) + "\n")
            n += 1
    return n


def timed(argv: list, env: dict, cwd: Path) -> tuple:
    """(wall s, peak RSS MiB) of one CLI run as a subprocess (its own rusage, from wait4),
    started in ``cwd`` (not the checkout: ``python -m`` puts the current directory first on
    the path, before PYTHONPATH)."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err, cwd=cwd)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode not in (0, 1):
            err.seek(0)
            raise SystemExit(f"{' '.join(argv)} failed: {err.read().decode()[-500:]}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--base", default="b2872a1",
                    help="the commit before issue 16, for the analyze baseline")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="whatif-cost-"))
    try:
        src = work / "traces"
        spans = make(src, args.tasks)
        base_tree = work / "base"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(base_tree),
                        args.base], check=True, capture_output=True)
        here = dict(os.environ, PYTHONPATH=str(REPO))
        base = dict(os.environ, PYTHONPATH=str(base_tree))
        check = [sys.executable, "-c", "import agentscope; print(agentscope.__file__)"]
        for env, tree in ((here, REPO), (base, base_tree)):
            got_file = subprocess.run(check, env=env, cwd=work, capture_output=True,
                                      text=True).stdout.strip()
            if not got_file.startswith(str(tree)):
                raise SystemExit(f"the run meant for {tree} imports {got_file}")
        cli = [sys.executable, "-m", "agentscope.cli"]
        runs = {
            "analyze (table, with what would help)": (cli + ["analyze"], here),
            f"analyze (table) at {args.base}": (cli + ["analyze"], base),
            "analyze --format json": (cli + ["analyze", "--format", "json"], here),
            "whatif --speedup stage:tool=2": (cli + ["whatif", "--speedup", "stage:tool=2"],
                                              here),
            "whatif --cpus 1": (cli + ["whatif", "--cpus", "1"], here),
            "plan": (cli + ["plan"], here),
        }
        got: dict = {k: [] for k in runs}
        peak: dict = {k: [] for k in runs}
        for _ in range(args.repeat):
            for name, (argv, env) in runs.items():
                db = work / "db.duckdb"
                if db.exists():
                    db.unlink()
                wall, rss = timed(argv + [str(src), "--db", str(db)], env, work)
                got[name].append(wall)
                peak[name].append(rss)
        print(f"whatif cost: {args.tasks} tasks, {spans} spans (our span files), fresh store "
              f"each run, median of {args.repeat}")
        print(f"{'command':<44}{'wall s':>9}{'peak MiB':>10}")
        for name in runs:
            print(f"{name:<44}{statistics.median(got[name]):>9.2f}"
                  f"{statistics.median(peak[name]):>10.0f}")
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                        str(work / "base")], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
