"""The ``agentscope`` command line: a thin client of the library (ARCHITECTURE §6).

Each command parses its options, calls the library (the front door
:func:`agentscope.analysis.analyze`, an exporter, the sidecar, the scenarios) and prints.
Exit codes: 0 ok, 1 the input had problems (the report is still produced) or held no task,
2 usage error. Every command takes -q (only the output and errors) and -v (also what was loaded
and how long it took).

Names, attributes and file names come from the traces: every line made for a person goes
through :func:`agentscope.exporters.views.inert` (Rich output through ``inert_text``), and an
agentscope error that reaches the top (a store another process holds, ...) is one line on
stderr and exit 1, never a traceback (:class:`_Main`).
"""

from __future__ import annotations

import datetime
import decimal
import json
import logging
import math
import os
import re
import sys
import time
import uuid

import click

from ._version import __version__
from .formats.otlp_common import MAX_BODY
from .exporters.views import inert, inert_lines


QUIET, NORMAL, VERBOSE = 0, 1, 2
_LEVEL_KEY = "agentscope.verbosity"


def _set_level(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if not value:
        return value
    level = QUIET if param.name == "quiet" else VERBOSE
    if ctx.meta.get(_LEVEL_KEY, level) != level:
        raise click.UsageError("give one of -q/--quiet and -v/--verbose, not both")
    ctx.meta[_LEVEL_KEY] = level
    if level == VERBOSE:  # the library's own informational lines too
        _log_to_terminal().setLevel(logging.INFO)
    return value


class _TerminalLog(logging.Handler):
    """The library's log lines (its warnings; with -v its informational lines too) on the
    stderr of the command running now, each line :func:`inert`: they name stores, files and
    spans, which come from the input. Below ERROR they are left out with -q."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.ERROR and _level() == QUIET:
            return
        try:
            click.echo(inert_lines(self.format(record)), err=True)
        except Exception:  # noqa: BLE001 - logging must not raise; it reports it itself
            self.handleError(record)


def _log_to_terminal() -> logging.Logger:
    """The package logger with one :class:`_TerminalLog` handler (added once per process)."""
    log = logging.getLogger("agentscope")
    if not any(isinstance(h, _TerminalLog) for h in log.handlers):
        handler = _TerminalLog()
        handler.setFormatter(logging.Formatter("agentscope: %(message)s"))
        log.addHandler(handler)
    return log


def _verbosity(verbose_help: str = "Also say what was loaded (files by format, spans, "
               "samples, files skipped and why) and how long loading and analysis took."):
    """``-q/--quiet`` and ``-v/--verbose``, shared by every command (read with _level())."""
    def decorate(f):
        f = click.option("-v", "--verbose", is_flag=True, expose_value=False,
                         callback=_set_level, help=verbose_help)(f)
        return click.option("-q", "--quiet", is_flag=True, expose_value=False,
                            callback=_set_level,
                            help="Print only the output and errors: no warnings, no "
                                 "progress, no summary lines on stderr.")(f)
    return decorate


def _level() -> int:
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(_LEVEL_KEY, NORMAL) if ctx is not None else NORMAL


# DuckDB's words for a database file another process holds ("Could not set lock on file
# "PATH": Conflicting lock is held in EXE (PID N)"), as the store passes them on
_LOCK = re.compile(r"could not set lock|conflicting lock|is locked|locked by", re.I)
_LOCK_FILE = re.compile(r'lock on file "([^"]+)"|store (\S+?):? ')
_LOCK_PID = re.compile(r"\bPID (\d+)", re.I)
_LOCK_EXE = re.compile(r"held in (\S+)")


def _lock_words(e: BaseException) -> "str | None":
    """One line for a store that another process holds (None if ``e`` is not that): which
    store, which process when DuckDB says, and what to do. DuckDB lets one process write a
    database file at a time; a second ``agentscope`` command on the same SOURCE while the
    first is loading (or ``serve`` refreshing) meets the lock."""
    text = str(e)
    if not _LOCK.search(text):
        return None
    path = getattr(e, "path", None)
    if path is None:
        m = _LOCK_FILE.search(text)
        path = next((g for g in m.groups() if g), None) if m else None
    pid, exe = _LOCK_PID.search(text), _LOCK_EXE.search(text)
    holder = ""
    if pid:
        holder = f" (pid {pid.group(1)}" + (
            f", {os.path.basename(exe.group(1))})" if exe else ")")
    store = f"the store {path}" if path else "the store"
    return (f"{store} is in use by another process{holder}; wait for it to finish, or pass "
            "--db :memory: (or another --db FILE) to analyse without it")


class _Main(click.Group):
    """The ``agentscope`` group: an agentscope error that reaches it from any command (the
    store locked by another process, a store that is not a database, an error a library
    raised that the command did not expect) is printed as one line and exits 1, instead of a
    traceback. A lock conflict is recognised by DuckDB's words even if it arrives unwrapped.
    Other exceptions are bugs and keep their traceback."""

    def invoke(self, ctx: click.Context):
        from .errors import AgentscopeError, StoreError

        _log_to_terminal()  # warnings that name inputs: through inert too
        try:
            return super().invoke(ctx)
        except AgentscopeError as e:
            words = _lock_words(e) if isinstance(e, StoreError) else None
            _fail(words or str(e) or type(e).__name__)
        except Exception as e:  # only to recognise a lock; re-raised otherwise
            words = _lock_words(e) if type(e).__module__.startswith("duckdb") else None
            if words is None:
                raise
            _fail(words)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="agentscope")
@_verbosity("Also say what was loaded and how long it took (as each command's -v).")
def main() -> None:
    """agentscope: what really slows each AI agent task down.

    \b
    Start here:
        agentscope analyze sample_traces/             the shipped traces
        agentscope run --trace-dir traces -- python my_agent.py
        agentscope analyze traces/                    what limited each task, and why
        agentscope analyze traces/ --task ID          one task in full
        agentscope whatif traces/ --speedup stage:tool=2

    SOURCE is a trace directory or one trace file: agentscope's own, OTLP JSON/protobuf,
    Jaeger, Langfuse, any-agent, Phoenix or TraceLab. Every command takes -q (quiet) and -v
    (verbose). How to read the output: docs/reading-the-output.md; every command:
    docs/cli.md.
    """


# ---- options several commands share, declared once ---------------------------------------
def _trace_dir(f):
    # a trace directory, a single trace file (any format analyze reads), or a ClickHouse URL
    # (its password kept apart, by urls.without_password: every line that names SOURCE is
    # safe)
    return click.argument("trace_dir", metavar="SOURCE", type=click.Path(path_type=str),
                          callback=_source)(f)


def _source(ctx: click.Context, param: click.Parameter, value: str,
            url_only: bool = False) -> str:
    """A ClickHouse URL without its password (urls.without_password); anything else as it is
    (``url_only``: a usage error)."""
    from . import urls
    from .errors import StoreError

    if not urls.is_url(value):
        if url_only:
            raise click.BadParameter("takes a chdb:// or clickhouse:// URL")
        return value
    try:
        return urls.without_password(value)
    except StoreError as e:
        raise click.BadParameter(str(e)) from None


_WINDOW_KEY = "agentscope.window"


def _window(f):
    """``--since``, ``--until``, ``--service``: what of a ClickHouse SOURCE is read (kept in
    the context for :func:`_windowed`)."""
    def keep(ctx: click.Context, param: click.Parameter, value: "str | None") -> None:
        if value is not None:
            ctx.meta.setdefault(_WINDOW_KEY, {})[param.name] = value

    for name, metavar, help_ in reversed((
            ("since", "TIME", "With a ClickHouse SOURCE: only traces with a span that started "
                              "at or after TIME (ISO 8601, UTC unless it says; epoch s; or a "
                              "duration before now: 1h, 30m, 7d)."),
            ("until", "TIME", "With a ClickHouse SOURCE: ... before TIME."),
            ("service", "NAME", "With a ClickHouse SOURCE: only traces with a span of this "
                                "service."))):
        f = click.option(f"--{name}", metavar=metavar, default=None, expose_value=False,
                         callback=keep, help=help_)(f)
    return f


def _db_option(f):
    return click.option(
        "--db", type=click.Path(dir_okay=False, path_type=str), default=None,
        help="DuckDB file to use [default: SOURCE/.agentscope/agentscope.duckdb; in memory "
             "for a single file; for a ClickHouse URL, in memory or, above 1M spans, a "
             "temporary file].")(f)


def _headers(headers: tuple) -> dict:
    """``--header KEY=VALUE`` options as a dict (a usage error for one without ``=``)."""
    extra = {}
    for h in headers:
        key, sep, value = h.partition("=")
        if not sep:
            raise click.UsageError(f"--header wants KEY=VALUE, not {h!r}")
        extra[key.strip()] = value.strip()
    return extra


class _ProgressBar:
    """Progress bars on stderr, only when stderr is a terminal: while a long load reads its
    files (over 32 MB; the ``progress`` callback of :func:`agentscope.analysis.analyze`),
    then while a store analysed in batches analyses them (``analysis_progress``). A bar
    ends when the next starts, and at :meth:`close`. Before a ClickHouse source's window is
    read, a line says so (:meth:`reading`)."""

    def __init__(self) -> None:
        self.bar = None
        self.label = ""

    def reading(self, source: str) -> None:
        """Say that ``source`` (a ClickHouse URL as outputs name it: no password) is being
        read: ClickHouse selects the window's whole traces before a row comes back (at 20M
        spans about 27 s here), so there is no count to show meanwhile."""
        self.close()
        if sys.stderr.isatty():
            click.echo(inert(f"reading {source} (ClickHouse selects whole traces first)"),
                       err=True)

    def __call__(self, done: int, total: int) -> None:  # (bytes: no count shown)
        self._update("loading traces", done, total, 32 << 20, show_pos=False)

    def analysing(self, done: int, total: int) -> None:  # (batches: "3/40")
        self._update("analysing traces", done, total, 1, show_pos=True)

    def _update(self, label: str, done: int, total: int, above: int, show_pos: bool) -> None:
        if self.bar is None or self.label != label:
            self.close()
            if total <= above or not sys.stderr.isatty():
                return
            self.bar = click.progressbar(length=total, label=label, file=sys.stderr,
                                         show_pos=show_pos)
            self.bar.__enter__()
            self.label = label
        self.bar.update(done - self.bar.pos)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


def _windowed(trace_dir: str) -> str:
    """SOURCE with the window that --since, --until and --service chose (a usage error for a
    directory or a file: they are read whole)."""
    window = click.get_current_context().meta.get(_WINDOW_KEY)
    if not window:
        return trace_dir
    from . import urls

    if not urls.is_url(trace_dir):
        raise click.UsageError("--since, --until and --service choose what of a ClickHouse "
                               "SOURCE is read (chdb://, clickhouse://); a directory or "
                               "file is read whole")
    return urls.with_window(trace_dir, **window)


def _analysis(trace_dir: str, db: "str | None", quiet: bool = False, reuse: bool = False):
    """Load and analyse TRACE_DIR through the front door, with a progress bar on long loads
    and, on stderr, why there is nothing to report when there is nothing (and with -v what
    was loaded and how long it took). ``reuse``: the store's saved analysis where nothing
    changed since it (open_store: what ``query`` reads)."""
    from . import urls
    from .analysis import analyze, open_store

    trace_dir = _windowed(trace_dir)
    quiet = quiet or _level() == QUIET
    bar = None if quiet else _ProgressBar()
    started = time.perf_counter()
    try:
        if bar is not None and urls.is_url(trace_dir):
            bar.reading(urls.parse(trace_dir).display)
        analysis = (open_store if reuse else analyze)(
            trace_dir, db, progress=bar, batch=True,
            analysis_progress=None if bar is None else bar.analysing)
    except (FileNotFoundError, NotADirectoryError) as e:
        raise click.UsageError(inert(e)) from None
    finally:  # a StoreError (e.g. locked by another process): one line, from _Main
        if bar is not None:
            bar.close()
    if analysis.load.files_seen == 0 and analysis.load.skipped and \
            os.path.isfile(trace_dir):  # one file, given by name, that is not a trace
        why = analysis.load.skipped[0].reason
        analysis.close()
        _fail(f"{trace_dir}: {why}: not a trace file agentscope reads (docs/file-formats.md)")
    if _level() == VERBOSE:
        for line in _load_lines(trace_dir, analysis, time.perf_counter() - started):
            _say(line)
    if not quiet:
        for warning in analysis.warnings:
            click.echo(inert(warning), err=True)
    return analysis


def _load_lines(trace_dir: str, analysis, seconds: float) -> list:
    """What ``-v`` says about a load: files, spans, samples, skips, the time it took."""
    load = analysis.load
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(load.formats.items()))
    lines = [f"{trace_dir}: {load.files_seen} trace files ({kinds or 'none'}), "
             f"{load.files_loaded} read, {load.files_unchanged} unchanged since the last load; "
             f"{load.spans_added} spans and {load.samples_added} samples added"
             + (f", {load.duplicates} duplicate spans ignored" if load.duplicates else "")]
    lines += [f"  skipped {s.rel}: {s.reason}" for s in load.skipped if not s.quiet]
    plain: dict = {}  # files that are plainly not traces (documents, scenario labels): counted
    for s in load.skipped:
        if s.quiet:
            plain[s.reason] = plain.get(s.reason, 0) + 1
    if plain:
        lines.append("  skipped, not traces: " + ", ".join(
            f"{n} ({why})" for why, n in sorted(plain.items())))
    saved = getattr(analysis, "tasks_saved", None)  # open_store's StoredAnalysis
    if saved is None:
        again = analysis.traces_analysed
        how = "loaded and analysed" if again is None or again >= len(analysis.task_results) \
            else (f"loaded, {again} traces analysed again (the rest as the store's saved "
                  "analysis had them)" if again else "loaded; the store's saved analysis, "
                  "nothing new")
        lines.append(f"{len(analysis.task_results)} tasks; {how} in {seconds:.2f} s")
    else:
        how = "loaded and analysed" if analysis.analysed else "loaded; saved analysis read"
        lines.append(f"{saved} tasks; {how} in {seconds:.2f} s")
    return lines


def _no_tasks(trace_dir: str, analysis) -> None:
    """Exit 1 when SOURCE held no task (the warnings above say why)."""
    if not analysis.task_results:
        _fail(f"no tasks in {trace_dir}")


def _say(message: str) -> None:
    """A line on stderr for the person at the terminal (not with -q)."""
    if _level() != QUIET:
        click.echo(inert(message), err=True)


def _error(message: str) -> None:
    """An error line on stderr, even with -q."""
    click.echo(inert(message), err=True)


def _fail(message: str, code: int = 1) -> None:
    click.echo(f"agentscope: {inert(message)}", err=True)
    sys.exit(code)


def _json_value(value):
    """``value`` as strict JSON can hold it: a NaN or an infinity becomes null (JSON has no
    such number; Python would write ``NaN``, which most parsers refuse), a Decimal a number
    (an integer when it is one), bytes their hex digits, a date, time or timestamp its ISO
    8601 text, an interval its seconds, a UUID its text, a numpy scalar its Python value, a
    map's keys text; lists, tuples and dicts are walked. Anything else is left for
    ``default=str``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(_json_value(k)): _json_value(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_json_value(v) for v in value]
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            return None
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID):
        return str(value)
    if type(value).__module__ == "numpy" and hasattr(value, "item"):  # a numpy scalar
        return _json_value(value.item())
    return value


