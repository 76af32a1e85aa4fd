"""Fuzz the readers and the analysis with many broken trace files (issue 18).

Runs the generators of tests/test_fuzz_inputs.py (a known-good span file beside one broken
file of each format agentscope reads) with many more examples than CI does, and prints what
the tests assert, as figures:

* files tried, per format;
* crashes: an exception out of ``agentscope.analyze`` or ``check`` (a traceback a user would
  see), with the distinct crash sites (agentscope's innermost frame) and a traceback sample;
* property failures: a valid trace beside the broken file not analysed, a problem that names
  the wrong file or no line;
* readers that stopped: a reader caught its own exception and dropped the rest of a file or
  trace (not a traceback, but records lost);
* hangs: a file that took more than ``--hang`` seconds (10 by default);
* the share of the valid traces (the good file's, the untouched lines') that were analysed.

    python benchmarks/fuzz.py --examples 2000 --seed 1

Exit code 1 if anything crashed, failed or hung.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import warnings  # noqa: E402

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis.errors import HypothesisWarning  # noqa: E402

from tests.test_fuzz_inputs import (FORMATS, cases, crash_site, run_case,  # noqa: E402
                                    write_case)


class Hang(Exception):
    """A case that ran past the hang limit."""


class Tally:
    """Figures of one format."""

    def __init__(self) -> None:
        self.tried = 0
        self.crashes = 0
        self.failures = 0
        self.hangs = 0
        self.stops = 0
        self.expected = 0
        self.found = 0
        self.with_problems = 0
        self.slowest = 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=2000,
                        help="broken files in all, shared among the formats (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis' random seed")
    parser.add_argument("--formats", default=",".join(FORMATS),
                        help=f"comma-separated, of: {', '.join(FORMATS)}")
    parser.add_argument("--hang", type=float, default=10.0,
                        help="seconds after which a file counts as a hang (default 10)")
    parser.add_argument("--cli-every", type=int, default=10,
                        help="run every Nth case through the CLI (CliRunner) instead")
    parser.add_argument("--samples", type=int, default=3,
                        help="traceback samples to print per crash site")
    parser.add_argument("--save", type=Path, default=None, metavar="DIR",
                        help="write the files of each case that crashed, failed or hung "
                             "into DIR/<n>-<format>/ (to replay with agentscope analyze)")
    args = parser.parse_args()
    formats = [f for f in args.formats.split(",") if f]
    per_format = max(1, args.examples // len(formats))
    tallies = {fmt: Tally() for fmt in formats}
    sites: dict = collections.defaultdict(list)  # site -> [(fmt, how, traceback)]
    failures: dict = collections.Counter()
    failure_samples: dict = {}
    stops: dict = collections.Counter()
    harness: dict = collections.Counter()  # cases this machine could not run (not counted)
    root = Path(tempfile.mkdtemp(prefix="agentscope-fuzz-"))
    counter = [0]

    def on_alarm(signum, frame):
        raise Hang(f"over {args.hang} s")

    signal.signal(signal.SIGALRM, on_alarm)
    warnings.simplefilter("ignore", HypothesisWarning)  # reprs of large generated files
    started = time.perf_counter()
    try:
        for fmt in formats:
            tally = tallies[fmt]

            @seed(args.seed)
            @settings(max_examples=per_format, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))
            @given(case=cases(fmt))
            def one(case):
                counter[0] += 1
                work = root / f"case{counter[0]}"
                cli = args.cli_every > 0 and counter[0] % args.cli_every == 0
                t = time.perf_counter()
                signal.setitimer(signal.ITIMER_REAL, args.hang)
                try:
                    work.mkdir()
                    out = run_case(case, work, cli=cli)
                except Hang:
                    out = None
                except OSError as e:  # this machine's trouble (a full disk), not agentscope's
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    harness[f"{type(e).__name__}: {e.strerror or e}"] += 1
                    return
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    shutil.rmtree(work, ignore_errors=True)
                took = time.perf_counter() - t
                tally.tried += 1
                if args.save and (out is None or out.error is not None or out.failures
                                  or out.reader_stops or took > args.hang):
                    keep = args.save / f"{counter[0]}-{fmt}"
                    keep.mkdir(parents=True, exist_ok=True)
                    write_case(case, keep)
                tally.slowest = max(tally.slowest, took)
                if out is None or isinstance(out.error, Hang) or took > args.hang:
                    tally.hangs += 1
                    sites[f"hang ({fmt})"].append((fmt, case.how, f"{took:.1f} s"))
                    return
                if out.error is not None:
                    tally.crashes += 1
                    sites[crash_site(out.trace)].append((fmt, case.how, out.trace))
                elif out.failures:
                    tally.failures += 1
                    for f in out.failures:
                        key = f"{fmt}: {f.split(':')[0]}"
                        failures[key] += 1
                        failure_samples.setdefault(key, (case.how, case.name, f))
                if out.reader_stops:
                    tally.stops += 1
                    for reason in out.reader_stops:
                        stops[f"{fmt}: {reason[:160]}"] += 1
                if out.problems:
                    tally.with_problems += 1
                if not cli and out.error is None:
                    tally.expected += len(case.expect)
                    tally.found += len(case.expect & out.tasks)

            one()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    elapsed = time.perf_counter() - started
    for why, n in harness.items():
        print(f"not run: {n} cases ({why})", file=sys.stderr)
    return report(tallies, sites, failures, failure_samples, stops, args, elapsed)


def report(tallies: dict, sites: dict, failures: dict, failure_samples: dict, stops: dict,
           args: argparse.Namespace, elapsed: float) -> int:
    total = Tally()
    print(f"{'format':<14} {'files':>6} {'crashes':>8} {'failed':>7} {'hangs':>6} "
          f"{'stopped':>8} {'problems':>9} {'valid analysed':>15} {'slowest':>8}")
    for fmt, t in tallies.items():
        share = f"{t.found}/{t.expected}" if t.expected else "-"
        print(f"{fmt:<14} {t.tried:>6} {t.crashes:>8} {t.failures:>7} {t.hangs:>6} "
              f"{t.stops:>8} {t.with_problems:>9} {share:>15} {t.slowest:>7.2f}s")
        for name in ("tried", "crashes", "failures", "hangs", "stops", "expected", "found",
                     "with_problems"):
            setattr(total, name, getattr(total, name) + getattr(t, name))
    share = 100.0 * total.found / total.expected if total.expected else 100.0
    print(f"{'all':<14} {total.tried:>6} {total.crashes:>8} {total.failures:>7} "
          f"{total.hangs:>6} {total.stops:>8} {total.with_problems:>9} "
          f"{f'{share:.2f}%':>15}")
    print(f"\n{total.tried} files in {elapsed:.0f} s (seed {args.seed}); "
          f"{len(sites)} distinct crash sites; valid traces analysed: {total.found} of "
          f"{total.expected} ({share:.2f}%)")
    for site, hits in sorted(sites.items(), key=lambda kv: -len(kv[1])):
        formats = collections.Counter(fmt for fmt, _, _ in hits)
        print(f"\n== {len(hits)} x {site}  [{', '.join(f'{f} {n}' for f, n in formats.items())}]")
        for fmt, how, trace in hits[:args.samples]:
            print(f"-- {fmt} ({how})")
            print("\n".join(trace.splitlines()[-8:]))
    for key, n in failures.most_common():
        print(f"\n== {n} x property failed: {key}\n   e.g. {failure_samples[key]}")
    for key, n in stops.most_common(20):
        print(f"\n== {n} x reader stopped: {key}")
    bad = total.crashes + total.failures + total.hangs + total.stops
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
