"""The ``agentscope`` command line: a thin client of the library (ARCHITECTURE §6).

Exit codes: 0 ok, 1 the input had problems (the report is still produced), 2 usage error.
"""

from __future__ import annotations

import collections
import json
import sys

import click

from ._version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="agentscope")
def main() -> None:
    """agentscope: what really slows each AI agent task down.

    Instrument your agent with agentscope.task / agentscope.stage, run it, then inspect the
    trace directory it wrote.
    """


@main.command()
@click.argument("trace_dir", type=click.Path(file_okay=False, path_type=str))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="Output format.")
@click.option("--max-problems", type=int, default=20, show_default=True,
              help="How many problem lines to print (all are counted).")
def check(trace_dir: str, fmt: str, max_problems: int) -> None:
    """Validate the capture files in TRACE_DIR and summarize what they hold.

    Every bad line is reported with its file and line number; the rest still load.
    Exits 1 if any line had a problem.

    \b
    Example:
        agentscope check traces/
    """
    from .store.tracedir import scan

    try:
        result = scan(trace_dir)
    except FileNotFoundError as e:
        raise click.UsageError(str(e)) from None
    stages = collections.Counter(s.stage or "(none)" for s in result.spans)
    traces = {s.trace_id for s in result.spans}
    drops = _latest(result.samples, "agentscope.capture.spans_dropped")
    if fmt == "json":
        click.echo(json.dumps({
            "trace_dir": trace_dir, "files": len(result.files), "spans": len(result.spans),
            "traces": len(traces), "samples": len(result.samples), "stages": dict(stages),
            "duplicates": result.duplicates, "spans_dropped_by_writers": drops,
            "problems": [{"file": p.path, "line": p.line, "span_id": p.span_id,
                          "reason": p.reason, "torn": p.torn} for p in result.problems],
        }, indent=2))
    else:
        click.echo(f"{trace_dir}: {len(result.files)} files, {len(result.spans)} spans in "
                   f"{len(traces)} traces, {len(result.samples)} samples")
        for name, count in sorted(stages.items(), key=lambda kv: -kv[1]):
            click.echo(f"  {name:<10} {count:>8} spans")
        if result.duplicates:
            click.echo(f"  {result.duplicates} duplicate spans (same trace_id, span_id) ignored")
        if drops:
            click.echo(f"  writers dropped {int(drops)} spans (queue full or write errors)")
        if result.problems:
            click.echo(f"{len(result.problems)} problem lines:", err=True)
            for p in result.problems[:max_problems]:
                click.echo(f"  {p}", err=True)
            if len(result.problems) > max_problems:
                click.echo(f"  ... and {len(result.problems) - max_problems} more", err=True)
    sys.exit(1 if result.problems else 0)


def _latest(samples: list, metric: str) -> float:
    """Sum over writer processes of each one's latest cumulative value of ``metric``."""
    latest: dict = {}
    for s in samples:
        if s.metric == metric:
            key = (s.host, s.pid)
            if key not in latest or s.ts_ns >= latest[key][0]:
                latest[key] = (s.ts_ns, s.value)
    return sum(v for _, v in latest.values())


if __name__ == "__main__":  # pragma: no cover
    main()