def _json(doc, indent: "int | None" = None) -> str:
    """The one way the CLI writes JSON: strictly valid (no NaN or Infinity: null), the types
    SQL gives as :func:`_json_value` says, anything else as its text."""
    return json.dumps(_json_value(doc), indent=indent, default=str, allow_nan=False)


def _json_indent() -> "int | None":
    """Indented for a person at a terminal; compact (several times faster) into pipes."""
    return 2 if sys.stdout.isatty() else None


# ---- commands -------------------------------------------------------------------------------
@main.command()
@_trace_dir
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="Output format.")
@click.option("--max-problems", type=int, default=20, show_default=True,
              help="How many problem lines to print (all are counted).")
@_verbosity()
def check(trace_dir: str, fmt: str, max_problems: int) -> None:
    """Validate the trace files in SOURCE (a directory or one file) and summarize them.

    Reads every format `analyze` reads (docs/file-formats.md). Every bad line is reported
    with its file and line number; the rest still load; files in no known format are named.
    Exits 1 if any line had a problem.

    \b
    Example:
        agentscope check traces/
    """
    from .analysis import check as check_dir

    try:
        result = check_dir(trace_dir)
    except FileNotFoundError as e:
        raise click.UsageError(inert(e)) from None
    if fmt == "json":
        click.echo(_json(result.to_dict(), indent=2))
    else:
        kinds = ", ".join(f"{k}: {n}" for k, n in sorted(result.formats.items()))
        click.echo(inert(f"{trace_dir}: {result.files} files"
                         f"{f' (by format: {kinds})' if kinds else ''}, {result.spans} spans "
                         f"in {result.traces} traces, {result.samples} samples"))
        for name, count in result.stages.items():
            click.echo(f"  {inert(name):<10} {count:>8} spans")
        if result.duplicates:
            click.echo(f"  {result.duplicates} duplicate spans (same trace_id, span_id) ignored")
        if result.spans_dropped_by_writers:
            click.echo(f"  writers dropped {int(result.spans_dropped_by_writers)} spans (queue "
                       "full or write errors)")
        for name, reason in result.skipped:
            click.echo(inert(f"  skipped {name}: {reason}"), err=True)
        if result.problems:
            click.echo(f"{len(result.problems)} problem lines:", err=True)
            for p in result.problems[:max_problems]:
                click.echo(f"  {inert(p)}", err=True)
            if len(result.problems) > max_problems:
                click.echo(f"  ... and {len(result.problems) - max_problems} more", err=True)
    # a single file given by name that is not a trace is an input problem too
    sys.exit(1 if result.problems or (os.path.isfile(trace_dir) and not result.files) else 0)


