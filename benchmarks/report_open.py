"""How long the HTML report of a large fleet takes to make, and to open in a real browser.

Generates ``--tasks`` tasks (~100 spans each, as analyze_throughput.py), then:

* ``agentscope report DIR --html FILE`` (wall time, load included; the file's size);
* the same report opened in headless Chromium: the page's own figure (``data-rendered-ms``,
  ``performance.now()`` when the script has drawn everything: parse, fleet charts, the table
  of every task, the first timeline) and the wall time of the whole browser run (start,
  load, draw, exit), median of ``--runs``;
* as the baseline, the same browser run on an empty page, so what the report itself adds
  can be read off.

Usage: python benchmarks/report_open.py [--tasks 10000] [--runs 3]
Needs Chromium (apt-get install chromium).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_traces import write_spanfiles  # noqa: E402


def chromium_run(browser: str, url: str, profile: str, shot: str) -> tuple:
    """(wall s of a run that loads, draws, lays out, paints and screenshots the page; ms to
    drawn, ms to painted, from the page's own marks in a second run that dumps the DOM)."""
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
              f"--user-data-dir={profile}"]
    t0 = time.perf_counter()
    subprocess.run(common + ["--window-size=1400,1000", f"--screenshot={shot}", url],
                   capture_output=True, timeout=300)
    wall = time.perf_counter() - t0
    proc = subprocess.run(common + ["--virtual-time-budget=30000", "--dump-dom", url],
                          capture_output=True, text=True, timeout=300)
    drawn = re.search(r'data-rendered-ms="(\d+)"', proc.stdout)
    painted = re.search(r'data-painted-ms="(\d+)"', proc.stdout)
    return (wall, int(drawn.group(1)) if drawn else None,
            int(painted.group(1)) if painted else None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                    if shutil.which(n)), None)
    with tempfile.TemporaryDirectory() as tmp:
        traces = Path(tmp) / "traces"
        traces.mkdir()
        spans = write_spanfiles(traces, args.tasks)
        html = Path(tmp) / "report.html"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "agentscope.cli", "report", str(traces),
                        "--html", str(html)], check=True, capture_output=True)
        make_s = time.perf_counter() - t0
        size_mb = html.stat().st_size / 1e6
        print(f"report of {args.tasks} tasks ({spans} spans): made in {make_s:.1f} s (load and "
              f"analysis included), {size_mb:.1f} MB")
        if browser is None:
            print("no Chromium here: the browser figures are not measured")
            return 0
        empty = Path(tmp) / "empty.html"
        empty.write_text("<!DOCTYPE html><html><body>empty</body></html>")
        profile = os.path.join(tmp, "profile")
        shot = os.path.join(tmp, "shot.png")
        base = [chromium_run(browser, empty.as_uri(), profile, shot)[0]
                for _ in range(args.runs)]
        runs = [chromium_run(browser, html.as_uri(), profile, shot) for _ in range(args.runs)]
        drawn = [r[1] for r in runs if r[1] is not None]
        painted = [r[2] for r in runs if r[2] is not None]
        if len(drawn) != len(runs):
            print("the page did not finish drawing in every run")
            return 1
        wall = statistics.median(r[0] for r in runs)
        base_wall = statistics.median(base)
        print(f"headless Chromium, the page's own marks: drawn {statistics.median(drawn)} ms "
              f"after navigation (runs: {drawn}), laid out and painted "
              f"{statistics.median(painted) if painted else 'n/a'} ms (runs: {painted})")
        print(f"a whole browser run (start, load, draw, paint, screenshot, exit): {wall:.2f} s, "
              f"median of {args.runs}; an empty page: {base_wall:.2f} s; the report adds "
              f"{wall - base_wall:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