@main.command()
@_trace_dir
@_window
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]),
              default="table", show_default=True, help="Output format.")
@_db_option
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True,
              help="Tasks to list in table and markdown output (JSON lists all).")
@click.option("--push-gateway", "push_gateway", default=None, metavar="URL",
              help="Also push the analysis as Prometheus metrics to this Pushgateway "
                   "(e.g. http://localhost:9091), as `agentscope serve` exposes them.")
@click.option("--push-job", default="agentscope", show_default=True,
              help="The Pushgateway job to push under (replaces that job's metrics).")
@click.option("--detail", type=click.Choice(["sections", "tasks"]), default="sections",
              show_default=True,
              help="JSON: each task with its critical path's sections, or the tasks alone "
                   "(no critical_path: a fraction of the size and time for a large fleet).")
@click.option("--task", "task", default=None, metavar="ID|NAME",
              help="Show one task in full: its timeline and every section's evidence (a trace "
                   "id or its first characters, as the table shows them, or a task name: the "
                   "slowest of that name).")
@_verbosity()
def analyze(trace_dir: str, fmt: str, db: "str | None", limit: int,
            push_gateway: "str | None", push_job: str, detail: str,
            task: "str | None") -> None:
    """Load SOURCE (a trace directory or one trace file) and name what limited each task.

    For every task (trace): its critical path, each section classified as gpu, cpu, memory,
    io or queue from measured evidence (from a stage label where nothing was measured, or
    untraced where not even that says what the time was; the summary says how much of each),
    the task's shares and bottleneck with a confidence, and a fleet summary. Reads agentscope's
    own files and the traces other tools write, found by content: OTLP JSON/protobuf, Jaeger,
    Langfuse, any-agent, Phoenix, TraceLab; gzip/zstd of any (docs/file-formats.md). Files
    loaded before are skipped; new lines of growing files are added. SOURCE may also be
    the OpenTelemetry Collector's ClickHouse table: chdb://PATH or
    clickhouse://USER@HOST/DB, with ?table=, since=, until=, service=, input=
    (docs/clickhouse.md; the [clickhouse] extra).

    \b
    Examples:
        agentscope analyze traces/
        agentscope analyze langfuse-export.trace.json
        agentscope analyze 'chdb:///data/ch?table=otel_traces&since=2026-12-04T09:00'
        agentscope analyze traces/ --format json > report.json
        agentscope analyze traces/ --format json --detail tasks | jq '.tasks[0]'
        agentscope analyze traces/ --format markdown >> $GITHUB_STEP_SUMMARY
        agentscope analyze traces/ --push-gateway http://localhost:9091

    Exit code 1 if some input could not be loaded (the report covers the rest) or SOURCE
    holds no task (the reason is on stderr; JSON still gets its document).
    """
    if detail != "sections" and (fmt != "json" or task is not None):
        raise click.UsageError("--detail tasks is for the JSON report of every task "
                               "(--format json, without --task)")
    analysis = _analysis(trace_dir, db)
    pushed = True
    if push_gateway:
        from .exporters.prometheus import push

        try:
            push(push_gateway, push_job, analysis)
            _say(f"pushed the analysis to {push_gateway} (job {push_job})")
        except Exception as e:  # the report is still printed; exit 1 after it
            _error(f"agentscope analyze: could not push to {push_gateway}: {e}")
            pushed = False
    if task is not None:
        _show_task(analysis, task, fmt)
    elif fmt == "json":  # a pipeline gets its document, tasks or none
        # indented for a person at a terminal; compact (several times faster) into pipes
        if sys.stdout.isatty():
            click.echo(analysis.to_json(indent=2, detail=detail))
        else:  # into a pipe or a file: written a chunk of tasks at a time
            analysis.write_json(sys.stdout, detail=detail)
            sys.stdout.write("\n")
            sys.stdout.flush()
    elif not analysis.task_results:
        pass  # an empty table says nothing: why is on stderr above, and the exit code
    elif fmt == "markdown":
        from .exporters.table import markdown

        click.echo(markdown(analysis, limit), nl=False)
    else:
        from .exporters.table import render, terminal_console

        render(analysis, terminal_console(), limit)
    _no_tasks(trace_dir, analysis)
    sys.exit(1 if analysis.problems or not pushed else 0)


def _show_task(analysis, selector: str, fmt: str) -> None:
    """``analyze --task``: one task in full, or why none."""
    from .exporters.table import find_tasks, render_task, terminal_console

    found = find_tasks(analysis, selector)
    if not found:
        _fail(f"no task named {selector!r} or with a trace id starting with it "
              "(the table's trace column shows the ids)")
    t = found[0]
    if len(found) > 1:
        _say(f"{len(found)} tasks match {selector!r}: the slowest shown")
    if fmt == "json":
        doc = next(x for x in analysis.to_dict()["tasks"] if x["trace_id"] == t.trace_id)
        click.echo(_json(doc, indent=_json_indent()))
        return
    if fmt == "markdown":
        from .exporters.table import markdown_task

        click.echo(markdown_task(t), nl=False)
        return
    render_task(t, terminal_console())


@main.command()
@_trace_dir
@_window
@click.option("--speedup", "speedup", multiple=True, metavar="KIND:VALUE=FACTOR",
              help="Make the selected spans' own time FACTOR times faster (repeatable); "
                   "KIND is stage, name, class or service, e.g. stage:tool=2, "
                   "name:pytest=3, class:io=2, service:search-api=1.5.")
@click.option("--cpus", type=click.IntRange(min=1), default=None,
              help="Replay the tasks with this many cores per host.")
@click.option("--slots", "slots", multiple=True, metavar="SERVER=N",
              help="Replay the tasks with N slots at SERVER (the service its spans carry), "
                   "e.g. model-server=2 (repeatable).")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]),
              default="table", show_default=True, help="Output format.")
@_db_option
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True,
              help="Tasks to list in table and markdown output (JSON lists all).")
@_verbosity()
def whatif(trace_dir: str, speedup: tuple, cpus: "int | None", slots: tuple, fmt: str,
           db: "str | None", limit: int) -> None:
    """Predict what a change would buy: task latency (mean, p50, p95, p99) and throughput,
    recorded and predicted, per lane and per task.

    Each trace is re-timed with the selected spans' own time made faster and its critical
    path walked again: a faster branch can hand the path to another one, so the saving is
    often less than the time the change saves (the "naive" column subtracts it). With
    --cpus or --slots, the recorded tasks are replayed on that capacity over their recorded
    arrival times. Rules and assumptions: docs/whatif.md.

    \b
    Examples:
        agentscope whatif traces/ --speedup stage:tool=2
        agentscope whatif traces/ --speedup name:pytest=3 --speedup class:io=2
        agentscope whatif traces/ --cpus 1
        agentscope whatif traces/ --slots model-server=2 --format json
    """
    from .analysis import parse_slots, parse_speedups

    try:  # the options are checked before the traces are read
        changes, slot_map = parse_speedups(speedup), parse_slots(slots)
    except ValueError as e:
        raise click.UsageError(inert(e)) from None
    analysis = _analysis(trace_dir, db)
    if not analysis.task_results:
        _fail(f"no tasks in {trace_dir} to predict")
    try:
        prediction = analysis.whatif(changes, cpus=cpus, slots=slot_map)
    except ValueError as e:  # e.g. --slots naming a server no span called
        raise click.UsageError(inert(e)) from None
    if prediction.unmatched:
        _say("agentscope whatif: --speedup selected no span (check the spelling): "
             + ", ".join(prediction.unmatched))
    if fmt == "json":
        click.echo(_json(prediction.to_dict(), indent=_json_indent()))
    elif fmt == "markdown":
        from .exporters.whatif_view import markdown

        click.echo(markdown(prediction, limit), nl=False)
    else:
        from .exporters.whatif_view import text

        click.echo(text(prediction, limit), nl=False)
    sys.exit(1 if analysis.problems else 0)


@main.command()
@_trace_dir
@_window
@click.option("--price", "prices", multiple=True, metavar="RESOURCE=USD",
              help="A price: gpu=USD per GPU-hour, cpu=USD per core-hour, mem=USD per "
                   "GB-hour (repeatable). Without prices, costs are in resource-seconds.")
@click.option("--gpu-target", type=click.FloatRange(0, 1, min_open=True), default=0.8,
              show_default=True, help="The GPU busy share to size the cores per GPU for.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]),
              default="table", show_default=True, help="Output format.")
@_db_option
@_verbosity()
def plan(trace_dir: str, prices: tuple, gpu_target: float, fmt: str, db: "str | None") -> None:
    """The capacity view of SOURCE: keep a GPU-centric CPU:GPU ratio or move toward 1:1,
    how busy the GPU can be, how many cores per GPU, what a task costs.

    Orchestration and tool share of the critical paths with the background articles' rule of
    thumb; the GPU's ceiling (Amdahl) beside its measured busy share; CPU core-seconds per
    GPU-busy second and the cores per GPU for --gpu-target; resource-seconds, energy and cost
    per task and per lane; each lane's latency; time online tasks waited behind batch work
    at a server. Figures that need a GPU say so. See docs/whatif.md.

    \b
    Examples:
        agentscope plan traces/
        agentscope plan traces/ --price gpu=2.5 --price cpu=0.04 --price mem=0.005
        agentscope plan traces/ --gpu-target 0.9 --format json
    """
    from .analysis import parse_price

    try:
        parsed = [f"{k}={v}" for k, v in (parse_price(p) for p in prices)]
    except ValueError as e:
        raise click.UsageError(inert(e)) from None
    analysis = _analysis(trace_dir, db)
    if not analysis.task_results:
        _fail(f"no tasks in {trace_dir} to plan for")
    doc = analysis.plan(parsed, gpu_target)
    if fmt == "json":
        click.echo(_json(doc, indent=_json_indent()))
    elif fmt == "markdown":
        from .exporters.plan_view import markdown as plan_markdown

        click.echo(plan_markdown(doc), nl=False)
    else:
        from .exporters.plan_view import text as plan_text

        click.echo(plan_text(doc), nl=False)
    sys.exit(1 if analysis.problems else 0)


@main.command()
@_trace_dir
@_window
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=str),
              required=True, help="Where to write the report (one self-contained file).")
@_db_option
@click.option("--timelines", type=click.IntRange(min=0), default=100, show_default=True,
              help="Tasks that get a timeline (every span): all when there are no more; else "
                   "the most typical of each bottleneck class, then the slowest.")
@_verbosity()
def report(trace_dir: str, html_path: str, db: "str | None", timelines: int) -> None:
    """Write a self-contained HTML report of SOURCE (no network needed to view it).

    Fleet views (where the critical-path time went, by stage and lane; latency by bottleneck
    class; the tasks that lost most to each class), a table of every task that sorts and
    filters, and task timelines: every span, the critical path coloured by class, the host's
    counters under it and the evidence in words. The address selects a view:
    FILE#task=3, FILE#q=pytest, FILE#class=io.

    \b
    Example:
        agentscope report traces/ --html report.html

    Exit code 1 if some input could not be loaded (the report covers the rest) or SOURCE
    holds no task (the report is written and says why).
    """
    from .exporters import html_report

    analysis = _analysis(trace_dir, db)
    data = html_report.write(html_path, analysis, timelines=timelines, source=trace_dir)
    _say(f"wrote {html_path}: {len(analysis.task_results)} tasks, "
         f"{len(data['timelines'])} with a timeline")
    _no_tasks(trace_dir, analysis)
    sys.exit(1 if analysis.problems else 0)


@main.command()
@_trace_dir
@_window
@click.argument("statement")
@_db_option
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True)
@_verbosity()
def query(trace_dir: str, statement: str, db: "str | None", fmt: str) -> None:
    """Run read-only SQL over the store of SOURCE.

    Tables: spans, samples; views: tasks, critical_path (SOURCE is loaded first; it is
    analysed again only when a file was added or grew since the store's saved analysis, so
    they are current). One statement that reads: no files, network, extensions or settings
    (docs/cli.md#query).

    The table is for people: names are shown as text (control characters dropped, line
    breaks as spaces). csv and json are data, values as stored; json is strict (NaN and
    infinities as null, decimals as numbers, blobs as hex, times as ISO 8601, intervals in
    seconds).

    \b
    Examples:
        agentscope query traces/ "SELECT bottleneck, count(*) FROM tasks GROUP BY ALL"
        agentscope query traces/ "SELECT name, class, duration_s FROM critical_path
                                  WHERE trace_id = '...' ORDER BY seq"
    """
    from .errors import QueryError

    analysis = _analysis(trace_dir, db, quiet=True, reuse=True)
    try:
        columns, rows = analysis.query_rows(statement)
    except QueryError as e:
        raise click.UsageError(inert(f"SQL error: {e}")) from None
    if fmt == "json":
        click.echo(_json([dict(zip(columns, r)) for r in rows], indent=2))
    elif fmt == "csv":
        import csv

        w = csv.writer(sys.stdout)
        w.writerow(columns)
        w.writerows(rows)
    else:
        from rich.table import Table

        from .exporters.table import terminal_console
        from .exporters.views import inert_text

        table = Table()
        for c in columns:  # a column's name is the user's SQL or a stored name: text too
            table.add_column(inert_text(c))
        for r in rows:
            table.add_row(*(inert_text("" if v is None else v) for v in r))
        terminal_console().print(table)


_COLLECT_OPTIONS = [
    click.option("--hz", type=float, default=10.0, show_default=True,
                 help="Samples per second (docs/ARCHITECTURE.md §6; 100 for short bursts)."),
    click.option("--model-server", "model_servers", multiple=True, metavar="URL",
                 help="Also scrape a vLLM/SGLang Prometheus endpoint, e.g. "
                      "http://127.0.0.1:8000/metrics (repeatable)."),
    click.option("--no-gpu", is_flag=True, help="Do not read NVIDIA GPUs (NVML)."),
    click.option("--no-per-core", is_flag=True,
                 help="Host CPU utilization in total only, not per core."),
    click.option("--proc-root", default="/proc", show_default=True, metavar="DIR",
                 help="Where /proc is (e.g. /host/proc in a container watching its host)."),
]
_SOURCES_HELP = ("Also say which sources are absent here (no GPU, no pressure stall "
                 "information, ...); they are recorded as absent either way.")


def _collect_options(f):
    f = _verbosity(_SOURCES_HELP)(f)
    for option in reversed(_COLLECT_OPTIONS):
        f = option(f)
    return f


def _sampler_options(hz: float, model_servers: tuple, no_gpu: bool, no_per_core: bool,
                     proc_root: str, verbose: bool = False):
    """The parsed _COLLECT_OPTIONS as the library's SamplerOptions."""
    from .collectors.sidecar import SamplerOptions

    try:
        return SamplerOptions(hz=hz, model_servers=model_servers, gpus=not no_gpu,
                              per_core=not no_per_core, proc_root=proc_root, verbose=verbose)
    except ValueError as e:
        raise click.UsageError(inert(e))


@main.command()
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=str), required=True,
              help="Trace directory to write the sample files into.")
@click.option("--pid", type=int, default=None,
              help="Also watch this process and its descendants; stop when it exits.")
@click.option("--duration", type=float, default=None, help="Stop after this many seconds.")
@_collect_options
def collect(out: str, pid: "int | None", duration: "float | None", hz: float,
            model_servers: tuple, no_gpu: bool, no_per_core: bool, proc_root: str) -> None:
    """Sample host, process-tree, GPU and model-server counters until stopped (a sidecar).

    Samples go to OUT/samples-<host>-<pid>-<ms>-collector.jsonl, beside the spans of the
    agents writing there; `agentscope analyze OUT` joins them with the critical paths.
    Stops on Ctrl-C / SIGTERM, after --duration, or when --pid exits.

    \b
    Examples:
        agentscope collect --out traces/ --pid 4242
        agentscope collect --out traces/ --hz 100 --model-server http://127.0.0.1:8000/metrics
    """
    import os

    from .collectors import sidecar

    options = _sampler_options(hz, model_servers, no_gpu, no_per_core, proc_root,
                               _level() == VERBOSE)
    sampler = sidecar.collect(out, options, pid=pid, duration=duration, say=_say)
    _say(f"agentscope: {sampler.samples} samples in {sampler.rounds} rounds "
         f"(pid {os.getpid()})")


@main.command(context_settings={"ignore_unknown_options": True,
                                "allow_interspersed_args": False})
@click.option("--trace-dir", type=click.Path(file_okay=False, path_type=str), default="traces",
              show_default=True, help="Where the program's spans and the samples go.")
@_collect_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(trace_dir: str, command: tuple, hz: float, model_servers: tuple, no_gpu: bool,
        no_per_core: bool, proc_root: str) -> None:
    """Run COMMAND with tracing configured and its counters sampled.

    The program finds the trace directory through AGENTSCOPE_TRACE_DIR (agentscope.init()
    needs no argument), so an instrumented program needs no change. Signals (SIGINT, SIGTERM,
    SIGHUP, SIGQUIT, SIGUSR1/2) are forwarded to it (a Ctrl-C at the terminal reaches it
    directly, once); the exit code is its exit code (128 + N if it was killed by signal N);
    the samples are flushed before exiting.

    \b
    Examples:
        agentscope run -- python my_agent.py --tasks 10
        agentscope run --trace-dir traces/ --hz 100 -- ./run_agents.sh
        agentscope analyze traces/
    """
    from .collectors import sidecar

    options = _sampler_options(hz, model_servers, no_gpu, no_per_core, proc_root,
                               _level() == VERBOSE)
    sys.exit(sidecar.run_command(command, trace_dir, options, _say, _error))


@main.command()
@_trace_dir
@click.option("--port", type=click.IntRange(0, 65535), default=9464, show_default=True,
              help="Port of the metrics endpoint (0: any free port).")
@click.option("--address", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0: every interface).")
@_db_option
@click.option("--refresh", type=float, default=15.0, show_default=True,
              help="Seconds between loads of what was appended to SOURCE, or reads of a "
                   "ClickHouse SOURCE's window when it changed (at a scrape).")
@_window
@_verbosity()
def serve(trace_dir: str, port: int, address: str, db: "str | None", refresh: float) -> None:
    """Expose SOURCE's analysis as Prometheus metrics on http://ADDRESS:PORT/metrics.

    Computed at scrape time, at most every --refresh seconds: new lines in a trace directory
    (a live `agentscope run` writing into it) are loaded and their traces analysed again; a
    ClickHouse SOURCE's window is read again when its rows changed (a window given as a
    duration, --since 1h, moves with the clock). Metric names: docs/grafana.md. Stops on
    Ctrl-C or SIGTERM.

    \b
    Examples:
        agentscope serve traces/                      # scrape localhost:9464/metrics
        agentscope serve traces/ --address 0.0.0.0 --port 9464
        agentscope serve 'clickhouse://reader@ch/otel?table=otel_traces' --since 1h --refresh 60
    """
    from .exporters.prometheus import check_source
    from .exporters.prometheus import serve as serve_metrics

    trace_dir = _windowed(trace_dir)
    try:
        check_source(trace_dir, db)
    except ValueError as e:
        raise click.UsageError(str(e)) from None

    try:
        serve_metrics(trace_dir, db, refresh, port, address, ready=lambda url: _say(
            f"agentscope: serving metrics of {trace_dir} on {url}"))
    except (FileNotFoundError, NotADirectoryError) as e:
        raise click.UsageError(inert(e)) from None


@main.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=str), required=True,
              help="Trace directory to write the received spans into.")
@click.option("--address", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0: every interface).")
@click.option("--port", type=click.IntRange(0, 65535), default=4318, show_default=True,
              help="OTLP/HTTP port (0: any free port).")
@click.option("--grpc-port", type=click.IntRange(0, 65535), default=None,
              help="Also take OTLP/gRPC on this port (usually 4317; needs grpcio).")
@click.option("--max-body", type=click.IntRange(min=1), default=MAX_BODY,
              show_default=True,
              help="Largest request accepted, in bytes (as sent, and decompressed).")
@_verbosity()
def receive(out: str, address: str, port: int, grpc_port: "int | None", max_body: int) -> None:
    """Receive OTLP traces (what OpenTelemetry exporters send) into span files in OUT.

    Takes POST /v1/traces (protobuf or JSON, gzip or not) and, with --grpc-port, OTLP/gRPC.
    A request is answered only once its spans are written and fsync'ed to
    OUT/spans-<host>-<pid>-<ms>.jsonl: an acknowledged span is never lost. Stops on Ctrl-C or
    SIGTERM. Details: docs/otlp.md.

    \b
    Examples:
        agentscope receive --out traces/
        OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 python my_agent.py
        agentscope analyze traces/
    """
    from .collectors import receiver as rx

    def ready(r) -> None:
        grpc = f" and OTLP/gRPC on {r.address}:{r.grpc_port}" if r.grpc_port is not None else ""
        _say(f"agentscope: receiving OTLP traces on {r.url}{grpc}, writing into {out} "
             "(Ctrl-C or SIGTERM to stop)")

    try:
        r = rx.serve(out, address=address, port=port, grpc_port=grpc_port, max_body=max_body,
                     ready=ready)
    except ValueError as e:
        raise click.UsageError(inert(e)) from None
    except OSError as e:
        _fail(f"cannot receive on {address}:{port}: {e.strerror or e}")
    _say(f"agentscope: {r.requests} requests decoded, {r.bad_requests} of them not decodable "
         f"(400); {r.spans_accepted} spans written, {r.spans_rejected} spans rejected (named "
         f"in the partial-success answers); files: "
         f"{', '.join(str(p) for p in r.file.paths) or 'none'}")


@main.group()
def export() -> None:
    """Export for other tools: Grafana dashboards, OTLP metrics, OTLP traces with verdicts.

    \b
    Examples:
        agentscope export grafana --out grafana/
        agentscope export otlp-metrics traces/ --endpoint http://localhost:4318/v1/metrics
        agentscope export otlp traces/ --out spans.otlp.jsonl.gz
    """


@export.command("grafana")
@click.option("--out", type=click.Path(file_okay=False, path_type=str), required=True,
              help="Folder to write dashboards/*.json and provisioning/dashboards/*.yaml into.")
@_verbosity()
def export_grafana(out: str) -> None:
    """Write Grafana dashboards over `agentscope serve`'s metrics, and a provisioning file.

    The fleet overview (where the critical-path time goes, GPU idle and why, orchestration
    share, tasks per hour, tail latency by lane) and a hosts-and-GPUs view. Each panel
    queries the Prometheus data source picked by the dashboard's `datasource` variable,
    filtered by its `service` and `lane` (task panels) and `host` (host and GPU panels)
    variables. Wiring it up: docs/grafana.md."""
    from .exporters.grafana import write

    for path in write(out):
        click.echo(inert(path))


@export.command("otlp-metrics")
@_trace_dir
@click.option("--endpoint", default=None, metavar="URL",
              help="OTLP/HTTP metrics endpoint [default: $OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, "
                   "else $OTEL_EXPORTER_OTLP_ENDPOINT/v1/metrics, else "
                   "http://localhost:4318/v1/metrics].")
@click.option("--header", "headers", multiple=True, metavar="KEY=VALUE",
              help="An HTTP header to send (repeatable), e.g. an API key.")
@_db_option
@_verbosity()
def export_otlp_metrics(trace_dir: str, endpoint: "str | None", headers: tuple,
                        db: "str | None") -> None:
    """Analyse SOURCE and send its metrics once over OTLP/HTTP (protobuf).

    The same values as `agentscope serve`, under OpenTelemetry names (agentscope.tasks,
    agentscope.task.duration, agentscope.critical_path, system.cpu.utilization, ...)."""
    from .exporters.otlp_metrics import default_endpoint, export as export_metrics

    extra = _headers(headers)
    analysis = _analysis(trace_dir, db)
    endpoint = endpoint or default_endpoint()
    try:
        _, metrics, points, status = export_metrics(analysis, endpoint, headers=extra)
    except Exception as e:
        _error(f"agentscope export otlp-metrics: could not send to {endpoint}: {e}")
        sys.exit(1)
    _say(f"sent {metrics} metrics ({points} points) to {endpoint}: HTTP {status}")


@export.command("clickhouse")
@_trace_dir
@click.option("--to", "url", required=True, metavar="URL",
              callback=lambda ctx, param, value: _source(ctx, param, value, url_only=True),
              help="chdb://PATH (in-process) or clickhouse://[USER[:PASSWORD]@]HOST[:PORT]/DB; "
                   "?table= names the spans table [otel_traces], ?samples= the samples table "
                   "[agentscope_samples]. A password in the URL is better given in "
                   "CLICKHOUSE_PASSWORD.")
@_db_option
@_verbosity()
def export_clickhouse(trace_dir: str, url: str, db: "str | None") -> None:
    """Write SOURCE's spans into ClickHouse, as the OpenTelemetry Collector's ClickHouse
    exporter does (its otel_traces schema), and its counter samples into agentscope's samples
    table (tables made where missing).

    `agentscope analyze` reads them back from the same URL: the same analysis
    (docs/clickhouse.md). Needs the [clickhouse] extra.

    \b
    Examples:
        agentscope export clickhouse traces/ --to 'chdb:///data/ch?table=otel_traces'
        agentscope analyze 'chdb:///data/ch?table=otel_traces'
    """
    from .exporters import clickhouse as clickhouse_out

    analysis = _analysis(trace_dir, db)
    done = clickhouse_out.export(analysis, url)
    _say(inert(f"wrote {done.spans} spans and {done.samples} samples to {done.target}"))
    sys.exit(1 if analysis.problems else 0)


@export.command("otlp")
@_trace_dir
@_window
@click.option("--out", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="File to write, one OTLP/JSON request a line (the OpenTelemetry Collector "
                   "file exporter's format); gzip'ed when it ends in .gz.")
@click.option("--endpoint", default=None, metavar="URL",
              help="OTLP/HTTP endpoint to POST the requests to as JSON, e.g. "
                   "http://localhost:4318 (/v1/traces is added to a URL with no path).")
@click.option("--header", "headers", multiple=True, metavar="KEY=VALUE",
              help="An HTTP header to send with --endpoint (repeatable), e.g. an API key.")
@_db_option
@click.option("--batch", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Spans per request (per line) at most.")
@_verbosity()
def export_otlp(trace_dir: str, out: "str | None", endpoint: "str | None", headers: tuple,
                db: "str | None", batch: int) -> None:
    """Analyse SOURCE and write every span as OTLP/JSON traces, the analysis on them.

    Each span as stored (attributes, events, links, status, the resource accounting as
    agentscope.* attributes), plus agentscope.analysis.* attributes: on the spans of a
    critical path their seconds on it and class, on each task's root the bottleneck, its
    confidence and the shares. `agentscope analyze` loads the file again as it was.

    \b
    Examples:
        agentscope export otlp traces/ --out spans.otlp.jsonl.gz
        agentscope export otlp traces/ --endpoint http://localhost:4318

    Exit code 1 if some input could not be loaded (the rest is exported) or the endpoint
    could not be reached.
    """
    from .exporters import otlp_traces

    if (out is None) == (endpoint is None):
        raise click.UsageError("give one of --out FILE or --endpoint URL")
    if headers and endpoint is None:
        raise click.UsageError("--header goes with --endpoint")
    extra = _headers(headers)
    analysis = _analysis(trace_dir, db)
    try:
        if out is not None:
            done = otlp_traces.write(out, analysis, batch)
        else:
            done = otlp_traces.send(endpoint, analysis, batch, headers=extra)
    except otlp_traces.SendError as e:
        _fail(f"export otlp: {e}")
    except OSError as e:
        _fail(f"export otlp: could not write {out}: {e}")
    verb = "wrote" if out is not None else "sent"
    _say(f"{verb} {done.spans} spans in {done.requests} requests to {done.target}"
         + (f"; the receiver rejected {done.rejected}" if done.rejected else ""))
    sys.exit(1 if analysis.problems or done.rejected else 0)


@main.group()
def scenarios() -> None:
    """Labelled scenarios: agents whose bottleneck is known, to check the verdicts.

    \b
    Examples:
        agentscope scenarios list
        agentscope scenarios run io-db --out runs/io-db
        agentscope scenarios run all --out runs/ --load 2
        agentscope scenarios score runs/
    """


@scenarios.command("list")
@_verbosity()
def scenarios_list() -> None:
    """Name every scenario, the class its tasks are built to have, and what it does."""
    from .scenarios import GPU_MISSING, catalogue

    for s in catalogue().values():
        click.echo(f"{s.name:<20} {s.expect:<7} {s.about}")
    click.echo(f"\n{GPU_MISSING}")


@scenarios.command("run")
@click.argument("name")
@click.option("--out", type=click.Path(file_okay=False, path_type=str), required=True,
              help="Trace directory to record into (with NAME all: one folder per scenario "
                   "below it).")
@click.option("--tasks", type=click.IntRange(min=1), default=4, show_default=True,
              help="Tasks per scenario (times the load level for most).")
@click.option("--load", type=click.IntRange(min=1), default=1, show_default=True,
              help="Load level: how many tasks run at once, as a multiple of the "
                   "scenario's own.")
@click.option("--hz", type=click.FloatRange(min=0, min_open=True), default=10.0,
              show_default=True, help="Counter samples per second.")
@_verbosity()
def scenarios_run(name: str, out: str, tasks: int, load: int, hz: float) -> None:
    """Record scenario NAME (or all) with counters on and its ground truth beside it.

    Exits 0 when every scenario ran; a scenario this machine cannot produce (e.g. no disk
    under --out to page from) is skipped with the reason."""
    from .scenarios import record

    try:
        failed = record(name, out, tasks=tasks, load=load, hz=hz, say=_say)
    except ValueError as e:
        raise click.UsageError(inert(e)) from None
    if failed:
        click.echo(f"failed: {', '.join(failed)}", err=True)
        sys.exit(1)


@scenarios.command("score")
@_trace_dir
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@_verbosity()
def scenarios_score(trace_dir: str, fmt: str) -> None:
    """Analyse SOURCE and score the verdicts against the ground truth recorded there."""
    from .scenarios import describe, score

    try:
        got = score(trace_dir)
    except (ValueError, FileNotFoundError, NotADirectoryError) as e:
        raise click.UsageError(inert(e)) from None
    if fmt == "json":
        click.echo(_json(got.to_json(), indent=2))
    else:
        click.echo(inert_lines(describe(got)), nl=False)


if __name__ == "__main__":  # pragma: no cover
    main()
